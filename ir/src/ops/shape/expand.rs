//! `expand`: `%y = expand %x, %shape` broadcasts `x` against the `i64[n]`
//! target `shape` (ONNX `Expand`): the broadcast is bidirectional, so a `1`
//! in the target keeps `x`'s dim and the result may be larger than the
//! target.
//!
//! Difference from ONNX: the target must be known at compile time, possibly
//! symbolically (`[1, 1, seq, seq]`), since result shapes must be; negative
//! entries are rejected. Known values (shape vectors) are expanded during
//! inference.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::broadcast::{broadcast_fixed, broadcast_shapes, source_indices};
use crate::ops::{
    bail, check_nonnegative_dims, fact_maybe_dims, known_dims, EvalCtx, Fact, OpBuild, OpDef,
    OpError,
};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Expand;

impl OpDef for Expand {
    fn mnemonic(&self) -> &'static str {
        "expand"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x, shape] = inputs else {
            bail!(
                "`expand` takes 2 operands (data, shape), got {}",
                inputs.len()
            );
        };
        if shape.ty.dtype != DType::I64 || shape.ty.rank() != 1 {
            bail!("`expand` shape operand must be i64[n], got {}", shape.ty);
        }
        let Some(target) = shape.dims_value() else {
            bail!("`expand` target shape must be known at compile time");
        };
        check_nonnegative_dims("expand", "target", &target)?;
        let out = broadcast_shapes(&x.ty.shape, &Shape(target))
            .map_err(|e| OpError(format!("`expand` of {}: {e}", x.ty)))?;
        let ty = TensorType::new(x.ty.dtype, out);
        let values = (|| {
            let v = known_dims(x)?;
            let idx = source_indices(&v.shape, &ty.shape.as_fixed()?);
            Some(idx.into_iter().map(|i| v.values[i].clone()).collect())
        })();
        Ok(vec![fact_maybe_dims(ty, values)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x, shape] = inputs else {
            bail!(
                "`expand` takes 2 operands (data, shape), got {}",
                inputs.len()
            );
        };
        if !shape.dtype().is_int() || shape.rank() != 1 {
            bail!(
                "`expand` shape operand must be i64[n], got {}{:?}",
                shape.dtype(),
                shape.shape()
            );
        }
        let target = shape.to_i64_vec();
        check_nonnegative_dims(
            "expand",
            "target",
            &target.iter().map(|&v| Dim::fixed(v)).collect::<Vec<_>>(),
        )?;
        let target: Vec<usize> = target.into_iter().map(|v| v as usize).collect();
        let out = broadcast_fixed(x.shape(), &target)?;
        let idx = source_indices(x.shape(), &out);
        Ok(vec![Tensor::new(out, x.data().gather(idx.into_iter()))?])
    }
}

impl OpBuild for Expand {
    const MNEMONICS: &'static [&'static str] = &["expand"];

    fn build(_: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Expand)
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
        // ONNX `Expand` doc: [3, 1] to [2, 1, 6] gives [2, 3, 6].
        let x = Tensor::from_f32(vec![3, 1], vec![1.0, 2.0, 3.0]);
        let r = eval_checked(&Expand, &[&x, &shape(&[2, 1, 6])]);
        assert_eq!(r[0].shape(), &[2, 3, 6]);
        let v = r[0].as_f32().unwrap();
        assert_eq!(&v[..7], &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0]);
        assert_eq!(&v[18..20], &[1.0, 1.0]);
        // [3, 1] to [3, 4] (expand_dim_changed / unchanged tests).
        let r = eval_checked(&Expand, &[&x, &shape(&[3, 4])]);
        assert_eq!(r[0].shape(), &[3, 4]);
        assert_eq!(&r[0].as_f32().unwrap()[4..8], &[2.0; 4]);
        // Target smaller than the data: result keeps the data dims.
        let r = eval_checked(&Expand, &[&x, &shape(&[1])]);
        assert_eq!(r[0].shape(), &[3, 1]);
    }

    #[test]
    fn symbolic_target() {
        let mask = fact(DType::Bool, vec![d(1), d(1), d(1), d(1)]);
        let target = known(&[4], vec![d(1), d(1), sym("seq"), sym("seq")]);
        let r = Expand.infer(&[&mask, &target]).unwrap();
        assert_eq!(r[0].ty.to_string(), "bool[1, 1, seq, seq]");
        let x = fact(DType::F32, vec![sym("seq"), d(1)]);
        let t = known(&[2], vec![d(1), d(4)]);
        assert_eq!(
            Expand.infer(&[&x, &t]).unwrap()[0].ty.to_string(),
            "f32[seq, 4]"
        );
    }

    #[test]
    fn errors_and_values() {
        let x = fact(DType::F32, vec![d(3)]);
        let e = Expand.infer(&[&x, &known_i64(&[1], &[4])]).unwrap_err();
        assert!(e.0.contains("`expand` of f32[3]"), "{e}");
        let e = Expand.infer(&[&x, &known_i64(&[2], &[-1, 3])]).unwrap_err();
        assert!(e.0.contains("negative"), "{e}");
        let unknown = fact(DType::I64, vec![d(2)]);
        assert!(Expand.infer(&[&x, &unknown]).is_err());
        let t = Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]);
        assert!(eval(&Expand, &[&t, &shape(&[2])]).is_err());
        let v = known(&[1], vec![sym("seq")]);
        let r = Expand.infer(&[&v, &known_i64(&[1], &[2])]).unwrap();
        assert_eq!(r[0].dims_value().unwrap(), vec![sym("seq"), sym("seq")]);
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Expand, &[]);
    }
}
