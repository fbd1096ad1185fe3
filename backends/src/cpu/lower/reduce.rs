//! Reductions and the ops built on them: `reduce_*` (any axes), `softmax`
//! (any axis), `layer_norm`, `rms_norm`, the fused `add_rms_norm` and
//! `add_layer_norm` (both results, one pass per row), and `cum_sum`.
//!
//! A loop nest runs over the kept positions; for each, the reduced
//! elements are visited in row-major order and accumulated in one `f32`
//! register from the reference's starting value, so the summation order —
//! and with it every rounding — is the reference's: results are bit-exact.
//! The element-wise passes that follow a reduction (normalising, scaling)
//! run in `f32x4` vectors, which does not change results. Under
//! `fast_math`, softmax over a contiguous axis takes its maximum and sum in
//! `f32x4` lanes and uses the vector `exp` (within ~1e-6 relative).

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use slmcc_ir::ops::add_layer_norm::AddLayerNorm;
use slmcc_ir::ops::add_rms_norm::AddRmsNorm;
use slmcc_ir::ops::cum_sum::CumSum;
use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::norm_axis;
use slmcc_ir::ops::reduce::{Reduce, ReduceKind};
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::DType;

use super::row::{exp_sum, row_div, row_max};
use super::{unsupported, NodeSig};
use crate::cpu::emit::{broadcast_strides, row_major, Access, KernelBuilder, Ptr, Width};
use crate::cpu::math::MathFn;
use crate::cpu::CpuError;

fn f32_only(op: &str, sig: &NodeSig) -> Result<(), CpuError> {
    match sig.inputs[0].dtype {
        DType::F32 => Ok(()),
        d => Err(unsupported(op, format!("on {d}"))),
    }
}

fn acc(base: Value, strides: Vec<i64>) -> Access {
    Access {
        base,
        strides,
        elem_bytes: 4,
    }
}

/// Folds `f(acc, x)` over the elements of `dims` at `base` with `strides`,
/// starting from `init`; returns the final accumulator.
fn fold(
    kb: &mut KernelBuilder,
    dims: &[usize],
    base: Value,
    strides: Vec<i64>,
    init: f32,
    mut f: impl FnMut(&mut KernelBuilder, Value, Value) -> Result<Value, CpuError>,
) -> Result<Value, CpuError> {
    let var = kb.b.declare_var(types::F32);
    let v0 = kb.b.ins().f32const(init);
    kb.b.def_var(var, v0);
    kb.nest(dims, &[acc(base, strides)], None, |kb, p, w| {
        let x = kb.load(types::F32, p[0], w);
        let a = kb.b.use_var(var);
        let next = f(kb, a, x)?;
        kb.b.def_var(var, next);
        Ok(())
    })?;
    Ok(kb.b.use_var(var))
}

/// Combines an accumulator with one element.
type Combine = fn(&mut KernelBuilder, Value, Value) -> Value;

