//! Vectorised `f32` math emitted inline (the `fast_math` option): `exp`
//! and the logistic function built on it, and horizontal reductions of
//! `f32x4` vectors.
//!
//! `exp` is Cephes' `expf`: range reduction `x = n·ln2 + r` with
//! `|r| <= ln2/2` (`n` rounded with the `1.5·2²³` trick, `ln2` split in two
//! so `n·C1` is exact), a degree-7 polynomial for `e^r`, and the scaling by
//! `2^n` done as two multiplications by `2^(n/2)` so that results in the
//! subnormal range and overflow to `inf` come out right. The input is
//! clamped to `[-104, 89]` first (beyond, `expf` is `0` or `inf`); NaN
//! propagates. Its error is within 2 ulp of the correctly rounded value
//! over the whole range (`backends/tests/cpu_ops.rs` sweeps it against the
//! reference's `expf`: below 2e-7 relative). The same instructions serve
//! scalars and `f32x4` vectors.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};

use super::emit::{KernelBuilder, Width};
use super::CpuError;

/// `1.5 · 2²³`: adding it rounds an `f32` of magnitude below `2²²` to an
/// integer, which its low mantissa bits then hold.
pub(crate) const ROUND_MAGIC: f32 = 12_582_912.0;
pub(crate) const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2 = C1 + C2`, with `C1` exact in 9 bits.
pub(crate) const C1: f32 = 0.693_359_4;
pub(crate) const C2: f32 = -2.121_944_4e-4;
/// Cephes' `expf` polynomial, highest degree first.
pub(crate) const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    // Cephes' 5.0000001201e-1 rounds to 0.5 in f32.
    0.5,
];

/// A constant at width `w`: hoisted by Cranelift to the kernel's entry,
/// or loaded where it is used when the kernel asks for it
/// ([`KernelBuilder::local_constants`]).
fn c(kb: &mut KernelBuilder, v: f32, w: Width) -> Result<Value, CpuError> {
    if kb.local_constants {
        kb.f32c_local(v, w)
    } else {
        Ok(kb.f32c(v, w))
    }
}

fn int_ty(w: Width) -> types::Type {
    w.ty(types::I32)
}

fn bits(kb: &mut KernelBuilder, x: Value, w: Width) -> Value {
    kb.b.ins().bitcast(int_ty(w), MemFlagsData::new(), x)
}

fn float(kb: &mut KernelBuilder, x: Value, w: Width) -> Value {
    kb.b.ins().bitcast(w.ty(types::F32), MemFlagsData::new(), x)
}

fn iconst32(kb: &mut KernelBuilder, v: i32, w: Width) -> Result<Value, CpuError> {
    match w {
        Width::Scalar => Ok(kb.b.ins().iconst(types::I32, v as i64)),
        Width::Vector(_) => {
            let f = c(kb, f32::from_bits(v as u32), w)?;
            Ok(bits(kb, f, w))
        }
    }
}

/// `a · b + c`, fused where the kernel uses FMA.
fn mul_add(kb: &mut KernelBuilder, a: Value, b: Value, c: Value) -> Value {
    if kb.fma {
        kb.b.ins().fma(a, b, c)
    } else {
        let p = kb.b.ins().fmul(a, b);
        kb.b.ins().fadd(p, c)
    }
}

/// `2^n` for integers `n` in `[-126, 127]` (lane-wise).
fn pow2(kb: &mut KernelBuilder, n: Value, w: Width) -> Result<Value, CpuError> {
    let bias = iconst32(kb, 127, w)?;
    let e = kb.b.ins().iadd(n, bias);
    let sh = kb.b.ins().ishl_imm_u(e, 23);
    Ok(float(kb, sh, w))
}

/// `e^x` (see the module doc).
pub fn exp(kb: &mut KernelBuilder, x: Value, w: Width) -> Result<Value, CpuError> {
    let (lo, hi) = (c(kb, -104.0, w)?, c(kb, 89.0, w)?);
    // `fmax`/`fmin` propagate NaN.
    let x = kb.b.ins().fmax(x, lo);
    let x = kb.b.ins().fmin(x, hi);
    let log2e = c(kb, LOG2E, w)?;
    let magic = c(kb, ROUND_MAGIC, w)?;
    let t = kb.b.ins().fmul(x, log2e);
    let t = kb.b.ins().fadd(t, magic);
    let nf = kb.b.ins().fsub(t, magic);
    let tb = bits(kb, t, w);
    let mb = bits(kb, magic, w);
    let n = kb.b.ins().isub(tb, mb);
    // r = x - n·C1 - n·C2
    let c1 = c(kb, C1, w)?;
    let c2 = c(kb, C2, w)?;
    let nc1 = kb.b.ins().fmul(nf, c1);
    let r = kb.b.ins().fsub(x, nc1);
    let nc2 = kb.b.ins().fmul(nf, c2);
    let r = kb.b.ins().fsub(r, nc2);
    let mut p = c(kb, P[0], w)?;
    for (i, &k) in P.iter().enumerate().skip(1) {
        let k = match i == P.len() - 1 && crate::mutant::active("exp-coefficient") {
            true => 0.501,
            false => k,
        };
        let k = c(kb, k, w)?;
        p = mul_add(kb, p, r, k);
    }
    let z = kb.b.ins().fmul(r, r);
    let one = c(kb, 1.0, w)?;
    let r1 = kb.b.ins().fadd(r, one);
    let y = mul_add(kb, p, z, r1);
    // y · 2^n as y · 2^(n >> 1) · 2^(n - (n >> 1)): both factors normal.
    let n1 = kb.b.ins().sshr_imm_u(n, 1);
    let n2 = kb.b.ins().isub(n, n1);
    let s1 = pow2(kb, n1, w)?;
    let s2 = pow2(kb, n2, w)?;
    let y = kb.b.ins().fmul(y, s1);
    Ok(kb.b.ins().fmul(y, s2))
}

/// The logistic function as the reference computes it (`1/(1 + e^-x)` for
/// `x >= 0`, `e^x/(1 + e^x)` below), with [`exp`].
pub fn sigmoid(kb: &mut KernelBuilder, x: Value, w: Width) -> Result<Value, CpuError> {
    let a = kb.b.ins().fabs(x);
    let na = kb.b.ins().fneg(a);
    let e = exp(kb, na, w)?;
    let one = c(kb, 1.0, w)?;
    let d = kb.b.ins().fadd(one, e);
    let pos = kb.b.ins().fdiv(one, d);
    let neg = kb.b.ins().fdiv(e, d);
    let zero = c(kb, 0.0, w)?;
    let ge = kb.fcmp(FloatCC::GreaterThanOrEqual, x, zero);
    Ok(kb.select(ge, pos, neg, w))
}

/// The sum of the four lanes of an `f32x4`, `(v0 + v1) + (v2 + v3)`.
pub fn hsum(kb: &mut KernelBuilder, v: Value) -> Value {
    let l: Vec<Value> = (0..4).map(|i| kb.b.ins().extractlane(v, i)).collect();
    let a = kb.b.ins().fadd(l[0], l[1]);
    let b = kb.b.ins().fadd(l[2], l[3]);
    kb.b.ins().fadd(a, b)
}

/// `a > b ? a : b` at width `w`: NaN in `a` is skipped, as the reference's
/// `fold(-inf, f32::max)` skips it.
pub fn max_skip_nan(kb: &mut KernelBuilder, a: Value, b: Value, w: Width) -> Value {
    let gt = kb.fcmp(FloatCC::GreaterThan, a, b);
    kb.select(gt, a, b, w)
}

/// The largest lane of an `f32x4` (NaN lanes skipped).
pub fn hmax(kb: &mut KernelBuilder, v: Value) -> Value {
    let l: Vec<Value> = (0..4).map(|i| kb.b.ins().extractlane(v, i)).collect();
    let a = max_skip_nan(kb, l[1], l[0], Width::Scalar);
    let b = max_skip_nan(kb, l[3], l[2], Width::Scalar);
    max_skip_nan(kb, b, a, Width::Scalar)
}
