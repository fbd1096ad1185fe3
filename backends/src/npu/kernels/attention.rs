//! Attention on the NPU: tiled, online softmax, the scores never leave
//! CBUF (flash attention). The IR op `attention` (`slmcc_ir::ops::
//! attention`) with grouped KV heads, causal and sliding-window masks,
//! logit soft-capping (Gemma 2) and a keep (bool) or additive (f32) mask
//! operand.
//!
//! Arithmetic (what [`super::attention_ref::attention_reference`] computes
//! bit for bit): both products run on the MAC array in f16 with f32
//! accumulation (`mm.f16`). The scores `q·kᵀ` use each of `q` and `k` as
//! two f16 halves (`cvt.f16` with `lo`: `x ≈ hi + lo` to 22 bits) and
//! three products, `hi·hi + hi·lo + lo·hi`, because a score's absolute
//! error is what the softmax amplifies: one f16 rounding of `q` and `k`
//! moves scores of magnitude 30 by about 0.03, a 3 % change of the weights.
//! On the random cases of `runtime/src/npu_sim/attention_tests.rs` the
//! worst error against the f32 op is 1.2e-2 of `max |v|` with plain f16
//! operands and 3.8e-4 with the halves. The softmax is the online one
//! over key tiles of [`AttentionPlan::nk`] keys (`sm.online`: running max
//! and sum in f32, probabilities rounded to f16 for `P·V`, `v` in f16, as
//! relative errors of about 2^-11 of the output) and the output is
//! rescaled per tile and divided by the sum at the end (`ew.rescale`). It
//! is therefore *not* bit-exact with the f32 IR op, only close to it.
//!
//! Schedule, per core: work items are `(batch, heads, query block)` — one
//! query head, or without a causal rule all the query heads of one KV
//! head stacked as the rows of one block ([`AttentionPlan::stack`]: each
//! K/V tile is then loaded once for the group, as the matmul kernels load
//! a weight tile once for every row) — split over the cores in contiguous
//! ranges. Per item the DMA queue loads the query block (the compute queue
//! converts it to its f16 halves once and frees the staging buffer), then
//! streams the key tiles — K, V and the mask tile into ping-pong slot
//! `u % 2` — so the next tile's DMA overlaps this tile's compute; per tile
//! the compute queue converts K (halves) and V in place, `S = q·Kᵀ` (three
//! `mm.f16`), `sm.online`, `T = P·V`, `ew.rescale`. After the last tile it divides by the sums and the DMA
//! queue stores the block. Key tiles that the causal or window rule masks
//! for every row of the block are skipped, as are tiles outside the key
//! range the caller passes, and the last tile ends with the range (the
//! runtime passes the range its mask keeps, so a decode step reads only
//! the filled part of a KV cache); skipping fully masked keys leaves the
//! result's bits unchanged.
//!
//! Semaphores per core: `s0`/`s1` slot full, `s2`/`s3` slot free, `s4`
//! query block loaded, `s5` query staging free, `s6` output block done.
//!
//! DDR image ([`AttentionLayout`], from 0): the 16-byte parameter record
//! (f32 scale, i32 window), `q [b, hq, s, d]`, `k [b, hkv, t, d]`,
//! `v [b, hkv, t, dv]` (f32), the mask `[ms, t]` (u8 keep flags or f32,
//! `ms` 1 or `s`: broadcast over batch and heads), the output
//! `[b, hq, s, dv]` f32.

use std::ops::Range;

use crate::npu::isa::{
    CoreProgram, DmaDims, Instr, Program, RescaleMode, ScoreMask, CBUF_ADDR_LIMIT, DIAG_RANGE,
    MAX_SM,
};
use crate::npu::kernels::matmul::KernelError;
use crate::npu::kernels::schedule::fits;
use crate::npu::Target;

/// The mask operand's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MaskKind {
    None,
    /// `u8` keep flags (a `bool` mask).
    Keep,
    /// `f32` values added to the scaled scores.
    Add,
}

