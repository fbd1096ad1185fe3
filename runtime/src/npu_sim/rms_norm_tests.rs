//! The `rms_norm` kernel (`slmcc_backends::npu::kernels::rms_norm`) in the
//! simulator against the IR ops (`RmsNorm::eval`, `AddRmsNorm::eval`), bit
//! for bit: random `M`, `N` (small and model-sized), with and without the
//! residual add, `eps`/`offset` variants, the default and small-CBUF
//! targets, planned and forced plans (core counts, tile heights). Every run
//! completes (no deadlock), reads the params record once per core and
//! every activation once, writes each output once, and its statistics
//! equal [`NpuSim::time`]'s and the planner's estimate.

use super::qmatmul_tests::{activations, small, Rng};
use super::{NpuSim, SimStats};
use proptest::prelude::*;
use slmcc_backends::npu::isa::{Instr, Program};
use slmcc_backends::npu::kernels::{
    emit_rms_norm, pack_rms_norm_params, plan_rms_norm, KernelError, RmsNormLayout, RmsNormPlan,
};
use slmcc_backends::npu::Target;
use slmcc_ir::ops::add_rms_norm::AddRmsNorm;
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::{EvalCtx, OpDef, Tensor};

/// One problem's inputs.
struct Case {
    m: usize,
    n: usize,
    eps: f32,
    offset: f32,
    x: Vec<f32>,
    r: Option<Vec<f32>>,
    w: Vec<f32>,
}

impl Case {
    fn new(m: u32, n: u32, residual: bool, eps: f32, offset: f32, seed: u64) -> Case {
        let (m, n) = (m as usize, n as usize);
        let mut rng = Rng(seed | 1);
        let x = activations(&mut rng, m, n);
        let r = residual.then(|| activations(&mut rng, m, n));
        let w = (0..n).map(|_| (rng.unit() - 0.5) * 3.0).collect();
        Case {
            m,
            n,
            eps,
            offset,
            x,
            r,
            w,
        }
    }

    /// The IR op's results: `(y, s)` (`s` with the residual).
    fn reference(&self) -> (Vec<f32>, Option<Vec<f32>>) {
        let ctx = EvalCtx::default();
        let t = |v: &[f32]| Tensor::from_f32(vec![self.m, self.n], v.to_vec());
        let w = Tensor::from_f32(vec![self.n], self.w.clone());
        let x = t(&self.x);
        let f = |t: &Tensor| t.as_f32().unwrap().to_vec();
        match &self.r {
            None => {
                let op = RmsNorm {
                    eps: self.eps,
                    offset: self.offset,
                };
                (f(&op.eval(&[&x, &w], &ctx).unwrap()[0]), None)
            }
            Some(r) => {
                let op = AddRmsNorm {
                    eps: self.eps,
                    offset: self.offset,
                };
                let out = op.eval(&[&x, &t(r), &w], &ctx).unwrap();
                (f(&out[1]), Some(f(&out[0])))
            }
        }
    }
}

fn write_f32(ddr: &mut [u8], at: u32, v: &[f32]) {
    for (d, x) in ddr[at as usize..][..4 * v.len()].chunks_exact_mut(4).zip(v) {
        d.copy_from_slice(&x.to_le_bytes());
    }
}

fn read_f32(ddr: &[u8], at: u32, len: usize) -> Vec<f32> {
    ddr[at as usize..][..4 * len]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// `got` equals `want` bit for bit (NaN: both NaN).
fn assert_bits(what: &str, plan: &RmsNormPlan, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what} {plan:?}: element {e}: {g} vs {w}"
        );
    }
}

/// Bytes each core's DMA loads from the params record.
fn params_reads(prog: &Program, layout: &RmsNormLayout, bytes: u64) -> Vec<u64> {
    let end = u64::from(layout.params) + bytes;
    prog.cores
        .iter()
        .map(|c| {
            c.dma
                .iter()
                .filter_map(|i| match *i {
                    Instr::DmaLoad { ddr, dims, .. } if u64::from(ddr) < end => Some(dims.bytes()),
                    _ => None,
                })
                .sum()
        })
        .collect()
}

