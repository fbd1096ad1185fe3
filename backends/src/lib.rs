//! slmcc backends.
//!
//! `cpu/` is the Cranelift CPU backend: lowering of IR nodes to kernels, a
//! JIT for the host and AOT objects for aarch64 (see [`cpu`]). `npu/` is
//! the RK3588 NPU: its target description, its register interface
//! (register database, command words, matmul tasks, layouts, tiling) and
//! the lowering of a graph's W8A8 products to register programs stored in
//! the package (see [`npu`] and `docs/NPU.md`). [`mutant`] holds the
//! test builds' kernel mutants.

pub mod cpu;
pub mod mutant;
pub mod npu;
