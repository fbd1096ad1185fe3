//! The host attention: `attention` over many query rows (prefill) for JIT
//! kernels, as blocked GEMMs on the host GEMM's micro-kernels with an
//! online softmax between them.
//!
//! [`slmcc_attention`] is an `extern "C"` function that kernels import by
//! symbol, like [`super::hostgemm::slmcc_sgemm`]: the JIT links it, an AOT
//! object never calls it. The lowering
//! (`cpu/lower/attention.rs`) calls it for `f32` queries, keys and
//! values with no mask operand and more than one query row, when the
//! host GEMM is on; everything else (decode rows, half and INT8 caches,
//! masks) keeps the generated row kernel.
//!
//! Per batch, query head and block of [`BLOCK_ROWS`] query rows, the keys
//! the block can see (the causal and sliding-window range of its first
//! and last row) are visited in tiles of at most [`TILE_KEYS`] keys:
//! 1. the tile of `K` is transposed into a stack buffer, and the scores
//!    `S = Q_block · K_tileᵀ` are one host GEMM (`rows × keys × d`);
//! 2. each row's scores are scaled, soft-capped and cut to the row's own
//!    key range (keys outside it get weight exactly 0, as their `-inf`
//!    score does in the reference); the row's running maximum `M` and sum
//!    `L` are updated, the accumulated output row is rescaled by
//!    `exp(M_old - M_new)` when the maximum rises, and the scores become
//!    `p = exp(score - M_new)`;
//! 3. `out_block += P · V_tile` is a second host GEMM (`rows × dv × keys`,
//!    accumulating into the output rows).
//!
//! At the end each row is divided by its `L`; a row that saw no key is
//! zeros, as in the reference. The blocks are independent and split over
//! the kernel's threads. Scratch: the transposed tile and the scores of one
//! block, on the stack (128 KiB and 64 KiB); nothing is allocated.
//!
//! Numerics: the dot products and the weighted sums are the host GEMM's
//! (FMA, in its order), `exp` is [`exp_cephes`] (within 2 ulps); the result
//! is within ~1e-6 relative of the reference, as the generated kernel's
//! online softmax over tiles is.

use std::mem::MaybeUninit;

use super::hostgemm::slmcc_sgemm;
use super::threads::parallel_for;

/// The symbol kernels import.
pub const ATTENTION_SYMBOL: &str = "slmcc_attention";

/// Every host attention symbol with its address, for the JIT.
pub fn host_symbols() -> Vec<(&'static str, *const u8)> {
    vec![(ATTENTION_SYMBOL, slmcc_attention as *const u8)]
}

/// Query rows per block: the scores of one block and key tile are
/// `BLOCK_ROWS × TILE_KEYS` floats (64 KiB).
pub const BLOCK_ROWS: usize = 64;

/// Most keys per tile.
pub const TILE_KEYS: usize = 256;

/// Elements of the transposed key tile's buffer (128 KiB): a tile holds
/// `min(TILE_KEYS, KT_ELEMS / d)` keys.
const KT_ELEMS: usize = 32 * 1024;

/// Largest head size (`KT_ELEMS / 8`: a tile of at least 8 keys).
pub const MAX_HEAD: usize = KT_ELEMS / 8;

/// Fewest multiply-adds of a call for which its blocks are split over
/// threads.
const PARALLEL_MIN_MACS: usize = 1 << 20;

/// The shape and attributes of one `attention` node, as a kernel passes
/// them (`#[repr(C)]`: kernels build it on their stack).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionDesc {
    /// `q` is `[b, hq, s, d]`, `k` `[b, hkv, t, d]`, `v` `[b, hkv, t, dv]`.
    pub b: u64,
    pub hq: u64,
    pub hkv: u64,
    pub s: u64,
    pub t: u64,
    pub d: u64,
    pub dv: u64,
    /// Sliding window (0: none; only with `causal`).
    pub window: u64,
    pub scale: f32,
    /// Soft-capping (0: none).
    pub softcap: f32,
    /// Nonzero: causal.
    pub causal: u32,
    /// Threads the blocks may be split over.
    pub threads: u32,
    /// The `r²` coefficient of the `exp` polynomial ([`exp_cephes`]):
    /// 0.5, or 0.501 under a test build's `exp-coefficient` mutant
    /// (`crate::mutant`), which the kernel decides when it is compiled.
    pub exp_x2: f32,
}

impl AttentionDesc {
    /// `[b, hq, hkv, s, t, d, dv]` as sizes.
    fn sizes(&self) -> [usize; 7] {
        [self.b, self.hq, self.hkv, self.s, self.t, self.d, self.dv].map(|x| x as usize)
    }
}

