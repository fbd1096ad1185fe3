//! Tiling of the `qmatmul` kernel ([`crate::npu::kernels::qmatmul`]):
//! the weight-stationary matmul schedule with group-wise dequantization,
//! and of the `qswiglu` kernel ([`crate::npu::kernels::qswiglu`]), the same
//! schedule with two weight matrices (gate and up, same shape, bits and
//! group) streaming through each activation panel ([`QKernel`]).
//!
//! The same core split, candidate search and cost model as [`super::plan`],
//! with these differences:
//!
//! - **K tiles respect the groups** (`G = group`): a K tile is either a
//!   whole number of groups (`kt = g·G`, `g` from the balanced splits of
//!   the `K/G` groups, `G <= 8192`) or a divisor of `G` that is a multiple
//!   of 16 (several tiles per group, needed when `G = K` is large).
//!   Within a tile, a *piece* is `w = min(G, kt)` rows: one `mm` each.
//! - **activation panels of `m_pad` rows**: the INT8 activations live in
//!   DDR as `[m_pad, K]` (`m_pad` = `M` rounded up so that `m_pad·G` is a
//!   multiple of 16), and a tile's panel is loaded piece-major (a DMA with
//!   `count2 = kt / w` blocks), so every piece is a dense, 16-byte aligned
//!   `m_pad × w` panel whose first `M` rows the `mm` reads.
//! - **constant blocks**: per step the DMA loads one contiguous block — the
//!   pieces' weight tiles (`w × nt`, each padded to 16 bytes) followed by
//!   the channel records (`nt × 8` bytes each, padded to 16) of every group
//!   that ends in the tile ([`QBlock`]).
//! - **CBUF** (bank-aligned buffers, whole banks): two f32 output tiles
//!   `M × nt` (ping-pong between column tiles), one INT32 accumulator tile `M × nt` unless `K = G` (then
//!   the output tile is the accumulator and `epi.f32` works in place), two
//!   block buffers (ping-pong between steps), then the resident panels
//!   (`ceil(K/kt)` slots of `round16(m_pad·kt)` bytes) or two streamed
//!   panel buffers, and right behind the last panel the `M` row records
//!   (16-byte aligned, read by the compute queue only).
//! - **cost**: per step the block's and panel's DMA against the pieces'
//!   `mm` plus one `epi.f32` per group ending in the tile.
//!
//! `qswiglu` ([`plan_qswiglu`]) differs only in the per-matrix parts: a
//! step's constants are the gate's [`QBlock`] followed by the up's (same
//! geometry), the compute per step and the block bytes double, and a
//! column tile ends with one `ew.silu_mul`. CBUF: the two f32 output tiles
//! hold the gate's dequantized sums (and, after `ew.silu_mul` in place,
//! the result), one more f32 tile holds the up's; the INT32 accumulator
//! tile is shared by the two matrices when every piece ends a group
//! (`kt >= G`), a second one is added for the up when K tiles lie inside
//! a group, and there is none when `K = G`.

use super::{
    candidates, check, round_up, search, set_offsets, split_columns, tiles, weight_tile_bytes,
    Activations, Choice, CoreSlice, Costs, Estimate, Kind, MatmulProblem, TileError, TILE_ALIGN,
};
use crate::npu::isa::{WeightType, CBUF_ADDR_LIMIT, DMA_MAX_COUNT, DMA_MAX_RUN};
use crate::npu::Target;

/// Bytes of one `epi.f32` channel or row record.
pub const RECORD_BYTES: u32 = 8;

/// A `qmatmul` on the NPU: `y[M×N] (f32) = dequant(xq[M×K] · q[K×N])` with
/// one scale per `group` rows of `K` and output column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QMatmulProblem {
    /// Rows (tokens).
    pub m: u32,
    /// Contraction length.
    pub k: u32,
    /// Output columns.
    pub n: u32,
    /// INT8 or INT4 weights.
    pub wtype: WeightType,
    /// Rows of `K` per scale (`G`); divides `K`.
    pub group: u32,
}

