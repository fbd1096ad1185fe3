//! Element-wise ops: `unary`, `binary` (NumPy broadcasting), `cast`,
//! `where`, `gelu` and `softcap`.
//!
//! All go through one loop nest over the result shape, each operand read
//! with its broadcast strides and held as [`dtype`] says: floats (`f32`,
//! `f16`, `bf16`) in `f32`, integers at their width. Float ops run the
//! contiguous innermost dim in vectors of four (transcendentals call their
//! helper lane by lane, 16-bit floats convert lane-wise); ops with `bool`
//! or integer data run scalar (integer arithmetic is in [`integer`]).
//! Every element is computed with the operation the reference evaluation
//! uses (the same IEEE `f32` operation or the same helper, the same
//! rounding to 16-bit floats), so results are bit-exact, up to the sign
//! of a zero `max`/`min` and the payload of NaNs.
//!
//! [`dtype`]: super::dtype
//! [`integer`]: super::integer

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use slmcc_ir::ops::binary::BinaryKind;
use slmcc_ir::ops::gelu::GeluApprox;
use slmcc_ir::ops::unary::UnaryKind;
use slmcc_ir::DType;

use super::{dtype, integer, movement, unsupported, NodeSig};
use crate::cpu::emit::{broadcast_strides, row_major, Access, KernelBuilder, Width};
use crate::cpu::math::MathFn;
use crate::cpu::CpuError;

/// The body of an element-wise op: operand values to the result value.
pub(super) type ElemFn<'f> =
    dyn FnMut(&mut KernelBuilder, &[Value], Width) -> Result<Value, CpuError> + 'f;

/// The accesses of a broadcasting op over its result's shape: every
/// operand broadcast to the result (stride 0 on stretched axes), then the
/// result, row-major.
fn broadcast_accesses(kb: &mut KernelBuilder, sig: &NodeSig) -> Vec<Access> {
    let out = &sig.outputs[0];
    let mut accesses: Vec<Access> = sig
        .inputs
        .iter()
        .enumerate()
        .map(|(k, o)| Access {
            base: kb.buf(k),
            strides: broadcast_strides(&o.shape, &out.shape),
            elem_bytes: o.elem_bytes(),
        })
        .collect();
    accesses.push(Access {
        base: kb.buf(sig.inputs.len()),
        strides: row_major(&out.shape),
        elem_bytes: out.elem_bytes(),
    });
    accesses
}

/// Emits the loop nest of an element-wise op with `sig.inputs.len()`
/// operands and one result. Operands are loaded and the result stored as
/// [`dtype`](super::dtype) holds them; `vector` when `f` accepts vectors
/// of four (every operand and the result then must be a float).
pub(super) fn elementwise(
    kb: &mut KernelBuilder,
    sig: &NodeSig,
    vector: bool,
    f: &mut ElemFn,
) -> Result<(), CpuError> {
    let out = &sig.outputs[0];
    let n_in = sig.inputs.len();
    let accesses = broadcast_accesses(kb, sig);
    let in_dts: Vec<DType> = sig.inputs.iter().map(|o| o.dtype).collect();
    for &d in in_dts.iter().chain([&out.dtype]) {
        dtype::compute_type(d)?;
    }
    let vector = vector && in_dts.iter().chain([&out.dtype]).all(|d| d.is_float());
    let out_dt = out.dtype;
    kb.nest(&out.shape, &accesses, vector.then_some(4), |kb, ptrs, w| {
        let args: Vec<Value> = (0..n_in)
            .map(|k| dtype::load(kb, in_dts[k], ptrs[k], w))
            .collect::<Result<_, _>>()?;
        let v = f(kb, &args, w)?;
        dtype::store(kb, out_dt, v, ptrs[n_in], w);
        Ok(())
    })
}

pub fn unary(kb: &mut KernelBuilder, kind: UnaryKind, sig: &NodeSig) -> Result<(), CpuError> {
    let name = kind.mnemonic();
    let dt = sig.inputs[0].dtype;
    if dt.is_float() {
        let vector = !matches!(kind, UnaryKind::IsNan | UnaryKind::IsInf);
        return elementwise(kb, sig, vector, &mut |kb, a, w| {
            unary_f32(kb, kind, a[0], w)
        });
    }
    let int_kind = matches!(
        kind,
        UnaryKind::Neg | UnaryKind::Abs | UnaryKind::Sign | UnaryKind::Relu
    );
    match dt {
        // The reference's `i64` results wrap back to the dtype, which is
        // the same as computing at its width.
        DType::I64 | DType::I32 | DType::I8 if int_kind => {
            elementwise(kb, sig, false, &mut |kb, a, _| {
                let x = a[0];
                let ty = kb.b.func.dfg.value_type(x);
                Ok(match kind {
                    UnaryKind::Neg => kb.b.ins().ineg(x),
                    UnaryKind::Abs => kb.b.ins().iabs(x),
                    UnaryKind::Relu => {
                        let z = kb.b.ins().iconst(ty, 0);
                        kb.b.ins().smax(x, z)
                    }
                    _ => {
                        let (m1, p1) = (kb.b.ins().iconst(ty, -1), kb.b.ins().iconst(ty, 1));
                        let lo = kb.b.ins().smax(x, m1);
                        kb.b.ins().smin(lo, p1)
                    }
                })
            })
        }
        DType::Bool if kind == UnaryKind::Not => elementwise(kb, sig, false, &mut |kb, a, _| {
            Ok(kb.b.ins().bxor_imm_s(a[0], 1))
        }),
        d => Err(unsupported(name, format!("on {d}"))),
    }
}

