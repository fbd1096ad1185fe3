//! The quantized SwiGLU MLP on the NPU, bit-exactly:
//! `out[M×N] (f32) = (g · sigmoid(g)) · u` with `g = qmatmul(x, gate.q,
//! gate.scale)` and `u = qmatmul(x, up.q, up.scale)` (both as the IR op
//! `qmatmul`, same activations `x`, same per-token quantization), in f32,
//! in exactly that order, `sigmoid` being `slmcc_ir::ops::fused_util::
//! sigmoid`. Gate and up are `[K, N]` with the same bits and group.
//!
//! Split of the work: [`super::qmatmul::quantize_rows`] on the CPU (once:
//! both matmuls read the same `xq` and row records), everything else on
//! the NPU. [`emit_qswiglu`] runs the `qmatmul` kernel's weight-stationary
//! schedule ([`super::qmatmul`], tiling [`crate::npu::tiler::plan_qswiglu`])
//! with two weight matrices: per step the DMA loads one activation panel
//! (once per K tile when resident) and one constant block holding the
//! gate's [`crate::npu::tiler::QBlock`] followed by the up's, and the
//! compute queue streams the panel through both — per piece `mm` and, at
//! a group end, `epi.f32` for the gate into the column tile's output tile,
//! then the same for the up into the up tile. After the column tile's last
//! K tile, `ew.silu_mul out = silu(out) · up` (in place) gives the result,
//! which is stored; `g` and `u` never leave CBUF.
//!
//! DDR image: the one of `qmatmul` ([`QSwigluLayout`] is
//! [`QMatmulLayout`]): constants ([`pack_qswiglu`]), activations `[m_pad,
//! K]` INT8, row records, output `[M, N]` f32. The fused `[K, 2N]`
//! gate_up form is split into its gate and up columns by the caller before
//! packing.
//!
//! Bit-exactness: `g` and `u` are exactly the `qmatmul` kernel's (each
//! matrix's `mm` / `epi.f32` chain is the one `emit_qmatmul` emits, so it
//! equals the op bit for bit), and `ew.silu_mul` evaluates `(g ·
//! sigmoid(g)) · u` with the IR's f32 sigmoid.

use crate::npu::isa::Program;
use crate::npu::kernels::matmul::KernelError;
use crate::npu::kernels::qmatmul::{emit_q, pack_q, QMatmulLayout};
use crate::npu::tiler::{QKernel, QTilePlan};
use crate::npu::Target;

/// The DDR image of a `qswiglu` kernel: the same regions as `qmatmul`'s
/// (constants, activations `[m_pad, K]`, row records, output `[M, N]`
/// f32); [`QMatmulLayout::new`] on a [`crate::npu::tiler::plan_qswiglu`]
/// plan sizes the constants for both matrices.
pub type QSwigluLayout = QMatmulLayout;

/// Emits the kernel for `plan` (from [`crate::npu::tiler::plan_qswiglu`]
/// with the same `target`) on the DDR image `layout`
/// ([`QSwigluLayout::new`] of the same plan). Each core loads the row
/// records, then runs the schedule; the result is `(g · sigmoid(g)) · u`,
/// f32 row-major `[M, N]` at `layout.out`. Errors on a `qmatmul` plan.
pub fn emit_qswiglu(
    plan: &QTilePlan,
    target: &Target,
    layout: &QSwigluLayout,
) -> Result<Program, KernelError> {
    emit_q(plan, target, layout, QKernel::Swiglu)
}

/// The constants of `plan`'s kernel from the two weights, each as
/// [`super::pack_qmatmul`] takes it (`q` row-major `[K, N]`, INT4 values
/// in `-8..=7`; `scale` row-major `[K/G, N]`): per core, per column tile,
/// per K tile, the gate's block then the up's. Errors as `pack_qmatmul`
/// for either matrix, and on a `qmatmul` plan.
pub fn pack_qswiglu(
    plan: &QTilePlan,
    gate_q: &[i8],
    gate_scale: &[f32],
    up_q: &[i8],
    up_scale: &[f32],
) -> Result<Vec<u8>, KernelError> {
    pack_q(
        plan,
        &[(gate_q, gate_scale), (up_q, up_scale)],
        QKernel::Swiglu,
    )
}