pub fn reduce(kb: &mut KernelBuilder, op: &Reduce, sig: &NodeSig) -> Result<(), CpuError> {
    let name = op.kind.mnemonic();
    f32_only(name, sig)?;
    let shape = &sig.inputs[0].shape;
    let mut mask = vec![op.axes.is_none(); shape.len()];
    for &a in op.axes.iter().flatten() {
        mask[norm_axis(a, shape.len()).map_err(|e| unsupported(name, e.0))?] = true;
    }
    let in_st = row_major(shape);
    let keep: Vec<usize> = shape
        .iter()
        .zip(&mask)
        .map(|(&d, &r)| if r { 1 } else { d })
        .collect();
    let out_st = row_major(&keep);
    let pick = |v: &[i64], reduced: bool| -> Vec<i64> {
        v.iter()
            .zip(&mask)
            .filter(|(_, &r)| r == reduced)
            .map(|(&s, _)| s)
            .collect()
    };
    let dims_of = |reduced: bool| -> Vec<usize> {
        shape
            .iter()
            .zip(&mask)
            .filter(|(_, &r)| r == reduced)
            .map(|(&d, _)| d)
            .collect()
    };
    let (outer, inner) = (dims_of(false), dims_of(true));
    let count: usize = inner.iter().product();
    let red_st = pick(&in_st, true);
    let kind = op.kind;
    let accesses = [
        acc(kb.buf(0), pick(&in_st, false)),
        acc(kb.buf(1), pick(&out_st, false)),
    ];
    kb.nest(&outer, &accesses, None, |kb, p, _| {
        let (init, f): (f32, Combine) = match kind {
            ReduceKind::Sum => (-0.0, |kb, a, x| kb.b.ins().fadd(a, x)),
            ReduceKind::Mean => (0.0, |kb, a, x| kb.b.ins().fadd(a, x)),
            ReduceKind::Prod => (1.0, |kb, a, x| kb.b.ins().fmul(a, x)),
            ReduceKind::Max => (f32::NEG_INFINITY, |kb, a, x| kb.b.ins().fmax(a, x)),
            ReduceKind::Min => (f32::INFINITY, |kb, a, x| kb.b.ins().fmin(a, x)),
        };
        let mut r = fold(kb, &inner, p[0].addr, red_st.clone(), init, |kb, a, x| {
            Ok(f(kb, a, x))
        })?;
        if kind == ReduceKind::Mean {
            let n = kb.b.ins().f32const(count as f32);
            r = kb.b.ins().fdiv(r, n);
        }
        kb.store(r, p[1]);
        Ok(())
    })
}

pub fn softmax(kb: &mut KernelBuilder, axis: i64, sig: &NodeSig) -> Result<(), CpuError> {
    f32_only("softmax", sig)?;
    let shape = &sig.inputs[0].shape;
    let a = norm_axis(axis, shape.len()).map_err(|e| unsupported("softmax", e.0))?;
    let st = row_major(shape);
    let n = shape[a];
    let outer: Vec<usize> = (0..shape.len())
        .filter(|&i| i != a)
        .map(|i| shape[i])
        .collect();
    let outer_st: Vec<i64> = (0..shape.len())
        .filter(|&i| i != a)
        .map(|i| st[i])
        .collect();
    let step = st[a];
    let accesses = [acc(kb.buf(0), outer_st.clone()), acc(kb.buf(1), outer_st)];
    if kb.fast_math && step == 1 {
        return kb.nest(&outer, &accesses, None, |kb, p, _| {
            let (x, y) = (p[0].addr, p[1].addr);
            let len = kb.iconst(n as i64);
            let max = row_max(kb, x, len)?;
            let total = exp_sum(kb, x, y, len, max)?;
            row_div(kb, y, len, total)
        });
    }
    kb.nest(&outer, &accesses, None, |kb, p, _| {
        let (x, y) = (p[0].addr, p[1].addr);
        // `fold(-inf, f32::max)`: a NaN element is skipped.
        let max = fold(kb, &[n], x, vec![step], f32::NEG_INFINITY, |kb, m, v| {
            let gt = kb.fcmp(FloatCC::GreaterThan, v, m);
            Ok(kb.b.ins().select(gt, v, m))
        })?;
        let sum = kb.b.declare_var(types::F32);
        let zero = kb.b.ins().f32const(0.0);
        kb.b.def_var(sum, zero);
        kb.nest(
            &[n],
            &[acc(x, vec![step]), acc(y, vec![step])],
            None,
            |kb, q, w| {
                let v = kb.load(types::F32, q[0], w);
                let d = kb.b.ins().fsub(v, max);
                let e = kb.math(MathFn::Exp, &[d], w)?;
                kb.store(e, q[1]);
                let s = kb.b.use_var(sum);
                let s = kb.b.ins().fadd(s, e);
                kb.b.def_var(sum, s);
                Ok(())
            },
        )?;
        let total = kb.b.use_var(sum);
        let vec_ok = step == 1;
        kb.nest(
            &[n],
            &[acc(y, vec![step])],
            vec_ok.then_some(4),
            |kb, q, w| {
                let e = kb.load(types::F32, q[0], w);
                let t = match w {
                    Width::Scalar => total,
                    Width::Vector(_) => kb.b.ins().splat(w.ty(types::F32), total),
                };
                let r = kb.b.ins().fdiv(e, t);
                kb.store(r, q[0]);
                Ok(())
            },
        )
    })
}

