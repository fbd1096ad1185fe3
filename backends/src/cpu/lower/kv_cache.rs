//! The KV cache ops: `kv_write` (a step's new keys or values into the
//! cache) and `kv_mask` (which cache slots each query of the step sees),
//! as `slmcc_ir::ops::kv_cache` defines them. Both read the step's first
//! position `pos` from its `i64` buffer at run time; shapes (`[b, h, C, d]`
//! cache, `[b, h, s, d]` new entries), `sinks` and `window` are baked.
//!
//! **`kv_write`.** The memory planner computes the result in place of the
//! cache (the same buffer), but an executor may also hand over a separate
//! result buffer; the kernel compares the two pointers at run time and,
//! when they differ, first copies the whole cache to the result. It then
//! writes, for each of the `b · h` heads, the `s` new rows of `d` elements
//! at the slots of positions `pos .. pos + s`, in order (a later position
//! wins a slot it shares with an earlier one). Without a window, position
//! `p` is slot `p`, so a head's `s` rows are one contiguous run; with a
//! window the first slot is `pos < sinks ? pos : sinks + (pos - sinks) mod
//! window` and each next one is the previous plus one, wrapping from `C`
//! back to `sinks` (which is the same mapping, without ever forming
//! `pos + i`). Rows of the cache's dtype are copied with 16-byte moves
//! (plus a scalar tail); entries of another float dtype are converted on
//! the way as the `dtype` module loads and stores them (`f32 → f16`
//! rounds to nearest even, as the reference's `Tensor::cast` does), in
//! vectors of four. `f32` and `f16` caches and entries are handled, and
//! `i8` caches in the q8 row format (rows of `d + 4` bytes): each new row
//! is quantized by its own scale on the way, in the reference's order (the
//! maximum magnitude ignoring NaNs, `scale = max / 127`, then `q =
//! clamp(nearest(x / scale), -127, 127)` saturated to `i8`), scalar.
//!
//! A position that has no slot — without a window `pos < 0` or `pos + s >
//! C` (the context is full), with one `pos < 0` — makes the kernel return
//! [`STATUS_CONTEXT_FULL`] before it writes anything (the reference fails
//! there too). With `s = 0` nothing is checked or written but the copy.
//!
//! **`kv_mask`** is `bool[1, 1, s, C]`, one byte per element: slot `j`
//! holds position `P(j)` — `j` when `j < pos + s` for slots outside the ring
//! (every slot without a window, the sinks with one), and in the ring
//! (`r = j - sinks`, `last = pos + s - 1 - sinks`) `sinks + last - (last -
//! r) mod window` (a floor modulo, as `rem_euclid`) when `last - (last - r)
//! mod window >= 0` — and query `i` keeps slot `j` iff `P(j)` exists and
//! `P(j) <= pos + i`. The kernel walks the slots, computes `P(j)` once per
//! slot and writes its column of `s` flags. Integer arithmetic wraps as
//! `i64` does; any `pos` is accepted, like the reference.
//!
//! Both kernels are exact (data movement, integer arithmetic and the
//! reference's rounding), use no scratch and never trap on data.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, Value};
use slmcc_ir::ops::kv_cache::{KvLayout, Q8_SCALE_BYTES};
use slmcc_ir::DType;

use super::{dtype, movement, unsupported, NodeSig};
use crate::cpu::emit::{Access, KernelBuilder, Ptr, Width, STATUS_CONTEXT_FULL};
use crate::cpu::CpuError;

/// The static shapes of either op: `heads = b · h`, capacity `c`, `s` new
/// entries per head, `d` elements per entry, `row` elements per cache slot
/// (`d`, or `d + 4` bytes in a q8 cache).
#[derive(Clone, Copy, Debug)]
struct Dims {
    heads: usize,
    c: usize,
    s: usize,
    d: usize,
    row: usize,
}

