//! Simulated speed of the NPU weight-stationary matmul kernel on Qwen2-1.5B
//! projection shapes: MAC utilisation for prefill (bucket M = 128) and the
//! fraction of the DDR roofline for GEMV (M = 1), INT8 and INT4 weights;
//! also the largest bucket (M = 200), where the activations are streamed.
//!
//! The second table is the `qmatmul` kernel (f32 in, f32 out, bit-exact
//! to the IR op): GEMV and prefill at INT8 per-channel (`G = K`) and INT4
//! with groups of 128; its roofline counts the op's weight data (`q` and
//! the f32 scales). The third is the `qswiglu` kernel (the SwiGLU MLP's
//! gate and up projections, `silu(x·gate) · (x·up)`) on the Qwen2-1.5B MLP
//! shape, its roofline counting both matrices.
//!
//! `cargo run --release -p slmcc-runtime --example npu_matmul_roofline`
//!
//! Roofline fraction = (weight bytes / DDR bandwidth) / simulated time;
//! utilisation = MACs / (cycles · MAC/cycle · cores). Numbers are the timing
//! model's (`docs/NPU_ISA.md`), not hardware measurements.

use slmcc_backends::npu::isa::{Program, WeightType};
use slmcc_backends::npu::kernels::{
    emit_matmul, emit_qmatmul, emit_qswiglu, pack_qmatmul, pack_qswiglu, pack_weights,
    quantize_rows, KernelError, MatmulAddrs, QMatmulLayout, RowParams,
};
use slmcc_backends::npu::tiler::{
    plan, plan_qmatmul, plan_qswiglu, MatmulProblem, QMatmulProblem, QTilePlan,
};
use slmcc_backends::npu::Target;
use slmcc_runtime::npu_sim::NpuSim;

/// Deterministic weights in the type's range.
fn weights(len: u32, wtype: WeightType) -> Vec<i8> {
    let (lo, span) = match wtype {
        WeightType::I8 => (-128i32, 256u32),
        WeightType::I4 => (-8, 16),
    };
    (0..len)
        .map(|i| (lo + (i.wrapping_mul(2_654_435_761) >> 7) as i32 % span as i32) as i8)
        .collect()
}

fn qmatmul_table(t: &Target) -> Result<(), Box<dyn std::error::Error>> {
    println!();
    println!("qmatmul (f32 -> f32, bit-exact)");
    println!("shape                wt  G     plan                            cycles  est.cycles  MAC util  roofline");
    for (m, k, n) in [
        (1, 1536, 8960),
        (1, 8960, 1536),
        (128, 1536, 1536),
        (128, 1536, 8960),
    ] {
        for (wtype, g) in [(WeightType::I8, k), (WeightType::I4, 128)] {
            let p = QMatmulProblem {
                m,
                k,
                n,
                wtype,
                group: g,
            };
            let plan = plan_qmatmul(&p, t)?;
            let (q, scale) = qweights(&p, 0);
            let consts = pack_qmatmul(&plan, &q, &scale)?;
            q_row(&plan, &consts, t, emit_qmatmul)?;
        }
    }
    Ok(())
}

/// `qswiglu` on the MLP shape: gate and up `[1536, 8960]` each; the
/// roofline counts both matrices' `q` and scales.
fn qswiglu_table(t: &Target) -> Result<(), Box<dyn std::error::Error>> {
    println!();
    println!("qswiglu (f32 -> silu(x.gate) * (x.up), bit-exact; shape per matrix)");
    println!("shape                wt  G     plan                            cycles  est.cycles  MAC util  roofline");
    for (m, k, n) in [(1, 1536, 8960), (128, 1536, 8960)] {
        for (wtype, g) in [(WeightType::I8, k), (WeightType::I4, 128)] {
            let p = QMatmulProblem {
                m,
                k,
                n,
                wtype,
                group: g,
            };
            let plan = plan_qswiglu(&p, t)?;
            let (gq, gs) = qweights(&p, 0);
            let (uq, us) = qweights(&p, 1);
            let consts = pack_qswiglu(&plan, &gq, &gs, &uq, &us)?;
            q_row(&plan, &consts, t, emit_qswiglu)?;
        }
    }
    Ok(())
}

/// Deterministic `q` and scales of a `qmatmul`-shaped weight (`salt`
/// varies them).
fn qweights(p: &QMatmulProblem, salt: u32) -> (Vec<i8>, Vec<f32>) {
    let q = weights(p.k * p.n + salt, p.wtype)[salt as usize..].to_vec();
    let scale = (0..p.k / p.group * p.n)
        .map(|i| 1e-3 + ((i + salt) % 7) as f32 * 1e-4)
        .collect();
    (q, scale)
}

/// Runs one `qmatmul` / `qswiglu` plan on the simulator and prints its row.
fn q_row(
    plan: &QTilePlan,
    consts: &[u8],
    t: &Target,
    emit: fn(&QTilePlan, &Target, &QMatmulLayout) -> Result<Program, KernelError>,
) -> Result<(), Box<dyn std::error::Error>> {
    let QMatmulProblem {
        m,
        k,
        n,
        wtype,
        group: g,
    } = plan.problem;
    let layout = QMatmulLayout::new(plan, 0)?;
    let mut ddr = vec![0u8; layout.total as usize];
    ddr[layout.consts as usize..][..consts.len()].copy_from_slice(consts);
    let x: Vec<f32> = (0..m * k).map(|i| ((i % 13) as f32 - 6.0) * 0.1).collect();
    let mut xq = vec![0i8; (m * k) as usize];
    let mut rows = vec![RowParams::default(); m as usize];
    quantize_rows(&x, k as usize, &mut xq, &mut rows);
    layout.write_inputs(&mut ddr, &xq, &rows);
    let prog = emit(plan, t, &layout)?;
    let mut sim = NpuSim::new(t.clone(), ddr);
    let stats = sim.run(&prog)?;
    let bits = if wtype == WeightType::I4 { 4 } else { 8 };
    let ideal = f64::from(plan.kernel.mats())
        * (f64::from(k) * f64::from(n) * f64::from(bits) / 8.0
            + 4.0 * f64::from(k / g) * f64::from(n));
    let roofline = ideal / t.ddr_bytes_per_sec as f64 / stats.seconds(t);
    let desc = format!(
        "kt={} nt={} {:?} banks={}",
        plan.kt, plan.nt, plan.activations, plan.layout.banks
    );
    println!(
        "m={m:<3} k={k:<4} n={n:<4}  {:<3} {g:<5} {desc:<31} {:>8} {:>11} {:>8.1}% {:>8.1}%",
        format!("{wtype:?}"),
        stats.cycles,
        plan.estimate.cycles,
        100.0 * stats.utilisation,
        100.0 * roofline,
    );
    Ok(())
}

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
            let w = weights(k * n, wtype);
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
    qmatmul_table(&t)?;
    qswiglu_table(&t)
}