impl QMatmulProblem {
    fn matmul(&self) -> MatmulProblem {
        MatmulProblem {
            m: self.m,
            k: self.k,
            n: self.n,
            wtype: self.wtype,
        }
    }

    /// Rows of the activations in DDR and in each panel: `M` rounded up so
    /// that `m_pad · group` is a multiple of 16.
    pub fn m_pad(&self) -> u32 {
        let g = u64::from(self.group);
        let align = 16 / gcd(16, g);
        round_up(self.m.into(), align) as u32
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The constant block of one step (K tile `[k0, k0 + kt)`, `nt` columns):
/// byte offsets from the block's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QBlock {
    /// Rows per piece (`min(G, kt)`).
    pub piece_k: u32,
    /// Pieces in the tile (`kt / piece_k`), one `mm` each.
    pub pieces: u32,
    /// Bytes between pieces' weight tiles (`round16` of one tile).
    pub piece_stride: u64,
    /// Offset of the first channel record set.
    pub records: u64,
    /// Bytes between record sets (`round16(8·nt)`).
    pub record_stride: u64,
    /// Groups ending in the tile (one record set each, in order).
    pub ends: u32,
    /// Total bytes.
    pub bytes: u64,
}

/// The block of K tile `[k0, k0 + kt)` × `nt` columns (see [`QBlock`]).
pub fn block(wtype: WeightType, group: u32, k0: u32, kt: u32, nt: u32) -> QBlock {
    let group = group.max(1);
    let piece_k = kt.min(group).max(1);
    let pieces = kt / piece_k;
    let piece_stride = round_up(weight_tile_bytes(wtype, piece_k, nt), 16);
    let records = u64::from(pieces) * piece_stride;
    let record_stride = round_up(u64::from(RECORD_BYTES) * u64::from(nt), 16);
    let ends = (k0 + kt) / group - k0 / group;
    QBlock {
        piece_k,
        pieces,
        piece_stride,
        records,
        record_stride,
        ends,
        bytes: records + u64::from(ends) * record_stride,
    }
}

/// Which kernel a [`QTilePlan`] tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QKernel {
    /// `qmatmul`: one weight matrix.
    Matmul,
    /// `qswiglu`: gate and up matrices through the same panels, combined
    /// by `ew.silu_mul`.
    Swiglu,
}

impl QKernel {
    /// Weight matrices per step (1 or 2).
    pub fn mats(self) -> u32 {
        match self {
            QKernel::Matmul => 1,
            QKernel::Swiglu => 2,
        }
    }
}

/// CBUF byte addresses of the `qmatmul` / `qswiglu` kernel's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QCbufLayout {
    /// f32 output tiles, `M × nt` each (`qswiglu`: the gate's sums, then
    /// the result).
    pub out: [u32; 2],
    /// `qswiglu`: the up's f32 tile, `M × nt`.
    pub up: Option<u32>,
    /// `qswiglu` with K tiles inside a group: the up's INT32 accumulators
    /// (otherwise the up shares [`QCbufLayout::acc`]).
    pub up_acc: Option<u32>,
    /// Row records, `M × 8` bytes (right behind the last activation
    /// panel).
    pub rows: u32,
    /// INT32 accumulators, `M × nt` (`qswiglu`: the gate's, and the up's
    /// too unless [`QCbufLayout::up_acc`]); `None` when `K = G` (one
    /// group): the `mm`s accumulate in the column tile's f32 tile (and the
    /// up tile) and one `epi.f32` per matrix converts it in place.
    pub acc: Option<u32>,
    /// Constant blocks ([`QBlock`]).
    pub block: [u32; 2],
    /// Resident: both entries are the panels' base.
    pub a: [u32; 2],
    /// Banks used.
    pub banks: u32,
}

