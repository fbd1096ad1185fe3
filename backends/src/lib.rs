//! slmcc backends.
//!
//! `cpu/` is the Cranelift CPU backend: lowering of IR nodes to kernels, a
//! JIT for the host and AOT objects for aarch64 (see [`cpu`]). `npu/` is
//! the modelled RK3588 NPU: its target description, our NPU ISA with its
//! binary encoding and disassembler (`docs/NPU_ISA.md`), and the kernels
//! built on them (see [`npu`]); it is not wired into `slmcc compile` yet.

pub mod cpu;
pub mod npu;