pub fn layer_norm(kb: &mut KernelBuilder, op: &LayerNorm, sig: &NodeSig) -> Result<(), CpuError> {
    f32_only("layer_norm", sig)?;
    let shape = &sig.inputs[0].shape;
    let a = norm_axis(op.axis, shape.len()).map_err(|e| unsupported("layer_norm", e.0))?;
    let (lead, trail) = (&shape[..a], &shape[a..]);
    let st = row_major(shape);
    let nparams = sig.inputs.len() - 1;
    let pst: Vec<Vec<i64>> = sig.inputs[1..]
        .iter()
        .map(|p| broadcast_strides(&p.shape, shape))
        .collect();
    let mut accesses = vec![acc(kb.buf(0), st[..a].to_vec())];
    for (k, s) in pst.iter().enumerate() {
        accesses.push(acc(kb.buf(1 + k), s[..a].to_vec()));
    }
    accesses.push(acc(kb.buf(1 + nparams), st[..a].to_vec()));
    kb.nest(lead, &accesses, None, |kb, p, _| {
        let params: Vec<Access> = pst
            .iter()
            .enumerate()
            .map(|(k, s)| acc(p[1 + k].addr, s[a..].to_vec()))
            .collect();
        let row = NormRow {
            dims: trail,
            strides: &st[a..],
            x: p[0].addr,
            y: p[1 + nparams].addr,
        };
        layer_norm_row(kb, row, &params, op.eps)
    })
}

/// One row of a normalization: the elements of `dims` at `x` laid out by
/// `strides`, and the result at `y` laid out alike.
struct NormRow<'a> {
    dims: &'a [usize],
    strides: &'a [i64],
    x: Value,
    y: Value,
}

/// The layer norm of one row, in the reference's order: the mean, the
/// biased variance, `inv = 1/sqrt(var + eps)`, then
/// `(x - mean) · inv · scale (+ bias)`. `params` are the scale and the
/// optional bias, each with its strides over the row.
fn layer_norm_row(
    kb: &mut KernelBuilder,
    row: NormRow<'_>,
    params: &[Access],
    eps: f32,
) -> Result<(), CpuError> {
    let NormRow {
        dims,
        strides,
        x,
        y,
    } = row;
    let n: usize = dims.iter().product();
    let s = fold(kb, dims, x, strides.to_vec(), -0.0, |kb, s, v| {
        Ok(kb.b.ins().fadd(s, v))
    })?;
    let nf = kb.b.ins().f32const(n as f32);
    let mean = kb.b.ins().fdiv(s, nf);
    let q = fold(kb, dims, x, strides.to_vec(), -0.0, |kb, s, v| {
        let d = kb.b.ins().fsub(v, mean);
        let d2 = kb.b.ins().fmul(d, d);
        Ok(kb.b.ins().fadd(s, d2))
    })?;
    let var = kb.b.ins().fdiv(q, nf);
    let e = kb.b.ins().f32const(eps);
    let ve = kb.b.ins().fadd(var, e);
    let sd = kb.b.ins().sqrt(ve);
    let one = kb.b.ins().f32const(1.0);
    let inv = kb.b.ins().fdiv(one, sd);
    let mut inner = vec![acc(x, strides.to_vec())];
    inner.extend(params.iter().cloned());
    inner.push(acc(y, strides.to_vec()));
    let nparams = params.len();
    kb.nest(dims, &inner, Some(4), |kb, q, w| {
        let v = kb.load(types::F32, q[0], w);
        let (m, i) = (kb.splat(mean, w), kb.splat(inv, w));
        let d = kb.b.ins().fsub(v, m);
        let mut out = kb.b.ins().fmul(d, i);
        let sc = kb.load(types::F32, q[1], w);
        out = kb.b.ins().fmul(out, sc);
        if nparams == 2 {
            let b = kb.load(types::F32, q[2], w);
            out = kb.b.ins().fadd(out, b);
        }
        kb.store(out, q[1 + nparams]);
        Ok(())
    })
}

