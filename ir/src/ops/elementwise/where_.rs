//! `where`: `%z = where %cond, %x, %y` picks `x` where `cond` is true and `y`
//! elsewhere, all three broadcast NumPy-style (ONNX `Where`). `cond` is
//! `bool`; `x` and `y` share a dtype, which the result has.
//!
//! When all three values are known at compile time and `x`, `y` are integer
//! (possibly symbolic) dims, the selected values are propagated: exporters
//! write `where(equal(shape, -1), 1, shape)` in their shape bookkeeping.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::broadcast::{broadcast_all, source_indices};
use crate::ops::{bail, fact_maybe_dims, known_dims, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::{Tensor, TensorData};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Where;

/// The selected values, when `cond`, `x` and `y` are all known.
fn select_dims(cond: &Fact, x: &Fact, y: &Fact, out: &TensorType) -> Option<Vec<Dim>> {
    let c = cond.value.as_ref()?.as_tensor(DType::Bool)?;
    let c = c.as_bool()?;
    let (vx, vy) = (known_dims(x)?, known_dims(y)?);
    let out = out.shape.as_fixed()?;
    let ic = source_indices(cond.ty.shape.as_fixed()?.as_slice(), &out);
    let ix = source_indices(&vx.shape, &out);
    let iy = source_indices(&vy.shape, &out);
    Some(
        ic.iter()
            .zip(ix.iter().zip(&iy))
            .map(|(&k, (&i, &j))| {
                if c[k] {
                    vx.values[i].clone()
                } else {
                    vy.values[j].clone()
                }
            })
            .collect(),
    )
}

impl OpDef for Where {
    fn mnemonic(&self) -> &'static str {
        "where"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [cond, x, y] = inputs else {
            bail!(
                "`where` takes 3 operands (cond, x, y), got {}",
                inputs.len()
            );
        };
        if cond.ty.dtype != DType::Bool {
            bail!("`where` condition must be bool, got {}", cond.ty);
        }
        if x.ty.dtype != y.ty.dtype {
            bail!("`where` branches differ in dtype: {} vs {}", x.ty, y.ty);
        }
        let shape = broadcast_all([&cond.ty.shape, &x.ty.shape, &y.ty.shape])
            .map_err(|e| OpError(format!("`where`: {e}")))?;
        let ty = TensorType::new(x.ty.dtype, shape);
        let values = if x.ty.dtype.is_int() {
            select_dims(cond, x, y, &ty)
        } else {
            None
        };
        Ok(vec![fact_maybe_dims(ty, values)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [cond, x, y] = inputs else {
            bail!(
                "`where` takes 3 operands (cond, x, y), got {}",
                inputs.len()
            );
        };
        let Some(c) = cond.as_bool() else {
            bail!("`where` condition must be bool, got {}", cond.dtype());
        };
        let shape = broadcast_all(
            [cond.shape(), x.shape(), y.shape()]
                .map(|s| crate::shape::Shape(crate::ops::static_dims(s)))
                .iter(),
        )?;
        let out = shape.as_fixed().expect("broadcast of static shapes");
        let ic = source_indices(cond.shape(), &out);
        let ix = source_indices(x.shape(), &out);
        let iy = source_indices(y.shape(), &out);
        // Pick from the concatenation of both buffers: `y` elements follow `x`'s.
        let Some(both) = TensorData::concat(&[x.data(), y.data()]) else {
            bail!(
                "`where` branches differ in dtype: {} vs {}",
                x.dtype(),
                y.dtype()
            );
        };
        let order = ic
            .iter()
            .zip(ix.iter().zip(&iy))
            .map(|(&k, (&i, &j))| if c[k] { i } else { x.len() + j });
        Ok(vec![Tensor::new(out, both.gather(order))?])
    }
}

impl OpBuild for Where {
    const MNEMONICS: &'static [&'static str] = &["where"];

    fn build(_: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Where)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::binary::{Binary, BinaryKind};
    use crate::ops::test_util::*;

    #[test]
    fn onnx_example() {
        // ONNX `Where` doc example (float).
        let c = Tensor::from_bool(vec![2, 2], vec![true, false, true, true]);
        let x = Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let y = Tensor::from_f32(vec![2, 2], vec![9.0, 8.0, 7.0, 6.0]);
        let r = eval_checked(&Where, &[&c, &x, &y]);
        assert_eq!(r[0].as_f32().unwrap(), &[1.0, 8.0, 3.0, 4.0]);
    }

    #[test]
    fn broadcasts_all_three() {
        let c = Tensor::from_bool(vec![2, 1], vec![true, false]);
        let x = Tensor::from_i64(vec![3], vec![1, 2, 3]);
        let y = Tensor::scalar_i64(0);
        let r = eval_checked(&Where, &[&c, &x, &y]);
        assert_eq!(r[0].shape(), &[2, 3]);
        assert_eq!(r[0].as_i64().unwrap(), &[1, 2, 3, 0, 0, 0]);
    }

    #[test]
    fn symbolic_shapes() {
        let c = fact(DType::Bool, vec![d(1), d(1), sym("seq"), sym("seq")]);
        let x = fact(DType::F32, vec![]);
        let y = fact(DType::F32, vec![d(1), d(4), sym("seq"), d(1)]);
        let r = Where.infer(&[&c, &x, &y]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[1, 4, seq, seq]");
        let bad = fact(DType::F32, vec![sym("past")]);
        let e = Where.infer(&[&c, &x, &bad]).unwrap_err();
        assert!(e.0.contains("`where`") && e.0.contains("broadcast"), "{e}");
    }

    #[test]
    fn exporter_minus_one_pattern_propagates() {
        // where(equal(shape, -1), 1, shape) on a symbolic shape.
        let shape = known(&[3], vec![d(1), sym("seq"), d(-1)]);
        let m1 = known_i64(&[], &[-1]);
        let eq = Binary::new(BinaryKind::Equal)
            .infer(&[&shape, &m1])
            .unwrap()
            .remove(0);
        let one = known_i64(&[], &[1]);
        let r = Where.infer(&[&eq, &one, &shape]).unwrap().remove(0);
        assert_eq!(r.ty.to_string(), "i64[3]");
        assert_eq!(r.dims_value().unwrap(), vec![d(1), sym("seq"), d(1)]);
    }

    #[test]
    fn rejects_bad_types() {
        let c = fact(DType::I64, vec![d(2)]);
        let x = fact(DType::F32, vec![d(2)]);
        let e = Where.infer(&[&c, &x, &x]).unwrap_err();
        assert!(e.0.contains("condition must be bool"), "{e}");
        let c = fact(DType::Bool, vec![d(2)]);
        let y = fact(DType::F16, vec![d(2)]);
        let e = Where.infer(&[&c, &x, &y]).unwrap_err();
        assert!(e.0.contains("f32[2] vs f16[2]"), "{e}");
        assert!(Where.infer(&[&c, &x]).is_err());
        let t = Tensor::from_f32(vec![2], vec![1.0, 2.0]);
        assert!(eval(&Where, &[&t, &t, &t]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Where, &[]);
    }
}