/// Runs `plan` on `case` and checks it (module docs); returns the stats.
fn run(case: &Case, plan: &RmsNormPlan, t: &Target) -> SimStats {
    assert!(plan.cores >= 1 && plan.cores <= t.cores && plan.cores <= plan.m);
    assert!(plan.cbuf_bytes() <= u64::from(t.cbuf_bytes));
    let layout = RmsNormLayout::new(plan).unwrap();
    for a in [
        Some(layout.params),
        Some(layout.x),
        layout.r,
        layout.s,
        Some(layout.y),
    ]
    .into_iter()
    .flatten()
    {
        assert_eq!(a % 64, 0, "{layout:?}");
    }
    let prog = emit_rms_norm(plan, t, &layout).unwrap();
    assert_eq!(prog.cores.len() as u32, plan.cores);
    // One `norm.rms` per row tile.
    let tiles: u32 = (0..plan.cores)
        .map(|c| {
            let (r0, r1) = plan.core_rows(c);
            (r1 - r0).div_ceil(plan.rows_per_tile)
        })
        .sum();
    let norms = prog
        .cores
        .iter()
        .flat_map(|c| &c.compute)
        .filter(|i| matches!(i, Instr::RmsNorm { .. }))
        .count();
    assert_eq!(norms as u32, tiles);
    let params = pack_rms_norm_params(case.eps, case.offset, &case.w);
    assert_eq!(params.len() as u64, plan.params_bytes());
    // The weights are read from DDR once per core.
    assert!(params_reads(&prog, &layout, plan.params_bytes())
        .iter()
        .all(|&b| b == plan.params_bytes()));

    let mut ddr = vec![0u8; layout.total as usize];
    ddr[layout.params as usize..][..params.len()].copy_from_slice(&params);
    write_f32(&mut ddr, layout.x, &case.x);
    if let (Some(at), Some(r)) = (layout.r, &case.r) {
        write_f32(&mut ddr, at, r);
    }
    let mut sim = NpuSim::new(t.clone(), ddr);
    let stats = sim.run(&prog).unwrap();
    let len = case.m * case.n;
    let (want_y, want_s) = case.reference();
    assert_bits("y", plan, &read_f32(&sim.ddr, layout.y, len), &want_y);
    if let (Some(at), Some(s)) = (layout.s, &want_s) {
        assert_bits("s", plan, &read_f32(&sim.ddr, at, len), s);
    }
    // Traffic: params once per core, x (and r) read once, y (and s)
    // written once.
    let ops = if plan.residual { 2 } else { 1 };
    let tensor = 4 * len as u64;
    assert_eq!(
        stats.ddr_bytes_read,
        u64::from(plan.cores) * plan.params_bytes() + ops * tensor,
        "{plan:?}"
    );
    assert_eq!(stats.ddr_bytes_written, ops * tensor, "{plan:?}");
    // The timing model alone counts the same; the planner predicts it.
    assert_eq!(NpuSim::time(t, &prog).unwrap(), stats);
    assert_eq!(plan.estimated_cycles(t), stats.cycles, "{plan:?}");
    stats
}

