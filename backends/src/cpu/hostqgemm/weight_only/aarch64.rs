//! The weight-only panels on NEON (128-bit, 4 lanes; every aarch64 CPU).
//!
//! Row-major ([`rows`]): per row of `K`, a strip of 16 columns is four
//! vectors of 4 `f32` weights, widened from 16 `i8` bytes (`sxtl`/`sxtl2`
//! twice) and converted. `i4` weights come from the strip's 8 bytes: the
//! low nibbles (even columns) and the high ones (odd columns) are
//! sign-extended by shifts and interleaved (`zip1`/`zip2`) into 16 bytes in
//! column order, which then take the `i8` path.
//!
//! `strips16` ([`blocks`]): a strip's 64-byte block is four vectors, lane
//! `j` of vector `h` holding column `4·h + j`; a row's weights are a shift
//! left (`shl`) and an arithmetic shift right (`sshr`) away, then
//! converted (`scvtf`).
//!
//! `fmla` by the broadcast activation is the reference's fused step; at
//! the end of a group each accumulator is multiplied by the scales
//! (`fmul`) and added to the sums (`fadd`), two rounded operations as the
//! reference's are.

use std::arch::aarch64::*;
use std::arch::asm;

use super::{for_block_rows, prefetch_lines, Rows, Sums, PREFETCH_BYTES};
use crate::cpu::hostqgemm::BLOCK;

/// `R` rows by `S` strips of 16 columns from `c` of a row-major weight
/// (`i4` when `I4`), into `out[r][at ..]`.
///
/// # Safety
/// The call's buffers hold what its shapes say; the weights are row-major
/// and (`i4`) the strip's first element is even.
#[target_feature(enable = "neon")]
pub(super) unsafe fn rows<const R: usize, const S: usize, const I4: bool>(
    rows: &Rows,
    c: usize,
    out: &mut Sums,
    at: usize,
) {
    let (call, w) = (rows.call, rows.w);
    let g = call.group;
    for gi in 0..call.k / g {
        let mut acc = [[vdupq_n_f32(0.0); 16]; R];
        for k in gi * g..(gi + 1) * g {
            let p = w.row_ptr(I4, k, c);
            for line in prefetch_lines::<S, I4>(w, p) {
                prefetch(line);
            }
            let mut wv = [vdupq_n_f32(0.0); 16];
            for s in 0..S {
                let bytes = if I4 {
                    nibbles(p.add(s * BLOCK / 2))
                } else {
                    vld1q_s8(p.add(s * BLOCK).cast())
                };
                wv[4 * s..4 * s + 4].copy_from_slice(&widen(bytes));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xb = vdupq_n_f32(*rows.x[r].add(k));
                for (a, &v) in acc.iter_mut().zip(&wv).take(4 * S) {
                    *a = vfmaq_f32(*a, xb, v);
                }
            }
        }
        let scale = w.scale.add(gi * w.stride + w.col0 + c);
        for (acc, o) in acc.iter().zip(out.iter_mut()) {
            for (j, &a) in acc.iter().enumerate().take(4 * S) {
                scale_add(a, scale.add(4 * j), o.as_mut_ptr().add(at + 4 * j));
            }
        }
    }
}

/// `R` rows by `S` strips of 16 columns from `c` of a `strips16` weight
/// (`i4` when `I4`), into `out[r][at ..]`.
///
/// # Safety
/// The call's buffers hold what its shapes say; the weights are in
/// `strips16`, `col0 + c` is a multiple of 16 and the group a multiple of
/// a block's rows.
#[target_feature(enable = "neon")]
pub(super) unsafe fn blocks<const R: usize, const S: usize, const I4: bool>(
    rows: &Rows,
    c: usize,
    out: &mut Sums,
    at: usize,
) {
    let (call, w) = (rows.call, rows.w);
    let (g, block_rows) = (call.group, if I4 { 8 } else { 4 });
    for gi in 0..call.k / g {
        let mut acc = [[[vdupq_n_f32(0.0); 4]; S]; R];
        let mut k = gi * g;
        while k < (gi + 1) * g {
            let p: [*const u8; S] = std::array::from_fn(|s| w.block_ptr(I4, k, c + s * BLOCK));
            for &q in &p {
                prefetch(q.wrapping_add(PREFETCH_BYTES));
            }
            // Row `k + $r`: each lane's weight shifted to its top, then
            // back down with its sign.
            macro_rules! step {
                ($r:literal, $shl:literal) => {{
                    let mut wv = [[vdupq_n_f32(0.0); 4]; S];
                    for (v, &p) in wv.iter_mut().zip(&p) {
                        for (h, v) in v.iter_mut().enumerate() {
                            let lanes = vld1q_s32(p.add(16 * h).cast());
                            let top = vshlq_n_s32::<$shl>(lanes);
                            let q = if I4 {
                                vshrq_n_s32::<28>(top)
                            } else {
                                vshrq_n_s32::<24>(top)
                            };
                            *v = vcvtq_f32_s32(q);
                        }
                    }
                    for (acc, x) in acc.iter_mut().zip(&rows.x) {
                        let xb = vdupq_n_f32(*x.add(k + $r));
                        for (a, v) in acc.iter_mut().zip(&wv) {
                            for (a, &v) in a.iter_mut().zip(v) {
                                *a = vfmaq_f32(*a, xb, v);
                            }
                        }
                    }
                }};
            }
            if I4 {
                for_block_rows!(i4, step);
            } else {
                for_block_rows!(i8, step);
            }
            k += block_rows;
        }
        let scale = w.scale.add(gi * w.stride + w.col0 + c);
        for (acc, o) in acc.iter().zip(out.iter_mut()) {
            for (s, a) in acc.iter().enumerate() {
                for (h, &a) in a.iter().enumerate() {
                    let j = s * BLOCK + 4 * h;
                    scale_add(a, scale.add(j), o.as_mut_ptr().add(at + j));
                }
            }
        }
    }
}

/// `y[0..4] += a · scale[0..4]`: the product rounded, then the sum.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn scale_add(a: float32x4_t, scale: *const f32, y: *mut f32) {
    let prod = vmulq_f32(a, vld1q_f32(scale));
    vst1q_f32(y, vaddq_f32(vld1q_f32(y), prod));
}

/// 16 `i4` weights in the 8 bytes at `p` as 16 `i8` in column order.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn nibbles(p: *const u8) -> int8x16_t {
    let b = vld1_s8(p.cast());
    let even = vshr_n_s8::<4>(vshl_n_s8::<4>(b));
    let odd = vshr_n_s8::<4>(b);
    vcombine_s8(vzip1_s8(even, odd), vzip2_s8(even, odd))
}

/// 16 `i8` as four vectors of 4 `f32`, in order.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn widen(b: int8x16_t) -> [float32x4_t; 4] {
    let lo = vmovl_s8(vget_low_s8(b));
    let hi = vmovl_high_s8(b);
    let f = |v: int32x4_t| vcvtq_f32_s32(v);
    [
        f(vmovl_s16(vget_low_s16(lo))),
        f(vmovl_high_s16(lo)),
        f(vmovl_s16(vget_low_s16(hi))),
        f(vmovl_high_s16(hi)),
    ]
}

/// Asks for the cache line at `p` (`prfm pldl1keep`, a hint: any address
/// is allowed; its intrinsic is not yet stable).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn prefetch(p: *const u8) {
    asm!("prfm pldl1keep, [{0}]", in(reg) p, options(nostack, readonly, preserves_flags));
}
