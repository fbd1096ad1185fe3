//! The host GEMM: `f32` matrix products for JIT kernels on the host,
//! computed by the `gemm` crate's micro-kernels.
//!
//! [`slmcc_sgemm`] is an `extern "C"` function that kernels import by
//! symbol, as they import the math helpers of [`super::math`]; the JIT
//! links it ([`host_symbols`]), an AOT object never uses it (see
//! [`super::CpuOptions::host_gemm`]).
//!
//! What comes from the crate is the part that is hard to keep fast on
//! every ISA: the register-tiled micro-kernels (`gemm-f32`: AVX-512, AVX2 +
//! FMA, NEON or scalar, chosen at run time) and, for one row of 64 columns
//! or more, its GEMV (`gemm::gemm`, whose one-row path allocates nothing).
//! The blocking around the micro-kernels is ours because the crate's own
//! driver (`gemm::gemm` beyond one row) allocates its packing buffers and
//! bookkeeping on every call, and kernels must not allocate. It follows
//! the crate's driver and measures within ~10% of it on the shapes of
//! `examples/bench.rs`.
//!
//! In the crate's column-major terms the product is computed transposed,
//! `Cᵀ = Bᵀ · Aᵀ`: the micro-kernel's vectors run along the columns of
//! `B` and `C` (contiguous in our row-major layout) and it broadcasts
//! elements of `A`, read in place. `B` is cut into panels of `MR` columns
//! (16 with AVX2, 64 with AVX-512) and `k` into blocks of at most
//! [`KC_MAX`] (split evenly). Per block, a group of panels is packed into
//! a 128 KiB stack buffer (zero-padded to whole vectors), then every tile
//! of `NR` rows of `A` (6) runs over the group's panels: the tile of `A`
//! stays in L1, the group in L2. Up to [`IN_PLACE_MAX_TILES`] tiles of
//! rows, panels are read in place (each is read too few times to pay for
//! the copy). Blocks after the first add into `C`.
//!
//! With more than one thread (the kernel's `CpuOptions::threads`, passed
//! in the call) and at least [`PARALLEL_MIN_MACS`]
//! multiply-adds, the panels (or, with fewer panels than threads, the row
//! tiles; for a GEMV, column chunks) are split over the threads of
//! [`super::threads::parallel_for`]; each packs into its own stack buffer
//! and writes its own part of `C`.
//!
//! Numerics: every element is a sequence of fused multiply-adds in `k`
//! order from zero within a block, the blocks added to `C` in order; with
//! `accumulate` the first block is added to the `C` given. Results differ
//! from the reference evaluation by a few ulps (as the generated FMA GEMM
//! does) and do not depend on the number of threads.

use std::mem::MaybeUninit;

use gemm_common::microkernel::MicroKernelFn;

use super::threads::parallel_for;

/// The symbol kernels import.
pub const SGEMM_SYMBOL: &str = "slmcc_sgemm";

/// Every host GEMM symbol with its address, for the JIT.
pub fn host_symbols() -> Vec<(&'static str, *const u8)> {
    vec![(SGEMM_SYMBOL, slmcc_sgemm as *const u8)]
}

/// Elements of the stack buffer `B` panels are packed into (128 KiB).
const PACK_ELEMS: usize = 32 * 1024;

/// Most rows of `k` per block: up to 512, the crate's own choice, so
/// models' hidden sizes up to 512 need one pass over `C`.
const KC_MAX: usize = 512;

/// Most panels packed together.
const MAX_GROUP: usize = 16;

/// Up to this many row tiles (`8 · NR` rows, the crate's threshold),
/// `B` is read in place instead of packed.
const IN_PLACE_MAX_TILES: usize = 8;

/// Fewest columns for which a one-row product goes to the crate's GEMV
/// (measured: for narrower rows, the micro-kernels reading `B` in place
/// are about twice as fast; from 64 columns on the GEMV is 1.4 to 7 times
/// faster).
pub const GEMV_MIN_N: usize = 64;

/// Fewest multiply-adds (`m · n · k`) for which a product is split over
/// threads: below, waking the workers costs more than it saves.
pub const PARALLEL_MIN_MACS: usize = 1 << 20;

/// The micro-kernels of one ISA.
#[derive(Clone, Copy)]
struct Isa {
    /// `f32` lanes of one vector.
    lanes: usize,
    /// Vectors of one micro-kernel tile along the columns of `B`.
    mr_div_n: usize,
    /// Rows of `A` of one tile.
    nr: usize,
    /// The kernel for `vectors` vectors and `rows` rows (1-based).
    ukr: fn(vectors: usize, rows: usize) -> MicroKernelFn<f32>,
}

impl Isa {
    /// Columns of one panel.
    fn mr(self) -> usize {
        self.lanes * self.mr_div_n
    }
}

