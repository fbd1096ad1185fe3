//! Tiling of the weight-stationary quantized matmul on the NPU.
//!
//! The problem: `out[M×N] = a[M×K] · w[K×N]` with INT8 activations, INT8 or
//! INT4 weights and an INT32 output, all row-major in DDR. The per-token
//! zero-point correction and the float dequantization are not part of it;
//! [`qmatmul`] tiles the kernels that do them (the IR op `qmatmul`, and the
//! quantized SwiGLU MLP `qswiglu`: two such matmuls sharing the
//! activations).
//!
//! [`plan`] chooses, for a [`Target`]:
//!
//! - **the core split**: output columns are cut into `c = min(cores,
//!   ceil(N/16))` contiguous ranges of `round16(ceil(N/c))` columns (the
//!   last one takes the rest). Each core reads only its columns' weights,
//!   so every weight byte comes from DDR exactly once; every core reads the
//!   whole activation matrix.
//! - **the tile sizes**: `Kt × Nt` weight tiles, and `Mt = M` rows per
//!   activation tile (the whole bucket streams through a weight tile as
//!   one matmul instruction: the 16-cycle issue overhead is paid once per
//!   tile, and splitting rows buys nothing in the timing model).
//! - **activation residency**: [`Activations::Resident`] loads the
//!   activations once (one `M × Kt` panel per K tile, during the first
//!   column tile); [`Activations::Streamed`] reloads the panel with every
//!   weight tile (ping-pong), for buckets whose activations do not fit.
//!
//! CBUF placement (per core): every buffer starts on a bank boundary and
//! occupies whole banks — two accumulator buffers (`M × Nt` INT32, ping-pong
//! between column tiles so a tile's store overlaps the next one's
//! matmuls), two weight buffers (ping-pong between steps), then the
//! activation panels (resident) or two panel buffers (streamed). The timing
//! model ignores banks; this placement keeps the DMA writing one buffer and
//! the matmul reading the other in disjoint banks (no conflicts between
//! them should banks ever be modelled).
//!
//! The choice rule: among all candidates (both residency modes, `Kt` and
//! `Nt` balanced splits of `K` and the core's columns, multiples of 16,
//! `Kt <= 8192`, `Nt <= 2048` — the DMA run limit) whose buffers fit the
//! banks, take the one with the smallest estimated cycles of the busiest
//! core ([`Estimate`], computed from the documented timing model), ties
//! broken by fewer steps. Shapes that cannot be tiled are errors.

use crate::npu::isa::{WeightType, CBUF_ADDR_LIMIT, DMA_MAX_COUNT, DMA_MAX_RUN, DMA_STRIDE_LIMIT};
use crate::npu::Target;

pub mod qmatmul;

pub use qmatmul::{
    plan_qmatmul, plan_qswiglu, QBlock, QCbufLayout, QKernel, QMatmulProblem, QTilePlan,
};

/// Granule of tile sizes and of the column split.
pub const TILE_ALIGN: u32 = 16;
/// Semaphores the kernel uses per core.
pub const SEMAPHORES_USED: u8 = 8;

/// A quantized matmul `out[M×N] (INT32) = a[M×K] (INT8) · w[K×N]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulProblem {
    pub m: u32,
    pub k: u32,
    pub n: u32,
    pub wtype: WeightType,
}

/// Where the activations live during the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activations {
    /// Loaded once; panel `kk` at `CbufLayout::a[0] + kk · round16(M·Kt)`.
    Resident,
    /// Reloaded with every weight tile into `CbufLayout::a[step % 2]`.
    Streamed,
}

/// One core's share: output columns `n0..n0 + n`, whose packed weight tiles
/// start `w_offset` bytes into the packed weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreSlice {
    pub n0: u32,
    pub n: u32,
    pub w_offset: u64,
}

/// CBUF byte addresses of the kernel's buffers (bank-aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbufLayout {
    pub acc: [u32; 2],
    pub w: [u32; 2],
    /// Resident: both entries are the panels' base.
    pub a: [u32; 2],
    /// Banks used.
    pub banks: u32,
}

/// Estimated cycles of the busiest core (timing model, `docs/NPU_ISA.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Estimate {
    pub cycles: u64,
    /// Sum of the DMA queue's instruction cycles.
    pub dma: u64,
    /// Sum of the compute queue's instruction cycles.
    pub compute: u64,
}

