//! Kernel fingerprints: what pins a package's host numerics.
//!
//! A package for the host carries no machine code: the runtime compiles
//! its kernels from the bucket graphs when it loads it. Run by another
//! slmcc binary, the same package may then compute other numbers, if a
//! lowering changed in between. [`kernel_fingerprint`] is the SHA-256 of
//! what decides those numbers on this binary:
//! - the kernel library's version ([`super::KERNEL_LIBRARY`]);
//! - the Cranelift IR of every kernel of the graph, as this binary lowers
//!   it with [`fingerprint_options`];
//! - the results of the helpers the kernels call (the math functions, the
//!   host GEMM and the host attention) on fixed probe inputs.
//!
//! Cranelift IR rather than machine code: every constant, operation and
//! order of the lowering is in it, while register allocation and
//! instruction encoding, which do not change IEEE results, are not. The
//! IR does follow what the host offers where the numbers do too (FMA).
//! `slmcc compile` records the fingerprint of each bucket in the package,
//! and loading it compares (`docs/GOLDENS.md`).

use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::default_libcall_names;
use sha2::{Digest, Sha256};
use slmcc_ir::Graph;

use super::compile::{for_each_kernel_ir, host_isa};
use super::hostattn::{slmcc_attention, AttentionDesc, BLOCK_ROWS, TILE_KEYS};
use super::math::{
    slmcc_cosf, slmcc_erff, slmcc_expf, slmcc_gelu_erff, slmcc_gelu_tanhf, slmcc_logf, slmcc_modf,
    slmcc_pow, slmcc_powf, slmcc_sigmoidf, slmcc_sinf, slmcc_tanhf,
};
use super::{CpuError, CpuOptions, KERNEL_LIBRARY};

/// The options fingerprints are taken with: the defaults, on one thread
/// (the thread count does not change the numbers, but it is a constant of
/// the host GEMM's call) and with the generated integer products (the
/// runtime's dot-product kernel is chosen by the host, and bit-exact with
/// them).
pub fn fingerprint_options() -> CpuOptions {
    CpuOptions {
        threads: 1,
        host_qgemm: false,
        ..CpuOptions::default()
    }
}

/// The fingerprint of `graph`'s kernels on this binary (static shapes).
pub fn kernel_fingerprint(graph: &Graph) -> Result<[u8; 32], CpuError> {
    let mut h = Sha256::new();
    h.update(KERNEL_LIBRARY.as_bytes());
    h.update(helper_probe());
    let builder = JITBuilder::with_isa(host_isa()?, default_libcall_names());
    let mut module = JITModule::new(builder);
    let lowered = for_each_kernel_ir(&mut module, graph, &fingerprint_options(), |n, func| {
        h.update((n as u64).to_le_bytes());
        h.update(func.display().to_string().as_bytes());
    });
    // SAFETY: nothing was defined or finalised; no pointer escaped.
    unsafe { module.free_memory() };
    lowered?;
    Ok(h.finalize().into())
}

/// The bits of every helper's results on fixed inputs, computed once per
/// process (every bucket's fingerprint reads them).
fn helper_probe() -> &'static [u8] {
    static PROBE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    PROBE.get_or_init(probe_helpers)
}

/// What [`helper_probe`] holds.
fn probe_helpers() -> Vec<u8> {
    const X: [f32; 8] = [-87.5, -3.25, -0.75, -1e-3, 0.0, 0.5, 2.75, 40.0];
    let unary: [extern "C" fn(f32) -> f32; 9] = [
        slmcc_expf,
        slmcc_logf,
        slmcc_erff,
        slmcc_tanhf,
        slmcc_sigmoidf,
        slmcc_cosf,
        slmcc_sinf,
        slmcc_gelu_erff,
        slmcc_gelu_tanhf,
    ];
    let mut out = Vec::new();
    for f in unary {
        for x in X {
            out.extend(f(x).to_bits().to_le_bytes());
        }
    }
    for (a, b) in X.iter().zip(X.iter().rev()) {
        out.extend(slmcc_powf(a.abs(), *b * 0.1).to_bits().to_le_bytes());
        out.extend(slmcc_modf(*a, b + 0.5).to_bits().to_le_bytes());
        out.extend(slmcc_pow(f64::from(*a).abs(), 0.3).to_bits().to_le_bytes());
    }
    // A product the host GEMM takes in blocks: 9 x 37 by 37 x 11.
    let (m, k, n) = (9, 37, 11);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 7.0)
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0)
        .collect();
    let mut c = vec![0f32; m * n];
    // SAFETY: a, b and c hold m x k, k x n and m x n row-major matrices.
    unsafe {
        super::hostgemm::slmcc_sgemm(
            m,
            n,
            k,
            a.as_ptr(),
            k,
            b.as_ptr(),
            n,
            c.as_mut_ptr(),
            n,
            0,
            1,
        )
    };
    for v in c {
        out.extend(v.to_bits().to_le_bytes());
    }
    // The host attention on a causal problem of two blocks and two tiles.
    let desc = AttentionDesc {
        b: 1,
        hq: 2,
        hkv: 1,
        s: BLOCK_ROWS as u64 + 3,
        t: TILE_KEYS as u64 + 9,
        d: 5,
        dv: 3,
        window: 0,
        scale: 0.4,
        softcap: 0.0,
        causal: 1,
        threads: 1,
        exp_x2: 0.5,
    };
    let (s, t) = (desc.s as usize, desc.t as usize);
    let wave = |n: usize, f: usize| -> Vec<f32> {
        (0..n).map(|i| ((i * f % 17) as f32 - 8.0) / 5.0).collect()
    };
    let (q, k, v) = (wave(2 * s * 5, 3), wave(t * 5, 7), wave(t * 3, 5));
    let mut o = vec![0f32; 2 * s * 3];
    // SAFETY: q, k, v and o have the descriptor's shapes.
    unsafe { slmcc_attention(&desc, q.as_ptr(), k.as_ptr(), v.as_ptr(), o.as_mut_ptr()) };
    for v in o {
        out.extend(v.to_bits().to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;

    const MODULE: &str = "module @m {
  graph @main(%x: f32[2, 8]) -> (f32[2, 8]) {
    %y = softmax %x {axis = -1} : f32[2, 8]
    return %y
  }
}
";

    #[test]
    fn a_fingerprint_is_stable_and_follows_the_graph() {
        let m = parse_module(MODULE).unwrap();
        let a = kernel_fingerprint(&m.graphs[0]).unwrap();
        assert_eq!(a, kernel_fingerprint(&m.graphs[0]).unwrap());
        let other = parse_module(&MODULE.replace("axis = -1", "axis = 0")).unwrap();
        assert_ne!(a, kernel_fingerprint(&other.graphs[0]).unwrap());
    }
}
