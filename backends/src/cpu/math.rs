//! Scalar math helpers that kernels call: the transcendental functions
//! Cranelift has no instruction for (on `f32`, and `pow` on `f64`, which
//! integer `pow` uses).
//!
//! Each helper is an `extern "C"` function under a fixed symbol name
//! (`slmcc_expf`, ...) that computes exactly what the op's reference
//! evaluation computes (the same Rust or `libm` function), so a kernel
//! that calls it is bit-exact with the reference. The JIT resolves the
//! symbols to these functions ([`host_symbols`]); an AOT object imports
//! them, and the runtime that links it must provide them (this file is the
//! definition).

use slmcc_ir::ops::fused_util::sigmoid;
use slmcc_ir::ops::gelu::GeluApprox;

/// A math helper a kernel may call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathFn {
    Exp,
    Log,
    Erf,
    Tanh,
    Sigmoid,
    Cos,
    Sin,
    Pow,
    /// Float `mod` with the sign of the divisor (ONNX `Mod`, `fmod = 0`).
    Mod,
    GeluErf,
    GeluTanh,
    /// `pow` in `f64`, which the reference uses for integer `pow`.
    PowF64,
}

impl MathFn {
    pub const ALL: [MathFn; 12] = [
        MathFn::Exp,
        MathFn::Log,
        MathFn::Erf,
        MathFn::Tanh,
        MathFn::Sigmoid,
        MathFn::Cos,
        MathFn::Sin,
        MathFn::Pow,
        MathFn::Mod,
        MathFn::GeluErf,
        MathFn::GeluTanh,
        MathFn::PowF64,
    ];

    /// The symbol kernels import.
    pub fn symbol(self) -> &'static str {
        match self {
            MathFn::Exp => "slmcc_expf",
            MathFn::Log => "slmcc_logf",
            MathFn::Erf => "slmcc_erff",
            MathFn::Tanh => "slmcc_tanhf",
            MathFn::Sigmoid => "slmcc_sigmoidf",
            MathFn::Cos => "slmcc_cosf",
            MathFn::Sin => "slmcc_sinf",
            MathFn::Pow => "slmcc_powf",
            MathFn::Mod => "slmcc_modf",
            MathFn::GeluErf => "slmcc_gelu_erff",
            MathFn::GeluTanh => "slmcc_gelu_tanhf",
            MathFn::PowF64 => "slmcc_pow",
        }
    }

    /// Number of arguments.
    pub fn arity(self) -> usize {
        match self {
            MathFn::Pow | MathFn::Mod | MathFn::PowF64 => 2,
            _ => 1,
        }
    }

    /// Whether the arguments and the result are `f64` (else `f32`).
    pub fn double(self) -> bool {
        self == MathFn::PowF64
    }

    /// The host function, as a pointer the JIT links against.
    pub fn host_ptr(self) -> *const u8 {
        match self {
            MathFn::Exp => slmcc_expf as *const u8,
            MathFn::Log => slmcc_logf as *const u8,
            MathFn::Erf => slmcc_erff as *const u8,
            MathFn::Tanh => slmcc_tanhf as *const u8,
            MathFn::Sigmoid => slmcc_sigmoidf as *const u8,
            MathFn::Cos => slmcc_cosf as *const u8,
            MathFn::Sin => slmcc_sinf as *const u8,
            MathFn::Pow => slmcc_powf as *const u8,
            MathFn::Mod => slmcc_modf as *const u8,
            MathFn::GeluErf => slmcc_gelu_erff as *const u8,
            MathFn::GeluTanh => slmcc_gelu_tanhf as *const u8,
            MathFn::PowF64 => slmcc_pow as *const u8,
        }
    }
}

/// Every helper's symbol with its host address, for the JIT.
pub fn host_symbols() -> Vec<(&'static str, *const u8)> {
    MathFn::ALL
        .iter()
        .map(|f| (f.symbol(), f.host_ptr()))
        .collect()
}

pub extern "C" fn slmcc_expf(x: f32) -> f32 {
    x.exp()
}

pub extern "C" fn slmcc_logf(x: f32) -> f32 {
    x.ln()
}

pub extern "C" fn slmcc_erff(x: f32) -> f32 {
    libm::erff(x)
}

pub extern "C" fn slmcc_tanhf(x: f32) -> f32 {
    x.tanh()
}

pub extern "C" fn slmcc_sigmoidf(x: f32) -> f32 {
    sigmoid(x)
}

pub extern "C" fn slmcc_cosf(x: f32) -> f32 {
    x.cos()
}

pub extern "C" fn slmcc_sinf(x: f32) -> f32 {
    x.sin()
}

pub extern "C" fn slmcc_powf(a: f32, b: f32) -> f32 {
    a.powf(b)
}

pub extern "C" fn slmcc_modf(a: f32, b: f32) -> f32 {
    let r = a % b;
    if r != 0.0 && (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

pub extern "C" fn slmcc_gelu_erff(x: f32) -> f32 {
    GeluApprox::None.apply(x)
}

pub extern "C" fn slmcc_gelu_tanhf(x: f32) -> f32 {
    GeluApprox::Tanh.apply(x)
}

pub extern "C" fn slmcc_pow(a: f64, b: f64) -> f64 {
    a.powf(b)
}