/// One attention node's shapes and attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionProblem {
    pub batch: u32,
    pub heads: u32,
    pub kv_heads: u32,
    /// Queries per head.
    pub s: u32,
    /// Keys per head.
    pub t: u32,
    pub d: u32,
    pub dv: u32,
    pub scale: f32,
    pub causal: bool,
    /// Sliding window (0: none; needs `causal`).
    pub window: u32,
    /// Logit soft-capping of the scaled scores (0: none).
    pub softcap: f32,
    pub mask: MaskKind,
    /// Mask rows: 1 (one row for every query) or `s`.
    pub mask_rows: u32,
}

impl AttentionProblem {
    /// Bytes per mask element.
    pub fn mask_bytes(&self) -> u32 {
        match self.mask {
            MaskKind::None => 0,
            MaskKind::Keep => 1,
            MaskKind::Add => 4,
        }
    }

    /// Multiply-accumulates of both products over every key.
    pub fn macs(&self) -> u64 {
        let rows = u64::from(self.batch) * u64::from(self.heads) * u64::from(self.s);
        rows * u64::from(self.t) * u64::from(self.d + self.dv)
    }
}

/// The tiling of an attention problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionPlan {
    pub problem: AttentionProblem,
    /// Rows per block (`stack` query heads × `mq / stack` queries).
    pub mq: u32,
    /// Query heads sharing one block: the heads of a KV head's group
    /// (each key tile is then loaded once for all of them) when the
    /// problem has no causal rule (whose diagonal counts rows as
    /// positions), else 1.
    pub stack: u32,
    /// Keys per tile (the online softmax's step).
    pub nk: u32,
    /// Cores with work.
    pub cores: u32,
}

const PARAMS_BYTES: u32 = 16;
const ROW_RECORD: u32 = 16;

const FULL: u8 = 0;
const FREE: u8 = 2;
const Q_FULL: u8 = 4;
const Q_FREE: u8 = 5;
const O_DONE: u8 = 6;

/// CBUF addresses of one core's buffers.
#[derive(Clone, Copy, Debug)]
struct Cbuf {
    params: u32,
    q_stage: u32,
    /// The query block's f16 halves: `hi` at `q`, `lo` at `q_lo`.
    q: u32,
    q_lo: u32,
    /// Offset of K's `lo` half in its slot.
    k_lo: u32,
    /// Per slot: K (f32, converted in place to its halves), V, mask.
    slots: [(u32, u32, u32); 2],
    s: u32,
    p: u32,
    t: u32,
    o: u32,
    rows: u32,
    end: u32,
}

fn align16(x: u64) -> u64 {
    x.div_ceil(16) * 16
}

impl Cbuf {
    fn new(p: &AttentionProblem, mq: u32, nk: u32) -> Option<Cbuf> {
        let (mq, nk, d, dv) = (
            u64::from(mq),
            u64::from(nk),
            u64::from(p.d),
            u64::from(p.dv),
        );
        let mut at = 0u64;
        let mut take = |bytes: u64| {
            let a = at;
            at += align16(bytes);
            a as u32
        };
        let params = take(u64::from(PARAMS_BYTES));
        let q_stage = take(mq * d * 4);
        let q = take(mq * d * 2);
        let q_lo = take(mq * d * 2);
        let k_lo = align16(nk * d * 2);
        let mut slot = || {
            (
                take(2 * k_lo),
                take(nk * dv * 4),
                take(mq * nk * u64::from(p.mask_bytes())),
            )
        };
        let slots = [slot(), slot()];
        let s = take(mq * nk * 4);
        let pr = take(mq * nk * 2);
        let t = take(mq * dv * 4);
        let o = take(mq * dv * 4);
        let rows = take(mq * u64::from(ROW_RECORD));
        (at <= u64::from(CBUF_ADDR_LIMIT)).then_some(Cbuf {
            params,
            q_stage,
            q,
            q_lo,
            k_lo: k_lo as u32,
            slots,
            s,
            p: pr,
            t,
            o,
            rows,
            end: at as u32,
        })
    }
}