/// A complete tiling of a [`MatmulProblem`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TilePlan {
    pub problem: MatmulProblem,
    pub kt: u32,
    pub nt: u32,
    /// Rows per activation tile (always `M`).
    pub mt: u32,
    pub activations: Activations,
    pub cores: Vec<CoreSlice>,
    pub layout: CbufLayout,
    pub estimate: Estimate,
}

/// A problem the tiler cannot handle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TileError {
    #[error("empty matmul (m={m}, k={k}, n={n})")]
    Empty { m: u32, k: u32, n: u32 },
    #[error("{what} = {value} exceeds the limit {limit}")]
    TooLarge {
        what: &'static str,
        value: u64,
        limit: u64,
    },
    #[error("no tiling of m={m} k={k} n={n} fits {banks} CBUF banks of {bank_bytes} bytes")]
    NoFit {
        m: u32,
        k: u32,
        n: u32,
        banks: u32,
        bank_bytes: u32,
    },
    #[error("unsupported target: {0}")]
    Target(&'static str),
    #[error("qmatmul group {group} does not divide k = {k}")]
    Group { k: u32, group: u32 },
}

/// Packed bytes of a `kt × nt` weight tile.
pub fn weight_tile_bytes(wtype: WeightType, kt: u32, nt: u32) -> u64 {
    let e = u64::from(kt) * u64::from(nt);
    match wtype {
        WeightType::I8 => e,
        WeightType::I4 => e.div_ceil(2),
    }
}

/// `(start, size)` of the tiles of `len` in steps of `tile`.
pub fn tiles(len: u32, tile: u32) -> impl Iterator<Item = (u32, u32)> {
    let tile = tile.max(1);
    (0..len.div_ceil(tile)).map(move |i| (i * tile, tile.min(len - i * tile)))
}

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl TilePlan {
    /// CBUF offset of K-panel `kk` from the resident panels' base.
    pub fn panel_offset(&self, kk: u32) -> u32 {
        let slot = round_up(u64::from(self.problem.m) * u64::from(self.kt), 16);
        (u64::from(kk) * slot) as u32
    }

    /// Total bytes of the packed weights ([`crate::npu::kernels::matmul::pack_weights`]).
    pub fn packed_weight_bytes(&self) -> u64 {
        let p = &self.problem;
        self.cores
            .iter()
            .flat_map(|c| tiles(c.n, self.nt))
            .flat_map(|(_, nt)| tiles(p.k, self.kt).map(move |(_, kt)| (kt, nt)))
            .map(|(kt, nt)| weight_tile_bytes(p.wtype, kt, nt))
            .sum()
    }
}

fn split_columns(p: &MatmulProblem, t: &Target) -> Vec<CoreSlice> {
    let c = t.cores.min(p.n.div_ceil(TILE_ALIGN)).max(1);
    let per = round_up(u64::from(p.n.div_ceil(c)), TILE_ALIGN.into()) as u32;
    // `w_offset` depends on the tile sizes; `plan` fills it in.
    tiles(p.n, per)
        .map(|(n0, n)| CoreSlice { n0, n, w_offset: 0 })
        .collect()
}

/// Balanced tile sizes for `len`: `round16(ceil(len / parts))` for every
/// part count, capped at `max` (a `len` below 16 is its own tile).
fn candidates(len: u32, max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = (1..=len.div_ceil(TILE_ALIGN))
        .map(|parts| {
            let t = round_up(u64::from(len.div_ceil(parts)), TILE_ALIGN.into()) as u32;
            t.min(len)
        })
        .filter(|&t| t <= max)
        .collect();
    v.dedup();
    v
}

/// What a kernel computes per step (the cost model differs).
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `emit_matmul`: one `mm` per step, INT32 output.
    Int32,
    /// `emit_qmatmul` (`mats = 1`) and `emit_qswiglu` (`mats = 2`): per
    /// group and weight matrix an `mm` and an `epi.f32`; activation panels
    /// of `m_pad` rows; constant blocks with channel records, one per
    /// matrix; with two matrices one `ew.silu_mul` per column tile.
    Dequant { group: u32, m_pad: u32, mats: u32 },
}