/// Byte offsets of [`AttentionDesc`]'s fields, for the kernels that
/// store one.
pub mod desc_offsets {
    pub const B: i32 = 0;
    pub const HQ: i32 = 8;
    pub const HKV: i32 = 16;
    pub const S: i32 = 24;
    pub const T: i32 = 32;
    pub const D: i32 = 40;
    pub const DV: i32 = 48;
    pub const WINDOW: i32 = 56;
    pub const SCALE: i32 = 64;
    pub const SOFTCAP: i32 = 68;
    pub const CAUSAL: i32 = 72;
    pub const THREADS: i32 = 76;
    pub const EXP_X2: i32 = 80;
    /// The descriptor's size.
    pub const SIZE: u32 = 88;
}

/// Raw operands, shareable with the pool's threads.
#[derive(Clone, Copy)]
struct Operands {
    q: *const f32,
    k: *const f32,
    v: *const f32,
    out: *mut f32,
    desc: AttentionDesc,
}

// SAFETY: the pointers are only dereferenced inside `slmcc_attention`'s
// call, and the threads write disjoint rows of `out`.
unsafe impl Send for Operands {}
unsafe impl Sync for Operands {}

/// `out = attention(q, k, v)` for the node `desc` describes (see the module
/// docs): `f32`, row-major, no mask operand.
///
/// # Safety
///
/// `desc` must point to a valid descriptor, and `q`, `k`, `v` and `out` to
/// tensors of its shapes (`out` writable and overlapping none of them);
/// `d` and `dv` at most [`MAX_HEAD`] and `hq` a multiple of `hkv`.
pub unsafe extern "C" fn slmcc_attention(
    desc: *const AttentionDesc,
    q: *const f32,
    k: *const f32,
    v: *const f32,
    out: *mut f32,
) {
    // SAFETY: the caller's contract (a kernel's stack slot is only 4-byte
    // aligned, hence the unaligned read).
    let desc = unsafe { std::ptr::read_unaligned(desc) };
    let ops = Operands { q, k, v, out, desc };
    let blocks_per_head = (desc.s as usize).div_ceil(BLOCK_ROWS);
    let tasks = desc.b as usize * desc.hq as usize * blocks_per_head;
    let macs = desc.b * desc.hq * desc.s * desc.t * (desc.d + desc.dv);
    let threads = if macs as usize >= PARALLEL_MIN_MACS {
        desc.threads.max(1) as usize
    } else {
        1
    };
    let run = |task: usize| {
        // SAFETY: each task writes only its own block of output rows.
        unsafe { attend_block(ops, task, blocks_per_head) }
    };
    if threads > 1 && tasks > 1 {
        // Interleaved: with a causal mask later blocks see more keys, so
        // the pool's counter hands them out in turn.
        parallel_for(threads, tasks, &run);
    } else {
        (0..tasks).for_each(run);
    }
}

/// The key range `[lo, hi)` query row `i` sees.
fn key_range(desc: &AttentionDesc, i: usize) -> (usize, usize) {
    let t = desc.t as usize;
    if desc.causal == 0 {
        return (0, t);
    }
    // hi = min(t, i + (t - s) + 1), in signed arithmetic (t < s is legal).
    let hi = (i as i64 + desc.t as i64 - desc.s as i64 + 1).clamp(0, desc.t as i64) as usize;
    let lo = match desc.window {
        0 => 0,
        w => hi.saturating_sub(w as usize),
    };
    (lo, hi)
}

/// The scores of one block and tile.
#[repr(C, align(64))]
struct Scores([f32; BLOCK_ROWS * TILE_KEYS]);

/// A transposed key tile.
#[repr(C, align(64))]
struct KeysT([f32; KT_ELEMS]);

