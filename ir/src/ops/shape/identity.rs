//! `identity`: returns its operand unchanged (what ONNX `Identity` imports to;
//! `canonicalize` removes it).

use crate::attr::{Attr, Attrs};
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity;

impl OpDef for Identity {
    fn mnemonic(&self) -> &'static str {
        "identity"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`identity` takes 1 operand, got {}", inputs.len());
        };
        Ok(vec![(*x).clone()])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`identity` takes 1 operand");
        };
        Ok(vec![(*x).clone()])
    }
}

impl OpBuild for Identity {
    const MNEMONICS: &'static [&'static str] = &["identity"];

    fn build(_: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Identity)
    }
}
