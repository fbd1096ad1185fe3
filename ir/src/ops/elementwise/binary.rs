//! Element-wise binary ops with NumPy broadcasting: arithmetic (`add`, `sub`,
//! `mul`, `div`, `pow`, `max`, `min`, `mod`), comparisons (`equal`, `less`,
//! `less_or_equal`, `greater`, `greater_or_equal`, result `bool`) and logic
//! (`and`, `or`, `xor`, on `bool`).
//!
//! Float math is done in `f32` (as ONNX runtimes do), integer math in `i64`
//! with wrapping; integer `div` truncates toward zero, `mod` follows the sign
//! of the divisor (ONNX `Mod` with `fmod = 0`). On integer operands with known
//! (possibly symbolic) values, `add`, `sub`, `mul`, `div`, `max`, `min` and
//! `equal` propagate the values during inference.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::broadcast::{broadcast_fixed, broadcast_shapes, source_indices};
use crate::ops::{bail, fact_maybe_dims, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    Mod,
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    And,
    Or,
    Xor,
}

impl BinaryKind {
    pub const ALL: [BinaryKind; 16] = [
        BinaryKind::Add,
        BinaryKind::Sub,
        BinaryKind::Mul,
        BinaryKind::Div,
        BinaryKind::Pow,
        BinaryKind::Max,
        BinaryKind::Min,
        BinaryKind::Mod,
        BinaryKind::Equal,
        BinaryKind::Less,
        BinaryKind::LessOrEqual,
        BinaryKind::Greater,
        BinaryKind::GreaterOrEqual,
        BinaryKind::And,
        BinaryKind::Or,
        BinaryKind::Xor,
    ];

    pub fn mnemonic(self) -> &'static str {
        match self {
            BinaryKind::Add => "add",
            BinaryKind::Sub => "sub",
            BinaryKind::Mul => "mul",
            BinaryKind::Div => "div",
            BinaryKind::Pow => "pow",
            BinaryKind::Max => "max",
            BinaryKind::Min => "min",
            BinaryKind::Mod => "mod",
            BinaryKind::Equal => "equal",
            BinaryKind::Less => "less",
            BinaryKind::LessOrEqual => "less_or_equal",
            BinaryKind::Greater => "greater",
            BinaryKind::GreaterOrEqual => "greater_or_equal",
            BinaryKind::And => "and",
            BinaryKind::Or => "or",
            BinaryKind::Xor => "xor",
        }
    }

    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryKind::Equal
                | BinaryKind::Less
                | BinaryKind::LessOrEqual
                | BinaryKind::Greater
                | BinaryKind::GreaterOrEqual
        )
    }

    pub fn is_logic(self) -> bool {
        matches!(self, BinaryKind::And | BinaryKind::Or | BinaryKind::Xor)
    }

    fn f32(self, a: f32, b: f32) -> f32 {
        match self {
            BinaryKind::Add => a + b,
            BinaryKind::Sub => a - b,
            BinaryKind::Mul => a * b,
            BinaryKind::Div => a / b,
            BinaryKind::Pow => a.powf(b),
            BinaryKind::Max => {
                if a.is_nan() || b.is_nan() {
                    f32::NAN
                } else {
                    a.max(b)
                }
            }
            BinaryKind::Min => {
                if a.is_nan() || b.is_nan() {
                    f32::NAN
                } else {
                    a.min(b)
                }
            }
            BinaryKind::Mod => {
                let r = a % b;
                if r != 0.0 && (r < 0.0) != (b < 0.0) {
                    r + b
                } else {
                    r
                }
            }
            _ => unreachable!("not an arithmetic kind"),
        }
    }

    fn i64(self, a: i64, b: i64) -> Result<i64, OpError> {
        Ok(match self {
            BinaryKind::Add => a.wrapping_add(b),
            BinaryKind::Sub => a.wrapping_sub(b),
            BinaryKind::Mul => a.wrapping_mul(b),
            BinaryKind::Div | BinaryKind::Mod if b == 0 => bail!("integer division by zero"),
            BinaryKind::Div => a.wrapping_div(b),
            BinaryKind::Mod => {
                let r = a.wrapping_rem(b);
                if r != 0 && (r < 0) != (b < 0) {
                    r + b
                } else {
                    r
                }
            }
            BinaryKind::Pow => (a as f64).powf(b as f64) as i64,
            BinaryKind::Max => a.max(b),
            BinaryKind::Min => a.min(b),
            _ => unreachable!("not an arithmetic kind"),
        })
    }

    fn compare(self, o: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            BinaryKind::Equal => o == Equal,
            BinaryKind::Less => o == Less,
            BinaryKind::LessOrEqual => o != Greater,
            BinaryKind::Greater => o == Greater,
            BinaryKind::GreaterOrEqual => o != Less,
            _ => unreachable!("not a comparison"),
        }
    }

    /// Symbolic arithmetic on dims, where it is exact.
    fn dims(self, a: &Dim, b: &Dim) -> Option<Dim> {
        match self {
            BinaryKind::Add => Some(a + b),
            BinaryKind::Sub => Some(a - b),
            BinaryKind::Mul => Some(a * b),
            BinaryKind::Div => match (a.as_fixed(), b.as_fixed()) {
                (Some(x), Some(y)) if y != 0 => Some(Dim::fixed(x.wrapping_div(y))),
                _ => a.div_exact(b),
            },
            BinaryKind::Max | BinaryKind::Min => match (a.as_fixed(), b.as_fixed()) {
                (Some(x), Some(y)) => Some(Dim::fixed(self.i64(x, y).ok()?)),
                _ if a == b => Some(a.clone()),
                _ => None,
            },
            // Symbols are sizes (>= 0), so `seq` vs `-1` is decidable.
            BinaryKind::Equal => {
                let diff = a - b;
                match diff.as_fixed() {
                    Some(d) => Some(Dim::fixed((d == 0) as i64)),
                    None if diff.is_positive() || (-&diff).is_positive() => Some(Dim::fixed(0)),
                    None => None,
                }
            }
            _ => None,
        }
    }
}

