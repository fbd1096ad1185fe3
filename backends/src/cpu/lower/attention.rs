//! `attention` (`f32` queries; keys and values `f32`, or `f16`/`bf16` as a
//! half KV cache stores them, widened exactly as they are loaded, or an
//! INT8 cache's q8 rows, each value converted and multiplied by its row's
//! scale as it is loaded, as the reference decodes them):
//! grouped-query attention with the causal /
//! sliding-window key range, soft-capping and an optional float (additive)
//! or bool (keep) mask, as `slmcc_ir::ops::attention` defines it.
//!
//! With the host GEMM on (the JIT's default), a node of more than one
//! query row with `f32` keys and values and no mask operand is one call
//! of the host attention ([`hostattn`]: blocked GEMMs with the online
//! softmax between them) instead; the rest of this module is the
//! generated kernel every other node gets.
//!
//! One query row at a time (loops over batch, KV head, query head of the
//! group, query position), so query head `h` reads KV head `h / group`
//! without copying K or V. For a row, the causal and window masks become
//! the key range `[lo, hi)` (`hi = min(t, i + (t - s) + 1)`, `lo = hi -
//! window` clamped at 0): keys outside it are never visited, which is what
//! their `-inf` score amounts to in the reference. The keys are processed
//! in tiles of [`TILE`]: one tile's scores live in a stack buffer of
//! `min(t, TILE)` `f32` (at most 2 KiB), the only scratch the kernel uses;
//! nothing is allocated.
//!
//! - `t <= TILE` (one tile, always the case for the test models): the
//!   reference's order exactly — scores, their maximum, `e_j = exp(s_j -
//!   max)` and their sum, `p_j = e_j / sum`, then `out = Σ_j p_j · v_j`
//!   accumulated over `j` in order from zero. With `CpuOptions::exact()`
//!   the result is bit-exact with the reference evaluation.
//! - `t > TILE`: an online softmax over the tiles: a running maximum `M`
//!   and sum `L`; a tile that raises the maximum rescales `L` and the
//!   accumulated output row by `exp(M_old - M_new)`; the row is divided by
//!   `L` at the end. Within ~1e-6 relative of the reference.
//!
//! With a bool mask the range is narrowed further to the first .. last
//! kept key of the row (the keys cut off are masked: weight exactly 0), so
//! attention over a KV cache visits the filled slots, not its capacity.
//!
//! A row whose every key is masked (empty range, or every score `-inf`)
//! is zeros, as in the reference. Under `fast_math` the dot products run in
//! `f32x4` partial sums, `exp` is the vector polynomial and the sums use
//! vector partial sums; `out += p · v` runs in `f32x4` vectors over the
//! value channels, blocked so the accumulators stay in registers.

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::Variable;
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::kv_cache::Q8_SCALE_BYTES;
use slmcc_ir::DType;

use super::dtype;
use super::row::{each, exp_sum, row_max};
use super::{unsupported, NodeSig};
use crate::cpu::emit::{broadcast_strides, KernelBuilder, Ptr, Width};
use crate::cpu::hostattn;
use crate::cpu::math::MathFn;
use crate::cpu::vmath;
use crate::cpu::CpuError;

/// Keys per tile: the scores of one tile of one query row are on the stack.
pub const TILE: usize = 512;

/// Vectors of output channels accumulated in registers at once.
const PV_BLOCK: usize = 4;

fn ptr(addr: Value) -> Ptr {
    Ptr { addr, splat: false }
}

/// The static description of one attention node.
struct Plan {
    op: Attention,
    group: usize,
    s: usize,
    t: usize,
    d: usize,
    dv: usize,
    /// The keys' and values' dtype, and its bytes per element.
    kv: DType,
    kv_bytes: i64,
    /// Bytes per key row and per value row (a q8 row ends in its scale).
    k_row: i64,
    v_row: i64,
    /// The mask: bool or not, and its strides over `[b, hq, s, t]`.
    mask: Option<(bool, Vec<i64>)>,
}

