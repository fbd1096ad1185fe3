//! Data movement: `reshape`, `squeeze`, `unsqueeze`, `identity`,
//! `transpose`, `expand`, `slice`, `concat`, `split`, `gather`,
//! `constant`, and `gather_nd`/`gather_elements` with constant indices.
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
use crate::cpu::emit::{row_major, Access, KernelBuilder, Ptr, STATUS_INDEX_OUT_OF_RANGE};
use crate::cpu::CpuError;

/// The integer type that moves one element of `bytes` bytes.
fn move_type(bytes: i64) -> Result<Type, CpuError> {
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

fn elem_bytes(sig: &NodeSig, op: &str) -> Result<i64, CpuError> {
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

/// `gather` along `axis`: for every outer index and every index value,
/// copies one contiguous inner run. Negative indices count from the end; an
/// index out of range makes the kernel return
/// [`STATUS_INDEX_OUT_OF_RANGE`] (the reference fails there too).
pub fn gather(kb: &mut KernelBuilder, axis: i64, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "gather")?;
    let data = &sig.inputs[0].shape;
    let idx_dt = sig.inputs[1].dtype;
    let idx_ty = match idx_dt {
        DType::I64 => types::I64,
        DType::I32 => types::I32,
        d => return Err(unsupported("gather", format!("with {d} indices"))),
    };
    let a = norm_axis(axis, data.len()).map_err(|e| unsupported("gather", e.0))?;
    let outer: usize = data[..a].iter().product();
    let inner: usize = data[a + 1..].iter().product();
    let n = data[a] as i64;
    let nidx: usize = sig.inputs[1].shape.iter().product();
    let (data_buf, idx_buf, out_buf) = (kb.buf(0), kb.buf(1), kb.buf(2));
    let inner_i = inner as i64;
    let accesses = [
        Access {
            base: data_buf,
            strides: vec![n * inner_i, 0],
            elem_bytes: eb,
        },
        Access {
            base: idx_buf,
            strides: vec![0, 1],
            elem_bytes: sig.inputs[1].elem_bytes(),
        },
        Access {
            base: out_buf,
            strides: vec![nidx as i64 * inner_i, inner_i],
            elem_bytes: eb,
        },
    ];
    // Outer dims are not merged with the index dim: the nest is 2-D at most.
    kb.nest(&[outer, nidx], &accesses, None, |kb, p, w| {
        let i = kb.load(idx_ty, p[1], w);
        let i = if idx_ty == types::I64 {
            i
        } else {
            kb.b.ins().sextend(types::I64, i)
        };
        let wrapped = kb.b.ins().iadd_imm_s(i, n);
        let neg = kb.b.ins().icmp_imm_s(
            cranelift_codegen::ir::condcodes::IntCC::SignedLessThan,
            i,
            0,
        );
        let j = kb.b.ins().select(neg, wrapped, i);
        let bad = kb.b.ins().icmp_imm_s(
            cranelift_codegen::ir::condcodes::IntCC::UnsignedGreaterThanOrEqual,
            j,
            n,
        );
        kb.fail_if(bad, STATUS_INDEX_OUT_OF_RANGE);
        let src = kb.index(p[0].addr, j, inner_i * eb);
        copy(kb, &[inner], eb, src, vec![1], p[2].addr, vec![1])
    })
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
    let d = t.dtype();
    if !d.bits().is_multiple_of(8) {
        return Err(unsupported("constant", format!("of {d}")));
    }
    let eb = (d.bits() / 8) as i64;
    let id = kb.define_data(t.to_le_bytes())?;
    let src = kb.data_addr(id);
    let dst = kb.buf(0);
    let _ = sig;
    copy(kb, &[t.len()], eb, src, vec![1], dst, vec![1])
}

/// Largest data operand (in elements) for which [`by_index_table`] builds
/// its table at compile time.
const MAX_TABLE_SOURCE: usize = 1 << 24;

/// A data-movement op whose every operand but the data is a compile-time
/// constant (`gather_nd`, `gather_elements` with constant indices, as
/// exporters write for masks): the reference evaluation on the element
/// numbers of the data gives, for each result element, its source element.
/// The kernel copies through that table, stored as a data object.
pub fn by_index_table(kb: &mut KernelBuilder, op: &Op, sig: &NodeSig) -> Result<(), CpuError> {
    let name = op.mnemonic();
    let eb = elem_bytes(sig, name)?;
    let data = &sig.inputs[0].shape;
    let n: usize = data.iter().product();
    if n > MAX_TABLE_SOURCE {
        return Err(unsupported(name, format!("on data of {n} elements")));
    }
    let mut rest = Vec::new();
    for o in &sig.inputs[1..] {
        match o.value {
            Some(t) => rest.push(t),
            None => return Err(unsupported(name, "with indices computed at run time")),
        }
    }
    let iota = Tensor::from_i64(data.clone(), (0..n as i64).collect());
    let mut args = vec![&iota];
    args.extend(rest);
    let table = op
        .eval(&args, &EvalCtx::default())
        .map_err(|e| CpuError::Codegen(format!("`{name}` with constant indices: {e}")))?
        .remove(0)
        .to_i64_vec();
    let bytes: Vec<u8> = table.iter().flat_map(|v| v.to_le_bytes()).collect();
    let id = kb.define_data(bytes)?;
    let tab = kb.data_addr(id);
    let (src, dst) = (kb.buf(0), kb.buf(sig.inputs.len()));
    let ty = move_type(eb)?;
    let accesses = [
        Access {
            base: tab,
            strides: vec![1],
            elem_bytes: 8,
        },
        Access {
            base: dst,
            strides: vec![1],
            elem_bytes: eb,
        },
    ];
    kb.nest(&[table.len()], &accesses, None, |kb, p, w| {
        let i = kb.load(types::I64, p[0], w);
        let at = kb.index(src, i, eb);
        let v = kb.load(
            ty,
            Ptr {
                addr: at,
                splat: false,
            },
            w,
        );
        kb.store(v, p[1]);
        Ok(())
    })
}
