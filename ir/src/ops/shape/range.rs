//! `range`: `%r = range %start, %limit, %delta` is the 1-D sequence
//! `start, start + delta, ...` stopping before `limit` (ONNX `Range`), of
//! length `max(ceil((limit - start) / delta), 0)`. The three operands are
//! scalars (shape `[]`, or `[1]` as some exporters write) of one dtype,
//! `f32`, `i64` or `i32`, which the result has. Float elements are
//! accumulated (`value += delta`) in `f32`, as onnxruntime does.
//!
//! Difference from ONNX: the length must be known at compile time. It is
//! symbolic when `delta` is a static `1` (or `-1`) and `limit - start` is a
//! dim that grows with its symbols (`range(0, seq, 1)` has length `seq`,
//! `range(past, past + seq, 1)` too); otherwise all three values must be
//! static. When they are and the result has at most [`MAX_KNOWN`] elements,
//! its value is propagated.

use std::sync::Arc;

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::{bail, EvalCtx, Fact, Known, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

/// Largest result whose value inference propagates.
pub const MAX_KNOWN: usize = 1024;

/// Largest result evaluation builds (guards against absurd lengths).
const MAX_LEN: u64 = 1 << 31;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Range;

/// Length of an integer range, with ONNX's rounding.
fn int_len(start: i64, limit: i64, delta: i64) -> Result<u64, OpError> {
    if delta == 0 {
        bail!("`range` delta is 0");
    }
    let (span, delta) = (limit as i128 - start as i128, delta as i128);
    let n = if (span > 0) == (delta > 0) && span != 0 {
        (span.abs() + delta.abs() - 1) / delta.abs()
    } else {
        0
    };
    if n as u64 > MAX_LEN {
        bail!("`range` of {n} elements is too long");
    }
    Ok(n as u64)
}

/// Length of a float range, computed as onnxruntime does.
fn float_len(start: f32, limit: f32, delta: f32) -> Result<u64, OpError> {
    if delta == 0.0 {
        bail!("`range` delta is 0");
    }
    let n = (((limit - start) as f64) / delta as f64).ceil();
    if n.is_nan() || n > MAX_LEN as f64 {
        bail!("`range` from {start} to {limit} by {delta} has no sensible length");
    }
    Ok(n.max(0.0) as u64)
}

fn int_values(start: i64, delta: i64, n: u64) -> Vec<i64> {
    (0..n as i64)
        .map(|i| start.wrapping_add(i.wrapping_mul(delta)))
        .collect()
}

fn float_values(start: f32, delta: f32, n: u64) -> Vec<f32> {
    let mut v = Vec::with_capacity(n as usize);
    let mut x = start;
    for _ in 0..n {
        v.push(x);
        x += delta;
    }
    v
}

fn is_scalar_like(shape: &Shape) -> bool {
    shape.rank() == 0 || (shape.rank() == 1 && shape.0[0].as_fixed() == Some(1))
}

impl Range {
    /// Length (and value, when static and small) for integer operands.
    fn infer_int(&self, f: [&Fact; 3], dtype: DType) -> Result<Fact, OpError> {
        let [start, limit, delta] = f.map(|f| f.dims_value().and_then(|v| v.first().cloned()));
        let Some(step) = delta.as_ref().and_then(Dim::as_fixed) else {
            bail!("`range` delta must be a static value");
        };
        let (Some(start), Some(limit)) = (start, limit) else {
            bail!("`range` start and limit must be known at compile time");
        };
        if let (Some(s), Some(l)) = (start.as_fixed(), limit.as_fixed()) {
            let n = int_len(s, l, step)?;
            let ty = TensorType::fixed(dtype, &[n as i64]);
            if n as usize > MAX_KNOWN {
                return Ok(Fact::new(ty));
            }
            let t = Tensor::from_i64(vec![n as usize], int_values(s, step, n)).cast(dtype);
            return Ok(Fact::with_value(ty, Known::Tensor(Arc::new(t))));
        }
        let span = if step == 1 {
            &limit - &start
        } else {
            &start - &limit
        };
        let grows = (&span - &Dim::fixed(span.constant_term())).is_nonnegative();
        if !(step == 1 || step == -1) || !grows {
            bail!("`range` from {start} to {limit} by {step} has no length known at compile time");
        }
        Ok(Fact::new(TensorType::new(dtype, vec![span])))
    }
}

impl OpDef for Range {
    fn mnemonic(&self) -> &'static str {
        "range"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let &[start, limit, delta] = inputs else {
            bail!(
                "`range` takes 3 operands (start, limit, delta), got {}",
                inputs.len()
            );
        };
        let dtype = start.ty.dtype;
        for f in [start, limit, delta] {
            if f.ty.dtype != dtype || !is_scalar_like(&f.ty.shape) {
                bail!(
                    "`range` operands must be scalars of one dtype, got {}, {} and {}",
                    start.ty,
                    limit.ty,
                    delta.ty
                );
            }
        }
        let fact = match dtype {
            DType::I64 | DType::I32 => self.infer_int([start, limit, delta], dtype)?,
            DType::F32 => {
                let vals: Option<Vec<f32>> = [start, limit, delta]
                    .iter()
                    .map(|f| Some(f.value.as_ref()?.as_tensor(dtype)?.to_f32_vec()[0]))
                    .collect();
                let Some(v) = vals else {
                    bail!("`range` over f32 needs static start, limit and delta");
                };
                let n = float_len(v[0], v[1], v[2])?;
                let ty = TensorType::fixed(dtype, &[n as i64]);
                if n as usize > MAX_KNOWN {
                    Fact::new(ty)
                } else {
                    let t = Tensor::from_f32(vec![n as usize], float_values(v[0], v[2], n));
                    Fact::with_value(ty, Known::Tensor(Arc::new(t)))
                }
            }
            d => bail!("`range` does not take {d} (f32, i64 or i32)"),
        };
        Ok(vec![fact])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let &[start, limit, delta] = inputs else {
            bail!(
                "`range` takes 3 operands (start, limit, delta), got {}",
                inputs.len()
            );
        };
        let dtype = start.dtype();
        if [start, limit, delta]
            .iter()
            .any(|t| t.dtype() != dtype || t.len() != 1 || t.rank() > 1)
        {
            bail!("`range` operands must be scalars of one dtype");
        }
        let out = match dtype {
            DType::I64 | DType::I32 => {
                let (s, l, d) = (start.get_i64(0), limit.get_i64(0), delta.get_i64(0));
                let n = int_len(s, l, d)?;
                Tensor::from_i64(vec![n as usize], int_values(s, d, n)).cast(dtype)
            }
            DType::F32 => {
                let (s, l, d) = (
                    start.get_f64(0) as f32,
                    limit.get_f64(0) as f32,
                    delta.get_f64(0) as f32,
                );
                let n = float_len(s, l, d)?;
                Tensor::from_f32(vec![n as usize], float_values(s, d, n))
            }
            d => bail!("`range` does not take {d} (f32, i64 or i32)"),
        };
        Ok(vec![out])
    }
}

