//! slmcc runtime.
//!
//! Owns execution: the reference interpreter ([`interp`]) that runs a graph
//! op by op with each op's reference evaluation, symbol binding from input
//! shapes ([`bind`]), `.npy` tensor files ([`npy`]) and tensor comparison
//! for golden and conformance checks ([`compare`]), and running a graph on
//! the Cranelift CPU backend's JIT ([`jit`]), bucket dispatch with padding
//! ([`bucket`]) and the backend-independent executor over a memory plan
//! ([`exec`]: one allocation per region at load, kernels called with
//! pointers into the regions), planned buckets behind dispatch
//! ([`planned`]: allocation-free steps) and the package format with its
//! verifying loader ([`package`]), and token-by-token decoding over a static
//! KV cache ([`decode`]), the NPU part of a graph beside the CPU kernels
//! ([`npu`]: the W8A8 products from their register programs, bit-exact
//! with the reference), the functional model of the RK3588's own register
//! interface ([`npu_model`]: a task's register command list executed over
//! an image of NPU memory), the devices that run such lists
//! ([`npu_device`]: the `rocket` and `rknpu` drivers' ioctls and the model
//! behind one trait), the estimated time of a graph on the board
//! ([`estimate`]), and the loader of a package's ahead-of-time kernel
//! objects ([`aot`]: no compiler at load).

pub mod aot;
pub mod bind;
pub mod bucket;
pub mod budget;
pub mod compare;
pub mod decode;
pub mod estimate;
pub mod exec;
pub mod interp;
pub mod jit;
pub mod kernel_fault;
pub mod native;
pub mod npu;
pub mod npu_device;
pub mod npu_model;
pub mod npy;
pub mod package;
pub mod planned;
pub mod sample;
pub mod timed;

pub use interp::{run_graph, Capture, RunError, RunResult};
