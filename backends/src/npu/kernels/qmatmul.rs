//! The IR op `qmatmul` (`slmcc_ir::ops::qmatmul`) on the NPU, bit-exactly:
//! `y[M×N] (f32) = Σ_g (acc_g as f32) · (s · scale[g, n])`.
//!
//! Split of the work:
//!
//! 1. **CPU**: [`quantize_rows`] quantizes each activation row (token) to
//!    INT8 with its `(s, z)` exactly as the op's steps 1–4 (it calls the
//!    op's own `activation_params` / `quantize_activation`).
//! 2. **NPU** ([`emit_qmatmul`]): the weight-stationary schedule of
//!    [`super::matmul`] with K tiles cut at group boundaries
//!    ([`crate::npu::tiler::qmatmul`]); per group (a *piece* of the K tile,
//!    or several K tiles when a group is longer than a tile) one `mm`
//!    (`acc = Σ xq·q`, accumulating over the group's tiles), then one
//!    `epi.f32` that subtracts `z·colsum` (so `acc = Σ (xq - z)·q`, the
//!    op's exact `acc_g`) and adds `(acc as f32) · (s · scale)` to the f32
//!    output tile (starting from `+0.0` for the first group: the op's sum
//!    order). The f32 tile is stored to DDR row-major `[M, N]`. With one
//!    group (`G = K`) the `mm`s accumulate in the output tile itself and
//!    the single `epi.f32` converts it in place (`acc = out`).
//!
//! DDR image ([`QMatmulLayout`], one allocation reused by every call): the
//! constants ([`pack_qmatmul`]: per core, per column tile, per K tile, one
//! [`crate::npu::tiler::QBlock`] — the group pieces' weight tiles in the
//! `mm` layout, each padded to 16 bytes, then the `(scale: f32, colsum:
//! i32)` record of every column for each group ending in the tile, each
//! record set padded to 16 bytes), the activations `[m_pad, K]` INT8 (rows
//! past `M` are never used), the row records `[M]` × `(s: f32, z: i32)`,
//! and the output `[M, N]` f32. All little-endian.
//!
//! The emitter and packer also serve [`super::qswiglu`] (two weight
//! matrices per step, after the plan's [`QKernel`]).
//!
//! Bit-exactness: the `mm` sums are exact (`|Σ xq·q| <= 128·128·G`) and the
//! correction is exact modulo 2^32 (wrapping INT32), so it equals the op's
//! `acc_g`, which fits; the f32 operations are the op's, in its order.

use crate::npu::isa::{CoreProgram, DmaDims, Instr, Program};
use crate::npu::kernels::matmul::{check_int4, pack_tile, KernelError};
use crate::npu::kernels::schedule::{self, contiguous_loads, fits, Schedule};
use crate::npu::tiler::qmatmul::RECORD_BYTES;
use crate::npu::tiler::{tiles, Activations, CoreSlice, QKernel, QTilePlan};
use crate::npu::Target;
use slmcc_ir::ops::qmatmul::{activation_params, quantize_activation};

/// Bytes of one row record in DDR and CBUF: `s` (f32) then `z` (i32).
pub const ROW_RECORD_BYTES: usize = RECORD_BYTES as usize;

/// Per-token quantization parameters of one activation row (the op's `s`
/// and `z`, `z` as the integer the op subtracts).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowParams {
    /// Scale: `(hi - lo) / 255`, or 1 for a row of zeros.
    pub s: f32,
    /// Zero point, `-128..=127`.
    pub z: i32,
}

/// Quantizes the rows of `x` (row-major `[rows, k]`, `rows = x.len() / k`)
/// into `xq` (`[rows, k]` INT8) and `rows` (one [`RowParams`] each),
/// exactly as steps 1–4 of `qmatmul` (a NaN element quantizes to 0).
/// Allocates nothing; does nothing when `k == 0`.
///
/// # Panics
///
/// If `xq` is shorter than `x` or `rows` shorter than `x.len() / k`.
pub fn quantize_rows(x: &[f32], k: usize, xq: &mut [i8], rows: &mut [RowParams]) {
    if k == 0 {
        return;
    }
    for ((row, q), r) in x.chunks_exact(k).zip(xq.chunks_exact_mut(k)).zip(rows) {
        let (s, z) = activation_params(row);
        for (d, &v) in q.iter_mut().zip(row) {
            // In -128..=127 (or 0 for NaN), so the cast is exact.
            *d = quantize_activation(v, s, z) as i8;
        }
        *r = RowParams { s, z: z as i32 };
    }
}

