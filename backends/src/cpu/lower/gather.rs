//! Gathers: `gather`, `gather_nd` and `gather_elements`, for every
//! byte-sized dtype.
//!
//! Indices (`i64` or `i32`) are read at run time: a negative index counts
//! from the end of its axis, and one out of range makes the kernel return
//! [`STATUS_INDEX_OUT_OF_RANGE`] (the reference fails there too). `gather`
//! copies one contiguous run of the inner dims per index, `gather_nd` the
//! contiguous slice an index tuple addresses, `gather_elements` one element
//! per index. When the indices of `gather_nd` or `gather_elements` are
//! compile-time constants (as exporters write for masks), the reference
//! evaluation on the data's element numbers gives, at compile time, the
//! source of every result element, and the kernel copies through that
//! table. All are exact copies.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Type, Value};
use slmcc_ir::ops::{norm_axis, OpDef};
use slmcc_ir::{DType, EvalCtx, Op, Tensor};

use super::movement::{copy, elem_bytes, move_type};
use super::{unsupported, NodeSig};
use crate::cpu::emit::{row_major, Access, KernelBuilder, Ptr, Width, STATUS_INDEX_OUT_OF_RANGE};
use crate::cpu::CpuError;

/// The type of the indices operand (`i64` or `i32`).
fn index_type(op: &str, sig: &NodeSig) -> Result<Type, CpuError> {
    match sig.inputs[1].dtype {
        DType::I64 => Ok(types::I64),
        DType::I32 => Ok(types::I32),
        d => Err(unsupported(op, format!("with {d} indices"))),
    }
}

/// Loads the index at `p`, counts a negative one from the end of an axis
/// of `n`, and returns it as `i64`; the kernel returns
/// [`STATUS_INDEX_OUT_OF_RANGE`] when it is outside `0..n`.
fn checked_index(kb: &mut KernelBuilder, ty: Type, p: Ptr, n: i64) -> Value {
    let i = kb.load(ty, p, Width::Scalar);
    let i = if ty == types::I64 {
        i
    } else {
        kb.b.ins().sextend(types::I64, i)
    };
    let wrapped = kb.b.ins().iadd_imm_s(i, n);
    let neg = kb.b.ins().icmp_imm_s(IntCC::SignedLessThan, i, 0);
    let j = kb.b.ins().select(neg, wrapped, i);
    let bad =
        kb.b.ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, j, n);
    kb.fail_if(bad, STATUS_INDEX_OUT_OF_RANGE);
    j
}

/// `gather` along `axis`: for every outer index and every index value,
/// copies one contiguous inner run.
pub fn gather(kb: &mut KernelBuilder, axis: i64, sig: &NodeSig) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "gather")?;
    let data = &sig.inputs[0].shape;
    let idx_ty = index_type("gather", sig)?;
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
    kb.nest(&[outer, nidx], &accesses, None, |kb, p, _| {
        let j = checked_index(kb, idx_ty, p[1], n);
        let src = kb.index(p[0].addr, j, inner_i * eb);
        copy(kb, &[inner], eb, src, vec![1], p[2].addr, vec![1])
    })
}

/// Whether a gather's indices are constants small enough to turn into a
/// table of source elements at compile time.
fn table_fits(sig: &NodeSig) -> bool {
    let n: usize = sig.inputs[0].shape.iter().product();
    sig.inputs[1].value.is_some() && n <= MAX_TABLE_SOURCE
}

