//! `add_layer_norm`: a residual add followed by a layer norm over the last
//! axis, with both results (a fused op):
//!
//! ```text
//! %s, %y = add_layer_norm %x, %r, %w, %b {eps = 1e-5} : f32[1, seq, 64], f32[1, seq, 64]
//! %s, %y = add_layer_norm %x, %r, %w {eps = 1e-5} : f32[1, seq, 64], f32[1, seq, 64]
//! ```
//!
//! `s = x + r` and `y = layer_norm(s, w, b)` over the last axis, as
//! [`layer_norm`](crate::ops::layer_norm) with `axis = -1` (ONNX
//! `LayerNormalization`): `y = (s − mean) · 1/sqrt(var + eps) · w + b`,
//! mean and biased variance over the last axis. The bias operand is
//! optional (3 or 4 operands; no bias means `b = 0`). `eps` defaults to
//! `1e-5` and is always printed.
//!
//! Shapes: `x` and `r` have the same type (no broadcasting), a float tensor
//! of rank >= 1, `[..., hidden]`; `w` and `b` are `[hidden]` with the same
//! dtype. Both results have `x`'s type.
//!
//! Evaluation computes `s` in `f32` and rounds it to `x`'s dtype, then
//! normalises that rounded `s` in `f32` (as the decomposed `Add` →
//! `LayerNormalization` does, with `stash_type = 1`), rounding `y` once.

