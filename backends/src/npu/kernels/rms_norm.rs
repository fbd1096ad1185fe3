//! The IR ops `rms_norm` (`x, w → y`) and `add_rms_norm` (`x, r, w → s =
//! x + r, y = rms_norm(s)`) on the NPU over `M` rows of hidden size `N`
//! (f32), bit-exactly: one `norm.rms` per row tile computes the ops'
//! arithmetic in their order (`docs/NPU_ISA.md`, "`norm.rms`").
//!
//! **Schedule** (per core, weight-stationary in spirit): each core owns a
//! contiguous range of rows. Its DMA queue first loads the params record
//! (`eps`, `offset`, the `N` weights) into CBUF once, then streams the
//! core's rows in row tiles of [`RmsNormPlan::rows_per_tile`] through two
//! ping-pong slots: tile `t` goes to slot `t % 2` (x, and r after it), and
//! the DMA queue signals the slot full (`s0`/`s1`; the first signal also
//! covers the params load). The compute queue waits for it, runs one
//! `norm.rms` with `y` over `x` and `s` over `r` (in place) and signals the
//! tile done (`s2`/`s3`). The DMA queue stores tile `t`'s `y` (and `s`)
//! before loading tile `t + 2` into the same slot, so a slot's store and
//! reload are ordered by the queue itself, and the load of tile `t + 1`
//! overlaps tile `t`'s compute: the DMA order is `load 0, load 1, store 0,
//! load 2, store 1, load 3, …`. Four semaphores per core.
//!
//! **DDR image** ([`RmsNormLayout`], from address 0, each region 64-byte
//! aligned): the params record ([`pack_rms_norm_params`]: f32 `eps` @0, f32
//! `offset` @4, 8 zero bytes, the `N` f32 weights from @16), `x` `[M, N]`
//! f32, then with the residual `r` and `s` `[M, N]` f32, then `y` `[M, N]`
//! f32, all row-major little-endian. A row tile is `rows · N · 4`
//! contiguous bytes in each region, moved with as few DMA transfers as the
//! field limits allow.
//!
//! **CBUF** (per core): the params record at 0, then the two slots, each
//! `round16(rows · 4N)` bytes of x (plus as much for r with the residual).
//!
//! **Choice of the plan** ([`plan_rms_norm`]): the kernel moves `4·M·N`
//! bytes each way (twice with the residual) against `2–3·M·N / 64` vector
//! cycles, so it is DDR-bound. In the timing model the DDR bandwidth is
//! split evenly between the cores that use DMA, so extra cores do not speed
//! the transfers up: they only overlap the per-transfer latency and the
//! compute, and each pays its own params load. The planner therefore
//! evaluates the schedule's timeline ([`RmsNormPlan::estimated_cycles`],
//! the simulator's cost formulas) for every core count and tile height that
//! fits, and picks the fastest (fewer cores, then taller tiles, on ties).

use crate::npu::isa::{CoreProgram, Instr, CBUF_ADDR_LIMIT, CBUF_ALIGN, MAX_K, MAX_MN};
use crate::npu::kernels::matmul::KernelError;
use crate::npu::kernels::schedule::{self, contiguous_loads, fits};
use crate::npu::tiler::tiles;
use crate::npu::{Program, Target};

/// Bytes of the params record before the weights (`eps`, `offset`, 8
/// ignored bytes).
pub const RMS_NORM_PARAMS_HEADER: u32 = 16;

const FULL: u8 = 0;
const DONE: u8 = 2;

/// How an `(add_)rms_norm` of `m × n` runs: `cores` cores (contiguous row
/// ranges, [`RmsNormPlan::core_rows`]), each streaming its rows in tiles of
/// `rows_per_tile` (the last may be shorter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmsNormPlan {
    pub m: u32,
    pub n: u32,
    /// `add_rms_norm` (`s = x + r` is normalised and also written).
    pub residual: bool,
    pub rows_per_tile: u32,
    /// Cores used (`1..=target.cores`, at most `m`).
    pub cores: u32,
}

fn round16(x: u64) -> u64 {
    x.next_multiple_of(u64::from(CBUF_ALIGN))
}

impl RmsNormPlan {
    /// Bytes of the params record (`16 + 4·N`), in DDR and in CBUF.
    pub fn params_bytes(&self) -> u64 {
        u64::from(RMS_NORM_PARAMS_HEADER) + 4 * u64::from(self.n)
    }

    /// Rows `[r0, r1)` of core `core` (balanced: the counts differ by at
    /// most one).
    pub fn core_rows(&self, core: u32) -> (u32, u32) {
        let (m, c) = (u64::from(self.m), u64::from(self.cores.max(1)));
        let at = |i: u64| (i * m / c) as u32;
        (at(u64::from(core)), at(u64::from(core) + 1))
    }

