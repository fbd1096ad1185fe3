//! The host GEMM path (`CpuOptions::host_gemm`, the default for the JIT):
//! `matmul`, `swiglu` and `geglu` on odd shapes (dims not multiples of
//! any tile, `k` split into blocks, batches, the gated MLPs' `up` tiles
//! and their remainders) agree with the reference evaluation within the
//! goldens' 1e-5 on 1 and 2 threads; `slmcc_sgemm` itself, accumulate
//! included, on several threads; and it allocates nothing. The same
//! shapes on the generated GEMM with FMA (what AOT objects run) too.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{check_with, Expect, Kind::*, Lcg};
use slmcc_backends::cpu::hostgemm::slmcc_sgemm;
use slmcc_backends::cpu::threads::ensure_workers;
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::ops::gelu::GeluApprox;
use slmcc_ir::ops::glu::Glu;
use slmcc_ir::ops::matmul::MatMul;

/// Counts allocations made on a thread while it has counting on.
struct Counting;

// Per thread, the switch and the count: tests run on several threads at
// once, and another test's allocations must not count here.
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The host GEMM on `threads` threads.
const fn host(threads: usize) -> CpuOptions {
    CpuOptions {
        fma: true,
        fast_math: true,
        host_gemm: true,
        host_qgemm: true,
        threads,
    }
}

const GENERATED: CpuOptions = CpuOptions {
    fma: true,
    fast_math: true,
    host_gemm: false,
    host_qgemm: false,
    threads: 1,
};

#[test]
fn matmuls_agree_with_the_reference() {
    let mut rng = Lcg(11);
    for (batch_a, batch_b, m, k, n) in [
        (vec![], vec![], 1, 700, 333),
        (vec![], vec![], 2, 129, 65),
        (vec![], vec![], 5, 37, 131),
        (vec![], vec![], 49, 100, 100),
        (vec![], vec![], 67, 515, 45),
        (vec![], vec![], 130, 1030, 77),
        (vec![], vec![], 300, 19, 7),
        (vec![3], vec![], 17, 40, 50),
        (vec![2, 1], vec![3], 9, 64, 40),
    ] {
        let mut a = batch_a.clone();
        a.extend([m, k]);
        let mut b = batch_b.clone();
        b.extend([k, n]);
        let (x, w) = (rng.tensor(&a, 1.0), rng.tensor(&b, 1.0));
        for kind in [Input, Weight] {
            for threads in [1, 2] {
                let operands = [(x.clone(), Input), (w.clone(), kind)];
                check_with(MatMul, &operands, Expect::Rel(1e-5), host(threads));
            }
            check_with(
                MatMul,
                &[(x.clone(), Input), (w.clone(), kind)],
                Expect::Rel(1e-5),
                GENERATED,
            );
        }
    }
}

#[test]
fn gated_mlps_agree_with_the_reference() {
    let mut rng = Lcg(12);
    // The last three overflow one `up` tile (32 Ki elements): full tiles,
    // remainder columns, and (past 512 rows) remainder rows.
    for (rows, hidden, inter) in [
        (vec![1], 96, 700),
        (vec![1, 7], 33, 130),
        (vec![2, 35], 33, 600),
        (vec![1, 130], 520, 300),
        (vec![1, 600], 40, 200),
    ] {
        let mut xs = rows.clone();
        xs.push(hidden);
        let x = rng.tensor(&xs, 1.0);
        let (g, u) = (
            rng.tensor(&[hidden, inter], 1.0),
            rng.tensor(&[hidden, inter], 1.0),
        );
        let gu = rng.tensor(&[hidden, 2 * inter], 1.0);
        for op in [
            Glu::swiglu(),
            Glu::geglu(GeluApprox::None),
            Glu::geglu(GeluApprox::Tanh),
        ] {
            let sep = [(x.clone(), Input), (g.clone(), Weight), (u.clone(), Weight)];
            let fused = [(x.clone(), Input), (gu.clone(), Weight)];
            for threads in [1, 2] {
                check_with(op, &sep, Expect::Rel(1e-5), host(threads));
                check_with(op, &fused, Expect::Rel(1e-5), host(threads));
            }
            check_with(op, &fused, Expect::Rel(1e-5), GENERATED);
        }
    }
}

/// `C = A·B` or `C += A·B` in `f64`.
fn reference(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c0: Option<&[f32]>) -> Vec<f64> {
    (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            let s: f64 = (0..k)
                .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                .sum();
            s + c0.map_or(0.0, |c| c[ij] as f64)
        })
        .collect()
}

/// `slmcc_sgemm` directly, on odd and empty shapes, with `accumulate`, on
/// 1 to 3 threads, against an `f64` reference, and with no allocation
/// (workers are spawned by `ensure_workers`, before counting).
#[test]
fn sgemm_accumulates_and_allocates_nothing() {
    let mut rng = Lcg(13);
    for (m, n, k) in [
        (1, 1, 1),
        (1, 70, 33),
        (2, 17, 5),
        (7, 13, 300),
        (13, 129, 257),
        (37, 200, 600),
        (300, 21, 9),
        (5, 0, 3),
        (4, 6, 0),
        (1, 1000, 300),
        (3, 77, 1100),
        (50, 129, 515),
        (131, 33, 40),
        (200, 300, 64),
    ] {
        let a: Vec<f32> = (0..m * k).map(|_| rng.f32()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.f32()).collect();
        let c0: Vec<f32> = (0..m * n).map(|_| rng.f32()).collect();
        for accumulate in [false, true] {
            for threads in [1u32, 2, 3] {
                ensure_workers(threads as usize);
                let mut c = c0.clone();
                COUNTING.with(|f| f.set(true));
                let before = ALLOCATIONS.with(Cell::get);
                // SAFETY: row-major buffers of exactly these sizes.
                unsafe {
                    slmcc_sgemm(
                        m,
                        n,
                        k,
                        a.as_ptr(),
                        k,
                        b.as_ptr(),
                        n,
                        c.as_mut_ptr(),
                        n,
                        accumulate as u32,
                        threads,
                    )
                };
                let allocations = ALLOCATIONS.with(Cell::get) - before;
                COUNTING.with(|f| f.set(false));
                let what = format!("{m}x{n}x{k} accumulate={accumulate} threads={threads}");
                assert_eq!(allocations, 0, "{what}: allocations");
                let want = reference(m, n, k, &a, &b, accumulate.then_some(&c0[..]));
                let scale = want.iter().fold(1e-6f64, |s, w| s.max(w.abs()));
                for (i, (&g, &w)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (g as f64 - w).abs() / scale < 1e-5,
                        "{what}: element {i}: {g} vs {w}"
                    );
                }
            }
        }
    }
}
