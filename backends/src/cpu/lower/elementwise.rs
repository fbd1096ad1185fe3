//! Element-wise ops: `unary`, `binary` (NumPy broadcasting), `cast`,
//! `where` and `gelu`.
//!
//! All go through one loop nest over the result shape, each operand read
//! with its broadcast strides. `f32 → f32` ops run the contiguous innermost
//! dim in `f32x4` vectors (transcendentals call their helper lane by lane);
//! ops with `bool` or integer data run scalar. Every element is computed
//! with the operation the reference evaluation uses (the same IEEE `f32`
//! operation or the same helper), so results are bit-exact, up to the sign
//! of a zero `max`/`min` and the payload of NaNs.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use slmcc_ir::ops::binary::BinaryKind;
use slmcc_ir::ops::gelu::GeluApprox;
use slmcc_ir::ops::unary::UnaryKind;
use slmcc_ir::DType;

use super::{clif_type, unsupported, NodeSig};
use crate::cpu::emit::{broadcast_strides, row_major, Access, KernelBuilder, Width};
use crate::cpu::math::MathFn;
use crate::cpu::CpuError;

/// The body of an element-wise op: operand values to the result value.
type ElemFn<'f> = dyn FnMut(&mut KernelBuilder, &[Value], Width) -> Result<Value, CpuError> + 'f;

/// Emits the loop nest of an element-wise op with `sig.inputs.len()`
/// operands and one result; `vector` when `f` accepts `f32x4` values.
fn elementwise(
    kb: &mut KernelBuilder,
    sig: &NodeSig,
    vector: bool,
    f: &mut ElemFn,
) -> Result<(), CpuError> {
    let out = &sig.outputs[0];
    let n_in = sig.inputs.len();
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
        base: kb.buf(n_in),
        strides: row_major(&out.shape),
        elem_bytes: out.elem_bytes(),
    });
    let in_tys: Vec<Type> = sig
        .inputs
        .iter()
        .map(|o| clif_type(o.dtype))
        .collect::<Result<_, _>>()?;
    kb.nest(&out.shape, &accesses, vector.then_some(4), |kb, ptrs, w| {
        let args: Vec<Value> = (0..n_in).map(|k| kb.load(in_tys[k], ptrs[k], w)).collect();
        let v = f(kb, &args, w)?;
        kb.store(v, ptrs[n_in]);
        Ok(())
    })
}

pub fn unary(kb: &mut KernelBuilder, kind: UnaryKind, sig: &NodeSig) -> Result<(), CpuError> {
    let name = kind.mnemonic();
    let dt = sig.inputs[0].dtype;
    if dt == DType::F32 {
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
        DType::I64 | DType::I32 if int_kind => elementwise(kb, sig, false, &mut |kb, a, _| {
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
        }),
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
    match da {
        DType::F32 => {
            let vector = !kind.is_comparison();
            elementwise(kb, sig, vector, &mut |kb, a, w| {
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
            })
        }
        DType::I64 | DType::I32 => {
            if matches!(kind, BinaryKind::Div | BinaryKind::Mod | BinaryKind::Pow) {
                return Err(unsupported(name, format!("on {da}")));
            }
            elementwise(kb, sig, false, &mut |kb, a, _| {
                let (x, y) = (a[0], a[1]);
                Ok(match kind {
                    BinaryKind::Add => kb.b.ins().iadd(x, y),
                    BinaryKind::Sub => kb.b.ins().isub(x, y),
                    BinaryKind::Mul => kb.b.ins().imul(x, y),
                    BinaryKind::Max => kb.b.ins().smax(x, y),
                    BinaryKind::Min => kb.b.ins().smin(x, y),
                    cmp => kb.b.ins().icmp(int_cc(cmp), x, y),
                })
            })
        }
        d => Err(unsupported(name, format!("on {d}"))),
    }
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

fn int_cc(kind: BinaryKind) -> IntCC {
    match kind {
        BinaryKind::Equal => IntCC::Equal,
        BinaryKind::Less => IntCC::SignedLessThan,
        BinaryKind::LessOrEqual => IntCC::SignedLessThanOrEqual,
        BinaryKind::Greater => IntCC::SignedGreaterThan,
        _ => IntCC::SignedGreaterThanOrEqual,
    }
}

/// `cast` between `f32`, `i64`, `i32` and `bool` with [`Tensor::cast`]'s
/// semantics: floats to integers truncate and saturate (NaN to 0) through
/// `i64`, then wrap to `i32`; integers to `f32` round once through `f64`
/// exactly as the reference does; anything to `bool` is `!= 0` (NaN is
/// true).
///
/// [`Tensor::cast`]: slmcc_ir::Tensor::cast
pub fn cast(kb: &mut KernelBuilder, to: DType, sig: &NodeSig) -> Result<(), CpuError> {
    let from = sig.inputs[0].dtype;
    let ok = |d: DType| matches!(d, DType::F32 | DType::I64 | DType::I32 | DType::Bool);
    if !ok(from) || !ok(to) {
        return Err(unsupported("cast", format!("from {from} to {to}")));
    }
    let vector = from == to && from == DType::F32;
    elementwise(kb, sig, vector, &mut |kb, a, _| {
        let x = a[0];
        let out = clif_type(to)?;
        let ins = &mut kb.b;
        Ok(match (from, to) {
            _ if from == to => x,
            (DType::F32, DType::I64) => ins.ins().fcvt_to_sint_sat(types::I64, x),
            (DType::F32, DType::I32) => {
                let wide = ins.ins().fcvt_to_sint_sat(types::I64, x);
                ins.ins().ireduce(types::I32, wide)
            }
            (DType::F32, DType::Bool) => {
                let z = ins.ins().f32const(0.0);
                ins.ins().fcmp(FloatCC::NotEqual, x, z)
            }
            (DType::I64 | DType::I32, DType::F32) => {
                let d = ins.ins().fcvt_from_sint(types::F64, x);
                ins.ins().fdemote(types::F32, d)
            }
            (DType::Bool, DType::F32) => {
                let w = ins.ins().uextend(types::I32, x);
                ins.ins().fcvt_from_uint(types::F32, w)
            }
            (DType::I64, DType::I32) => ins.ins().ireduce(types::I32, x),
            (DType::I32, DType::I64) => ins.ins().sextend(types::I64, x),
            (DType::Bool, _) => ins.ins().uextend(out, x),
            (_, DType::Bool) => ins.ins().icmp_imm_s(IntCC::NotEqual, x, 0),
            _ => unreachable!("every pair of the four dtypes is covered"),
        })
    })
}

/// `where %cond, %x, %y`, broadcast.
pub fn where_(kb: &mut KernelBuilder, sig: &NodeSig) -> Result<(), CpuError> {
    let d = sig.inputs[1].dtype;
    clif_type(d).map_err(|_| unsupported("where", format!("on {d}")))?;
    elementwise(kb, sig, false, &mut |kb, a, _| {
        Ok(kb.b.ins().select(a[0], a[1], a[2]))
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
