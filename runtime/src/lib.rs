//! slmcc runtime.
//!
//! Owns execution: the reference interpreter ([`interp`]) that runs a graph
//! op by op with each op's reference evaluation, symbol binding from input
//! shapes ([`bind`]), `.npy` tensor files ([`npy`]) and tensor comparison
//! for golden and conformance checks ([`compare`]). The package loader, the
//! executor over the memory plan, the NPU simulator, the JIT loader and the
//! KV cache arrive with their issues.

pub mod bind;
pub mod compare;
pub mod interp;
pub mod npy;

pub use interp::{run_graph, Capture, RunError, RunResult};