impl Plan {
    /// The column groups of an output row: blocks of up to [`PV_BLOCK`]
    /// `(first channel, width)` items, vectors first, then scalars.
    fn pv_blocks(&self) -> Vec<Vec<(usize, Width)>> {
        let mut items: Vec<(usize, Width)> = (0..self.dv / 4)
            .map(|c| (4 * c, Width::Vector(4)))
            .collect();
        items.extend((self.dv / 4 * 4..self.dv).map(|c| (c, Width::Scalar)));
        items.chunks(PV_BLOCK).map(<[_]>::to_vec).collect()
    }
}

/// Pointers of one query row.
#[derive(Clone, Copy)]
struct Row {
    q: Value,
    k: Value,
    v: Value,
    out: Value,
    mask: Option<Value>,
    /// The query position `i`.
    i: Value,
}

pub fn attention(kb: &mut KernelBuilder, op: &Attention, sig: &NodeSig) -> Result<(), CpuError> {
    let q = &sig.inputs[0];
    if q.dtype != DType::F32 {
        return Err(unsupported("attention", format!("on {}", q.dtype)));
    }
    let [b, hq, s, d] = q.shape[..] else {
        return Err(unsupported("attention", "with q not of rank 4"));
    };
    let kv = sig.inputs[1].dtype;
    if !matches!(kv, DType::F32 | DType::F16 | DType::BF16 | DType::I8) || sig.inputs[2].dtype != kv
    {
        return Err(unsupported(
            "attention",
            format!("with k and v of {} and {}", kv, sig.inputs[2].dtype),
        ));
    }
    let (hkv, t) = (sig.inputs[1].shape[1], sig.inputs[1].shape[2]);
    let dv = sig.outputs[0].shape[3];
    let kv_bytes = (kv.bits() / 8) as i64;
    let scale_bytes = if kv == DType::I8 {
        Q8_SCALE_BYTES as i64
    } else {
        0
    };
    let mask = sig.inputs.get(3).map(|m| {
        (
            m.dtype == DType::Bool,
            broadcast_strides(&m.shape, &[b, hq, s, t]),
        )
    });
    let plan = Plan {
        op: *op,
        group: hq / hkv,
        s,
        t,
        d,
        dv,
        kv,
        kv_bytes,
        k_row: d as i64 * kv_bytes + scale_bytes,
        v_row: dv as i64 * kv_bytes + scale_bytes,
        mask,
    };
    if host_attention(kb, &plan, sig) {
        return call_host_attention(kb, &plan, b, hq, hkv, sig.inputs.len());
    }
    let tile = t.min(TILE);
    let buf = kb.stack_buf((tile * 4) as u32);
    let (qb, kbuf, vb) = (kb.buf(0), kb.buf(1), kb.buf(2));
    let mb = plan.mask.as_ref().map(|_| kb.buf(3));
    let ob = kb.buf(sig.inputs.len());
    let (group, hkv_i) = (plan.group as i64, hkv as i64);
    let (s_i, t_i, d_i, dv_i) = (s as i64, t as i64, d as i64, dv as i64);
    let mst = plan.mask.as_ref().map(|(bool_mask, st)| {
        let eb = if *bool_mask { 1 } else { 4 };
        st.iter().map(|x| x * eb).collect::<Vec<i64>>()
    });
    kb.for_n(b, |kb, n| {
        kb.for_n(hkv, |kb, kvh| {
            // Query head h = kvh · group + g.
            let hn = kb.b.ins().imul_imm_s(n, hkv_i);
            let hn = kb.b.ins().iadd(hn, kvh);
            let k_head = kb.index(kbuf, hn, t_i * plan.k_row);
            let v_head = kb.index(vb, hn, t_i * plan.v_row);
            kb.for_n(plan.group, |kb, g| {
                let h = kb.b.ins().imul_imm_s(kvh, group);
                let h = kb.b.ins().iadd(h, g);
                let hq_i = hkv_i * group;
                let nh = kb.b.ins().imul_imm_s(n, hq_i);
                let nh = kb.b.ins().iadd(nh, h);
                let q_head = kb.index(qb, nh, s_i * d_i * 4);
                let o_head = kb.index(ob, nh, s_i * dv_i * 4);
                let m_head = match (mb, &mst) {
                    (Some(m), Some(st)) => {
                        let a = kb.index(m, n, st[0]);
                        Some(kb.index(a, h, st[1]))
                    }
                    _ => None,
                };
                kb.for_n(s, |kb, i| {
                    let row = Row {
                        q: kb.index(q_head, i, d_i * 4),
                        k: k_head,
                        v: v_head,
                        out: kb.index(o_head, i, dv_i * 4),
                        mask: match (m_head, &mst) {
                            (Some(m), Some(st)) => Some(kb.index(m, i, st[2])),
                            _ => None,
                        },
                        i,
                    };
                    attend_row(kb, &plan, row, buf, tile)
                })
            })
        })
    })
}

