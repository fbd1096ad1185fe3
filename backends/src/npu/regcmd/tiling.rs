//! A matmul too large for one task, tiled into single tasks and split
//! over the cores.
//!
//! Contract: [`TilePlan::new`] divides `C[M,N] = A[M,K]·B[K,N]` into tiles
//! of at most `mt` rows × `nt` kernels × `kt` channels. Every tile is one
//! [`MatmulTask`] that fits the CBUF. `kt` divides the caller's group (the
//! quantization group, or all of K), so a K block never straddles two
//! groups. Each K block writes its own partial output, which the caller
//! adds up per group: the scale of a group applies to that group's sum. The N tiles go
//! round-robin over the cores. On each core the tasks run N tile by N tile,
//! then K block by K block, then M tile by M tile, so the tasks that share
//! weights come one after another (weight-stationary order). Every task
//! still loads its weights. Setting the CBUF's `WEIGHT_REUSE` for the
//! follow-on tasks is left for when a board can confirm it.
//!
//! Tile sizes: for each K block `kt` (a divisor of the group, a multiple of
//! 32) and each number D of CBUF banks given to the features
//! (1..=11), `mt` is the most rows D banks hold (at most M, and at most
//! [`MAX_TILE_ROWS`] for the 10-bit `FEATURE_GRAINS`), and `nt` is either
//! the most kernels the other 12 − D banks hold, in whole weight blocks,
//! or the fewest blocks per tile that still make the N tiles a multiple of
//! the cores (so that round-robin leaves no core with more). The plan
//! keeps the candidate of least estimated time ([`TilePlan::estimate`]:
//! the slowest core's setup, DDR and MAC time), ties going to the fewest
//! DDR bytes moved ([`TilePlan::cost`]: every N tile reads all of A, every
//! M tile reads all of B, each task counts [`TASK_OVERHEAD_BYTES`] for
//! its setup, partial outputs are written once per K block).

use super::matmul::{MatmulError, MatmulPrecision, MatmulTask, K_ALIGN, N_ALIGN};
use crate::npu::Target;

/// The most rows of one task: `FEATURE_GRAINS` (M + 1) has 10 bits.
pub const MAX_TILE_ROWS: u32 = 1022;
/// What one task's setup counts for in the plan's cost, as DDR bytes: its
/// 108-word command list, plus a start-up latency of about as long.
pub const TASK_OVERHEAD_BYTES: u64 = 4096;

/// How a matmul is tiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TilePlan {
    pub precision: MatmulPrecision,
    pub m: u32,
    pub k: u32,
    pub n: u32,
    /// Rows per task (the last M tile may be shorter).
    pub mt: u32,
    /// Kernels per task (the last N tile may be narrower, in steps of 16).
    pub nt: u32,
    /// Channels per task: K is a whole number of K blocks.
    pub kt: u32,
    pub cores: u32,
}

/// One tile: a task's place in the matmul.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tile {
    pub core: u32,
    pub m0: u32,
    pub rows: u32,
    pub n0: u32,
    pub kernels: u32,
    /// The K block: channels `kb·kt .. (kb + 1)·kt`.
    pub kb: u32,
}

impl TilePlan {
    /// Plans `M×K` by `K×N` over `cores` cores, in K blocks that divide
    /// `group` (the quantization group, or K): the K block is one of the
    /// divisors of `group` that are multiples of 32, the one whose plan
    /// costs least.
    pub fn new(
        precision: MatmulPrecision,
        (m, k, n): (u32, u32, u32),
        group: u32,
        cores: u32,
    ) -> Result<TilePlan, MatmulError> {
        for (what, v) in [
            ("M", m),
            ("K", k),
            ("N", n),
            ("the group", group),
            ("cores", cores),
        ] {
            if v == 0 {
                return Err(MatmulError::Empty { what });
            }
        }
        if !group.is_multiple_of(K_ALIGN) || !k.is_multiple_of(group) {
            return Err(MatmulError::Group {
                group,
                k,
                align: K_ALIGN,
            });
        }
        if !n.is_multiple_of(N_ALIGN) {
            return Err(MatmulError::NAlign { n, align: N_ALIGN });
        }
        let best = (K_ALIGN..=group)
            .step_by(K_ALIGN as usize)
            .filter(|kt| group.is_multiple_of(*kt))
            .flat_map(|kt| Self::candidates(precision, (m, k, n), kt, cores))
            .min_by(Self::faster);
        // Only when 16 kernels of 32 channels do not fit, which 12 banks
        // always hold.
        best.ok_or(MatmulError::WeightsTooLarge {
            bytes: u64::from(K_ALIGN * N_ALIGN * precision.input_bytes()),
            banks: 0,
            bank_bytes: Target::rk3588().cbuf_bank_bytes,
        })
    }

