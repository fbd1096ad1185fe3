//! The Cranelift CPU backend.
//!
//! A graph whose shapes are all static (a bucket, or a graph whose symbols
//! `slmcc_passes::specialize` bound) compiles to **one kernel per node**. Every kernel
//! has the same ABI:
//!
//! ```c
//! int32_t kernel(uint8_t *const *bufs);   // 0 = ok, else a status code
//! ```
//!
//! `bufs` points to one buffer pointer per operand of the node, then one per
//! result, in the node's order. Results are written into buffers the caller
//! provides (sized for the static type, little-endian, `bool` as one byte),
//! so an executor can place every value in a planned arena and run a step
//! without allocating. Kernels never allocate, never trap on data (a
//! gather index out of range returns [`emit::STATUS_INDEX_OUT_OF_RANGE`],
//! an integer division by zero [`emit::STATUS_DIVISION_BY_ZERO`]),
//! and only call the math helpers of [`math`], which the JIT links to the
//! host functions and an AOT object imports (and, JIT only, the host GEMM
//! of [`hostgemm`]).
//!
//! Shapes are baked in: loop bounds, strides and broadcast patterns are
//! constants, so loops are counted with static trip counts, dims that every
//! access walks contiguously are collapsed into one, and the innermost dim
//! runs in 128-bit vectors (`f32x4` for arithmetic; 16-byte moves for copies)
//! with a scalar tail where every access is contiguous or broadcast along
//! it. `matmul` and the gated MLPs use a packed, register-tiled GEMM (4
//! rows × 16 columns on aarch64, 4 × 8 on x86-64, FMA where the ISA has
//! it); `attention` tiles over keys with its scores on the stack. Kernels'
//! only scratch is stack memory of bounded size (see `docs/ARCHITECTURE.md`).
//!
//! On the host (JIT), large matrix products instead call the host GEMM
//! [`hostgemm`] (`slmcc_sgemm`, built on the `gemm` crate's micro-kernels,
//! linked like the math helpers; [`CpuOptions::host_gemm`]), and
//! attention over many query rows calls the host attention [`hostattn`]
//! (`slmcc_attention`, blocked over both GEMMs); these alone use several
//! threads ([`CpuOptions::threads`], fixed when a kernel is
//! compiled; the pool of [`threads`]). AOT
//! objects keep the generated GEMM. The quantized products call the
//! runtime's integer dot-product kernel [`hostqgemm`] (`slmcc_qgemm`;
//! [`CpuOptions::host_qgemm`]) in the JIT and in AOT objects alike: the
//! runtime that loads an object provides it, with the board's `sdot`.
//!
//! Numerics: with [`CpuOptions::exact`] every kernel reproduces the
//! reference evaluation bit for bit (the same IEEE operations in the same
//! order, the same math functions; no host GEMM). The default adds FMA
//! and the host GEMM (matmul-like ops differ by a few ulps) and
//! `fast_math` (the inline vector exp of
//! [`vmath`] and vector partial sums in softmax and attention, within
//! ~1e-6 relative). See `docs/ARCHITECTURE.md` for what is lowered.
//!
//! Modules: [`emit`] (kernel builder, loop nests), [`lower`] (one module
//! per op family), [`compile`] (a graph into kernels of any Cranelift
//! module), [`jit`] (host JIT; the runtime's executor runs the kernels),
//! [`aot`] (object files for aarch64), [`fingerprint`] (what pins a
//! package's host numerics), [`math`] (the helpers kernels call), [`vmath`] (inline vector math),
//! [`hostgemm`] (the host GEMM kernels call), [`hostattn`] (the host
//! attention they call for prefill), [`threads`] (the kernels'
//! thread count and pool).

pub mod aot;
pub mod compile;
pub mod emit;
pub mod fingerprint;
pub mod hostattn;
pub mod hostgemm;
pub mod hostqgemm;
pub mod jit;
pub mod lower;
pub mod math;
pub mod threads;
pub mod vmath;

pub use jit::{JitProgram, KernelFn};
pub use threads::MAX_THREADS;

/// The version of the cpu kernel library: the kernel ABI and what each op
/// lowers to. Packages record it in their version set; bump it when the ABI
/// changes. A change of a kernel's results needs no bump to be seen: the
/// packages' kernel fingerprints ([`fingerprint`]) catch it.
pub const KERNEL_LIBRARY: &str = "slmcc-cpu-kernels 3 (cranelift 0.135, gemm 0.19)";

/// Code generation choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuOptions {
    /// Use fused multiply-add in matmul-like loops where the ISA has it
    /// natively (faster; not bit-exact with the reference).
    pub fma: bool,
    /// Vectorised transcendentals (a polynomial `f32x4` exp, and the
    /// sigmoid/SiLU and softmax built on it) and reductions in vector
    /// partial sums (softmax, attention): within ~1e-6 relative of the
    /// reference instead of bit-exact.
    pub fast_math: bool,
    /// Large `matmul`s and the products of `swiglu`/`geglu` call the host
    /// GEMM ([`hostgemm`], the `gemm` crate's micro-kernels) instead of the
    /// generated GEMM. Only for the JIT: an AOT object ([`aot`]) always
    /// gets the generated GEMM. FMA-like numerics (a few ulps from the
    /// reference).
    pub host_gemm: bool,
    /// `qmatmul` and `qswiglu` call the runtime's integer dot-product
    /// kernel ([`hostqgemm`]: AVX-VNNI/AVX-512 VNNI or `sdot`, chosen when
    /// it first runs) instead of the generated one; bit-exact either way.
    /// An AOT object imports it from the runtime that loads it; the JIT
    /// uses it only where the host has a dot-product path
    /// ([`hostqgemm::fast`]).
    pub host_qgemm: bool,
    /// Threads a host GEMM may split a large product over (`--threads`;
    /// at most [`MAX_THREADS`]); the other kernels run on the calling
    /// thread.
    pub threads: usize,
}

impl CpuOptions {
    /// The reference's operations in the reference's order: results are
    /// bit-exact with each op's `eval` (see `docs/ARCHITECTURE.md`).
    pub const fn exact() -> CpuOptions {
        CpuOptions {
            fma: false,
            fast_math: false,
            host_gemm: false,
            host_qgemm: false,
            threads: 1,
        }
    }
}

impl Default for CpuOptions {
    fn default() -> CpuOptions {
        CpuOptions {
            fma: true,
            fast_math: true,
            host_gemm: true,
            host_qgemm: true,
            threads: 1,
        }
    }
}

/// Why a graph does not compile or run on the cpu backend.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpuError {
    #[error("op `{op}`{} is not supported by the cpu backend yet", if detail.is_empty() { String::new() } else { format!(" {detail}") })]
    Unsupported { op: String, detail: String },
    #[error("{0}")]
    Dynamic(String),
    #[error("code generation: {0}")]
    Codegen(String),
    #[error("graph @{graph}, node {node}: {source}")]
    AtNode {
        graph: String,
        node: String,
        source: Box<CpuError>,
    },
    #[error("{0}")]
    Run(String),
}