/// Block `task` (batch, query head, row block, in that order).
unsafe fn attend_block(ops: Operands, task: usize, blocks_per_head: usize) {
    let desc = ops.desc;
    let [_, hq, hkv, s, t, d, dv] = desc.sizes();
    let nh = task / blocks_per_head;
    let (n, h) = (nh / hq, nh % hq);
    let kvh = h / (hq / hkv);
    let i0 = (task % blocks_per_head) * BLOCK_ROWS;
    let rows = BLOCK_ROWS.min(s - i0);
    // SAFETY (pointer arithmetic here and below): within the tensors the
    // caller's contract describes.
    let q = unsafe { ops.q.add((nh * s + i0) * d) };
    let out = unsafe { ops.out.add((nh * s + i0) * dv) };
    let kh = unsafe { ops.k.add((n * hkv + kvh) * t * d) };
    let vh = unsafe { ops.v.add((n * hkv + kvh) * t * dv) };
    // SAFETY: the block's output rows.
    let out_rows = unsafe { std::slice::from_raw_parts_mut(out, rows * dv) };
    out_rows.fill(0.0);
    let mut max = [f32::NEG_INFINITY; BLOCK_ROWS];
    let mut sum = [0f32; BLOCK_ROWS];
    let (block_lo, _) = key_range(&desc, i0);
    let (_, block_hi) = key_range(&desc, i0 + rows - 1);
    let tile = TILE_KEYS.min(KT_ELEMS / d.max(1)).max(1);
    // Uninitialised (192 KiB per block would otherwise be zeroed): each
    // tile writes what it reads first.
    let mut kt = MaybeUninit::<KeysT>::uninit();
    let kt = kt.as_mut_ptr().cast::<f32>();
    let mut scores = MaybeUninit::<Scores>::uninit();
    let sc_ptr = scores.as_mut_ptr().cast::<f32>();
    let mut j0 = block_lo;
    while j0 < block_hi {
        let keys = tile.min(block_hi - j0);
        // Kᵀ of keys j0 .. j0 + keys: d rows of `keys`.
        for j in 0..keys {
            // SAFETY: key row j0 + j.
            let krow = unsafe { std::slice::from_raw_parts(kh.add((j0 + j) * d), d) };
            for (c, &x) in krow.iter().enumerate() {
                // SAFETY: c · keys + j < d · keys <= KT_ELEMS.
                unsafe { kt.add(c * keys + j).write(x) };
            }
        }
        // SAFETY: q rows (rows × d, stride d), Kᵀ (d × keys), scores
        // (rows × keys, every element written: k = d >= 1).
        unsafe { slmcc_sgemm(rows, keys, d, q, d, kt, keys, sc_ptr, keys, 0, 1) };
        // SAFETY: the scores just written.
        let sc = unsafe { std::slice::from_raw_parts_mut(sc_ptr, rows * keys) };
        for r in 0..rows {
            let (lo, hi) = key_range(&desc, i0 + r);
            let row = &mut sc[r * keys..(r + 1) * keys];
            let (a, b) = (lo.clamp(j0, j0 + keys) - j0, hi.clamp(j0, j0 + keys) - j0);
            row[..a].fill(0.0);
            row[b..].fill(0.0);
            if a >= b {
                continue;
            }
            let live = &mut row[a..b];
            let tile_max = wide::scale_cap_max(live, desc.scale, desc.softcap);
            let new_max = max[r].max(tile_max);
            if new_max == f32::NEG_INFINITY {
                // Every score -inf (infinite inputs): weight 0, as masked.
                live.fill(0.0);
                continue;
            }
            let tile_sum = wide::exp_shifted(live, new_max, desc.exp_x2);
            if max[r] != new_max && max[r] != f32::NEG_INFINITY {
                let alpha = exp_cephes(max[r] - new_max, desc.exp_x2);
                sum[r] *= alpha;
                for o in &mut out_rows[r * dv..(r + 1) * dv] {
                    *o *= alpha;
                }
            }
            max[r] = new_max;
            sum[r] += tile_sum;
        }
        // out += P · V_tile.
        // SAFETY: P (rows × keys), V rows j0 .. j0 + keys (keys × dv), the
        // block's output rows (rows × dv).
        unsafe {
            slmcc_sgemm(
                rows,
                dv,
                keys,
                sc.as_ptr(),
                keys,
                vh.add(j0 * dv),
                dv,
                out_rows.as_mut_ptr(),
                dv,
                1,
                1,
            )
        };
        j0 += keys;
    }
    for r in 0..rows {
        if sum[r] > 0.0 {
            let inv = 1.0 / sum[r];
            for o in &mut out_rows[r * dv..(r + 1) * dv] {
                *o *= inv;
            }
        }
    }
}

