//! How element-wise kernels hold each dtype: a load widens an element to
//! the type kernels compute in, a store narrows it back.
//!
//! Floats compute in `f32`, as the reference evaluation does. An `f16` or
//! `bf16` element is widened exactly on load and rounded on store to the
//! nearest value, ties to even — what `half`'s `from_f32` gives, which is
//! how the reference ([`Tensor::cast`]) rounds. A NaN keeps the top bits of
//! its payload and gets the quiet bit set, as in `half`. Integers compute
//! at their own width (`i8` and `u8` in an `I8`; each op decides the
//! signedness), `bool` as an `I8` holding 0 or 1.
//!
//! The 16-bit conversions are integer bit manipulation (plus one `f32`
//! add or subtract for subnormals, which rounds exactly as needed) written
//! once for scalars and for `i32x4`/`f32x4` vectors: element-wise ops on
//! 16-bit floats run in vectors of four, loaded by zero-extending four
//! 16-bit patterns into `i32x4` lanes and stored by narrowing them back.
//!
//! [`Tensor::cast`]: slmcc_ir::Tensor::cast

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Type, Value};
use slmcc_ir::DType;

use super::unsupported;
use crate::cpu::emit::{KernelBuilder, Ptr, Width};
use crate::cpu::CpuError;

/// The Cranelift type kernels compute one element of `d` in.
pub fn compute_type(d: DType) -> Result<Type, CpuError> {
    Ok(match d {
        DType::F32 | DType::F16 | DType::BF16 => types::F32,
        DType::I64 => types::I64,
        DType::I32 => types::I32,
        DType::I8 | DType::U8 | DType::Bool => types::I8,
        DType::I4 | DType::U4 => return Err(unsupported("dtype", format!("{d}"))),
    })
}

/// Whether integers of `d` read as signed (the reference widens `u8` and
/// `bool` with zeros).
pub fn is_signed(d: DType) -> bool {
    d.is_signed_int()
}

/// An integer element of `d` (in its compute type) widened to `i64` as
/// the reference reads it.
pub fn to_i64(kb: &mut KernelBuilder, v: Value, d: DType) -> Value {
    match d {
        DType::I64 => v,
        _ if is_signed(d) => kb.b.ins().sextend(types::I64, v),
        _ => kb.b.ins().uextend(types::I64, v),
    }
}

/// An `i64` wrapped to the integer dtype `d` (Rust's `as`).
pub fn from_i64(kb: &mut KernelBuilder, v: Value, d: DType) -> Result<Value, CpuError> {
    let ty = compute_type(d)?;
    Ok(if ty == types::I64 {
        v
    } else {
        kb.b.ins().ireduce(ty, v)
    })
}

/// Loads an element (or a vector of them) of `d` at `p`, in its compute
/// type.
pub fn load(kb: &mut KernelBuilder, d: DType, p: Ptr, w: Width) -> Result<Value, CpuError> {
    Ok(match d {
        DType::F16 => {
            let bits = load_u16(kb, p, w);
            f16_to_f32(kb, bits, w)
        }
        DType::BF16 => {
            let bits = load_u16(kb, p, w);
            bf16_to_f32(kb, bits, w)
        }
        _ => {
            let ty = compute_type(d)?;
            kb.load(ty, p, w)
        }
    })
}

/// Stores `v` (in the compute type of `d`) as an element of `d` at `p`.
pub fn store(kb: &mut KernelBuilder, d: DType, v: Value, p: Ptr, w: Width) {
    match d {
        DType::F16 => {
            let bits = f32_to_f16(kb, v, w);
            store_u16(kb, bits, p, w)
        }
        DType::BF16 => {
            let bits = f32_to_bf16(kb, v, w);
            store_u16(kb, bits, p, w)
        }
        _ => kb.store(v, p),
    }
}

/// 16-bit patterns at `p`, zero-extended into `i32` lanes.
fn load_u16(kb: &mut KernelBuilder, p: Ptr, w: Width) -> Value {
    let flags = MemFlagsData::new().with_notrap();
    match w {
        Width::Scalar => kb.b.ins().uload16(types::I32, flags, p.addr, 0),
        Width::Vector(_) if p.splat => {
            let s = kb.b.ins().uload16(types::I32, flags, p.addr, 0);
            kb.b.ins().splat(types::I32X4, s)
        }
        Width::Vector(_) => kb.b.ins().uload16x4(flags, p.addr, 0),
    }
}