pub fn rms_norm(kb: &mut KernelBuilder, op: &RmsNorm, sig: &NodeSig) -> Result<(), CpuError> {
    f32_only("rms_norm", sig)?;
    let shape = &sig.inputs[0].shape;
    let hidden = *shape.last().expect("rank >= 1");
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let h = hidden as i64;
    let accesses = [acc(kb.buf(0), vec![h]), acc(kb.buf(2), vec![h])];
    let w_buf = kb.buf(1);
    kb.nest(&[rows], &accesses, None, |kb, p, _| {
        rms_row(kb, p[0].addr, w_buf, p[1].addr, hidden, op.eps, op.offset)
    })
}

/// `y = x · 1/sqrt(mean(x²) + eps) · (w + offset)` over one row of
/// `hidden` contiguous `f32`, in the reference's order.
fn rms_row(
    kb: &mut KernelBuilder,
    x: Value,
    w_buf: Value,
    y: Value,
    hidden: usize,
    eps: f32,
    offset: f32,
) -> Result<(), CpuError> {
    let ss = fold(kb, &[hidden], x, vec![1], -0.0, |kb, s, v| {
        let sq = kb.b.ins().fmul(v, v);
        Ok(kb.b.ins().fadd(s, sq))
    })?;
    let nf = kb.b.ins().f32const(hidden as f32);
    let ms = kb.b.ins().fdiv(ss, nf);
    let eps = match crate::mutant::active("rms-norm-eps") {
        true => 2.0 * eps,
        false => eps,
    };
    let e = kb.b.ins().f32const(eps);
    let me = kb.b.ins().fadd(ms, e);
    let sd = kb.b.ins().sqrt(me);
    let one = kb.b.ins().f32const(1.0);
    let inv = kb.b.ins().fdiv(one, sd);
    let inner = [acc(x, vec![1]), acc(w_buf, vec![1]), acc(y, vec![1])];
    kb.nest(&[hidden], &inner, Some(4), |kb, q, w| {
        let v = kb.load(types::F32, q[0], w);
        let i = kb.splat(inv, w);
        let xi = kb.b.ins().fmul(v, i);
        let wk = kb.load(types::F32, q[1], w);
        let off = kb.f32c(offset, w);
        let ws = kb.b.ins().fadd(wk, off);
        let y = kb.b.ins().fmul(xi, ws);
        kb.store(y, q[2]);
        Ok(())
    })
}

/// `s = x + r` over one row of `n` contiguous `f32`.
fn add_row(kb: &mut KernelBuilder, x: Value, r: Value, s: Value, n: usize) -> Result<(), CpuError> {
    let accesses = [acc(x, vec![1]), acc(r, vec![1]), acc(s, vec![1])];
    kb.nest(&[n], &accesses, Some(4), |kb, q, w| {
        let a = kb.load(types::F32, q[0], w);
        let b = kb.load(types::F32, q[1], w);
        let v = kb.b.ins().fadd(a, b);
        kb.store(v, q[2]);
        Ok(())
    })
}

/// The rows and hidden size of an add+norm's operand, and the nest
/// accesses of `x`, `r` and the two results (`[x, r, s, y]` row pointers).
fn add_norm_rows(kb: &mut KernelBuilder, sig: &NodeSig) -> (usize, usize, [Access; 4]) {
    let shape = &sig.inputs[0].shape;
    let hidden = *shape.last().expect("rank >= 1");
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let h = hidden as i64;
    let n_in = sig.inputs.len();
    let accesses = [
        acc(kb.buf(0), vec![h]),
        acc(kb.buf(1), vec![h]),
        acc(kb.buf(n_in), vec![h]),
        acc(kb.buf(n_in + 1), vec![h]),
    ];
    (rows, hidden, accesses)
}

