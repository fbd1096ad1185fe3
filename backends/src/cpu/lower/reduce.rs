//! Reductions and the ops built on them: `reduce_*` (any axes), `softmax`
//! (any axis), `layer_norm` and `rms_norm`.
//!
//! A loop nest runs over the kept positions; for each, the reduced
//! elements are visited in row-major order and accumulated in one `f32`
//! register from the reference's starting value, so the summation order —
//! and with it every rounding — is the reference's: results are bit-exact.
//! The element-wise passes that follow a reduction (normalising, scaling)
//! run in `f32x4` vectors, which does not change results.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::norm_axis;
use slmcc_ir::ops::reduce::{Reduce, ReduceKind};
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::DType;

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

/// Broadcasts a scalar to width `w`.
fn splat(kb: &mut KernelBuilder, v: Value, w: Width) -> Value {
    match w {
        Width::Scalar => v,
        Width::Vector(_) => kb.b.ins().splat(w.ty(types::F32), v),
    }
}

pub fn layer_norm(kb: &mut KernelBuilder, op: &LayerNorm, sig: &NodeSig) -> Result<(), CpuError> {
    f32_only("layer_norm", sig)?;
    let shape = &sig.inputs[0].shape;
    let a = norm_axis(op.axis, shape.len()).map_err(|e| unsupported("layer_norm", e.0))?;
    let (lead, trail) = (&shape[..a], &shape[a..]);
    let n: usize = trail.iter().product();
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
    let eps = op.eps;
    kb.nest(lead, &accesses, None, |kb, p, _| {
        let x = p[0].addr;
        let tst = st[a..].to_vec();
        let s = fold(kb, trail, x, tst.clone(), -0.0, |kb, s, v| {
            Ok(kb.b.ins().fadd(s, v))
        })?;
        let nf = kb.b.ins().f32const(n as f32);
        let mean = kb.b.ins().fdiv(s, nf);
        let q = fold(kb, trail, x, tst.clone(), -0.0, |kb, s, v| {
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
        let mut inner = vec![acc(x, tst.clone())];
        for (k, s) in pst.iter().enumerate() {
            inner.push(acc(p[1 + k].addr, s[a..].to_vec()));
        }
        inner.push(acc(p[1 + nparams].addr, tst));
        kb.nest(trail, &inner, Some(4), |kb, q, w| {
            let v = kb.load(types::F32, q[0], w);
            let (m, i) = (splat(kb, mean, w), splat(kb, inv, w));
            let d = kb.b.ins().fsub(v, m);
            let mut y = kb.b.ins().fmul(d, i);
            let sc = kb.load(types::F32, q[1], w);
            y = kb.b.ins().fmul(y, sc);
            if nparams == 2 {
                let b = kb.load(types::F32, q[2], w);
                y = kb.b.ins().fadd(y, b);
            }
            kb.store(y, q[1 + nparams]);
            Ok(())
        })
    })
}

pub fn rms_norm(kb: &mut KernelBuilder, op: &RmsNorm, sig: &NodeSig) -> Result<(), CpuError> {
    f32_only("rms_norm", sig)?;
    let shape = &sig.inputs[0].shape;
    let hidden = *shape.last().expect("rank >= 1");
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let h = hidden as i64;
    let accesses = [acc(kb.buf(0), vec![h]), acc(kb.buf(2), vec![h])];
    let (eps, offset) = (op.eps, op.offset);
    let w_buf = kb.buf(1);
    kb.nest(&[rows], &accesses, None, |kb, p, _| {
        let ss = fold(kb, &[hidden], p[0].addr, vec![1], -0.0, |kb, s, v| {
            let sq = kb.b.ins().fmul(v, v);
            Ok(kb.b.ins().fadd(s, sq))
        })?;
        let nf = kb.b.ins().f32const(hidden as f32);
        let ms = kb.b.ins().fdiv(ss, nf);
        let e = kb.b.ins().f32const(eps);
        let me = kb.b.ins().fadd(ms, e);
        let sd = kb.b.ins().sqrt(me);
        let one = kb.b.ins().f32const(1.0);
        let inv = kb.b.ins().fdiv(one, sd);
        let inner = [
            acc(p[0].addr, vec![1]),
            acc(w_buf, vec![1]),
            acc(p[1].addr, vec![1]),
        ];
        kb.nest(&[hidden], &inner, Some(4), |kb, q, w| {
            let v = kb.load(types::F32, q[0], w);
            let i = splat(kb, inv, w);
            let xi = kb.b.ins().fmul(v, i);
            let wk = kb.load(types::F32, q[1], w);
            let off = kb.f32c(offset, w);
            let ws = kb.b.ins().fadd(wk, off);
            let y = kb.b.ins().fmul(xi, ws);
            kb.store(y, Ptr { ..q[2] });
            Ok(())
        })
    })
}