/// Stores the low 16 bits of each `i32` lane of `bits` at `p`.
fn store_u16(kb: &mut KernelBuilder, bits: Value, p: Ptr, w: Width) {
    let flags = MemFlagsData::new().with_notrap();
    match w {
        Width::Scalar => {
            kb.b.ins().istore16(flags, bits, p.addr, 0);
        }
        Width::Vector(_) => {
            // Lanes hold 0..=0xffff, which narrow without saturating.
            let halves = kb.b.ins().unarrow(bits, bits);
            let le = MemFlagsData::new().with_endianness(Endianness::Little);
            let wide = kb.b.ins().bitcast(types::I64X2, le, halves);
            let low = kb.b.ins().extractlane(wide, 0);
            kb.b.ins().store(flags, low, p.addr, 0);
        }
    }
}

/// An `i32` constant at width `w`.
fn c32(kb: &mut KernelBuilder, v: u32, w: Width) -> Value {
    let s = kb.b.ins().iconst(types::I32, v as i64);
    match w {
        Width::Scalar => s,
        Width::Vector(_) => kb.b.ins().splat(w.ty(types::I32), s),
    }
}

fn shl(kb: &mut KernelBuilder, x: Value, n: i64) -> Value {
    let n = kb.b.ins().iconst(types::I32, n);
    kb.b.ins().ishl(x, n)
}

fn shr(kb: &mut KernelBuilder, x: Value, n: i64) -> Value {
    let n = kb.b.ins().iconst(types::I32, n);
    kb.b.ins().ushr(x, n)
}

fn and(kb: &mut KernelBuilder, x: Value, m: u32, w: Width) -> Value {
    let m = c32(kb, m, w);
    kb.b.ins().band(x, m)
}

fn add(kb: &mut KernelBuilder, x: Value, v: u32, w: Width) -> Value {
    let v = c32(kb, v, w);
    kb.b.ins().iadd(x, v)
}

/// `x cc v` on `i32` lanes: a flag, or a lane mask for vectors.
fn cmp(kb: &mut KernelBuilder, cc: IntCC, x: Value, v: u32, w: Width) -> Value {
    let v = c32(kb, v, w);
    kb.b.ins().icmp(cc, x, v)
}

/// `cond ? a : b` on `i32` lanes, `cond` from [`cmp`].
fn pick(kb: &mut KernelBuilder, cond: Value, a: Value, b: Value, w: Width) -> Value {
    match w {
        Width::Scalar => kb.b.ins().select(cond, a, b),
        Width::Vector(_) => kb.b.ins().bitselect(cond, a, b),
    }
}

fn bits_to_f32(kb: &mut KernelBuilder, x: Value, w: Width) -> Value {
    kb.b.ins().bitcast(w.ty(types::F32), MemFlagsData::new(), x)
}

fn f32_to_bits(kb: &mut KernelBuilder, x: Value, w: Width) -> Value {
    kb.b.ins().bitcast(w.ty(types::I32), MemFlagsData::new(), x)
}

/// `f16` bit patterns (in `i32` lanes) to `f32`, exactly.
///
/// The exponent and mantissa bits shifted into `f32` position read as the
/// half's magnitude times `2^-112` (a subnormal `f32` for a subnormal
/// half), so one exact multiplication by `2^112` rebiases normals and
/// subnormals alike. Infinities and NaNs (exponent 31) get exponent 255
/// instead, NaNs also the quiet bit.
pub fn f16_to_f32(kb: &mut KernelBuilder, h: Value, w: Width) -> Value {
    let em = and(kb, h, 0x7fff, w);
    let o = shl(kb, em, 13);
    let f = bits_to_f32(kb, o, w);
    let rebias = kb.f32c(f32::from_bits((127 + 112) << 23), w);
    let f = kb.b.ins().fmul(f, rebias);
    let finite = f32_to_bits(kb, f, w);
    let special = add(kb, o, (255 - 31) << 23, w);
    let quiet = c32(kb, 0x0040_0000, w);
    let quiet = kb.b.ins().bor(special, quiet);
    let is_nan = cmp(kb, IntCC::UnsignedGreaterThan, em, 0x7c00, w);
    let special = pick(kb, is_nan, quiet, special, w);
    let is_special = cmp(kb, IntCC::UnsignedGreaterThanOrEqual, em, 0x7c00, w);
    let r = pick(kb, is_special, special, finite, w);
    let s = and(kb, h, 0x8000, w);
    let sign = shl(kb, s, 16);
    let r = kb.b.ins().bor(r, sign);
    bits_to_f32(kb, r, w)
}

