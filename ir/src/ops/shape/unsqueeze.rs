//! `unsqueeze`: inserts size-1 axes at `axes` (positions in the output, ONNX
//! `Unsqueeze` with the axes made an attribute). Known values pass through.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::ops::{bail, fact_maybe_dims, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unsqueeze {
    pub axes: Vec<i64>,
}

/// The output dims: `dims` with 1s inserted at `axes`.
fn unsqueezed(dims: &[Dim], axes: &[i64]) -> Result<Vec<Dim>, OpError> {
    let rank = dims.len() + axes.len();
    let mut pos = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<Result<Vec<_>, _>>()?;
    pos.sort_unstable();
    if pos.windows(2).any(|w| w[0] == w[1]) {
        bail!("`unsqueeze` axes {axes:?} repeat");
    }
    let mut src = dims.iter();
    Ok((0..rank)
        .map(|i| {
            if pos.binary_search(&i).is_ok() {
                Dim::fixed(1)
            } else {
                src.next().cloned().expect("ranks add up")
            }
        })
        .collect())
}

impl OpDef for Unsqueeze {
    fn mnemonic(&self) -> &'static str {
        "unsqueeze"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("axes", Attr::ints(&self.axes))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`unsqueeze` takes 1 operand, got {}", inputs.len());
        };
        let dims = unsqueezed(&x.ty.shape.0, &self.axes)?;
        let values = x.value.as_ref().and_then(|v| v.as_dims()).map(|s| s.values);
        Ok(vec![fact_maybe_dims(
            TensorType::new(x.ty.dtype, Shape(dims)),
            values,
        )])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`unsqueeze` takes 1 operand");
        };
        let dims: Vec<Dim> = x.shape().iter().map(|&d| Dim::fixed(d as i64)).collect();
        let shape = Shape(unsqueezed(&dims, &self.axes)?)
            .as_fixed()
            .expect("static");
        Ok(vec![(*x)
            .clone()
            .reshaped(shape)
            .map_err(|e| OpError(e.to_string()))?])
    }
}

impl OpBuild for Unsqueeze {
    const MNEMONICS: &'static [&'static str] = &["unsqueeze"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Unsqueeze {
            axes: attrs.ints("axes")?,
        })
    }
}
