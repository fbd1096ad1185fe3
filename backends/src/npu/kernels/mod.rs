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

pub mod matmul;
pub mod qmatmul;
pub mod qswiglu;
mod schedule;

pub use matmul::{emit_matmul, pack_weights, KernelError, MatmulAddrs};
pub use qmatmul::{
    emit_qmatmul, pack_qmatmul, quantize_rows, QMatmulLayout, RowParams, ROW_RECORD_BYTES,
};
pub use qswiglu::{emit_qswiglu, pack_qswiglu, QSwigluLayout};
