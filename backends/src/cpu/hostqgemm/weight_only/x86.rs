//! The weight-only panels on AVX2 with FMA (256-bit, 8 lanes).
//!
//! Per row of `K`, a strip of 16 columns is two vectors of 8 `f32`
//! weights: `i8` ones sign-extended from 8 bytes each (`vpmovsxbd`) and
//! converted; `i4` ones from the strip's 8 bytes zero-extended to 8 lanes
//! (`vpmovzxbd`), each lane one byte, whose low nibble (an even column) and
//! high nibble (the odd column after it) become floats by the 2^23 trick
//! ([`nibbles`]). The `i4` accumulators thus hold the even columns and the odd
//! ones; at the end of each group they are put back in column order
//! (`unpcklps`/`unpckhps`, `vperm2f128`) before the scale, which changes
//! no lane's arithmetic.

use std::arch::x86_64::*;

use super::{prefetch_lines, Rows, Sums};
use crate::cpu::hostqgemm::BLOCK;

/// `R` rows by `S` strips of 16 columns from `c` (`i4` weights when `I4`),
/// into `out[r][at ..]`.
///
/// # Safety
/// The call's buffers hold what its shapes say; the weights are row-major
/// and (`i4`) the strip's first element is even; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn panel<const R: usize, const S: usize, const I4: bool>(
    rows: &Rows,
    c: usize,
    out: &mut Sums,
    at: usize,
) {
    let (call, w) = (rows.call, rows.w);
    let g = call.group;
    for gi in 0..call.k / g {
        let mut acc = [[_mm256_setzero_ps(); 8]; R];
        for k in gi * g..(gi + 1) * g {
            let p = w.row_ptr(I4, k, c);
            for line in prefetch_lines::<S, I4>(w, p) {
                _mm_prefetch::<_MM_HINT_T0>(line.cast());
            }
            let mut wv = [_mm256_setzero_ps(); 8];
            for s in 0..S {
                let [a, b] = if I4 {
                    nibbles(p.add(s * BLOCK / 2))
                } else {
                    bytes(p.add(s * BLOCK))
                };
                wv[2 * s] = a;
                wv[2 * s + 1] = b;
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let xb = _mm256_broadcast_ss(&*rows.x[r].add(k));
                for (a, &v) in acc.iter_mut().zip(&wv).take(2 * S) {
                    *a = _mm256_fmadd_ps(xb, v, *a);
                }
            }
        }
        let scale = w.scale.add(gi * w.stride + w.col0 + c);
        for (acc, o) in acc.iter().zip(out.iter_mut()) {
            for s in 0..S {
                let [lo, hi] = if I4 {
                    in_column_order(acc[2 * s], acc[2 * s + 1])
                } else {
                    [acc[2 * s], acc[2 * s + 1]]
                };
                for (h, a) in [lo, hi].into_iter().enumerate() {
                    let j = s * BLOCK + 8 * h;
                    let y = o.as_mut_ptr().add(at + j);
                    let prod = _mm256_mul_ps(a, _mm256_loadu_ps(scale.add(j)));
                    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), prod));
                }
            }
        }
    }
}

/// 16 `i8` weights at `p` as two vectors of 8 `f32` (columns 0–7, 8–15).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn bytes(p: *const u8) -> [__m256; 2] {
    let half = |q: *const u8| {
        let v = _mm_loadl_epi64(q.cast());
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
    };
    [half(p), half(p.add(8))]
}

/// 16 `i4` weights in the 8 bytes at `p` as two vectors of 8 `f32`: the
/// even columns and the odd ones.
///
/// A nibble `n` (two's complement) is `(n ^ 8) - 8`; `(n ^ 8)` in the low
/// mantissa bits of 2^23 is the float `2^23 + (n ^ 8)`, from which
/// subtracting `2^23 + 8` leaves `n` exactly. One integer operation and a
/// float subtraction per vector instead of two shifts and a conversion.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibbles(p: *const u8) -> [__m256; 2] {
    const MAGIC: i32 = 0x4B00_0008; // 2^23's bits, and the 8 of `n ^ 8`
    let magic = _mm256_set1_epi32(MAGIC);
    let bias = _mm256_set1_ps(8_388_616.0); // 2^23 + 8
    let v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.cast()));
    let even = _mm256_xor_si256(_mm256_and_si256(v, _mm256_set1_epi32(15)), magic);
    let odd = _mm256_xor_si256(_mm256_srli_epi32::<4>(v), magic);
    [
        _mm256_sub_ps(_mm256_castsi256_ps(even), bias),
        _mm256_sub_ps(_mm256_castsi256_ps(odd), bias),
    ]
}

/// Even columns `e` and odd ones `o` of a strip as columns 0–7 and 8–15.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn in_column_order(e: __m256, o: __m256) -> [__m256; 2] {
    // Per 128-bit half: lo = e0 o0 e1 o1 (columns 0-3 | 8-11),
    // hi = e2 o2 e3 o3 (columns 4-7 | 12-15).
    let lo = _mm256_unpacklo_ps(e, o);
    let hi = _mm256_unpackhi_ps(e, o);
    [
        _mm256_permute2f128_ps::<0x20>(lo, hi),
        _mm256_permute2f128_ps::<0x31>(lo, hi),
    ]
}
