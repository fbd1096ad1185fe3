//! `constant_of_shape`: `%y = constant_of_shape %shape {value = 1} : i64[4]`
//! is a tensor of the shape given by the `i64[n]` operand, filled with
//! `value` (ONNX `ConstantOfShape`). An empty `shape` gives a scalar.
//!
//! The fill value's dtype is the declared result dtype; without `value` the
//! fill is `0.0` of dtype `f32`, as in ONNX (declaring another result type
//! is then an error). `value` is always printed.
//!
//! Difference from ONNX: the shape operand's value must be known at compile
//! time (possibly symbolically: `[1, seq]`), since result shapes must be.
//! For integer results of at most [`MAX_KNOWN`] elements with a static
//! shape, the value is propagated (shape bookkeeping builds vectors of ones
//! this way).

use crate::attr::{Attr, AttrError, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::constant::element_attr;
use crate::ops::{
    bail, check_nonnegative_dims, fact_maybe_dims, EvalCtx, Fact, OpBuild, OpDef, OpError,
};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

/// Largest integer result whose value inference propagates.
pub const MAX_KNOWN: usize = 1024;

#[derive(Clone, Debug, PartialEq)]
pub struct ConstantOfShape {
    /// The fill value: a scalar of the result dtype.
    pub value: Tensor,
}

impl Default for ConstantOfShape {
    fn default() -> ConstantOfShape {
        ConstantOfShape {
            value: Tensor::scalar_f32(0.0),
        }
    }
}

impl ConstantOfShape {
    /// Parses the fill value as a scalar of `dtype`.
    fn parse_value(attr: Attr, dtype: DType) -> Result<Tensor, OpError> {
        let attr = match attr {
            Attr::List(mut items) if items.len() == 1 => items.remove(0),
            a => a,
        };
        let t = match (&attr, dtype) {
            (Attr::Bool(b), DType::Bool) => Tensor::from_bool(Vec::new(), vec![*b]),
            (Attr::Int(v @ (0 | 1)), DType::Bool) => Tensor::from_bool(Vec::new(), vec![*v == 1]),
            (Attr::Int(v), d) if d.is_int() => {
                let t = Tensor::scalar_i64(*v).cast(d);
                if t.get_i64(0) != *v {
                    bail!("`constant_of_shape` value {v} does not fit in {d}");
                }
                t
            }
            (Attr::Float(f), d) if d.is_float() => Tensor::from_f64(d, Vec::new(), &[*f])?,
            (Attr::Int(v), d) if d.is_float() => Tensor::from_f64(d, Vec::new(), &[*v as f64])?,
            (a, d) => bail!("`constant_of_shape` value `{a}` is not a {d} scalar"),
        };
        Ok(t)
    }
}

impl OpDef for ConstantOfShape {
    fn mnemonic(&self) -> &'static str {
        "constant_of_shape"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("value", element_attr(&self.value, 0))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [shape] = inputs else {
            bail!("`constant_of_shape` takes 1 operand, got {}", inputs.len());
        };
        if shape.ty.dtype != DType::I64 || shape.ty.rank() != 1 {
            bail!(
                "`constant_of_shape` operand must be i64[n], got {}",
                shape.ty
            );
        }
        let Some(dims) = shape.dims_value() else {
            bail!("`constant_of_shape` shape must be known at compile time");
        };
        check_nonnegative_dims("constant_of_shape", "shape", &dims)?;
        let dtype = self.value.dtype();
        let ty = TensorType::new(dtype, Shape(dims));
        let values = ty.shape.as_fixed().and_then(|s| {
            let n: usize = s.iter().product();
            (dtype.is_int() && n <= MAX_KNOWN).then(|| vec![Dim::fixed(self.value.get_i64(0)); n])
        });
        Ok(vec![fact_maybe_dims(ty, values)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [shape] = inputs else {
            bail!("`constant_of_shape` takes 1 operand, got {}", inputs.len());
        };
        if !shape.dtype().is_int() || shape.rank() != 1 {
            bail!(
                "`constant_of_shape` operand must be i64[n], got {}{:?}",
                shape.dtype(),
                shape.shape()
            );
        }
        let v = shape.to_i64_vec();
        check_nonnegative_dims(
            "constant_of_shape",
            "shape",
            &v.iter().map(|&x| Dim::fixed(x)).collect::<Vec<_>>(),
        )?;
        let out: Vec<usize> = v.into_iter().map(|x| x as usize).collect();
        let n: usize = out.iter().product();
        Ok(vec![Tensor::new(
            out,
            self.value.data().gather((0..n).map(|_| 0)),
        )?])
    }
}

impl OpBuild for ConstantOfShape {
    const MNEMONICS: &'static [&'static str] = &["constant_of_shape"];

    fn build(_: &str, attrs: &mut Attrs, results: &[TensorType]) -> Result<Self, OpError> {
        let declared = match results {
            [] => None,
            [ty] => Some(ty.dtype),
            _ => bail!("`constant_of_shape` has exactly one result"),
        };
        match attrs.raw("value") {
            Ok(attr) => {
                let Some(dtype) = declared else {
                    bail!("`constant_of_shape` needs its result type to read `value`");
                };
                Ok(ConstantOfShape {
                    value: Self::parse_value(attr, dtype)?,
                })
            }
            Err(AttrError::Missing(_)) => match declared {
                Some(d) if d != DType::F32 => bail!(
                    "`constant_of_shape` without `value` fills f32 zeros, but the result is declared {d}"
                ),
                _ => Ok(ConstantOfShape::default()),
            },
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    fn shape(v: &[i64]) -> Tensor {
        Tensor::from_i64(vec![v.len()], v.to_vec())
    }

    #[test]
    fn onnx_examples() {
        // ONNX `ConstantOfShape` docs: float ones of [4, 3, 2]; int32 zeros
        // of [10, 6]; default f32 zeros.
        let op = ConstantOfShape {
            value: Tensor::scalar_f32(1.0),
        };
        let r = eval_checked(&op, &[&shape(&[4, 3, 2])]);
        assert_eq!(r[0].shape(), &[4, 3, 2]);
        assert!(r[0].as_f32().unwrap().iter().all(|&v| v == 1.0));
        let op = ConstantOfShape {
            value: Tensor::scalar_i64(0).cast(DType::I32),
        };
        let r = eval_checked(&op, &[&shape(&[10, 6])]);
        assert_eq!(r[0], Tensor::zeros(DType::I32, vec![10, 6]));
        let r = eval_checked(&ConstantOfShape::default(), &[&shape(&[])]);
        assert_eq!(r[0], Tensor::scalar_f32(0.0));
        assert!(eval(&ConstantOfShape::default(), &[&shape(&[-1])]).is_err());
    }

    #[test]
    fn symbolic_shape_and_values() {
        let op = ConstantOfShape {
            value: Tensor::scalar_i64(1),
        };
        let s = known(&[2], vec![d(1), sym("seq")]);
        let r = op.infer(&[&s]).unwrap().remove(0);
        assert_eq!(r.ty.to_string(), "i64[1, seq]");
        assert!(r.value.is_none());
        let r = op.infer(&[&known_i64(&[1], &[3])]).unwrap().remove(0);
        assert_eq!(r.dims_value().unwrap(), vec![d(1); 3]);
        let unknown = fact(DType::I64, vec![d(2)]);
        let e = op.infer(&[&unknown]).unwrap_err();
        assert!(e.0.contains("known at compile time"), "{e}");
        let bad = fact(DType::I32, vec![d(2)]);
        assert!(op.infer(&[&bad]).unwrap_err().0.contains("i32[2]"));
    }

    #[test]
    fn build_reads_dtype_from_result() {
        let i32_ty = TensorType::new(DType::I32, vec![sym("seq")]);
        let mut a = Attrs::from_pairs([("value".to_string(), Attr::Int(-1))]);
        let op = ConstantOfShape::build("constant_of_shape", &mut a, std::slice::from_ref(&i32_ty))
            .unwrap();
        assert_eq!(op.value, Tensor::scalar_i64(-1).cast(DType::I32));
        let mut a = Attrs::from_pairs([("value".to_string(), Attr::Float(0.5))]);
        assert!(
            ConstantOfShape::build("constant_of_shape", &mut a, std::slice::from_ref(&i32_ty))
                .is_err()
        );
        let mut a = Attrs::from_pairs([("value".to_string(), Attr::Int(300))]);
        let u8_ty = TensorType::fixed(DType::U8, &[1]);
        assert!(ConstantOfShape::build("constant_of_shape", &mut a, &[u8_ty]).is_err());
        let mut a = Attrs::new();
        assert!(ConstantOfShape::build("constant_of_shape", &mut a, &[i32_ty]).is_err());
        let f32_ty = TensorType::fixed(DType::F32, &[2]);
        let op = ConstantOfShape::build("constant_of_shape", &mut Attrs::new(), &[f32_ty]);
        assert_eq!(op.unwrap(), ConstantOfShape::default());
    }

    #[test]
    fn round_trip() {
        let ty = |d| TensorType::fixed(d, &[2]);
        for v in [
            Tensor::scalar_f32(0.1),
            Tensor::scalar_f32(f32::NEG_INFINITY),
            Tensor::scalar_i64(i64::MIN),
            Tensor::scalar_f32(-0.3).cast(DType::F16),
            Tensor::from_bool(vec![], vec![true]),
        ] {
            let dt = v.dtype();
            assert_round_trip(ConstantOfShape { value: v }, &[ty(dt)]);
        }
    }
}