    /// The plan of least estimated time with K blocks of exactly `kt` channels and
    /// N tiles of whole weight blocks (what the `rk3588` weight layout
    /// stores contiguously), or `None` when not even one block of kernels
    /// of `kt` channels fits beside a bank of features. `kt` must be a
    /// multiple of 32 that divides K, N a multiple of the weight block.
    pub fn with_k_block(
        precision: MatmulPrecision,
        (m, k, n): (u32, u32, u32),
        kt: u32,
        cores: u32,
    ) -> Option<TilePlan> {
        let block = precision.kernel_block() as u32;
        if [m, k, n, kt, cores].contains(&0)
            || !kt.is_multiple_of(K_ALIGN)
            || !k.is_multiple_of(kt)
            || !n.is_multiple_of(block)
        {
            return None;
        }
        Self::candidates(precision, (m, k, n), kt, cores)
            .filter(|p| p.nt.is_multiple_of(block))
            .min_by(Self::faster)
    }

    /// The order of the plan search: estimated time on the RK3588, then
    /// [`TilePlan::cost`].
    fn faster(a: &TilePlan, b: &TilePlan) -> std::cmp::Ordering {
        let target = Target::rk3588();
        let (ta, tb) = (a.estimate(&target).seconds, b.estimate(&target).seconds);
        ta.total_cmp(&tb).then(a.cost().cmp(&b.cost()))
    }

    /// The plan search's tie-break after the estimated time: the DDR
    /// bytes moved, and [`TASK_OVERHEAD_BYTES`] per task.
    pub fn cost(&self) -> u64 {
        self.ddr_bytes() + self.task_count() * TASK_OVERHEAD_BYTES
    }

    /// The plans with K blocks of `kt`: per number of feature banks, the
    /// widest N tile, and the narrowest whose tile count is still a
    /// multiple of the cores when that differs.
    fn candidates(
        precision: MatmulPrecision,
        (m, k, n): (u32, u32, u32),
        kt: u32,
        cores: u32,
    ) -> impl Iterator<Item = TilePlan> {
        let target = Target::rk3588();
        let bank = u64::from(target.cbuf_bank_bytes);
        let row_bytes = u64::from(kt) * u64::from(precision.input_bytes());
        let block = precision.kernel_block() as u64;
        (1..target.cbuf_banks)
            .filter_map(move |data_banks| {
                let weight_banks = u64::from(target.cbuf_banks - data_banks);
                let mt = (u64::from(data_banks) * bank / row_bytes)
                    .min(u64::from(m))
                    .min(u64::from(MAX_TILE_ROWS));
                let fit = weight_banks * bank / row_bytes;
                // Whole weight blocks, or steps of 16 when not even one block fits.
                let step = if fit >= block {
                    block
                } else {
                    u64::from(N_ALIGN)
                };
                let widest = (fit / step * step).min(u64::from(n));
                if mt == 0 || widest == 0 {
                    return None;
                }
                // As many tiles as the widest gives, rounded up to the cores.
                let tiles = u64::from(n)
                    .div_ceil(widest)
                    .next_multiple_of(u64::from(cores));
                let even = u64::from(n).div_ceil(tiles).next_multiple_of(step);
                let plan = |nt: u64| TilePlan {
                    precision,
                    m,
                    k,
                    n,
                    mt: mt as u32,
                    nt: nt as u32,
                    kt,
                    cores,
                };
                let even = (even < widest).then(|| plan(even));
                Some(std::iter::once(plan(widest)).chain(even))
            })
            .flatten()
    }

    fn tiles_m(&self) -> u32 {
        self.m.div_ceil(self.mt)
    }

    fn tiles_n(&self) -> u32 {
        self.n.div_ceil(self.nt)
    }

    /// K blocks.
    pub fn k_blocks(&self) -> u32 {
        self.k / self.kt
    }

    pub fn task_count(&self) -> u64 {
        u64::from(self.tiles_m()) * u64::from(self.tiles_n()) * u64::from(self.k_blocks())
    }

