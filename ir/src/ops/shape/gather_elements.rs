//! `gather_elements`: `%y = gather_elements %data, %indices {axis = 1}`
//! replaces, for every element of `indices`, its coordinate on `axis` by
//! the index value and reads `data` there (ONNX `GatherElements`). `data`
//! and `indices` have the same rank; the result has the shape of
//! `indices`, whose other dims must not exceed `data`'s (as onnxruntime
//! checks). Negative indices count from the end; out-of-range ones are an
//! error. Indices are `i64` or `i32`.
//!
//! With symbolic dims, an indices dim off `axis` must equal the data dim or
//! be static (then assumed to fit).

use crate::attr::{Attr, Attrs};
use crate::dtype::DType;
use crate::ops::{bail, norm_axis, strides, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct GatherElements {
    pub axis: i64,
}

impl GatherElements {
    fn check(&self, data: &Shape, idx: &Shape) -> Result<usize, OpError> {
        if data.rank() != idx.rank() || data.rank() == 0 {
            bail!("`gather_elements` data {data} and indices {idx} must have the same rank >= 1");
        }
        let axis = norm_axis(self.axis, data.rank())
            .map_err(|e| OpError(format!("`gather_elements` of {data}: {e}")))?;
        for (i, (d, n)) in data.0.iter().zip(&idx.0).enumerate() {
            let fits = match (d.as_fixed(), n.as_fixed()) {
                (Some(d), Some(n)) => n <= d,
                (_, Some(_)) => true,
                _ => d == n,
            };
            if i != axis && !fits {
                bail!("`gather_elements` indices {idx} exceed data {data} on axis {i}");
            }
        }
        Ok(axis)
    }
}

impl OpDef for GatherElements {
    fn mnemonic(&self) -> &'static str {
        "gather_elements"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("axis", Attr::Int(self.axis))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [data, idx] = inputs else {
            bail!(
                "`gather_elements` takes 2 operands (data, indices), got {}",
                inputs.len()
            );
        };
        if !matches!(idx.ty.dtype, DType::I64 | DType::I32) {
            bail!(
                "`gather_elements` indices must be i64 or i32, got {}",
                idx.ty
            );
        }
        self.check(&data.ty.shape, &idx.ty.shape)?;
        Ok(vec![Fact::new(TensorType::new(
            data.ty.dtype,
            idx.ty.shape.clone(),
        ))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [data, idx] = inputs else {
            bail!(
                "`gather_elements` takes 2 operands (data, indices), got {}",
                inputs.len()
            );
        };
        if !idx.dtype().is_int() {
            bail!(
                "`gather_elements` indices must be i64 or i32, got {}",
                idx.dtype()
            );
        }
        let to_shape = |s: &[usize]| Shape(crate::ops::static_dims(s));
        let axis = self.check(&to_shape(data.shape()), &to_shape(idx.shape()))?;
        let (ds, is) = (strides(data.shape()), strides(idx.shape()));
        let n = data.shape()[axis] as i64;
        let order = idx
            .to_i64_vec()
            .into_iter()
            .enumerate()
            .map(|(k, i)| {
                let j = if i < 0 { i + n } else { i };
                if j < 0 || j >= n {
                    bail!("`gather_elements` index {i} out of range for axis {axis} of size {n}");
                }
                // Coordinates of element k of indices, with `axis` replaced by j.
                Ok((0..is.len())
                    .map(|a| {
                        let c = if a == axis {
                            j as usize
                        } else {
                            (k / is[a]) % idx.shape()[a]
                        };
                        c * ds[a]
                    })
                    .sum())
            })
            .collect::<Result<Vec<usize>, OpError>>()?;
        Ok(vec![Tensor::new(
            idx.shape().to_vec(),
            data.data().gather(order.into_iter()),
        )?])
    }
}

impl OpBuild for GatherElements {
    const MNEMONICS: &'static [&'static str] = &["gather_elements"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(GatherElements {
            axis: attrs.int_or("axis", 0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    fn run(axis: i64, data: Tensor, idx: (Vec<usize>, Vec<i64>)) -> Tensor {
        let idx = Tensor::from_i64(idx.0, idx.1);
        eval_checked(&GatherElements { axis }, &[&data, &idx]).remove(0)
    }

    #[test]
    fn onnx_examples() {
        // Example 1: axis 1.
        let data = Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let r = run(1, data, (vec![2, 2], vec![0, 0, 1, 0]));
        assert_eq!(r.as_f32().unwrap(), &[1.0, 1.0, 4.0, 3.0]);
        // Example 2: axis 0, indices smaller than data.
        let data3 = || Tensor::from_i64(vec![3, 3], (1..=9).collect());
        let r = run(0, data3(), (vec![2, 3], vec![1, 2, 0, 2, 0, 0]));
        assert_eq!(r.shape(), &[2, 3]);
        assert_eq!(r.as_i64().unwrap(), &[4, 8, 3, 7, 2, 3]);
        // Negative indices test.
        let r = run(0, data3(), (vec![2, 3], vec![-1, -2, 0, -2, 0, 0]));
        assert_eq!(r.as_i64().unwrap(), &[7, 5, 3, 4, 2, 3]);
    }

    #[test]
    fn errors() {
        let data = Tensor::from_i64(vec![2, 2], vec![1, 2, 3, 4]);
        let idx = Tensor::from_i64(vec![1, 2], vec![0, 2]);
        let e = eval(&GatherElements { axis: 1 }, &[&data, &idx]).unwrap_err();
        assert!(e.0.contains("index 2 out of range"), "{e}");
        let wide = Tensor::from_i64(vec![1, 3], vec![0, 0, 0]);
        let e = eval(&GatherElements { axis: 0 }, &[&data, &wide]).unwrap_err();
        assert!(e.0.contains("exceed"), "{e}");
        let flat = Tensor::from_i64(vec![2], vec![0, 0]);
        assert!(eval(&GatherElements { axis: 0 }, &[&data, &flat]).is_err());
        assert!(eval(&GatherElements { axis: 2 }, &[&data, &data]).is_err());
    }

    #[test]
    fn symbolic_shapes() {
        let data = fact(DType::F32, vec![d(1), sym("seq"), d(32000)]);
        let idx = fact(DType::I64, vec![d(1), sym("seq"), d(1)]);
        let r = GatherElements { axis: -1 }.infer(&[&data, &idx]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[1, seq, 1]");
        let other = fact(DType::I64, vec![d(1), sym("past"), d(1)]);
        assert!(GatherElements { axis: -1 }.infer(&[&data, &other]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(GatherElements { axis: -1 }, &[]);
    }
}