impl OpBuild for Range {
    const MNEMONICS: &'static [&'static str] = &["range"];

    fn build(_: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    fn run(s: Tensor, l: Tensor, d: Tensor) -> Tensor {
        eval_checked(&Range, &[&s, &l, &d]).remove(0)
    }

    #[test]
    fn onnx_examples() {
        // ONNX `Range` docs: (3, 9, 3) -> [3, 6]; (10, 4, -2) -> [10, 8, 6];
        // float (1, 5, 2) -> [1, 3]; int32 (10, 6, -3) -> [10, 7].
        let i = Tensor::scalar_i64;
        assert_eq!(run(i(3), i(9), i(3)).as_i64().unwrap(), &[3, 6]);
        assert_eq!(run(i(10), i(4), i(-2)).as_i64().unwrap(), &[10, 8, 6]);
        let f = Tensor::scalar_f32;
        assert_eq!(run(f(1.0), f(5.0), f(2.0)).as_f32().unwrap(), &[1.0, 3.0]);
        let i32s = |v| Tensor::scalar_i64(v).cast(DType::I32);
        let r = run(i32s(10), i32s(6), i32s(-3));
        assert_eq!(r.dtype(), DType::I32);
        assert_eq!(r.to_i64_vec(), vec![10, 7]);
        // Empty ranges.
        assert_eq!(run(i(5), i(1), i(1)).shape(), &[0]);
        assert_eq!(run(f(1.0), f(0.5), f(0.25)).shape(), &[0]);
        // Non-integral float steps.
        let r = run(f(0.0), f(1.0), f(0.3));
        assert_eq!(r.as_f32().unwrap(), &[0.0, 0.3, 0.6, 0.90000004]);
    }

    #[test]
    fn symbolic_lengths() {
        let zero = known_i64(&[], &[0]);
        let one = known_i64(&[], &[1]);
        let seq = known(&[], vec![sym("seq")]);
        let r = Range.infer(&[&zero, &seq, &one]).unwrap();
        assert_eq!(r[0].ty.to_string(), "i64[seq]");
        let past = known(&[], vec![sym("past")]);
        let end = known(&[], vec![&sym("past") + &sym("seq")]);
        let r = Range.infer(&[&past, &end, &one]).unwrap();
        assert_eq!(r[0].ty.to_string(), "i64[seq]");
        let two = known_i64(&[], &[2]);
        let e = Range.infer(&[&zero, &seq, &two]).unwrap_err();
        assert!(e.0.contains("no length known"), "{e}");
        let e = Range.infer(&[&seq, &zero, &one]).unwrap_err();
        assert!(e.0.contains("from seq to 0"), "{e}");
        let unknown = fact(DType::I64, vec![]);
        assert!(Range.infer(&[&zero, &unknown, &one]).is_err());
    }

    #[test]
    fn static_values_propagate_and_errors() {
        let r = Range
            .infer(&[
                &known_i64(&[], &[0]),
                &known_i64(&[1], &[4]),
                &known_i64(&[], &[2]),
            ])
            .unwrap();
        assert_eq!(r[0].dims_value().unwrap(), vec![d(0), d(2)]);
        let i = Tensor::scalar_i64;
        assert!(eval(&Range, &[&i(0), &i(4), &i(0)]).is_err());
        assert!(eval(&Range, &[&i(0), &i(i64::MAX), &i(1)]).is_err());
        let f = Tensor::scalar_f32;
        assert!(eval(&Range, &[&f(0.0), &f(f32::INFINITY), &f(1.0)]).is_err());
        assert!(eval(&Range, &[&f(0.0), &i(4), &f(1.0)]).is_err());
        let a = fact(DType::F32, vec![]);
        let b = fact(DType::I64, vec![]);
        let e = Range.infer(&[&a, &b, &a]).unwrap_err();
        assert!(e.0.contains("f32[], i64[] and f32[]"), "{e}");
        let h = fact(DType::F16, vec![]);
        assert!(Range.infer(&[&h, &h, &h]).unwrap_err().0.contains("f16"));
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Range, &[]);
    }
}