    /// DDR bytes the tasks move: A once per N tile, B once per M tile, C
    /// once per K block.
    pub fn ddr_bytes(&self) -> u64 {
        let (m, k, n) = (u64::from(self.m), u64::from(self.k), u64::from(self.n));
        let bpe = u64::from(self.precision.input_bytes());
        let out = u64::from(self.precision.output_bytes());
        m * k * bpe * u64::from(self.tiles_n())
            + k * n * bpe * u64::from(self.tiles_m())
            + m * n * out * u64::from(self.k_blocks())
    }

    /// The tiles of each core, in the order the core runs them.
    pub fn tiles(&self) -> Vec<Vec<Tile>> {
        let mut per_core = vec![Vec::new(); self.cores as usize];
        for tn in 0..self.tiles_n() {
            let core = tn % self.cores;
            let n0 = tn * self.nt;
            let kernels = self.nt.min(self.n - n0);
            for kb in 0..self.k_blocks() {
                for tm in 0..self.tiles_m() {
                    let m0 = tm * self.mt;
                    per_core[core as usize].push(Tile {
                        core,
                        m0,
                        rows: self.mt.min(self.m - m0),
                        n0,
                        kernels,
                        kb,
                    });
                }
            }
        }
        per_core
    }

    /// The task of `tile`, with its three buffer addresses.
    pub fn task(&self, tile: &Tile, input: u32, weights: u32, output: u32) -> MatmulTask {
        MatmulTask {
            precision: self.precision,
            m: tile.rows,
            k: self.kt,
            n: tile.kernels,
            input,
            weights,
            output,
        }
    }
}

/// What one task's start costs in the estimate, in seconds: the driver
/// starts each task from the previous one's interrupt, and the front end
/// fetches its 108 words. An assumption until a board measures it.
pub const TASK_SETUP_SECONDS: f64 = 10e-6;

/// The estimated time of a plan: a model, not a measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct TileEstimate {
    pub tasks: u64,
    /// The slowest core's time.
    pub seconds: f64,
    /// The slowest core.
    pub slowest: usize,
    /// Per core: (setup, DDR transfers, MACs) seconds.
    pub per_core: Vec<(f64, f64, f64)>,
}

impl TilePlan {
    /// Estimates the plan on `target`. Per task, one after another on its
    /// core (the model does not overlap them): [`TASK_SETUP_SECONDS`]; the
    /// feature and weight bytes into the CBUF and the output bytes back, at
    /// the DDR bandwidth divided among the cores that have tasks; and the
    /// MACs at the core's rate (`macs_per_cycle` for int8,
    /// `f16_macs_per_cycle` for fp16) and clock. The cores run at once.
    pub fn estimate(&self, target: &Target) -> TileEstimate {
        let per_core_tiles = self.tiles();
        let busy = per_core_tiles
            .iter()
            .filter(|t| !t.is_empty())
            .count()
            .max(1) as f64;
        let share = target.ddr_bytes_per_sec as f64 / busy;
        let rate = match self.precision {
            MatmulPrecision::Int8 => target.macs_per_cycle,
            MatmulPrecision::Fp16 | MatmulPrecision::Fp16ToFp16 => target.f16_macs_per_cycle,
        } as f64
            * target.clock_hz as f64;
        let bpe = f64::from(self.precision.input_bytes());
        let out = f64::from(self.precision.output_bytes());
        let kt = f64::from(self.kt);
        let per_core: Vec<(f64, f64, f64)> = per_core_tiles
            .iter()
            .map(|tiles| {
                tiles.iter().fold((0.0, 0.0, 0.0), |(s, d, m), t| {
                    let (rows, kernels) = (f64::from(t.rows), f64::from(t.kernels));
                    let bytes = (rows + kernels) * kt * bpe + rows * kernels * out;
                    (
                        s + TASK_SETUP_SECONDS,
                        d + bytes / share,
                        m + rows * kernels * kt / rate,
                    )
                })
            })
            .collect();
        let (slowest, seconds) = per_core.iter().map(|(s, d, m)| s + d + m).enumerate().fold(
            (0, 0.0),
            |best, (i, t)| if t > best.1 { (i, t) } else { best },
        );
        TileEstimate {
            tasks: self.task_count(),
            seconds,
            slowest,
            per_core,
        }
    }
}
