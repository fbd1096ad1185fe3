//! The plain-Rust reference of the NPU attention kernel's arithmetic
//! ([`super::attention`]): what the kernel must equal bit for bit, written
//! as directly as possible — one query row at a time, key tiles of `nk`
//! keys in order, every f16 rounding and f32 operation of the
//! instructions `cvt.f16`, `mm.f16`, `sm.online` and `ew.rescale`
//! (`docs/NPU_ISA.md`) in their order, the masks as the IR op
//! `attention` defines them (`ir/src/ops/fused/attention.rs`, steps 1–5).

use half::f16;

use super::attention::{AttentionProblem, MaskKind};

/// The mask operand's data, row-major `[mask_rows, t]`.
#[derive(Clone, Copy, Debug)]
pub enum MaskData<'a> {
    None,
    Keep(&'a [u8]),
    Add(&'a [f32]),
}

fn h(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The two f16 halves of `x` as `cvt.f16` with `lo` gives them.
fn halves(x: f32) -> (f32, f32) {
    let hi = h(x);
    (hi, h(x - hi))
}

/// `Σ a·b` as `mm.f16` sums one element: from `+0`, in order, each
/// product exact, each sum rounded.
fn dot(a: impl Iterator<Item = f32>, b: impl Iterator<Item = f32>) -> f32 {
    a.zip(b).fold(0.0f32, |s, (x, y)| s + x * y)
}

/// Attention of `p` with key tiles of `nk` keys: `q [b, hq, s, d]`,
/// `k [b, hkv, t, d]`, `v [b, hkv, t, dv]`, f32 row-major; the result
/// `[b, hq, s, dv]`.
pub fn attention_reference(
    p: &AttentionProblem,
    nk: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: MaskData<'_>,
) -> Vec<f32> {
    let (hq, hkv) = (p.heads as usize, p.kv_heads as usize);
    let (s, t, d, dv) = (p.s as usize, p.t as usize, p.d as usize, p.dv as usize);
    let past = t as i64 - s as i64;
    let mut out = vec![0f32; p.batch as usize * hq * s * dv];
    for n in 0..p.batch as usize {
        for head in 0..hq {
            let kvh = head / (hq / hkv);
            let kbase = (n * hkv + kvh) * t;
            for i in 0..s {
                let qrow: Vec<(f32, f32)> = q[((n * hq + head) * s + i) * d..][..d]
                    .iter()
                    .map(|&x| halves(x))
                    .collect();
                let mrow = if p.mask_rows == 1 { 0 } else { i };
                let o = &mut out[((n * hq + head) * s + i) * dv..][..dv];
                let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
                for (ti, j0) in (0..t).step_by(nk).enumerate() {
                    let keys = j0..(j0 + nk).min(t);
                    let x: Vec<f32> = keys
                        .clone()
                        .map(|j| {
                            let krow: Vec<(f32, f32)> = k[(kbase + j) * d..][..d]
                                .iter()
                                .map(|&y| halves(y))
                                .collect();
                            let (qh, ql) = (qrow.iter().map(|x| x.0), qrow.iter().map(|x| x.1));
                            let (kh, kl) = (krow.iter().map(|x| x.0), krow.iter().map(|x| x.1));
                            // The three `mm.f16` into one tile, in order.
                            let score = dot(qh.clone(), kh.clone()) + dot(qh, kl) + dot(ql, kh);
                            let mut x = p.scale * score;
                            if p.softcap > 0.0 {
                                x = p.softcap * (x / p.softcap).tanh();
                            }
                            match mask {
                                MaskData::None => {}
                                MaskData::Add(m) => x += m[mrow * t + j],
                                MaskData::Keep(m) => {
                                    if m[mrow * t + j] == 0 {
                                        x = f32::NEG_INFINITY;
                                    }
                                }
                            }
                            let (pos, j) = (i as i64 + past, j as i64);
                            let w = i64::from(p.window);
                            if p.causal && (j > pos || (w > 0 && j <= pos - w)) {
                                x = f32::NEG_INFINITY;
                            }
                            x
                        })
                        .collect();
                    let first = ti == 0;
                    let (old_max, old_sum) = if first {
                        (f32::NEG_INFINITY, 0.0)
                    } else {
                        (max, sum)
                    };
                    let new_max = old_max.max(x.iter().copied().fold(f32::NEG_INFINITY, f32::max));
                    let (alpha, probs) = if new_max == f32::NEG_INFINITY {
                        (1.0, vec![0f32; x.len()])
                    } else {
                        let probs: Vec<f32> = x.iter().map(|&x| (x - new_max).exp()).collect();
                        ((old_max - new_max).exp(), probs)
                    };
                    sum = if new_max == f32::NEG_INFINITY {
                        old_sum
                    } else {
                        old_sum * alpha + probs.iter().fold(0.0f32, |a, &b| a + b)
                    };
                    max = new_max;
                    let ph: Vec<f32> = probs.iter().map(|&x| h(x)).collect();
                    for (c, oc) in o.iter_mut().enumerate() {
                        let vcol = keys.clone().map(|j| h(v[(kbase + j) * dv + c]));
                        let tc = dot(ph.iter().copied(), vcol);
                        *oc = if first { tc } else { *oc * alpha + tc };
                    }
                }
                for oc in o.iter_mut() {
                    *oc = if sum == 0.0 { 0.0 } else { *oc / sum };
                }
            }
        }
    }
    out
}

/// The kind of `m`.
pub fn mask_kind(m: &MaskData<'_>) -> MaskKind {
    match m {
        MaskData::None => MaskKind::None,
        MaskData::Keep(_) => MaskKind::Keep,
        MaskData::Add(_) => MaskKind::Add,
    }
}