/// An element-wise binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Binary {
    pub kind: BinaryKind,
}

impl Binary {
    pub fn new(kind: BinaryKind) -> Binary {
        Binary { kind }
    }
}

/// Propagates symbolic integer values through the op, when both are known.
fn infer_dims(kind: BinaryKind, a: &Fact, b: &Fact, ty: &TensorType) -> Option<Vec<Dim>> {
    let va = a.value.as_ref()?.as_dims()?;
    let vb = b.value.as_ref()?.as_dims()?;
    let out = ty.shape.as_fixed()?;
    let ia = source_indices(&va.shape, &out);
    let ib = source_indices(&vb.shape, &out);
    ia.iter()
        .zip(&ib)
        .map(|(&i, &j)| kind.dims(&va.values[i], &vb.values[j]))
        .collect()
}

impl OpDef for Binary {
    fn mnemonic(&self) -> &'static str {
        self.kind.mnemonic()
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let name = self.mnemonic();
        let [a, b] = inputs else {
            bail!("`{name}` takes 2 operands, got {}", inputs.len());
        };
        let (da, db) = (a.ty.dtype, b.ty.dtype);
        if self.kind.is_logic() && (da != DType::Bool || db != DType::Bool) {
            bail!("`{name}` needs bool operands, got {da} and {db}");
        }
        if self.kind != BinaryKind::Pow && da != db {
            bail!("`{name}` operands differ in dtype: {da} vs {db}");
        }
        let shape = broadcast_shapes(&a.ty.shape, &b.ty.shape)?;
        let dtype = if self.kind.is_comparison() || self.kind.is_logic() {
            DType::Bool
        } else {
            da
        };
        if dtype != DType::Bool && !da.is_float() && !da.is_int() {
            bail!("`{name}` does not take {da}");
        }
        let ty = TensorType::new(dtype, shape);
        let dims = if da.is_int() {
            infer_dims(self.kind, a, b, &ty)
        } else {
            None
        };
        Ok(vec![fact_maybe_dims(ty, dims)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [a, b] = inputs else {
            bail!("`{}` takes 2 operands", self.mnemonic());
        };
        let out_shape = broadcast_fixed(a.shape(), b.shape())?;
        let ia = source_indices(a.shape(), &out_shape);
        let ib = source_indices(b.shape(), &out_shape);
        let pairs = ia.iter().zip(&ib);
        let kind = self.kind;
        let out = if kind.is_logic() {
            let (Some(x), Some(y)) = (a.as_bool(), b.as_bool()) else {
                bail!("`{}` needs bool operands", self.mnemonic());
            };
            let f = |p: bool, q: bool| match kind {
                BinaryKind::And => p && q,
                BinaryKind::Or => p || q,
                _ => p != q,
            };
            Tensor::from_bool(out_shape, pairs.map(|(&i, &j)| f(x[i], y[j])).collect())
        } else if a.dtype().is_float() {
            let (x, y) = (a.to_f32_vec(), b.to_f32_vec());
            if kind.is_comparison() {
                let v = pairs
                    .map(|(&i, &j)| x[i].partial_cmp(&y[j]).is_some_and(|o| kind.compare(o)))
                    .collect();
                Tensor::from_bool(out_shape, v)
            } else {
                let v = pairs.map(|(&i, &j)| kind.f32(x[i], y[j])).collect();
                Tensor::from_f32(out_shape, v).cast(a.dtype())
            }
        } else {
            let (x, y) = (a.to_i64_vec(), b.to_i64_vec());
            if kind.is_comparison() {
                let v = pairs
                    .map(|(&i, &j)| kind.compare(x[i].cmp(&y[j])))
                    .collect();
                Tensor::from_bool(out_shape, v)
            } else if kind == BinaryKind::Pow && b.dtype().is_float() {
                let yf = b.to_f32_vec();
                let v = pairs
                    .map(|(&i, &j)| (x[i] as f64).powf(yf[j] as f64) as i64)
                    .collect();
                Tensor::from_i64(out_shape, v).cast(a.dtype())
            } else {
                let v = pairs
                    .map(|(&i, &j)| kind.i64(x[i], y[j]))
                    .collect::<Result<Vec<_>, _>>()?;
                Tensor::from_i64(out_shape, v).cast(a.dtype())
            }
        };
        Ok(vec![out])
    }
}

impl OpBuild for Binary {
    const MNEMONICS: &'static [&'static str] = &[
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "max",
        "min",
        "mod",
        "equal",
        "less",
        "less_or_equal",
        "greater",
        "greater_or_equal",
        "and",
        "or",
        "xor",
    ];

