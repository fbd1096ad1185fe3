//! `gather`: picks slices along `axis` by index (ONNX `Gather`); negative
//! indices count from the end. Known integer values are gathered during
//! inference (`shape[1]` of a symbolic shape is `seq`).

use crate::attr::{Attr, Attrs};
use crate::ops::{bail, fact_maybe_dims, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gather {
    pub axis: i64,
}

/// Element indices of `data` for every output element.
fn gather_order(
    data: &[usize],
    axis: usize,
    idx: &[i64],
    idx_count: usize,
) -> Result<Vec<usize>, OpError> {
    let outer: usize = data[..axis].iter().product();
    let inner: usize = data[axis + 1..].iter().product();
    let n = data[axis] as i64;
    let mut order = Vec::with_capacity(outer * idx_count * inner);
    for o in 0..outer {
        for &i in idx {
            let j = if i < 0 { i + n } else { i };
            if j < 0 || j >= n {
                bail!("`gather` index {i} out of range for axis of size {n}");
            }
            let base = (o * data[axis] + j as usize) * inner;
            order.extend(base..base + inner);
        }
    }
    Ok(order)
}

impl OpDef for Gather {
    fn mnemonic(&self) -> &'static str {
        "gather"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("axis", Attr::Int(self.axis))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [data, idx] = inputs else {
            bail!(
                "`gather` takes 2 operands (data, indices), got {}",
                inputs.len()
            );
        };
        if !matches!(idx.ty.dtype, crate::DType::I64 | crate::DType::I32) {
            bail!("`gather` indices must be i64 or i32, got {}", idx.ty.dtype);
        }
        let axis = norm_axis(self.axis, data.ty.rank())?;
        let mut dims = data.ty.shape.0[..axis].to_vec();
        dims.extend(idx.ty.shape.0.iter().cloned());
        dims.extend(data.ty.shape.0[axis + 1..].iter().cloned());
        let ty = TensorType::new(data.ty.dtype, Shape(dims));
        let values = (|| {
            let d = data.value.as_ref()?.as_dims()?;
            let i = idx.value.as_ref()?.as_tensor(crate::DType::I64)?;
            let order = gather_order(&d.shape, axis, &i.to_i64_vec(), i.len()).ok()?;
            Some(order.into_iter().map(|k| d.values[k].clone()).collect())
        })();
        Ok(vec![fact_maybe_dims(ty, values)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [data, idx] = inputs else {
            bail!("`gather` takes 2 operands");
        };
        let axis = norm_axis(self.axis, data.rank())?;
        let order = gather_order(data.shape(), axis, &idx.to_i64_vec(), idx.len())?;
        let mut shape = data.shape()[..axis].to_vec();
        shape.extend_from_slice(idx.shape());
        shape.extend_from_slice(&data.shape()[axis + 1..]);
        let out = Tensor::new(shape, data.data().gather(order.into_iter()));
        Ok(vec![out.map_err(|e| OpError(e.to_string()))?])
    }
}

impl OpBuild for Gather {
    const MNEMONICS: &'static [&'static str] = &["gather"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Gather {
            axis: attrs.int_or("axis", 0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dim::Dim;
    use crate::ops::{shape_of::ShapeOf, Known};
    use std::sync::Arc;

    #[test]
    fn gathers_rows_with_negative_index() {
        let data = Tensor::from_f32(vec![3, 2], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let idx = Tensor::from_i64(vec![2], vec![-1, 0]);
        let r = Gather { axis: 0 }
            .eval(&[&data, &idx], &EvalCtx::default())
            .unwrap();
        assert_eq!(r[0].as_f32().unwrap(), &[5.0, 6.0, 1.0, 2.0]);
    }

    #[test]
    fn gathers_symbolic_dim_from_shape() {
        let x = Fact::new(TensorType::new(
            crate::DType::F32,
            vec![Dim::fixed(1), Dim::sym("seq")],
        ));
        let shape = ShapeOf::default().infer(&[&x]).unwrap().remove(0);
        let idx = Fact::with_value(
            TensorType::scalar(crate::DType::I64),
            Known::Tensor(Arc::new(Tensor::scalar_i64(1))),
        );
        let r = Gather { axis: 0 }.infer(&[&shape, &idx]).unwrap().remove(0);
        assert_eq!(r.ty.to_string(), "i64[]");
        assert_eq!(r.dims_value().unwrap(), vec![Dim::sym("seq")]);
    }
}
