//! `split`: `%a, %b = split %x {axis = -1, sizes = [seq, seq]}` cuts `x`
//! along `axis` into consecutive pieces of the given sizes, one result per
//! size (ONNX `Split`).
//!
//! Differences from ONNX: `sizes` is a mandatory attribute (the ONNX `split`
//! operand of opset 13, or the even split of `num_outputs`/no `split`, is
//! resolved by the frontend). Sizes may be symbolic; their sum must equal
//! the dim being split (`2*seq` into `seq, seq`). Evaluation reads symbol
//! values from the [`EvalCtx`]. Known values (shape vectors) are split
//! during inference.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::ops::{
    bail, fact_maybe_dims, known_dims, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError,
};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    pub axis: i64,
    pub sizes: Vec<Dim>,
}

/// Element indices of each piece of a static `shape` cut at `sizes` along `axis`.
fn pieces(shape: &[usize], axis: usize, sizes: &[usize]) -> Vec<Vec<usize>> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut start = 0;
    sizes
        .iter()
        .map(|&s| {
            let mut order = Vec::with_capacity(outer * s * inner);
            for o in 0..outer {
                let base = (o * shape[axis] + start) * inner;
                order.extend(base..base + s * inner);
            }
            start += s;
            order
        })
        .collect()
}

impl Split {
    /// Checks the sizes against the dim being split.
    fn check(&self, shape: &Shape) -> Result<usize, OpError> {
        if self.sizes.is_empty() {
            bail!("`split` needs at least one size");
        }
        let axis = norm_axis(self.axis, shape.rank())
            .map_err(|e| OpError(format!("`split` of {shape}: {e}")))?;
        if let Some(s) = self.sizes.iter().find(|s| !s.is_nonnegative()) {
            bail!("`split` size {s} may be negative");
        }
        let total = self.sizes.iter().fold(Dim::fixed(0), |a, s| &a + s);
        if total != shape.0[axis] {
            bail!(
                "`split` sizes {} add up to {total}, but axis {axis} of {shape} is {}",
                Shape(self.sizes.clone()),
                shape.0[axis]
            );
        }
        Ok(axis)
    }
}

impl OpDef for Split {
    fn mnemonic(&self) -> &'static str {
        "split"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![
            ("axis", Attr::Int(self.axis)),
            ("sizes", Attr::dims(&self.sizes)),
        ]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`split` takes 1 operand, got {}", inputs.len());
        };
        let axis = self.check(&x.ty.shape)?;
        let fixed: Option<Vec<usize>> = self
            .sizes
            .iter()
            .map(|s| s.as_fixed().map(|v| v as usize))
            .collect();
        let values = match (known_dims(x), fixed) {
            (Some(v), Some(sizes)) => Some(
                pieces(&v.shape, axis, &sizes)
                    .into_iter()
                    .map(|p| p.into_iter().map(|i| v.values[i].clone()).collect())
                    .collect::<Vec<Vec<Dim>>>(),
            ),
            _ => None,
        };
        Ok(self
            .sizes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let mut dims = x.ty.shape.0.clone();
                dims[axis] = s.clone();
                let ty = TensorType::new(x.ty.dtype, Shape(dims));
                fact_maybe_dims(ty, values.as_ref().map(|v| v[k].clone()))
            })
            .collect())
    }

    fn eval(&self, inputs: &[&Tensor], ctx: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`split` takes 1 operand, got {}", inputs.len());
        };
        let sizes = self
            .sizes
            .iter()
            .map(|s| match s.eval(&ctx.symbols) {
                Some(v) if v >= 0 => Ok(v),
                Some(v) => bail!("`split` size {s} is negative ({v})"),
                None => bail!("`split` size {s} mentions an unbound symbol"),
            })
            .collect::<Result<Vec<i64>, _>>()?;
        let split = Split {
            axis: self.axis,
            sizes: sizes.iter().map(|&v| Dim::fixed(v)).collect(),
        };
        let axis = split.check(&Shape(crate::ops::static_dims(x.shape())))?;
        let sizes: Vec<usize> = sizes.into_iter().map(|v| v as usize).collect();
        pieces(x.shape(), axis, &sizes)
            .into_iter()
            .zip(&sizes)
            .map(|(order, &s)| {
                let mut shape = x.shape().to_vec();
                shape[axis] = s;
                Ok(Tensor::new(shape, x.data().gather(order.into_iter()))?)
            })
            .collect()
    }
}

