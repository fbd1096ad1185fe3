//! The aarch64 strip of [`super::vector_strip`]: `sdot` on signed
//! activations by signed weights (the dot-product extension, which every
//! Cortex-A76 has, detected at run time).
//!
//! Per four rows of `K`: 16 weights of each row are loaded (16 `i8`
//! bytes, or 8 `i4` bytes whose nibbles are spread to bytes in column
//! order and sign-extended as `(n ^ 8) - 8`), and interleaved (`zip1`/
//! `zip2` of bytes, then of 16-bit pairs) so that each 32-bit lane holds
//! one column's four weights (`strips16` stores them so; the NPU's
//! `rk3588` layout stores each column's four as one 32-bit word, loaded
//! lane by lane at a stride of 32 bytes); one `sdot` per row of the tile and 4
//! columns adds the four products to that column's sum, and one by a
//! vector of ones adds the weights themselves to the column sums. After
//! each group, per row and lane: `sum - z·Σq` (wrapping `i32`), converted
//! to `f32`, times `s · scale`, added to the row's `f32` sums: the
//! reference's steps.
//!
//! `sdot` and `smmla` are written as inline assembly: their intrinsics are
//! not yet stable.
//!
//! Where the CPU has the int8 matrix multiply (FEAT_I8MM: Cortex-A710,
//! X2 and later; not the RK3588's A76), tiles of two rows or more over
//! `strips16` weights take `smmla` instead ([`strip_i8mm`]): per eight
//! rows of `K`, the two 4-row blocks' 32-bit lanes zipped give each
//! column pair's eight weights, and one `smmla` adds a 2×2 block (two
//! rows by two columns) of products, twice `sdot`'s work per instruction.

use std::arch::aarch64::*;
use std::arch::asm;

use slmcc_ir::ops::qlayout::QLayout;

use super::{Strip, BLOCK, TILE_ROWS};

