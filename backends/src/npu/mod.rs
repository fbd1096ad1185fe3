//! The RK3588 NPU target.
//!
//! [`regcmd`] is the hardware's own register interface: the register
//! database, command words, the single-task matmul, the data layouts and
//! the tiling of a larger matmul into such tasks. [`lower`] turns the
//! graph's NPU products into those tasks and stores their weights in the
//! NPU's layout at compile time. [`target`] holds the numbers the tiling
//! and its estimate assume. Everything said about NPU speed is an
//! estimate of that model (`docs/NPU.md`).

pub mod lower;
pub mod regcmd;
pub mod target;

pub use target::Target;