/// Whether the node goes to the host attention ([`hostattn`]): with the
/// host GEMM on, `f32` keys and values, no mask operand, more than one
/// query row (prefill; a decode row stays generated, where the call and
/// its tiles would cost more than they save) and heads that fit its tiles.
fn host_attention(kb: &KernelBuilder, plan: &Plan, sig: &NodeSig) -> bool {
    kb.host_gemm
        && plan.kv == DType::F32
        && sig.outputs[0].dtype == DType::F32
        && plan.mask.is_none()
        && plan.s > 1
        && (1..=hostattn::MAX_HEAD).contains(&plan.d)
        && (1..=hostattn::MAX_HEAD).contains(&plan.dv)
}

/// Emits `slmcc_attention(&desc, q, k, v, out)` with the node's
/// descriptor built on the kernel's stack.
fn call_host_attention(
    kb: &mut KernelBuilder,
    plan: &Plan,
    b: usize,
    hq: usize,
    hkv: usize,
    out_buf: usize,
) -> Result<(), CpuError> {
    use hostattn::desc_offsets as at;
    let desc = kb.stack_buf(at::SIZE);
    let flags = MemFlagsData::new().with_notrap();
    let dims = [
        (at::B, b),
        (at::HQ, hq),
        (at::HKV, hkv),
        (at::S, plan.s),
        (at::T, plan.t),
        (at::D, plan.d),
        (at::DV, plan.dv),
        (at::WINDOW, plan.op.window.max(0) as usize),
    ];
    for (offset, v) in dims {
        let v = kb.iconst(v as i64);
        kb.b.ins().store(flags, v, desc, offset);
    }
    // The exp's r² coefficient (0.5; see `crate::mutant`).
    let exp_x2 = match crate::mutant::active("exp-coefficient") {
        true => 0.501,
        false => 0.5,
    };
    let floats = [
        (at::SCALE, plan.op.scale),
        (at::SOFTCAP, plan.op.softcap),
        (at::EXP_X2, exp_x2),
    ];
    for (offset, v) in floats {
        let v = kb.b.ins().f32const(v);
        kb.b.ins().store(flags, v, desc, offset);
    }
    let words = [
        (at::CAUSAL, i64::from(plan.op.causal)),
        (at::THREADS, kb.threads as i64),
    ];
    for (offset, v) in words {
        let v = kb.b.ins().iconst(types::I32, v);
        kb.b.ins().store(flags, v, desc, offset);
    }
    let f = kb.import_host(hostattn::ATTENTION_SYMBOL, &[types::I64; 5], &[])?;
    let args = [desc, kb.buf(0), kb.buf(1), kb.buf(2), kb.buf(out_buf)];
    kb.b.ins().call(f, &args);
    Ok(())
}

