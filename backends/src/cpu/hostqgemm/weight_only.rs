//! Weight-only products (`qmatmul`/`qswiglu` with `activations = "f32"`):
//! `f32` activations by the dequantized weight, in the reference's
//! operations (`slmcc_ir::ops::qmatmul`): per output element, for `k` in
//! increasing order, `acc += x[k] · (q[k, n] as f32 · scale[k / G, n])`,
//! each product rounded, no fused multiply-add. Lanes are output columns,
//! so the vectors compute exactly those steps, 16 columns at a time, and
//! the result is bit-exact with the reference.
//!
//! The weights are read row-major as stored (`i8`, or `i4` two per byte):
//! 16 columns of a row are 16 bytes, or 8 bytes whose nibbles are
//! sign-extended by shifts. The loops are plain Rust over fixed-size
//! arrays, compiled once more with AVX2 enabled on x86-64 (chosen at run
//! time) so that they run on 256-bit vectors; NEON's 128-bit ones are the
//! aarch64 baseline.

use slmcc_ir::ops::fused_util::sigmoid;
use slmcc_ir::ops::qlayout::QLayout;

use super::{Call, Weight, BLOCK, CHUNK, TILE_ROWS};
use crate::cpu::threads::parallel_for;

/// Multiply-adds below which a call runs on the calling thread alone.
const PARALLEL_MIN_MACS: usize = 1 << 18;

/// The weight-only product `call` describes, on up to `threads` threads.
///
/// # Safety
/// As [`super::slmcc_qgemm`].
pub(super) unsafe fn run(call: &Call, threads: usize) {
    if call.rows == 0 || call.n == 0 {
        return;
    }
    let tasks = call.n.div_ceil(CHUNK);
    let task = |t: usize| {
        let (c0, c1) = (t * CHUNK, ((t + 1) * CHUNK).min(call.n));
        let mut m = 0;
        while m < call.rows {
            let rows = (call.rows - m).min(TILE_ROWS);
            // SAFETY: the caller's contract; task `t` writes its own columns.
            unsafe { chunk(call, m, rows, c0, c1) };
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

/// A tile's rows of `x`, and the call they belong to.
struct Rows<'a> {
    call: &'a Call,
    /// Each row's first element (past `count`, the last row again).
    x: [*const f32; TILE_ROWS],
    count: usize,
}

/// Per row of a tile, the sums of up to 16 columns.
type Sums = [[f32; BLOCK]; TILE_ROWS];

/// Columns `c0 .. c1` of result rows `m0 .. m0 + count`.
unsafe fn chunk(call: &Call, m0: usize, count: usize, c0: usize, c1: usize) {
    let ws = &call.weights[..call.count];
    // Strips read row-major weights, an i4 strip a byte at a time: its
    // first element must be even. Other weights take the plain loop.
    let aligned = ws[0].layout == QLayout::RowMajor
        && (!call.int4 || ws.iter().all(|w| w.stride % 2 == 0 && w.col0 % 2 == 0));
    let rows = Rows {
        call,
        x: std::array::from_fn(|r| call.x.add((m0 + r.min(count - 1)) * call.k)),
        count,
    };
    let mut c = c0;
    while c < c1 {
        let width = if aligned && c + BLOCK <= c1 { BLOCK } else { 1 };
        let mut sums = [[[0f32; BLOCK]; TILE_ROWS]; 2];
        for (w, out) in ws.iter().zip(&mut sums) {
            if width == BLOCK {
                strip(&rows, w, c, out);
            } else {
                column(&rows, w, c, out);
            }
        }
        let [first, second] = &sums;
        for (r, (g_row, u_row)) in first.iter().zip(second).take(count).enumerate() {
            let y = call.y.add((m0 + r) * call.n + c);
            for (j, (&g, &u)) in g_row.iter().zip(u_row).take(width).enumerate() {
                *y.add(j) = match call.count {
                    1 => g,
                    _ => (g * sigmoid(g)) * u,
                };
            }
        }
        c += width;
    }
}

/// One column `c` of weight `w` for the tile's rows, into `out[r][0]`.
unsafe fn column(rows: &Rows, w: &Weight, c: usize, out: &mut Sums) {
    let call = rows.call;
    for k in 0..call.k {
        let d = w.get(call.int4, k, c) as f32 * w.scale(k / call.group, c);
        for (o, x) in out.iter_mut().zip(&rows.x).take(rows.count) {
            o[0] += *x.add(k) * d;
        }
    }
}

/// Columns `c .. c + 16` of weight `w` for the tile's rows into `out`.
unsafe fn strip(rows: &Rows, w: &Weight, c: usize, out: &mut Sums) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        return strip_avx2(rows, w, c, out);
    }
    strip_rows(rows, w, c, out)
}

/// [`strip_rows`] on 256-bit vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn strip_avx2(rows: &Rows, w: &Weight, c: usize, out: &mut Sums) {
    strip_rows(rows, w, c, out)
}

/// [`strip_tile`] for the tile's number of rows.
#[inline(always)]
unsafe fn strip_rows(rows: &Rows, w: &Weight, c: usize, out: &mut Sums) {
    match rows.count {
        1 => strip_tile::<1>(rows, w, c, out),
        2 => strip_tile::<2>(rows, w, c, out),
        3 => strip_tile::<3>(rows, w, c, out),
        _ => strip_tile::<TILE_ROWS>(rows, w, c, out),
    }
}

/// Columns `c .. c + 16` of row-major weight `w` for `R` rows: per group
/// its 16 scales, per row of `K` the 16 weights dequantized, then each
/// row's products added in increasing `k` (the reference's order).
#[inline(always)]
unsafe fn strip_tile<const R: usize>(rows: &Rows, w: &Weight, c: usize, out: &mut Sums) {
    let (call, x) = (rows.call, &rows.x);
    let mut acc = [[0f32; BLOCK]; R];
    for gi in 0..call.k / call.group {
        let sc = w
            .scale
            .add(gi * w.stride + w.col0 + c)
            .cast::<[f32; BLOCK]>()
            .read_unaligned();
        for k in gi * call.group..(gi + 1) * call.group {
            let p = w.row_ptr(call.int4, k, c);
            let q: [i8; BLOCK] = if call.int4 {
                let b = p.cast::<[u8; BLOCK / 2]>().read_unaligned();
                std::array::from_fn(|j| {
                    let byte = b[j / 2] as i8;
                    if j % 2 == 0 {
                        (byte << 4) >> 4
                    } else {
                        byte >> 4
                    }
                })
            } else {
                p.cast::<[i8; BLOCK]>().read_unaligned()
            };
            let d: [f32; BLOCK] = std::array::from_fn(|j| q[j] as f32 * sc[j]);
            for (r, a) in acc.iter_mut().enumerate() {
                let xv = *x[r].add(k);
                for (a, &d) in a.iter_mut().zip(&d) {
                    *a += xv * d;
                }
            }
        }
    }
    out[..R].iter_mut().zip(&acc).for_each(|(o, a)| *o = *a);
}
