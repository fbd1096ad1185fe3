//! NPU kernels: emitters of whole [`crate::npu::Program`]s for one
//! operation, with the tiling chosen by [`crate::npu::tiler`].
//!
//! [`matmul`] is the weight-stationary quantized matmul/GEMV (INT8
//! activations, INT8/INT4 weights, INT32 output) and its weight packing;
//! [`qmatmul`] is the IR op `qmatmul` bit-exactly (per-token activation
//! quantization on the CPU, grouped dequantization on the NPU with
//! `epi.f32`, f32 output); [`qswiglu`] is the quantized SwiGLU MLP
//! (`silu(x·gate) · (x·up)`, two `qmatmul`s sharing the activation panels,
//! combined by `ew.silu_mul`). All run the schedule of `schedule`.
//! [`rms_norm`] is the IR ops `rms_norm` / `add_rms_norm` (f32) bit-exactly:
//! the params record resident per core, row tiles streamed through
//! ping-pong slots, one `norm.rms` each.
//! [`attention`] is flash attention (f16 products, f32 online softmax;
//! [`attention_ref`] is its plain-Rust reference).

pub mod attention;
pub mod attention_ref;
pub mod matmul;
pub mod qmatmul;
pub mod qswiglu;
pub mod rms_norm;
mod schedule;

pub use matmul::{emit_matmul, pack_weights, KernelError, MatmulAddrs};
pub use qmatmul::{
    emit_qmatmul, pack_qmatmul, quantize_rows, QMatmulLayout, RowParams, ROW_RECORD_BYTES,
};
pub use qswiglu::{emit_qswiglu, pack_qswiglu, QSwigluLayout};
pub use rms_norm::{
    emit_rms_norm, pack_rms_norm_params, plan_rms_norm, RmsNormLayout, RmsNormPlan,
};
