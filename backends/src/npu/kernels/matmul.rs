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
//!
//! DDR layouts: activations row-major `[M, K]` INT8; output row-major
//! `[M, N]` INT32; weights packed by [`pack_weights`]: for each core in
//! order, for each of its column tiles, for each K tile, the `kt × nt`
//! sub-matrix row-major (INT4: element `e` of the tile in byte `e / 2`, low
//! nibble first, each tile starting on a byte). Every core therefore reads
//! one contiguous range of the packed weights, front to back, once.

use crate::npu::isa::{
    CoreProgram, DmaDims, Instr, IsaError, Program, WeightType, DMA_MAX_COUNT, DMA_MAX_RUN,
};
use crate::npu::tiler::{tiles, weight_tile_bytes, Activations, CoreSlice, TilePlan};
use crate::npu::Target;

const FULL: u8 = 0;
const FREE: u8 = 2;
const ACC_READY: u8 = 4;
const ACC_FREE: u8 = 6;

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
    #[error("emitted program is invalid: {0}")]
    Isa(#[from] IsaError),
}

fn fits(what: &'static str, addr: u32, len: u64) -> Result<(), KernelError> {
    if u64::from(addr) + len > 1 << 32 {
        return Err(KernelError::Address { what, addr, len });
    }
    Ok(())
}

/// DMA loads of `bytes` contiguous DDR bytes into dense CBUF: one
/// instruction when some run `<= 8192` divides the size with at most 1024
/// runs, otherwise 8192-byte runs plus a remainder transfer.
fn contiguous_loads(cbuf: u32, ddr: u32, bytes: u64, out: &mut Vec<Instr>) {
    let (max_run, max_count) = (u64::from(DMA_MAX_RUN), u64::from(DMA_MAX_COUNT));
    let lo = bytes.div_ceil(max_count).max(1);
    if let Some(run) = (lo..=max_run.min(bytes))
        .rev()
        .find(|r| bytes.is_multiple_of(*r))
    {
        let dims = DmaDims::rows(run as u32, (bytes / run) as u32, run as u32);
        out.push(Instr::DmaLoad { cbuf, ddr, dims });
        return;
    }
    let mut done = 0;
    while done < bytes {
        let chunk = (bytes - done).min(max_run * max_count);
        let (runs, rest) = (chunk / max_run, chunk % max_run);
        let (c, d) = (cbuf + done as u32, ddr + done as u32);
        if runs > 0 {
            let dims = DmaDims::rows(DMA_MAX_RUN, runs as u32, DMA_MAX_RUN);
            out.push(Instr::DmaLoad {
                cbuf: c,
                ddr: d,
                dims,
            });
        }
        if rest > 0 {
            let off = (runs * max_run) as u32;
            let dims = DmaDims::contiguous(rest as u32);
            out.push(Instr::DmaLoad {
                cbuf: c + off,
                ddr: d + off,
                dims,
            });
        }
        done += chunk;
    }
}

/// The stores of one finished column tile: its accumulators at `acc`
/// (`m × nt` INT32) to output columns starting at DDR `ddr`, cut into
/// `chunks` row blocks so they can be spread over the next tile's steps.
struct TileStore {
    acc: u32,
    ddr: u32,
    nt: u32,
    slot: u8,
    chunks: Vec<(u32, u32)>,
}

impl TileStore {
    fn new(plan: &TilePlan, acc: u32, ddr: u32, nt: u32, slot: u8, spread: u32) -> Self {
        let m = plan.problem.m;
        // Row blocks must start 16-byte aligned in CBUF.
        let parts = if (4 * nt).is_multiple_of(16) {
            spread.clamp(1, m)
        } else {
            1
        };
        let chunks = (0..parts)
            .map(|i| (i * m / parts, (i + 1) * m / parts))
            .filter(|(lo, hi)| hi > lo)
            .collect();
        TileStore {
            acc,
            ddr,
            nt,
            slot,
            chunks,
        }
    }

    /// DMA instructions of chunk `i` (with the wait before the first and
    /// the release after the last); nothing past the last chunk.
    fn chunk(&self, i: usize, n: u32, out: &mut Vec<Instr>) {
        let Some(&(lo, hi)) = self.chunks.get(i) else {
            return;
        };
        if i == 0 {
            out.push(Instr::Wait {
                sem: ACC_READY + self.slot,
            });
        }
        out.push(Instr::DmaStore {
            ddr: self.ddr + lo * 4 * n,
            cbuf: self.acc + lo * 4 * self.nt,
            dims: DmaDims::rows(4 * self.nt, hi - lo, 4 * n),
        });
        if i + 1 == self.chunks.len() {
            out.push(Instr::Signal {
                sem: ACC_FREE + self.slot,
            });
        }
    }