/// Checks the operands (what `infer` guarantees, and the dtypes the
/// kernels handle) before anything is emitted.
fn dims(op: &str, layout: &KvLayout, sig: &NodeSig) -> Result<Dims, CpuError> {
    let [cache, new, pos] = &sig.inputs[..] else {
        return Err(unsupported(op, "without exactly three operands"));
    };
    let (cs, ns) = (&cache.shape, &new.shape);
    let scale_bytes = if cache.dtype == DType::I8 {
        Q8_SCALE_BYTES
    } else {
        0
    };
    if cs.len() != 4
        || ns.len() != 4
        || cs[0] != ns[0]
        || cs[1] != ns[1]
        || cs[3] != ns[3] + scale_bytes
    {
        return Err(unsupported(
            op,
            format!("with cache {cs:?} and new entries {ns:?}"),
        ));
    }
    if pos.dtype != DType::I64 || pos.shape.iter().product::<usize>() != 1 {
        return Err(unsupported(
            op,
            format!("with a position of {} {:?}", pos.dtype, pos.shape),
        ));
    }
    let valid = layout.sinks >= 0
        && layout.window >= 0
        && (layout.window > 0 || layout.sinks == 0)
        && (layout.window == 0 || cs[2] as i64 == layout.sinks + layout.window);
    if !valid {
        return Err(unsupported(
            op,
            format!(
                "with sinks = {}, window = {} and {} slots",
                layout.sinks, layout.window, cs[2]
            ),
        ));
    }
    Ok(Dims {
        heads: cs[0] * cs[1],
        c: cs[2],
        s: ns[2],
        d: ns[3],
        row: cs[3],
    })
}

/// The step's first position, read from its buffer.
fn load_position(kb: &mut KernelBuilder) -> Value {
    let addr = kb.buf(2);
    kb.load(types::I64, Ptr { addr, splat: false }, Width::Scalar)
}

/// `kv_write %cache, %new, %pos` (see the module doc).
pub fn kv_write(kb: &mut KernelBuilder, layout: &KvLayout, sig: &NodeSig) -> Result<(), CpuError> {
    let dm = dims("kv_write", layout, sig)?;
    let (cache_dt, new_dt) = (sig.inputs[0].dtype, sig.inputs[1].dtype);
    let handled = |d: DType| matches!(d, DType::F32 | DType::F16);
    if !(handled(cache_dt) || cache_dt == DType::I8) || !handled(new_dt) {
        return Err(unsupported(
            "kv_write",
            format!("with a {cache_dt} cache and {new_dt} entries"),
        ));
    }
    let (ceb, neb) = (sig.inputs[0].elem_bytes(), sig.inputs[1].elem_bytes());
    let (c, s, d) = (dm.c as i64, dm.s as i64, dm.d as i64);
    let pos = load_position(kb);
    if dm.s > 0 {
        // Every position of the step needs a slot; nothing is written
        // otherwise.
        let negative = kb.b.ins().icmp_imm_s(IntCC::SignedLessThan, pos, 0);
        let bad = if layout.window == 0 {
            // pos + s > C, without forming pos + s.
            let full = kb.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, pos, c - s);
            kb.b.ins().bor(negative, full)
        } else {
            negative
        };
        kb.fail_if(bad, STATUS_CONTEXT_FULL);
    }
    let (cache, new, out) = (kb.buf(0), kb.buf(1), kb.buf(3));
    let elsewhere = kb.b.ins().icmp(IntCC::NotEqual, cache, out);
    let total = dm.heads * dm.c * dm.row;
    kb.if_then(elsewhere, |kb| {
        movement::copy(kb, &[total], ceb, cache, vec![1], out, vec![1])
    })?;
    if dm.s == 0 || dm.d == 0 {
        return Ok(());
    }
    let convert = Convert {
        from: new_dt,
        to: cache_dt,
        from_bytes: neb,
        to_bytes: ceb,
    };
    let row = dm.row as i64;
    // Moves `rows` consecutive rows of one head from `src` to `dst`.
    let rows = |kb: &mut KernelBuilder, src: Value, dst: Value, rows: usize| {
        if cache_dt != DType::I8 {
            return convert.run(kb, src, dst, rows * dm.d);
        }
        kb.for_n(rows, |kb, r| {
            let from = kb.index(src, r, d * neb);
            let to = kb.index(dst, r, row);
            encode_q8_row(kb, new_dt, neb, from, to, dm.d)
        })
    };
    if layout.window == 0 {
        // Slots pos .. pos + s: one run of s · d elements per head.
        let first = kb.index(out, pos, row * ceb);
        return kb.for_n(dm.heads, |kb, n| {
            let src = kb.index(new, n, s * d * neb);
            let dst = kb.index(first, n, c * row * ceb);
            rows(kb, src, dst, dm.s)
        });
    }
    let (sinks, window) = (layout.sinks, layout.window);
    // The first slot (pos >= 0 here); the other arm of the select is
    // computed too but not used when pos < sinks.
    let ring = kb.b.ins().iadd_imm_s(pos, -sinks);
    let ring = kb.b.ins().urem_imm_s(ring, window);
    let ring = kb.b.ins().iadd_imm_s(ring, sinks);
    let in_sinks = kb.b.ins().icmp_imm_s(IntCC::SignedLessThan, pos, sinks);
    let first = kb.b.ins().select(in_sinks, pos, ring);
    let slot = kb.b.declare_var(types::I64);
    kb.b.def_var(slot, first);
    kb.for_n(dm.s, |kb, i| {
        let sl = kb.b.use_var(slot);
        let slot_row = kb.index(out, sl, row * ceb);
        let src_row = kb.index(new, i, d * neb);
        kb.for_n(dm.heads, |kb, n| {
            let src = kb.index(src_row, n, s * d * neb);
            let dst = kb.index(slot_row, n, c * row * ceb);
            rows(kb, src, dst, 1)
        })?;
        let next = kb.b.ins().iadd_imm_s(sl, 1);
        let wrap = kb.b.ins().icmp_imm_s(IntCC::Equal, next, c);
        let to = kb.iconst(sinks);
        let next = kb.b.ins().select(wrap, to, next);
        kb.b.def_var(slot, next);
        Ok(())
    })
}

