//! `cum_sum`: `%y = cum_sum %x {axis = 1, exclusive = true, reverse = true}`
//! is the running sum along `axis` (ONNX `CumSum`). `exclusive` leaves the
//! current element out of its own sum; `reverse` sums from the end. Both
//! default to false and are printed only when true.
//!
//! Difference from ONNX: the axis is an attribute, not an operand (the
//! frontend needs it static). Floats accumulate in `f32`, integers in `i64`
//! with wrapping; `bool` is not accepted.

use crate::attr::{Attr, Attrs};
use crate::ops::{bail, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CumSum {
    pub axis: i64,
    pub exclusive: bool,
    pub reverse: bool,
}

impl CumSum {
    pub fn new(axis: i64) -> CumSum {
        CumSum {
            axis,
            exclusive: false,
            reverse: false,
        }
    }

    /// Running sums of `v` (shape `shape`) along `axis`.
    fn scan<T: Copy>(
        &self,
        v: &mut [T],
        shape: &[usize],
        axis: usize,
        zero: T,
        add: fn(T, T) -> T,
    ) {
        let n = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let outer: usize = shape[..axis].iter().product();
        for o in 0..outer {
            for i in 0..inner {
                let mut acc = zero;
                for step in 0..n {
                    let k = if self.reverse { n - 1 - step } else { step };
                    let at = (o * n + k) * inner + i;
                    let x = v[at];
                    if self.exclusive {
                        v[at] = acc;
                        acc = add(acc, x);
                    } else {
                        acc = add(acc, x);
                        v[at] = acc;
                    }
                }
            }
        }
    }
}

impl OpDef for CumSum {
    fn mnemonic(&self) -> &'static str {
        "cum_sum"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let mut a = vec![("axis", Attr::Int(self.axis))];
        if self.exclusive {
            a.push(("exclusive", Attr::Bool(true)));
        }
        if self.reverse {
            a.push(("reverse", Attr::Bool(true)));
        }
        a
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`cum_sum` takes 1 operand, got {}", inputs.len());
        };
        if !x.ty.dtype.is_float() && !x.ty.dtype.is_int() {
            bail!("`cum_sum` does not take {}", x.ty);
        }
        norm_axis(self.axis, x.ty.rank())
            .map_err(|e| OpError(format!("`cum_sum` of {}: {e}", x.ty)))?;
        Ok(vec![Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`cum_sum` takes 1 operand, got {}", inputs.len());
        };
        let axis =
            norm_axis(self.axis, x.rank()).map_err(|e| OpError(format!("`cum_sum`: {e}")))?;
        let shape = x.shape().to_vec();
        let dt = x.dtype();
        let out = if dt.is_float() {
            let mut v = x.to_f32_vec();
            self.scan(&mut v, &shape, axis, 0.0, |a, b| a + b);
            Tensor::from_f32(shape, v).cast(dt)
        } else if dt.is_int() {
            let mut v = x.to_i64_vec();
            self.scan(&mut v, &shape, axis, 0, i64::wrapping_add);
            Tensor::from_i64(shape, v).cast(dt)
        } else {
            bail!("`cum_sum` does not take {dt}");
        };
        Ok(vec![out])
    }
}

impl OpBuild for CumSum {
    const MNEMONICS: &'static [&'static str] = &["cum_sum"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(CumSum {
            axis: attrs.int("axis")?,
            exclusive: attrs.bool_or("exclusive", false)?,
            reverse: attrs.bool_or("reverse", false)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::test_util::*;

    fn run(op: CumSum, x: &Tensor) -> Vec<f32> {
        eval_checked(&op, &[x]).remove(0).to_f32_vec()
    }

    #[test]
    fn onnx_examples() {
        let x = Tensor::from_f32(vec![5], vec![1.0, 2.0, 3.0, 4.0, 5.0]);
        let op = CumSum::new(0);
        assert_eq!(run(op, &x), [1.0, 3.0, 6.0, 10.0, 15.0]);
        let ex = CumSum {
            exclusive: true,
            ..op
        };
        assert_eq!(run(ex, &x), [0.0, 1.0, 3.0, 6.0, 10.0]);
        let rev = CumSum {
            reverse: true,
            ..op
        };
        assert_eq!(run(rev, &x), [15.0, 14.0, 12.0, 9.0, 5.0]);
        let both = CumSum {
            exclusive: true,
            reverse: true,
            ..op
        };
        assert_eq!(run(both, &x), [14.0, 12.0, 9.0, 5.0, 0.0]);
        let m = Tensor::from_f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(run(CumSum::new(0), &m), [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]);
        assert_eq!(run(CumSum::new(1), &m), [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        assert_eq!(run(CumSum::new(-1), &m), [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);
        // Integers keep their dtype (int32 example).
        let i = Tensor::from_i64(vec![5], vec![1, 2, 3, 4, 5]).cast(DType::I32);
        let r = eval_checked(&CumSum::new(0), &[&i]).remove(0);
        assert_eq!(r.dtype(), DType::I32);
        assert_eq!(r.to_i64_vec(), vec![1, 3, 6, 10, 15]);
    }

    #[test]
    fn infer_checks() {
        let x = fact(DType::I64, vec![d(1), sym("seq")]);
        assert_eq!(CumSum::new(-1).infer(&[&x]).unwrap()[0].ty, x.ty);
        let e = CumSum::new(2).infer(&[&x]).unwrap_err();
        assert!(e.0.contains("`cum_sum` of i64[1, seq]"), "{e}");
        let b = fact(DType::Bool, vec![d(3)]);
        assert!(CumSum::new(0)
            .infer(&[&b])
            .unwrap_err()
            .0
            .contains("bool[3]"));
        let t = Tensor::from_bool(vec![1], vec![true]);
        assert!(eval(&CumSum::new(0), &[&t]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(CumSum::new(1), &[]);
        let op = CumSum {
            axis: -1,
            exclusive: true,
            reverse: true,
        };
        assert_round_trip(op, &[]);
    }
}