/// The best micro-kernels the host runs (detected once; the detection
/// itself is cached by the standard library and allocates nothing).
fn isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use gemm_f32::microkernel::{avx512f, fma, scalar};
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Isa {
                lanes: 16,
                mr_div_n: avx512f::f32::MR_DIV_N,
                nr: avx512f::f32::NR,
                ukr: |v, r| avx512f::f32::UKR[v - 1][r - 1],
            };
        }
        if std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("avx2")
        {
            return Isa {
                lanes: 8,
                mr_div_n: fma::f32::MR_DIV_N,
                nr: fma::f32::NR,
                ukr: |v, r| fma::f32::UKR[v - 1][r - 1],
            };
        }
        Isa {
            lanes: 1,
            mr_div_n: scalar::f32::MR_DIV_N,
            nr: scalar::f32::NR,
            ukr: |v, r| scalar::f32::UKR[v - 1][r - 1],
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        use gemm_f32::microkernel::neon;
        Isa {
            lanes: 4,
            mr_div_n: neon::f32::MR_DIV_N,
            nr: neon::f32::NR,
            ukr: |v, r| neon::f32::UKR[v - 1][r - 1],
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        use gemm_f32::microkernel::scalar;
        Isa {
            lanes: 1,
            mr_div_n: scalar::f32::MR_DIV_N,
            nr: scalar::f32::NR,
            ukr: |v, r| scalar::f32::UKR[v - 1][r - 1],
        }
    }
}

/// The 64-byte aligned buffer `B` panels are packed into.
#[repr(C, align(64))]
struct Pack([MaybeUninit<f32>; PACK_ELEMS]);

/// Raw operands of one product, shareable with the pool's threads.
#[derive(Clone, Copy)]
struct Operands {
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
}

// SAFETY: the pointers are only dereferenced inside `slmcc_sgemm`'s call,
// and the threads write disjoint parts of `C`.
unsafe impl Send for Operands {}
unsafe impl Sync for Operands {}

/// `C[m, n] = A[m, k] · B[k, n]` (`accumulate == 0`) or
/// `C += A · B` (otherwise), row-major `f32` with row strides `lda`,
/// `ldb`, `ldc` (elements). Uses up to `threads` threads for large
/// products (the kernel's `CpuOptions::threads`).
///
/// # Safety
///
/// `a`, `b` and `c` must point to matrices of those sizes and strides
/// (`c` writable and not overlapping `a` or `b`).
pub unsafe extern "C" fn slmcc_sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: u32,
    threads: u32,
) {
    let ops = Operands {
        m,
        n,
        k,
        a,
        lda,
        b,
        ldb,
        c,
        ldc,
        accumulate: accumulate != 0,
    };
    let nthreads = if m * n * k >= PARALLEL_MIN_MACS {
        threads.max(1) as usize
    } else {
        1
    };
    // SAFETY: the caller's contract.
    unsafe { sgemm(ops, nthreads) }
}

/// [`slmcc_sgemm`] on `nthreads` threads at most.
unsafe fn sgemm(ops: Operands, nthreads: usize) {
    let Operands { m, n, k, .. } = ops;
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !ops.accumulate {
            for i in 0..m {
                // SAFETY: row i of C has n elements.
                unsafe { std::ptr::write_bytes(ops.c.add(i * ops.ldc), 0, n) };
            }
        }
        return;
    }
    let isa = isa();
    if m == 1 && n >= GEMV_MIN_N {
        // GEMV: the crate's (allocation-free for one row), on column
        // chunks of a multiple of 64 per thread.
        let chunk = n.div_ceil(nthreads).next_multiple_of(64).min(n);
        let chunks = n.div_ceil(chunk);
        let run = |t: usize| {
            let j0 = t * chunk;
            let w = chunk.min(n - j0);
            // SAFETY: columns j0..j0 + w of B and C.
            unsafe { gemv(ops, j0, w) }
        };
        if chunks > 1 {
            parallel_for(nthreads, chunks, &run);
        } else {
            run(0);
        }
        return;
    }
    let mr = isa.mr();
    let panels = n.div_ceil(mr);
    let tiles = m.div_ceil(isa.nr);
    if nthreads <= 1 {
        // SAFETY: the caller's contract.
        unsafe { blocked(ops, isa, 0, panels, 0, m) };
    } else if panels >= nthreads {
        // Split the panels (columns) evenly.
        let run = |t: usize| {
            let (p0, p1) = (panels * t / nthreads, panels * (t + 1) / nthreads);
            // SAFETY: disjoint columns of C per thread.
            unsafe { blocked(ops, isa, p0, p1, 0, m) };
        };
        parallel_for(nthreads, nthreads, &run);
    } else {
        // Few columns: split the row tiles.
        let parts = nthreads.min(tiles);
        let run = |t: usize| {
            let (t0, t1) = (tiles * t / parts, tiles * (t + 1) / parts);
            let (r0, r1) = (t0 * isa.nr, (t1 * isa.nr).min(m));
            // SAFETY: disjoint rows of C per thread.
            unsafe { blocked(ops, isa, 0, panels, r0, r1) };
        };
        parallel_for(parts, parts, &run);
    }
}