/// Chooses the query block and key tile: the largest query block (fewest
/// K/V reloads), then the largest key tile, whose buffers fit the CBUF. A
/// KV head's group of query heads shares each block when that is allowed
/// (see [`AttentionPlan::stack`]) and fits.
pub fn plan_attention(p: &AttentionProblem, target: &Target) -> Result<AttentionPlan, KernelError> {
    let bad = |what: &'static str| KernelError::Attention(what);
    if p.batch == 0 || p.heads == 0 || p.kv_heads == 0 || p.s == 0 || p.t == 0 {
        return Err(bad("empty attention"));
    }
    if p.d == 0 || p.dv == 0 || p.d > 2048 || p.dv > 2048 {
        return Err(bad("head size outside 1..=2048"));
    }
    if !p.heads.is_multiple_of(p.kv_heads) {
        return Err(bad("query heads not a multiple of the KV heads"));
    }
    if !(p.mask_rows == 1 || p.mask_rows == p.s) {
        return Err(bad("mask rows neither 1 nor the query count"));
    }
    if p.window > 0 && !p.causal {
        return Err(bad("a window without the causal rule"));
    }
    // The mask's row stride must fit the DMA's stride field.
    if u64::from(p.t) * u64::from(p.mask_bytes()) >= 1 << 20 || p.t >= 1 << 18 || p.s >= 1 << 18 {
        return Err(bad("more than 2^18 queries or keys"));
    }
    let cap = |v: u32| v.min(MAX_SM);
    let sizes = |top: u32| {
        let mut v: Vec<u32> = [1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1]
            .into_iter()
            .filter(|&x| x < top)
            .collect();
        v.insert(0, top);
        v
    };
    let group = p.heads / p.kv_heads;
    // A stacked block's heads are `s·d·4` bytes apart in DDR: the DMA's
    // outer stride.
    let head_bytes = u64::from(p.s) * u64::from(p.d.max(p.dv)) * 4;
    let stackable = !p.causal && group > 1 && group <= MAX_SM && head_bytes < 1 << 20;
    let stacks: &[u32] = if stackable { &[group, 1] } else { &[1] };
    for &stack in stacks {
        for qrows in sizes(cap(p.s).min(MAX_SM / stack)) {
            let mq = stack * qrows;
            for nk in sizes(cap(p.t)) {
                if nk < 8.min(p.t) {
                    break;
                }
                if Cbuf::new(p, mq, nk).is_some_and(|c| c.end <= target.cbuf_bytes) {
                    // Contiguous ranges of `per_core` items: the cores that
                    // get one.
                    let items = p.batch * (p.heads / stack) * p.s.div_ceil(qrows);
                    let per_core = items.div_ceil(items.min(target.cores));
                    return Ok(AttentionPlan {
                        problem: *p,
                        mq,
                        stack,
                        nk,
                        cores: items.div_ceil(per_core),
                    });
                }
            }
        }
    }
    Err(bad("no query block and key tile fit the CBUF"))
}

/// Byte offsets of the kernel's DDR image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionLayout {
    pub params: u32,
    pub q: u32,
    pub k: u32,
    pub v: u32,
    /// The mask (`[mask_rows, t]`), when the problem has one.
    pub mask: Option<u32>,
    pub out: u32,
    pub total: u32,
}

