//! The aarch64 block of [`super::vector_block`]: `sdot` on signed
//! activations by signed weights (the dot-product extension, which every
//! Cortex-A76 has, detected at run time).
//!
//! Per four rows of `K`: 16 weights of each row are loaded (16 `i8`
//! bytes, or 8 `i4` bytes whose nibbles are spread to bytes in column
//! order and sign-extended as `(n ^ 8) - 8`), and interleaved (`zip1`/
//! `zip2` of bytes, then of 16-bit pairs) so that each 32-bit lane holds
//! one column's four weights; one `sdot` per row of the tile and 4
//! columns adds the four products to that column's sum, and one by a
//! vector of ones adds the weights themselves to the column sums.
//!
//! `sdot` is written as inline assembly: its intrinsic is not yet stable.

use std::arch::aarch64::*;
use std::arch::asm;

use super::{BlockSums, Span, TILE_ROWS};

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

/// `block` for rows `k0 .. k0 + 4·steps` and columns `c .. c + 16`
/// (stored over its contents).
///
/// # Safety
/// The CPU has the dot-product extension; the rows and columns lie
/// inside `w`, whose `i4` rows start on a byte.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn block_sdot(span: Span, block: &mut BlockSums) {
    match span.tile.rows {
        1 => rows::<1>(span, block),
        2 => rows::<2>(span, block),
        3 => rows::<3>(span, block),
        _ => rows::<TILE_ROWS>(span, block),
    }
}

#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn rows<const R: usize>(span: Span, block: &mut BlockSums) {
    let Span {
        int4,
        w,
        tile,
        k0,
        steps,
        c,
    } = span;
    let row_bytes = if int4 { w.stride / 2 } else { w.stride };
    let mut p = w.row_ptr(int4, k0, c);
    let ones = vdupq_n_s8(1);
    let zero = vdupq_n_s32(0);
    let mut acc = [[zero; 4]; R];
    let mut sums = [zero; 4];
    let xs: [*const u8; R] = std::array::from_fn(|r| tile.xq[r].as_ptr().add(k0));
    for step in 0..steps {
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
        for (s, &wv) in sums.iter_mut().zip(&ws) {
            *s = sdot(*s, wv, ones);
        }
        for r in 0..R {
            let x4 = xs[r].add(4 * step).cast::<i32>().read_unaligned();
            let xb = vreinterpretq_s8_s32(vdupq_n_s32(x4));
            for (a, &wv) in acc[r].iter_mut().zip(&ws) {
                *a = sdot(*a, wv, xb);
            }
        }
        p = p.add(4 * row_bytes);
    }
    for (j, s) in sums.iter().enumerate() {
        vst1q_s32(block.csum.as_mut_ptr().add(4 * j), *s);
    }
    for r in 0..R {
        for (j, a) in acc[r].iter().enumerate() {
            vst1q_s32(block.raw[r].as_mut_ptr().add(4 * j), *a);
        }
    }
}
