//! `squeeze`: `%y = squeeze %x {axes = [0]}` removes size-1 axes (ONNX
//! `Squeeze`, with the axes operand of opset 13 made an attribute).
//!
//! Difference from ONNX: `axes` is mandatory (ONNX removes every size-1
//! axis when it is absent, which a symbolic dim makes ambiguous; the
//! frontend lists the axes). Each squeezed dim must be a static 1. Known
//! values (shape vectors) pass through.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::ops::{
    bail, fact_maybe_dims, known_dims, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError,
};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Squeeze {
    pub axes: Vec<i64>,
}

impl Squeeze {
    /// The output dims, after checking that every squeezed dim is 1.
    fn squeezed(&self, dims: &[Dim]) -> Result<Vec<Dim>, OpError> {
        let rank = dims.len();
        let mut drop = vec![false; rank];
        for &a in &self.axes {
            let i = norm_axis(a, rank).map_err(|e| OpError(format!("`squeeze`: {e}")))?;
            if std::mem::replace(&mut drop[i], true) {
                bail!("`squeeze` axes {:?} repeat axis {i}", self.axes);
            }
            if dims[i].as_fixed() != Some(1) {
                bail!(
                    "`squeeze` axis {a} of {} has size {}, not 1",
                    Shape(dims.to_vec()),
                    dims[i]
                );
            }
        }
        Ok(dims
            .iter()
            .zip(&drop)
            .filter(|(_, &dr)| !dr)
            .map(|(d, _)| d.clone())
            .collect())
    }
}

impl OpDef for Squeeze {
    fn mnemonic(&self) -> &'static str {
        "squeeze"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("axes", Attr::ints(&self.axes))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`squeeze` takes 1 operand, got {}", inputs.len());
        };
        let dims = self.squeezed(&x.ty.shape.0)?;
        let values = known_dims(x).map(|s| s.values);
        Ok(vec![fact_maybe_dims(
            TensorType::new(x.ty.dtype, Shape(dims)),
            values,
        )])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`squeeze` takes 1 operand, got {}", inputs.len());
        };
        let dims = self.squeezed(&crate::ops::static_dims(x.shape()))?;
        let shape = Shape(dims).as_fixed().expect("static");
        Ok(vec![(*x).clone().reshaped(shape)?])
    }
}

impl OpBuild for Squeeze {
    const MNEMONICS: &'static [&'static str] = &["squeeze"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Squeeze {
            axes: attrs.ints("axes")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::test_util::*;

    #[test]
    fn onnx_example() {
        // ONNX `Squeeze` doc: [1, 3, 4, 5] with axes [0] -> [3, 4, 5];
        // negative axes: [1, 3, 1, 5] with axes [-2] -> [1, 3, 5].
        let x = Tensor::zeros(DType::F32, vec![1, 3, 4, 5]);
        let r = eval_checked(&Squeeze { axes: vec![0] }, &[&x]);
        assert_eq!(r[0].shape(), &[3, 4, 5]);
        let x = Tensor::from_i64(vec![1, 3, 1, 5], (0..15).collect());
        let r = eval_checked(&Squeeze { axes: vec![-2] }, &[&x]);
        assert_eq!(r[0].shape(), &[1, 3, 5]);
        assert_eq!(r[0].to_i64_vec(), (0..15).collect::<Vec<_>>());
    }

    #[test]
    fn symbolic_and_values() {
        let x = fact(DType::F32, vec![d(1), sym("seq"), d(1)]);
        let r = Squeeze { axes: vec![0, 2] }.infer(&[&x]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[seq]");
        let e = Squeeze { axes: vec![1] }.infer(&[&x]).unwrap_err();
        assert!(e.0.contains("has size seq, not 1"), "{e}");
        assert!(Squeeze { axes: vec![0, -3] }.infer(&[&x]).is_err());
        assert!(Squeeze { axes: vec![3] }.infer(&[&x]).is_err());
        let v = known(&[1], vec![sym("seq")]);
        let r = Squeeze { axes: vec![0] }.infer(&[&v]).unwrap().remove(0);
        assert_eq!(r.ty.to_string(), "i64[]");
        assert_eq!(r.dims_value().unwrap(), vec![sym("seq")]);
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Squeeze { axes: vec![0, -1] }, &[]);
    }
}
