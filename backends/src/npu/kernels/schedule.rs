//! The weight-stationary schedule shared by the matmul kernels
//! ([`super::matmul`], [`super::qmatmul`]): per core, column tile `nn`
//! outer, K tile `kk` inner, one *step* per `(nn, kk)`. The DMA queue
//! fills the ping-pong buffer `step % 2` and signals it full; the compute
//! queue consumes it and signals it free; after a column tile's last step
//! its `M × Nt` 4-byte output tile (ping-pong between column tiles) is
//! stored to DDR in row blocks spread over the next column tile's steps.
//! What a step loads and computes is the kernel's (closures).
//!
//! Semaphores per core: `s0`/`s1` step buffer full, `s2`/`s3` step buffer
//! free, `s4`/`s5` output tile ready, `s6`/`s7` output tile free.

use crate::npu::isa::{CoreProgram, DmaDims, Instr, Program, DMA_MAX_COUNT, DMA_MAX_RUN};
use crate::npu::kernels::matmul::KernelError;
use crate::npu::tiler::{tiles, Activations, CoreSlice};
use crate::npu::Target;

const FULL: u8 = 0;
const FREE: u8 = 2;
const OUT_READY: u8 = 4;
const OUT_FREE: u8 = 6;

/// Errors unless `[addr, addr + len)` fits the 32-bit DDR address space.
pub(crate) fn fits(what: &'static str, addr: u32, len: u64) -> Result<(), KernelError> {
    if u64::from(addr) + len > 1 << 32 {
        return Err(KernelError::Address { what, addr, len });
    }
    Ok(())
}

/// DMA loads of `bytes` contiguous DDR bytes into dense CBUF: one
/// instruction when some run `<= 8192` divides the size with at most 1024
/// runs, otherwise 8192-byte runs plus a remainder transfer.
pub(crate) fn contiguous_loads(cbuf: u32, ddr: u32, bytes: u64, out: &mut Vec<Instr>) {
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

/// The stores of one finished column tile: its `m × nt` 4-byte elements at
/// `buf` to output columns starting at DDR `ddr`, cut into row blocks so
/// they can be spread over the next tile's steps.
struct TileStore {
    buf: u32,
    ddr: u32,
    nt: u32,
    slot: u8,
    chunks: Vec<(u32, u32)>,
}

impl TileStore {
    fn new(m: u32, buf: u32, ddr: u32, nt: u32, slot: u8, spread: u32) -> Self {
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
            buf,
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
                sem: OUT_READY + self.slot,
            });
        }
        out.push(Instr::DmaStore {
            ddr: self.ddr + lo * 4 * n,
            cbuf: self.buf + lo * 4 * self.nt,
            dims: DmaDims::rows(4 * self.nt, hi - lo, 4 * n),
        });
        if i + 1 == self.chunks.len() {
            out.push(Instr::Signal {
                sem: OUT_FREE + self.slot,
            });
        }
    }

    fn all(&self, n: u32, out: &mut Vec<Instr>) {
        for i in 0..self.chunks.len() {
            self.chunk(i, n, out);
        }
    }
}

/// The shape of one core's schedule.
pub(crate) struct Schedule<'a> {
    /// Rows of the output.
    pub m: u32,
    /// Columns of the whole output (the DDR row stride is `4·n`).
    pub n: u32,
    /// The core's columns.
    pub core: &'a CoreSlice,
    pub nt: u32,
    /// `(k0, kt)` of the K tiles, in order.
    pub k_tiles: Vec<(u32, u32)>,
    /// The two output tile buffers (`m × nt` 4-byte elements each).
    pub out_bufs: [u32; 2],
    /// DDR address of the output (row-major `[m, n]`, 4-byte elements).
    pub out_ddr: u32,
}

