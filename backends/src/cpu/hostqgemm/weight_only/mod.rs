//! Weight-only products (`qmatmul`/`qswiglu` with `activations = "f32"`):
//! `f32` activations by the stored weights, in the reference's operations
//! (`slmcc_ir::ops::qmatmul`): per group, `a = fma(x[k], q[k, n] as f32,
//! a)` for `k` in increasing order from `+0.0`, then `y += a · scale[g, n]`
//! (rounded product, then the sum), groups in increasing order. Lanes are
//! output columns, so vectors compute exactly those steps and the result
//! is bit-exact with the reference.
//!
//! The weights are read row-major as stored (`i8`, or `i4` two per byte),
//! in panels of `16·S` columns by up to [`TILE_ROWS`] rows, `S` chosen so
//! that the panel's accumulators fill the vector registers without
//! spilling (decode, one row: 64 columns, eight independent `fma` chains
//! on x86), prefetching their weights [`PREFETCH_ROWS`] rows ahead:
//! `x86.rs` on AVX2 with FMA (chosen at run time), `aarch64.rs`
//! on NEON (every aarch64 CPU). Columns past the last whole strip of 16,
//! an `i4` weight whose rows do not start on a byte, weights in another
//! layout, and CPUs without those instructions take the plain loop
//! ([`column`]), whose `f32::mul_add` is the same fused operation.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86;

use slmcc_ir::ops::qlayout::QLayout;

use super::{Call, Weight, BLOCK, CHUNK, PARALLEL_MIN_MACS, TILE_ROWS};
use crate::cpu::threads::parallel_for;

/// How many rows of `K` ahead the panels prefetch their weights: rows
/// are `N` bytes apart (half that for `i4`), mostly a page or more, which
/// the hardware prefetchers do not follow; without it decode waits on
/// memory (the W4 decode step of `llama_h512` took 1.7x as long).
const PREFETCH_ROWS: usize = 8;

/// The addresses of the first and last byte (at most 64 bytes apart) of
/// the weights a panel of `S` strips reads [`PREFETCH_ROWS`] rows after
/// the row at `p`: what the panels prefetch. Prefetching never faults, so
/// the addresses may lie past the weight.
#[inline]
fn prefetch_lines<const S: usize, const I4: bool>(w: &Weight, p: *const u8) -> [*const u8; 2] {
    let (row_bytes, panel_bytes) = if I4 {
        (w.stride / 2, S * BLOCK / 2)
    } else {
        (w.stride, S * BLOCK)
    };
    let ahead = p.wrapping_add(PREFETCH_ROWS * row_bytes);
    [ahead, ahead.wrapping_add(panel_bytes - 1)]
}

/// Per row of a tile, the sums of a chunk's columns (from its first).
type Sums = [[f32; CHUNK]; TILE_ROWS];