/// `add_rms_norm`: per row, the sum `s = x + r` is written, then
/// normalised from the written (rounded) values, as the reference does.
pub fn add_rms_norm(
    kb: &mut KernelBuilder,
    op: &AddRmsNorm,
    sig: &NodeSig,
) -> Result<(), CpuError> {
    f32_only("add_rms_norm", sig)?;
    let (rows, hidden, accesses) = add_norm_rows(kb, sig);
    let w_buf = kb.buf(2);
    kb.nest(&[rows], &accesses, None, |kb, p, _| {
        add_row(kb, p[0].addr, p[1].addr, p[2].addr, hidden)?;
        rms_row(kb, p[2].addr, w_buf, p[3].addr, hidden, op.eps, op.offset)
    })
}

/// `add_layer_norm`: per row, `s = x + r` is written, then the layer norm
/// of the written (rounded) `s` over the row, as the reference does.
pub fn add_layer_norm(
    kb: &mut KernelBuilder,
    op: &AddLayerNorm,
    sig: &NodeSig,
) -> Result<(), CpuError> {
    f32_only("add_layer_norm", sig)?;
    let (rows, hidden, accesses) = add_norm_rows(kb, sig);
    let params: Vec<Access> = (2..sig.inputs.len())
        .map(|k| acc(kb.buf(k), vec![1]))
        .collect();
    kb.nest(&[rows], &accesses, None, |kb, p, _| {
        let (s, y) = (p[2].addr, p[3].addr);
        add_row(kb, p[0].addr, p[1].addr, s, hidden)?;
        let row = NormRow {
            dims: &[hidden],
            strides: &[1],
            x: s,
            y,
        };
        layer_norm_row(kb, row, &params, op.eps)
    })
}

/// `cum_sum` on `f32`, `i64` or `i32`: for every position off the axis, a
/// sequential scan along it (forwards or backwards, inclusive or
/// exclusive) from zero, in the reference's order; integers wrap.
pub fn cum_sum(kb: &mut KernelBuilder, op: &CumSum, sig: &NodeSig) -> Result<(), CpuError> {
    let dt = sig.inputs[0].dtype;
    let ty = match dt {
        DType::F32 => types::F32,
        DType::I64 => types::I64,
        DType::I32 => types::I32,
        d => return Err(unsupported("cum_sum", format!("on {d}"))),
    };
    let shape = &sig.inputs[0].shape;
    let a = norm_axis(op.axis, shape.len()).map_err(|e| unsupported("cum_sum", e.0))?;
    let st = row_major(shape);
    let n = shape[a];
    let eb = sig.inputs[0].elem_bytes();
    let outer: Vec<usize> = (0..shape.len())
        .filter(|&i| i != a)
        .map(|i| shape[i])
        .collect();
    let ost: Vec<i64> = (0..shape.len())
        .filter(|&i| i != a)
        .map(|i| st[i])
        .collect();
    let access = |base| Access {
        base,
        strides: ost.clone(),
        elem_bytes: eb,
    };
    let accesses = [access(kb.buf(0)), access(kb.buf(1))];
    let (step, reverse, exclusive) = (st[a] * eb, op.reverse, op.exclusive);
    kb.nest(&outer, &accesses, None, |kb, p, _| {
        let var = kb.b.declare_var(ty);
        let zero = if ty == types::F32 {
            kb.b.ins().f32const(0.0)
        } else {
            kb.b.ins().iconst(ty, 0)
        };
        kb.b.def_var(var, zero);
        // Backwards: start at the last element and step down.
        let (x0, y0, by) = if reverse {
            let last = (n as i64 - 1) * step;
            (
                kb.offset(p[0].addr, last),
                kb.offset(p[1].addr, last),
                -step,
            )
        } else {
            (p[0].addr, p[1].addr, step)
        };
        kb.for_n(n, |kb, i| {
            let xp = kb.index(x0, i, by);
            let yp = kb.index(y0, i, by);
            let x = kb.load(
                ty,
                Ptr {
                    addr: xp,
                    splat: false,
                },
                Width::Scalar,
            );
            let a = kb.b.use_var(var);
            let next = if ty == types::F32 {
                kb.b.ins().fadd(a, x)
            } else {
                kb.b.ins().iadd(a, x)
            };
            kb.b.def_var(var, next);
            let out = if exclusive { a } else { next };
            kb.store(
                out,
                Ptr {
                    addr: yp,
                    splat: false,
                },
            );
            Ok(())
        })
    })
}
