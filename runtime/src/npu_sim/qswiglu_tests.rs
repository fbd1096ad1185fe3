//! The `qswiglu` kernel (`slmcc_backends::npu::kernels::qswiglu`) in the
//! simulator against a reference computed from the IR: two `QMatMul`
//! evaluations (gate and up) and `(g · sigmoid(g)) · u` element-wise with
//! `slmcc_ir::ops::fused_util::sigmoid`, bit for bit. Random shapes,
//! groups, INT8 and INT4 weights, the default and small-CBUF targets
//! (streamed activations, K tiles inside a group, edge tiles); every run
//! completes (no deadlock), reads each constant byte once and writes only
//! the final output.

use super::qmatmul_tests::{activations, assert_bits, reference, run, small, weights, Rng};
use super::SimStats;
use proptest::prelude::*;
use slmcc_backends::npu::isa::{Instr, WeightType};
use slmcc_backends::npu::kernels::{
    emit_qmatmul, emit_qswiglu, pack_qmatmul, pack_qswiglu, KernelError, QSwigluLayout,
};
use slmcc_backends::npu::tiler::{plan_qmatmul, plan_qswiglu, QKernel, QMatmulProblem, QTilePlan};
use slmcc_backends::npu::Target;
use slmcc_ir::ops::fused_util::sigmoid;

/// Runs the kernel on random data and checks it against the reference bit
/// for bit and its DDR traffic. Returns the plan and the statistics.
fn check(p: QMatmulProblem, t: &Target, seed: u64) -> (QTilePlan, SimStats) {
    let plan = plan_qswiglu(&p, t).unwrap();
    assert_eq!(plan.kernel, QKernel::Swiglu);
    let mut rng = Rng(seed | 1);
    let x = activations(&mut rng, p.m as usize, p.k as usize);
    let (gq, gs) = weights(&mut rng, &p);
    let (uq, us) = weights(&mut rng, &p);
    let layout = QSwigluLayout::new(&plan, 0).unwrap();
    let consts = pack_qswiglu(&plan, &gq, &gs, &uq, &us).unwrap();
    let prog = emit_qswiglu(&plan, t, &layout).unwrap();
    // One `ew.silu_mul` per column tile, nothing stored but the output.
    let tiles: usize = plan
        .cores
        .iter()
        .map(|c| c.n.div_ceil(plan.nt) as usize)
        .sum();
    let silu = prog
        .cores
        .iter()
        .flat_map(|c| &c.compute)
        .filter(|i| matches!(i, Instr::SiluMul { .. }))
        .count();
    assert_eq!(silu, tiles);
    let (y, stats) = run(&plan, &layout, &consts, &prog, &x, t);
    let g = reference(&p, &x, &gq, &gs);
    let u = reference(&p, &x, &uq, &us);
    let want: Vec<f32> = g
        .iter()
        .zip(&u)
        .map(|(&g, &u)| (g * sigmoid(g)) * u)
        .collect();
    assert_bits(&plan, &y, &want);
    (plan, stats)
}

fn problem(m: u32, k: u32, n: u32, wtype: WeightType, group: u32) -> QMatmulProblem {
    QMatmulProblem {
        m,
        k,
        n,
        wtype,
        group,
    }
}

/// Edge tiles: remainder column and K tiles, odd `M` with `G = 8` (padded
/// panels), K tiles inside a group with one group (`G = K`) and with
/// several (separate up accumulators), streamed activations.
#[test]
fn edge_tiles_run_without_deadlock() {
    let t = Target::rk3588();
    check(problem(3, 40, 37, WeightType::I8, 8), &t, 1);
    check(problem(1, 24, 5, WeightType::I4, 8), &t, 2);
    check(problem(7, 96, 301, WeightType::I4, 32), &t, 3);
    let (plan, _) = check(
        problem(9, 1024, 50, WeightType::I8, 1024),
        &small(8, 2048),
        4,
    );
    assert!(plan.kt < 1024, "{plan:?}");
    let (plan, _) = check(
        problem(5, 2048, 40, WeightType::I4, 1024),
        &small(10, 2048),
        5,
    );
    assert!(plan.kt < 1024 && plan.layout.up_acc.is_some(), "{plan:?}");
    let (plan, _) = check(
        problem(128, 1024, 40, WeightType::I4, 128),
        &small(12, 8192),
        6,
    );
    assert_eq!(
        plan.activations,
        slmcc_backends::npu::tiler::Activations::Streamed,
        "{plan:?}"
    );
    let (plan, _) = check(
        problem(33, 160, 70, WeightType::I8, 16),
        &small(14, 2048),
        7,
    );
    assert!(plan.cores.iter().any(|c| c.n % plan.nt != 0) || plan.problem.k % plan.kt != 0);
}

/// A `qmatmul` plan is not a `qswiglu` plan and vice versa; operand counts
/// and INT4 ranges are checked for both matrices.
#[test]
fn bad_inputs_are_errors() {
    let t = Target::rk3588();
    let p = problem(2, 48, 8, WeightType::I4, 16);
    let sw = plan_qswiglu(&p, &t).unwrap();
    let qm = plan_qmatmul(&p, &t).unwrap();
    let layout = QSwigluLayout::new(&sw, 0).unwrap();
    let kind = |r: Result<_, KernelError>| matches!(r, Err(KernelError::Kernel { .. }));
    assert!(kind(emit_qswiglu(&qm, &t, &layout).map(|_| ())));
    assert!(kind(emit_qmatmul(&sw, &t, &layout).map(|_| ())));
    let (mut q, s) = (vec![0i8; 48 * 8], vec![0f32; 3 * 8]);
    assert!(kind(pack_qmatmul(&sw, &q, &s).map(|_| ())));
    assert!(kind(pack_qswiglu(&qm, &q, &s, &q, &s).map(|_| ())));
    assert!(pack_qswiglu(&sw, &q, &s, &q, &s).is_ok());
    assert!(matches!(
        pack_qswiglu(&sw, &q, &s, &q, &s[..8]),
        Err(KernelError::Count { .. })
    ));
    assert!(matches!(
        pack_qswiglu(&sw, &q, &s, &q[1..], &s),
        Err(KernelError::WeightCount { .. })
    ));
    let good = q.clone();
    q[5] = 9;
    assert!(matches!(
        pack_qswiglu(&sw, &good, &s, &q, &s),
        Err(KernelError::Int4Range { index: 5, value: 9 })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn qswiglu_kernel_is_bit_exact(
        m in 1u32..=130,
        groups in 1u32..=8,
        gsel in 0usize..5,
        n in 1u32..=300,
        int4 in any::<bool>(),
        target in 0usize..4,
        seed in any::<u64>(),
    ) {
        // Small CBUFs: streamed activations, K tiles inside a group.
        let t = [Target::rk3588(), small(16, 4096), small(9, 8192), small(12, 2048)][target].clone();
        let wtype = if int4 { WeightType::I4 } else { WeightType::I8 };
        let g = [16u32, 32, 64, 128, 0][gsel];
        let (k, group) = if g == 0 {
            let k = 16 * groups + [0, 3, 8][(seed % 3) as usize];
            (k, k)
        } else {
            (g * groups, g)
        };
        // Keep the debug-build simulation fast (two matmuls).
        let n = n.min((1_500_000 / (m * k)).max(1));
        let p = problem(m, k, n, wtype, group);
        if plan_qswiglu(&p, &t).is_ok() {
            check(p, &t, seed);
        }
    }
}