/// `x = scale · x`, then `x = c · tanh(x / c)` when `softcap = c > 0`;
/// returns the largest `x` (NaN-free inputs; lanes of 8 so that the loops
/// vectorise).
#[inline(always)]
fn scale_cap_max(x: &mut [f32], scale: f32, softcap: f32) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    if softcap > 0.0 {
        for v in x.iter_mut() {
            *v = softcap * (*v * scale / softcap).tanh();
        }
    } else {
        for v in x.iter_mut() {
            *v *= scale;
        }
    }
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if v > *l { v } else { *l };
        }
    }
    let rest = chunks.remainder().iter();
    lanes
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// `x = exp(x - max)` in place; returns the sum.
#[inline(always)]
fn exp_shifted(x: &mut [f32], max: f32, x2: f32) -> f32 {
    // Partial sums in lanes of 8, so that the loop vectorises and the sum
    // does not depend on a sequential order.
    let mut lanes = [0f32; 8];
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c.iter_mut()) {
            *v = exp_cephes(*v - max, x2);
            *l += *v;
        }
    }
    let mut total: f32 = lanes.iter().sum();
    for v in chunks.into_remainder() {
        *v = exp_cephes(*v - max, x2);
        total += *v;
    }
    total
}

/// The row loops compiled for the widest vectors the host has: the
/// crate's baseline (SSE2 on x86-64, NEON on aarch64) vectorises them 4
/// lanes wide; where the CPU has AVX2 they run 8 wide. The same
/// operations in the same order either way (no contraction into FMA), so
/// the results do not depend on the path.
mod wide {
    /// `pub fn NAME(ARGS) -> R`: [`super`]'s `NAME`, through a copy
    /// compiled with AVX2 where the CPU has it.
    macro_rules! widest {
        ($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty) => {
            #[doc = concat!("[`super::", stringify!($name), "`].")]
            pub fn $name($($arg: $ty),*) -> $ret {
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2") {
                    #[target_feature(enable = "avx2")]
                    fn run($($arg: $ty),*) -> $ret {
                        super::$name($($arg),*)
                    }
                    // SAFETY: the CPU has AVX2.
                    return unsafe { run($($arg),*) };
                }
                super::$name($($arg),*)
            }
        };
    }

    widest!(scale_cap_max(x: &mut [f32], scale: f32, softcap: f32) -> f32);
    widest!(exp_shifted(x: &mut [f32], max: f32, x2: f32) -> f32);
}