    fn build(mnemonic: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        match BinaryKind::ALL.iter().find(|k| k.mnemonic() == mnemonic) {
            Some(&kind) => Ok(Binary { kind }),
            None => bail!("unknown binary op `{mnemonic}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Known;
    use std::sync::Arc;

    fn eval(kind: BinaryKind, a: Tensor, b: Tensor) -> Tensor {
        Binary::new(kind)
            .eval(&[&a, &b], &EvalCtx::default())
            .unwrap()
            .remove(0)
    }

    #[test]
    fn broadcasting_arithmetic() {
        let a = Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = Tensor::from_f32(vec![2], vec![10.0, 20.0]);
        assert_eq!(
            eval(BinaryKind::Add, a, b).as_f32().unwrap(),
            &[11.0, 22.0, 13.0, 24.0]
        );
    }

    #[test]
    fn integer_div_and_mod_follow_onnx() {
        let a = Tensor::from_i64(vec![2], vec![-7, 7]);
        let b = Tensor::from_i64(vec![2], vec![2, -2]);
        assert_eq!(
            eval(BinaryKind::Div, a.clone(), b.clone())
                .as_i64()
                .unwrap(),
            &[-3, -3]
        );
        assert_eq!(eval(BinaryKind::Mod, a, b).as_i64().unwrap(), &[1, -1]);
    }

    #[test]
    fn comparisons_yield_bool() {
        let a = Tensor::from_f32(vec![3], vec![1.0, f32::NAN, 3.0]);
        let b = Tensor::scalar_f32(2.0);
        let r = eval(BinaryKind::LessOrEqual, a, b);
        assert_eq!(r.as_bool().unwrap(), &[true, false, false]);
    }

    #[test]
    fn symbolic_values_propagate() {
        let seq = Fact::with_value(
            TensorType::fixed(DType::I64, &[1]),
            Known::from_dims(vec![1], vec![Dim::sym("seq")]),
        );
        let one = Fact::with_value(
            TensorType::fixed(DType::I64, &[1]),
            Known::Tensor(Arc::new(Tensor::from_i64(vec![1], vec![1]))),
        );
        let out = Binary::new(BinaryKind::Add).infer(&[&seq, &one]).unwrap();
        assert_eq!(
            out[0].dims_value().unwrap(),
            vec![&Dim::sym("seq") + &Dim::fixed(1)]
        );
    }

    #[test]
    fn symbolic_dim_never_equals_negative_constant() {
        let shape = Fact::with_value(
            TensorType::fixed(DType::I64, &[2]),
            Known::from_dims(vec![2], vec![Dim::sym("seq"), Dim::fixed(-1)]),
        );
        let m1 = Fact::with_value(
            TensorType::fixed(DType::I64, &[1]),
            Known::Tensor(Arc::new(Tensor::from_i64(vec![1], vec![-1]))),
        );
        let out = Binary::new(BinaryKind::Equal)
            .infer(&[&shape, &m1])
            .unwrap();
        let v = out[0]
            .value
            .as_ref()
            .unwrap()
            .as_tensor(DType::Bool)
            .unwrap();
        assert_eq!(v.as_bool().unwrap(), &[false, true]);
    }

    #[test]
    fn mismatched_dtypes_are_rejected() {
        let a = Fact::new(TensorType::fixed(DType::F32, &[2]));
        let b = Fact::new(TensorType::fixed(DType::I64, &[2]));
        let e = Binary::new(BinaryKind::Add).infer(&[&a, &b]).unwrap_err();
        assert!(e.0.contains("differ in dtype"), "{e}");
    }
}