/// DDR byte addresses and sizes of one `qmatmul` kernel's image (regions
/// 64-byte aligned, in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QMatmulLayout {
    /// Constants ([`pack_qmatmul`]), written once at load.
    pub consts: u32,
    pub consts_bytes: u64,
    /// Activations `[m_pad, K]` INT8 ([`quantize_rows`]).
    pub xq: u32,
    pub xq_bytes: u64,
    /// Row records `[M]`, [`ROW_RECORD_BYTES`] each.
    pub rows: u32,
    pub rows_bytes: u64,
    /// Output `[M, N]` f32.
    pub out: u32,
    pub out_bytes: u64,
    /// Bytes from address 0 to the end of the output (the DDR size needed).
    pub total: u64,
}

impl QMatmulLayout {
    /// The regions of `plan`'s kernel placed from DDR address `base`.
    pub fn new(plan: &QTilePlan, base: u32) -> Result<Self, KernelError> {
        let p = &plan.problem;
        let (m, k, n) = (u64::from(p.m), u64::from(p.k), u64::from(p.n));
        let sizes = [
            plan.constant_bytes(),
            u64::from(plan.m_pad) * k,
            m * ROW_RECORD_BYTES as u64,
            4 * m * n,
        ];
        let names = ["constants", "activations", "row records", "output"];
        let mut at = [0u32; 4];
        let mut next = u64::from(base);
        for i in 0..4 {
            next = next.next_multiple_of(64);
            let addr = u32::try_from(next).map_err(|_| KernelError::Address {
                what: names[i],
                addr: u32::MAX,
                len: sizes[i],
            })?;
            fits(names[i], addr, sizes[i])?;
            at[i] = addr;
            next += sizes[i];
        }
        Ok(QMatmulLayout {
            consts: at[0],
            consts_bytes: sizes[0],
            xq: at[1],
            xq_bytes: sizes[1],
            rows: at[2],
            rows_bytes: sizes[2],
            out: at[3],
            out_bytes: sizes[3],
            total: next,
        })
    }

    /// Writes the quantized activations (`[M, K]`, the first `M·K` bytes
    /// of the region) and the row records into `ddr`.
    ///
    /// # Panics
    ///
    /// If `ddr` is shorter than [`QMatmulLayout::total`] or the inputs
    /// longer than their regions.
    pub fn write_inputs(&self, ddr: &mut [u8], xq: &[i8], rows: &[RowParams]) {
        let a = &mut ddr[self.xq as usize..][..xq.len()];
        for (d, &v) in a.iter_mut().zip(xq) {
            *d = v as u8;
        }
        let r = &mut ddr[self.rows as usize..][..rows.len() * ROW_RECORD_BYTES];
        for (d, p) in r.chunks_exact_mut(ROW_RECORD_BYTES).zip(rows) {
            d[..4].copy_from_slice(&p.s.to_le_bytes());
            d[4..].copy_from_slice(&p.z.to_le_bytes());
        }
    }

