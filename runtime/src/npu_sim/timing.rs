//! The timing model (`docs/NPU_ISA.md`, "Timing model"): cycles of each
//! instruction from the [`Target`]'s parameters. Integer arithmetic only,
//! so a reader can reproduce every number by hand.

use slmcc_backends::npu::isa::Instr;
use slmcc_backends::npu::Target;

/// Cycles of one instruction (`active_cores` cores share the DDR
/// bandwidth: [`Target::dma_cycles`]).
pub fn cycles(t: &Target, i: &Instr, active_cores: u32) -> u64 {
    let mn = |m: u32, n: u32| u64::from(m) * u64::from(n);
    match *i {
        Instr::DmaLoad { dims, .. } | Instr::DmaStore { dims, .. } => {
            t.dma_cycles(dims.bytes(), active_cores)
        }
        Instr::MatMul { .. } => t.mac_cycles(i.macs(), t.macs_per_cycle),
        Instr::MatMulF16 { .. } => t.mac_cycles(i.macs(), t.f16_macs_per_cycle),
        Instr::Epilogue { m, n, .. }
        | Instr::EpilogueF32 { m, n, .. }
        | Instr::Rescale { m, n, .. }
        | Instr::Reduce { m, n, .. } => t.vector_cycles(mn(m, n)),
        Instr::Eltwise { len, .. } | Instr::SiluMul { len, .. } => t.vector_cycles(len.into()),
        Instr::RmsNorm { m, n, residual, .. } => {
            let passes = if residual.is_some() { 3 } else { 2 };
            t.vector_cycles(passes * mn(m, n))
        }
        Instr::SoftmaxOnline { m, n, .. } => t.vector_cycles(2 * mn(m, n)),
        Instr::CvtF16 { len, lo, .. } => {
            let passes = if lo.is_some() { 2 } else { 1 };
            t.vector_cycles(passes * u64::from(len))
        }
        Instr::Signal { .. } | Instr::Wait { .. } => t.sem_cycles,
    }
}
