//! Data movement: `reshape`, `squeeze`, `unsqueeze`, `identity`,
//! `transpose`, `expand`, `slice`, `concat`, `split`, `constant`, `trilu`,
//! and the generator `range` (the gathers are in [`gather`](super::gather)).
//!
//! Each is one or more strided copies: a loop nest over the destination
//! region, the source read through strides (permuted for `transpose`, zero
//! for `expand`, scaled by the step for `slice`). Copies move elements as
//! integers of the element's width, so they work for every byte-sized
//! dtype, and run 128-bit vectors over contiguous innermost runs. They are
//! exact by construction.

use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use slmcc_ir::ops::slice::Slice;
use slmcc_ir::ops::{norm_axis, OpDef};
use slmcc_ir::{DType, EvalCtx, Op, Tensor};

use super::{unsupported, NodeSig};
use crate::cpu::emit::{row_major, Access, KernelBuilder, Ptr};
use crate::cpu::CpuError;

/// The integer type that moves one element of `bytes` bytes.
pub(super) fn move_type(bytes: i64) -> Result<Type, CpuError> {
    Ok(match bytes {
        1 => types::I8,
        2 => types::I16,
        4 => types::I32,
        8 => types::I64,
        _ => return Err(CpuError::Codegen(format!("no move type for {bytes} bytes"))),
    })
}

/// Copies the region `dims` from `src` (element strides `src_strides`) to
/// `dst` (element strides `dst_strides`).
pub fn copy(
    kb: &mut KernelBuilder,
    dims: &[usize],
    elem_bytes: i64,
    src: Value,
    src_strides: Vec<i64>,
    dst: Value,
    dst_strides: Vec<i64>,
) -> Result<(), CpuError> {
    let ty = move_type(elem_bytes)?;
    let accesses = [
        Access {
            base: src,
            strides: src_strides,
            elem_bytes,
        },
        Access {
            base: dst,
            strides: dst_strides,
            elem_bytes,
        },
    ];
    let lanes = (16 / elem_bytes) as u8;
    kb.nest(dims, &accesses, Some(lanes), |kb, p, w| {
        let v = kb.load(ty, p[0], w);
        kb.store(v, p[1]);
        Ok(())
    })
}

pub(super) fn elem_bytes(sig: &NodeSig, op: &str) -> Result<i64, CpuError> {
    let d = sig.inputs[0].dtype;
    if !d.bits().is_multiple_of(8) {
        return Err(unsupported(op, format!("on {d}")));
    }
    Ok(sig.inputs[0].elem_bytes())
}

/// `reshape`, `squeeze`, `unsqueeze`, `identity`: the bytes do not move.
pub fn same_layout(kb: &mut KernelBuilder, op: &str, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, op)?;
    let n: usize = sig.inputs[0].shape.iter().product();
    let (src, dst) = (kb.buf(0), kb.buf(sig.inputs.len()));
    copy(kb, &[n], eb, src, vec![1], dst, vec![1])
}

pub fn transpose(kb: &mut KernelBuilder, perm: &[i64], sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "transpose")?;
    let in_st = row_major(&sig.inputs[0].shape);
    let src_strides = perm.iter().map(|&p| in_st[p as usize]).collect();
    let out = &sig.outputs[0].shape;
    let (src, dst) = (kb.buf(0), kb.buf(1));
    copy(kb, out, eb, src, src_strides, dst, row_major(out))
}

pub fn expand(kb: &mut KernelBuilder, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "expand")?;
    let out = &sig.outputs[0].shape;
    let src_strides = crate::cpu::emit::broadcast_strides(&sig.inputs[0].shape, out);
    let (src, dst) = (kb.buf(0), kb.buf(2));
    copy(kb, out, eb, src, src_strides, dst, row_major(out))
}

