//! `shape`: the shape of its operand as an `i64` vector (ONNX `Shape`, with
//! optional `start`/`end`). The value is always known at compile time,
//! symbolically where dims are symbols.

use crate::attr::{Attr, Attrs};
use crate::dtype::DType;
use crate::ops::{bail, EvalCtx, Fact, Known, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ShapeOf {
    pub start: i64,
    pub end: Option<i64>,
}

impl ShapeOf {
    /// The axis range `[start, end)` selected for an operand of `rank`,
    /// clamped as ONNX specifies.
    fn range(&self, rank: usize) -> (usize, usize) {
        let r = rank as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let s = clamp(self.start);
        let e = clamp(self.end.unwrap_or(r));
        (s, e.max(s))
    }
}

impl OpDef for ShapeOf {
    fn mnemonic(&self) -> &'static str {
        "shape"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let mut a = Vec::new();
        if self.start != 0 {
            a.push(("start", Attr::Int(self.start)));
        }
        if let Some(e) = self.end {
            a.push(("end", Attr::Int(e)));
        }
        a
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`shape` takes 1 operand, got {}", inputs.len());
        };
        let (s, e) = self.range(x.ty.rank());
        let dims = x.ty.shape.0[s..e].to_vec();
        let ty = TensorType::fixed(DType::I64, &[dims.len() as i64]);
        Ok(vec![Fact::with_value(
            ty,
            Known::from_dims(vec![dims.len()], dims),
        )])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`shape` takes 1 operand");
        };
        let (s, e) = self.range(x.rank());
        let v: Vec<i64> = x.shape()[s..e].iter().map(|&d| d as i64).collect();
        Ok(vec![Tensor::from_i64(vec![v.len()], v)])
    }
}

impl OpBuild for ShapeOf {
    const MNEMONICS: &'static [&'static str] = &["shape"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(ShapeOf {
            start: attrs.int_or("start", 0)?,
            end: attrs.opt_int("end")?,
        })
    }
}