impl<'a> Schedule<'a> {
    /// The schedule of `core` with K tiles of `kt` (the last may be
    /// shorter) and column tiles of `nt`.
    pub fn new(
        (m, k, n): (u32, u32, u32),
        core: &'a CoreSlice,
        kt: u32,
        nt: u32,
        out_bufs: [u32; 2],
        out_ddr: u32,
    ) -> Self {
        Schedule {
            m,
            n,
            core,
            nt,
            k_tiles: tiles(k, kt).collect(),
            out_bufs,
            out_ddr,
        }
    }
}

/// CBUF address of the activation panel of K tile `kk` in step buffer
/// `buf`: resident panels at `a[0] + offset(kk)`, streamed ones ping-pong.
pub(crate) fn panel(
    mode: Activations,
    a: [u32; 2],
    offset: impl Fn(u32) -> u32,
    kk: usize,
    buf: usize,
) -> u32 {
    match mode {
        Activations::Resident => a[0] + offset(kk as u32),
        Activations::Streamed => a[buf],
    }
}

/// The program of the per-core queues, checked against `target`.
pub(crate) fn program(
    cores: impl Iterator<Item = CoreProgram>,
    target: &Target,
) -> Result<Program, KernelError> {
    let program = Program {
        cores: cores.collect(),
    };
    program.check(target)?;
    Ok(program)
}

/// One step, as the kernel's closures see it.
pub(crate) struct Step {
    pub nn: usize,
    pub kk: usize,
    pub k0: u32,
    pub kt: u32,
    pub nt: u32,
    /// Ping-pong buffer of this step (0 or 1).
    pub buf: usize,
    /// The column tile's output buffer.
    pub out: u32,
}

/// Emits one core: `head` first on the DMA queue (loads covered by the
/// first step's full signal), then per step `dma(step)` between the wait
/// for a free buffer and the full signal, and `compute(step)` between the
/// wait for a full buffer and the free signal.
pub(crate) fn emit(
    s: &Schedule<'_>,
    head: Vec<Instr>,
    mut dma_body: impl FnMut(&Step, &mut Vec<Instr>),
    mut compute_body: impl FnMut(&Step, &mut Vec<Instr>),
) -> CoreProgram {
    let (mut dma, mut compute) = (head, Vec::new());
    let mut step = 0usize;
    let nk = s.k_tiles.len() as u32;
    let n_tiles = tiles(s.core.n, s.nt).count();
    // The previous column tile's store, spread over this tile's steps.
    let mut prev: Option<TileStore> = None;
    for (nn, (n0, nt)) in tiles(s.core.n, s.nt).enumerate() {
        let slot = (nn % 2) as u8;
        for (kk, &(k0, kt)) in s.k_tiles.iter().enumerate() {
            let buf = step % 2;
            let st = Step {
                nn,
                kk,
                k0,
                kt,
                nt,
                buf,
                out: s.out_bufs[nn % 2],
            };
            let sem = buf as u8;
            if step >= 2 {
                dma.push(Instr::Wait { sem: FREE + sem });
            }
            dma_body(&st, &mut dma);
            dma.push(Instr::Signal { sem: FULL + sem });
            if let Some(ts) = &prev {
                ts.chunk(kk, s.n, &mut dma);
            }

            compute.push(Instr::Wait { sem: FULL + sem });
            if kk == 0 && nn >= 2 {
                compute.push(Instr::Wait {
                    sem: OUT_FREE + slot,
                });
            }
            compute_body(&st, &mut compute);
            compute.push(Instr::Signal { sem: FREE + sem });
            step += 1;
        }
        compute.push(Instr::Signal {
            sem: OUT_READY + slot,
        });
        let ddr = s.out_ddr + 4 * (s.core.n0 + n0);
        // The last tile's store has no following steps to hide behind.
        let spread = if nn + 1 == n_tiles { 1 } else { nk };
        prev = Some(TileStore::new(
            s.m,
            s.out_bufs[nn % 2],
            ddr,
            nt,
            slot,
            spread,
        ));
    }
    if let Some(ts) = &prev {
        ts.all(s.n, &mut dma);
    }
    CoreProgram { dma, compute }
}
