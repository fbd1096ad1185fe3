//! The weight-only panels on x86-64: AVX2 with FMA (256-bit, 8 lanes) for
//! both layouts, AVX-512 (512-bit, 16 lanes) for `strips16`.
//!
//! Row-major ([`rows_avx2`]): per row of `K`, a strip of 16 columns is two
//! vectors of 8 `f32` weights: `i8` ones sign-extended from 8 bytes each
//! (`vpmovsxbd`) and converted; `i4` ones from the strip's 8 bytes
//! zero-extended to 8 lanes (`vpmovzxbd`), each lane one byte, whose low
//! nibble (an even column) and high nibble (the odd column after it)
//! become floats by the 2^23 trick ([`nibbles`]). The `i4` accumulators
//! thus hold the even columns and the odd ones; at the end of each group
//! they are put back in column order (`unpcklps`/`unpckhps`, `vperm2f128`)
//! before the scale, which changes no lane's arithmetic.
//!
//! `strips16` ([`blocks_avx2`], [`blocks_avx512`]): a strip's 64-byte block
//! is two 256-bit vectors (columns 0–7, 8–15) or one 512-bit vector, lane
//! `j` holding column `j`. A row's weights are a shift left and an
//! arithmetic shift right away (`vpslld`, `vpsrad`), then converted
//! (`vcvtdq2ps`); on AVX-512 an `i4` row is a shift right and a `vpermps`
//! whose 16-entry table holds the float of every nibble (it reads only an
//! index's low 4 bits).

use std::arch::x86_64::*;

use super::{for_block_rows, prefetch_lines, Rows, Sums, PREFETCH_BYTES};
use crate::cpu::hostqgemm::BLOCK;

/// `R` rows by `S` strips of 16 columns from `c` of a row-major weight
/// (`i4` when `I4`), into `out[r][at ..]`.
///
/// # Safety
/// The call's buffers hold what its shapes say; the weights are row-major
/// and (`i4`) the strip's first element is even; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn rows_avx2<const R: usize, const S: usize, const I4: bool>(
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
                scale_add(lo, scale.add(s * BLOCK), o.as_mut_ptr().add(at + s * BLOCK));
                scale_add(
                    hi,
                    scale.add(s * BLOCK + 8),
                    o.as_mut_ptr().add(at + s * BLOCK + 8),
                );
            }
        }
    }
}

/// `R` rows by `S` strips of 16 columns from `c` of a `strips16` weight
/// (`i4` when `I4`), into `out[r][at ..]`, on AVX2.
///
/// # Safety
/// The call's buffers hold what its shapes say; the weights are in
/// `strips16`, `col0 + c` is a multiple of 16 and the group a multiple of
/// a block's rows; the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn blocks_avx2<const R: usize, const S: usize, const I4: bool>(
    rows: &Rows,
    c: usize,
    out: &mut Sums,
    at: usize,
) {
    let (call, w) = (rows.call, rows.w);
    let (g, block_rows) = (call.group, if I4 { 8 } else { 4 });
    for gi in 0..call.k / g {
        let mut acc = [[[_mm256_setzero_ps(); 2]; S]; R];
        let mut k = gi * g;
        while k < (gi + 1) * g {
            let p: [*const u8; S] = std::array::from_fn(|s| w.block_ptr(I4, k, c + s * BLOCK));
            for &q in &p {
                _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(PREFETCH_BYTES).cast());
            }
            // Row `k + $r`: each lane's weight shifted to its top, then
            // back down with its sign.
            macro_rules! step {
                ($r:literal, $shl:literal) => {{
                    let mut wv = [[_mm256_setzero_ps(); 2]; S];
                    for (v, &p) in wv.iter_mut().zip(&p) {
                        for (h, v) in v.iter_mut().enumerate() {
                            let lanes = _mm256_loadu_si256(p.add(32 * h).cast());
                            let top = _mm256_slli_epi32::<$shl>(lanes);
                            let q = if I4 {
                                _mm256_srai_epi32::<28>(top)
                            } else {
                                _mm256_srai_epi32::<24>(top)
                            };
                            *v = _mm256_cvtepi32_ps(q);
                        }
                    }
                    for (acc, x) in acc.iter_mut().zip(&rows.x) {
                        let xb = _mm256_broadcast_ss(&*x.add(k + $r));
                        for (a, v) in acc.iter_mut().zip(&wv) {
                            a[0] = _mm256_fmadd_ps(xb, v[0], a[0]);
                            a[1] = _mm256_fmadd_ps(xb, v[1], a[1]);
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
                    let j = s * BLOCK + 8 * h;
                    scale_add(a, scale.add(j), o.as_mut_ptr().add(at + j));
                }
            }
        }
    }
}

/// [`blocks_avx2`] on AVX-512: a strip is one vector.
///
/// # Safety
/// As [`blocks_avx2`]; the CPU has AVX-512 (F).
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn blocks_avx512<const R: usize, const S: usize, const I4: bool>(
    rows: &Rows,
    c: usize,
    out: &mut Sums,
    at: usize,
) {
    let (call, w) = (rows.call, rows.w);
    let (g, block_rows) = (call.group, if I4 { 8 } else { 4 });
    // The float of every nibble, two's complement: the index's low 4 bits.
    let table = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0,
    );
    for gi in 0..call.k / g {
        let mut acc = [[_mm512_setzero_ps(); S]; R];
        let mut k = gi * g;
        while k < (gi + 1) * g {
            let p: [*const u8; S] = std::array::from_fn(|s| w.block_ptr(I4, k, c + s * BLOCK));
            for &q in &p {
                _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(PREFETCH_BYTES).cast());
            }
            macro_rules! step {
                ($r:literal, $shl:literal) => {{
                    let mut wv = [_mm512_setzero_ps(); S];
                    for (v, &p) in wv.iter_mut().zip(&p) {
                        let lanes = _mm512_loadu_si512(p.cast());
                        *v = if I4 {
                            // The nibble at bit 28 - shl to the bottom.
                            let index = _mm512_srli_epi32::<{ 28 - $shl }>(lanes);
                            _mm512_permutexvar_ps(index, table)
                        } else {
                            let top = _mm512_slli_epi32::<$shl>(lanes);
                            _mm512_cvtepi32_ps(_mm512_srai_epi32::<24>(top))
                        };
                    }
                    for (acc, x) in acc.iter_mut().zip(&rows.x) {
                        let xb = _mm512_set1_ps(*x.add(k + $r));
                        for (a, &v) in acc.iter_mut().zip(&wv) {
                            *a = _mm512_fmadd_ps(xb, v, *a);
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
            for (s, &a) in acc.iter().enumerate() {
                let y = o.as_mut_ptr().add(at + s * BLOCK);
                let prod = _mm512_mul_ps(a, _mm512_loadu_ps(scale.add(s * BLOCK)));
                _mm512_storeu_ps(y, _mm512_add_ps(_mm512_loadu_ps(y), prod));
            }
        }
    }
}

/// `y[0..8] += a · scale[0..8]`: the product rounded, then the sum.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn scale_add(a: __m256, scale: *const f32, y: *mut f32) {
    let prod = _mm256_mul_ps(a, _mm256_loadu_ps(scale));
    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), prod));
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