/// Quantizes the `d` entries of `new_dt` at `src` into the q8 row at
/// `dst`: `d` values, then the `f32` scale (see the module doc).
fn encode_q8_row(
    kb: &mut KernelBuilder,
    new_dt: DType,
    neb: i64,
    src: Value,
    dst: Value,
    d: usize,
) -> Result<(), CpuError> {
    let at = |addr| Ptr { addr, splat: false };
    let max = kb.b.declare_var(types::F32);
    let zero = kb.b.ins().f32const(0.0);
    kb.b.def_var(max, zero);
    kb.for_n(d, |kb, c| {
        let p = kb.index(src, c, neb);
        let x = dtype::load(kb, new_dt, at(p), Width::Scalar)?;
        let a = kb.b.ins().fabs(x);
        let m = kb.b.use_var(max);
        // Greater only: a NaN never becomes the maximum.
        let gt = kb.b.ins().fcmp(FloatCC::GreaterThan, a, m);
        let m = kb.b.ins().select(gt, a, m);
        kb.b.def_var(max, m);
        Ok(())
    })?;
    let m = kb.b.use_var(max);
    let qmax = kb.b.ins().f32const(127.0);
    let scale = kb.b.ins().fdiv(m, qmax);
    kb.for_n(d, |kb, c| {
        let p = kb.index(src, c, neb);
        let x = dtype::load(kb, new_dt, at(p), Width::Scalar)?;
        let y = kb.b.ins().fdiv(x, scale);
        let y = kb.b.ins().nearest(y);
        let lo = kb.b.ins().f32const(-127.0);
        let y = kb.b.ins().fmax(y, lo);
        let y = kb.b.ins().fmin(y, qmax);
        let q = kb.b.ins().fcvt_to_sint_sat(types::I32, y);
        let q = kb.b.ins().ireduce(types::I8, q);
        let to = kb.index(dst, c, 1);
        kb.store(q, at(to));
        Ok(())
    })?;
    let to = kb.offset(dst, d as i64);
    kb.store(scale, at(to));
    Ok(())
}

/// How entries move from the new-entries dtype to the cache's.
#[derive(Clone, Copy, Debug)]
struct Convert {
    from: DType,
    to: DType,
    from_bytes: i64,
    to_bytes: i64,
}