struct Costs<'a> {
    t: &'a Target,
    p: MatmulProblem,
    active: u32,
    kind: Kind,
}

impl Costs<'_> {
    /// Constant bytes a step loads besides the activations (for K tiles
    /// inside a group, the records of the group's last tile are spread).
    fn block(&self, kt: u32, nt: u32) -> u64 {
        match self.kind {
            Kind::Int32 => weight_tile_bytes(self.p.wtype, kt, nt),
            Kind::Dequant { group, mats, .. } => {
                let bytes = qmatmul::block(self.p.wtype, group, 0, kt, nt).bytes;
                let one = if kt < group {
                    // One record set per `group / kt` tiles.
                    let rec = round_up(8 * u64::from(nt), 16);
                    bytes + rec * u64::from(kt) / u64::from(group)
                } else {
                    bytes
                };
                one * u64::from(mats)
            }
        }
    }

    fn panel_rows(&self) -> u64 {
        match self.kind {
            Kind::Int32 => self.p.m.into(),
            Kind::Dequant { m_pad, .. } => m_pad.into(),
        }
    }

    /// DMA cycles before the first step (the row records).
    fn head(&self) -> u64 {
        match self.kind {
            Kind::Int32 => 0,
            Kind::Dequant { .. } => self.dma(u64::from(self.p.m) * 8),
        }
    }

    fn epi(&self, nt: u32) -> u64 {
        self.t.vector_cycles(u64::from(self.p.m) * u64::from(nt))
    }

    /// Compute cycles of one step.
    fn step(&self, kt: u32, nt: u32) -> u64 {
        match self.kind {
            Kind::Int32 => self.mm(kt, nt),
            Kind::Dequant { .. } if kt == 0 => 0,
            Kind::Dequant { group, mats, .. } => {
                let w = kt.min(group);
                let pieces = u64::from(kt / w);
                let epis = if kt >= group {
                    pieces * self.epi(nt)
                } else {
                    self.epi(nt) * u64::from(kt) / u64::from(group)
                };
                let one = (pieces * self.mm(w, nt)).saturating_add(epis);
                one.saturating_mul(mats.into())
            }
        }
    }

    /// Compute cycles at the end of a column tile of width `nt` (the
    /// `ew.silu_mul` of `qswiglu`).
    fn tile_end(&self, nt: u32) -> u64 {
        match self.kind {
            Kind::Dequant { mats: 2, .. } => self.epi(nt),
            _ => 0,
        }
    }

    fn dma(&self, bytes: u64) -> u64 {
        self.t.dma_cycles(bytes, self.active)
    }

    fn mm(&self, kt: u32, nt: u32) -> u64 {
        let macs = u64::from(self.p.m) * u64::from(kt) * u64::from(nt);
        self.t.mac_cycles(macs, self.t.macs_per_cycle)
    }

    /// Steps of one column tile of width `nt`: `(dma, compute, pipelined)`
    /// cycles, where a step's pipelined time is the longer of its DMA
    /// (weight tile, activation panel if `panel`, its share of the previous
    /// tile's store if `store`) and its matmul.
    fn column_tile(&self, kt: u32, nt: u32, panel: bool, store: Option<u32>) -> [u64; 3] {
        let (m, s) = (u64::from(self.p.m), self.t.sem_cycles.saturating_mul(2));
        let nk = u64::from(self.p.k.div_ceil(kt));
        let share = store.map_or(0, |w| {
            let chunks = nk.min(m);
            chunks
                .saturating_mul(self.dma(m * u64::from(w) * 4 / chunks))
                .div_ceil(nk)
        });
        let mut out = [0u64; 3];
        for (count, ktile) in classes(self.p.k, kt) {
            let w = self.dma(self.block(ktile, nt));
            let mut d = w.saturating_add(s).saturating_add(share);
            if panel {
                d = d.saturating_add(self.dma(self.panel_rows() * u64::from(ktile)));
            }
            let c = self.step(ktile, nt).saturating_add(s);
            for (o, v) in out.iter_mut().zip([d, c, d.max(c)]) {
                *o = o.saturating_add(count.saturating_mul(v));
            }
        }
        let end = self.tile_end(nt);
        out[1] = out[1].saturating_add(end);
        out[2] = out[2].saturating_add(end);
        out
    }

    /// Estimate for one core of `cols` columns (closed form over the first,
    /// the full and the remainder column tiles).
    fn estimate(&self, mode: Activations, kt: u32, nt: u32, cols: u32) -> Estimate {
        let m = u64::from(self.p.m);
        let add = |a: u64, b: u64, c: u64| a.saturating_add(b).saturating_add(c);
        let streamed = mode == Activations::Streamed;
        let nt0 = nt.min(cols);
        let mut sum = self.column_tile(kt, nt0, true, None);
        for (count, ntile) in classes(cols - nt0, nt) {
            let t = self.column_tile(kt, ntile, streamed, Some(nt));
            for (acc, v) in sum.iter_mut().zip(t) {
                *acc = acc.saturating_add(count.saturating_mul(v));
            }
        }
        let (kl, nl) = (last_tile(self.p.k, kt), last_tile(cols, nt));
        let last_store = self.dma(m * u64::from(nl) * 4);
        let k0 = kt.min(self.p.k);
        let first_dma = add(
            self.dma(self.block(k0, nt0)),
            self.dma(self.panel_rows() * u64::from(k0)),
            self.head(),
        );
        let last_mm = self.step(kl, nl).saturating_add(self.tile_end(nl));
        let [dma, compute, pipe] = sum;
        let dma = dma.saturating_add(self.head());
        let cycles = add(pipe, first_dma.min(last_mm), last_store)
            .max(add(dma, last_mm, last_store))
            .max(add(first_dma, compute, last_store));
        Estimate {
            cycles,
            dma: dma.saturating_add(last_store),
            compute,
        }
    }
}