impl AttentionLayout {
    /// The regions in order, each 64-byte aligned.
    pub fn new(p: &AttentionProblem) -> Result<AttentionLayout, KernelError> {
        let n = |x: u32| u64::from(x);
        let q_len = n(p.batch) * n(p.heads) * n(p.s) * n(p.d) * 4;
        let k_len = n(p.batch) * n(p.kv_heads) * n(p.t) * n(p.d) * 4;
        let v_len = n(p.batch) * n(p.kv_heads) * n(p.t) * n(p.dv) * 4;
        let m_len = n(p.mask_rows) * n(p.t) * n(p.mask_bytes());
        let o_len = n(p.batch) * n(p.heads) * n(p.s) * n(p.dv) * 4;
        let mut at = 0u64;
        let mut take = |len: u64| {
            let a = at;
            at = (at + len).div_ceil(64) * 64;
            a
        };
        let (params, q, k, v) = (
            take(u64::from(PARAMS_BYTES)),
            take(q_len),
            take(k_len),
            take(v_len),
        );
        let mask = (p.mask != MaskKind::None).then(|| take(m_len));
        let out = take(o_len);
        fits("attention image", 0, at)?;
        Ok(AttentionLayout {
            params: params as u32,
            q: q as u32,
            k: k as u32,
            v: v as u32,
            mask: mask.map(|m| m as u32),
            out: out as u32,
            total: at as u32,
        })
    }

    /// The parameter record: f32 scale, i32 window, f32 softcap, 4 zero
    /// bytes.
    pub fn params_record(p: &AttentionProblem) -> [u8; 16] {
        let mut r = [0u8; 16];
        r[..4].copy_from_slice(&p.scale.to_le_bytes());
        r[4..8].copy_from_slice(&p.window.to_le_bytes());
        r[8..12].copy_from_slice(&p.softcap.to_le_bytes());
        r
    }
}

/// One work item: query heads `(n, h0..h0 + stack)` (one KV head's),
/// queries `i0..i0 + qrows` of each, `rows = stack · qrows` rows.
#[derive(Clone, Copy, Debug)]
struct Item {
    n: u32,
    h0: u32,
    stack: u32,
    i0: u32,
    qrows: u32,
}

impl Item {
    fn rows(&self) -> u32 {
        self.stack * self.qrows
    }
}

/// The key tiles item `it` processes, as `(j0, keys)`: tiles start at
/// multiples of `nk` inside `keys`, the last one ends at `keys.end` (the
/// keys past it are masked for every query), and the causal / window rule
/// keeps some key of each for some query; at least one tile (a block with
/// nothing to see still needs its rows of zeros).
fn key_tiles(p: &AttentionProblem, nk: u32, it: &Item, keys: &Range<u32>) -> Vec<(u32, u32)> {
    let past = i64::from(p.t) - i64::from(p.s);
    let first_pos = i64::from(it.i0) + past;
    let last_pos = first_pos + i64::from(it.qrows) - 1;
    let lo = keys.start / nk * nk;
    let hi = keys.end.min(p.t);
    let tiles: Vec<(u32, u32)> = (lo..hi)
        .step_by(nk as usize)
        .map(|j0| (j0, (j0 + nk).min(hi) - j0))
        .filter(|&(j0, kn)| {
            let j1 = i64::from(j0 + kn) - 1;
            let j0 = i64::from(j0);
            !p.causal || (j0 <= last_pos && (p.window == 0 || j1 > first_pos - i64::from(p.window)))
        })
        .collect();
    if tiles.is_empty() {
        let j0 = lo.min((p.t - 1) / nk * nk);
        vec![(j0, nk.min(p.t - j0))]
    } else {
        tiles
    }
}