/// `slice` with bounds known at compile time. Each sliced axis is resolved
/// by running the reference `slice` on that axis's index range alone, so
/// the clamping rules are the reference's.
pub fn slice(kb: &mut KernelBuilder, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "slice")?;
    let shape = &sig.inputs[0].shape;
    let known = |k: usize| -> Result<Option<Vec<i64>>, CpuError> {
        match sig.inputs.get(k) {
            None => Ok(None),
            Some(o) => match o.value {
                Some(t) => Ok(Some(t.to_i64_vec())),
                None => Err(unsupported("slice", "with bounds computed at run time")),
            },
        }
    };
    let starts = known(1)?.unwrap_or_default();
    let ends = known(2)?.unwrap_or_default();
    let axes = known(3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = known(4)?.unwrap_or_else(|| vec![1; starts.len()]);
    let in_st = row_major(shape);
    let mut src_strides = in_st.clone();
    let mut offset = 0i64;
    for (i, &axis) in axes.iter().enumerate() {
        let a = norm_axis(axis, shape.len()).map_err(|e| unsupported("slice", e.0))?;
        let iota = Tensor::from_i64(vec![shape[a]], (0..shape[a] as i64).collect());
        let one = |v: i64| Tensor::from_i64(vec![1], vec![v]);
        let picked = Slice
            .eval(
                &[
                    &iota,
                    &one(starts[i]),
                    &one(ends[i]),
                    &one(0),
                    &one(steps[i]),
                ],
                &EvalCtx::default(),
            )
            .map_err(|e| CpuError::Codegen(format!("slice bounds: {e}")))?
            .remove(0)
            .to_i64_vec();
        if let [first, rest @ ..] = &picked[..] {
            offset += first * in_st[a];
            if let Some(second) = rest.first() {
                src_strides[a] = (second - first) * in_st[a];
            }
        }
    }
    let out = &sig.outputs[0].shape;
    let src = kb.buf(0);
    let src = kb.offset(src, offset * eb);
    let dst = kb.buf(sig.inputs.len());
    copy(kb, out, eb, src, src_strides, dst, row_major(out))
}

pub fn concat(kb: &mut KernelBuilder, axis: i64, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "concat")?;
    let out = &sig.outputs[0].shape;
    let a = norm_axis(axis, out.len()).map_err(|e| unsupported("concat", e.0))?;
    let out_st = row_major(out);
    let n_in = sig.inputs.len();
    let mut at = 0i64;
    for (k, o) in sig.inputs.iter().enumerate() {
        let dst = kb.buf(n_in);
        let dst = kb.offset(dst, at * out_st[a] * eb);
        let src = kb.buf(k);
        copy(
            kb,
            &o.shape,
            eb,
            src,
            row_major(&o.shape),
            dst,
            out_st.clone(),
        )?;
        at += o.shape[a] as i64;
    }
    Ok(())
}

pub fn split(kb: &mut KernelBuilder, axis: i64, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "split")?;
    let shape = &sig.inputs[0].shape;
    let a = norm_axis(axis, shape.len()).map_err(|e| unsupported("split", e.0))?;
    let in_st = row_major(shape);
    let mut at = 0i64;
    for (k, o) in sig.outputs.iter().enumerate() {
        let src = kb.buf(0);
        let src = kb.offset(src, at * in_st[a] * eb);
        let dst = kb.buf(1 + k);
        copy(
            kb,
            &o.shape,
            eb,
            src,
            in_st.clone(),
            dst,
            row_major(&o.shape),
        )?;
        at += o.shape[a] as i64;
    }
    Ok(())
}

/// `constant`: copies the value from a read-only data object.
pub fn constant(
    kb: &mut KernelBuilder,
    op: &slmcc_ir::ops::constant::Constant,
    sig: &NodeSig,
) -> Result<(), CpuError> {
    let t = op
        .eval(&[], &EvalCtx::default())
        .map_err(|e| unsupported("constant", format!("with a symbolic value ({e})")))?
        .remove(0);
    let _ = sig;
    let dst = kb.buf(0);
    static_value(kb, "constant", &t, dst)
}

/// Writes a value known at compile time to `dst`, copied from a data
/// object.
fn static_value(kb: &mut KernelBuilder, op: &str, t: &Tensor, dst: Value) -> Result<(), CpuError> {
    let d = t.dtype();
    if !d.bits().is_multiple_of(8) {
        return Err(unsupported(op, format!("of {d}")));
    }
    let eb = (d.bits() / 8) as i64;
    let id = kb.define_data(t.to_le_bytes())?;
    let src = kb.data_addr(id);
    copy(kb, &[t.len()], eb, src, vec![1], dst, vec![1])
}

