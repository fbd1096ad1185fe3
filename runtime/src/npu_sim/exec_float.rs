//! Data semantics of the floating-point instructions (`docs/NPU_ISA.md`,
//! `norm.rms`, `cvt.f16`, `mm.f16`, `sm.online`, `ew.rescale`): f32
//! arithmetic in the documented operation order, each operation rounded
//! to nearest even (no fused multiply-add, sequential sums from `+0.0`),
//! `exp` and `sqrt` as Rust's `f32::exp` / `f32::sqrt`, f16 conversion by
//! the `half` crate (round to nearest even, overflow to ±∞, NaN stays
//! NaN). Every instruction reads all its operands into owned buffers and
//! checks every destination range before it writes anything, so an error
//! leaves the CBUF unchanged and overlapping operands behave as if the
//! instruction were atomic.
//!
//! Maxima (`sm.online`) use `f32::max`, as the IR's softmax and attention
//! do (`fold(f32::NEG_INFINITY, f32::max)`): a NaN score or a NaN old
//! maximum is ignored by the maximum (it still propagates through
//! `exp(x - max)` and the sum).

use super::mem::{bytes, bytes_mut, Mem};
use super::ExecError;
use half::f16;
use slmcc_backends::npu::isa::{Instr, RescaleMode, ScoreMask};

/// Bytes of the `norm.rms` parameter record before the weights (f32 `eps`
/// @0, f32 `offset` @4, 8..16 ignored).
pub const NORM_RECORD: u64 = 16;
/// Bytes of an `sm.online` row record (f32 max @0, sum @4, alpha @8,
/// 12..16 ignored and preserved).
pub const SM_ROW_RECORD: u64 = 16;
/// Bytes of the `sm.online` parameter record (f32 scale @0, i32 window
/// @4, f32 softcap @8, 12..16 ignored).
pub const SM_PARAMS: u64 = 16;

fn f32_le(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// `count` f32 values at `addr`.
fn f32s(c: &[u8], addr: u32, count: usize) -> Result<Vec<f32>, ExecError> {
    let b = bytes(Mem::Cbuf, c, addr.into(), 4 * count as u64)?;
    Ok(b.chunks_exact(4).map(f32_le).collect())
}

/// `count` f16 values at `addr`, widened (exactly) to f32.
fn f16s(c: &[u8], addr: u32, count: usize) -> Result<Vec<f32>, ExecError> {
    let b = bytes(Mem::Cbuf, c, addr.into(), 2 * count as u64)?;
    Ok(b.chunks_exact(2)
        .map(|h| f16::from_le_bytes([h[0], h[1]]).to_f32())
        .collect())
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| f16::from_f32(x).to_le_bytes())
        .collect()
}

/// Writes each `(addr, bytes)` in order after checking all of them, so a
/// bad range writes nothing.
fn write_all(c: &mut [u8], outs: &[(u32, Vec<u8>)]) -> Result<(), ExecError> {
    for (addr, b) in outs {
        bytes(Mem::Cbuf, c, (*addr).into(), b.len() as u64)?;
    }
    for (addr, b) in outs {
        bytes_mut(Mem::Cbuf, c, (*addr).into(), b.len() as u64)?.copy_from_slice(b);
    }
    Ok(())
}

/// `norm.rms`: per row `v = x (+ r)`, `ss = Σ v²` sequentially from `+0`,
/// `inv = 1 / sqrt(ss / n + eps)`, `y = (v · inv) · (w + offset)`; `s = v`
/// written first (with the residual), then `y`. Bit for bit
/// `slmcc_ir`'s `rms_norm_rows` (whose `Sum` starts at `-0.0`: the same
/// bits for `n >= 1`, as `-0 + v²` equals `+0 + v²` for every `v²`, which
/// is never `-0`).
fn rms_norm(
    c: &mut [u8],
    x: u32,
    residual: Option<(u32, u32)>,
    params: u32,
    y: u32,
    (m, n): (usize, usize),
) -> Result<(), ExecError> {
    let xv = f32s(c, x, m * n)?;
    let rv = residual.map(|(r, _)| f32s(c, r, m * n)).transpose()?;
    let p = f32s(c, params, (NORM_RECORD / 4) as usize + n)?;
    let (eps, offset, w) = (p[0], p[1], &p[(NORM_RECORD / 4) as usize..]);
    let v: Vec<f32> = match &rv {
        Some(r) => xv.iter().zip(r).map(|(a, b)| a + b).collect(),
        None => xv,
    };
    let mut out = Vec::with_capacity(m * n);
    for row in v.chunks_exact(n) {
        let mut ss = 0.0f32;
        for &a in row {
            ss += a * a;
        }
        let inv = 1.0 / (ss / n as f32 + eps).sqrt();
        out.extend(row.iter().zip(w).map(|(&a, &wj)| (a * inv) * (wj + offset)));
    }
    let mut outs = Vec::with_capacity(2);
    if let Some((_, s)) = residual {
        outs.push((s, f32_bytes(&v)));
    }
    outs.push((y, f32_bytes(&out)));
    write_all(c, &outs)
}

