//! `constant`: a value embedded in the graph.
//!
//! `%c = constant {value = [1, seq, 128]} : i64[3]` — the value is a flat
//! row-major list whose length is the element count of the result type, or a
//! single scalar that fills the whole shape. Integer constants may hold
//! symbolic dims (the result of folding shape bookkeeping).

use std::sync::Arc;

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::{bail, EvalCtx, Fact, Known, OpBuild, OpDef, OpError, SymTensor};
use crate::shape::TensorType;
use crate::tensor::{Tensor, TensorData};

/// The largest constant the text form holds inline (larger data belongs in the weight store).
pub const MAX_ELEMENTS: usize = 1 << 24;

#[derive(Clone, Debug, PartialEq)]
pub struct Constant {
    pub ty: TensorType,
    pub value: Known,
}

impl Constant {
    pub fn from_tensor(t: Tensor) -> Constant {
        Constant {
            ty: TensorType::fixed(
                t.dtype(),
                &t.shape().iter().map(|&d| d as i64).collect::<Vec<_>>(),
            ),
            value: Known::Tensor(Arc::new(t)),
        }
    }

    /// A constant from a known value of the given type.
    pub fn from_known(ty: TensorType, value: Known) -> Constant {
        Constant { ty, value }
    }
}

/// The text form of one element.
pub(crate) fn element_attr(t: &Tensor, i: usize) -> Attr {
    match t.data() {
        TensorData::F32(v) => Attr::Float(f32_as_f64(v[i])),
        TensorData::F16(v) => Attr::Float(f32_as_f64(v[i].to_f32())),
        TensorData::BF16(v) => Attr::Float(f32_as_f64(v[i].to_f32())),
        TensorData::Bool(v) => Attr::Bool(v[i]),
        _ => Attr::Int(t.get_i64(i)),
    }
}

/// The `f64` whose shortest text is the shortest text of `v` (keeps `0.1f32`
/// printing as `0.1`).
pub(crate) fn f32_as_f64(v: f32) -> f64 {
    if v.is_finite() {
        format!("{v:?}").parse().unwrap_or(v as f64)
    } else {
        v as f64
    }
}

impl OpDef for Constant {
    fn mnemonic(&self) -> &'static str {
        "constant"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let items: Vec<Attr> = match &self.value {
            Known::Tensor(t) => (0..t.len()).map(|i| element_attr(t, i)).collect(),
            Known::Dims(s) => s.values.iter().map(Attr::dim).collect(),
        };
        let value = match items.first() {
            Some(first) if items.iter().all(|a| a == first) && !self.ty.shape.dims().is_empty() => {
                first.clone()
            }
            Some(first) if self.ty.shape.dims().is_empty() => first.clone(),
            _ => Attr::List(items),
        };
        vec![("value", value)]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        crate::ops::check_arity("constant", inputs.len(), 0, 0)?;
        Ok(vec![Fact::with_value(self.ty.clone(), self.value.clone())])
    }

    fn eval(&self, _inputs: &[&Tensor], ctx: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        match &self.value {
            Known::Tensor(t) => Ok(vec![(**t).clone()]),
            Known::Dims(s) => {
                let vals = s
                    .values
                    .iter()
                    .map(|d| {
                        d.eval(&ctx.symbols)
                            .ok_or_else(|| OpError(format!("symbol in `{d}` is not bound")))
                    })
                    .collect::<Result<Vec<i64>, _>>()?;
                Ok(vec![
                    Tensor::from_i64(s.shape.clone(), vals).cast(self.ty.dtype)
                ])
            }
        }
    }
}

impl OpBuild for Constant {
    const MNEMONICS: &'static [&'static str] = &["constant"];

    fn build(_: &str, attrs: &mut Attrs, results: &[TensorType]) -> Result<Self, OpError> {
        let [ty] = results else {
            bail!("`constant` has exactly one result");
        };
        let Some(shape) = ty.shape.as_fixed() else {
            bail!("`constant` needs a static shape, got {}", ty.shape);
        };
        let n = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= MAX_ELEMENTS)
            .ok_or_else(|| {
                OpError(format!(
                    "`constant` of type {ty} is too large to hold inline"
                ))
            })?;
        let items = match attrs.raw("value")? {
            Attr::List(items) => items,
            scalar => vec![scalar; n],
        };
        if items.len() != n {
            bail!(
                "`constant` of type {ty} needs {n} values, found {}",
                items.len()
            );
        }
        if items.iter().any(|a| matches!(a, Attr::Dim(_))) {
            if !ty.dtype.is_int() {
                bail!("symbolic dims need an integer constant, not {}", ty.dtype);
            }
            let values = items
                .into_iter()
                .map(|a| match a {
                    Attr::Int(v) => Ok(Dim::fixed(v)),
                    Attr::Dim(d) => Ok(d),
                    other => Err(OpError(format!("`{other}` in a dims constant"))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Constant::from_known(
                ty.clone(),
                Known::Dims(SymTensor { shape, values }),
            ));
        }
        let tensor = if ty.dtype.is_int() {
            let v = items
                .iter()
                .map(|a| match a {
                    Attr::Int(v) => Ok(*v),
                    other => Err(OpError(format!("`{other}` in an integer constant"))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Tensor::from_i64(shape, v).cast(ty.dtype)
        } else {
            let v = items
                .iter()
                .map(|a| match (a, ty.dtype) {
                    (Attr::Bool(b), DType::Bool) => Ok(*b as u8 as f64),
                    (Attr::Float(f), d) if d.is_float() => Ok(*f),
                    (Attr::Int(i), d) if d.is_float() => Ok(*i as f64),
                    (other, d) => Err(OpError(format!("`{other}` in a {d} constant"))),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Tensor::from_f64(ty.dtype, shape, &v).map_err(|e| OpError(e.to_string()))?
        };
        Ok(Constant::from_tensor(tensor))
    }
}
