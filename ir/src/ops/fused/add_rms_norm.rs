//! `add_rms_norm`: a residual add followed by an RMS norm, with both
//! results (a fused op):
//!
//! ```text
//! %s, %y = add_rms_norm %x, %r, %w {eps = 1e-6} : f32[1, seq, 64], f32[1, seq, 64]
//! ```
//!
//! `s = x + r` (the residual stream, which the next block's residual add
//! reads) and `y = rms_norm(s, w)`, i.e.
//! `y = s / sqrt(mean(s², last axis) + eps) · (w + offset)` exactly as
//! [`rms_norm`](crate::ops::rms_norm) defines it (`eps` default `1e-6`, printed
//! always; `offset` default `0.0`, printed only when non-zero).
//!
//! Shapes: `x` and `r` have the same type (no broadcasting), a float tensor
//! of rank >= 1, `[..., hidden]`; `w` is `[hidden]` with the same dtype.
//! Both results have `x`'s type.
//!
//! Evaluation computes `s` in `f32` and rounds it to `x`'s dtype, then
//! normalises that rounded `s` in `f32` (as the decomposed graph does: its
//! `Add` result is a tensor of `x`'s dtype), rounding `y` once at the end.

use crate::attr::{Attr, Attrs};
use crate::ops::binary::{Binary, BinaryKind};
use crate::ops::fused_util::{check_channel_param, check_hidden_operand, infer_on_tensors};
use crate::ops::rms_norm::{norm_attrs, rms_norm_rows};
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AddRmsNorm {
    pub eps: f32,
    pub offset: f32,
}

impl Default for AddRmsNorm {
    fn default() -> AddRmsNorm {
        AddRmsNorm {
            eps: 1e-6,
            offset: 0.0,
        }
    }
}

impl OpDef for AddRmsNorm {
    fn mnemonic(&self) -> &'static str {
        "add_rms_norm"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        norm_attrs(self.eps, self.offset)
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x, r, w] = inputs else {
            bail!(
                "`add_rms_norm` takes 3 operands (x, residual, weight), got {}",
                inputs.len()
            );
        };
        check_hidden_operand("add_rms_norm", &x.ty)?;
        if r.ty != x.ty {
            bail!(
                "`add_rms_norm` residual must have the type of x: {} vs {}",
                r.ty,
                x.ty
            );
        }
        check_channel_param("add_rms_norm", "weight", &x.ty, &w.ty)?;
        Ok(vec![Fact::new(x.ty.clone()), Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], ctx: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let (x, w) = (inputs[0], inputs[2]);
        let shape = x.shape().to_vec();
        // The sum rounded to x's dtype, as the decomposed graph computes it.
        let s = Binary::new(BinaryKind::Add)
            .eval(&inputs[..2], ctx)?
            .remove(0);
        let mut v = s.to_f32_vec();
        rms_norm_rows(&mut v, &w.to_f32_vec(), self.eps, self.offset);
        let y = Tensor::from_f32(shape, v).cast(x.dtype());
        Ok(vec![s, y])
    }
}

impl OpBuild for AddRmsNorm {
    const MNEMONICS: &'static [&'static str] = &["add_rms_norm"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(AddRmsNorm {
            eps: attrs.float_or("eps", 1e-6)? as f32,
            offset: attrs.float_or("offset", 0.0)? as f32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::binary::BinaryKind::Add;
    use crate::ops::fused_util::testing::*;
    use crate::ops::rms_norm::tests::decomposed;
    use crate::ops::test_util::*;

    #[test]
    fn matches_decomposed_graph() {
        let mut rng = Lcg::new(11);
        let x = rng.tensor(&[1, 7, 48], 2.0);
        let r = rng.tensor(&[1, 7, 48], 2.0);
        let w = rng.tensor(&[48], 1.0);
        for (eps, offset) in [(1e-6, 0.0), (1e-5, 1.0)] {
            let op = AddRmsNorm { eps, offset };
            let out = eval_checked(&op, &[&x, &r, &w]);
            let s = bin(Add, &x, &r);
            assert_eq!(out[0], s);
            assert_close(&out[1], &decomposed(&s, &w, eps, offset), 1e-5);
        }
    }

    #[test]
    fn half_precision_normalises_the_rounded_sum() {
        let mut rng = Lcg::new(12);
        let x = rng.tensor(&[4, 16], 2.0).cast(DType::F16);
        let r = rng.tensor(&[4, 16], 2.0).cast(DType::F16);
        let w = rng.tensor(&[16], 1.0).cast(DType::F16);
        let out = eval_checked(&AddRmsNorm::default(), &[&x, &r, &w]);
        let s = bin(Add, &x, &r);
        assert_eq!(out[0], s);
        assert_eq!(out[1].dtype(), DType::F16);
        let want = decomposed(&s.cast(DType::F32), &w.cast(DType::F32), 1e-6, 0.0);
        assert_close(&out[1], &want.cast(DType::F16), 1e-3);
    }

    #[test]
    fn infer_checks() {
        let op = AddRmsNorm::default();
        let x = fact(DType::F32, vec![d(1), sym("seq"), d(64)]);
        let w = fact(DType::F32, vec![d(64)]);
        let out = op.infer(&[&x, &x, &w]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].ty.to_string(), "f32[1, seq, 64]");
        assert_eq!(out[1].ty, out[0].ty);
        // No broadcasting of the residual.
        let r = fact(DType::F32, vec![d(1), d(1), d(64)]);
        let e = op.infer(&[&x, &r, &w]).unwrap_err();
        assert!(e.0.contains("residual"), "{e}");
        let r16 = fact(DType::F16, vec![d(1), sym("seq"), d(64)]);
        assert!(op.infer(&[&x, &r16, &w]).is_err());
        let w2 = fact(DType::F32, vec![d(32)]);
        assert!(op.infer(&[&x, &x, &w2]).is_err());
        assert!(op.infer(&[&x, &x]).is_err());
        let a = Tensor::from_f32(vec![2, 2], vec![1.0; 4]);
        let b = Tensor::from_f32(vec![4], vec![1.0; 4]);
        let w = Tensor::from_f32(vec![2], vec![1.0; 2]);
        assert!(eval(&op, &[&a, &b, &w]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(AddRmsNorm::default(), &[]);
        assert_round_trip(
            AddRmsNorm {
                eps: 1e-5,
                offset: 1.0,
            },
            &[],
        );
    }

    #[test]
    fn text_form() {
        let src = "module @m {
  graph @g(%x: f32[1, seq, 64], %r: f32[1, seq, 64], %w: f32[64]) -> (f32[1, seq, 64], f32[1, seq, 64]) {
    %s, %y = add_rms_norm %x, %r, %w {eps = 1e-6} : f32[1, seq, 64], f32[1, seq, 64]
    return %s, %y
  }
}
";
        let m = crate::text::parse_module(src).unwrap();
        crate::verify_module(&m).unwrap();
        assert_eq!(crate::text::print_module(&m), src);
    }
}
