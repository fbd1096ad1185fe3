//! The x86-64 strip of [`super::vector_strip`]: `vpdpbusd` (AVX-VNNI, or
//! AVX-512 VNNI on 256-bit vectors) on unsigned activations (`xq + 128`)
//! by signed weights.
//!
//! Per four rows of `K`: 16 weights of each row are loaded (16 `i8`
//! bytes, or 8 `i4` bytes whose nibbles are spread to bytes in column
//! order and sign-extended as `(n ^ 8) - 8`), and interleaved (bytes, then
//! 16-bit pairs) so that each 32-bit lane holds one column's four weights
//! (`strips16` stores them so; the NPU's `rk3588` layout stores each
//! column's four as one 32-bit word, gathered at a stride of 32 bytes);
//! one `vpdpbusd` per row of the tile and 8 columns adds the four products
//! to that column's sum, and one by a vector of ones adds the weights
//! themselves to the column sums. After each group, per row and lane:
//! `sum - (z + 128)·Σq` (wrapping `i32`), converted to `f32`, times
//! `s · scale`, added to the row's `f32` sums: the reference's steps.

use std::arch::x86_64::*;

use slmcc_ir::ops::qlayout::QLayout;

use super::{Strip, BLOCK, TILE_ROWS};

macro_rules! vnni_strip {
    ($name:ident, $features:literal, $dot:ident) => {
        /// Steps 5 and 6 for `strip` into `out`.
        ///
        /// # Safety
        /// The CPU has the features; the strip lies inside its weight,
        /// whose `i4` rows start on a byte.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $name(strip: Strip, out: &mut [[f32; BLOCK]; TILE_ROWS]) {
            match strip.tile.rows {
                1 => rows::<1>(strip, out),
                2 => rows::<2>(strip, out),
                3 => rows::<3>(strip, out),
                _ => rows::<TILE_ROWS>(strip, out),
            }

            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn load16(p: *const u8, int4: bool) -> __m128i {
                if !int4 {
                    return _mm_loadu_si128(p.cast());
                }
                let b = _mm_loadl_epi64(p.cast());
                let low = _mm_set1_epi8(0x0f);
                let lo = _mm_and_si128(b, low);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(b), low);
                let e = _mm_set1_epi8(8);
                _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), e), e)
            }

            /// The low nibbles of `v` (already XORed with 8) as signed bytes.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn nib(v: __m256i) -> __m256i {
                let eight = _mm256_set1_epi8(8);
                _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), eight)
            }

            /// Four rows of `K` from `k` by 16 columns (`w`: columns 0..8
            /// and 8..16, each lane one column's four weights): the
            /// weights' sums into `sums`, the products with each row's
            /// four activations into `lo`/`hi`.
            #[target_feature(enable = $features)]
            #[inline]
            unsafe fn step<const R: usize>(
                xs: &[*const u8; R],
                k: usize,
                w: [__m256i; 2],
                sums: &mut (__m256i, __m256i),
                lo: &mut [__m256i; R],
                hi: &mut [__m256i; R],
            ) {
                let ones = _mm256_set1_epi8(1);
                sums.0 = $dot(sums.0, ones, w[0]);
                sums.1 = $dot(sums.1, ones, w[1]);
                for r in 0..R {
                    let x4 = xs[r].add(k).cast::<i32>().read_unaligned();
                    let xb = _mm256_set1_epi32(x4);
                    lo[r] = $dot(lo[r], xb, w[0]);
                    hi[r] = $dot(hi[r], xb, w[1]);
                }
            }

            #[target_feature(enable = $features)]
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
                let zero = _mm256_setzero_si256();
                let xs: [*const u8; R] = std::array::from_fn(|r| tile.xq[r].as_ptr());
                let zc: [__m256i; R] = std::array::from_fn(|r| _mm256_set1_epi32(tile.zc[r]));
                let sv: [__m256; R] = std::array::from_fn(|r| _mm256_set1_ps(tile.s[r]));
                let (mut f_lo, mut f_hi) = ([_mm256_setzero_ps(); R], [_mm256_setzero_ps(); R]);
                for gi in 0..groups {
                    let k0 = gi * group;
                    let (mut lo, mut hi) = ([zero; R], [zero; R]);
                    let mut sums = (zero, zero);
                    match w.layout {
                        QLayout::RowMajor => {
                            let mut p = w.row_ptr(int4, k0, c);
                            for k in (k0..k0 + group).step_by(4) {
                                let r0 = load16(p, int4);
                                let r1 = load16(p.add(row_bytes), int4);
                                let r2 = load16(p.add(2 * row_bytes), int4);
                                let r3 = load16(p.add(3 * row_bytes), int4);
                                let t0 = _mm_unpacklo_epi8(r0, r1);
                                let t1 = _mm_unpackhi_epi8(r0, r1);
                                let t2 = _mm_unpacklo_epi8(r2, r3);
                                let t3 = _mm_unpackhi_epi8(r2, r3);
                                let w_lo = _mm256_set_m128i(
                                    _mm_unpackhi_epi16(t0, t2),
                                    _mm_unpacklo_epi16(t0, t2),
                                );
                                let w_hi = _mm256_set_m128i(
                                    _mm_unpackhi_epi16(t1, t3),
                                    _mm_unpacklo_epi16(t1, t3),
                                );
                                step(&xs, k, [w_lo, w_hi], &mut sums, &mut lo, &mut hi);
                                p = p.add(4 * row_bytes);
                            }
                        }
                        QLayout::Strips16 if !int4 => {
                            let mut p = w.block_ptr(false, k0, c);
                            for k in (k0..k0 + group).step_by(4) {
                                let w_lo = _mm256_loadu_si256(p.cast());
                                let w_hi = _mm256_loadu_si256(p.add(32).cast());
                                step(&xs, k, [w_lo, w_hi], &mut sums, &mut lo, &mut hi);
                                p = p.add(64);
                            }
                        }
                        QLayout::Rk3588 { .. } => {
                            // Column j's weights of rows k..k+4 are the 4
                            // bytes 32·j past column 0's: the 16 columns lie
                            // in one block of 32 kernels.
                            let idx = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
                            for k in (k0..k0 + group).step_by(4) {
                                let p = w.npu_ptr(k, c);
                                let w_lo = _mm256_i32gather_epi32::<1>(p.cast(), idx);
                                let w_hi = _mm256_i32gather_epi32::<1>(p.add(256).cast(), idx);
                                step(&xs, k, [w_lo, w_hi], &mut sums, &mut lo, &mut hi);
                            }
                        }
                        QLayout::Strips16 => {
                            // Nibbles `n` hold `w & 15`: `((n ^ 8) & 15) - 8` is `w`.
                            let flip = _mm256_set1_epi8(0x88u8 as i8);
                            let mut p = w.block_ptr(true, k0, c);
                            for k in (k0..k0 + group).step_by(8) {
                                let a = _mm256_xor_si256(_mm256_loadu_si256(p.cast()), flip);
                                let b =
                                    _mm256_xor_si256(_mm256_loadu_si256(p.add(32).cast()), flip);
                                let (a_lo, b_lo) = (nib(a), nib(b));
                                let (a_hi, b_hi) = (
                                    nib(_mm256_srli_epi16::<4>(a)),
                                    nib(_mm256_srli_epi16::<4>(b)),
                                );
                                step(&xs, k, [a_lo, b_lo], &mut sums, &mut lo, &mut hi);
                                step(&xs, k + 4, [a_hi, b_hi], &mut sums, &mut lo, &mut hi);
                                p = p.add(64);
                            }
                        }
                    }
                    let (sum_lo, sum_hi) = sums;
                    let sc = w.scale.add(gi * w.stride + w.col0 + c);
                    let (sc_lo, sc_hi) = (_mm256_loadu_ps(sc), _mm256_loadu_ps(sc.add(8)));
                    for r in 0..R {
                        let a_lo = _mm256_sub_epi32(lo[r], _mm256_mullo_epi32(zc[r], sum_lo));
                        let a_hi = _mm256_sub_epi32(hi[r], _mm256_mullo_epi32(zc[r], sum_hi));
                        let m_lo =
                            _mm256_mul_ps(_mm256_cvtepi32_ps(a_lo), _mm256_mul_ps(sv[r], sc_lo));
                        let m_hi =
                            _mm256_mul_ps(_mm256_cvtepi32_ps(a_hi), _mm256_mul_ps(sv[r], sc_hi));
                        f_lo[r] = _mm256_add_ps(f_lo[r], m_lo);
                        f_hi[r] = _mm256_add_ps(f_hi[r], m_hi);
                    }
                }
                for r in 0..R {
                    _mm256_storeu_ps(out[r].as_mut_ptr(), f_lo[r]);
                    _mm256_storeu_ps(out[r].as_mut_ptr().add(8), f_hi[r]);
                }
            }
        }
    };
}

vnni_strip!(strip_avxvnni, "avx2,avxvnni", _mm256_dpbusd_avx_epi32);
vnni_strip!(
    strip_avx512vnni,
    "avx2,avx512vnni,avx512vl",
    _mm256_dpbusd_epi32
);
