//! slmcc backends.
//!
//! Will own `npu/` (target descriptions, the NPU ISA, the tiler and the
//! micro-kernel emitter for the modelled RK3588) and `cpu/` (Cranelift
//! lowering, JIT for the host and AOT objects for aarch64). Nothing is
//! implemented yet; the crate exists so the workspace's dependency order
//! (`ir` ← `passes` ← `backends` ← `runtime` ← `compiler`) is fixed.
