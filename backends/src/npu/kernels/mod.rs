//! NPU kernels: emitters of whole [`crate::npu::Program`]s for one
//! operation, with the tiling chosen by [`crate::npu::tiler`].
//!
//! [`matmul`] is the weight-stationary quantized matmul/GEMV (INT8
//! activations, INT8/INT4 weights, INT32 output) and its weight packing.

pub mod matmul;

pub use matmul::{emit_matmul, pack_weights, KernelError, MatmulAddrs};
