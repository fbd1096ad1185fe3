//! slmcc runtime.
//!
//! Will own the package loader, the reference interpreter, the executor over
//! the memory plan, the NPU simulator, the JIT loader, the KV cache, bucket
//! dispatch and tensor dumps. Nothing is implemented yet; the crate exists so
//! the workspace's dependency order is fixed.