/// Plans and runs; `None` when the problem does not fit the CBUF (checked
/// to be true).
fn check(
    m: u32,
    n: u32,
    residual: bool,
    eps: f32,
    offset: f32,
    t: &Target,
    seed: u64,
) -> Option<(RmsNormPlan, SimStats)> {
    let plan = match plan_rms_norm(m, n, residual, t) {
        Ok(p) => p,
        Err(KernelError::Cbuf { need, have, .. }) => {
            let (row, ops) = (
                (4 * u64::from(n)).next_multiple_of(16),
                if residual { 2 } else { 1 },
            );
            let one_row = (16 + 4 * u64::from(n)).next_multiple_of(16) + 2 * ops * row;
            assert!(need == one_row && need > have, "{need} {have}");
            return None;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!((plan.m, plan.n, plan.residual), (m, n, residual));
    let case = Case::new(m, n, residual, eps, offset, seed);
    let stats = run(&case, &plan, t);
    Some((plan, stats))
}

/// Decode-sized rows stay on one core; the cycles are close to the DDR
/// roofline (`bytes / (bytes per cycle)`), with the per-transfer latency.
#[test]
fn one_row_uses_one_core() {
    let t = Target::rk3588();
    for residual in [false, true] {
        let (plan, stats) = check(1, 1536, residual, 1e-6, 0.0, &t, 5).unwrap();
        assert_eq!(plan.cores, 1, "{plan:?}");
        assert_eq!(stats.cores.len(), 1);
        let ops = if residual { 2 } else { 1 };
        let bytes = plan.params_bytes() + 2 * ops * 4 * 1536;
        let roofline = bytes * t.clock_hz / t.ddr_bytes_per_sec;
        assert!(stats.cycles >= roofline, "{stats:?}");
        assert!(
            stats.cycles <= roofline + 10 * t.dma_latency_cycles + 200,
            "{stats:?}"
        );
    }
}

/// The cycles of the shapes reported in `docs/NPU_ISA.md` (run with
/// `--nocapture` to print them).
#[test]
fn model_shapes() {
    let t = Target::rk3588();
    for (m, residual) in [(1, false), (1, true), (64, false), (64, true)] {
        let (plan, stats) = check(m, 1536, residual, 1e-6, 0.0, &t, 9).unwrap();
        let ops = if residual { 2 } else { 1 };
        let bytes = u64::from(plan.cores) * plan.params_bytes() + 2 * ops * 4 * 1536 * u64::from(m);
        let roofline = bytes as f64 * t.clock_hz as f64 / t.ddr_bytes_per_sec as f64;
        eprintln!(
            "rms_norm M={m} N=1536 residual={residual}: {} cycles, {} cores, {} rows/tile, DDR roofline {:.1} %",
            stats.cycles,
            plan.cores,
            plan.rows_per_tile,
            100.0 * roofline / stats.cycles as f64
        );
    }
}

/// Edge cases: `N = 1`, rows above 8192 bytes, a tile per row on a tiny
/// CBUF, the largest `N`, forced multi-core plans with a short last tile.
#[test]
fn edge_cases() {
    let t = Target::rk3588();
    check(1, 1, false, 1e-6, 0.0, &t, 1).unwrap();
    check(3, 1, true, 0.0, 1.0, &t, 2).unwrap();
    check(5, 4096, true, 1e-5, 1.0, &t, 3).unwrap();
    check(2, 16384, false, 1e-6, 0.0, &t, 4).unwrap();
    let (plan, _) = check(7, 300, true, 1e-6, 0.0, &small(4, 2048), 6).unwrap();
    assert_eq!(plan.rows_per_tile, 1, "{plan:?}");
    for (m, cores, rows) in [(10, 3, 2), (2, 2, 1), (300, 3, 7), (9, 3, 3)] {
        for residual in [false, true] {
            let plan = RmsNormPlan {
                m,
                n: 37,
                residual,
                rows_per_tile: rows,
                cores,
            };
            let case = Case::new(m, 37, residual, 1e-6, -0.5, u64::from(m));
            run(&case, &plan, &t);
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let t = Target::rk3588();
    let shape = |r: Result<RmsNormPlan, KernelError>| matches!(r, Err(KernelError::Shape { .. }));
    assert!(shape(plan_rms_norm(0, 8, false, &t)));
    assert!(shape(plan_rms_norm(4, 0, false, &t)));
    assert!(shape(plan_rms_norm(4, 16385, false, &t)));
    assert!(matches!(
        plan_rms_norm(4, 4096, true, &small(2, 16384)),
        Err(KernelError::Cbuf { .. })
    ));
    let plan = plan_rms_norm(4, 64, true, &t).unwrap();
    let layout = RmsNormLayout::new(&plan).unwrap();
    let other = RmsNormPlan {
        residual: false,
        ..plan
    };
    assert!(emit_rms_norm(&other, &t, &layout).is_err());
    let too_many = RmsNormPlan { cores: 5, ..plan };
    assert!(emit_rms_norm(&too_many, &t, &layout).is_err());
    let too_tall = RmsNormPlan {
        rows_per_tile: 4,
        ..plan_rms_norm(4, 4096, true, &small(12, 8192)).unwrap()
    };
    assert!(matches!(
        emit_rms_norm(
            &too_tall,
            &small(12, 8192),
            &RmsNormLayout::new(&too_tall).unwrap()
        ),
        Err(KernelError::Cbuf { .. })
    ));
    let huge = RmsNormPlan {
        m: 65536,
        n: 16384,
        residual: true,
        rows_per_tile: 1,
        cores: 1,
    };
    assert!(RmsNormLayout::new(&huge).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn rms_norm_kernel_is_bit_exact(
        m in 1u32..300,
        n in 1u32..700,
        big in 0usize..6,
        residual in any::<bool>(),
        params in 0usize..4,
        target in 0usize..4,
        force in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let t = [Target::rk3588(), small(12, 4096), small(8, 2048), small(6, 8192)][target].clone();
        let (eps, offset) = [(1e-6f32, 0.0f32), (1e-5, 1.0), (1e-3, -0.5), (0.0, 0.25)][params];
        // Some model-sized rows; keep the debug-build simulation fast.
        let n = [n, n, n, n, 1536, 4096][big];
        let m = m.min((400_000 / n).max(1));
        if let Some((plan, _)) = check(m, n, residual, eps, offset, &t, seed) {
            if force {
                // Any core count and tile height that fits.
                let cores = 1 + (seed % u64::from(t.cores.min(m))) as u32;
                let rows = 1 + ((seed >> 8) % u64::from(plan.rows_per_tile)) as u32;
                let forced = RmsNormPlan { cores, rows_per_tile: rows, ..plan };
                let case = Case::new(m, n, residual, eps, offset, seed >> 3);
                run(&case, &forced, &t);
            }
        }
    }
}
