//! Simulated speed of the NPU weight-stationary matmul kernel on Qwen2-1.5B
//! projection shapes: MAC utilisation for prefill (bucket M = 128) and the
//! fraction of the DDR roofline for GEMV (M = 1), INT8 and INT4 weights;
//! also the largest bucket (M = 200), where the activations are streamed.
//!
//! `cargo run --release -p slmcc-runtime --example npu_matmul_roofline`
//!
//! Roofline fraction = (weight bytes / DDR bandwidth) / simulated time;
//! utilisation = MACs / (cycles · MAC/cycle · cores). Numbers are the timing
//! model's (`docs/NPU_ISA.md`), not hardware measurements.

use slmcc_backends::npu::isa::WeightType;
use slmcc_backends::npu::kernels::{emit_matmul, pack_weights, MatmulAddrs};
use slmcc_backends::npu::tiler::{plan, MatmulProblem};
use slmcc_backends::npu::Target;
use slmcc_runtime::npu_sim::NpuSim;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let t = Target::rk3588();
    println!("shape                wt  plan                         cycles  est.cycles  MAC util  roofline");
    for (m, k, n) in [
        (128, 1536, 1536),
        (128, 1536, 8960),
        (1, 1536, 1536),
        (1, 1536, 8960),
        (1, 8960, 1536),
        // A bucket whose activations no longer fit next to the tiles.
        (200, 1536, 1536),
    ] {
        for wtype in [WeightType::I8, WeightType::I4] {
            let p = MatmulProblem { m, k, n, wtype };
            let plan = plan(&p, &t)?;
            let (lo, span) = match wtype {
                WeightType::I8 => (-128i32, 256u32),
                WeightType::I4 => (-8, 16),
            };
            let w: Vec<i8> = (0..k * n)
                .map(|i| (lo + (i.wrapping_mul(2_654_435_761) >> 7) as i32 % span as i32) as i8)
                .collect();
            let packed = pack_weights(&plan, &w)?;
            let w_at = (m * k).next_multiple_of(64) as usize;
            let out_at = (w_at + packed.len()).next_multiple_of(64);
            let mut ddr = vec![1u8; out_at + 4 * (m * n) as usize];
            ddr[w_at..w_at + packed.len()].copy_from_slice(&packed);
            let addrs = MatmulAddrs {
                a: 0,
                w: w_at as u32,
                out: out_at as u32,
            };
            let prog = emit_matmul(&plan, &t, &addrs)?;
            let mut sim = NpuSim::new(t.clone(), ddr);
            let stats = sim.run(&prog)?;
            let roofline = packed.len() as f64 / t.ddr_bytes_per_sec as f64 / stats.seconds(&t);
            let desc = format!(
                "kt={} nt={} {:?} banks={}",
                plan.kt, plan.nt, plan.activations, plan.layout.banks
            );
            println!(
                "m={m:<3} k={k:<4} n={n:<4}  {:<3} {desc:<28} {:>8} {:>11} {:>8.1}% {:>8.1}%",
                format!("{wtype:?}"),
                stats.cycles,
                plan.estimate.cycles,
                100.0 * stats.utilisation,
                100.0 * roofline,
            );
        }
    }
    Ok(())
}