impl Convert {
    /// Moves `n` contiguous elements from `src` to `dst`.
    fn run(
        &self,
        kb: &mut KernelBuilder,
        src: Value,
        dst: Value,
        n: usize,
    ) -> Result<(), CpuError> {
        if self.from == self.to {
            return movement::copy(kb, &[n], self.to_bytes, src, vec![1], dst, vec![1]);
        }
        let accesses = [
            Access {
                base: src,
                strides: vec![1],
                elem_bytes: self.from_bytes,
            },
            Access {
                base: dst,
                strides: vec![1],
                elem_bytes: self.to_bytes,
            },
        ];
        let (from, to) = (self.from, self.to);
        kb.nest(&[n], &accesses, Some(4), |kb, p, w| {
            let v = dtype::load(kb, from, p[0], w)?;
            dtype::store(kb, to, v, p[1], w);
            Ok(())
        })
    }
}

/// `kv_mask %cache, %new, %pos` (see the module doc).
pub fn kv_mask(kb: &mut KernelBuilder, layout: &KvLayout, sig: &NodeSig) -> Result<(), CpuError> {
    let dm = dims("kv_mask", layout, sig)?;
    let out_shape = &sig.outputs[0].shape;
    if sig.outputs[0].dtype != DType::Bool || out_shape[..] != [1, 1, dm.s, dm.c] {
        return Err(unsupported(
            "kv_mask",
            format!("with a result of {} {out_shape:?}", sig.outputs[0].dtype),
        ));
    }
    if dm.s == 0 || dm.c == 0 {
        return Ok(());
    }
    let pos = load_position(kb);
    let out = kb.buf(3);
    let total = kb.b.ins().iadd_imm_s(pos, dm.s as i64);
    let col = Column {
        out,
        pos,
        s: dm.s,
        c: dm.c as i64,
        span: layout.span,
    };
    // Slots that hold their own position (all of them without a window).
    let plain = if layout.window == 0 {
        dm.c
    } else {
        layout.sinks as usize
    };
    kb.for_n(plain, |kb, j| {
        let held = kb.b.ins().icmp(IntCC::SignedLessThan, j, total);
        col.write(kb, j, held, j)
    })?;
    if layout.window == 0 {
        return Ok(());
    }
    let (sinks, window) = (layout.sinks, layout.window);
    // The ring index of the latest position written.
    let last = kb.b.ins().iadd_imm_s(total, -1 - sinks);
    kb.for_n(dm.c - plain, |kb, r| {
        // p = last - (last - r).rem_euclid(window)
        let t = kb.b.ins().isub(last, r);
        let m = kb.b.ins().srem_imm_s(t, window);
        let neg = kb.b.ins().icmp_imm_s(IntCC::SignedLessThan, m, 0);
        let wrapped = kb.b.ins().iadd_imm_s(m, window);
        let m = kb.b.ins().select(neg, wrapped, m);
        let p = kb.b.ins().isub(last, m);
        let held = kb.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, p, 0);
        let position = kb.b.ins().iadd_imm_s(p, sinks);
        let j = kb.b.ins().iadd_imm_s(r, sinks);
        col.write(kb, j, held, position)
    })
}

/// One slot's column of the mask.
#[derive(Clone, Copy)]
struct Column {
    out: Value,
    pos: Value,
    s: usize,
    c: i64,
    /// The model's sliding window (0: none).
    span: i64,
}

impl Column {
    /// `out[i, j] = held && position <= pos + i` (and with a span,
    /// `position > pos + i - span`) for every query `i`.
    fn write(
        &self,
        kb: &mut KernelBuilder,
        j: Value,
        held: Value,
        position: Value,
    ) -> Result<(), CpuError> {
        let top = kb.index(self.out, j, 1);
        let (pos, c, span) = (self.pos, self.c, self.span);
        kb.for_n(self.s, |kb, i| {
            let q = kb.b.ins().iadd(pos, i);
            let seen = kb.b.ins().icmp(IntCC::SignedLessThanOrEqual, position, q);
            let mut keep = kb.b.ins().band(held, seen);
            if span > 0 {
                let reach = kb.b.ins().iadd_imm_s(position, span);
                let recent = kb.b.ins().icmp(IntCC::SignedGreaterThan, reach, q);
                keep = kb.b.ins().band(keep, recent);
            }
            let addr = kb.index(top, i, c);
            kb.store(keep, Ptr { addr, splat: false });
            Ok(())
        })
    }
}
