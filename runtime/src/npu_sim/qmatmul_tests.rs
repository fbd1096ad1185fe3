//! The `qmatmul` kernel (`slmcc_backends::npu::kernels::qmatmul`) in the
//! simulator against the IR reference (`slmcc_ir`'s `QMatMul::eval`), bit
//! for bit: random shapes, groups, INT8 and INT4 weights, activations with
//! zero and constant rows, the default and small-CBUF targets (streamed
//! activations, K tiles inside a group, edge tiles); every run completes
//! (no deadlock) and reads each constant byte once.

use super::{NpuSim, SimStats};
use proptest::prelude::*;
use slmcc_backends::npu::isa::{Program, WeightType};
use slmcc_backends::npu::kernels::{
    emit_qmatmul, pack_qmatmul, quantize_rows, KernelError, QMatmulLayout, RowParams,
};
use slmcc_backends::npu::tiler::{
    plan_qmatmul, tiles, Activations, QMatmulProblem, QTilePlan, TileError,
};
use slmcc_backends::npu::Target;
use slmcc_ir::ops::qmatmul::QMatMul;
use slmcc_ir::{DType, EvalCtx, OpDef, Tensor};

/// xorshift64* stream.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        let s = &mut self.0;
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(super) fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() >> 11) as i64 % (hi - lo + 1)
    }

    pub(super) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Activations: per row zeros, one repeated value, or random values of a
/// random magnitude with some exact zeros.
pub(super) fn activations(rng: &mut Rng, m: usize, k: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(m * k);
    for _ in 0..m {
        let mag = [1e-3f32, 0.5, 4.0, 300.0][rng.int(0, 3) as usize];
        match rng.int(0, 5) {
            0 => x.extend(std::iter::repeat_n(0.0, k)),
            1 => {
                let c = (rng.unit() * 2.0 - 1.0) * mag;
                x.extend(std::iter::repeat_n(c, k));
            }
            kind => {
                let shift = if kind == 2 { mag * 0.7 } else { 0.0 };
                for _ in 0..k {
                    let v = if rng.int(0, 9) == 0 {
                        0.0
                    } else {
                        (rng.unit() * 2.0 - 1.0) * mag + shift
                    };
                    x.push(v);
                }
            }
        }
    }
    x
}

/// Runs the kernel on random data; checks it against the IR reference bit
/// for bit and the DDR traffic. Returns the plan and the statistics.
fn check(
    m: u32,
    k: u32,
    n: u32,
    wtype: WeightType,
    group: u32,
    t: &Target,
    seed: u64,
) -> (QTilePlan, SimStats) {
    let p = QMatmulProblem {
        m,
        k,
        n,
        wtype,
        group,
    };
    let plan = plan_qmatmul(&p, t).unwrap();
    let (mu, ku) = (m as usize, k as usize);
    let mut rng = Rng(seed | 1);
    let x = activations(&mut rng, mu, ku);
    let (q, scale) = weights(&mut rng, &p);
    let layout = QMatmulLayout::new(&plan, 0).unwrap();
    let consts = pack_qmatmul(&plan, &q, &scale).unwrap();
    let prog = emit_qmatmul(&plan, t, &layout).unwrap();
    let (y, stats) = run(&plan, &layout, &consts, &prog, &x, t);
    let want = reference(&p, &x, &q, &scale);
    assert_bits(&plan, &y, &want);
    (plan, stats)
}

/// Random weights `[K, N]` in the type's range and scales `[K/G, N]`.
pub(super) fn weights(rng: &mut Rng, p: &QMatmulProblem) -> (Vec<i8>, Vec<f32>) {
    let (k, n, g) = (p.k as usize, p.n as usize, p.group as usize);
    let (lo, hi) = match p.wtype {
        WeightType::I8 => (-128, 127),
        WeightType::I4 => (-8, 7),
    };
    let q: Vec<i8> = (0..k * n).map(|_| rng.int(lo, hi) as i8).collect();
    let scale: Vec<f32> = (0..k / g * n).map(|_| (rng.unit() - 0.3) * 0.05).collect();
    (q, scale)
}

