//! Loops over one row of contiguous `f32` whose length is a run-time value
//! (a constant for a static row), shared by `softmax` and `attention`: the
//! row's maximum ([`row_max`]), `exp(x - max)` and its sum ([`exp_sum`]),
//! and the division by the sum ([`row_div`]).
//!
//! In the reference's order (sequential, scalar) unless `fast_math`, which
//! runs `f32x4` steps with vector partial accumulators and a scalar tail
//! (the maximum is exact either way; the sum differs by rounding).

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::Variable;

use crate::cpu::emit::{KernelBuilder, Ptr, Width};
use crate::cpu::vmath;
use crate::cpu::CpuError;

/// Runs `body(j, w)` for `j` in `0..len`: `f32x4` steps then a scalar tail
/// when `vector`, else scalar steps in order.
pub(super) fn each(
    kb: &mut KernelBuilder,
    len: Value,
    vector: bool,
    mut body: impl FnMut(&mut KernelBuilder, Value, Width) -> Result<(), CpuError>,
) -> Result<(), CpuError> {
    let zero = kb.iconst(0);
    if !vector {
        return kb.for_range(zero, len, 1, |kb, j| body(kb, j, Width::Scalar));
    }
    let nv = kb.b.ins().band_imm_s(len, !3);
    kb.for_range(zero, nv, 4, |kb, j| body(kb, j, Width::Vector(4)))?;
    kb.for_range(nv, len, 1, |kb, j| body(kb, j, Width::Scalar))
}

/// A scalar and an `f32x4` accumulator, for [`each`] loops.
struct Acc {
    s: Variable,
    v: Variable,
}

impl Acc {
    fn new(kb: &mut KernelBuilder, init: f32) -> Acc {
        let s = kb.b.declare_var(types::F32);
        let v = kb.b.declare_var(types::F32X4);
        let a = kb.f32c(init, Width::Scalar);
        kb.b.def_var(s, a);
        let a = kb.f32c(init, Width::Vector(4));
        kb.b.def_var(v, a);
        Acc { s, v }
    }

    fn var(&self, w: Width) -> Variable {
        match w {
            Width::Scalar => self.s,
            Width::Vector(_) => self.v,
        }
    }

    /// The result after an [`each`] loop: the scalar accumulator alone
    /// when the loop ran scalar, else `join(scalar, lanes(vector))`.
    fn finish(
        &self,
        kb: &mut KernelBuilder,
        vector: bool,
        lanes: fn(&mut KernelBuilder, Value) -> Value,
        join: fn(&mut KernelBuilder, Value, Value) -> Value,
    ) -> Value {
        let s = kb.b.use_var(self.s);
        if !vector {
            return s;
        }
        let v = kb.b.use_var(self.v);
        let h = lanes(kb, v);
        join(kb, s, h)
    }
}

fn at(kb: &mut KernelBuilder, base: Value, j: Value) -> Ptr {
    let addr = kb.index(base, j, 4);
    Ptr { addr, splat: false }
}

/// The largest of the `len` `f32` at `x` (NaN skipped, `-inf` for an empty
/// row).
pub(super) fn row_max(kb: &mut KernelBuilder, x: Value, len: Value) -> Result<Value, CpuError> {
    let fast = kb.fast_math;
    let acc = Acc::new(kb, f32::NEG_INFINITY);
    each(kb, len, fast, |kb, j, w| {
        let p = at(kb, x, j);
        let v = kb.load(types::F32, p, w);
        let var = acc.var(w);
        let m = kb.b.use_var(var);
        let m = vmath::max_skip_nan(kb, v, m, w);
        kb.b.def_var(var, m);
        Ok(())
    })?;
    Ok(acc.finish(kb, fast, vmath::hmax, |kb, s, h| {
        vmath::max_skip_nan(kb, s, h, Width::Scalar)
    }))
}

/// Writes `e_j = exp(x_j - max)` for the `len` `f32` at `x` to `y` (which
/// may be `x`) and returns `Σ e_j` from `+0.0` (the vector `exp` and
/// partial sums under `fast_math`).
pub(super) fn exp_sum(
    kb: &mut KernelBuilder,
    x: Value,
    y: Value,
    len: Value,
    max: Value,
) -> Result<Value, CpuError> {
    let fast = kb.fast_math;
    let acc = Acc::new(kb, 0.0);
    each(kb, len, fast, |kb, j, w| {
        let (px, py) = (at(kb, x, j), at(kb, y, j));
        let v = kb.load(types::F32, px, w);
        let m = kb.splat(max, w);
        let d = kb.b.ins().fsub(v, m);
        let e = kb.exp(d, w)?;
        kb.store(e, py);
        let var = acc.var(w);
        let s = kb.b.use_var(var);
        let s = kb.b.ins().fadd(s, e);
        kb.b.def_var(var, s);
        Ok(())
    })?;
    Ok(acc.finish(kb, fast, vmath::hsum, |kb, s, h| kb.b.ins().fadd(h, s)))
}

/// Divides the `len` `f32` at `y` by `d`, in place, in vectors (division
/// is exact per element, so always vectorised).
pub(super) fn row_div(
    kb: &mut KernelBuilder,
    y: Value,
    len: Value,
    d: Value,
) -> Result<(), CpuError> {
    each(kb, len, true, |kb, j, w| {
        let p = at(kb, y, j);
        let e = kb.load(types::F32, p, w);
        let t = kb.splat(d, w);
        let r = kb.b.ins().fdiv(e, t);
        kb.store(r, p);
        Ok(())
    })
}