/// `(count, size)` of the full tiles and of the remainder tile of `len`.
fn classes(len: u32, tile: u32) -> [(u64, u32); 2] {
    let tile = tile.max(1);
    [
        (u64::from(len / tile), tile),
        (u64::from(!len.is_multiple_of(tile)), len % tile),
    ]
}

fn last_tile(len: u32, tile: u32) -> u32 {
    match len % tile.max(1) {
        0 => tile.min(len),
        r => r,
    }
}

fn layout(
    t: &Target,
    p: &MatmulProblem,
    mode: Activations,
    kt: u32,
    nt: u32,
) -> Option<CbufLayout> {
    let bank = u64::from(t.cbuf_bank_bytes);
    let banks = |bytes: u64| bytes.div_ceil(bank);
    let m = u64::from(p.m);
    let acc = banks(m * u64::from(nt) * 4);
    let w = banks(weight_tile_bytes(p.wtype, kt, nt));
    let panel = round_up(m * u64::from(kt), 16);
    let (a_banks, a_bufs) = match mode {
        Activations::Resident => (banks(panel * u64::from(p.k.div_ceil(kt))), 1),
        Activations::Streamed => (banks(panel), 2),
    };
    let used = 2 * acc + 2 * w + a_bufs * a_banks;
    if used > u64::from(t.cbuf_banks) || used * bank > u64::from(CBUF_ADDR_LIMIT) {
        return None;
    }
    let at = |b: u64| (b * bank) as u32;
    let a0 = at(2 * acc + 2 * w);
    let a1 = match mode {
        Activations::Resident => a0,
        Activations::Streamed => at(2 * acc + 2 * w + a_banks),
    };
    Some(CbufLayout {
        acc: [at(0), at(acc)],
        w: [at(2 * acc), at(2 * acc + w)],
        a: [a0, a1],
        banks: used as u32,
    })
}

fn check(p: &MatmulProblem, t: &Target) -> Result<(), TileError> {
    if p.m == 0 || p.k == 0 || p.n == 0 {
        return Err(TileError::Empty {
            m: p.m,
            k: p.k,
            n: p.n,
        });
    }
    let too = |what, value: u64, limit: u64| {
        if value > limit {
            Err(TileError::TooLarge { what, value, limit })
        } else {
            Ok(())
        }
    };
    // Panel loads and result stores move one run per row.
    too("m", p.m.into(), DMA_MAX_COUNT.into())?;
    // Row strides of the activations (K bytes) and outputs (4·N bytes).
    too("k", p.k.into(), u64::from(DMA_STRIDE_LIMIT) - 1)?;
    too("4·n", 4 * u64::from(p.n), u64::from(DMA_STRIDE_LIMIT) - 1)?;
    let bank = t.cbuf_bank_bytes;
    if t.cores == 0 || bank == 0 || !bank.is_multiple_of(16) {
        return Err(TileError::Target(
            "no cores, or banks not a multiple of 16 bytes",
        ));
    }
    if t.semaphores < SEMAPHORES_USED {
        return Err(TileError::Target("the kernel needs 8 semaphores per core"));
    }
    if u64::from(t.cbuf_banks) * u64::from(bank) > u64::from(t.cbuf_bytes) {
        return Err(TileError::Target("banks exceed the CBUF size"));
    }
    Ok(())
}