/// Emits the kernel for `plan` on `layout`, processing only the key tiles
/// that meet `keys` (`0..t` for all; the runtime passes the range its mask
/// keeps). The result is `[b, hq, s, dv]` f32 at `layout.out`.
pub fn emit_attention(
    plan: &AttentionPlan,
    target: &Target,
    layout: &AttentionLayout,
    keys: Range<u32>,
) -> Result<Program, KernelError> {
    let p = &plan.problem;
    let (mq, nk) = (plan.mq, plan.nk);
    let cb = Cbuf::new(p, mq, nk)
        .filter(|c| c.end <= target.cbuf_bytes)
        .ok_or(KernelError::Attention(
            "the plan does not fit this target's CBUF",
        ))?;
    let mut items = Vec::new();
    let (stack, qrows) = (plan.stack, mq / plan.stack);
    for n in 0..p.batch {
        for h0 in (0..p.heads).step_by(stack as usize) {
            for i0 in (0..p.s).step_by(qrows as usize) {
                let qrows = qrows.min(p.s - i0);
                items.push(Item {
                    n,
                    h0,
                    stack,
                    i0,
                    qrows,
                });
            }
        }
    }
    let per_core = items.len().div_ceil(plan.cores.max(1) as usize);
    let mut program = Program::default();
    for chunk in items.chunks(per_core) {
        let mut core = CoreProgram::default();
        core.dma.push(Instr::DmaLoad {
            cbuf: cb.params,
            ddr: layout.params,
            dims: DmaDims::contiguous(PARAMS_BYTES),
        });
        let mut u = 0usize;
        for (e, it) in chunk.iter().enumerate() {
            emit_item(p, &cb, layout, (mq, nk), it, e, &keys, &mut u, &mut core)?;
        }
        program.cores.push(core);
    }
    Ok(program)
}