/// Quantizes `x` once, runs `prog` on the DDR image (`consts` and the
/// inputs) and returns the f32 output with the statistics, after checking
/// the traffic: constants once; activations once per core (resident) or
/// per column tile (streamed); row records once per core; the output
/// written once.
pub(super) fn run(
    plan: &QTilePlan,
    layout: &QMatmulLayout,
    consts: &[u8],
    prog: &Program,
    x: &[f32],
    t: &Target,
) -> (Vec<f32>, SimStats) {
    let (mu, ku, nu) = (
        plan.problem.m as usize,
        plan.problem.k as usize,
        plan.problem.n as usize,
    );
    assert_eq!(consts.len() as u64, layout.consts_bytes);
    let mut ddr = vec![0u8; layout.total as usize];
    ddr[layout.consts as usize..][..consts.len()].copy_from_slice(consts);
    let mut xq = vec![0i8; mu * ku];
    let mut rows = vec![RowParams::default(); mu];
    quantize_rows(x, ku, &mut xq, &mut rows);
    layout.write_inputs(&mut ddr, &xq, &rows);
    let mut sim = NpuSim::new(t.clone(), ddr);
    let stats = sim.run(prog).unwrap();
    let mut y = vec![0f32; mu * nu];
    layout.read_output(&sim.ddr, &mut y);
    let panels: u64 = plan
        .cores
        .iter()
        .map(|c| match plan.activations {
            Activations::Resident => 1,
            Activations::Streamed => tiles(c.n, plan.nt).count() as u64,
        })
        .sum();
    let cores = plan.cores.len() as u64;
    let act = panels * u64::from(plan.m_pad) * u64::from(plan.problem.k);
    assert_eq!(
        stats.ddr_bytes_read,
        layout.consts_bytes + act + cores * layout.rows_bytes
    );
    assert_eq!(stats.ddr_bytes_written, layout.out_bytes);
    (y, stats)
}

/// The IR op `qmatmul` (`QMatMul::eval`) on `x`, `q`, `scale`.
pub(super) fn reference(p: &QMatmulProblem, x: &[f32], q: &[i8], scale: &[f32]) -> Vec<f32> {
    let (mu, ku, nu, gu) = (p.m as usize, p.k as usize, p.n as usize, p.group as usize);
    let int4 = p.wtype == WeightType::I4;
    let op = QMatMul::new(if int4 { 4 } else { 8 }, p.group.into()).unwrap();
    let qv: Vec<i64> = q.iter().map(|&v| i64::from(v)).collect();
    let qt = Tensor::from_i64(vec![ku, nu], qv).cast(if int4 { DType::I4 } else { DType::I8 });
    let xt = Tensor::from_f32(vec![mu, ku], x.to_vec());
    let st = Tensor::from_f32(vec![ku / gu, nu], scale.to_vec());
    let want = op.eval(&[&xt, &qt, &st], &EvalCtx::default()).unwrap();
    want[0].as_f32().unwrap().to_vec()
}

/// `got` equals `want` bit for bit.
pub(super) fn assert_bits(plan: &QTilePlan, got: &[f32], want: &[f32]) {
    let p = &plan.problem;
    assert_eq!(got.len(), want.len());
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{:?} m={} k={} n={} {:?} G={} kt={} nt={} {:?}: element {e}: {g} vs {w}",
            plan.kernel,
            p.m,
            p.k,
            p.n,
            p.wtype,
            p.group,
            plan.kt,
            plan.nt,
            plan.activations,
        );
    }
}

pub(super) fn small(banks: u32, bank: u32) -> Target {
    Target::rk3588().with_cbuf(banks, bank)
}

