//! The weight-stationary matmul kernel (`slmcc_backends::npu::kernels`)
//! run in the NPU simulator: random shapes, INT8 and INT4 weights, the
//! default target and small-CBUF targets (forcing streamed activations and
//! many tiles), compared bit-exactly with a plain INT32 reference; each
//! weight byte is read from DDR exactly once; bad shapes are errors.

use proptest::prelude::*;
use slmcc_backends::npu::isa::WeightType;
use slmcc_backends::npu::kernels::{emit_matmul, pack_weights, KernelError, MatmulAddrs};
use slmcc_backends::npu::tiler::{plan, tiles, Activations, MatmulProblem, TileError, TilePlan};
use slmcc_backends::npu::Target;
use slmcc_runtime::npu_sim::{NpuSim, SimStats};

/// xorshift64* values in `lo..=hi`.
fn values(seed: u64, len: usize, lo: i8, hi: i8) -> Vec<i8> {
    let mut s = seed | 1;
    let span = (i16::from(hi) - i16::from(lo) + 1) as u64;
    (0..len)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            let r = s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33;
            (i16::from(lo) + (r % span) as i16) as i8
        })
        .collect()
}

fn reference(a: &[i8], w: &[i8], m: usize, k: usize, n: usize) -> Vec<i32> {
    let mut out = vec![0i32; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = i32::from(a[i * k + p]);
            for j in 0..n {
                out[i * n + j] += x * i32::from(w[p * n + j]);
            }
        }
    }
    out
}

/// Runs one problem end to end; returns the plan and the run's statistics.
fn check(m: u32, k: u32, n: u32, wtype: WeightType, t: &Target, seed: u64) -> (TilePlan, SimStats) {
    let p = MatmulProblem { m, k, n, wtype };
    let plan = plan(&p, t).unwrap();
    let (mu, ku, nu) = (m as usize, k as usize, n as usize);
    let a = values(seed, mu * ku, -128, 127);
    let (lo, hi) = match wtype {
        WeightType::I8 => (-128, 127),
        WeightType::I4 => (-8, 7),
    };
    let w = values(seed ^ 0x9e37_79b9, ku * nu, lo, hi);
    let packed = pack_weights(&plan, &w).unwrap();
    assert_eq!(packed.len() as u64, plan.packed_weight_bytes());
    let w_at = (mu * ku).next_multiple_of(64);
    let out_at = (w_at + packed.len()).next_multiple_of(64);
    let mut ddr = vec![0u8; out_at + 4 * mu * nu];
    for (d, v) in ddr.iter_mut().zip(&a) {
        *d = *v as u8;
    }
    ddr[w_at..w_at + packed.len()].copy_from_slice(&packed);
    let addrs = MatmulAddrs {
        a: 0,
        w: w_at as u32,
        out: out_at as u32,
    };
    let prog = emit_matmul(&plan, t, &addrs).unwrap();
    let mut sim = NpuSim::new(t.clone(), ddr);
    let stats = sim.run(&prog).unwrap();
    let expect = reference(&a, &w, mu, ku, nu);
    for (e, want) in expect.iter().enumerate() {
        let b = &sim.ddr[out_at + 4 * e..][..4];
        let got = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        assert_eq!(got, *want, "m={m} k={k} n={n} {wtype:?} element {e}");
    }
    // Weights once; activations once per core (resident) or once per
    // column tile (streamed).
    let act: u64 = plan
        .cores
        .iter()
        .map(|c| match plan.activations {
            Activations::Resident => 1,
            Activations::Streamed => tiles(c.n, plan.nt).count() as u64,
        })
        .sum::<u64>()
        * u64::from(m)
        * u64::from(k);
    assert_eq!(stats.ddr_bytes_read, act + packed.len() as u64);
    assert_eq!(stats.ddr_bytes_written, 4 * u64::from(m) * u64::from(n));
    assert_eq!(stats.macs, u64::from(m) * u64::from(k) * u64::from(n));
    (plan, stats)
}

fn residency(r: (TilePlan, SimStats)) -> Activations {
    r.0.activations
}

/// A target with `banks` CBUF banks of `bank` bytes.
fn small(banks: u32, bank: u32) -> Target {
    Target {
        cbuf_banks: banks,
        cbuf_bank_bytes: bank,
        cbuf_bytes: banks * bank,
        ..Target::rk3588()
    }
}