/// `cvt.f16`: `len` f32 to f16, round to nearest even.
fn cvt_f16(
    c: &mut [u8],
    input: u32,
    out: u32,
    len: usize,
    lo: Option<u32>,
) -> Result<(), ExecError> {
    let v = f32s(c, input, len)?;
    let hi = f16_bytes(&v);
    let mut outs = vec![(out, hi)];
    if let Some(lo) = lo {
        let rest: Vec<f32> = v
            .iter()
            .map(|&x| x - half::f16::from_f32(x).to_f32())
            .collect();
        outs.push((lo, f16_bytes(&rest)));
    }
    write_all(c, &outs)
}

/// `mm.f16`: `d = +0; d = d + a[i][p]·b[p][j]` over `p` in order (the f16
/// product is exact in f32), then `acc = accumulate ? acc + d : d`.
fn matmul_f16(
    c: &mut [u8],
    (a, b, acc): (u32, u32, u32),
    (m, k, n): (usize, usize, usize),
    b_transposed: bool,
    accumulate: bool,
) -> Result<(), ExecError> {
    let av = f16s(c, a, m * k)?;
    let bv = f16s(c, b, k * n)?;
    let prev = if accumulate {
        Some(f32s(c, acc, m * n)?)
    } else {
        None
    };
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        let arow = &av[i * k..][..k];
        for j in 0..n {
            let mut d = 0.0f32;
            for (p, &ap) in arow.iter().enumerate() {
                let bp = if b_transposed {
                    bv[j * k + p]
                } else {
                    bv[p * n + j]
                };
                d += ap * bp;
            }
            out.push(match &prev {
                Some(pv) => pv[i * n + j] + d,
                None => d,
            });
        }
    }
    write_all(c, &[(acc, f32_bytes(&out))])
}

/// The mask operand of an `sm.online`, read.
enum MaskData {
    None,
    Keep(Vec<u8>),
    Add(Vec<f32>),
}