/// Writes the scores of keys `j0 .. j0 + len` of `row` to `buf`.
fn scores(
    kb: &mut KernelBuilder,
    plan: &Plan,
    row: Row,
    buf: Value,
    j0: Value,
    len: Value,
) -> Result<(), CpuError> {
    let d = plan.d;
    let fast = kb.fast_math;
    let zero = kb.iconst(0);
    kb.for_range(zero, len, 1, |kb, jj| {
        let j = kb.b.ins().iadd(j0, jj);
        let krow = kb.index(row.k, j, plan.k_row);
        let kscale = row_scale(kb, plan, krow, d);
        let dot = if fast {
            dot_fast(kb, plan, row.q, krow, kscale)?
        } else {
            let var = kb.b.declare_var(types::F32);
            let z = kb.b.ins().f32const(-0.0);
            kb.b.def_var(var, z);
            kb.for_n(d, |kb, c| {
                let qx = kb.index(row.q, c, 4);
                let a = kb.load(types::F32, ptr(qx), Width::Scalar);
                let kx = kb.index(krow, c, plan.kv_bytes);
                let bv = load_kv(kb, plan, kx, Width::Scalar, kscale)?;
                let p = kb.b.ins().fmul(a, bv);
                let acc = kb.b.use_var(var);
                let acc = kb.b.ins().fadd(acc, p);
                kb.b.def_var(var, acc);
                Ok(())
            })?;
            kb.b.use_var(var)
        };
        let scale = kb.b.ins().f32const(plan.op.scale);
        let mut x = kb.b.ins().fmul(scale, dot);
        if plan.op.softcap > 0.0 {
            let c = kb.b.ins().f32const(plan.op.softcap);
            let y = kb.b.ins().fdiv(x, c);
            let th = kb.math(MathFn::Tanh, &[y], Width::Scalar)?;
            x = kb.b.ins().fmul(c, th);
        }
        if let (Some(m), Some((is_bool, st))) = (row.mask, &plan.mask) {
            let eb = if *is_bool { 1 } else { 4 };
            let mp = kb.index(m, j, st[3] * eb);
            if *is_bool {
                let keep = kb.load(types::I8, ptr(mp), Width::Scalar);
                let keep = kb.b.ins().icmp_imm_s(IntCC::NotEqual, keep, 0);
                let ninf = kb.b.ins().f32const(f32::NEG_INFINITY);
                x = kb.b.ins().select(keep, x, ninf);
            } else {
                let a = kb.load(types::F32, ptr(mp), Width::Scalar);
                x = kb.b.ins().fadd(x, a);
            }
        }
        let at = kb.index(buf, jj, 4);
        kb.store(x, ptr(at));
        Ok(())
    })
}

/// `q · k` over `d` channels in `f32x4` partial sums (two accumulators),
/// then the scalar tail.
fn dot_fast(
    kb: &mut KernelBuilder,
    plan: &Plan,
    q: Value,
    k: Value,
    scale: Option<Value>,
) -> Result<Value, CpuError> {
    let (d, kvb) = (plan.d, plan.kv_bytes);
    let w = Width::Vector(4);
    let mut accs = [kb.f32c(0.0, w), kb.f32c(0.0, w)];
    for c in 0..d / 4 {
        let qa = kb.offset(q, (16 * c) as i64);
        let ka = kb.offset(k, 4 * kvb * c as i64);
        let x = kb.load(types::F32, ptr(qa), w);
        let y = load_kv(kb, plan, ka, w, scale)?;
        let a = accs[c % 2];
        accs[c % 2] = if kb.fma {
            kb.b.ins().fma(x, y, a)
        } else {
            let p = kb.b.ins().fmul(x, y);
            kb.b.ins().fadd(a, p)
        };
    }
    let v = kb.b.ins().fadd(accs[0], accs[1]);
    let mut sum = vmath::hsum(kb, v);
    for c in d / 4 * 4..d {
        let qa = kb.offset(q, (4 * c) as i64);
        let ka = kb.offset(k, kvb * c as i64);
        let x = kb.load(types::F32, ptr(qa), Width::Scalar);
        let y = load_kv(kb, plan, ka, Width::Scalar, scale)?;
        let p = kb.b.ins().fmul(x, y);
        sum = kb.b.ins().fadd(sum, p);
    }
    Ok(sum)
}