    /// CBUF bytes of one operand (x or r) of a tile of `rows` rows.
    fn operand_bytes(&self, rows: u32) -> u64 {
        round16(4 * u64::from(rows) * u64::from(self.n))
    }

    /// CBUF bytes of one slot (x, and r with the residual).
    fn slot_bytes(&self, rows: u32) -> u64 {
        self.operand_bytes(rows) * if self.residual { 2 } else { 1 }
    }

    /// CBUF bytes the plan uses: params record and two slots.
    pub fn cbuf_bytes(&self) -> u64 {
        round16(self.params_bytes()) + 2 * self.slot_bytes(self.rows_per_tile)
    }

    /// CBUF addresses of slot `u`'s x and r.
    fn slot(&self, u: u32) -> (u32, u32) {
        let base =
            round16(self.params_bytes()) + u64::from(u) * self.slot_bytes(self.rows_per_tile);
        let x = base as u32;
        (x, x + self.operand_bytes(self.rows_per_tile) as u32)
    }

    /// The cycles the simulator's timing model gives this plan's program
    /// (`docs/NPU_ISA.md`, "Timing model"): the per-core timeline of the
    /// two queues, semaphores included; the slowest core.
    pub fn estimated_cycles(&self, target: &Target) -> u64 {
        (0..self.cores)
            .map(|c| {
                let (r0, r1) = self.core_rows(c);
                self.core_cycles(r1 - r0, target)
            })
            .max()
            .unwrap_or(0)
    }

    fn core_cycles(&self, rows: u32, t: &Target) -> u64 {
        let transfer = |bytes: u64| {
            let mut v = Vec::new();
            contiguous_loads(0, 0, bytes, &mut v);
            v.iter()
                .map(|i| match i {
                    Instr::DmaLoad { dims, .. } => t.dma_cycles(dims.bytes(), self.cores),
                    _ => 0,
                })
                .sum::<u64>()
        };
        let ops = if self.residual { 2 } else { 1 };
        // Loads and stores of a tile of `r` rows: `ops` transfers each way.
        let io = |r: u32| ops * transfer(4 * u64::from(r) * u64::from(self.n));
        let p = if self.residual { 3 } else { 2 };
        let norm = |r: u32| t.vector_cycles(p * u64::from(r) * u64::from(self.n));
        let sem = t.sem_cycles;
        // Per tile height (the full one and the last): DMA and compute cycles.
        let full = (io(self.rows_per_tile), norm(self.rows_per_tile));
        let cost = |r: u32| {
            if r == self.rows_per_tile {
                full
            } else {
                (io(r), norm(r))
            }
        };
        let tile_cost: Vec<(u64, u64)> = tiles(rows, self.rows_per_tile)
            .map(|(_, r)| cost(r))
            .collect();
        let mut done = Vec::with_capacity(tile_cost.len());
        let mut dma = transfer(self.params_bytes());
        let mut compute = 0u64;
        for (i, &(io_t, norm_t)) in tile_cost.iter().enumerate() {
            if i >= 2 {
                dma = dma.max(done[i - 2]) + sem + tile_cost[i - 2].0;
            }
            dma += io_t + sem;
            compute = compute.max(dma) + sem + norm_t + sem;
            done.push(compute);
        }
        for i in tile_cost.len().saturating_sub(2)..tile_cost.len() {
            dma = dma.max(done[i]) + sem + tile_cost[i].0;
        }
        dma.max(compute)
    }
}