/// `shape`, `size` and `constant_of_shape`: their results depend only on
/// shapes, which are static, so the kernel copies a value computed at
/// compile time (`constant_of_shape` by its reference evaluation).
pub fn shape_value(kb: &mut KernelBuilder, op: &Op, sig: &NodeSig) -> Result<(), CpuError> {
    let name = op.mnemonic();
    let dims = |s: &[usize]| Tensor::from_i64(vec![s.len()], s.iter().map(|&d| d as i64).collect());
    let x = &sig.inputs[0].shape;
    let value = match op {
        Op::Size(_) => Tensor::scalar_i64(x.iter().product::<usize>() as i64),
        Op::ShapeOf(sh) => {
            // ONNX `Shape` clamping of `start`/`end`.
            let r = x.len() as i64;
            let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
            let (s0, e0) = (clamp(sh.start), clamp(sh.end.unwrap_or(r)));
            dims(&x[s0..e0.max(s0)])
        }
        _ => {
            let out = &sig.outputs[0].shape;
            op.eval(&[&dims(out)], &EvalCtx::default())
                .map_err(|e| CpuError::Codegen(format!("`{name}`: {e}")))?
                .remove(0)
        }
    };
    let dst = kb.buf(sig.inputs.len());
    static_value(kb, name, &value, dst)
}

/// `trilu`: keeps the upper (`col - row >= k`) or lower (`col - row <= k`)
/// triangle of the last two axes and zeroes the rest, for any byte-sized
/// dtype; `k` is read from its operand at run time (0 without one).
pub fn trilu(kb: &mut KernelBuilder, upper: bool, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "trilu")?;
    let ty = move_type(eb)?;
    let shape = &sig.inputs[0].shape;
    let r = shape.len();
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    let batch: usize = shape[..r - 2].iter().product();
    let k = match sig.inputs.get(1) {
        Some(_) => {
            let kp = kb.buf(1);
            kb.load(
                types::I64,
                Ptr {
                    addr: kp,
                    splat: false,
                },
                crate::cpu::emit::Width::Scalar,
            )
        }
        None => kb.iconst(0),
    };
    let (src, dst) = (kb.buf(0), kb.buf(sig.inputs.len()));
    let row_bytes = cols as i64 * eb;
    let mat_bytes = rows as i64 * row_bytes;
    kb.for_n(batch, |kb, bi| {
        let (sm, dm) = (kb.index(src, bi, mat_bytes), kb.index(dst, bi, mat_bytes));
        kb.for_n(rows, |kb, row| {
            let sp = kb.index(sm, row, row_bytes);
            let dp = kb.index(dm, row, row_bytes);
            kb.for_n(cols, |kb, c| {
                let diff = kb.b.ins().isub(c, row);
                let cc = if upper {
                    cranelift_codegen::ir::condcodes::IntCC::SignedGreaterThanOrEqual
                } else {
                    cranelift_codegen::ir::condcodes::IntCC::SignedLessThanOrEqual
                };
                let keep = kb.b.ins().icmp(cc, diff, k);
                let at = |kb: &mut KernelBuilder, base| Ptr {
                    addr: kb.index(base, c, eb),
                    splat: false,
                };
                let (s, d) = (at(kb, sp), at(kb, dp));
                let v = kb.load(ty, s, crate::cpu::emit::Width::Scalar);
                let z = kb.b.ins().iconst(ty, 0);
                let out = kb.b.ins().select(keep, v, z);
                kb.store(out, d);
                Ok(())
            })
        })
    })
}

/// `range` with its (static) length from the result type: integers are
/// `start + i·delta` (wrapping), floats accumulate `value += delta` in
/// `f32` from `start`, as the reference does; the operands are read at run
/// time.
pub fn range(kb: &mut KernelBuilder, sig: &NodeSig) -> Result<(), CpuError> {
    let dt = sig.inputs[0].dtype;
    let ty = match dt {
        DType::F32 => types::F32,
        DType::I64 => types::I64,
        DType::I32 => types::I32,
        d => return Err(unsupported("range", format!("on {d}"))),
    };
    let n: usize = sig.outputs[0].shape.iter().product();
    let w = crate::cpu::emit::Width::Scalar;
    let scalar = |kb: &mut KernelBuilder, i: usize| {
        let addr = kb.buf(i);
        kb.load(ty, Ptr { addr, splat: false }, w)
    };
    let (start, delta) = (scalar(kb, 0), scalar(kb, 2));
    let out = kb.buf(3);
    let eb = sig.outputs[0].elem_bytes();
    let var = kb.b.declare_var(ty);
    kb.b.def_var(var, start);
    kb.for_n(n, |kb, i| {
        let at = kb.index(out, i, eb);
        let v = kb.b.use_var(var);
        kb.store(
            v,
            Ptr {
                addr: at,
                splat: false,
            },
        );
        let next = if ty == types::F32 {
            kb.b.ins().fadd(v, delta)
        } else {
            kb.b.ins().iadd(v, delta)
        };
        kb.b.def_var(var, next);
        Ok(())
    })
}