/// `gather_nd` with `batch_dims = b` and index tuples of length `m`: for
/// every batch and every tuple, the tuple's indices into axes `b..b+m`
/// locate one contiguous slice of the trailing axes, which is copied.
pub fn gather_nd(
    kb: &mut KernelBuilder,
    op: &Op,
    batch_dims: i64,
    sig: &NodeSig,
) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "gather_nd")?;
    let idx_ty = index_type("gather_nd", sig)?;
    if table_fits(sig) {
        return by_index_table(kb, op, sig);
    }
    let (ds, is) = (&sig.inputs[0].shape, &sig.inputs[1].shape);
    let (b, q) = (batch_dims as usize, is.len());
    let m = is[q - 1];
    let st = row_major(ds);
    let batch: usize = ds[..b].iter().product();
    let per_batch: usize = is[b..q - 1].iter().product();
    let slice: usize = ds[b + m..].iter().product();
    let batch_stride = if b == 0 { 0 } else { st[b - 1] };
    let ieb = sig.inputs[1].elem_bytes();
    let (pb, m_i, slice_i) = (per_batch as i64, m as i64, slice as i64);
    let accesses = [
        Access {
            base: kb.buf(0),
            strides: vec![batch_stride, 0],
            elem_bytes: eb,
        },
        Access {
            base: kb.buf(1),
            strides: vec![pb * m_i, m_i],
            elem_bytes: ieb,
        },
        Access {
            base: kb.buf(2),
            strides: vec![pb * slice_i, slice_i],
            elem_bytes: eb,
        },
    ];
    kb.nest(&[batch, per_batch], &accesses, None, |kb, p, _| {
        let mut src = p[0].addr;
        for a in 0..m {
            let at = Ptr {
                addr: kb.offset(p[1].addr, a as i64 * ieb),
                splat: false,
            };
            let j = checked_index(kb, idx_ty, at, ds[b + a] as i64);
            src = kb.index(src, j, st[b + a] * eb);
        }
        copy(kb, &[slice], eb, src, vec![1], p[2].addr, vec![1])
    })
}

/// `gather_elements` along `axis`: every result element reads the data at
/// its own coordinates, with the one on `axis` replaced by its index.
pub fn gather_elements(
    kb: &mut KernelBuilder,
    op: &Op,
    axis: i64,
    sig: &NodeSig,
) -> Result<(), CpuError> {
    let eb = elem_bytes(sig, "gather_elements")?;
    let idx_ty = index_type("gather_elements", sig)?;
    if table_fits(sig) {
        return by_index_table(kb, op, sig);
    }
    let (ds, is) = (&sig.inputs[0].shape, &sig.inputs[1].shape);
    let a = norm_axis(axis, ds.len()).map_err(|e| unsupported("gather_elements", e.0))?;
    let st = row_major(ds);
    let mut data_strides = st.clone();
    data_strides[a] = 0;
    let ty = move_type(eb)?;
    let accesses = [
        Access {
            base: kb.buf(0),
            strides: data_strides,
            elem_bytes: eb,
        },
        Access {
            base: kb.buf(1),
            strides: row_major(is),
            elem_bytes: sig.inputs[1].elem_bytes(),
        },
        Access {
            base: kb.buf(2),
            strides: row_major(is),
            elem_bytes: eb,
        },
    ];
    let n = ds[a] as i64;
    kb.nest(is, &accesses, None, |kb, p, w| {
        let j = checked_index(kb, idx_ty, p[1], n);
        let src = Ptr {
            addr: kb.index(p[0].addr, j, st[a] * eb),
            splat: false,
        };
        let v = kb.load(ty, src, w);
        kb.store(v, p[2]);
        Ok(())
    })
}

/// Largest data operand (in elements) for which [`by_index_table`] builds
/// its table at compile time; beyond, the indices are read at run time.
const MAX_TABLE_SOURCE: usize = 1 << 24;

/// A gather whose indices are compile-time constants (as exporters write
/// for masks): the reference evaluation on the element numbers of the data
/// gives, for each result element, its source element. The kernel copies
/// through that table, stored as a data object.
fn by_index_table(kb: &mut KernelBuilder, op: &Op, sig: &NodeSig) -> Result<(), CpuError> {
    let name = op.mnemonic();
    let eb = elem_bytes(sig, name)?;
    let data = &sig.inputs[0].shape;
    let n: usize = data.iter().product();
    let mut rest = Vec::new();
    for o in &sig.inputs[1..] {
        match o.value {
            Some(t) => rest.push(t),
            None => return Err(CpuError::Codegen(format!("`{name}`: indices not constant"))),
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
