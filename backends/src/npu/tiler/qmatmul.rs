//! Tiling of the `qmatmul` kernel ([`crate::npu::kernels::qmatmul`]):
//! the weight-stationary matmul schedule with group-wise dequantization.
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

/// CBUF byte addresses of the `qmatmul` kernel's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QCbufLayout {
    /// f32 output tiles, `M × nt` each.
    pub out: [u32; 2],
    /// Row records, `M × 8` bytes (right behind the last activation
    /// panel).
    pub rows: u32,
    /// INT32 accumulators, `M × nt`; `None` when `K = G` (one group): the
    /// `mm`s accumulate in the column tile's output tile and one `epi.f32`
    /// converts it in place.
    pub acc: Option<u32>,
    /// Constant blocks ([`QBlock`]).
    pub block: [u32; 2],
    /// Resident: both entries are the panels' base.
    pub a: [u32; 2],
    /// Banks used.
    pub banks: u32,
}

/// A complete tiling of a [`QMatmulProblem`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QTilePlan {
    pub problem: QMatmulProblem,
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

    /// Total bytes of the constants (every core's blocks).
    pub fn constant_bytes(&self) -> u64 {
        let p = &self.problem;
        self.cores
            .iter()
            .flat_map(|c| tiles(c.n, self.nt))
            .flat_map(|(_, nt)| tiles(p.k, self.kt).map(move |(k0, kt)| (k0, kt, nt)))
            .map(|(k0, kt, nt)| self.block(k0, kt, nt).bytes)
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

fn q_layout(
    t: &Target,
    plan: &QMatmulProblem,
    m_pad: u32,
    mode: Activations,
    kt: u32,
    nt: u32,
) -> Option<QCbufLayout> {
    let bank = u64::from(t.cbuf_bank_bytes);
    let banks = |bytes: u64| bytes.div_ceil(bank);
    let m = u64::from(plan.m);
    let tile = m * u64::from(nt) * 4;
    // One group: the `mm`s accumulate in the output tile itself and one
    // `epi.f32` converts it in place.
    let single = plan.k == plan.group;
    let acc = if single { 0 } else { banks(tile) };
    let out = banks(tile);
    let blk = tiles(plan.k, kt)
        .map(|(k0, ktile)| block(plan.wtype, plan.group, k0, ktile, nt).bytes)
        .max()
        .unwrap_or(0);
    let blk = banks(blk);
    let slot = round_up(u64::from(m_pad) * u64::from(kt), 16);
    let fixed = 2 * out + acc + 2 * blk;
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
    Some(QCbufLayout {
        out: [at(0), at(out)],
        rows: rows as u32,
        acc: (!single).then(|| at(2 * out)),
        block: [at(2 * out + acc), at(2 * out + acc + blk)],
        a: [at(fixed), at(a1)],
        banks: used as u32,
    })
}

/// Chooses the core split, tile sizes, activation residency and CBUF
/// placement of `p` on `t` (module docs). Errors on a `group` that does
/// not divide `K` or is 0, and as [`super::plan`].
pub fn plan_qmatmul(p: &QMatmulProblem, t: &Target) -> Result<QTilePlan, TileError> {
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
        active: cores.len() as u64,
        kind: Kind::Dequant {
            group: p.group,
            m_pad,
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
        q_layout(t, p, m_pad, mode, kt, nt)
    })?;
    set_offsets(&mut cores, p.k, kt, nt, |k0, kt, nt| {
        block(p.wtype, p.group, k0, kt, nt).bytes
    });
    Ok(QTilePlan {
        problem: *p,
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
            for wtype in [WeightType::I8, WeightType::I4] {
                let p = plan_qmatmul(&problem(m, k, n, wtype, g), &t).unwrap();
                assert!(p.kt.is_multiple_of(g) || g.is_multiple_of(p.kt), "{p:?}");
                assert!(p.layout.banks <= t.cbuf_banks);
                assert_eq!(p.m_pad * g % 16, 0);
                let last = p.cores.last().unwrap();
                let per_core: u64 = tiles(last.n, p.nt)
                    .flat_map(|(_, nt)| tiles(k, p.kt).map(move |(k0, kt)| (k0, kt, nt)))
                    .map(|(k0, kt, nt)| p.block(k0, kt, nt).bytes)
                    .sum();
                assert_eq!(last.w_offset + per_core, p.constant_bytes());
                // Every group's records appear exactly once per column tile.
                let ends: u32 = tiles(k, p.kt)
                    .map(|(k0, kt)| p.block(k0, kt, 16).ends)
                    .sum();
                assert_eq!(ends, k / g);
            }
        }
    }
}