#[test]
fn default_target_shapes() {
    let t = Target::rk3588();
    assert_eq!(
        residency(check(1, 300, 200, WeightType::I8, &t, 1)),
        Activations::Resident
    );
    assert_eq!(
        residency(check(37, 129, 77, WeightType::I4, &t, 2)),
        Activations::Resident
    );
    assert_eq!(
        residency(check(16, 64, 5, WeightType::I4, &t, 3)),
        Activations::Resident
    );
}

#[test]
fn streamed_activations_and_many_tiles() {
    let t = small(12, 2048);
    assert_eq!(
        residency(check(64, 400, 96, WeightType::I8, &t, 4)),
        Activations::Streamed
    );
    check(200, 100, 50, WeightType::I4, &small(8, 16384), 5);
}

/// GEMV at the real Qwen2-1.5B size (K = N = 1536) reaches the DDR
/// roofline target in simulation, and the tiler's estimate tracks the
/// simulated cycles (also for a small prefill-like shape).
#[test]
fn simulated_speed() {
    let t = Target::rk3588();
    for wtype in [WeightType::I8, WeightType::I4] {
        let (plan, stats) = check(1, 1536, 1536, wtype, &t, 6);
        let ideal =
            plan.packed_weight_bytes() as f64 * t.clock_hz as f64 / t.ddr_bytes_per_sec as f64;
        assert!(ideal / stats.cycles as f64 >= 0.8, "{stats:?}");
    }
    for (m, k, n) in [(1, 1536, 1536), (128, 256, 384)] {
        let (plan, stats) = check(m, k, n, WeightType::I8, &t, 7);
        let (est, sim) = (plan.estimate.cycles as f64, stats.cycles as f64);
        assert!(
            (est - sim).abs() <= 0.05 * sim,
            "estimate {est}, simulated {sim}"
        );
    }
}

#[test]
fn bad_shapes_are_errors() {
    let t = Target::rk3588();
    let p = |m, k, n| MatmulProblem {
        m,
        k,
        n,
        wtype: WeightType::I8,
    };
    assert!(matches!(
        plan(&p(0, 8, 8), &t),
        Err(TileError::Empty { .. })
    ));
    assert!(matches!(
        plan(&p(2000, 8, 8), &t),
        Err(TileError::TooLarge { .. })
    ));
    assert!(matches!(
        plan(&p(8, 1 << 20, 8), &t),
        Err(TileError::TooLarge { .. })
    ));
    assert!(matches!(
        plan(&p(1024, 4096, 64), &small(6, 1024)),
        Err(TileError::NoFit { .. })
    ));
    let few_sems = Target {
        semaphores: 4,
        ..Target::rk3588()
    };
    assert!(matches!(
        plan(&p(8, 8, 8), &few_sems),
        Err(TileError::Target(_))
    ));
    let ok = plan(&p(4, 8, 8), &t).unwrap();
    assert!(matches!(
        pack_weights(&ok, &[0; 3]),
        Err(KernelError::WeightCount { .. })
    ));
    let i4 = plan(
        &MatmulProblem {
            wtype: WeightType::I4,
            ..p(4, 8, 8)
        },
        &t,
    )
    .unwrap();
    let mut w = vec![0i8; 64];
    w[9] = 8;
    assert!(matches!(
        pack_weights(&i4, &w),
        Err(KernelError::Int4Range { index: 9, value: 8 })
    ));
    let addrs = MatmulAddrs {
        a: 0,
        w: u32::MAX - 4,
        out: 0,
    };
    assert!(matches!(
        emit_matmul(&ok, &t, &addrs),
        Err(KernelError::Address { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_shapes_bit_exact(
        m in 1u32..=200,
        k in 1u32..=320,
        n in 1u32..=320,
        int4 in any::<bool>(),
        target in 0usize..3,
        seed in any::<u64>(),
    ) {
        let t = [Target::rk3588(), small(12, 4096), small(6, 8192)][target].clone();
        let wtype = if int4 { WeightType::I4 } else { WeightType::I8 };
        // Keep the debug-build simulation fast.
        let n = n.min((3_000_000 / (m * k)).max(1));
        if plan(&MatmulProblem { m, k, n, wtype }, &t).is_ok() {
            check(m, k, n, wtype, &t, seed);
        }
    }
}