fn no_fit(p: &MatmulProblem, t: &Target) -> TileError {
    TileError::NoFit {
        m: p.m,
        k: p.k,
        n: p.n,
        banks: t.cbuf_banks,
        bank_bytes: t.cbuf_bank_bytes,
    }
}

/// A candidate tiling with its CBUF layout and estimate.
struct Choice<L> {
    mode: Activations,
    kt: u32,
    nt: u32,
    layout: L,
    estimate: Estimate,
}

/// The candidate `(mode, kt, nt)` whose CBUF layout fits and whose
/// estimate is smallest (ties: fewer steps, then the first).
fn search<L>(
    p: &MatmulProblem,
    widest: u32,
    kts: &[u32],
    nts: &[u32],
    costs: &Costs<'_>,
    layout: impl Fn(Activations, u32, u32) -> Option<L>,
) -> Result<Choice<L>, TileError> {
    let mut best: Option<(u64, u64, Choice<L>)> = None;
    for mode in [Activations::Resident, Activations::Streamed] {
        for &kt in kts {
            for &nt in nts {
                let Some(l) = layout(mode, kt, nt) else {
                    continue;
                };
                let est = costs.estimate(mode, kt, nt, widest);
                let steps = u64::from(p.k.div_ceil(kt)) * u64::from(widest.div_ceil(nt));
                if best
                    .as_ref()
                    .is_some_and(|(c, s, _)| (*c, *s) <= (est.cycles, steps))
                {
                    continue;
                }
                let choice = Choice {
                    mode,
                    kt,
                    nt,
                    layout: l,
                    estimate: est,
                };
                best = Some((est.cycles, steps, choice));
            }
        }
    }
    best.map(|(_, _, b)| b).ok_or_else(|| no_fit(p, costs.t))
}

/// Chooses the core split, tile sizes, activation residency and CBUF
/// placement of `p` on `t` (see the module docs for the rule).
pub fn plan(p: &MatmulProblem, t: &Target) -> Result<TilePlan, TileError> {
    check(p, t)?;
    let mut cores = split_columns(p, t);
    let widest = cores.iter().map(|c| c.n).max().unwrap_or(0);
    let costs = Costs {
        t,
        p: *p,
        active: cores.len() as u32,
        kind: Kind::Int32,
    };
    let kts = candidates(p.k, DMA_MAX_RUN);
    let nts = candidates(widest, DMA_MAX_RUN / 4);
    let Choice {
        mode: activations,
        kt,
        nt,
        layout,
        estimate,
    } = search(p, widest, &kts, &nts, &costs, |mode, kt, nt| {
        layout(t, p, mode, kt, nt)
    })?;
    let mut plan = TilePlan {
        problem: *p,
        kt,
        nt,
        mt: p.m,
        activations,
        cores: Vec::new(),
        layout,
        estimate,
    };
    // Exact packed offsets for the chosen tiles (INT4 tiles round up).
    set_offsets(&mut cores, p.k, kt, nt, |_, kt, nt| {
        weight_tile_bytes(p.wtype, kt, nt)
    });
    plan.cores = cores;
    Ok(plan)
}

/// Sets each core's `w_offset`: the bytes of the previous cores' blocks,
/// `block(k0, kt, nt)` per K tile per column tile.
fn set_offsets(
    cores: &mut [CoreSlice],
    k: u32,
    kt: u32,
    nt: u32,
    block: impl Fn(u32, u32, u32) -> u64,
) {
    let mut off = 0;
    for c in cores {
        c.w_offset = off;
        for (_, ntile) in tiles(c.n, nt) {
            for (k0, ktile) in tiles(k, kt) {
                off += block(k0, ktile, ntile);
            }
        }
    }
}
