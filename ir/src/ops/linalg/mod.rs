//! Linear algebra: `matmul`.

pub mod matmul;