/// The DMA and compute instructions of one work item (the `e`-th of its
/// core); `u` counts the core's key tiles so far (slot `u % 2`).
#[allow(clippy::too_many_arguments)]
fn emit_item(
    p: &AttentionProblem,
    cb: &Cbuf,
    layout: &AttentionLayout,
    (_mq, nk): (u32, u32),
    it: &Item,
    e: usize,
    keys: &Range<u32>,
    u: &mut usize,
    core: &mut CoreProgram,
) -> Result<(), KernelError> {
    let (d, dv, rows) = (p.d, p.dv, it.rows());
    let kvh = it.h0 / (p.heads / p.kv_heads);
    // The block's rows: `qrows` queries of each of its `stack` heads,
    // `s` rows of `width` f32 apart.
    let block = |width: u32| DmaDims {
        run: width * 4,
        count1: it.qrows,
        stride1: width * 4,
        count2: it.stack,
        stride2: if it.stack > 1 { p.s * width * 4 } else { 0 },
    };
    let row_of = |base: u32, heads: u32, head: u32, len: u32, row: u32, width: u32| -> u64 {
        u64::from(base)
            + ((u64::from(it.n) * u64::from(heads) + u64::from(head)) * u64::from(len)
                + u64::from(row))
                * u64::from(width)
                * 4
    };
    let ddr = |a: u64| -> Result<u32, KernelError> {
        u32::try_from(a).map_err(|_| KernelError::Attention("DDR address past 4 GiB"))
    };
    // The query block, converted to f16 once.
    if e > 0 {
        core.dma.push(Instr::Wait { sem: Q_FREE });
    }
    core.dma.push(Instr::DmaLoad {
        cbuf: cb.q_stage,
        ddr: ddr(row_of(layout.q, p.heads, it.h0, p.s, it.i0, d))?,
        dims: block(d),
    });
    core.dma.push(Instr::Signal { sem: Q_FULL });
    core.compute.push(Instr::Wait { sem: Q_FULL });
    core.compute.push(Instr::CvtF16 {
        input: cb.q_stage,
        out: cb.q,
        len: rows * d,
        lo: Some(cb.q_lo),
    });
    core.compute.push(Instr::Signal { sem: Q_FREE });
    let past = i64::from(p.t) - i64::from(p.s);
    for (ti, (j0, kn)) in key_tiles(p, nk, it, keys).into_iter().enumerate() {
        let slot = *u % 2;
        let (ks, vs, ms) = cb.slots[slot];
        if *u >= 2 {
            core.dma.push(Instr::Wait {
                sem: FREE + slot as u8,
            });
        }
        core.dma.push(Instr::DmaLoad {
            cbuf: ks,
            ddr: ddr(row_of(layout.k, p.kv_heads, kvh, p.t, j0, d))?,
            dims: DmaDims::rows(d * 4, kn, d * 4),
        });
        core.dma.push(Instr::DmaLoad {
            cbuf: vs,
            ddr: ddr(row_of(layout.v, p.kv_heads, kvh, p.t, j0, dv))?,
            dims: DmaDims::rows(dv * 4, kn, dv * 4),
        });
        let mask = match (p.mask, layout.mask) {
            (MaskKind::None, _) | (_, None) => ScoreMask::None,
            (kind, Some(base)) => {
                let eb = p.mask_bytes();
                let first_row = if p.mask_rows == 1 { 0 } else { it.i0 };
                let at = u64::from(base)
                    + (u64::from(first_row) * u64::from(p.t) + u64::from(j0)) * u64::from(eb);
                let stride = if p.mask_rows == 1 { 0 } else { p.t * eb };
                // The same mask rows for each stacked head.
                let dims = DmaDims {
                    run: kn * eb,
                    count1: it.qrows,
                    stride1: stride,
                    count2: it.stack,
                    stride2: 0,
                };
                core.dma.push(Instr::DmaLoad {
                    cbuf: ms,
                    ddr: ddr(at)?,
                    dims,
                });
                if kind == MaskKind::Keep {
                    ScoreMask::Keep(ms)
                } else {
                    ScoreMask::Add(ms)
                }
            }
        };
        core.dma.push(Instr::Signal {
            sem: FULL + slot as u8,
        });
        let causal = if p.causal {
            let diag = i64::from(it.i0) + past - i64::from(j0);
            let diag = i32::try_from(diag)
                .ok()
                .filter(|d| DIAG_RANGE.contains(d))
                .ok_or(KernelError::Attention("causal diagonal out of range"))?;
            Some(diag)
        } else {
            None
        };
        let first = ti == 0;
        let c = &mut core.compute;
        c.push(Instr::Wait {
            sem: FULL + slot as u8,
        });
        c.push(Instr::CvtF16 {
            input: ks,
            out: ks,
            len: kn * d,
            lo: Some(ks + cb.k_lo),
        });
        c.push(Instr::CvtF16 {
            input: vs,
            out: vs,
            len: kn * dv,
            lo: None,
        });
        // S = qhi·khiᵀ + qhi·kloᵀ + qlo·khiᵀ, in that order.
        for (i, (a, b)) in [(cb.q, ks), (cb.q, ks + cb.k_lo), (cb.q_lo, ks)]
            .into_iter()
            .enumerate()
        {
            c.push(Instr::MatMulF16 {
                a,
                b,
                acc: cb.s,
                m: rows,
                k: d,
                n: kn,
                b_transposed: true,
                accumulate: i > 0,
            });
        }
        c.push(Instr::SoftmaxOnline {
            scores: cb.s,
            probs: cb.p,
            rows: cb.rows,
            params: cb.params,
            mask,
            m: rows,
            n: kn,
            causal,
            first,
        });
        c.push(Instr::MatMulF16 {
            a: cb.p,
            b: vs,
            acc: cb.t,
            m: rows,
            k: kn,
            n: dv,
            b_transposed: false,
            accumulate: false,
        });
        c.push(Instr::Rescale {
            out: cb.o,
            t: cb.t,
            rows: cb.rows,
            m: rows,
            n: dv,
            mode: if first {
                RescaleMode::First
            } else {
                RescaleMode::Accumulate
            },
        });
        c.push(Instr::Signal {
            sem: FREE + slot as u8,
        });
        *u += 1;
    }
    core.compute.push(Instr::Rescale {
        out: cb.o,
        t: 0,
        rows: cb.rows,
        m: rows,
        n: dv,
        mode: RescaleMode::Finish,
    });
    core.compute.push(Instr::Signal { sem: O_DONE });
    core.dma.push(Instr::Wait { sem: O_DONE });
    core.dma.push(Instr::DmaStore {
        ddr: ddr(row_of(layout.out, p.heads, it.h0, p.s, it.i0, dv))?,
        cbuf: cb.o,
        dims: block(dv),
    });
    Ok(())
}