/// `f32` to `f16` bit patterns (in `i32` lanes), rounded to nearest even.
pub fn f32_to_f16(kb: &mut KernelBuilder, x: Value, w: Width) -> Value {
    let xi = f32_to_bits(kb, x, w);
    let hi = shr(kb, xi, 16);
    let sign = and(kb, hi, 0x8000, w);
    let a = and(kb, xi, 0x7fff_ffff, w);
    let top = shr(kb, a, 13);
    // NaN: quiet, with the top 10 bits of the payload.
    let payload = and(kb, top, 0x03ff, w);
    let q = c32(kb, 0x7e00, w);
    let nan = kb.b.ins().bor(payload, q);
    // Normal: rebias, then round the 13 dropped bits to nearest even.
    let odd = and(kb, top, 1, w);
    let t = add(kb, a, ((15u32 << 23).wrapping_sub(127 << 23)) + 0xfff, w);
    let t = kb.b.ins().iadd(t, odd);
    let normal = shr(kb, t, 13);
    // Subnormal: adding 0.5 rounds to a multiple of 2^-24 in hardware.
    let magic = c32(kb, 126 << 23, w);
    let (af, mf) = (bits_to_f32(kb, a, w), bits_to_f32(kb, magic, w));
    let s = kb.b.ins().fadd(af, mf);
    let s = f32_to_bits(kb, s, w);
    let sub = kb.b.ins().isub(s, magic);
    let inf = c32(kb, 0x7c00, w);
    let is_sub = cmp(kb, IntCC::UnsignedLessThan, a, 113 << 23, w);
    let is_big = cmp(
        kb,
        IntCC::UnsignedGreaterThanOrEqual,
        a,
        (127 + 16) << 23,
        w,
    );
    let is_nan = cmp(kb, IntCC::UnsignedGreaterThan, a, 0x7f80_0000, w);
    let r = pick(kb, is_sub, sub, normal, w);
    let r = pick(kb, is_big, inf, r, w);
    let r = pick(kb, is_nan, nan, r, w);
    kb.b.ins().bor(r, sign)
}

/// `bf16` bit patterns (in `i32` lanes) to `f32`, exactly (NaNs quiet).
pub fn bf16_to_f32(kb: &mut KernelBuilder, h: Value, w: Width) -> Value {
    let em = and(kb, h, 0x7fff, w);
    let x = shl(kb, h, 16);
    let q = c32(kb, 0x0040_0000, w);
    let q = kb.b.ins().bor(x, q);
    let is_nan = cmp(kb, IntCC::UnsignedGreaterThan, em, 0x7f80, w);
    let r = pick(kb, is_nan, q, x, w);
    bits_to_f32(kb, r, w)
}

/// `f32` to `bf16` bit patterns (in `i32` lanes), rounded to nearest even.
pub fn f32_to_bf16(kb: &mut KernelBuilder, x: Value, w: Width) -> Value {
    let xi = f32_to_bits(kb, x, w);
    let hi = shr(kb, xi, 16);
    let q = c32(kb, 0x40, w);
    let nan = kb.b.ins().bor(hi, q);
    let odd = and(kb, hi, 1, w);
    let t = add(kb, xi, 0x7fff, w);
    let t = kb.b.ins().iadd(t, odd);
    let rounded = shr(kb, t, 16);
    let a = and(kb, xi, 0x7fff_ffff, w);
    let is_nan = cmp(kb, IntCC::UnsignedGreaterThan, a, 0x7f80_0000, w);
    pick(kb, is_nan, nan, rounded, w)
}

/// `x != 0` on a float compute value (NaN is true), as a flag.
pub fn float_nonzero(kb: &mut KernelBuilder, x: Value) -> Value {
    let z = kb.b.ins().f32const(0.0);
    kb.b.ins().fcmp(FloatCC::NotEqual, x, z)
}
