//! Weight-stationary quantized matmul/GEMV kernel:
//! `out[M×N] (INT32) = a[M×K] (INT8) · w[K×N] (INT8 or INT4)`.
//!
//! Each core owns a contiguous range of output columns (the [`TilePlan`]'s
//! [`CoreSlice`]s) and walks its weight tiles in *steps*: column tile `nn`
//! outer, K tile `kk` inner. Per step the DMA queue loads the `Kt × Nt`
//! weight tile (and the `M × Kt` activation panel when the activations are
//! streamed, or — resident — during the first column tile only) into the
//! ping-pong buffer `step % 2` and signals it full; the compute queue waits
//! for it, streams all `M` rows through it with one `mm` instruction
//! (`acc (+)= panel · tile`, accumulating over the K tiles), and signals
//! the buffer free, so the load of step `s + 2` can start while step
//! `s + 1` computes. After a column tile's last K tile the compute queue
//! signals its accumulators ready; the DMA queue stores the `M × Nt` INT32
//! block straight into the row-major output, cut into row blocks spread
//! over the next column tile's steps (one after each weight load, so no
//! single long store delays a prefetch), and then signals the accumulator
//! buffer free (accumulators ping-pong between column tiles).
//!
//! Semaphores per core: `s0`/`s1` weight buffer full, `s2`/`s3` weight
//! buffer free, `s4`/`s5` accumulators ready, `s6`/`s7` accumulators free.
//! The schedule itself (steps, semaphores, spread stores) is shared with
//! [`super::qmatmul`] in `schedule.rs`; this file supplies what a step
//! loads and computes.
//!
//! DDR layouts: activations row-major `[M, K]` INT8; output row-major
//! `[M, N]` INT32; weights packed by [`pack_weights`]: for each core in
//! order, for each of its column tiles, for each K tile, the `kt × nt`
//! sub-matrix row-major (INT4: element `e` of the tile in byte `e / 2`, low
//! nibble first, each tile starting on a byte). Every core therefore reads
//! one contiguous range of the packed weights, front to back, once.

use crate::npu::isa::{CoreProgram, DmaDims, Instr, IsaError, Program, WeightType};
use crate::npu::kernels::schedule::{self, contiguous_loads, fits, Schedule};
use crate::npu::tiler::{tiles, weight_tile_bytes, Activations, CoreSlice, TilePlan};
use crate::npu::Target;

/// DDR byte addresses of the operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulAddrs {
    /// Activations, row-major `[M, K]` INT8.
    pub a: u32,
    /// Packed weights ([`pack_weights`]).
    pub w: u32,
    /// Output, row-major `[M, N]` INT32.
    pub out: u32,
}