fn unary_f32(
    kb: &mut KernelBuilder,
    kind: UnaryKind,
    x: Value,
    w: Width,
) -> Result<Value, CpuError> {
    let math = |kb: &mut KernelBuilder, f| kb.math(f, &[x], w);
    Ok(match kind {
        UnaryKind::Neg => kb.b.ins().fneg(x),
        UnaryKind::Abs => kb.b.ins().fabs(x),
        UnaryKind::Sqrt => kb.b.ins().sqrt(x),
        UnaryKind::Reciprocal => {
            let one = kb.f32c(1.0, w);
            kb.b.ins().fdiv(one, x)
        }
        UnaryKind::Floor => kb.b.ins().floor(x),
        UnaryKind::Ceil => kb.b.ins().ceil(x),
        UnaryKind::Exp => kb.exp(x, w)?,
        UnaryKind::Log => math(kb, MathFn::Log)?,
        UnaryKind::Erf => math(kb, MathFn::Erf)?,
        UnaryKind::Tanh => math(kb, MathFn::Tanh)?,
        UnaryKind::Sigmoid => kb.sigmoid(x, w)?,
        UnaryKind::Cos => math(kb, MathFn::Cos)?,
        UnaryKind::Sin => math(kb, MathFn::Sin)?,
        // `x.max(0.0)`: NaN gives 0.
        UnaryKind::Relu => {
            let z = kb.f32c(0.0, w);
            let gt = kb.fcmp(FloatCC::GreaterThan, x, z);
            kb.select(gt, x, z, w)
        }
        // 1 or -1, and x itself for ±0 and NaN.
        UnaryKind::Sign => {
            let z = kb.f32c(0.0, w);
            let (p1, m1) = (kb.f32c(1.0, w), kb.f32c(-1.0, w));
            let lt = kb.fcmp(FloatCC::LessThan, x, z);
            let neg = kb.select(lt, m1, x, w);
            let gt = kb.fcmp(FloatCC::GreaterThan, x, z);
            kb.select(gt, p1, neg, w)
        }
        UnaryKind::IsNan => kb.fcmp(FloatCC::Unordered, x, x),
        UnaryKind::IsInf => {
            let a = kb.b.ins().fabs(x);
            let inf = kb.f32c(f32::INFINITY, w);
            kb.fcmp(FloatCC::Equal, a, inf)
        }
        UnaryKind::Not => return Err(unsupported("not", "on f32")),
    })
}

pub fn binary(kb: &mut KernelBuilder, kind: BinaryKind, sig: &NodeSig) -> Result<(), CpuError> {
    let name = kind.mnemonic();
    let (da, db) = (sig.inputs[0].dtype, sig.inputs[1].dtype);
    if kind == BinaryKind::Pow && da != db {
        return integer::pow_mixed(kb, sig);
    }
    if da != db {
        return Err(unsupported(name, format!("on {da} and {db}")));
    }
    if kind.is_logic() {
        return elementwise(kb, sig, false, &mut |kb, a, _| {
            Ok(match kind {
                BinaryKind::And => kb.b.ins().band(a[0], a[1]),
                BinaryKind::Or => kb.b.ins().bor(a[0], a[1]),
                _ => kb.b.ins().bxor(a[0], a[1]),
            })
        });
    }
    if da.is_float() {
        let vector = !kind.is_comparison();
        return elementwise(kb, sig, vector, &mut |kb, a, w| {
            let (x, y) = (a[0], a[1]);
            Ok(match kind {
                BinaryKind::Add => kb.b.ins().fadd(x, y),
                BinaryKind::Sub => kb.b.ins().fsub(x, y),
                BinaryKind::Mul => kb.b.ins().fmul(x, y),
                BinaryKind::Div => kb.b.ins().fdiv(x, y),
                BinaryKind::Max => kb.b.ins().fmax(x, y),
                BinaryKind::Min => kb.b.ins().fmin(x, y),
                BinaryKind::Pow => kb.math(MathFn::Pow, &[x, y], w)?,
                BinaryKind::Mod => kb.math(MathFn::Mod, &[x, y], w)?,
                cmp => kb.fcmp(float_cc(cmp), x, y),
            })
        });
    }
    integer::binary(kb, kind, sig)
}

