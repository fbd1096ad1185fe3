//! The aarch64 strip of [`super::vector_strip`]: `sdot` on signed
//! activations by signed weights (the dot-product extension, which every
//! Cortex-A76 has, detected at run time).
//!
//! Per four rows of `K`: 16 weights of each row are loaded (16 `i8`
//! bytes, or 8 `i4` bytes whose nibbles are spread to bytes in column
//! order and sign-extended as `(n ^ 8) - 8`), and interleaved (`zip1`/
//! `zip2` of bytes, then of 16-bit pairs) so that each 32-bit lane holds
//! one column's four weights; one `sdot` per row of the tile and 4
//! columns adds the four products to that column's sum, and one by a
//! vector of ones adds the weights themselves to the column sums. After
//! each group, per row and lane: `sum - z·Σq` (wrapping `i32`), converted
//! to `f32`, times `s · scale`, added to the row's `f32` sums: the
//! reference's steps.
//!
//! `sdot` is written as inline assembly: its intrinsic is not yet stable.

use std::arch::aarch64::*;
use std::arch::asm;

use slmcc_ir::ops::qlayout::QLayout;

use super::{Strip, BLOCK, TILE_ROWS};

/// `acc + Σ` of the four products per 32-bit lane of `a` and `b`.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

#[target_feature(enable = "neon")]
#[inline]
unsafe fn load16(p: *const u8, int4: bool) -> int8x16_t {
    if !int4 {
        return vld1q_s8(p.cast());
    }
    let b = vld1_u8(p);
    let lo = vand_u8(b, vdup_n_u8(0x0f));
    let hi = vshr_n_u8::<4>(b);
    let v = vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi));
    let e = vdupq_n_s8(8);
    vsubq_s8(veorq_s8(vreinterpretq_s8_u8(v), e), e)
}

/// Four rows of `K` from `k` by 16 columns (`ws[j]`: columns `4j ..
/// 4j + 4`, each lane one column's four weights): the weights' sums into
/// `sums`, the products with each row's four activations into `acc`.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn step<const R: usize>(
    xs: &[*const u8; R],
    k: usize,
    ws: [int8x16_t; 4],
    sums: &mut [int32x4_t; 4],
    acc: &mut [[int32x4_t; 4]; R],
) {
    let ones = vdupq_n_s8(1);
    for (s, &wv) in sums.iter_mut().zip(&ws) {
        *s = sdot(*s, wv, ones);
    }
    for r in 0..R {
        let x4 = xs[r].add(k).cast::<i32>().read_unaligned();
        let xb = vreinterpretq_s8_s32(vdupq_n_s32(x4));
        for (a, &wv) in acc[r].iter_mut().zip(&ws) {
            *a = sdot(*a, wv, xb);
        }
    }
}

/// Steps 5 and 6 for `strip` into `out`.
///
/// # Safety
/// The CPU has the dot-product extension; the strip lies inside its
/// weight, whose `i4` rows start on a byte.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn strip_sdot(strip: Strip, out: &mut [[f32; BLOCK]; TILE_ROWS]) {
    match strip.tile.rows {
        1 => rows::<1>(strip, out),
        2 => rows::<2>(strip, out),
        3 => rows::<3>(strip, out),
        _ => rows::<TILE_ROWS>(strip, out),
    }
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn rows<const R: usize>(strip: Strip, out: &mut [[f32; BLOCK]; TILE_ROWS]) {
    let Strip {
        int4,
        w,
        tile,
        group,
        groups,
        c,
    } = strip;
    let row_bytes = if int4 { w.stride / 2 } else { w.stride };
    let zero = vdupq_n_s32(0);
    let xs: [*const u8; R] = std::array::from_fn(|r| tile.xq[r].as_ptr());
    let mut f = [[vdupq_n_f32(0.0); 4]; R];
    for gi in 0..groups {
        let k0 = gi * group;
        let mut acc = [[zero; 4]; R];
        let mut sums = [zero; 4];
        match w.layout {
            QLayout::RowMajor => {
                let mut p = w.row_ptr(int4, k0, c);
                for k in (k0..k0 + group).step_by(4) {
                    let r0 = load16(p, int4);
                    let r1 = load16(p.add(row_bytes), int4);
                    let r2 = load16(p.add(2 * row_bytes), int4);
                    let r3 = load16(p.add(3 * row_bytes), int4);
                    let t0 = vreinterpretq_s16_s8(vzip1q_s8(r0, r1));
                    let t1 = vreinterpretq_s16_s8(vzip2q_s8(r0, r1));
                    let t2 = vreinterpretq_s16_s8(vzip1q_s8(r2, r3));
                    let t3 = vreinterpretq_s16_s8(vzip2q_s8(r2, r3));
                    let ws = [
                        vreinterpretq_s8_s16(vzip1q_s16(t0, t2)),
                        vreinterpretq_s8_s16(vzip2q_s16(t0, t2)),
                        vreinterpretq_s8_s16(vzip1q_s16(t1, t3)),
                        vreinterpretq_s8_s16(vzip2q_s16(t1, t3)),
                    ];
                    step(&xs, k, ws, &mut sums, &mut acc);
                    p = p.add(4 * row_bytes);
                }
            }
            QLayout::Strips16 if !int4 => {
                let mut p = w.block_ptr(false, k0, c).cast::<i8>();
                for k in (k0..k0 + group).step_by(4) {
                    let ws = [
                        vld1q_s8(p),
                        vld1q_s8(p.add(16)),
                        vld1q_s8(p.add(32)),
                        vld1q_s8(p.add(48)),
                    ];
                    step(&xs, k, ws, &mut sums, &mut acc);
                    p = p.add(64);
                }
            }
            QLayout::Strips16 => {
                // A nibble holds `w & 15`: shifting it to the top of its
                // byte and back, arithmetically, sign-extends it.
                let mut p = w.block_ptr(true, k0, c).cast::<i8>();
                for k in (k0..k0 + group).step_by(8) {
                    let b = [
                        vld1q_s8(p),
                        vld1q_s8(p.add(16)),
                        vld1q_s8(p.add(32)),
                        vld1q_s8(p.add(48)),
                    ];
                    let low = b.map(|v| vshrq_n_s8::<4>(vshlq_n_s8::<4>(v)));
                    let high = b.map(|v| vshrq_n_s8::<4>(v));
                    step(&xs, k, low, &mut sums, &mut acc);
                    step(&xs, k + 4, high, &mut sums, &mut acc);
                    p = p.add(64);
                }
            }
        }
        let sc = w.scale.add(gi * w.stride + w.col0 + c);
        for r in 0..R {
            let zc = vdupq_n_s32(tile.zc[r]);
            let sv = vdupq_n_f32(tile.s[r]);
            for j in 0..4 {
                let a = vsubq_s32(acc[r][j], vmulq_s32(zc, sums[j]));
                let m = vmulq_f32(vcvtq_f32_s32(a), vmulq_f32(sv, vld1q_f32(sc.add(4 * j))));
                f[r][j] = vaddq_f32(f[r][j], m);
            }
        }
    }
    for r in 0..R {
        for (j, v) in f[r].iter().enumerate() {
            vst1q_f32(out[r].as_mut_ptr().add(4 * j), *v);
        }
    }
}
