//! slmcc backends.
//!
//! `cpu/` is the Cranelift CPU backend: lowering of IR nodes to kernels, a
//! JIT for the host and AOT objects for aarch64 (see [`cpu`]). `npu/`
//! (target descriptions, the NPU ISA, the tiler and the micro-kernel
//! emitter for the modelled RK3588) is to come.

pub mod cpu;
