//! `rms_norm`: `%y = rms_norm %x, %w {eps = 1e-6, offset = 1.0}`, root mean
//! square normalisation over the last axis with a per-channel scale (a fused
//! op; ONNX has `RMSNormalization` only from opset 23).
//!
//! `y = x / sqrt(mean(x², last axis) + eps) · (w + offset)`: the graph
//! exporters write for Llama/Qwen/Mistral's `RMSNorm`
//! (`Pow 2 → ReduceMean(-1, keepdims) → Add eps → Sqrt → Reciprocal → Mul x
//! → Mul w`, or `Div` in place of `Reciprocal`/`Mul`). `offset = 1.0`
//! expresses Gemma's `x̂ · (1 + w)`; `offset` is printed only when non-zero,
//! `eps` (default `1e-6`) always.
//!
//! Shapes: `x` is a float tensor of rank >= 1, `[..., hidden]`, any dims
//! symbolic; `w` is `[hidden]`, the last dim of `x`, with `x`'s dtype. The
//! result has `x`'s type.
//!
//! Computed in `f32` whatever the float dtype and rounded once to `x`'s
//! dtype at the end (HF computes the mean in `f32` too but rounds the
//! normalised value to the input dtype before the weight multiplication;
//! the difference is within one rounding of that dtype).

use crate::attr::{Attr, Attrs};
use crate::ops::constant::f32_as_f64;
use crate::ops::fused_util::{check_channel_param, check_hidden_operand, infer_on_tensors};
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNorm {
    pub eps: f32,
    pub offset: f32,
}

impl Default for RmsNorm {
    fn default() -> RmsNorm {
        RmsNorm {
            eps: 1e-6,
            offset: 0.0,
        }
    }
}

/// The `eps` and (when non-zero) `offset` attributes.
pub(crate) fn norm_attrs(eps: f32, offset: f32) -> Vec<(&'static str, Attr)> {
    let mut a = vec![("eps", Attr::Float(f32_as_f64(eps)))];
    if offset != 0.0 {
        a.push(("offset", Attr::Float(f32_as_f64(offset))));
    }
    a
}

/// Normalises each row of `hidden = w.len()` values of `v` in place:
/// `v · 1/sqrt(mean(v²) + eps) · (w + offset)`.
pub(crate) fn rms_norm_rows(v: &mut [f32], w: &[f32], eps: f32, offset: f32) {
    let n = w.len();
    for row in v.chunks_mut(n.max(1)) {
        let ms = row.iter().map(|a| a * a).sum::<f32>() / n as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for (a, wk) in row.iter_mut().zip(w) {
            *a = *a * inv * (wk + offset);
        }
    }
}

impl OpDef for RmsNorm {
    fn mnemonic(&self) -> &'static str {
        "rms_norm"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        norm_attrs(self.eps, self.offset)
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x, w] = inputs else {
            bail!(
                "`rms_norm` takes 2 operands (x, weight), got {}",
                inputs.len()
            );
        };
        check_hidden_operand("rms_norm", &x.ty)?;
        check_channel_param("rms_norm", "weight", &x.ty, &w.ty)?;
        Ok(vec![Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let (x, w) = (inputs[0], inputs[1]);
        let mut v = x.to_f32_vec();
        rms_norm_rows(&mut v, &w.to_f32_vec(), self.eps, self.offset);
        Ok(vec![Tensor::from_f32(x.shape().to_vec(), v).cast(x.dtype())])
    }
}