/// Plans the kernel for `m` rows of `n` f32 values (`add_rms_norm` with
/// `residual`) on `target` (module docs). Errors for `m = 0`, `n = 0`,
/// `n > 16384`, or when the params record and two one-row slots do not
/// fit the CBUF.
pub fn plan_rms_norm(
    m: u32,
    n: u32,
    residual: bool,
    target: &Target,
) -> Result<RmsNormPlan, KernelError> {
    if m == 0 || n == 0 || n > MAX_K {
        return Err(KernelError::Shape {
            what: "rms_norm: M >= 1 and 1 <= N <= 16384",
            m: u64::from(m),
            n: u64::from(n),
        });
    }
    let cbuf = u64::from(target.cbuf_bytes.min(CBUF_ADDR_LIMIT));
    let base = RmsNormPlan {
        m,
        n,
        residual,
        rows_per_tile: 1,
        cores: 1,
    };
    if base.cbuf_bytes() > cbuf {
        return Err(KernelError::Cbuf {
            what: "rms_norm params record and two one-row slots",
            need: base.cbuf_bytes(),
            have: cbuf,
        });
    }
    // Tallest tile whose two slots fit after the params record.
    let room = (cbuf - round16(base.params_bytes())) / 2;
    let per_row = 4 * u64::from(n) * if residual { 2 } else { 1 };
    let mut max_rows = (room / per_row).clamp(1, u64::from(MAX_MN)) as u32;
    while max_rows > 1
        && (RmsNormPlan {
            rows_per_tile: max_rows,
            ..base
        })
        .cbuf_bytes()
            > cbuf
    {
        max_rows -= 1;
    }
    let ops = if residual { 2 } else { 1 };
    let t = target;
    let mut best: Option<(u64, RmsNormPlan)> = None;
    for cores in 1..=t.cores.max(1).min(m) {
        let per_core = m.div_ceil(cores);
        // A lower bound of the busiest core's DMA queue with `tiles` tiles:
        // its bytes at its share of the bandwidth plus one latency per
        // transfer (at least the params load and one per operand and
        // direction per tile). It grows with the tile count.
        let bytes = base.params_bytes() + 2 * ops * 4 * u64::from(per_core) * u64::from(n);
        let moving = u128::from(bytes) * u128::from(cores) * u128::from(t.clock_hz)
            / u128::from(t.ddr_bytes_per_sec.max(1));
        let floor = |tiles: u32| {
            let transfers = 1 + 2 * ops * u64::from(tiles);
            u128::from(t.dma_latency_cycles) * u128::from(transfers) + moving
        };
        // Taller tiles first: they win ties (fewer transfers). Stop once
        // even the bound of the tile count is no better than the best.
        for rows in (1..=max_rows.min(per_core)).rev() {
            if best.is_some_and(|(c, _)| floor(per_core.div_ceil(rows)) >= u128::from(c)) {
                break;
            }
            let plan = RmsNormPlan {
                rows_per_tile: rows,
                cores,
                ..base
            };
            let cycles = plan.estimated_cycles(target);
            if best.is_none_or(|(c, _)| cycles < c) {
                best = Some((cycles, plan));
            }
        }
    }
    Ok(best.map(|(_, p)| p).unwrap_or(base))
}

/// DDR byte offsets of the kernel's image (module docs), from 0, each
/// region 64-byte aligned; `total` is the image size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmsNormLayout {
    /// Params record ([`pack_rms_norm_params`], `16 + 4·N` bytes).
    pub params: u32,
    /// `x` `[M, N]` f32.
    pub x: u32,
    /// `r` `[M, N]` f32 (residual only).
    pub r: Option<u32>,
    /// `s = x + r` `[M, N]` f32 (residual only).
    pub s: Option<u32>,
    /// `y` `[M, N]` f32.
    pub y: u32,
    pub total: u32,
}

impl RmsNormLayout {
    /// The image of `plan`; errors when it exceeds the 32-bit address space.
    pub fn new(plan: &RmsNormPlan) -> Result<RmsNormLayout, KernelError> {
        let tensor = 4 * u64::from(plan.m) * u64::from(plan.n);
        let mut next = 0u64;
        let mut region = |what: &'static str, len: u64| -> Result<u32, KernelError> {
            let at = next.next_multiple_of(64);
            let addr = u32::try_from(at).map_err(|_| KernelError::Address {
                what,
                addr: u32::MAX,
                len,
            })?;
            fits(what, addr, len)?;
            next = at + len;
            Ok(addr)
        };
        let params = region("params record", plan.params_bytes())?;
        let x = region("x", tensor)?;
        let (r, s) = if plan.residual {
            (Some(region("r", tensor)?), Some(region("s", tensor)?))
        } else {
            (None, None)
        };
        let y = region("y", tensor)?;
        let total = u32::try_from(next).map_err(|_| KernelError::Address {
            what: "rms_norm image",
            addr: 0,
            len: next,
        })?;
        Ok(RmsNormLayout {
            params,
            x,
            r,
            s,
            y,
            total,
        })
    }
}

