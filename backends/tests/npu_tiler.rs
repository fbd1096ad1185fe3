//! The NPU matmul tiler and weight packing: plans fit the CBUF banks and
//! cover the output columns once, the packed layout is tile-major, and the
//! estimated speed of the Qwen2-1.5B projection shapes meets the targets
//! (prefill MAC utilisation >= 60 % at bucket 128, GEMV >= 80 % of the DDR
//! roofline); the simulator confirms these estimates in the runtime's
//! tests.

use proptest::prelude::*;
use slmcc_backends::npu::isa::WeightType;
use slmcc_backends::npu::kernels::{emit_matmul, pack_weights, MatmulAddrs};
use slmcc_backends::npu::tiler::{plan, tiles, weight_tile_bytes, MatmulProblem, TilePlan};
use slmcc_backends::npu::Target;

fn problem(m: u32, k: u32, n: u32, wtype: WeightType) -> MatmulProblem {
    MatmulProblem { m, k, n, wtype }
}

fn utilisation(p: &TilePlan, t: &Target) -> f64 {
    let macs = f64::from(p.problem.m) * f64::from(p.problem.k) * f64::from(p.problem.n);
    macs / (p.estimate.cycles as f64 * f64::from(t.macs_per_cycle) * f64::from(t.cores))
}

fn roofline(p: &TilePlan, t: &Target) -> f64 {
    let ideal = p.packed_weight_bytes() as f64 * t.clock_hz as f64 / t.ddr_bytes_per_sec as f64;
    ideal / p.estimate.cycles as f64
}

#[test]
fn qwen2_projection_estimates_meet_targets() {
    let t = Target::rk3588();
    for (k, n) in [(1536, 1536), (1536, 8960), (8960, 1536)] {
        for wtype in [WeightType::I8, WeightType::I4] {
            let prefill = plan(&problem(128, k, n, wtype), &t).unwrap();
            assert!(utilisation(&prefill, &t) >= 0.6, "{prefill:?}");
            let gemv = plan(&problem(1, k, n, wtype), &t).unwrap();
            assert!(roofline(&gemv, &t) >= 0.9, "{gemv:?}");
        }
    }
}

#[test]
fn packed_layout_is_tile_major() {
    let t = Target::rk3588();
    let p = plan(&problem(4, 3, 40, WeightType::I4), &t).unwrap();
    // 40 columns over 3 cores: 16 + 16 + 8, one tile each.
    let widths: Vec<u32> = p.cores.iter().map(|c| c.n).collect();
    assert_eq!(widths, [16, 16, 8]);
    let w: Vec<i8> = (0..120).map(|i| (i % 16 - 8) as i8).collect();
    let packed = pack_weights(&p, &w).unwrap();
    // Core 1's tile: rows 0..3 of columns 16..32, two values per byte.
    let c1 = &packed[p.cores[1].w_offset as usize..][..24];
    let wr = &w;
    let expect: Vec<u8> = (0..3)
        .flat_map(|r| (16..32).map(move |c| wr[r * 40 + c]))
        .collect::<Vec<i8>>()
        .chunks(2)
        .map(|c| (c[0] as u8 & 0xf) | ((c[1] as u8 & 0xf) << 4))
        .collect();
    assert_eq!(c1, &expect[..]);
    assert_eq!(packed.len(), 24 + 24 + 12);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn plans_fit_and_cover(
        m in 1u32..=256,
        k in 1u32..=5000,
        n in 1u32..=10000,
        int4 in any::<bool>(),
    ) {
        let t = Target::rk3588();
        let wtype = if int4 { WeightType::I4 } else { WeightType::I8 };
        let Ok(p) = plan(&problem(m, k, n, wtype), &t) else {
            return Ok(());
        };
        prop_assert!(p.layout.banks <= t.cbuf_banks);
        prop_assert!(p.cores.len() <= t.cores as usize);
        let mut next = 0;
        let mut off = 0;
        for c in &p.cores {
            prop_assert_eq!(c.n0, next);
            prop_assert_eq!(c.w_offset, off);
            next += c.n;
            off += tiles(c.n, p.nt)
                .flat_map(|(_, nt)| tiles(k, p.kt).map(move |(_, kt)| (kt, nt)))
                .map(|(kt, nt)| weight_tile_bytes(wtype, kt, nt))
                .sum::<u64>();
        }
        prop_assert_eq!(next, n);
        prop_assert_eq!(off, p.packed_weight_bytes());
        let addrs = MatmulAddrs { a: 0, w: 1 << 24, out: 1 << 28 };
        let prog = emit_matmul(&p, &t, &addrs).unwrap();
        prop_assert_eq!(prog.cores.len(), p.cores.len());
    }
}