/// A complete tiling of a [`QMatmulProblem`] for one [`QKernel`] (for
/// `qswiglu` the problem is the shape of each of the two matmuls).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QTilePlan {
    pub problem: QMatmulProblem,
    pub kernel: QKernel,
    /// K tile: a multiple of the group, or a divisor of it.
    pub kt: u32,
    /// Column tile.
    pub nt: u32,
    /// [`QMatmulProblem::m_pad`].
    pub m_pad: u32,
    /// Whether the activation panels are loaded once or per column tile.
    pub activations: Activations,
    /// `w_offset` is the core's offset into the constants
    /// ([`crate::npu::kernels::qmatmul::pack_qmatmul`]).
    pub cores: Vec<CoreSlice>,
    pub layout: QCbufLayout,
    /// Estimated cycles of the busiest core.
    pub estimate: Estimate,
}

impl QTilePlan {
    /// The block of K tile `[k0, k0 + kt)` × `nt` columns.
    pub fn block(&self, k0: u32, kt: u32, nt: u32) -> QBlock {
        let p = &self.problem;
        block(p.wtype, p.group, k0, kt, nt)
    }

    /// CBUF offset of K-panel `kk` from the resident panels' base.
    pub fn panel_offset(&self, kk: u32) -> u32 {
        let slot = round_up(u64::from(self.m_pad) * u64::from(self.kt), 16);
        (u64::from(kk) * slot) as u32
    }

    /// Bytes a step loads: one block per weight matrix, back to back.
    pub fn step_bytes(&self, k0: u32, kt: u32, nt: u32) -> u64 {
        self.block(k0, kt, nt).bytes * u64::from(self.kernel.mats())
    }

    /// Total bytes of the constants (every core's steps).
    pub fn constant_bytes(&self) -> u64 {
        let p = &self.problem;
        self.cores
            .iter()
            .flat_map(|c| tiles(c.n, self.nt))
            .flat_map(|(_, nt)| tiles(p.k, self.kt).map(move |(k0, kt)| (k0, kt, nt)))
            .map(|(k0, kt, nt)| self.step_bytes(k0, kt, nt))
            .sum()
    }
}

/// K tile candidates: whole groups (balanced splits of the group count) or
/// multiple-of-16 divisors of the group.
fn k_candidates(k: u32, group: u32) -> Vec<u32> {
    let mut v = Vec::new();
    let ng = k / group;
    if group <= DMA_MAX_RUN {
        for parts in 1..=ng {
            let g = ng.div_ceil(parts);
            if g <= DMA_MAX_COUNT {
                v.push(g * group);
            }
        }
    }
    v.extend(
        (TILE_ALIGN..group.min(DMA_MAX_RUN + 1))
            .step_by(TILE_ALIGN as usize)
            .filter(|d| group.is_multiple_of(*d)),
    );
    v.sort_unstable();
    v.dedup();
    v
}

#[allow(clippy::too_many_arguments)]
fn q_layout(
    t: &Target,
    plan: &QMatmulProblem,
    kernel: QKernel,
    m_pad: u32,
    mode: Activations,
    kt: u32,
    nt: u32,
) -> Option<QCbufLayout> {
    let bank = u64::from(t.cbuf_bank_bytes);
    let banks = |bytes: u64| bytes.div_ceil(bank);
    let m = u64::from(plan.m);
    let tile = m * u64::from(nt) * 4;
    let mats = u64::from(kernel.mats());
    // One group: the `mm`s accumulate in the f32 tiles themselves and one
    // `epi.f32` per matrix converts them in place.
    let single = plan.k == plan.group;
    let acc = if single { 0 } else { banks(tile) };
    // The up needs its own accumulators only while a group spans K tiles.
    let up_acc = if mats == 2 && !single && kt < plan.group {
        acc
    } else {
        0
    };
    let out = banks(tile);
    let up = if mats == 2 { out } else { 0 };
    let blk = tiles(plan.k, kt)
        .map(|(k0, ktile)| block(plan.wtype, plan.group, k0, ktile, nt).bytes)
        .max()
        .unwrap_or(0);
    let blk = banks(blk * mats);
    let slot = round_up(u64::from(m_pad) * u64::from(kt), 16);
    let fixed = 2 * out + up + acc + up_acc + 2 * blk;
    // The row records follow the last panel (in its last bank when they
    // fit there).
    let (a1, rows) = match mode {
        Activations::Resident => (fixed, fixed * bank + slot * u64::from(plan.k.div_ceil(kt))),
        Activations::Streamed => {
            let a1 = fixed + banks(slot);
            (a1, a1 * bank + slot)
        }
    };
    let used = banks(rows + m * u64::from(RECORD_BYTES));
    if used > u64::from(t.cbuf_banks) || used * bank > u64::from(CBUF_ADDR_LIMIT) {
        return None;
    }
    let at = |b: u64| (b * bank) as u32;
    let b0 = 2 * out + up + acc + up_acc;
    Some(QCbufLayout {
        out: [at(0), at(out)],
        up: (up > 0).then(|| at(2 * out)),
        up_acc: (up_acc > 0).then(|| at(2 * out + up + acc)),
        rows: rows as u32,
        acc: (!single).then(|| at(2 * out + up)),
        block: [at(b0), at(b0 + blk)],
        a: [at(fixed), at(a1)],
        banks: used as u32,
    })
}