/// The weight-only product `call` describes, on up to `threads` threads.
///
/// # Safety
/// As [`super::slmcc_qgemm`].
pub(super) unsafe fn run(call: &Call, threads: usize) {
    if call.rows == 0 || call.n == 0 {
        return;
    }
    let tasks = call.n.div_ceil(CHUNK);
    let vectors = vectors();
    let task = |t: usize| {
        let (c0, c1) = (t * CHUNK, ((t + 1) * CHUNK).min(call.n));
        let mut m = 0;
        while m < call.rows {
            let rows = (call.rows - m).min(TILE_ROWS);
            // SAFETY: the caller's contract; task `t` writes its own columns.
            unsafe { chunk(call, vectors, m, rows, c0, c1) };
            m += rows;
        }
    };
    let macs = call.rows * call.k * call.n * call.count;
    if threads > 1 && tasks > 1 && macs >= PARALLEL_MIN_MACS {
        parallel_for(threads, tasks, &task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// Whether this CPU runs the vector panels.
fn vectors() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(target_arch = "aarch64")]
    {
        true
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// A tile's rows of `x` and one weight, for the panels.
pub(super) struct Rows<'a> {
    call: &'a Call,
    w: &'a Weight,
    /// Each row's first element (past `count`, the last row again).
    x: [*const f32; TILE_ROWS],
    count: usize,
}

/// Columns `c0 .. c1` (one chunk) of result rows `m0 .. m0 + count`.
unsafe fn chunk(call: &Call, vectors: bool, m0: usize, count: usize, c0: usize, c1: usize) {
    let ws = &call.weights[..call.count];
    // Panels read row-major weights, `i4` ones a byte at a time: a row's
    // first element must be even.
    let aligned = ws[0].layout == QLayout::RowMajor
        && (!call.int4 || ws.iter().all(|w| w.stride % 2 == 0 && w.col0 % 2 == 0));
    let x = std::array::from_fn(|r| call.x.add((m0 + r.min(count - 1)) * call.k));
    let mut sums = [[[0f32; CHUNK]; TILE_ROWS]; 2];
    for (w, out) in ws.iter().zip(&mut sums) {
        let rows = Rows { call, w, x, count };
        let mut c = c0;
        if vectors && aligned {
            while c + BLOCK <= c1 {
                c += BLOCK * panel(&rows, c, (c1 - c) / BLOCK, out, c - c0);
            }
        }
        for c in c..c1 {
            column(&rows, c, out, c - c0);
        }
    }
    let [first, second] = &sums;
    for (r, (g_row, u_row)) in first.iter().zip(second).take(count).enumerate() {
        let y = call.y.add((m0 + r) * call.n + c0);
        for (j, (&g, &u)) in g_row.iter().zip(u_row).take(c1 - c0).enumerate() {
            *y.add(j) = call.output(g, u);
        }
    }
}

/// One panel of up to `strips` strips of 16 columns from `c`, into
/// `out[r][at ..]`; the strips it took.
unsafe fn panel(rows: &Rows, c: usize, strips: usize, out: &mut Sums, at: usize) -> usize {
    // Accumulators per panel: rows × strips × 16 / lanes, at most 8 on x86
    // (16 registers) and 16 on aarch64 (32 registers).
    let strips = match rows.count {
        1 => strips.min(4),
        2 => strips.min(2),
        _ => 1,
    };
    macro_rules! dispatch {
        ($arch:ident) => {
            match (rows.count, strips, rows.call.int4) {
                (1, 1, false) => $arch::panel::<1, 1, false>(rows, c, out, at),
                (1, 2, false) => $arch::panel::<1, 2, false>(rows, c, out, at),
                (1, 3, false) => $arch::panel::<1, 3, false>(rows, c, out, at),
                (1, _, false) => $arch::panel::<1, 4, false>(rows, c, out, at),
                (2, 1, false) => $arch::panel::<2, 1, false>(rows, c, out, at),
                (2, _, false) => $arch::panel::<2, 2, false>(rows, c, out, at),
                (3, _, false) => $arch::panel::<3, 1, false>(rows, c, out, at),
                (_, _, false) => $arch::panel::<4, 1, false>(rows, c, out, at),
                (1, 1, true) => $arch::panel::<1, 1, true>(rows, c, out, at),
                (1, 2, true) => $arch::panel::<1, 2, true>(rows, c, out, at),
                (1, 3, true) => $arch::panel::<1, 3, true>(rows, c, out, at),
                (1, _, true) => $arch::panel::<1, 4, true>(rows, c, out, at),
                (2, 1, true) => $arch::panel::<2, 1, true>(rows, c, out, at),
                (2, _, true) => $arch::panel::<2, 2, true>(rows, c, out, at),
                (3, _, true) => $arch::panel::<3, 1, true>(rows, c, out, at),
                (_, _, true) => $arch::panel::<4, 1, true>(rows, c, out, at),
            }
        };
    }
    #[cfg(target_arch = "x86_64")]
    dispatch!(x86);
    #[cfg(target_arch = "aarch64")]
    dispatch!(aarch64);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        for j in 0..strips * BLOCK {
            column(rows, c + j, out, at + j);
        }
    }
    strips
}

/// One column `c` for the tile's rows, into `out[r][at]`: the reference's
/// steps, one element at a time.
unsafe fn column(rows: &Rows, c: usize, out: &mut Sums, at: usize) {
    let (call, w) = (rows.call, rows.w);
    let g = call.group;
    for gi in 0..call.k / g {
        let mut acc = [0f32; TILE_ROWS];
        for k in gi * g..(gi + 1) * g {
            let q = w.get(call.int4, k, c) as f32;
            for (a, x) in acc.iter_mut().zip(&rows.x).take(rows.count) {
                *a = (*x.add(k)).mul_add(q, *a);
            }
        }
        let s = w.scale(gi, c);
        for (o, a) in out.iter_mut().zip(acc).take(rows.count) {
            o[at] += a * s;
        }
    }
}