impl OpBuild for Split {
    const MNEMONICS: &'static [&'static str] = &["split"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        let axis = attrs.int_or("axis", 0)?;
        let Some(sizes) = attrs.opt_dims("sizes")? else {
            bail!("`split` needs the `sizes` attribute");
        };
        Ok(Split { axis, sizes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::test_util::*;

    #[test]
    fn onnx_examples() {
        // ONNX `Split` doc: 1-D [1..6] into [2, 4]; 2-D [2, 6] along axis 1 into [2, 4].
        let x = Tensor::from_f32(vec![6], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let op = Split {
            axis: 0,
            sizes: vec![d(2), d(4)],
        };
        let r = eval_checked(&op, &[&x]);
        assert_eq!(r[0].as_f32().unwrap(), &[1.0, 2.0]);
        assert_eq!(r[1].as_f32().unwrap(), &[3.0, 4.0, 5.0, 6.0]);
        let x = Tensor::from_i64(vec![2, 6], (1..=12).collect());
        let op = Split {
            axis: 1,
            sizes: vec![d(2), d(4)],
        };
        let r = eval_checked(&op, &[&x]);
        assert_eq!(r[0].as_i64().unwrap(), &[1, 2, 7, 8]);
        assert_eq!(r[1].as_i64().unwrap(), &[3, 4, 5, 6, 9, 10, 11, 12]);
        // Zero-size piece.
        let op = Split {
            axis: -1,
            sizes: vec![d(0), d(6)],
        };
        let r = eval_checked(&op, &[&x]);
        assert_eq!(r[0].shape(), &[2, 0]);
    }

    #[test]
    fn symbolic_sizes() {
        let x = fact(DType::F32, vec![d(1), &d(2) * &sym("seq")]);
        let op = Split {
            axis: 1,
            sizes: vec![sym("seq"), sym("seq")],
        };
        let r = op.infer(&[&x]).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].ty.to_string(), "f32[1, seq]");
        let bad = Split {
            axis: 1,
            sizes: vec![sym("seq"), d(4)],
        };
        let e = bad.infer(&[&x]).unwrap_err();
        assert!(e.0.contains("add up to seq+4"), "{e}");
        // Evaluation binds the symbols.
        let t = Tensor::from_f32(vec![1, 4], vec![1.0, 2.0, 3.0, 4.0]);
        let mut ctx = EvalCtx::default();
        assert!(op.eval(&[&t], &ctx).is_err());
        ctx.symbols.insert("seq".into(), 2);
        let r = op.eval(&[&t], &ctx).unwrap();
        assert_eq!(r[1].as_f32().unwrap(), &[3.0, 4.0]);
        ctx.symbols.insert("seq".into(), 3);
        assert!(op.eval(&[&t], &ctx).is_err());
    }

    #[test]
    fn splits_known_values() {
        let v = known(&[3], vec![d(1), sym("seq"), d(8)]);
        let op = Split {
            axis: 0,
            sizes: vec![d(2), d(1)],
        };
        let r = op.infer(&[&v]).unwrap();
        assert_eq!(r[0].dims_value().unwrap(), vec![d(1), sym("seq")]);
        assert_eq!(r[1].dims_value().unwrap(), vec![d(8)]);
    }

    #[test]
    fn round_trip() {
        let op = Split {
            axis: -1,
            sizes: vec![sym("seq"), d(3)],
        };
        assert_round_trip(op, &[]);
    }
}
