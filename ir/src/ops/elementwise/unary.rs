//! Element-wise unary ops: `neg`, `abs`, `sqrt`, `reciprocal`, `exp`, `log`,
//! `erf`, `tanh`, `sigmoid`, `cos`, `sin`, `relu`, `floor`, `ceil`, `sign`
//! (same dtype out), `not` (bool), `is_nan` and `is_inf` (bool out).
//!
//! Float math is done in `f32`; `neg`, `abs`, `sign` and `relu` also take
//! signed integers.

use crate::attr::{Attr, Attrs};
use crate::dtype::DType;
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryKind {
    Neg,
    Abs,
    Sqrt,
    Reciprocal,
    Exp,
    Log,
    Erf,
    Tanh,
    Sigmoid,
    Cos,
    Sin,
    Relu,
    Floor,
    Ceil,
    Sign,
    Not,
    IsNan,
    IsInf,
}

impl UnaryKind {
    pub const ALL: [UnaryKind; 18] = [
        UnaryKind::Neg,
        UnaryKind::Abs,
        UnaryKind::Sqrt,
        UnaryKind::Reciprocal,
        UnaryKind::Exp,
        UnaryKind::Log,
        UnaryKind::Erf,
        UnaryKind::Tanh,
        UnaryKind::Sigmoid,
        UnaryKind::Cos,
        UnaryKind::Sin,
        UnaryKind::Relu,
        UnaryKind::Floor,
        UnaryKind::Ceil,
        UnaryKind::Sign,
        UnaryKind::Not,
        UnaryKind::IsNan,
        UnaryKind::IsInf,
    ];

    pub fn mnemonic(self) -> &'static str {
        match self {
            UnaryKind::Neg => "neg",
            UnaryKind::Abs => "abs",
            UnaryKind::Sqrt => "sqrt",
            UnaryKind::Reciprocal => "reciprocal",
            UnaryKind::Exp => "exp",
            UnaryKind::Log => "log",
            UnaryKind::Erf => "erf",
            UnaryKind::Tanh => "tanh",
            UnaryKind::Sigmoid => "sigmoid",
            UnaryKind::Cos => "cos",
            UnaryKind::Sin => "sin",
            UnaryKind::Relu => "relu",
            UnaryKind::Floor => "floor",
            UnaryKind::Ceil => "ceil",
            UnaryKind::Sign => "sign",
            UnaryKind::Not => "not",
            UnaryKind::IsNan => "is_nan",
            UnaryKind::IsInf => "is_inf",
        }
    }

    /// Kinds defined on signed integers as well as floats.
    fn takes_ints(self) -> bool {
        matches!(
            self,
            UnaryKind::Neg | UnaryKind::Abs | UnaryKind::Sign | UnaryKind::Relu
        )
    }

    fn f32(self, x: f32) -> f32 {
        match self {
            UnaryKind::Neg => -x,
            UnaryKind::Abs => x.abs(),
            UnaryKind::Sqrt => x.sqrt(),
            UnaryKind::Reciprocal => 1.0 / x,
            UnaryKind::Exp => x.exp(),
            UnaryKind::Log => x.ln(),
            UnaryKind::Erf => libm::erff(x),
            UnaryKind::Tanh => x.tanh(),
            UnaryKind::Sigmoid => {
                if x >= 0.0 {
                    1.0 / (1.0 + (-x).exp())
                } else {
                    let e = x.exp();
                    e / (1.0 + e)
                }
            }
            UnaryKind::Cos => x.cos(),
            UnaryKind::Sin => x.sin(),
            UnaryKind::Relu => x.max(0.0),
            UnaryKind::Floor => x.floor(),
            UnaryKind::Ceil => x.ceil(),
            UnaryKind::Sign => {
                if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    x
                }
            }
            UnaryKind::Not | UnaryKind::IsNan | UnaryKind::IsInf => unreachable!("bool result"),
        }
    }

    fn i64(self, x: i64) -> i64 {
        match self {
            UnaryKind::Neg => x.wrapping_neg(),
            UnaryKind::Abs => x.wrapping_abs(),
            UnaryKind::Sign => x.signum(),
            UnaryKind::Relu => x.max(0),
            _ => unreachable!("not an integer kind"),
        }
    }
}

