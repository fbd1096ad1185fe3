//! The quantized ops that `quantize` introduces: `qmatmul` and `qswiglu`.

pub mod layout;
pub mod qmatmul;
pub mod qswiglu;
