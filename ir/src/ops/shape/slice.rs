//! `slice`: `%y = slice %data, %starts, %ends[, %axes[, %steps]]` with ONNX
//! `Slice` (opset 13) semantics. `starts`, `ends`, `axes` and `steps` are
//! 1-D `i64`/`i32` operands; `axes` defaults to `0..len(starts)` and `steps`
//! to 1. Negative starts/ends count from the end of the axis; both are then
//! clamped (to `[0, dim]` for positive steps, to `[0, dim-1]` and
//! `[-1, dim-1]` for negative ones), so `INT64_MAX`/`INT64_MIN` mean "to the
//! end"/"to the beginning". A step of 0 is an error, as are repeated axes.
//!
//! Difference from ONNX: an omitted `axes` given with `steps` (ONNX's empty
//! input name) is not expressible; the frontend writes out the default axes.
//!
//! Inference needs the values of `starts`, `ends`, `axes` and `steps` at
//! compile time (`axes` and `steps` static; `starts`/`ends` possibly
//! symbolic). With static dims and indices the ONNX rules apply exactly.
//! With symbolic dims or indices, the cases exporters write are supported,
//! everything else fails inference:
//! - a static index `i >= 0` into a symbolic dim `d` is taken as `i`, a
//!   negative one as `d + i` (the dim is assumed long enough);
//! - a static index `>= 2^31 - 1` (`INT32_MAX`, `INT64_MAX`) means the end
//!   of the axis, one `<= -(2^31 - 1)` the beginning;
//! - a symbolic index equal to the dim means the end of the axis;
//! - another symbolic index (`seq` into a static `[max_pos, d]` cos cache,
//!   `past` into a `past+seq` axis) is taken as is when it is provably
//!   non-negative and, for a symbolic dim, provably at most the dim;
//! - a symbolic length needs a step of 1 (or -1) and must grow with the
//!   symbols (`seq - 1` is accepted, `2048 - seq` is not).
//!
//! Known values (shape slicing such as `slice(shape(x), [0], [2])`) are
//! sliced during inference.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::{bail, check_arity, fact_maybe_dims, known_dims, norm_axis, strides};
use crate::ops::{EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Slice;

/// Indices at or beyond this magnitude mean "past the end" / "before the
/// beginning" of a symbolic axis.
const HUGE: i64 = i32::MAX as i64;

/// How one axis is sliced: first index taken, result length, step.
#[derive(Clone, Debug, PartialEq)]
struct AxisSlice {
    start: Dim,
    len: Dim,
    step: i64,
}

/// ONNX normalisation and clamping of a static index into a static axis
/// of size `d`: within `[0, d]` for positive steps; `[0, d-1]` (starts) or
/// `[-1, d-1]` (ends) for negative ones.
fn clamp_index(d: i64, v: i64, step: i64, is_end: bool) -> i64 {
    let (d, v) = (d as i128, v as i128);
    let v = if v < 0 { v + d } else { v };
    let (lo, hi) = if step > 0 {
        (0, d)
    } else if is_end || d == 0 {
        (-1, d - 1)
    } else {
        (0, d - 1)
    };
    v.clamp(lo, hi) as i64
}

/// The position a (possibly symbolic) index stands for on axis `d`:
/// within `[0, d]` for positive steps, `[-1, d-1]` for negative ones.
fn position(d: &Dim, v: &Dim, step: i64, is_end: bool) -> Option<Dim> {
    let one = Dim::fixed(1);
    if let Some(v) = v.as_fixed() {
        return Some(match () {
            _ if v >= HUGE => {
                if step > 0 {
                    d.clone()
                } else {
                    d - &one
                }
            }
            _ if v <= -HUGE => Dim::fixed(if step < 0 && is_end { -1 } else { 0 }),
            _ if v >= 0 => Dim::fixed(v),
            _ => d + &Dim::fixed(v),
        });
    }
    if v == d {
        return Some(if step > 0 { d.clone() } else { d - &one });
    }
    let in_range = v.is_nonnegative() && (d.is_fixed() || (d - v).is_nonnegative());
    (step > 0 && in_range).then(|| v.clone())
}

/// Resolves one axis of size `d` sliced by `start..end` with `step`.
fn resolve(d: &Dim, start: &Dim, end: &Dim, step: i64) -> Result<AxisSlice, String> {
    if step == 0 {
        return Err("step is 0".into());
    }
    let pos = |v: &Dim, is_end| match (d.as_fixed(), v.as_fixed()) {
        (Some(dv), Some(iv)) => Some(Dim::fixed(clamp_index(dv, iv, step, is_end))),
        _ => position(d, v, step, is_end),
    };
    let (Some(s), Some(e)) = (pos(start, false), pos(end, true)) else {
        return Err(format!(
            "cannot resolve start {start} / end {end} (step {step}) on an axis of size {d}"
        ));
    };
    let span = if step > 0 { &e - &s } else { &s - &e };
    let len = match span.as_fixed() {
        Some(n) if n <= 0 => Dim::fixed(0),
        Some(n) => Dim::fixed(((n as i128 - 1) / (step as i128).abs() + 1) as i64),
        None => {
            let grows = (&span - &Dim::fixed(span.constant_term())).is_nonnegative();
            if !(step == 1 || step == -1) || !grows {
                return Err(format!(
                    "cannot decide the length of start {start} / end {end} (step {step}) \
                     on an axis of size {d}"
                ));
            }
            span
        }
    };
    Ok(AxisSlice {
        start: s,
        len,
        step,
    })
}

/// The sliced axes of `shape`: one entry per axis (unsliced ones whole).
fn plan(
    shape: &Shape,
    starts: &[Dim],
    ends: &[Dim],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<AxisSlice>, OpError> {
    let rank = shape.rank();
    let n = starts.len();
    if ends.len() != n {
        bail!("`slice` has {n} starts but {} ends", ends.len());
    }
    let default_axes: Vec<i64> = (0..n as i64).collect();
    let axes = axes.unwrap_or(&default_axes);
    let ones = vec![1; n];
    let steps = steps.unwrap_or(&ones);
    if axes.len() != n || steps.len() != n {
        bail!(
            "`slice` has {n} starts/ends but {} axes and {} steps",
            axes.len(),
            steps.len()
        );
    }
    let mut out: Vec<Option<AxisSlice>> = vec![None; rank];
    for i in 0..n {
        let ax =
            norm_axis(axes[i], rank).map_err(|e| OpError(format!("`slice` of {shape}: {e}")))?;
        if out[ax].is_some() {
            bail!("`slice` axes {axes:?} repeat axis {ax}");
        }
        let r = resolve(&shape.0[ax], &starts[i], &ends[i], steps[i])
            .map_err(|e| OpError(format!("`slice` of {shape}, axis {ax}: {e}")))?;
        out[ax] = Some(r);
    }
    Ok(out
        .into_iter()
        .zip(&shape.0)
        .map(|(s, d)| {
            s.unwrap_or(AxisSlice {
                start: Dim::fixed(0),
                len: d.clone(),
                step: 1,
            })
        })
        .collect())
}

/// Element indices of a static `shape` picked by a static plan.
fn slice_order(shape: &[usize], plan: &[AxisSlice]) -> Option<(Vec<usize>, Vec<usize>)> {
    let st = strides(shape);
    let mut starts = Vec::new();
    let mut out = Vec::new();
    for p in plan {
        starts.push(p.start.as_fixed()?);
        out.push(usize::try_from(p.len.as_fixed()?).ok()?);
    }
    let n: usize = out.iter().product();
    let mut order = Vec::with_capacity(n);
    let mut idx = vec![0i64; out.len()];
    for _ in 0..n {
        let k: i64 = (0..out.len())
            .map(|a| (starts[a] + idx[a] * plan[a].step) * st[a] as i64)
            .sum();
        order.push(k as usize);
        for ax in (0..out.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < out[ax] as i64 {
                break;
            }
            idx[ax] = 0;
        }
    }
    Some((order, out))
}

fn is_index_type(ty: &TensorType) -> bool {
    matches!(ty.dtype, DType::I64 | DType::I32) && ty.rank() == 1
}

impl OpDef for Slice {
    fn mnemonic(&self) -> &'static str {
        "slice"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        check_arity("slice", inputs.len(), 3, 5)?;
        let data = inputs[0];
        let names = ["starts", "ends", "axes", "steps"];
        let mut values = Vec::new();
        for (name, f) in names.iter().zip(&inputs[1..]) {
            if !is_index_type(&f.ty) {
                bail!("`slice` {name} must be i64[n] or i32[n], got {}", f.ty);
            }
            let Some(v) = f.dims_value() else {
                bail!("`slice` {name} must be known at compile time");
            };
            values.push(v);
        }
        let statics = |k: usize| -> Result<Option<Vec<i64>>, OpError> {
            let Some(v) = values.get(k) else {
                return Ok(None);
            };
            match v.iter().map(Dim::as_fixed).collect::<Option<Vec<i64>>>() {
                Some(v) => Ok(Some(v)),
                None => bail!(
                    "`slice` {} must be static, got {}",
                    names[k],
                    Shape(v.clone())
                ),
            }
        };
        let (axes, steps) = (statics(2)?, statics(3)?);
        let plan = plan(
            &data.ty.shape,
            &values[0],
            &values[1],
            axes.as_deref(),
            steps.as_deref(),
        )?;
        let dims = plan.iter().map(|p| p.len.clone()).collect();
        let ty = TensorType::new(data.ty.dtype, Shape(dims));
        let known = known_dims(data).and_then(|v| {
            let (order, _) = slice_order(&v.shape, &plan)?;
            Some(order.into_iter().map(|i| v.values[i].clone()).collect())
        });
        Ok(vec![fact_maybe_dims(ty, known)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        check_arity("slice", inputs.len(), 3, 5)?;
        let data = inputs[0];
        for (name, t) in ["starts", "ends", "axes", "steps"].iter().zip(&inputs[1..]) {
            if !matches!(t.dtype(), DType::I64 | DType::I32) || t.rank() != 1 {
                bail!(
                    "`slice` {name} must be i64[n] or i32[n], got {}{:?}",
                    t.dtype(),
                    t.shape()
                );
            }
        }
        let dims =
            |t: &Tensor| -> Vec<Dim> { t.to_i64_vec().into_iter().map(Dim::fixed).collect() };
        let axes = inputs.get(3).map(|t| t.to_i64_vec());
        let steps = inputs.get(4).map(|t| t.to_i64_vec());
        let shape = Shape(crate::ops::static_dims(data.shape()));
        let plan = plan(
            &shape,
            &dims(inputs[1]),
            &dims(inputs[2]),
            axes.as_deref(),
            steps.as_deref(),
        )?;
        let (order, out) = slice_order(data.shape(), &plan).expect("static plan");
        Ok(vec![Tensor::new(
            out,
            data.data().gather(order.into_iter()),
        )?])
    }
}

impl OpBuild for Slice {
    const MNEMONICS: &'static [&'static str] = &["slice"];

    fn build(_: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    fn i64s(v: &[i64]) -> Tensor {
        Tensor::from_i64(vec![v.len()], v.to_vec())
    }

    /// `np.arange(20*10*5).reshape(20, 10, 5)`, the ONNX Slice test input.
    fn onnx_x() -> Tensor {
        Tensor::from_f32(vec![20, 10, 5], (0..1000).map(|v| v as f32).collect())
    }

    /// `x[r0, r1, r2]` on the ONNX test input, by brute force.
    fn reference(x: &Tensor, ranges: [Vec<usize>; 3]) -> Vec<f32> {
        let v = x.as_f32().unwrap();
        let mut out = Vec::new();
        for &i in &ranges[0] {
            for &j in &ranges[1] {
                for &k in &ranges[2] {
                    out.push(v[i * 50 + j * 5 + k]);
                }
            }
        }
        out
    }

    fn run(x: &Tensor, ops: &[&[i64]]) -> Tensor {
        let ts: Vec<Tensor> = ops.iter().map(|v| i64s(v)).collect();
        let mut inputs = vec![x];
        inputs.extend(ts.iter());
        eval_checked(&Slice, &inputs).remove(0)
    }

    #[test]
    fn onnx_examples() {
        let x = onnx_x();
        let all = |n: usize| (0..n).collect::<Vec<_>>();
        // test_slice: x[0:3, 0:10], axes [0, 1], steps [1, 1].
        let r = run(&x, &[&[0, 0], &[3, 10], &[0, 1], &[1, 1]]);
        assert_eq!(r.shape(), &[3, 10, 5]);
        assert_eq!(
            r.as_f32().unwrap(),
            reference(&x, [all(3), all(10), all(5)])
        );
        // test_slice_default_axes: x[:, :, 3:4].
        let r = run(&x, &[&[0, 0, 3], &[20, 10, 4]]);
        assert_eq!(r.shape(), &[20, 10, 1]);
        // test_slice_end_out_of_bounds: x[:, 1:1000].
        let r = run(&x, &[&[1], &[1000], &[1], &[1]]);
        assert_eq!(r.shape(), &[20, 9, 5]);
        assert_eq!(
            r.as_f32().unwrap(),
            reference(&x, [all(20), (1..10).collect(), all(5)])
        );
        // test_slice_neg: x[:, 0:-1].
        let r = run(&x, &[&[0], &[-1], &[1], &[1]]);
        assert_eq!(r.shape(), &[20, 9, 5]);
        // test_slice_neg_steps: x[20:0:-1, 10:0:-3, 4:1:-2].
        let r = run(&x, &[&[20, 10, 4], &[0, 0, 1], &[0, 1, 2], &[-1, -3, -2]]);
        assert_eq!(r.shape(), &[19, 3, 2]);
        let want = reference(&x, [(1..20).rev().collect(), vec![9, 6, 3], vec![4, 2]]);
        assert_eq!(r.as_f32().unwrap(), want);
        // test_slice_negative_axes: x[:, :, 3:4] with axes [0, -2, -1].
        let r = run(&x, &[&[0, 0, 3], &[20, 10, 4], &[0, -2, -1]]);
        assert_eq!(r.shape(), &[20, 10, 1]);
        // test_slice_start_out_of_bounds: x[:, 1000:1000] is empty.
        let r = run(&x, &[&[1000], &[1000], &[1], &[1]]);
        assert_eq!(r.shape(), &[20, 0, 5]);
        // Doc example 2: data [[1,2,3,4],[5,6,7,8]], starts [0,1], ends [-1,1000].
        let d2 = Tensor::from_i64(vec![2, 4], (1..=8).collect());
        let r = run(&d2, &[&[0, 1], &[-1, 1000]]);
        assert_eq!(r.as_i64().unwrap(), &[2, 3, 4]);
        // Doc example 1: axes [0,1], starts [1,0], ends [2,3], steps [1,2].
        let r = run(&d2, &[&[1, 0], &[2, 3], &[0, 1], &[1, 2]]);
        assert_eq!(r.as_i64().unwrap(), &[5, 7]);
    }

    #[test]
    fn int64_extremes_and_reverse() {
        let x = Tensor::from_i64(vec![5], (0..5).collect());
        let r = run(&x, &[&[i64::MIN], &[i64::MAX]]);
        assert_eq!(r.as_i64().unwrap(), &[0, 1, 2, 3, 4]);
        let r = run(&x, &[&[-1], &[i64::MIN], &[0], &[-1]]);
        assert_eq!(r.as_i64().unwrap(), &[4, 3, 2, 1, 0]);
        let r = run(&x, &[&[i64::MAX], &[i64::MIN], &[0], &[i64::MIN]]);
        assert_eq!(r.as_i64().unwrap(), &[4]);
        let r = run(&x, &[&[1], &[4], &[0], &[i64::MAX]]);
        assert_eq!(r.as_i64().unwrap(), &[1]);
        let e = Tensor::from_i64(vec![0], vec![]);
        let r = run(&e, &[&[-1], &[i64::MIN], &[0], &[-1]]);
        assert_eq!(r.shape(), &[0]);
        // i32 index operands.
        let s = Tensor::from_i64(vec![1], vec![1]).cast(DType::I32);
        let r = eval_checked(&Slice, &[&x, &s, &i64s(&[3])]);
        assert_eq!(r[0].as_i64().unwrap(), &[1, 2]);
    }

    #[test]
    fn errors() {
        let x = Tensor::from_i64(vec![5], (0..5).collect());
        let z = i64s(&[0]);
        let e = eval(&Slice, &[&x, &z, &i64s(&[3]), &z, &z]).unwrap_err();
        assert!(e.0.contains("step is 0"), "{e}");
        assert!(eval(&Slice, &[&x, &z, &i64s(&[3]), &i64s(&[1])]).is_err());
        assert!(eval(&Slice, &[&x, &i64s(&[0, 0]), &i64s(&[3])]).is_err());
        let two = Tensor::zeros(DType::F32, vec![2, 2]);
        let e = eval(
            &Slice,
            &[&two, &i64s(&[0, 0]), &i64s(&[1, 1]), &i64s(&[1, -1])],
        );
        assert!(e.unwrap_err().0.contains("repeat"));
        let f = Tensor::from_f32(vec![1], vec![0.0]);
        assert!(eval(&Slice, &[&x, &f, &z]).is_err());
        // Unknown starts.
        let data = fact(DType::F32, vec![d(4)]);
        let starts = fact(DType::I64, vec![d(1)]);
        let e = Slice
            .infer(&[&data, &starts, &known_i64(&[1], &[2])])
            .unwrap_err();
        assert!(e.0.contains("starts must be known"), "{e}");
    }

    fn infer(
        data: Vec<Dim>,
        starts: Vec<Dim>,
        ends: Vec<Dim>,
        rest: &[&[i64]],
    ) -> Result<Fact, OpError> {
        let data = fact(DType::F32, data);
        let n = starts.len();
        let s = known(&[n], starts);
        let e = known(&[n], ends);
        let extra: Vec<Fact> = rest.iter().map(|v| known_i64(&[v.len()], v)).collect();
        let mut inputs = vec![&data, &s, &e];
        inputs.extend(extra.iter());
        Slice.infer(&inputs).map(|mut v| v.remove(0))
    }

    #[test]
    fn symbolic_exporter_cases() {
        // cos cache [max_pos, 16] sliced to [seq, 16].
        let r = infer(vec![d(2048), d(16)], vec![d(0)], vec![sym("seq")], &[]).unwrap();
        assert_eq!(r.ty.to_string(), "f32[seq, 16]");
        // x[:, 1:] and x[:, :-1] on a symbolic axis.
        let x = vec![d(1), sym("seq"), d(8)];
        let r = infer(x.clone(), vec![d(1)], vec![d(i64::MAX)], &[&[1]]).unwrap();
        assert_eq!(r.ty.to_string(), "f32[1, seq-1, 8]");
        let r = infer(x.clone(), vec![d(0)], vec![d(-1)], &[&[1]]).unwrap();
        assert_eq!(r.ty.to_string(), "f32[1, seq-1, 8]");
        // Last token: x[:, -1:].
        let r = infer(x.clone(), vec![d(-1)], vec![d(i32::MAX as i64)], &[&[-2]]).unwrap();
        assert_eq!(r.ty.to_string(), "f32[1, 1, 8]");
        // End equal to the dim itself; static slice of the static axis.
        let r = infer(
            x.clone(),
            vec![d(0), d(2)],
            vec![sym("seq"), d(6)],
            &[&[1, 2]],
        )
        .unwrap();
        assert_eq!(r.ty.to_string(), "f32[1, seq, 4]");
        // Reverse a symbolic axis.
        let r = infer(x.clone(), vec![d(-1)], vec![d(i64::MIN)], &[&[1], &[-1]]).unwrap();
        assert_eq!(r.ty.to_string(), "f32[1, seq, 8]");
        // Cache: past..end of a past+seq axis.
        let kv = vec![&sym("past") + &sym("seq")];
        let r = infer(kv, vec![sym("past")], vec![d(i64::MAX)], &[]).unwrap();
        assert_eq!(r.ty.to_string(), "f32[seq]");
    }

    #[test]
    fn symbolic_unsupported_cases_fail() {
        let x = vec![sym("seq")];
        // Step 2 over a symbolic length.
        let e = infer(x.clone(), vec![d(0)], vec![d(i64::MAX)], &[&[0], &[2]]).unwrap_err();
        assert!(e.0.contains("cannot decide the length"), "{e}");
        // Rest of a static cache after a symbolic start.
        let e = infer(vec![d(2048)], vec![sym("seq")], vec![d(i64::MAX)], &[]).unwrap_err();
        assert!(e.0.contains("`slice` of [2048], axis 0"), "{e}");
        // Unrelated symbols.
        let e = infer(x, vec![d(0)], vec![sym("past")], &[]).unwrap_err();
        assert!(e.0.contains("cannot resolve"), "{e}");
        // Symbolic axes are rejected.
        let data = fact(DType::F32, vec![d(4)]);
        let z = known_i64(&[1], &[0]);
        let axes = known(&[1], vec![sym("a")]);
        let e = Slice.infer(&[&data, &z, &z, &axes]).unwrap_err();
        assert!(e.0.contains("axes must be static"), "{e}");
    }

    #[test]
    fn shape_slicing_propagates_values() {
        let shape = known(&[3], vec![d(1), sym("seq"), d(64)]);
        let r = Slice
            .infer(&[&shape, &known_i64(&[1], &[0]), &known_i64(&[1], &[2])])
            .unwrap()
            .remove(0);
        assert_eq!(r.ty.to_string(), "i64[2]");
        assert_eq!(r.dims_value().unwrap(), vec![d(1), sym("seq")]);
        let r = Slice
            .infer(&[
                &shape,
                &known_i64(&[1], &[-1]),
                &known_i64(&[1], &[i64::MAX]),
            ])
            .unwrap()
            .remove(0);
        assert_eq!(r.dims_value().unwrap(), vec![d(64)]);
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Slice, &[]);
    }
}