#[test]
fn quantize_rows_matches_the_op() {
    // The op's doc example: s = 0.5, z = -77.
    let x = [0.25f32, -25.5, 102.0, 0.75, 0.0, 0.0, 0.0, 0.0];
    let mut xq = [0i8; 8];
    let mut rows = [RowParams::default(); 2];
    quantize_rows(&x, 4, &mut xq, &mut rows);
    assert_eq!(xq, [-77, -128, 127, -75, -128, -128, -128, -128]);
    assert_eq!(rows[0], RowParams { s: 0.5, z: -77 });
    assert_eq!(rows[1], RowParams { s: 1.0, z: -128 });
}

/// Edge tiles: remainder column and K tiles, odd `M` with `G = 8`
/// (padded panels), K tiles inside a group (`G = K` on a small CBUF),
/// streamed activations; every program runs to completion.
#[test]
fn edge_tiles_run_without_deadlock() {
    let t = Target::rk3588();
    check(3, 40, 37, WeightType::I8, 8, &t, 1);
    check(1, 24, 5, WeightType::I4, 8, &t, 2);
    check(7, 96, 301, WeightType::I4, 32, &t, 3);
    let (plan, _) = check(9, 1024, 50, WeightType::I8, 1024, &small(8, 2048), 4);
    assert!(plan.kt < 1024, "{plan:?}");
    let (plan, _) = check(128, 1024, 40, WeightType::I4, 128, &small(12, 8192), 5);
    assert_eq!(plan.activations, Activations::Streamed, "{plan:?}");
    let (plan, _) = check(33, 160, 70, WeightType::I8, 16, &small(10, 2048), 6);
    assert!(plan.cores.iter().any(|c| c.n % plan.nt != 0) || plan.problem.k % plan.kt != 0);
}

#[test]
fn bad_inputs_are_errors() {
    let t = Target::rk3588();
    let p = |group| QMatmulProblem {
        m: 2,
        k: 48,
        n: 8,
        wtype: WeightType::I4,
        group,
    };
    assert!(matches!(
        plan_qmatmul(&p(32), &t),
        Err(TileError::Group { .. })
    ));
    assert!(matches!(
        plan_qmatmul(&p(0), &t),
        Err(TileError::Group { .. })
    ));
    let plan = plan_qmatmul(&p(16), &t).unwrap();
    let mut q = vec![0i8; 48 * 8];
    assert!(matches!(
        pack_qmatmul(&plan, &q, &[0.0; 3 * 8]).map(|_| ()),
        Ok(())
    ));
    assert!(matches!(
        pack_qmatmul(&plan, &q, &[0.0; 8]),
        Err(KernelError::Count { .. })
    ));
    q[5] = 9;
    assert!(matches!(
        pack_qmatmul(&plan, &q, &[0.0; 3 * 8]),
        Err(KernelError::Int4Range { index: 5, value: 9 })
    ));
    assert!(QMatmulLayout::new(&plan, u32::MAX - 64).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn qmatmul_kernel_is_bit_exact(
        m in 1u32..=130,
        groups in 1u32..=8,
        gsel in 0usize..6,
        n in 1u32..=300,
        int4 in any::<bool>(),
        target in 0usize..3,
        seed in any::<u64>(),
    ) {
        let t = [Target::rk3588(), small(12, 4096), small(6, 8192)][target].clone();
        let wtype = if int4 { WeightType::I4 } else { WeightType::I8 };
        let g = [8u32, 16, 32, 64, 128, 0][gsel];
        let (k, group) = if g == 0 {
            let k = 16 * groups + [0, 3, 8][(seed % 3) as usize];
            (k, k)
        } else {
            (g * groups, g)
        };
        // Keep the debug-build simulation fast.
        let n = n.min((3_000_000 / (m * k)).max(1));
        let p = QMatmulProblem { m, k, n, wtype, group };
        if plan_qmatmul(&p, &t).is_ok() {
            check(m, k, n, wtype, group, &t, seed);
        }
    }
}