/// An element-wise unary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Unary {
    pub kind: UnaryKind,
}

impl Unary {
    pub fn new(kind: UnaryKind) -> Unary {
        Unary { kind }
    }
}

impl OpDef for Unary {
    fn mnemonic(&self) -> &'static str {
        self.kind.mnemonic()
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let name = self.mnemonic();
        let [x] = inputs else {
            bail!("`{name}` takes 1 operand, got {}", inputs.len());
        };
        let d = x.ty.dtype;
        let dtype = match self.kind {
            UnaryKind::Not if d == DType::Bool => DType::Bool,
            UnaryKind::IsNan | UnaryKind::IsInf if d.is_float() => DType::Bool,
            UnaryKind::Not | UnaryKind::IsNan | UnaryKind::IsInf => {
                bail!("`{name}` does not take {d}")
            }
            k if d.is_float() || (k.takes_ints() && d.is_signed_int()) => d,
            _ => bail!("`{name}` does not take {d}"),
        };
        Ok(vec![Fact::new(TensorType::new(dtype, x.ty.shape.clone()))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`{}` takes 1 operand", self.mnemonic());
        };
        let shape = x.shape().to_vec();
        let out = match self.kind {
            UnaryKind::Not => {
                let v = x
                    .as_bool()
                    .ok_or_else(|| OpError("`not` needs bool".into()))?;
                Tensor::from_bool(shape, v.iter().map(|b| !b).collect())
            }
            UnaryKind::IsNan => {
                Tensor::from_bool(shape, x.to_f32_vec().iter().map(|v| v.is_nan()).collect())
            }
            UnaryKind::IsInf => Tensor::from_bool(
                shape,
                x.to_f32_vec().iter().map(|v| v.is_infinite()).collect(),
            ),
            k if x.dtype().is_float() => {
                let v = x.to_f32_vec().into_iter().map(|v| k.f32(v)).collect();
                Tensor::from_f32(shape, v).cast(x.dtype())
            }
            k => {
                let v = x.to_i64_vec().into_iter().map(|v| k.i64(v)).collect();
                Tensor::from_i64(shape, v).cast(x.dtype())
            }
        };
        Ok(vec![out])
    }
}

impl OpBuild for Unary {
    const MNEMONICS: &'static [&'static str] = &[
        "neg",
        "abs",
        "sqrt",
        "reciprocal",
        "exp",
        "log",
        "erf",
        "tanh",
        "sigmoid",
        "cos",
        "sin",
        "relu",
        "floor",
        "ceil",
        "sign",
        "not",
        "is_nan",
        "is_inf",
    ];

    fn build(mnemonic: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        match UnaryKind::ALL.iter().find(|k| k.mnemonic() == mnemonic) {
            Some(&kind) => Ok(Unary { kind }),
            None => bail!("unknown unary op `{mnemonic}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mnemonics_match_kinds() {
        for k in UnaryKind::ALL {
            assert!(Unary::MNEMONICS.contains(&k.mnemonic()));
        }
        assert_eq!(Unary::MNEMONICS.len(), UnaryKind::ALL.len());
    }

    #[test]
    fn erf_and_sigmoid() {
        let x = Tensor::from_f32(vec![2], vec![0.5, -100.0]);
        let e = Unary::new(UnaryKind::Erf)
            .eval(&[&x], &EvalCtx::default())
            .unwrap();
        assert!((e[0].as_f32().unwrap()[0] - 0.520_499_9).abs() < 1e-6);
        let s = Unary::new(UnaryKind::Sigmoid)
            .eval(&[&x], &EvalCtx::default())
            .unwrap();
        assert!(s[0].as_f32().unwrap()[1] < 1e-40);
    }
}
