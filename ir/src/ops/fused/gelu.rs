//! `gelu`: `%y = gelu %x {approximate = "tanh"}`, the Gaussian error linear
//! unit, element-wise (ONNX `Gelu`, opset 20; PyTorch `F.gelu`). A fused op:
//! the fusion pass introduces it for the graphs below.
//!
//! - `approximate = "none"` (the default, not printed), the exact form:
//!   `y = 0.5 · x · (1 + erf(x / √2))`, which PyTorch exports for
//!   `F.gelu(x)` as `Div(x, √2) → Erf → Add 1 → Mul x → Mul 0.5`.
//! - `approximate = "tanh"`:
//!   `y = 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`, exported for
//!   `F.gelu(x, approximate="tanh")` (HF `gelu_new`, `gelu_pytorch_tanh`).
//!
//! Any other string is rejected. The operand is a float tensor of any shape;
//! the result has its type. The math is done in `f32` and rounded once to
//! the operand's dtype.

use std::f32::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, SQRT_2};

use crate::attr::{Attr, Attrs};
use crate::ops::fused_util::infer_on_tensors;
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// Which GELU formula: the exact erf form or the tanh approximation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GeluApprox {
    #[default]
    None,
    Tanh,
}

impl GeluApprox {
    /// The attribute string.
    pub fn name(self) -> &'static str {
        match self {
            GeluApprox::None => "none",
            GeluApprox::Tanh => "tanh",
        }
    }

    /// Reads the optional `approximate` attribute (default `"none"`).
    pub fn from_attrs(op: &str, attrs: &mut Attrs) -> Result<GeluApprox, OpError> {
        match attrs.opt_str("approximate")?.as_deref() {
            None | Some("none") => Ok(GeluApprox::None),
            Some("tanh") => Ok(GeluApprox::Tanh),
            Some(other) => {
                bail!("`{op}` attribute `approximate` must be \"none\" or \"tanh\", got {other:?}")
            }
        }
    }

    /// The `approximate` attribute to print: only when not the default.
    pub fn attr(self) -> Option<(&'static str, Attr)> {
        (self != GeluApprox::None).then(|| ("approximate", Attr::Str(self.name().to_string())))
    }

    /// GELU of one value.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            GeluApprox::None => 0.5 * x * (1.0 + libm::erff(x / SQRT_2)),
            GeluApprox::Tanh => {
                // √(2/π) = (2/√π) · (1/√2).
                let k = FRAC_2_SQRT_PI * FRAC_1_SQRT_2;
                0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gelu {
    pub approximate: GeluApprox,
}

impl OpDef for Gelu {
    fn mnemonic(&self) -> &'static str {
        "gelu"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        self.approximate.attr().into_iter().collect()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`gelu` takes 1 operand, got {}", inputs.len());
        };
        if !x.ty.dtype.is_float() {
            bail!("`gelu` needs a float operand, got {}", x.ty);
        }
        Ok(vec![Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let x = inputs[0];
        let v = x
            .to_f32_vec()
            .into_iter()
            .map(|a| self.approximate.apply(a))
            .collect();
        Ok(vec![Tensor::from_f32(x.shape().to_vec(), v).cast(x.dtype())])
    }
}

impl OpBuild for Gelu {
    const MNEMONICS: &'static [&'static str] = &["gelu"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Gelu {
            approximate: GeluApprox::from_attrs("gelu", attrs)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::binary::BinaryKind::{Add, Div, Mul};
    use crate::ops::fused_util::testing::*;
    use crate::ops::test_util::*;
    use crate::ops::unary::UnaryKind::{Erf, Tanh};
    use crate::ops::Op;

    /// `x * 0.5 * (1 + erf(x / √2))` with the primitive ops, as exported.
    fn decomposed_erf(x: &Tensor) -> Tensor {
        let e = un(Erf, &bin(Div, x, &scalar(SQRT_2)));
        let t = bin(Mul, x, &bin(Add, &e, &scalar(1.0)));
        bin(Mul, &t, &scalar(0.5))
    }

    /// `0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x³)))`.
    fn decomposed_tanh(x: &Tensor) -> Tensor {
        let cube = bin(Mul, x, &bin(Mul, x, x));
        let inner = bin(Add, x, &bin(Mul, &scalar(0.044715), &cube));
        let k = (2.0f64 / std::f64::consts::PI).sqrt() as f32;
        let t = un(Tanh, &bin(Mul, &scalar(k), &inner));
        let t = bin(Mul, x, &bin(Add, &scalar(1.0), &t));
        bin(Mul, &scalar(0.5), &t)
    }

    #[test]
    fn matches_decomposed_graphs() {
        let mut rng = Lcg::new(7);
        let x = rng.tensor(&[3, 5, 16], 4.0);
        let r = eval_checked(&Gelu::default(), &[&x]);
        assert_close(&r[0], &decomposed_erf(&x), 1e-5);
        let tanh = Gelu {
            approximate: GeluApprox::Tanh,
        };
        let r = eval_checked(&tanh, &[&x]);
        assert_close(&r[0], &decomposed_tanh(&x), 1e-5);
    }

    #[test]
    fn known_values() {
        // PyTorch: gelu(1) = 0.8413447, gelu(-1) = -0.1586553;
        // gelu(1, approximate="tanh") = 0.8411920.
        let x = Tensor::from_f32(vec![2], vec![1.0, -1.0]);
        let r = eval_checked(&Gelu::default(), &[&x]);
        let want = Tensor::from_f32(vec![2], vec![0.841_344_7, -0.158_655_3]);
        assert_close(&r[0], &want, 1e-6);
        let op = Gelu {
            approximate: GeluApprox::Tanh,
        };
        let r = eval_checked(&op, &[&x]);
        assert!((r[0].to_f32_vec()[0] - 0.841_192).abs() < 1e-6);
    }

    #[test]
    fn half_precision_computes_in_f32() {
        let mut rng = Lcg::new(8);
        let x = rng.tensor(&[4, 8], 3.0).cast(DType::F16);
        let r = eval_checked(&Gelu::default(), &[&x]);
        assert_eq!(r[0].dtype(), DType::F16);
        let want = decomposed_erf(&x.cast(DType::F32)).cast(DType::F16);
        assert_close(&r[0], &want, 1e-3);
    }

    #[test]
    fn infer_checks() {
        let x = fact(DType::BF16, vec![d(1), sym("seq"), d(64)]);
        let r = Gelu::default().infer(&[&x]).unwrap();
        assert_eq!(r[0].ty.to_string(), "bf16[1, seq, 64]");
        let i = fact(DType::I64, vec![d(3)]);
        let e = Gelu::default().infer(&[&i]).unwrap_err();
        assert!(e.0.contains("`gelu`") && e.0.contains("i64[3]"), "{e}");
        assert!(Gelu::default().infer(&[&x, &x]).is_err());
        let t = Tensor::from_i64(vec![1], vec![1]);
        assert!(eval(&Gelu::default(), &[&t]).is_err());
    }

    #[test]
    fn round_trip_and_attributes() {
        assert_round_trip(Gelu::default(), &[]);
        let tanh = Gelu {
            approximate: GeluApprox::Tanh,
        };
        assert_round_trip(tanh, &[]);
        assert!(Gelu::default().attrs().is_empty());
        assert_eq!(
            tanh.attrs(),
            vec![("approximate", Attr::Str("tanh".into()))]
        );
        // "none" spelled out builds the default; other strings and kinds fail.
        let build =
            |v: Attr| Op::build("gelu", Attrs::from_pairs([("approximate".into(), v)]), &[]);
        assert_eq!(
            build(Attr::Str("none".into())).unwrap(),
            Op::Gelu(Gelu::default())
        );
        let e = build(Attr::Str("fast".into())).unwrap_err();
        assert!(e.0.contains("\"fast\""), "{e}");
        assert!(build(Attr::Bool(true)).is_err());
    }
}
