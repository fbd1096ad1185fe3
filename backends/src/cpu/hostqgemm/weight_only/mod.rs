//! Weight-only products (`qmatmul`/`qswiglu` with `activations = "f32"`):
//! `f32` activations by the stored weights, in the reference's operations
//! (`slmcc_ir::ops::qmatmul`): per group, `a = fma(x[k], q[k, n] as f32,
//! a)` for `k` in increasing order from `+0.0`, then `y += a · scale[g, n]`
//! (rounded product, then the sum), groups in increasing order. Lanes are
//! output columns, so vectors compute exactly those steps and the result
//! is bit-exact with the reference.
//!
//! Panels of `16·S` columns by up to [`TILE_ROWS`] rows, `S` chosen so
//! that the panel's accumulators fill the vector registers without
//! spilling ([`max_strips`]), read the weights in one of two layouts:
//!
//! - `strips16` (what `pack-weights` stores): each strip of 16 columns is
//!   one contiguous run of 64-byte blocks, so a panel streams its weights
//!   from memory in order. A block holds 8 (`i4`) or 4 (`i8`) rows, and the
//!   32-bit lane `j` of a block holds column `j`'s weights of those rows:
//!   one row's 16 weights are one shift (and, for `i8` and on AVX2, a
//!   sign-extending shift back) per lane away from the lanes of a vector,
//!   already in column order ([`for_block_rows`]). On AVX-512 a `vpermps`
//!   over a 16-entry table makes an `i4` row's floats from its nibbles
//!   directly (`x86.rs`).
//! - row-major, as the weights are without `pack-weights`: a panel reads
//!   `16·S` weights of each row, prefetching them [`PREFETCH_ROWS`] rows
//!   ahead (rows are `N` bytes apart, which the prefetchers do not follow).
//!
//! The vector panels ([`Panels`], chosen once per process): AVX2 with FMA
//! and AVX-512 on x86-64 (`x86.rs`), NEON on aarch64 (every aarch64 CPU,
//! `aarch64.rs`). Columns past the last whole strip of 16, an `i4` weight
//! whose rows do not start on a byte, a group that splits a `strips16`
//! block, weights in another layout, and CPUs without those instructions
//! take the plain loop ([`column`]), whose `f32::mul_add` is the same
//! fused operation.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::sync::OnceLock;

use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::DType;

use super::{Call, Weight, BLOCK, CHUNK, PARALLEL_MIN_MACS, TILE_ROWS};
use crate::cpu::threads::parallel_for;

/// How many rows of `K` ahead the row-major panels prefetch their
/// weights: rows are `N` bytes apart (half that for `i4`), mostly a page
/// or more, which the hardware prefetchers do not follow; without it
/// decode waits on memory (the W4 decode step of `llama_h512` took 1.7x as
/// long).
const PREFETCH_ROWS: usize = 8;

/// How many bytes ahead in each strip the `strips16` panels prefetch:
/// eight blocks, 64 (`i4`) or 32 (`i8`) rows.
const PREFETCH_BYTES: usize = 8 * 64;

/// Invokes `$step!(r, shl)` for every row `r` of a `strips16` block, in
/// order: 8 rows for `i4`, 4 for `i8`. `shl` is the left shift that puts
/// row `r`'s weight at the top of its column's 32-bit lane (an `i4` row
/// `r` is the nibble at bit `8·(r % 4) + 4·(r / 4)`, an `i8` row the byte
/// at bit `8·r`), so an arithmetic shift right by 28 (24) then gives it
/// sign-extended.
macro_rules! for_block_rows {
    (i4, $step:ident) => {
        $step!(0, 28);
        $step!(1, 20);
        $step!(2, 12);
        $step!(3, 4);
        $step!(4, 24);
        $step!(5, 16);
        $step!(6, 8);
        $step!(7, 0);
    };
    (i8, $step:ident) => {
        $step!(0, 24);
        $step!(1, 16);
        $step!(2, 8);
        $step!(3, 0);
    };
}
pub(crate) use for_block_rows;

/// The addresses of the first and last byte (at most 64 bytes apart) of
/// the weights a row-major panel of `S` strips reads [`PREFETCH_ROWS`]
/// rows after the row at `p`: what the panels prefetch. Prefetching never
/// faults, so the addresses may lie past the weight.
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