/// Bad kernel input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("{what} at ddr {addr:#x} (+{len} bytes) does not fit the 32-bit address space")]
    Address {
        what: &'static str,
        addr: u32,
        len: u64,
    },
    #[error("weights: expected {expected} values (K·N), got {got}")]
    WeightCount { expected: u64, got: usize },
    #[error("INT4 weight {value} at index {index} outside -8..=7")]
    Int4Range { index: usize, value: i8 },
    #[error("{what}: expected {expected} values, got {got}")]
    Count {
        what: &'static str,
        expected: u64,
        got: usize,
    },
    #[error("the plan tiles the {got:?} kernel, not {expected:?}")]
    Kernel {
        expected: crate::npu::tiler::QKernel,
        got: crate::npu::tiler::QKernel,
    },
    #[error("attention: {0}")]
    Attention(&'static str),
    #[error("{what}: got M = {m}, N = {n}")]
    Shape { what: &'static str, m: u64, n: u64 },
    #[error("{what} need {need} bytes of CBUF, the core has {have}")]
    Cbuf {
        what: &'static str,
        need: u64,
        have: u64,
    },
    #[error("emitted program is invalid: {0}")]
    Isa(#[from] IsaError),
}

/// One core's two queues.
fn emit_core(plan: &TilePlan, addrs: &MatmulAddrs, core: &CoreSlice) -> CoreProgram {
    let p = &plan.problem;
    let l = &plan.layout;
    let sched = Schedule::new((p.m, p.k, p.n), core, plan.kt, plan.nt, l.acc, addrs.out);
    let panel = |kk, buf| schedule::panel(plan.activations, l.a, |k| plan.panel_offset(k), kk, buf);
    let mut w_ddr = addrs.w + core.w_offset as u32;
    let dma = |st: &schedule::Step, dma: &mut Vec<Instr>| {
        if plan.activations == Activations::Streamed || st.nn == 0 {
            dma.push(Instr::DmaLoad {
                cbuf: panel(st.kk, st.buf),
                ddr: addrs.a + st.k0,
                dims: DmaDims::rows(st.kt, p.m, p.k),
            });
        }
        let wbytes = weight_tile_bytes(p.wtype, st.kt, st.nt);
        contiguous_loads(l.w[st.buf], w_ddr, wbytes, dma);
        w_ddr = w_ddr.wrapping_add(wbytes as u32);
    };
    let compute = |st: &schedule::Step, compute: &mut Vec<Instr>| {
        compute.push(Instr::MatMul {
            wtype: p.wtype,
            a: panel(st.kk, st.buf),
            w: l.w[st.buf],
            acc: st.out,
            m: p.m,
            k: st.kt,
            n: st.nt,
            accumulate: st.kk > 0,
        });
    };
    schedule::emit(&sched, Vec::new(), dma, compute)
}

/// Emits the kernel for `plan` (from [`crate::npu::tiler::plan`] with the
/// same `target`) with operands at `addrs`.
pub fn emit_matmul(
    plan: &TilePlan,
    target: &Target,
    addrs: &MatmulAddrs,
) -> Result<Program, KernelError> {
    let p = &plan.problem;
    let (m, k, n) = (u64::from(p.m), u64::from(p.k), u64::from(p.n));
    fits("activations", addrs.a, m * k)?;
    fits("weights", addrs.w, plan.packed_weight_bytes())?;
    fits("output", addrs.out, 4 * m * n)?;
    let cores = plan.cores.iter().map(|c| emit_core(plan, addrs, c));
    schedule::program(cores, target)
}

/// Rearranges a row-major `[K, N]` weight matrix (INT4 values in `-8..=7`)
/// into the tile-major layout the kernel reads (see the module docs).
pub fn pack_weights(plan: &TilePlan, w: &[i8]) -> Result<Vec<u8>, KernelError> {
    let p = &plan.problem;
    let (k, n) = (p.k as usize, p.n as usize);
    if w.len() as u64 != k as u64 * n as u64 {
        return Err(KernelError::WeightCount {
            expected: k as u64 * n as u64,
            got: w.len(),
        });
    }
    check_int4(p.wtype, w)?;
    let mut out = Vec::with_capacity(plan.packed_weight_bytes() as usize);
    for core in &plan.cores {
        for (n0, nt) in tiles(core.n, plan.nt) {
            let col0 = (core.n0 + n0) as usize;
            for (k0, kt) in tiles(p.k, plan.kt) {
                let elems = (0..kt as usize).flat_map(|r| {
                    let row = (k0 as usize + r) * n + col0;
                    w[row..row + nt as usize].iter().copied()
                });
                pack_tile(p.wtype, elems, &mut out);
            }
        }
    }
    Ok(out)
}

/// Errors on an INT4 weight outside `-8..=7`.
pub(crate) fn check_int4(wtype: WeightType, w: &[i8]) -> Result<(), KernelError> {
    if wtype == WeightType::I4 {
        if let Some((index, &value)) = w.iter().enumerate().find(|(_, v)| !(-8..=7).contains(*v)) {
            return Err(KernelError::Int4Range { index, value });
        }
    }
    Ok(())
}

/// Appends the row-major elements of one weight tile in the `mm` layout
/// (INT4: two per byte, low nibble first, the tile starting on a byte).
pub(crate) fn pack_tile(wtype: WeightType, elems: impl Iterator<Item = i8>, out: &mut Vec<u8>) {
    match wtype {
        WeightType::I8 => out.extend(elems.map(|v| v as u8)),
        WeightType::I4 => {
            let v: Vec<i8> = elems.collect();
            out.extend(v.chunks(2).map(|c| {
                let lo = c[0] as u8 & 0x0f;
                let hi = c.get(1).map_or(0, |&h| (h as u8 & 0x0f) << 4);
                lo | hi
            }));
        }
    }
}