/// `out[c] = out[c] · alpha + Σ_j buf[j] · v[j0 + j, c]` over `len` keys,
/// in register blocks of output channels (`alpha = None`: the row starts
/// from zero).
fn accumulate_pv(
    kb: &mut KernelBuilder,
    plan: &Plan,
    row: Row,
    buf: Value,
    j0: Value,
    len: Value,
    alpha: Option<Value>,
) -> Result<(), CpuError> {
    let dv = plan.dv as i64;
    let fast_fma = kb.fma;
    for block in plan.pv_blocks() {
        let vars: Vec<Variable> = block
            .iter()
            .map(|&(c, w)| {
                let var = kb.b.declare_var(w.ty(types::F32));
                let init = match alpha {
                    None => kb.f32c(0.0, w),
                    Some(a) => {
                        let o = kb.offset(row.out, (4 * c) as i64);
                        let o = kb.load(types::F32, ptr(o), w);
                        let a = kb.splat(a, w);
                        kb.b.ins().fmul(o, a)
                    }
                };
                kb.b.def_var(var, init);
                var
            })
            .collect();
        let zero = kb.iconst(0);
        kb.for_range(zero, len, 1, |kb, jj| {
            let pa = kb.index(buf, jj, 4);
            let p = kb.load(types::F32, ptr(pa), Width::Scalar);
            let j = kb.b.ins().iadd(j0, jj);
            let vrow = kb.index(row.v, j, plan.v_row);
            let vscale = row_scale(kb, plan, vrow, dv as usize);
            for (&(c, w), &var) in block.iter().zip(&vars) {
                let va = kb.offset(vrow, plan.kv_bytes * c as i64);
                let x = load_kv(kb, plan, va, w, vscale)?;
                let ps = kb.splat(p, w);
                let acc = kb.b.use_var(var);
                let next = if fast_fma {
                    kb.b.ins().fma(ps, x, acc)
                } else {
                    let m = kb.b.ins().fmul(ps, x);
                    kb.b.ins().fadd(acc, m)
                };
                kb.b.def_var(var, next);
            }
            Ok(())
        })?;
        for (&(c, _), &var) in block.iter().zip(&vars) {
            let o = kb.offset(row.out, (4 * c) as i64);
            let v = kb.b.use_var(var);
            kb.store(v, ptr(o));
        }
    }
    Ok(())
}

/// The scale of the q8 row at `row` of `n` values (after them); `None`
/// for a float cache.
fn row_scale(kb: &mut KernelBuilder, plan: &Plan, row: Value, n: usize) -> Option<Value> {
    (plan.kv == DType::I8).then(|| {
        let at = kb.offset(row, n as i64);
        kb.load(types::F32, ptr(at), Width::Scalar)
    })
}

/// Elements of a key or value row at `p`, as `f32`: a float cache's
/// widened as stored, a q8 row's converted and multiplied by its `scale`
/// (a vector reads 8 bytes, which a q8 row holds from any vector's start:
/// its scale follows the values).
fn load_kv(
    kb: &mut KernelBuilder,
    plan: &Plan,
    p: Value,
    w: Width,
    scale: Option<Value>,
) -> Result<Value, CpuError> {
    let Some(scale) = scale else {
        return dtype::load(kb, plan.kv, ptr(p), w);
    };
    let flags = MemFlagsData::new().with_notrap();
    let x = match w {
        Width::Scalar => {
            let q = kb.b.ins().sload8(types::I32, flags, p, 0);
            kb.b.ins().fcvt_from_sint(types::F32, q)
        }
        Width::Vector(_) => {
            let q = kb.b.ins().sload8x8(flags, p, 0);
            let q = kb.b.ins().swiden_low(q);
            kb.b.ins().fcvt_from_sint(types::F32X4, q)
        }
    };
    let s = kb.splat(scale, w);
    Ok(kb.b.ins().fmul(x, s))
}