/// Chooses the core split, tile sizes, activation residency and CBUF
/// placement of `p` on `t` (module docs). Errors on a `group` that does
/// not divide `K` or is 0, and as [`super::plan`].
pub fn plan_qmatmul(p: &QMatmulProblem, t: &Target) -> Result<QTilePlan, TileError> {
    plan_q(p, t, QKernel::Matmul)
}

/// [`plan_qmatmul`] for the `qswiglu` kernel: `p` is the shape of each of
/// the two matmuls (gate and up: `[K, N]`, same bits and group); the
/// tiles, split and search are the same with two blocks per step, twice
/// the compute per step, one `ew.silu_mul` per column tile and the
/// `qswiglu` CBUF placement (module docs).
pub fn plan_qswiglu(p: &QMatmulProblem, t: &Target) -> Result<QTilePlan, TileError> {
    plan_q(p, t, QKernel::Swiglu)
}

fn plan_q(p: &QMatmulProblem, t: &Target, kernel: QKernel) -> Result<QTilePlan, TileError> {
    let mp = p.matmul();
    check(&mp, t)?;
    if p.group == 0 || !p.k.is_multiple_of(p.group) {
        return Err(TileError::Group {
            k: p.k,
            group: p.group,
        });
    }
    let m_pad = p.m_pad();
    let mut cores = split_columns(&mp, t);
    let widest = cores.iter().map(|c| c.n).max().unwrap_or(0);
    let costs = Costs {
        t,
        p: mp,
        active: cores.len() as u32,
        kind: Kind::Dequant {
            group: p.group,
            m_pad,
            mats: kernel.mats(),
        },
    };
    let kts = k_candidates(p.k, p.group);
    let nts = candidates(widest, DMA_MAX_RUN / 4);
    let Choice {
        mode: activations,
        kt,
        nt,
        layout,
        estimate,
    } = search(&mp, widest, &kts, &nts, &costs, |mode, kt, nt| {
        q_layout(t, p, kernel, m_pad, mode, kt, nt)
    })?;
    set_offsets(&mut cores, p.k, kt, nt, |k0, kt, nt| {
        block(p.wtype, p.group, k0, kt, nt).bytes * u64::from(kernel.mats())
    });
    Ok(QTilePlan {
        problem: *p,
        kernel,
        kt,
        nt,
        m_pad,
        activations,
        cores,
        layout,
        estimate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(m: u32, k: u32, n: u32, wtype: WeightType, group: u32) -> QMatmulProblem {
        QMatmulProblem {
            m,
            k,
            n,
            wtype,
            group,
        }
    }

    /// Estimated speed of the Qwen2-1.5B shapes (the simulator confirms
    /// these in the runtime's roofline example): GEMV >= 80 % of the DDR
    /// roofline, prefill >= 60 % MAC utilisation.
    #[test]
    fn qwen2_estimates_meet_targets() {
        let t = Target::rk3588();
        for (k, n) in [(1536, 1536), (1536, 8960), (8960, 1536)] {
            for (wtype, g, bits) in [(WeightType::I8, k, 8), (WeightType::I4, 128, 4)] {
                let gemv = plan_qmatmul(&problem(1, k, n, wtype, g), &t).unwrap();
                let bytes = f64::from(k) * f64::from(n) * f64::from(bits) / 8.0
                    + 4.0 * f64::from(k / g) * f64::from(n);
                let ideal = bytes * t.clock_hz as f64 / t.ddr_bytes_per_sec as f64;
                assert!(ideal / gemv.estimate.cycles as f64 >= 0.8, "{gemv:?}");
                let pre = plan_qmatmul(&problem(128, k, n, wtype, g), &t).unwrap();
                let macs = 128.0 * f64::from(k) * f64::from(n);
                let cap = pre.estimate.cycles as f64 * f64::from(t.macs_per_cycle * t.cores);
                assert!(macs / cap >= 0.6, "{pre:?}");
            }
        }
    }

    /// `qswiglu` on the MLP shape (gate and up `1536 × 8960` each): the
    /// same targets, the roofline counting both matrices.
    #[test]
    fn qwen2_swiglu_estimates_meet_targets() {
        let t = Target::rk3588();
        let (k, n) = (1536, 8960);
        for (wtype, g, bits) in [(WeightType::I8, k, 8), (WeightType::I4, 128, 4)] {
            let gemv = plan_qswiglu(&problem(1, k, n, wtype, g), &t).unwrap();
            let bytes = 2.0
                * (f64::from(k) * f64::from(n) * f64::from(bits) / 8.0
                    + 4.0 * f64::from(k / g) * f64::from(n));
            let ideal = bytes * t.clock_hz as f64 / t.ddr_bytes_per_sec as f64;
            assert!(ideal / gemv.estimate.cycles as f64 >= 0.8, "{gemv:?}");
            let pre = plan_qswiglu(&problem(128, k, n, wtype, g), &t).unwrap();
            let macs = 2.0 * 128.0 * f64::from(k) * f64::from(n);
            let cap = pre.estimate.cycles as f64 * f64::from(t.macs_per_cycle * t.cores);
            assert!(macs / cap >= 0.6, "{pre:?}");
        }
    }

    #[test]
    fn tiles_respect_groups_and_fit() {
        let t = Target::rk3588();
        for (m, k, n, g) in [
            (1, 8960, 1536, 8960),
            (3, 40, 37, 8),
            (130, 1024, 300, 1024),
            (5, 96, 7, 32),
            (200, 4096, 64, 128),
        ] {
            for (wtype, planner) in [
                (WeightType::I8, plan_qmatmul as fn(&_, &_) -> _),
                (WeightType::I4, plan_qmatmul),
                (WeightType::I8, plan_qswiglu),
                (WeightType::I4, plan_qswiglu),
            ] {
                let p: QTilePlan = planner(&problem(m, k, n, wtype, g), &t).unwrap();
                assert!(p.kt.is_multiple_of(g) || g.is_multiple_of(p.kt), "{p:?}");
                assert!(p.layout.banks <= t.cbuf_banks);
                assert_eq!(p.m_pad * g % 16, 0);
                let last = p.cores.last().unwrap();
                let per_core: u64 = tiles(last.n, p.nt)
                    .flat_map(|(_, nt)| tiles(k, p.kt).map(move |(k0, kt)| (k0, kt, nt)))
                    .map(|(k0, kt, nt)| p.step_bytes(k0, kt, nt))
                    .sum();
                assert_eq!(last.w_offset + per_core, p.constant_bytes());
                let l = &p.layout;
                let swiglu = p.kernel == QKernel::Swiglu;
                assert_eq!(l.up.is_some(), swiglu);
                assert_eq!(l.up_acc.is_some(), swiglu && k != g && p.kt < g);
                // Every group's records appear exactly once per column tile.
                let ends: u32 = tiles(k, p.kt)
                    .map(|(k0, kt)| p.block(k0, kt, 16).ends)
                    .sum();
                assert_eq!(ends, k / g);
            }
        }
    }
}
