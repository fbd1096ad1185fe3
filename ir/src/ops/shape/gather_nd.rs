//! `gather_nd`: `%y = gather_nd %data, %indices {batch_dims = 0}` picks
//! slices of `data` addressed by the index tuples in the last axis of
//! `indices` (ONNX `GatherND`).
//!
//! With `b = batch_dims`, `m = indices.shape[-1]` (static, `1..=rank(data)-b`),
//! the first `b` axes of `data` and `indices` must agree and the result has
//! shape `indices.shape[:-1] + data.shape[b+m:]`. Negative indices count
//! from the end of their axis; out-of-range ones are an error. Indices are
//! `i64` (ONNX) or `i32`.

use crate::attr::{Attr, Attrs};
use crate::dtype::DType;
use crate::ops::{bail, strides, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct GatherNd {
    pub batch_dims: i64,
}

impl GatherNd {
    /// Checks the shapes; returns `(b, m)` and the result shape.
    fn shapes(&self, data: &Shape, idx: &Shape) -> Result<(usize, usize, Shape), OpError> {
        let (r, q) = (data.rank(), idx.rank());
        if r == 0 || q == 0 {
            bail!("`gather_nd` needs data and indices of rank >= 1, got {data} and {idx}");
        }
        let b = self.batch_dims;
        if b < 0 || b as usize >= r.min(q) {
            bail!(
                "`gather_nd` batch_dims {b} must be below the ranks of data {data} and indices {idx}"
            );
        }
        let b = b as usize;
        if data.0[..b] != idx.0[..b] {
            bail!("`gather_nd` batch dims of data {data} and indices {idx} differ");
        }
        let Some(m) = idx.0[q - 1].as_fixed() else {
            bail!("`gather_nd` index tuple length (last dim of {idx}) must be static");
        };
        if m < 1 || m as usize > r - b {
            bail!(
                "`gather_nd` index tuples of length {m} do not fit data {data} with batch_dims {b}"
            );
        }
        let m = m as usize;
        let mut out = idx.0[..q - 1].to_vec();
        out.extend_from_slice(&data.0[b + m..]);
        Ok((b, m, Shape(out)))
    }
}

impl OpDef for GatherNd {
    fn mnemonic(&self) -> &'static str {
        "gather_nd"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("batch_dims", Attr::Int(self.batch_dims))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [data, idx] = inputs else {
            bail!(
                "`gather_nd` takes 2 operands (data, indices), got {}",
                inputs.len()
            );
        };
        if !matches!(idx.ty.dtype, DType::I64 | DType::I32) {
            bail!("`gather_nd` indices must be i64 or i32, got {}", idx.ty);
        }
        let (_, _, out) = self.shapes(&data.ty.shape, &idx.ty.shape)?;
        Ok(vec![Fact::new(TensorType::new(data.ty.dtype, out))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [data, idx] = inputs else {
            bail!(
                "`gather_nd` takes 2 operands (data, indices), got {}",
                inputs.len()
            );
        };
        if !idx.dtype().is_int() {
            bail!(
                "`gather_nd` indices must be i64 or i32, got {}",
                idx.dtype()
            );
        }
        let ds = data.shape();
        let to_shape = |s: &[usize]| Shape(crate::ops::static_dims(s));
        let (b, m, out) = self.shapes(&to_shape(ds), &to_shape(idx.shape()))?;
        let out = out.as_fixed().expect("static");
        let st = strides(ds);
        let batch: usize = ds[..b].iter().product();
        let batch_stride = if b == 0 { data.len() } else { st[b - 1] };
        let slice: usize = ds[b + m..].iter().product();
        let iv = idx.to_i64_vec();
        let tuples = iv.len() / m;
        let per_batch = tuples / batch.max(1);
        let mut order = Vec::with_capacity(tuples * slice);
        for (t, tuple) in iv.chunks(m).enumerate() {
            let mut base = (t / per_batch.max(1)) * batch_stride;
            for (a, &i) in tuple.iter().enumerate() {
                let n = ds[b + a] as i64;
                let j = if i < 0 { i + n } else { i };
                if j < 0 || j >= n {
                    bail!(
                        "`gather_nd` index {i} out of range for axis {} of size {n}",
                        b + a
                    );
                }
                base += j as usize * st[b + a];
            }
            order.extend(base..base + slice);
        }
        Ok(vec![Tensor::new(
            out,
            data.data().gather(order.into_iter()),
        )?])
    }
}

impl OpBuild for GatherNd {
    const MNEMONICS: &'static [&'static str] = &["gather_nd"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(GatherNd {
            batch_dims: attrs.int_or("batch_dims", 0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    fn run(b: i64, data: (Vec<usize>, Vec<i64>), idx: (Vec<usize>, Vec<i64>)) -> Tensor {
        let data = Tensor::from_i64(data.0, data.1).cast(DType::I32);
        let idx = Tensor::from_i64(idx.0, idx.1);
        eval_checked(&GatherNd { batch_dims: b }, &[&data, &idx]).remove(0)
    }

    #[test]
    fn onnx_examples() {
        let d2 = || (vec![2, 2], vec![0, 1, 2, 3]);
        let d3 = || (vec![2, 2, 2], (0..8).collect::<Vec<i64>>());
        // Example 1.
        let r = run(0, d2(), (vec![2, 2], vec![0, 0, 1, 1]));
        assert_eq!((r.shape(), r.to_i64_vec()), (&[2][..], vec![0, 3]));
        // Example 2.
        let r = run(0, d2(), (vec![2, 1], vec![1, 0]));
        assert_eq!((r.shape(), r.to_i64_vec()), (&[2, 2][..], vec![2, 3, 0, 1]));
        // Example 3.
        let r = run(0, d3(), (vec![2, 2], vec![0, 1, 1, 0]));
        assert_eq!((r.shape(), r.to_i64_vec()), (&[2, 2][..], vec![2, 3, 4, 5]));
        // Example 4.
        let r = run(0, d3(), (vec![2, 1, 2], vec![0, 1, 1, 0]));
        assert_eq!(
            (r.shape(), r.to_i64_vec()),
            (&[2, 1, 2][..], vec![2, 3, 4, 5])
        );
        // Example 5 (batch_dims = 1).
        let r = run(1, d3(), (vec![2, 1], vec![1, 0]));
        assert_eq!((r.shape(), r.to_i64_vec()), (&[2, 2][..], vec![2, 3, 4, 5]));
        // Negative index, full tuple.
        let r = run(0, d3(), (vec![1, 3], vec![-1, 0, -1]));
        assert_eq!(r.to_i64_vec(), vec![5]);
    }

    #[test]
    fn errors() {
        let data = Tensor::from_i64(vec![2, 2], vec![0, 1, 2, 3]);
        let bad = Tensor::from_i64(vec![1, 2], vec![2, 0]);
        let e = eval(&GatherNd::default(), &[&data, &bad]).unwrap_err();
        assert!(e.0.contains("index 2 out of range"), "{e}");
        let long = Tensor::from_i64(vec![1, 3], vec![0, 0, 0]);
        assert!(eval(&GatherNd::default(), &[&data, &long]).is_err());
        let mismatched = Tensor::from_i64(vec![3, 1], vec![0, 0, 0]);
        let e = eval(&GatherNd { batch_dims: 1 }, &[&data, &mismatched]).unwrap_err();
        assert!(e.0.contains("batch dims"), "{e}");
        assert!(eval(&GatherNd { batch_dims: 2 }, &[&data, &bad]).is_err());
        assert!(eval(&GatherNd { batch_dims: -1 }, &[&data, &bad]).is_err());
    }

    #[test]
    fn symbolic_shapes() {
        let data = fact(DType::F32, vec![sym("seq"), d(4), d(8)]);
        let idx = fact(DType::I64, vec![sym("seq"), d(3), d(1)]);
        let r = GatherNd { batch_dims: 1 }.infer(&[&data, &idx]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[seq, 3, 8]");
        let sym_m = fact(DType::I64, vec![d(3), sym("k")]);
        assert!(GatherNd::default().infer(&[&data, &sym_m]).is_err());
        let fidx = fact(DType::F32, vec![d(1)]);
        let e = GatherNd::default().infer(&[&data, &fidx]).unwrap_err();
        assert!(e.0.contains("f32[1]"), "{e}");
    }

    #[test]
    fn round_trip() {
        assert_round_trip(GatherNd { batch_dims: 1 }, &[]);
    }
}