/// The vector panels a CPU runs (each variant is made only on its
/// architecture).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)]
pub(super) enum Panels {
    /// The plain loop only.
    Plain,
    /// x86-64 AVX2 with FMA (256-bit).
    Avx2,
    /// x86-64 AVX-512 (512-bit) for `strips16` weights, AVX2 for
    /// row-major ones.
    Avx512,
    /// aarch64 NEON (128-bit).
    Neon,
}

/// The panels of this CPU (detected once).
pub(super) fn detect() -> Panels {
    static PANELS: OnceLock<Panels> = OnceLock::new();
    *PANELS.get_or_init(|| *available().last().expect("the plain loop"))
}

/// Every set of panels this CPU runs, the plain loop first (the tests
/// check each against the reference).
pub(super) fn available() -> Vec<Panels> {
    let mut panels = vec![Panels::Plain];
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        panels.push(Panels::Avx2);
        if std::arch::is_x86_feature_detected!("avx512f") {
            panels.push(Panels::Avx512);
        }
    }
    #[cfg(target_arch = "aarch64")]
    panels.push(Panels::Neon);
    panels
}

/// The weight-only product `call` describes, on up to `threads` threads,
/// with this CPU's panels.
///
/// # Safety
/// As [`super::slmcc_qgemm`].
pub(super) unsafe fn run(call: &Call, threads: usize) {
    // SAFETY: the caller's contract.
    unsafe { run_with(call, threads, detect()) }
}

/// [`run`] with `panels` (one of [`available`]).
///
/// # Safety
/// As [`super::slmcc_qgemm`]; `panels` runs on this CPU.
pub(super) unsafe fn run_with(call: &Call, threads: usize, panels: Panels) {
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
            unsafe { chunk(call, panels, m, rows, c0, c1) };
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

/// A tile's rows of `x` and one weight, for the panels.
pub(super) struct Rows<'a> {
    call: &'a Call,
    w: &'a Weight,
    /// Each row's first element (past `count`, the last row again).
    x: [*const f32; TILE_ROWS],
    count: usize,
}

/// How a chunk's weights are read by the vector panels.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Row by row (row-major weights whose rows start on a byte).
    Rows,
    /// Block by block (`strips16`, each block in one group).
    Blocks,
}

/// How the vector panels read `call`'s weights, if they can.
fn read(call: &Call) -> Option<Read> {
    let ws = &call.weights[..call.count];
    match ws[0].layout {
        // `i4` rows are read a byte at a time: a row's first element must
        // be even.
        QLayout::RowMajor
            if !call.int4 || ws.iter().all(|w| w.stride % 2 == 0 && w.col0 % 2 == 0) =>
        {
            Some(Read::Rows)
        }
        // Chunks start at multiples of 16 columns; each strip must be one
        // of the layout's, and each block in one group.
        QLayout::Strips16
            if ws.iter().all(|w| w.col0 % BLOCK == 0)
                && call
                    .group
                    .is_multiple_of(QLayout::block_rows(weight_dtype(call))) =>
        {
            Some(Read::Blocks)
        }
        _ => None,
    }
}

fn weight_dtype(call: &Call) -> DType {
    if call.int4 {
        DType::I4
    } else {
        DType::I8
    }
}

