//! `size`: `%n = size %x` is the element count of `x` as an `i64` scalar
//! (ONNX `Size`). The value is always known at compile time, symbolically
//! when dims are symbols (`128*seq`).

use crate::attr::{Attr, Attrs};
use crate::dtype::DType;
use crate::ops::{bail, EvalCtx, Fact, Known, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Size;

impl OpDef for Size {
    fn mnemonic(&self) -> &'static str {
        "size"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`size` takes 1 operand, got {}", inputs.len());
        };
        let ty = TensorType::scalar(DType::I64);
        let n = x.ty.shape.volume();
        Ok(vec![Fact::with_value(
            ty,
            Known::from_dims(Vec::new(), vec![n]),
        )])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`size` takes 1 operand, got {}", inputs.len());
        };
        Ok(vec![Tensor::scalar_i64(x.len() as i64)])
    }
}

impl OpBuild for Size {
    const MNEMONICS: &'static [&'static str] = &["size"];

    fn build(_: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    #[test]
    fn onnx_example() {
        // ONNX `Size` doc: a [2, 3] tensor has 6 elements.
        let x = Tensor::zeros(DType::F32, vec![2, 3]);
        let r = eval_checked(&Size, &[&x]);
        assert_eq!(r[0], Tensor::scalar_i64(6));
        let s = Tensor::scalar_f32(1.0);
        assert_eq!(eval_checked(&Size, &[&s])[0], Tensor::scalar_i64(1));
    }

    #[test]
    fn symbolic_value() {
        let x = fact(DType::F16, vec![d(1), sym("seq"), d(128)]);
        let r = Size.infer(&[&x]).unwrap().remove(0);
        assert_eq!(r.ty.to_string(), "i64[]");
        assert_eq!(r.dims_value().unwrap(), vec![&sym("seq") * &d(128)]);
        assert!(Size.infer(&[]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Size, &[]);
    }
}
