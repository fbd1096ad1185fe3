//! Integer arithmetic of `binary` on `i64`, `i32`, `i8` and `u8` (and
//! the comparisons of `bool`), and `pow` with operands of two dtypes.
//!
//! The reference widens integers to `i64` (`u8` and `bool` with zeros),
//! computes there and wraps the result back to the dtype. `add`, `sub` and
//! `mul` wrap the same way at the element's own width, so they run there;
//! `max`, `min` and comparisons use the dtype's signedness; `div` and `mod`
//! run in `i64`: `div` truncates toward zero (`i64::MIN / -1` wraps), `mod`
//! takes the sign of the divisor (ONNX `Mod` with `fmod = 0`), and a zero
//! divisor makes the kernel return [`STATUS_DIVISION_BY_ZERO`] where the
//! reference fails (never a trap). `pow` on an integer base is
//! `(a as f64).powf(b as f64)` converted back to `i64` with saturation
//! (NaN to 0), by the reference's own `pow` ([`MathFn::PowF64`]); on a
//! float base with an integer exponent, the exponent is rounded to `f32`
//! (through `f64`) and `powf` runs in `f32`.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use slmcc_ir::ops::binary::BinaryKind;
use slmcc_ir::DType;

use super::elementwise::elementwise;
use super::{dtype, unsupported, NodeSig};
use crate::cpu::emit::{KernelBuilder, Width, STATUS_DIVISION_BY_ZERO};
use crate::cpu::math::MathFn;
use crate::cpu::CpuError;

/// `binary` on two operands of one integer dtype (or comparisons of
/// `bool`).
pub fn binary(kb: &mut KernelBuilder, kind: BinaryKind, sig: &NodeSig) -> Result<(), CpuError> {
    let d = sig.inputs[0].dtype;
    let int = matches!(d, DType::I64 | DType::I32 | DType::I8 | DType::U8);
    if !(int || d == DType::Bool && kind.is_comparison()) {
        return Err(unsupported(kind.mnemonic(), format!("on {d}")));
    }
    let signed = dtype::is_signed(d);
    elementwise(kb, sig, false, &mut |kb, a, _| {
        let (x, y) = (a[0], a[1]);
        Ok(match kind {
            BinaryKind::Add => kb.b.ins().iadd(x, y),
            BinaryKind::Sub => kb.b.ins().isub(x, y),
            BinaryKind::Mul => kb.b.ins().imul(x, y),
            BinaryKind::Max if signed => kb.b.ins().smax(x, y),
            BinaryKind::Max => kb.b.ins().umax(x, y),
            BinaryKind::Min if signed => kb.b.ins().smin(x, y),
            BinaryKind::Min => kb.b.ins().umin(x, y),
            BinaryKind::Div | BinaryKind::Mod => {
                let (x, y) = (dtype::to_i64(kb, x, d), dtype::to_i64(kb, y, d));
                let r = div_mod(kb, kind == BinaryKind::Div, x, y);
                dtype::from_i64(kb, r, d)?
            }
            BinaryKind::Pow => {
                let x = dtype::to_i64(kb, x, d);
                let y = dtype::to_i64(kb, y, d);
                let y = kb.b.ins().fcvt_from_sint(types::F64, y);
                pow_int(kb, x, y, d)?
            }
            cmp => kb.b.ins().icmp(int_cc(cmp, signed), x, y),
        })
    })
}

fn int_cc(kind: BinaryKind, signed: bool) -> IntCC {
    let cc = match kind {
        BinaryKind::Equal => IntCC::Equal,
        BinaryKind::Less => IntCC::SignedLessThan,
        BinaryKind::LessOrEqual => IntCC::SignedLessThanOrEqual,
        BinaryKind::Greater => IntCC::SignedGreaterThan,
        _ => IntCC::SignedGreaterThanOrEqual,
    };
    if signed {
        cc
    } else {
        cc.unsigned()
    }
}

/// `x / y` (truncated) or `x mod y` (the sign of `y`) on `i64`, returning
/// [`STATUS_DIVISION_BY_ZERO`] from the kernel when `y == 0`. A divisor of
/// -1 is replaced by 1 before dividing (the quotient is then negated), so
/// `i64::MIN / -1` wraps instead of trapping.
fn div_mod(kb: &mut KernelBuilder, div: bool, x: Value, y: Value) -> Value {
    let zero = kb.b.ins().icmp_imm_s(IntCC::Equal, y, 0);
    kb.fail_if(zero, STATUS_DIVISION_BY_ZERO);
    let m1 = kb.b.ins().icmp_imm_s(IntCC::Equal, y, -1);
    let one = kb.b.ins().iconst(types::I64, 1);
    let safe = kb.b.ins().select(m1, one, y);
    if div {
        let q = kb.b.ins().sdiv(x, safe);
        let neg = kb.b.ins().ineg(x);
        return kb.b.ins().select(m1, neg, q);
    }
    // `x % 1 == 0 == x % -1`.
    let r = kb.b.ins().srem(x, safe);
    let r_neg = kb.b.ins().icmp_imm_s(IntCC::SignedLessThan, r, 0);
    let y_neg = kb.b.ins().icmp_imm_s(IntCC::SignedLessThan, y, 0);
    let signs_differ = kb.b.ins().bxor(r_neg, y_neg);
    let nonzero = kb.b.ins().icmp_imm_s(IntCC::NotEqual, r, 0);
    let adjust = kb.b.ins().band(signs_differ, nonzero);
    let shifted = kb.b.ins().iadd(r, y);
    kb.b.ins().select(adjust, shifted, r)
}

/// `(x as f64).powf(y)` saturated to `i64` (NaN to 0), wrapped to `d`.
fn pow_int(kb: &mut KernelBuilder, x: Value, y: Value, d: DType) -> Result<Value, CpuError> {
    let xf = kb.b.ins().fcvt_from_sint(types::F64, x);
    let p = kb.math(MathFn::PowF64, &[xf, y], Width::Scalar)?;
    let r = kb.b.ins().fcvt_to_sint_sat(types::I64, p);
    dtype::from_i64(kb, r, d)
}

/// `pow %a, %b` with operands of different dtypes, computed as the
/// reference does: an integer base with any exponent in `f64`, a float
/// base in `f32` (an integer exponent rounded to `f32` through `f64`).
pub fn pow_mixed(kb: &mut KernelBuilder, sig: &NodeSig) -> Result<(), CpuError> {
    let (da, db) = (sig.inputs[0].dtype, sig.inputs[1].dtype);
    let number = |d: DType| d.is_float() || d.is_int() || d == DType::Bool;
    if !number(da) || !number(db) || da == DType::Bool {
        return Err(unsupported("pow", format!("on {da} and {db}")));
    }
    elementwise(kb, sig, false, &mut |kb, a, w| {
        let (x, y) = (a[0], a[1]);
        if da.is_float() {
            let y = if db.is_float() {
                y
            } else {
                let wide = dtype::to_i64(kb, y, db);
                let d = kb.b.ins().fcvt_from_sint(types::F64, wide);
                kb.b.ins().fdemote(types::F32, d)
            };
            return kb.math(MathFn::Pow, &[x, y], w);
        }
        let x = dtype::to_i64(kb, x, da);
        let y = if db.is_float() {
            kb.b.ins().fpromote(types::F64, y)
        } else {
            let wide = dtype::to_i64(kb, y, db);
            kb.b.ins().fcvt_from_sint(types::F64, wide)
        };
        pow_int(kb, x, y, da)
    })
}