    fn all(&self, n: u32, out: &mut Vec<Instr>) {
        for i in 0..self.chunks.len() {
            self.chunk(i, n, out);
        }
    }
}

/// One core's two queues.
fn emit_core(plan: &TilePlan, addrs: &MatmulAddrs, core: &CoreSlice) -> CoreProgram {
    let p = &plan.problem;
    let l = &plan.layout;
    let (mut dma, mut compute) = (Vec::new(), Vec::new());
    let mut w_ddr = addrs.w + core.w_offset as u32;
    let mut step = 0usize;
    let nk = p.k.div_ceil(plan.kt);
    let n_tiles = tiles(core.n, plan.nt).count();
    // The previous column tile's store, spread over this tile's steps.
    let mut prev: Option<TileStore> = None;
    for (nn, (n0, nt)) in tiles(core.n, plan.nt).enumerate() {
        let slot = (nn % 2) as u8;
        let acc = l.acc[nn % 2];
        for (kk, (k0, kt)) in tiles(p.k, plan.kt).enumerate() {
            let buf = (step % 2) as u8;
            if step >= 2 {
                dma.push(Instr::Wait { sem: FREE + buf });
            }
            let panel = match plan.activations {
                Activations::Resident => l.a[0] + plan.panel_offset(kk as u32),
                Activations::Streamed => l.a[usize::from(buf)],
            };
            if plan.activations == Activations::Streamed || nn == 0 {
                let dims = DmaDims::rows(kt, p.m, p.k);
                dma.push(Instr::DmaLoad {
                    cbuf: panel,
                    ddr: addrs.a + k0,
                    dims,
                });
            }
            let wbytes = weight_tile_bytes(p.wtype, kt, nt);
            contiguous_loads(l.w[usize::from(buf)], w_ddr, wbytes, &mut dma);
            w_ddr = w_ddr.wrapping_add(wbytes as u32);
            dma.push(Instr::Signal { sem: FULL + buf });
            if let Some(st) = &prev {
                st.chunk(kk, p.n, &mut dma);
            }

            compute.push(Instr::Wait { sem: FULL + buf });
            if kk == 0 && nn >= 2 {
                compute.push(Instr::Wait {
                    sem: ACC_FREE + slot,
                });
            }
            compute.push(Instr::MatMul {
                wtype: p.wtype,
                a: panel,
                w: l.w[usize::from(buf)],
                acc,
                m: p.m,
                k: kt,
                n: nt,
                accumulate: kk > 0,
            });
            compute.push(Instr::Signal { sem: FREE + buf });
            step += 1;
        }
        compute.push(Instr::Signal {
            sem: ACC_READY + slot,
        });
        let ddr = addrs.out + 4 * (core.n0 + n0);
        // The last tile's store has no following steps to hide behind.
        let spread = if nn + 1 == n_tiles { 1 } else { nk };
        prev = Some(TileStore::new(plan, acc, ddr, nt, slot, spread));
    }
    if let Some(st) = &prev {
        st.all(p.n, &mut dma);
    }
    CoreProgram { dma, compute }
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
    let cores = plan
        .cores
        .iter()
        .map(|c| emit_core(plan, addrs, c))
        .collect();
    let program = Program { cores };
    program.check(target)?;
    Ok(program)
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
    if p.wtype == WeightType::I4 {
        if let Some((index, &value)) = w.iter().enumerate().find(|(_, v)| !(-8..=7).contains(*v)) {
            return Err(KernelError::Int4Range { index, value });
        }
    }
    let mut out = Vec::with_capacity(plan.packed_weight_bytes() as usize);
    for core in &plan.cores {
        for (n0, nt) in tiles(core.n, plan.nt) {
            let col0 = (core.n0 + n0) as usize;
            for (k0, kt) in tiles(p.k, plan.kt) {
                let elems = (0..kt as usize).flat_map(|r| {
                    let row = (k0 as usize + r) * n + col0;
                    w[row..row + nt as usize].iter().copied()
                });
                match p.wtype {
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
        }
    }
    Ok(out)
}
