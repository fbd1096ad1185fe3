//! The timing model (`docs/NPU_ISA.md`, "Timing model"): cycles of each
//! instruction from the [`Target`]'s parameters. Integer arithmetic only,
//! so a reader can reproduce every number by hand.

use slmcc_backends::npu::isa::Instr;
use slmcc_backends::npu::Target;

fn ceil_div(a: u128, b: u128) -> u64 {
    a.div_ceil(b.max(1)).min(u128::from(u64::MAX)) as u64
}

/// DMA cycles for `bytes` when `active_cores` cores share the DDR
/// bandwidth: `latency + ceil(bytes · active · clock_hz / ddr_bytes_per_sec)`.
pub fn dma_cycles(t: &Target, bytes: u64, active_cores: u32) -> u64 {
    let num = u128::from(bytes) * u128::from(active_cores.max(1)) * u128::from(t.clock_hz);
    t.dma_latency_cycles
        .saturating_add(ceil_div(num, u128::from(t.ddr_bytes_per_sec)))
}

/// Cycles of one instruction (`active_cores` as for [`dma_cycles`]).
pub fn cycles(t: &Target, i: &Instr, active_cores: u32) -> u64 {
    let lanes = u128::from(t.vector_lanes);
    let issue = t.compute_issue_cycles;
    let mn = |m: u32, n: u32| u128::from(m) * u128::from(n);
    match *i {
        Instr::DmaLoad { dims, .. } | Instr::DmaStore { dims, .. } => {
            dma_cycles(t, dims.bytes(), active_cores)
        }
        Instr::MatMul { .. } => {
            issue.saturating_add(ceil_div(u128::from(i.macs()), u128::from(t.macs_per_cycle)))
        }
        Instr::Epilogue { m, n, .. } | Instr::EpilogueF32 { m, n, .. } => {
            issue.saturating_add(ceil_div(mn(m, n), lanes))
        }
        Instr::Eltwise { len, .. } | Instr::SiluMul { len, .. } => {
            issue.saturating_add(ceil_div(len.into(), lanes))
        }
        Instr::MatMulF16 { .. } => issue.saturating_add(ceil_div(
            u128::from(i.macs()),
            u128::from(t.f16_macs_per_cycle),
        )),
        Instr::RmsNorm { m, n, residual, .. } => {
            let passes = if residual.is_some() { 3 } else { 2 };
            issue.saturating_add(ceil_div(passes * mn(m, n), lanes))
        }
        Instr::SoftmaxOnline { m, n, .. } => issue.saturating_add(ceil_div(2 * mn(m, n), lanes)),
        Instr::CvtF16 { len, lo, .. } => {
            let passes = if lo.is_some() { 2 } else { 1 };
            issue.saturating_add(ceil_div(u128::from(len) * passes, lanes))
        }
        Instr::Rescale { m, n, .. } | Instr::Reduce { m, n, .. } => {
            issue.saturating_add(ceil_div(mn(m, n), lanes))
        }
        Instr::Signal { .. } | Instr::Wait { .. } => t.sem_cycles,
    }
}