/// The params record: f32 `eps` @0, f32 `offset` @4, 8 zero bytes, then
/// the weights `w` (f32, from @16), little-endian.
pub fn pack_rms_norm_params(eps: f32, offset: f32, w: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 4 * w.len());
    out.extend_from_slice(&eps.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    for v in w {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// DMA stores of `bytes` contiguous DDR bytes from dense CBUF (the
/// transfers of [`contiguous_loads`], reversed).
fn contiguous_stores(cbuf: u32, ddr: u32, bytes: u64, out: &mut Vec<Instr>) {
    let mut loads = Vec::new();
    contiguous_loads(cbuf, ddr, bytes, &mut loads);
    out.extend(loads.into_iter().map(|i| match i {
        Instr::DmaLoad { cbuf, ddr, dims } => Instr::DmaStore { ddr, cbuf, dims },
        other => other,
    }));
}

/// One core's queues for rows `[r0, r1)`.
fn emit_core(plan: &RmsNormPlan, layout: &RmsNormLayout, r0: u32, r1: u32) -> CoreProgram {
    let (mut dma, mut compute) = (Vec::new(), Vec::new());
    contiguous_loads(0, layout.params, plan.params_bytes(), &mut dma);
    let row_bytes = 4 * plan.n;
    let tiles: Vec<(u32, u32)> = tiles(r1 - r0, plan.rows_per_tile)
        .map(|(i, r)| (r0 + i, r))
        .collect();
    // DDR regions loaded (x, r) and stored (y, s) per tile, with the CBUF
    // operand each uses in the slot (0: x, 1: r).
    let loads: Vec<(u32, usize)> = [Some(layout.x), layout.r]
        .into_iter()
        .flatten()
        .zip(0..)
        .collect();
    let stores: Vec<(u32, usize)> = [Some(layout.y), layout.s]
        .into_iter()
        .flatten()
        .zip(0..)
        .collect();
    let cbuf_of = |u: u32, which: usize| {
        let (x, r) = plan.slot(u);
        [x, r][which]
    };
    let store = |i: usize, dma: &mut Vec<Instr>| {
        let (row, rows) = tiles[i];
        let u = (i % 2) as u32;
        dma.push(Instr::Wait {
            sem: DONE + u as u8,
        });
        for &(ddr, which) in &stores {
            let bytes = u64::from(rows) * u64::from(row_bytes);
            contiguous_stores(cbuf_of(u, which), ddr + row * row_bytes, bytes, dma);
        }
    };
    for (i, &(row, rows)) in tiles.iter().enumerate() {
        let u = (i % 2) as u32;
        if i >= 2 {
            store(i - 2, &mut dma);
        }
        for &(ddr, which) in &loads {
            let bytes = u64::from(rows) * u64::from(row_bytes);
            contiguous_loads(cbuf_of(u, which), ddr + row * row_bytes, bytes, &mut dma);
        }
        dma.push(Instr::Signal {
            sem: FULL + u as u8,
        });

        let (x, r) = plan.slot(u);
        compute.push(Instr::Wait {
            sem: FULL + u as u8,
        });
        compute.push(Instr::RmsNorm {
            x,
            residual: plan.residual.then_some((r, r)),
            params: 0,
            y: x,
            m: rows,
            n: plan.n,
        });
        compute.push(Instr::Signal {
            sem: DONE + u as u8,
        });
    }
    for i in tiles.len().saturating_sub(2)..tiles.len() {
        store(i, &mut dma);
    }
    CoreProgram { dma, compute }
}

/// Emits the kernel for `plan` ([`plan_rms_norm`] with the same `target`)
/// on the DDR image `layout` ([`RmsNormLayout::new`] of the same plan):
/// reads the params record and `x` (and `r`), writes `y` (and `s`).
pub fn emit_rms_norm(
    plan: &RmsNormPlan,
    target: &Target,
    layout: &RmsNormLayout,
) -> Result<Program, KernelError> {
    let (m, n) = (plan.m, plan.n);
    if m == 0 || n == 0 || n > MAX_K || plan.rows_per_tile == 0 || plan.rows_per_tile > MAX_MN {
        return Err(KernelError::Shape {
            what: "rms_norm plan: M >= 1, 1 <= N <= 16384, 1 <= rows per tile <= 4096",
            m: u64::from(m),
            n: u64::from(n),
        });
    }
    if plan.cores == 0 || plan.cores > m || plan.residual != layout.r.is_some() {
        return Err(KernelError::Shape {
            what: "rms_norm plan: 1 <= cores <= M, layout with the plan's residual",
            m: u64::from(m),
            n: u64::from(n),
        });
    }
    let cbuf = u64::from(target.cbuf_bytes.min(CBUF_ADDR_LIMIT));
    if plan.cbuf_bytes() > cbuf {
        return Err(KernelError::Cbuf {
            what: "rms_norm params record and two slots",
            need: plan.cbuf_bytes(),
            have: cbuf,
        });
    }
    let tensor = 4 * u64::from(m) * u64::from(n);
    fits("params record", layout.params, plan.params_bytes())?;
    fits("x", layout.x, tensor)?;
    for addr in [layout.r, layout.s].into_iter().flatten() {
        fits("residual", addr, tensor)?;
    }
    fits("y", layout.y, tensor)?;
    let cores = (0..plan.cores).map(|c| {
        let (r0, r1) = plan.core_rows(c);
        emit_core(plan, layout, r0, r1)
    });
    schedule::program(cores, target)
}