/// Zeroes the output row.
fn zero_row(kb: &mut KernelBuilder, plan: &Plan, out: Value) {
    for (c, w) in plan.pv_blocks().into_iter().flatten() {
        let z = kb.f32c(0.0, w);
        let o = kb.offset(out, (4 * c) as i64);
        kb.store(z, ptr(o));
    }
}

/// The key range `[lo, hi)` of query `i`.
fn key_range(kb: &mut KernelBuilder, plan: &Plan, i: Value) -> (Value, Value) {
    let t = plan.t as i64;
    if !plan.op.causal {
        return (kb.iconst(0), kb.iconst(t));
    }
    // pos = i + (t - s); keys j <= pos, and j > pos - window.
    let past = t - plan.s as i64;
    let end = kb.b.ins().iadd_imm_s(i, past + 1);
    let tc = kb.iconst(t);
    let hi = kb.b.ins().smin(end, tc);
    let zero = kb.iconst(0);
    let hi = kb.b.ins().smax(hi, zero);
    let lo = if plan.op.window > 0 {
        let lo = kb.b.ins().iadd_imm_s(end, -plan.op.window);
        kb.b.ins().smax(lo, zero)
    } else {
        zero
    };
    (lo, hi)
}

/// With a bool mask, narrows `[lo, hi)` to the keys from the first kept
/// one to the last (a KV cache's mask keeps a prefix of its slots, so a
/// decode step visits the filled slots, not the whole capacity). The keys
/// cut off are masked: their score is `-inf`, their weight exactly `0`, so
/// skipping them changes nothing in the reference's order of operations.
fn trim_to_kept(
    kb: &mut KernelBuilder,
    plan: &Plan,
    row: Row,
    lo: Value,
    hi: Value,
) -> (Value, Value) {
    let (Some(m), Some((true, st))) = (row.mask, &plan.mask) else {
        return (lo, hi);
    };
    let step = st[3];
    // hi: while hi > lo and mask[hi - 1] is false, hi -= 1.
    let hi = scan(kb, m, step, hi, lo, -1);
    // lo: while lo < hi and mask[lo] is false, lo += 1.
    let lo = scan(kb, m, step, lo, hi, 1);
    (lo, hi)
}

/// Moves `from` towards `limit` by `dir` (±1) while the mask byte it would
/// cross (`from - 1` going down, `from` going up) is `0`; returns where it
/// stops.
fn scan(kb: &mut KernelBuilder, m: Value, step: i64, from: Value, limit: Value, dir: i64) -> Value {
    let head = kb.b.create_block();
    let body = kb.b.create_block();
    let exit = kb.b.create_block();
    let j = kb.b.append_block_param(head, types::I64);
    let out = kb.b.append_block_param(exit, types::I64);
    kb.b.ins().jump(head, &[from.into()]);
    kb.b.switch_to_block(head);
    let cc = if dir < 0 {
        IntCC::SignedGreaterThan
    } else {
        IntCC::SignedLessThan
    };
    let more = kb.b.ins().icmp(cc, j, limit);
    kb.b.ins().brif(more, body, &[], exit, &[j.into()]);
    kb.b.switch_to_block(body);
    let at = if dir < 0 {
        kb.b.ins().iadd_imm_s(j, -1)
    } else {
        j
    };
    let p = kb.index(m, at, step);
    let keep = kb.load(types::I8, ptr(p), Width::Scalar);
    let masked = kb.b.ins().icmp_imm_s(IntCC::Equal, keep, 0);
    let next = kb.b.ins().iadd_imm_s(j, dir);
    kb.b.ins()
        .brif(masked, head, &[next.into()], exit, &[j.into()]);
    kb.b.switch_to_block(exit);
    out
}