impl OpBuild for RmsNorm {
    const MNEMONICS: &'static [&'static str] = &["rms_norm"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(RmsNorm {
            eps: attrs.float_or("eps", 1e-6)? as f32,
            offset: attrs.float_or("offset", 0.0)? as f32,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::binary::BinaryKind::{Add, Mul};
    use crate::ops::fused_util::testing::*;
    use crate::ops::reduce::{Reduce, ReduceKind};
    use crate::ops::test_util::*;
    use crate::ops::unary::UnaryKind::{Reciprocal, Sqrt};

    /// `x * reciprocal(sqrt(reduce_mean(x * x, [-1]) + eps)) * (w + offset)`
    /// with the primitive ops.
    pub(crate) fn decomposed(x: &Tensor, w: &Tensor, eps: f32, offset: f32) -> Tensor {
        let sq = bin(Mul, x, x);
        let ms = ev(Reduce::new(ReduceKind::Mean, Some(vec![-1]), true), &[&sq]);
        let inv = un(Reciprocal, &un(Sqrt, &bin(Add, &ms, &scalar(eps))));
        let w = bin(Add, w, &scalar(offset));
        bin(Mul, &bin(Mul, x, &inv), &w)
    }

    #[test]
    fn matches_decomposed_graph() {
        let mut rng = Lcg::new(1);
        let x = rng.tensor(&[2, 5, 32], 3.0);
        let w = rng.tensor(&[32], 1.0);
        let op = RmsNorm::default();
        let r = eval_checked(&op, &[&x, &w]);
        assert_close(&r[0], &decomposed(&x, &w, 1e-6, 0.0), 1e-5);
        // Gemma's `(1 + w)`, a larger eps, and a rank-1 operand.
        let op = RmsNorm {
            eps: 1e-5,
            offset: 1.0,
        };
        let r = eval_checked(&op, &[&x, &w]);
        assert_close(&r[0], &decomposed(&x, &w, 1e-5, 1.0), 1e-5);
        let x1 = rng.tensor(&[32], 2.0);
        let r = eval_checked(&op, &[&x1, &w]);
        assert_close(&r[0], &decomposed(&x1, &w, 1e-5, 1.0), 1e-5);
    }

    #[test]
    fn half_precision_computes_in_f32() {
        let mut rng = Lcg::new(2);
        let x = rng.tensor(&[3, 16], 2.0).cast(DType::BF16);
        let w = rng.tensor(&[16], 1.0).cast(DType::BF16);
        let r = eval_checked(&RmsNorm::default(), &[&x, &w]);
        assert_eq!(r[0].dtype(), DType::BF16);
        let want = decomposed(&x.cast(DType::F32), &w.cast(DType::F32), 1e-6, 0.0);
        assert_close(&r[0], &want.cast(DType::BF16), 1e-2);
    }

    #[test]
    fn infer_checks() {
        let op = RmsNorm::default();
        let x = fact(DType::F16, vec![d(1), sym("seq"), d(64)]);
        let w = fact(DType::F16, vec![d(64)]);
        let r = op.infer(&[&x, &w]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f16[1, seq, 64]");
        // A symbolic hidden size matches itself.
        let xs = fact(DType::F32, vec![sym("seq"), sym("hidden")]);
        let ws = fact(DType::F32, vec![sym("hidden")]);
        assert_eq!(op.infer(&[&xs, &ws]).unwrap()[0].ty, xs.ty);
        let w32 = fact(DType::F32, vec![d(64)]);
        let e = op.infer(&[&x, &w32]).unwrap_err();
        assert!(e.0.contains("f32[64] vs f16[1, seq, 64]"), "{e}");
        for bad in [vec![d(32)], vec![d(1), d(64)], vec![]] {
            let e = op.infer(&[&x, &fact(DType::F16, bad)]).unwrap_err();
            assert!(e.0.contains("[hidden]"), "{e}");
        }
        let i = fact(DType::I64, vec![d(64)]);
        assert!(op.infer(&[&i, &i]).is_err());
        let s = fact(DType::F16, vec![]);
        assert!(op.infer(&[&s, &s]).is_err());
        assert!(op.infer(&[&x]).is_err());
        // Evaluation rejects what inference rejects, without panicking.
        let xt = Tensor::from_f32(vec![2, 3], vec![1.0; 6]);
        let wt = Tensor::from_f32(vec![2], vec![1.0; 2]);
        assert!(eval(&op, &[&xt, &wt]).is_err());
        assert!(eval(&op, &[&xt]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(RmsNorm::default(), &[]);
        let gemma = RmsNorm {
            eps: 1e-6,
            offset: 1.0,
        };
        assert_round_trip(gemma, &[]);
        assert_eq!(RmsNorm::default().attrs().len(), 1);
        assert_eq!(gemma.attrs()[1], ("offset", Attr::Float(1.0)));
    }
}