/// Ordered comparisons: false when either side is NaN, as the reference's
/// `partial_cmp`.
fn float_cc(kind: BinaryKind) -> FloatCC {
    match kind {
        BinaryKind::Equal => FloatCC::Equal,
        BinaryKind::Less => FloatCC::LessThan,
        BinaryKind::LessOrEqual => FloatCC::LessThanOrEqual,
        BinaryKind::Greater => FloatCC::GreaterThan,
        _ => FloatCC::GreaterThanOrEqual,
    }
}

/// `cast` between any two of `f32`, `f16`, `bf16`, `i64`, `i32`, `i8`,
/// `u8` and `bool`, with [`Tensor::cast`]'s semantics: floats to integers
/// truncate and saturate (NaN to 0) through `i64`, then wrap to the
/// narrower integer; integers to floats round once through `f64` to `f32`
/// exactly as the reference does (then to the 16-bit float, as stores
/// do); anything to `bool` is `!= 0` (NaN is true). A cast to the same
/// dtype copies the bytes, as the reference returns the tensor itself.
///
/// [`Tensor::cast`]: slmcc_ir::Tensor::cast
pub fn cast(kb: &mut KernelBuilder, to: DType, sig: &NodeSig) -> Result<(), CpuError> {
    let from = sig.inputs[0].dtype;
    let ok = |d: DType| dtype::compute_type(d).is_ok();
    if !ok(from) || !ok(to) {
        return Err(unsupported("cast", format!("from {from} to {to}")));
    }
    if from == to {
        return movement::same_layout(kb, "cast", sig);
    }
    let vector = from.is_float() && to.is_float();
    elementwise(kb, sig, vector, &mut |kb, a, _| {
        let x = a[0];
        Ok(match (from.is_float(), to) {
            // Float to float: the value is already `f32`; the store rounds.
            (true, to) if to.is_float() => x,
            (true, DType::Bool) => dtype::float_nonzero(kb, x),
            (true, to) => {
                let wide = kb.b.ins().fcvt_to_sint_sat(types::I64, x);
                dtype::from_i64(kb, wide, to)?
            }
            (false, DType::Bool) => kb.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0),
            (false, to) if to.is_float() => {
                let wide = dtype::to_i64(kb, x, from);
                let d = kb.b.ins().fcvt_from_sint(types::F64, wide);
                kb.b.ins().fdemote(types::F32, d)
            }
            (false, to) => {
                let wide = dtype::to_i64(kb, x, from);
                dtype::from_i64(kb, wide, to)?
            }
        })
    })
}

/// `where %cond, %x, %y`, broadcast, for any byte-sized dtype: the
/// selected element's bytes are copied, as the reference does.
pub fn where_(kb: &mut KernelBuilder, sig: &NodeSig) -> Result<(), CpuError> {
    let d = sig.inputs[1].dtype;
    if !d.bits().is_multiple_of(8) {
        return Err(unsupported("where", format!("on {d}")));
    }
    let ty = movement::move_type(sig.inputs[1].elem_bytes())?;
    let out = &sig.outputs[0];
    let accesses = broadcast_accesses(kb, sig);
    kb.nest(&out.shape, &accesses, None, |kb, p, w| {
        let c = kb.load(types::I8, p[0], w);
        let (x, y) = (kb.load(ty, p[1], w), kb.load(ty, p[2], w));
        let v = kb.b.ins().select(c, x, y);
        kb.store(v, p[3]);
        Ok(())
    })
}

pub fn gelu(kb: &mut KernelBuilder, approx: GeluApprox, sig: &NodeSig) -> Result<(), CpuError> {
    let d = sig.inputs[0].dtype;
    if d != DType::F32 {
        return Err(unsupported("gelu", format!("on {d}")));
    }
    let f = match approx {
        GeluApprox::None => MathFn::GeluErf,
        GeluApprox::Tanh => MathFn::GeluTanh,
    };
    elementwise(kb, sig, true, &mut |kb, a, w| kb.math(f, &[a[0]], w))
}

/// `softcap {cap}`: `cap · tanh(x / cap)` with the reference's operations
/// in its order (one division, the `tanh` helper, one product).
pub fn softcap(kb: &mut KernelBuilder, cap: f32, sig: &NodeSig) -> Result<(), CpuError> {
    let d = sig.inputs[0].dtype;
    if d != DType::F32 {
        return Err(unsupported("softcap", format!("on {d}")));
    }
    elementwise(kb, sig, true, &mut |kb, a, w| {
        let c = kb.f32c(cap, w);
        let scaled = kb.b.ins().fdiv(a[0], c);
        let t = kb.math(MathFn::Tanh, &[scaled], w)?;
        Ok(kb.b.ins().fmul(c, t))
    })
}