/// `e^x` as the kernels' inline vector `exp` computes it
/// ([`super::vmath`], Cephes' `expf`: the same constants and steps, with
/// separate multiplies and adds), `x2` its `r²` coefficient (0.5): within
/// 2 ulps of the correctly rounded value. Branch-free, so loops over it
/// vectorise.
#[inline(always)]
pub fn exp_cephes(x: f32, x2: f32) -> f32 {
    use super::vmath::{C1, C2, LOG2E, P, ROUND_MAGIC as ROUND};
    // Clamped to [-104, 89] (NaN passes through both).
    let x = if x < -104.0 { -104.0 } else { x };
    let x = if x > 89.0 { 89.0 } else { x };
    let t = x * LOG2E + ROUND;
    let nf = t - ROUND;
    let n = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = x - nf * C1 - nf * C2;
    // P's last coefficient is the r² one, 0.5: `x2` instead.
    let mut p = P[0];
    for k in &P[1..P.len() - 1] {
        p = p * r + k;
    }
    p = p * r + x2;
    let y = p * (r * r) + (r + 1.0);
    // y · 2^n as y · 2^(n >> 1) · 2^(n - (n >> 1)): both factors normal.
    let pow2 = |e: i32| f32::from_bits(((e + 127) << 23) as u32);
    let n1 = n >> 1;
    y * pow2(n1) * pow2(n - n1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention in f64, straight from the op's definition.
    fn reference(desc: &AttentionDesc, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
        let [b, hq, hkv, s, t, d, dv] = desc.sizes();
        let mut out = vec![0f32; b * hq * s * dv];
        for n in 0..b {
            for h in 0..hq {
                let kvh = h / (hq / hkv);
                let krow = |j: usize| ((n * hkv + kvh) * t + j) * d;
                let vrow = |j: usize| ((n * hkv + kvh) * t + j) * dv;
                for i in 0..s {
                    let (lo, hi) = key_range(desc, i);
                    let qrow = ((n * hq + h) * s + i) * d;
                    let scores: Vec<f64> = (lo..hi)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|c| f64::from(q[qrow + c]) * f64::from(k[krow(j) + c]))
                                .sum();
                            let x = dot * f64::from(desc.scale);
                            match f64::from(desc.softcap) {
                                c if c > 0.0 => c * (x / c).tanh(),
                                _ => x,
                            }
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|&x| (x - m).exp()).collect();
                    let total: f64 = e.iter().sum();
                    for c in 0..dv {
                        let acc: f64 = e
                            .iter()
                            .enumerate()
                            .map(|(jj, w)| w / total * f64::from(v[vrow(lo + jj) + c]))
                            .sum();
                        out[((n * hq + h) * s + i) * dv + c] = acc as f32;
                    }
                }
            }
        }
        out
    }

    /// Deterministic values in about [-2, 2].
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    fn check(desc: AttentionDesc) {
        let [b, hq, hkv, s, t, d, dv] = desc.sizes();
        let q = values(b * hq * s * d, 1);
        let k = values(b * hkv * t * d, 2);
        let v = values(b * hkv * t * dv, 3);
        let mut out = vec![f32::NAN; b * hq * s * dv];
        // SAFETY: the tensors have the descriptor's shapes.
        unsafe { slmcc_attention(&desc, q.as_ptr(), k.as_ptr(), v.as_ptr(), out.as_mut_ptr()) };
        let want = reference(&desc, &q, &k, &v);
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
        for (i, (a, w)) in out.iter().zip(&want).enumerate() {
            assert!(
                (a - w).abs() / scale <= 2e-6,
                "{desc:?}: element {i}: {a} against {w}"
            );
        }
    }

    fn desc(hq: u64, hkv: u64, s: u64, t: u64, d: u64, dv: u64) -> AttentionDesc {
        AttentionDesc {
            b: 1,
            hq,
            hkv,
            s,
            t,
            d,
            dv,
            window: 0,
            scale: 1.0 / (d as f32).sqrt(),
            softcap: 0.0,
            causal: 1,
            threads: 1,
            exp_x2: 0.5,
        }
    }

    #[test]
    fn causal_prefill_over_several_blocks_and_tiles_matches_the_definition() {
        // 150 rows: three blocks, the last partial; 600 keys at d = 64:
        // tiles of 256, 256 and 88.
        check(desc(4, 2, 150, 150, 64, 64));
        check(desc(2, 1, 600, 600, 64, 48));
    }

    #[test]
    fn past_keys_windows_softcap_and_odd_sizes_match_the_definition() {
        // Queries after 40 past keys, and more queries than keys.
        check(desc(2, 2, 70, 110, 24, 24));
        check(desc(1, 1, 30, 20, 8, 8));
        check(AttentionDesc {
            window: 37,
            ..desc(3, 1, 130, 130, 40, 40)
        });
        check(AttentionDesc {
            softcap: 5.0,
            scale: 1.0,
            ..desc(2, 1, 70, 70, 16, 16)
        });
        check(AttentionDesc {
            causal: 0,
            b: 2,
            ..desc(2, 1, 9, 300, 128, 64)
        });
        // Threads: the same numbers.
        check(AttentionDesc {
            threads: 2,
            ..desc(8, 2, 200, 200, 64, 64)
        });
    }

    #[test]
    fn the_offsets_kernels_store_at_are_the_descriptors() {
        use std::mem::{offset_of, size_of};
        let at = |o: usize| o as i32;
        assert_eq!(desc_offsets::B, at(offset_of!(AttentionDesc, b)));
        assert_eq!(desc_offsets::HQ, at(offset_of!(AttentionDesc, hq)));
        assert_eq!(desc_offsets::HKV, at(offset_of!(AttentionDesc, hkv)));
        assert_eq!(desc_offsets::S, at(offset_of!(AttentionDesc, s)));
        assert_eq!(desc_offsets::T, at(offset_of!(AttentionDesc, t)));
        assert_eq!(desc_offsets::D, at(offset_of!(AttentionDesc, d)));
        assert_eq!(desc_offsets::DV, at(offset_of!(AttentionDesc, dv)));
        assert_eq!(desc_offsets::WINDOW, at(offset_of!(AttentionDesc, window)));
        assert_eq!(desc_offsets::SCALE, at(offset_of!(AttentionDesc, scale)));
        assert_eq!(
            desc_offsets::SOFTCAP,
            at(offset_of!(AttentionDesc, softcap))
        );
        assert_eq!(desc_offsets::CAUSAL, at(offset_of!(AttentionDesc, causal)));
        assert_eq!(
            desc_offsets::THREADS,
            at(offset_of!(AttentionDesc, threads))
        );
        assert_eq!(desc_offsets::EXP_X2, at(offset_of!(AttentionDesc, exp_x2)));
        assert_eq!(desc_offsets::SIZE as usize, size_of::<AttentionDesc>());
    }

    #[test]
    fn exp_cephes_is_within_a_few_ulps_of_exp() {
        let mut x = -87.0f32;
        while x <= 88.0 {
            let (a, e) = (exp_cephes(x, 0.5), x.exp());
            assert!(
                (a - e).abs() <= 4.0 * f32::EPSILON * e,
                "{x}: {a} against {e}"
            );
            x += 0.013;
        }
    }
}