fn attend_row(
    kb: &mut KernelBuilder,
    plan: &Plan,
    row: Row,
    buf: Value,
    tile: usize,
) -> Result<(), CpuError> {
    zero_row(kb, plan, row.out);
    let (lo, hi) = key_range(kb, plan, row.i);
    let (lo, hi) = trim_to_kept(kb, plan, row, lo, hi);
    if plan.t <= tile {
        // One tile: the reference's order.
        let len = kb.b.ins().isub(hi, lo);
        let len = {
            let zero = kb.iconst(0);
            kb.b.ins().smax(len, zero)
        };
        scores(kb, plan, row, buf, lo, len)?;
        let max = row_max(kb, buf, len)?;
        let ninf = kb.b.ins().f32const(f32::NEG_INFINITY);
        let any = kb.b.ins().fcmp(FloatCC::NotEqual, max, ninf);
        return kb.if_then(any, |kb| {
            let sum = exp_sum(kb, buf, buf, len, max)?;
            // p_j = e_j / sum, in place.
            each(kb, len, true, |kb, j, w| {
                let p = kb.index(buf, j, 4);
                let p = ptr(p);
                let e = kb.load(types::F32, p, w);
                let sv = kb.splat(sum, w);
                let r = kb.b.ins().fdiv(e, sv);
                kb.store(r, p);
                Ok(())
            })?;
            accumulate_pv(kb, plan, row, buf, lo, len, None)
        });
    }
    // Online softmax over tiles of `tile` keys.
    let m_var = kb.b.declare_var(types::F32);
    let l_var = kb.b.declare_var(types::F32);
    let ninf = kb.b.ins().f32const(f32::NEG_INFINITY);
    let zero_f = kb.b.ins().f32const(0.0);
    kb.b.def_var(m_var, ninf);
    kb.b.def_var(l_var, zero_f);
    kb.for_range(lo, hi, tile as i64, |kb, j0| {
        let rest = kb.b.ins().isub(hi, j0);
        let tc = kb.iconst(tile as i64);
        let len = kb.b.ins().smin(rest, tc);
        scores(kb, plan, row, buf, j0, len)?;
        let mt = row_max(kb, buf, len)?;
        let m_old = kb.b.use_var(m_var);
        let m_new = vmath::max_skip_nan(kb, mt, m_old, Width::Scalar);
        let ninf = kb.b.ins().f32const(f32::NEG_INFINITY);
        let any = kb.b.ins().fcmp(FloatCC::NotEqual, m_new, ninf);
        kb.if_then(any, |kb| {
            let diff = kb.b.ins().fsub(m_old, m_new);
            let alpha = kb.exp(diff, Width::Scalar)?;
            let ls = exp_sum(kb, buf, buf, len, m_new)?;
            let l_old = kb.b.use_var(l_var);
            let l = kb.b.ins().fmul(l_old, alpha);
            let l = kb.b.ins().fadd(l, ls);
            kb.b.def_var(l_var, l);
            kb.b.def_var(m_var, m_new);
            accumulate_pv(kb, plan, row, buf, j0, len, Some(alpha))
        })
    })?;
    let m = kb.b.use_var(m_var);
    let ninf = kb.b.ins().f32const(f32::NEG_INFINITY);
    let any = kb.b.ins().fcmp(FloatCC::NotEqual, m, ninf);
    kb.if_then(any, |kb| {
        let l = kb.b.use_var(l_var);
        for (c, w) in plan.pv_blocks().into_iter().flatten() {
            let o = kb.offset(row.out, (4 * c) as i64);
            let o = ptr(o);
            let x = kb.load(types::F32, o, w);
            let lv = kb.splat(l, w);
            let y = kb.b.ins().fdiv(x, lv);
            kb.store(y, o);
        }
        Ok(())
    })
}
