//! The x86-64 block of [`super::vector_block`]: `vpdpbusd` (AVX-VNNI, or
//! AVX-512 VNNI on 256-bit vectors) on unsigned activations (`xq + 128`)
//! by signed weights.
//!
//! Per four rows of `K`: 16 weights of each row are loaded (16 `i8`
//! bytes, or 8 `i4` bytes whose nibbles are spread to bytes in column
//! order and sign-extended as `(n ^ 8) - 8`), and interleaved (bytes, then
//! 16-bit pairs) so that each 32-bit lane holds one column's four weights;
//! one `vpdpbusd` per row of the tile and 8 columns adds the four products
//! to that column's sum, and one by a vector of ones adds the weights
//! themselves to the column sums.

use std::arch::x86_64::*;

use super::{BlockSums, Span, TILE_ROWS};

macro_rules! vnni_block {
    ($name:ident, $features:literal, $dot:ident) => {
        /// `block` for rows `k0 .. k0 + 4·steps` and columns `c .. c + 16`
        /// (stored over its contents).
        ///
        /// # Safety
        /// The CPU has the features; the rows and columns lie inside `w`,
        /// whose `i4` rows start on a byte.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $name(span: Span, block: &mut BlockSums) {
            match span.tile.rows {
                1 => rows::<1>(span, block),
                2 => rows::<2>(span, block),
                3 => rows::<3>(span, block),
                _ => rows::<TILE_ROWS>(span, block),
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

            #[target_feature(enable = $features)]
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
                let ones = _mm256_set1_epi8(1);
                let zero = _mm256_setzero_si256();
                let (mut lo, mut hi) = ([zero; R], [zero; R]);
                let (mut sum_lo, mut sum_hi) = (zero, zero);
                let xs: [*const u8; R] = std::array::from_fn(|r| tile.xq[r].as_ptr().add(k0));
                for step in 0..steps {
                    let r0 = load16(p, int4);
                    let r1 = load16(p.add(row_bytes), int4);
                    let r2 = load16(p.add(2 * row_bytes), int4);
                    let r3 = load16(p.add(3 * row_bytes), int4);
                    let t0 = _mm_unpacklo_epi8(r0, r1);
                    let t1 = _mm_unpackhi_epi8(r0, r1);
                    let t2 = _mm_unpacklo_epi8(r2, r3);
                    let t3 = _mm_unpackhi_epi8(r2, r3);
                    let w_lo =
                        _mm256_set_m128i(_mm_unpackhi_epi16(t0, t2), _mm_unpacklo_epi16(t0, t2));
                    let w_hi =
                        _mm256_set_m128i(_mm_unpackhi_epi16(t1, t3), _mm_unpacklo_epi16(t1, t3));
                    sum_lo = $dot(sum_lo, ones, w_lo);
                    sum_hi = $dot(sum_hi, ones, w_hi);
                    for r in 0..R {
                        let x4 = xs[r].add(4 * step).cast::<i32>().read_unaligned();
                        let xb = _mm256_set1_epi32(x4);
                        lo[r] = $dot(lo[r], xb, w_lo);
                        hi[r] = $dot(hi[r], xb, w_hi);
                    }
                    p = p.add(4 * row_bytes);
                }
                let csum = block.csum.as_mut_ptr().cast::<__m256i>();
                _mm256_storeu_si256(csum, sum_lo);
                _mm256_storeu_si256(csum.add(1), sum_hi);
                for r in 0..R {
                    let raw = block.raw[r].as_mut_ptr().cast::<__m256i>();
                    _mm256_storeu_si256(raw, lo[r]);
                    _mm256_storeu_si256(raw.add(1), hi[r]);
                }
            }
        }
    };
}

vnni_block!(block_avxvnni, "avx2,avxvnni", _mm256_dpbusd_avx_epi32);
vnni_block!(
    block_avx512vnni,
    "avx2,avx512vnni,avx512vl",
    _mm256_dpbusd_epi32
);