    /// Reads the f32 output (`y.len()` values from the region's start).
    ///
    /// # Panics
    ///
    /// If the output region of `ddr` holds fewer than `y.len()` values.
    pub fn read_output(&self, ddr: &[u8], y: &mut [f32]) {
        let o = &ddr[self.out as usize..][..4 * y.len()];
        for (v, b) in y.iter_mut().zip(o.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
}

/// One core's two queues (`qmatmul` or `qswiglu`, after `plan.kernel`).
fn emit_core(plan: &QTilePlan, addrs: &QMatmulLayout, core: &CoreSlice) -> CoreProgram {
    let p = &plan.problem;
    let l = &plan.layout;
    let sched = Schedule::new((p.m, p.k, p.n), core, plan.kt, plan.nt, l.out, addrs.out);
    let panel = |kk, buf| schedule::panel(plan.activations, l.a, |k| plan.panel_offset(k), kk, buf);
    let mut head = Vec::new();
    contiguous_loads(l.rows, addrs.rows, addrs.rows_bytes, &mut head);
    let mut c_ddr = addrs.consts + core.w_offset as u32;
    let dma = |st: &schedule::Step, dma: &mut Vec<Instr>| {
        let b = plan.block(st.k0, st.kt, st.nt);
        if plan.activations == Activations::Streamed || st.nn == 0 {
            let dims = DmaDims {
                run: b.piece_k,
                count1: plan.m_pad,
                stride1: p.k,
                count2: b.pieces,
                stride2: b.piece_k,
            };
            dma.push(Instr::DmaLoad {
                cbuf: panel(st.kk, st.buf),
                ddr: addrs.xq + st.k0,
                dims,
            });
        }
        let bytes = plan.step_bytes(st.k0, st.kt, st.nt);
        contiguous_loads(l.block[st.buf], c_ddr, bytes, dma);
        c_ddr = c_ddr.wrapping_add(bytes as u32);
    };
    let compute = |st: &schedule::Step, compute: &mut Vec<Instr>| {
        let b = plan.block(st.k0, st.kt, st.nt);
        // Per matrix: its block in the step buffer, its INT32 accumulators
        // and its f32 tile (gate / the only matrix: the output tile).
        let up = l.up.unwrap_or(st.out);
        let mats = [
            (l.block[st.buf], l.acc.unwrap_or(st.out), st.out),
            (
                l.block[st.buf] + b.bytes as u32,
                l.up_acc.or(l.acc).unwrap_or(up),
                up,
            ),
        ];
        let mats = &mats[..plan.kernel.mats() as usize];
        let mut rec = 0u64;
        for piece in 0..b.pieces {
            let k0 = st.k0 + piece * b.piece_k;
            let end = k0 + b.piece_k;
            for &(blk, acc, out) in mats {
                compute.push(Instr::MatMul {
                    wtype: p.wtype,
                    a: panel(st.kk, st.buf) + piece * plan.m_pad * b.piece_k,
                    w: blk + (u64::from(piece) * b.piece_stride) as u32,
                    acc,
                    m: p.m,
                    k: b.piece_k,
                    n: st.nt,
                    accumulate: !k0.is_multiple_of(p.group),
                });
                if end.is_multiple_of(p.group) {
                    compute.push(Instr::EpilogueF32 {
                        acc,
                        params: blk + (b.records + rec * b.record_stride) as u32,
                        rows: l.rows,
                        out,
                        m: p.m,
                        n: st.nt,
                        accumulate: end > p.group,
                    });
                }
            }
            if end.is_multiple_of(p.group) {
                rec += 1;
            }
        }
        if plan.kernel == QKernel::Swiglu && st.k0 + st.kt == p.k {
            // `out = silu(g) · u`, in place in the gate's tile.
            compute.push(Instr::SiluMul {
                a: st.out,
                b: up,
                out: st.out,
                len: p.m * st.nt,
            });
        }
    };
    schedule::emit(&sched, head, dma, compute)
}

/// Emits the kernel for `plan` (from
/// [`crate::npu::tiler::plan_qmatmul`] with the same `target`) on the DDR
/// image `layout` ([`QMatmulLayout::new`] of the same plan). Each core
/// loads the row records, then runs the schedule; the result is the op's
/// `y`, f32 row-major `[M, N]` at `layout.out`.
pub fn emit_qmatmul(
    plan: &QTilePlan,
    target: &Target,
    layout: &QMatmulLayout,
) -> Result<Program, KernelError> {
    emit_q(plan, target, layout, QKernel::Matmul)
}

/// [`emit_qmatmul`] / `emit_qswiglu`: errors unless `plan` is for `kernel`.
pub(crate) fn emit_q(
    plan: &QTilePlan,
    target: &Target,
    layout: &QMatmulLayout,
    kernel: QKernel,
) -> Result<Program, KernelError> {
    plan_kind(plan, kernel)?;
    let p = &plan.problem;
    let (m, k, n) = (u64::from(p.m), u64::from(p.k), u64::from(p.n));
    fits("activations", layout.xq, u64::from(plan.m_pad) * k)?;
    fits("constants", layout.consts, plan.constant_bytes())?;
    fits("row records", layout.rows, m * ROW_RECORD_BYTES as u64)?;
    fits("output", layout.out, 4 * m * n)?;
    let cores = plan.cores.iter().map(|c| emit_core(plan, layout, c));
    schedule::program(cores, target)
}

/// The constants of `plan`'s kernel (module docs) from the op's weights:
/// `q` row-major `[K, N]` (INT4: values in `-8..=7`) and `scale`
/// row-major `[K/G, N]`. Channel record `(g, n)` is `(scale[g, n],
/// Σ_{k in group g} q[k, n])`.
pub fn pack_qmatmul(plan: &QTilePlan, q: &[i8], scale: &[f32]) -> Result<Vec<u8>, KernelError> {
    pack_q(plan, &[(q, scale)], QKernel::Matmul)
}

/// Errors unless `plan` tiles `kernel`.
fn plan_kind(plan: &QTilePlan, kernel: QKernel) -> Result<(), KernelError> {
    if plan.kernel == kernel {
        Ok(())
    } else {
        Err(KernelError::Kernel {
            expected: kernel,
            got: plan.kernel,
        })
    }
}

/// Per-group column sums of `q` (`[K, N]`), wrapping like the `epi.f32`
/// correction (a group sum is at most 128·65536 in magnitude, so exact),
/// after checking the operand counts and the INT4 range.
fn colsums(plan: &QTilePlan, q: &[i8], scale: &[f32]) -> Result<Vec<i32>, KernelError> {
    let p = &plan.problem;
    let (k, n, g) = (p.k as usize, p.n as usize, p.group as usize);
    if q.len() as u64 != k as u64 * n as u64 {
        return Err(KernelError::WeightCount {
            expected: k as u64 * n as u64,
            got: q.len(),
        });
    }
    let groups = k / g.max(1);
    if scale.len() as u64 != groups as u64 * n as u64 {
        return Err(KernelError::Count {
            what: "scales (K/G · N)",
            expected: groups as u64 * n as u64,
            got: scale.len(),
        });
    }
    check_int4(p.wtype, q)?;
    let mut colsum = vec![0i32; groups * n];
    for (r, row) in q.chunks_exact(n.max(1)).enumerate() {
        let sums = &mut colsum[(r / g) * n..][..n];
        for (s, &v) in sums.iter_mut().zip(row) {
            *s = s.wrapping_add(i32::from(v));
        }
    }
    Ok(colsum)
}

/// The constants of a `qmatmul` (one `(q, scale)`) or `qswiglu` (gate,
/// then up) plan: per step, one [`crate::npu::tiler::QBlock`] per matrix,
/// in the order of `mats`.
pub(crate) fn pack_q(
    plan: &QTilePlan,
    mats: &[(&[i8], &[f32])],
    kernel: QKernel,
) -> Result<Vec<u8>, KernelError> {
    plan_kind(plan, kernel)?;
    let p = &plan.problem;
    let (n, g) = (p.n as usize, p.group.max(1) as usize);
    let sums = mats
        .iter()
        .map(|&(q, scale)| colsums(plan, q, scale))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::with_capacity(plan.constant_bytes() as usize);
    for core in &plan.cores {
        for (n0, nt) in tiles(core.n, plan.nt) {
            let col0 = (core.n0 + n0) as usize;
            let cols = col0..col0 + nt as usize;
            for (k0, kt) in tiles(p.k, plan.kt) {
                let b = plan.block(k0, kt, nt);
                for (&(q, scale), colsum) in mats.iter().zip(&sums) {
                    let start = out.len();
                    for piece in 0..b.pieces {
                        let r0 = (k0 + piece * b.piece_k) as usize;
                        let elems = (r0..r0 + b.piece_k as usize)
                            .flat_map(|r| q[r * n + col0..][..nt as usize].iter().copied());
                        pack_tile(p.wtype, elems, &mut out);
                        out.resize(start + (u64::from(piece + 1) * b.piece_stride) as usize, 0);
                    }
                    // The groups ending in the tile start with k0's.
                    for (i, gi) in (k0 as usize / g..).take(b.ends as usize).enumerate() {
                        for c in cols.clone() {
                            out.extend_from_slice(&scale[gi * n + c].to_le_bytes());
                            out.extend_from_slice(&colsum[gi * n + c].to_le_bytes());
                        }
                        let end = b.records + (i as u64 + 1) * b.record_stride;
                        out.resize(start + end as usize, 0);
                    }
                    debug_assert_eq!((out.len() - start) as u64, b.bytes);
                }
            }
        }
    }
    Ok(out)
}