/// `sm.online` (see the ISA document for the steps). Row records: max,
/// sum and alpha are written, bytes 12..16 kept.
fn softmax_online(c: &mut [u8], i: &Instr) -> Result<(), ExecError> {
    let Instr::SoftmaxOnline {
        scores,
        probs,
        rows,
        params,
        mask,
        m,
        n,
        causal,
        first,
    } = *i
    else {
        return Ok(());
    };
    let (m, n) = (m as usize, n as usize);
    let s = f32s(c, scores, m * n)?;
    let mut rec = bytes(Mem::Cbuf, c, rows.into(), m as u64 * SM_ROW_RECORD)?.to_vec();
    let prm = bytes(Mem::Cbuf, c, params.into(), SM_PARAMS)?;
    let scale = f32_le(&prm[0..4]);
    let window = i64::from(i32::from_le_bytes([prm[4], prm[5], prm[6], prm[7]]));
    let softcap = f32_le(&prm[8..12]);
    let mk = match mask {
        ScoreMask::None => MaskData::None,
        ScoreMask::Keep(a) => {
            MaskData::Keep(bytes(Mem::Cbuf, c, a.into(), (m * n) as u64)?.to_vec())
        }
        ScoreMask::Add(a) => MaskData::Add(f32s(c, a, m * n)?),
    };
    let mut p = Vec::with_capacity(m * n);
    let mut x = Vec::with_capacity(n);
    for (ii, r) in rec.chunks_exact_mut(SM_ROW_RECORD as usize).enumerate() {
        let (max_old, sum_old) = if first {
            (f32::NEG_INFINITY, 0.0f32)
        } else {
            (f32_le(&r[0..4]), f32_le(&r[4..8]))
        };
        x.clear();
        for jj in 0..n {
            let e = ii * n + jj;
            let mut v = scale * s[e];
            if softcap > 0.0 {
                v = softcap * (v / softcap).tanh();
            }
            match &mk {
                MaskData::None => {}
                MaskData::Keep(k) => {
                    if k[e] == 0 {
                        v = f32::NEG_INFINITY;
                    }
                }
                MaskData::Add(k) => v += k[e],
            }
            if let Some(d) = causal {
                let (rel, d) = (jj as i64 - ii as i64, i64::from(d));
                if rel > d || (window > 0 && rel <= d - window) {
                    v = f32::NEG_INFINITY;
                }
            }
            x.push(v);
        }
        let mt = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mn = max_old.max(mt);
        let (alpha, sum) = if mn == f32::NEG_INFINITY {
            p.extend(std::iter::repeat_n(0.0f32, n));
            (1.0f32, sum_old)
        } else {
            let alpha = (max_old - mn).exp();
            let mut t = 0.0f32;
            for &v in &x {
                let pj = (v - mn).exp();
                t += pj;
                p.push(pj);
            }
            (alpha, sum_old * alpha + t)
        };
        r[0..4].copy_from_slice(&mn.to_le_bytes());
        r[4..8].copy_from_slice(&sum.to_le_bytes());
        r[8..12].copy_from_slice(&alpha.to_le_bytes());
    }
    write_all(c, &[(rows, rec), (probs, f16_bytes(&p))])
}

/// `ew.rescale`. Only the operands the mode uses are accessed: first
/// reads `t` (not the row records), accumulate `out`, the records and
/// `t`, finish `out` and the records.
fn rescale(
    c: &mut [u8],
    (out, t, rows): (u32, u32, u32),
    (m, n): (usize, usize),
    mode: RescaleMode,
) -> Result<(), ExecError> {
    let rec =
        |c: &[u8]| bytes(Mem::Cbuf, c, rows.into(), m as u64 * SM_ROW_RECORD).map(<[u8]>::to_vec);
    let res = match mode {
        RescaleMode::First => f32s(c, t, m * n)?,
        RescaleMode::Accumulate => {
            let o = f32s(c, out, m * n)?;
            let r = rec(c)?;
            let tv = f32s(c, t, m * n)?;
            o.iter()
                .zip(&tv)
                .enumerate()
                .map(|(e, (&ov, &tv))| {
                    let alpha = f32_le(&r[(e / n) * SM_ROW_RECORD as usize + 8..]);
                    ov * alpha + tv
                })
                .collect()
        }
        RescaleMode::Finish => {
            let o = f32s(c, out, m * n)?;
            let r = rec(c)?;
            o.iter()
                .enumerate()
                .map(|(e, &ov)| {
                    let sum = f32_le(&r[(e / n) * SM_ROW_RECORD as usize + 4..]);
                    if sum == 0.0 {
                        0.0
                    } else {
                        ov / sum
                    }
                })
                .collect()
        }
    };
    write_all(c, &[(out, f32_bytes(&res))])
}

/// Executes one of the floating-point instructions on the core's CBUF
/// (`Ok` without effect for any other instruction).
pub fn exec(i: &Instr, c: &mut [u8]) -> Result<(), ExecError> {
    match *i {
        Instr::RmsNorm {
            x,
            residual,
            params,
            y,
            m,
            n,
        } => rms_norm(c, x, residual, params, y, (m as usize, n as usize)),
        Instr::CvtF16 {
            input,
            out,
            len,
            lo,
        } => cvt_f16(c, input, out, len as usize, lo),
        Instr::MatMulF16 {
            a,
            b,
            acc,
            m,
            k,
            n,
            b_transposed,
            accumulate,
        } => matmul_f16(
            c,
            (a, b, acc),
            (m as usize, k as usize, n as usize),
            b_transposed,
            accumulate,
        ),
        Instr::SoftmaxOnline { .. } => softmax_online(c, i),
        Instr::Rescale {
            out,
            t,
            rows,
            m,
            n,
            mode,
        } => rescale(c, (out, t, rows), (m as usize, n as usize), mode),
        _ => Ok(()),
    }
}
