//! `concat`: joins operands along `axis` (ONNX `Concat`). Known integer values
//! (shape vectors under construction) are concatenated during inference.

use crate::attr::{Attr, Attrs};
use crate::ops::{
    bail, fact_maybe_dims, norm_axis, strides, EvalCtx, Fact, OpBuild, OpDef, OpError,
};
use crate::shape::{Shape, TensorType};
use crate::tensor::{Tensor, TensorData};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Concat {
    pub axis: i64,
}

impl OpDef for Concat {
    fn mnemonic(&self) -> &'static str {
        "concat"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("axis", Attr::Int(self.axis))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let Some(first) = inputs.first() else {
            bail!("`concat` takes at least 1 operand");
        };
        let rank = first.ty.rank();
        let axis = norm_axis(self.axis, rank)?;
        let mut dims = first.ty.shape.0.clone();
        for f in &inputs[1..] {
            if f.ty.dtype != first.ty.dtype || f.ty.rank() != rank {
                bail!("`concat` operands disagree: {} vs {}", first.ty, f.ty);
            }
            for (i, (d, e)) in dims.iter_mut().zip(&f.ty.shape.0).enumerate() {
                if i == axis {
                    *d = &*d + e;
                } else if d != e {
                    bail!(
                        "`concat` operands differ on axis {i}: {} vs {}",
                        first.ty,
                        f.ty
                    );
                }
            }
        }
        let ty = TensorType::new(first.ty.dtype, Shape(dims));
        let values = if rank == 1 {
            inputs
                .iter()
                .map(|f| f.dims_value())
                .collect::<Option<Vec<_>>>()
                .map(|v| v.concat())
        } else {
            None
        };
        Ok(vec![fact_maybe_dims(ty, values)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let Some(first) = inputs.first() else {
            bail!("`concat` takes at least 1 operand");
        };
        let axis = norm_axis(self.axis, first.rank())?;
        for t in &inputs[1..] {
            let same_rank = t.rank() == first.rank();
            if !same_rank || (0..t.rank()).any(|i| i != axis && t.shape()[i] != first.shape()[i]) {
                bail!(
                    "`concat` operands disagree: {:?} vs {:?}",
                    first.shape(),
                    t.shape()
                );
            }
        }
        let mut out_shape = first.shape().to_vec();
        out_shape[axis] = inputs.iter().map(|t| t.shape()[axis]).sum();
        let outer: usize = out_shape[..axis].iter().product();
        // For each outer index, append each operand's contiguous block.
        let mut order = Vec::with_capacity(out_shape.iter().product());
        let mut parts = Vec::new();
        let mut base = 0;
        for t in inputs {
            let block = strides(t.shape()).get(axis).copied().unwrap_or(1) * t.shape()[axis];
            parts.push((base, block));
            base += t.len();
        }
        for o in 0..outer {
            for &(start, block) in &parts {
                order.extend(start + o * block..start + (o + 1) * block);
            }
        }
        let all = TensorData::concat(&inputs.iter().map(|t| t.data()).collect::<Vec<_>>())
            .ok_or_else(|| OpError("`concat` operands differ in dtype".into()))?;
        let data = all.gather(order.into_iter());
        Ok(vec![
            Tensor::new(out_shape, data).map_err(|e| OpError(e.to_string()))?
        ])
    }
}

impl OpBuild for Concat {
    const MNEMONICS: &'static [&'static str] = &["concat"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Concat {
            axis: attrs.int("axis")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concat_inner_axis() {
        let a = Tensor::from_i64(vec![2, 1], vec![1, 2]);
        let b = Tensor::from_i64(vec![2, 2], vec![3, 4, 5, 6]);
        let r = Concat { axis: -1 }
            .eval(&[&a, &b], &EvalCtx::default())
            .unwrap();
        assert_eq!(r[0].as_i64().unwrap(), &[1, 3, 4, 2, 5, 6]);
    }
}