/// Columns `c0 .. c1` (one chunk) of result rows `m0 .. m0 + count`.
unsafe fn chunk(call: &Call, panels: Panels, m0: usize, count: usize, c0: usize, c1: usize) {
    let ws = &call.weights[..call.count];
    let read = read(call).filter(|_| panels != Panels::Plain);
    let x = std::array::from_fn(|r| call.x.add((m0 + r.min(count - 1)) * call.k));
    let mut sums = [[[0f32; CHUNK]; TILE_ROWS]; 2];
    for (w, out) in ws.iter().zip(&mut sums) {
        let rows = Rows { call, w, x, count };
        let mut c = c0;
        if let Some(read) = read {
            while c + BLOCK <= c1 {
                c += BLOCK * panel(panels, read, &rows, c, (c1 - c) / BLOCK, out, c - c0);
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

/// The most strips of 16 columns a panel of `rows` rows takes: its
/// accumulators (rows × strips × 16 / lanes) fill at most half the vector
/// registers, 8 of AVX2's 16, 16 of AVX-512's and NEON's 32.
fn max_strips(panels: Panels, read: Read, rows: usize) -> usize {
    let zmm = panels == Panels::Avx512 && read == Read::Blocks;
    match (rows, zmm) {
        (_, true) => 4,
        (1, false) => 4,
        (2, false) => 2,
        _ => 1,
    }
}

/// One panel of up to `strips` strips of 16 columns from `c`, into
/// `out[r][at ..]`; the strips it took.
unsafe fn panel(
    panels: Panels,
    read: Read,
    rows: &Rows,
    c: usize,
    strips: usize,
    out: &mut Sums,
    at: usize,
) -> usize {
    let strips = strips.min(max_strips(panels, read, rows.count));
    // Every (rows, strips, i4) a panel is instantiated for: `$f::<R, S, I4>`.
    macro_rules! dispatch {
        ($m:ident :: $f:ident) => {
            match (rows.count.min(TILE_ROWS), strips, rows.call.int4) {
                (1, 1, false) => $m::$f::<1, 1, false>(rows, c, out, at),
                (1, 2, false) => $m::$f::<1, 2, false>(rows, c, out, at),
                (1, 3, false) => $m::$f::<1, 3, false>(rows, c, out, at),
                (1, _, false) => $m::$f::<1, 4, false>(rows, c, out, at),
                (2, 1, false) => $m::$f::<2, 1, false>(rows, c, out, at),
                (2, 2, false) => $m::$f::<2, 2, false>(rows, c, out, at),
                (2, 3, false) => $m::$f::<2, 3, false>(rows, c, out, at),
                (2, _, false) => $m::$f::<2, 4, false>(rows, c, out, at),
                (3, 1, false) => $m::$f::<3, 1, false>(rows, c, out, at),
                (3, 2, false) => $m::$f::<3, 2, false>(rows, c, out, at),
                (3, 3, false) => $m::$f::<3, 3, false>(rows, c, out, at),
                (3, _, false) => $m::$f::<3, 4, false>(rows, c, out, at),
                (_, 1, false) => $m::$f::<4, 1, false>(rows, c, out, at),
                (_, 2, false) => $m::$f::<4, 2, false>(rows, c, out, at),
                (_, 3, false) => $m::$f::<4, 3, false>(rows, c, out, at),
                (_, _, false) => $m::$f::<4, 4, false>(rows, c, out, at),
                (1, 1, true) => $m::$f::<1, 1, true>(rows, c, out, at),
                (1, 2, true) => $m::$f::<1, 2, true>(rows, c, out, at),
                (1, 3, true) => $m::$f::<1, 3, true>(rows, c, out, at),
                (1, _, true) => $m::$f::<1, 4, true>(rows, c, out, at),
                (2, 1, true) => $m::$f::<2, 1, true>(rows, c, out, at),
                (2, 2, true) => $m::$f::<2, 2, true>(rows, c, out, at),
                (2, 3, true) => $m::$f::<2, 3, true>(rows, c, out, at),
                (2, _, true) => $m::$f::<2, 4, true>(rows, c, out, at),
                (3, 1, true) => $m::$f::<3, 1, true>(rows, c, out, at),
                (3, 2, true) => $m::$f::<3, 2, true>(rows, c, out, at),
                (3, 3, true) => $m::$f::<3, 3, true>(rows, c, out, at),
                (3, _, true) => $m::$f::<3, 4, true>(rows, c, out, at),
                (_, 1, true) => $m::$f::<4, 1, true>(rows, c, out, at),
                (_, 2, true) => $m::$f::<4, 2, true>(rows, c, out, at),
                (_, 3, true) => $m::$f::<4, 3, true>(rows, c, out, at),
                (_, _, true) => $m::$f::<4, 4, true>(rows, c, out, at),
            }
        };
    }
    match (panels, read) {
        #[cfg(target_arch = "x86_64")]
        (Panels::Avx2 | Panels::Avx512, Read::Rows) => dispatch!(x86::rows_avx2),
        #[cfg(target_arch = "x86_64")]
        (Panels::Avx2, Read::Blocks) => dispatch!(x86::blocks_avx2),
        #[cfg(target_arch = "x86_64")]
        (Panels::Avx512, Read::Blocks) => dispatch!(x86::blocks_avx512),
        #[cfg(target_arch = "aarch64")]
        (Panels::Neon, Read::Rows) => dispatch!(aarch64::rows),
        #[cfg(target_arch = "aarch64")]
        (Panels::Neon, Read::Blocks) => dispatch!(aarch64::blocks),
        _ => {
            for j in 0..strips * BLOCK {
                column(rows, c + j, out, at + j);
            }
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