/// Columns `j0..j0 + w` of a one-row product through `gemm::gemm`.
unsafe fn gemv(ops: Operands, j0: usize, w: usize) {
    // SAFETY: the caller's contract; one row, row-major strides (the
    // crate's column stride is 1, its row stride the leading dimension).
    unsafe {
        gemm::gemm(
            1,
            w,
            ops.k,
            ops.c.add(j0),
            1,
            ops.ldc as isize,
            ops.accumulate,
            ops.a,
            1,
            ops.lda as isize,
            ops.b.add(j0),
            1,
            ops.ldb as isize,
            if ops.accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// Panels `p0..p1` of `B` (columns `p0 · MR ..`) over rows `r0..r1`.
unsafe fn blocked(ops: Operands, isa: Isa, p0: usize, p1: usize, r0: usize, r1: usize) {
    let Operands {
        n,
        k,
        a,
        lda,
        b,
        ldb,
        c,
        ldc,
        ..
    } = ops;
    let mr = isa.mr();
    let kc_max = KC_MAX.min(PACK_ELEMS / mr).max(1);
    // Blocks of equal size (k = 515 is one of 258 and one of 257, not 512
    // and 3).
    let kc_max = k.div_ceil(k.div_ceil(kc_max));
    // Panels packed together (they stay in L2 while every row tile of A
    // runs over them).
    let group = (PACK_ELEMS / (kc_max * mr)).clamp(1, MAX_GROUP);
    // Few rows read each panel only a few times: B is then read in place
    // where the micro-kernel's vector loads stay inside its rows.
    let in_place = r1 - r0 <= IN_PLACE_MAX_TILES * isa.nr;
    let mut pack = Pack([MaybeUninit::uninit(); PACK_ELEMS]);
    let buf = pack.0.as_mut_ptr().cast::<f32>();
    let mut panels = [(std::ptr::null::<f32>(), 0isize); MAX_GROUP];
    let mut pc = 0;
    while pc < k {
        let kc = kc_max.min(k - pc);
        // The first block overwrites C unless accumulating.
        let alpha_status = if pc == 0 && !ops.accumulate { 0 } else { 1 };
        let mut g0 = p0;
        while g0 < p1 {
            let g1 = (g0 + group).min(p1);
            for p in g0..g1 {
                let j0 = p * mr;
                let cols = mr.min(n - j0);
                // SAFETY: rows pc..pc + kc, columns j0..j0 + cols of B.
                let src = unsafe { b.add(pc * ldb + j0) };
                panels[p - g0] = if in_place && cols.is_multiple_of(isa.lanes) {
                    (src, ldb as isize)
                } else {
                    let width = cols.div_ceil(isa.lanes) * isa.lanes;
                    // SAFETY: `group · kc · mr <= PACK_ELEMS`, `width <= mr`;
                    // row kk of the block has `cols` elements at src.
                    unsafe {
                        let base = buf.add((p - g0) * kc * mr);
                        for kk in 0..kc {
                            let dst = base.add(kk * mr);
                            std::ptr::copy_nonoverlapping(src.add(kk * ldb), dst, cols);
                            std::ptr::write_bytes(dst.add(cols), 0, width - cols);
                        }
                        (base.cast_const(), mr as isize)
                    }
                };
            }
            let mut ir = r0;
            while ir < r1 {
                let rows = isa.nr.min(r1 - ir);
                for p in g0..g1 {
                    let j0 = p * mr;
                    let cols = mr.min(n - j0);
                    let ukr = (isa.ukr)(cols.div_ceil(isa.lanes), rows);
                    let (lhs, lhs_cs) = panels[p - g0];
                    // SAFETY: the micro-kernel reads whole vectors of the
                    // panel per k (padded or inside B's rows), `rows`
                    // elements of A (stride lda) per k, and writes
                    // `cols × rows` of C; the ISA was detected at run time.
                    unsafe {
                        ukr(
                            cols,
                            rows,
                            kc,
                            c.add(ir * ldc + j0),
                            lhs,
                            a.add(ir * lda + pc),
                            ldc as isize,
                            1,
                            lhs_cs,
                            1,
                            lda as isize,
                            1.0,
                            1.0,
                            alpha_status,
                            false,
                            false,
                            false,
                            lhs,
                        );
                    }
                }
                ir += rows;
            }
            g0 = g1;
        }
        pc += kc;
    }
}
