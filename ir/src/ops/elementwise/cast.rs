//! `cast`: converts element type (`%y = cast %x {to = f16}`), with ONNX `Cast`
//! semantics (see [`Tensor::cast`]). Integer values known at compile time stay
//! known through integer-to-integer casts.

use crate::attr::{Attr, Attrs};
use crate::dtype::DType;
use crate::ops::{bail, fact_maybe_dims, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cast {
    pub to: DType,
}

impl OpDef for Cast {
    fn mnemonic(&self) -> &'static str {
        "cast"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("to", Attr::DType(self.to))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`cast` takes 1 operand, got {}", inputs.len());
        };
        let ty = TensorType::new(self.to, x.ty.shape.clone());
        let dims = if x.ty.dtype.is_int() && self.to.is_int() {
            x.value.as_ref().and_then(|v| v.as_dims()).map(|s| s.values)
        } else {
            None
        };
        Ok(vec![fact_maybe_dims(ty, dims)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`cast` takes 1 operand");
        };
        Ok(vec![x.cast(self.to)])
    }
}

impl OpBuild for Cast {
    const MNEMONICS: &'static [&'static str] = &["cast"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Cast {
            to: attrs.dtype("to")?,
        })
    }
}