/// `fn $name(acc, a, b)`: the instruction `$insn acc.4s, a.16b, b.16b`
/// (inline assembly: the intrinsics of both are not yet stable).
macro_rules! int8_accumulate {
    ($(#[$doc:meta])* $name:ident, $features:literal, $insn:literal) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn $name(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
            let mut acc = acc;
            asm!(
                concat!($insn, " {acc:v}.4s, {a:v}.16b, {b:v}.16b"),
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
            acc
        }
    };
}

int8_accumulate!(
    /// `acc + Σ` of the four products per 32-bit lane of `a` and `b`.
    sdot,
    "neon,dotprod",
    "sdot"
);

int8_accumulate!(
    /// `acc + a·bᵀ` as 2×2 `i32`: the rows of `a` are its two 8-byte
    /// halves, the columns of `b` likewise.
    smmla,
    "neon,i8mm",
    "smmla"
);

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
            QLayout::Rk3588 { .. } => {
                // Column j's weights of rows k..k+4 are one 32-bit word,
                // 32 bytes past column j - 1's (one block of 32 kernels).
                for k in (k0..k0 + group).step_by(4) {
                    let p = w.npu_ptr(k, c);
                    let word = |j: usize| p.add(32 * j).cast::<i32>().read_unaligned();
                    let ws = std::array::from_fn(|v| {
                        let lanes = [
                            word(4 * v),
                            word(4 * v + 1),
                            word(4 * v + 2),
                            word(4 * v + 3),
                        ];
                        vreinterpretq_s8_s32(vld1q_s32(lanes.as_ptr()))
                    });
                    step(&xs, k, ws, &mut sums, &mut acc);
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

/// [`strip_sdot`] on `smmla` for `strips16` weights, groups of a multiple
/// of 8 rows and tiles of two rows or more; anything else (decode's one
/// row among them, where half of each `smmla` would be wasted) takes
/// [`strip_sdot`]. The integer sums are the same, so is the epilogue.
///
/// # Safety
/// As [`strip_sdot`]; the CPU has the int8 matrix multiply.
#[target_feature(enable = "neon,dotprod,i8mm")]
pub(super) unsafe fn strip_i8mm(strip: Strip, out: &mut [[f32; BLOCK]; TILE_ROWS]) {
    if strip.w.layout != QLayout::Strips16 || strip.tile.rows < 2 || strip.group % 8 != 0 {
        return strip_sdot(strip, out);
    }
    match strip.tile.rows {
        2 => pairs::<1>(strip, out),
        // Three rows: the fourth is a copy of the first (`Tile`'s filler),
        // computed and dropped.
        _ => pairs::<2>(strip, out),
    }
}

/// `P` pairs of the tile's rows by the strip's 16 columns on `smmla`.
#[target_feature(enable = "neon,dotprod,i8mm")]
#[inline]
unsafe fn pairs<const P: usize>(strip: Strip, out: &mut [[f32; BLOCK]; TILE_ROWS]) {
    let Strip {
        int4,
        w,
        tile,
        group,
        groups,
        c,
    } = strip;
    let zero = vdupq_n_s32(0);
    let ones = vdupq_n_s8(1);
    let xs: [*const i8; TILE_ROWS] = std::array::from_fn(|r| tile.xq[r].as_ptr().cast());
    let mut f = [[vdupq_n_f32(0.0); 4]; TILE_ROWS];
    for gi in 0..groups {
        let k0 = gi * group;
        // acc[p][2j + h]: rows 2p, 2p + 1 by columns 4j + 2h, 4j + 2h + 1,
        // as [r0 c0, r0 c1, r1 c0, r1 c1].
        let mut acc = [[zero; 8]; P];
        let mut sums = [zero; 4];
        let mut p = w.block_ptr(int4, k0, c).cast::<i8>();
        for k in (k0..k0 + group).step_by(8) {
            let load = |q: *const i8| {
                [
                    vld1q_s8(q),
                    vld1q_s8(q.add(16)),
                    vld1q_s8(q.add(32)),
                    vld1q_s8(q.add(48)),
                ]
            };
            // Rows k .. k + 4 and k + 4 .. k + 8, each lane one column.
            let (lo, hi) = if int4 {
                let b = load(p);
                p = p.add(64);
                (
                    b.map(|v| vshrq_n_s8::<4>(vshlq_n_s8::<4>(v))),
                    b.map(|v| vshrq_n_s8::<4>(v)),
                )
            } else {
                let pair = (load(p), load(p.add(64)));
                p = p.add(128);
                pair
            };
            let mut m = [vdupq_n_s8(0); 8];
            for j in 0..4 {
                sums[j] = sdot(sdot(sums[j], lo[j], ones), hi[j], ones);
                let (l, h) = (vreinterpretq_s32_s8(lo[j]), vreinterpretq_s32_s8(hi[j]));
                m[2 * j] = vreinterpretq_s8_s32(vzip1q_s32(l, h));
                m[2 * j + 1] = vreinterpretq_s8_s32(vzip2q_s32(l, h));
            }
            for (pi, acc) in acc.iter_mut().enumerate() {
                let xn = vcombine_s8(vld1_s8(xs[2 * pi].add(k)), vld1_s8(xs[2 * pi + 1].add(k)));
                for (a, &mv) in acc.iter_mut().zip(&m) {
                    *a = smmla(*a, xn, mv);
                }
            }
        }
        let sc = w.scale.add(gi * w.stride + w.col0 + c);
        for (pi, acc) in acc.iter().enumerate() {
            for j in 0..4 {
                let a = vreinterpretq_s64_s32(acc[2 * j]);
                let b = vreinterpretq_s64_s32(acc[2 * j + 1]);
                let halves = [vzip1q_s64(a, b), vzip2q_s64(a, b)];
                for (h, v) in halves.into_iter().enumerate() {
                    let r = 2 * pi + h;
                    let zc = vdupq_n_s32(tile.zc[r]);
                    let sv = vdupq_n_f32(tile.s[r]);
                    let a = vsubq_s32(vreinterpretq_s32_s64(v), vmulq_s32(zc, sums[j]));
                    let m = vmulq_f32(vcvtq_f32_s32(a), vmulq_f32(sv, vld1q_f32(sc.add(4 * j))));
                    f[r][j] = vaddq_f32(f[r][j], m);
                }
            }
        }
    }
    for r in 0..tile.rows {
        for (j, v) in f[r].iter().enumerate() {
            vst1q_f32(out[r].as_mut_ptr().add(4 * j), *v);
        }
    }
}