use crate::attr::{Attr, Attrs};
use crate::ops::binary::{Binary, BinaryKind};
use crate::ops::constant::f32_as_f64;
use crate::ops::fused_util::{check_channel_param, check_hidden_operand, infer_on_tensors};
use crate::ops::layer_norm::LayerNorm;
use crate::ops::{bail, check_arity, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AddLayerNorm {
    pub eps: f32,
}

impl Default for AddLayerNorm {
    fn default() -> AddLayerNorm {
        AddLayerNorm { eps: 1e-5 }
    }
}

impl OpDef for AddLayerNorm {
    fn mnemonic(&self) -> &'static str {
        "add_layer_norm"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("eps", Attr::Float(f32_as_f64(self.eps)))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        check_arity("add_layer_norm", inputs.len(), 3, 4)?;
        let (x, r) = (inputs[0], inputs[1]);
        check_hidden_operand("add_layer_norm", &x.ty)?;
        if r.ty != x.ty {
            bail!(
                "`add_layer_norm` residual must have the type of x: {} vs {}",
                r.ty,
                x.ty
            );
        }
        for (what, p) in ["weight", "bias"].iter().zip(&inputs[2..]) {
            check_channel_param("add_layer_norm", what, &x.ty, &p.ty)?;
        }
        Ok(vec![Fact::new(x.ty.clone()), Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], ctx: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        // Exactly the decomposed graph: the sum rounded to x's dtype, then
        // `layer_norm` of it over the last axis.
        let s = Binary::new(BinaryKind::Add)
            .eval(&inputs[..2], ctx)?
            .remove(0);
        let mut norm_operands = vec![&s];
        norm_operands.extend_from_slice(&inputs[2..]);
        let norm = LayerNorm {
            axis: -1,
            eps: self.eps,
        };
        let y = norm.eval(&norm_operands, ctx)?.remove(0);
        Ok(vec![s, y])
    }
}

impl OpBuild for AddLayerNorm {
    const MNEMONICS: &'static [&'static str] = &["add_layer_norm"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(AddLayerNorm {
            eps: attrs.float_or("eps", 1e-5)? as f32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::binary::BinaryKind::{Add, Div, Mul, Sub};
    use crate::ops::fused_util::testing::*;
    use crate::ops::layer_norm::LayerNorm;
    use crate::ops::reduce::{Reduce, ReduceKind};
    use crate::ops::test_util::*;
    use crate::ops::unary::UnaryKind::Sqrt;

    /// `add` then `layer_norm {axis = -1}`.
    fn decomposed(x: &Tensor, r: &Tensor, w: &Tensor, b: Option<&Tensor>, eps: f32) -> Tensor {
        let s = bin(Add, x, r);
        let op = LayerNorm { axis: -1, eps };
        match b {
            Some(b) => ev(op, &[&s, w, b]),
            None => ev(op, &[&s, w]),
        }
    }

    /// The same from reductions (the pre-opset-17 export):
    /// `(s - mean) / sqrt(mean((s - mean)²) + eps) * w + b`.
    fn from_reductions(s: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Tensor {
        let mean = |t: &Tensor| ev(Reduce::new(ReduceKind::Mean, Some(vec![-1]), true), &[t]);
        let c = bin(Sub, s, &mean(s));
        let var = mean(&bin(Mul, &c, &c));
        let n = bin(Div, &c, &un(Sqrt, &bin(Add, &var, &scalar(eps))));
        bin(Add, &bin(Mul, &n, w), b)
    }

    #[test]
    fn matches_decomposed_graph() {
        let mut rng = Lcg::new(21);
        let x = rng.tensor(&[2, 3, 40], 2.0);
        let r = rng.tensor(&[2, 3, 40], 2.0);
        let w = rng.tensor(&[40], 1.0);
        let b = rng.tensor(&[40], 1.0);
        let op = AddLayerNorm::default();
        let out = eval_checked(&op, &[&x, &r, &w, &b]);
        assert_eq!(out[0], bin(Add, &x, &r));
        assert_close(&out[1], &decomposed(&x, &r, &w, Some(&b), 1e-5), 1e-5);
        assert_close(&out[1], &from_reductions(&out[0], &w, &b, 1e-5), 1e-5);
        let op = AddLayerNorm { eps: 1e-6 };
        let out = eval_checked(&op, &[&x, &r, &w]);
        assert_close(&out[1], &decomposed(&x, &r, &w, None, 1e-6), 1e-5);
    }

    #[test]
    fn half_precision_normalises_the_rounded_sum() {
        let mut rng = Lcg::new(22);
        let x = rng.tensor(&[3, 24], 2.0).cast(DType::F16);
        let r = rng.tensor(&[3, 24], 2.0).cast(DType::F16);
        let w = rng.tensor(&[24], 1.0).cast(DType::F16);
        let out = eval_checked(&AddLayerNorm::default(), &[&x, &r, &w]);
        assert_eq!(out[0], bin(Add, &x, &r));
        let f = |t: &Tensor| t.cast(DType::F32);
        let want = ev(LayerNorm::default(), &[&f(&out[0]), &f(&w)]);
        assert_close(&out[1], &want.cast(DType::F16), 1e-3);
    }

    #[test]
    fn infer_checks() {
        let op = AddLayerNorm::default();
        let x = fact(DType::F16, vec![sym("batch"), sym("seq"), d(64)]);
        let w = fact(DType::F16, vec![d(64)]);
        let out = op.infer(&[&x, &x, &w, &w]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].ty.to_string(), "f16[batch, seq, 64]");
        assert_eq!(op.infer(&[&x, &x, &w]).unwrap().len(), 2);
        let b2 = fact(DType::F16, vec![d(1), d(64)]);
        let e = op.infer(&[&x, &x, &w, &b2]).unwrap_err();
        assert!(e.0.contains("bias"), "{e}");
        let r = fact(DType::F16, vec![d(1), sym("seq"), d(64)]);
        assert!(op.infer(&[&x, &r, &w]).is_err());
        assert!(op.infer(&[&x, &x]).is_err());
        assert!(op.infer(&[&x, &x, &w, &w, &w]).is_err());
        let a = Tensor::from_f32(vec![2, 2], vec![1.0; 4]);
        let w = Tensor::from_f32(vec![3], vec![1.0; 3]);
        assert!(eval(&op, &[&a, &a, &w]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(AddLayerNorm::default(), &[]);
        assert_round_trip(AddLayerNorm { eps: 1e-12 }, &[]);
    }
}
