//! `softcap`: `%y = softcap %x {cap = 30.0}`, logit soft-capping,
//! element-wise: `y = cap · tanh(x / cap)`, which keeps `y` within
//! `(-cap, cap)` and is close to `x` where `|x| ≪ cap` (Gemma 2's final
//! logits; its attention scores use `attention`'s own `softcap`). A fused
//! op: the fusion pass introduces it for `Div → Tanh → Mul` with one
//! constant, as PyTorch exports `tanh(x / cap) * cap`. No ONNX op mirrors it.
//!
//! `cap` must be finite and positive. The operand is a float tensor of any
//! shape; the result has its type. The math is done in `f32` and rounded
//! once to the operand's dtype.

use crate::attr::{Attr, Attrs};
use crate::ops::constant::f32_as_f64;
use crate::ops::fused_util::infer_on_tensors;
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Softcap {
    pub cap: f32,
}

impl Softcap {
    /// Soft-capping of one value.
    pub fn apply(self, x: f32) -> f32 {
        self.cap * (x / self.cap).tanh()
    }
}

impl OpDef for Softcap {
    fn mnemonic(&self) -> &'static str {
        "softcap"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("cap", Attr::Float(f32_as_f64(self.cap)))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`softcap` takes 1 operand, got {}", inputs.len());
        };
        if !(self.cap.is_finite() && self.cap > 0.0) {
            bail!("`softcap` cap must be finite and > 0, got {}", self.cap);
        }
        if !x.ty.dtype.is_float() {
            bail!("`softcap` needs a float operand, got {}", x.ty);
        }
        Ok(vec![Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let x = inputs[0];
        let v = x.to_f32_vec().into_iter().map(|a| self.apply(a)).collect();
        Ok(vec![Tensor::from_f32(x.shape().to_vec(), v).cast(x.dtype())])
    }
}

impl OpBuild for Softcap {
    const MNEMONICS: &'static [&'static str] = &["softcap"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Softcap {
            cap: attrs.float("cap")? as f32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::binary::BinaryKind::{Div, Mul};
    use crate::ops::fused_util::testing::*;
    use crate::ops::test_util::*;
    use crate::ops::unary::UnaryKind::Tanh;

    #[test]
    fn matches_the_decomposed_graph() {
        let mut rng = Lcg::new(11);
        let x = rng.tensor(&[2, 5, 64], 40.0);
        let op = Softcap { cap: 30.0 };
        let r = eval_checked(&op, &[&x]);
        let want = bin(Mul, &un(Tanh, &bin(Div, &x, &scalar(30.0))), &scalar(30.0));
        assert_close(&r[0], &want, 1e-6);
        assert!(r[0].to_f32_vec().iter().all(|v| v.abs() < 30.0));
    }

    #[test]
    fn infer_checks() {
        let x = fact(DType::F16, vec![d(1), sym("seq"), d(512)]);
        let op = Softcap { cap: 8.0 };
        assert_eq!(
            op.infer(&[&x]).unwrap()[0].ty.to_string(),
            "f16[1, seq, 512]"
        );
        let i = fact(DType::I32, vec![d(3)]);
        assert!(op.infer(&[&i]).is_err());
        for cap in [0.0, -1.0, f32::INFINITY] {
            let e = Softcap { cap }.infer(&[&x]).unwrap_err();
            assert!(e.0.contains("cap"), "{e}");
        }
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Softcap { cap: 30.0 }, &[]);
    }
}
