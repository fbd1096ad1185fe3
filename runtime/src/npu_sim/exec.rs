//! Data semantics of each instruction (`docs/NPU_ISA.md`,
//! "Instructions"): reads its operands from DDR/CBUF, computes with the
//! exact arithmetic of [`super::arith`], writes its result. Each
//! instruction reads all its operands before writing, so overlapping
//! operands behave as if the instruction were atomic. Errors (out-of-range
//! addresses, bad shifts) leave memory unchanged. The floating-point
//! instructions (`norm.rms`, `cvt.f16`, `mm.f16`, `sm.online`,
//! `ew.rescale`) live in [`super::exec_float`].

use super::arith::{int4_at, requant, sat8, shift_ok};
use super::exec_float;
use super::mem::{bytes, bytes_mut, i32_at, set_i32, Mem};
use super::ExecError;
use slmcc_backends::npu::isa::{DmaDims, EltOp, Instr, OutType, ReduceOp, WeightType};
use slmcc_ir::ops::fused_util::sigmoid;

/// DDR bytes an instruction moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub read: u64,
    pub written: u64,
}

/// Bytes per epilogue channel record: bias i32, mult i32, res_mult i32,
/// shift i8, res_shift i8, 2 ignored bytes.
pub const EPI_RECORD: u64 = 16;
/// Bytes per `epi.f32` channel record (scale f32, colsum i32) and row
/// record (s f32, z i32).
pub const EPI_F32_RECORD: u64 = 8;
/// Bytes of the element-wise parameter record: a_mult, b_mult, out_mult
/// (i32), a_shift, b_shift, out_shift (i8), 1 ignored byte.
pub const ELT_RECORD: u64 = 16;
/// Left shift applied to both inputs of an element-wise add.
pub const ADD_LEFT_SHIFT: u32 = 20;

fn shift(v: u8) -> Result<i8, ExecError> {
    let s = v as i8;
    if shift_ok(s) {
        Ok(s)
    } else {
        Err(ExecError::BadShift(s))
    }
}

/// The DDR offsets of each run of a DMA, in CBUF order.
fn runs(ddr: u32, d: DmaDims) -> impl Iterator<Item = u64> {
    (0..u64::from(d.count2)).flat_map(move |i2| {
        (0..u64::from(d.count1))
            .map(move |i1| u64::from(ddr) + i2 * u64::from(d.stride2) + i1 * u64::from(d.stride1))
    })
}

fn dma_load(
    ddr_mem: &[u8],
    cbuf_mem: &mut [u8],
    cbuf: u32,
    ddr: u32,
    d: DmaDims,
) -> Result<Traffic, ExecError> {
    let total = d.bytes();
    let run = u64::from(d.run);
    // The destination bounds the size before anything is staged.
    bytes(Mem::Cbuf, cbuf_mem, cbuf.into(), total)?;
    let mut staged = Vec::with_capacity(total as usize);
    for off in runs(ddr, d) {
        staged.extend_from_slice(bytes(Mem::Ddr, ddr_mem, off, run)?);
    }
    bytes_mut(Mem::Cbuf, cbuf_mem, cbuf.into(), total)?.copy_from_slice(&staged);
    Ok(Traffic {
        read: total,
        written: 0,
    })
}

fn dma_store(
    ddr_mem: &mut [u8],
    cbuf_mem: &[u8],
    ddr: u32,
    cbuf: u32,
    d: DmaDims,
) -> Result<Traffic, ExecError> {
    let total = d.bytes();
    let run = u64::from(d.run);
    let src = bytes(Mem::Cbuf, cbuf_mem, cbuf.into(), total)?;
    // Check every destination before writing any.
    for off in runs(ddr, d) {
        bytes(Mem::Ddr, ddr_mem, off, run)?;
    }
    for (n, off) in runs(ddr, d).enumerate() {
        let s = &src[n * d.run as usize..][..d.run as usize];
        bytes_mut(Mem::Ddr, ddr_mem, off, run)?.copy_from_slice(s);
    }
    Ok(Traffic {
        read: 0,
        written: total,
    })
}

#[allow(clippy::too_many_arguments)]
fn matmul(
    c: &mut [u8],
    wtype: WeightType,
    a: u32,
    w: u32,
    acc: u32,
    (m, k, n): (usize, usize, usize),
    accumulate: bool,
) -> Result<(), ExecError> {
    let a = bytes(Mem::Cbuf, c, a.into(), (m * k) as u64)?.to_vec();
    let w_len = match wtype {
        WeightType::I8 => k * n,
        WeightType::I4 => (k * n).div_ceil(2),
    };
    let w = bytes(Mem::Cbuf, c, w.into(), w_len as u64)?.to_vec();
    let out = bytes_mut(Mem::Cbuf, c, acc.into(), (m * n * 4) as u64)?;
    for i in 0..m {
        for j in 0..n {
            let mut s: i32 = if accumulate {
                i32_at(out, i * n + j)
            } else {
                0
            };
            for p in 0..k {
                let wv = match wtype {
                    WeightType::I8 => w[p * n + j] as i8,
                    WeightType::I4 => int4_at(&w, p * n + j),
                };
                s = s.wrapping_add(i32::from(a[i * k + p] as i8) * i32::from(wv));
            }
            set_i32(out, i * n + j, s);
        }
    }
    Ok(())
}

struct EpiChannel {
    bias: i32,
    mult: i32,
    res_mult: i32,
    shift: i8,
    res_shift: i8,
}

fn epi_channels(c: &[u8], params: u32, n: usize) -> Result<Vec<EpiChannel>, ExecError> {
    let p = bytes(Mem::Cbuf, c, params.into(), n as u64 * EPI_RECORD)?;
    p.chunks_exact(EPI_RECORD as usize)
        .map(|r| {
            Ok(EpiChannel {
                bias: i32_at(r, 0),
                mult: i32_at(r, 1),
                res_mult: i32_at(r, 2),
                shift: shift(r[12])?,
                res_shift: shift(r[13])?,
            })
        })
        .collect()
}

fn epilogue(c: &mut [u8], i: &Instr) -> Result<(), ExecError> {
    let Instr::Epilogue {
        out_type,
        acc,
        params,
        out,
        m,
        n,
        out_zp,
        lut,
        residual,
    } = *i
    else {
        return Ok(());
    };
    let (m, n) = (m as usize, n as usize);
    let ch = epi_channels(c, params, n)?;
    let accs = bytes(Mem::Cbuf, c, acc.into(), (m * n * 4) as u64)?;
    let x: Vec<i32> = (0..m * n)
        .map(|e| i32_at(accs, e).wrapping_add(ch[e % n].bias))
        .collect();
    if out_type == OutType::I32 {
        let o = bytes_mut(Mem::Cbuf, c, out.into(), (m * n * 4) as u64)?;
        for (e, v) in x.iter().enumerate() {
            set_i32(o, e, *v);
        }
        return Ok(());
    }
    let table = match lut {
        Some(l) => Some(bytes(Mem::Cbuf, c, l.into(), 256)?.to_vec()),
        None => None,
    };
    let res = match residual {
        Some((r, zp)) => Some((bytes(Mem::Cbuf, c, r.into(), (m * n) as u64)?.to_vec(), zp)),
        None => None,
    };
    let mut y = Vec::with_capacity(m * n);
    for (e, &xv) in x.iter().enumerate() {
        let chn = &ch[e % n];
        let mut q = sat8(requant(xv, chn.mult, chn.shift).saturating_add(out_zp.into()));
        if let Some(t) = &table {
            q = t[(i32::from(q) + 128) as usize] as i8;
        }
        if let Some((r, zp)) = &res {
            let d = requant(
                i32::from(r[e] as i8) - i32::from(*zp),
                chn.res_mult,
                chn.res_shift,
            );
            q = sat8(i32::from(q).saturating_add(d));
        }
        y.push(q as u8);
    }
    bytes_mut(Mem::Cbuf, c, out.into(), (m * n) as u64)?.copy_from_slice(&y);
    Ok(())
}

fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_bits(i32_at(b, i) as u32)
}

/// `(f32, i32)` pairs of `count` 8-byte records at `addr`.
fn f32_i32_records(c: &[u8], addr: u32, count: usize) -> Result<Vec<(f32, i32)>, ExecError> {
    let r = bytes(Mem::Cbuf, c, addr.into(), count as u64 * EPI_F32_RECORD)?;
    Ok((0..count)
        .map(|e| (f32_at(r, 2 * e), i32_at(r, 2 * e + 1)))
        .collect())
}

/// `epi.f32`: `out = (acc. ? out : +0.0) + ((acc - z·colsum) as f32) ·
/// (s · scale)`, each f32 operation rounded separately (no FMA).
#[allow(clippy::too_many_arguments)]
fn epilogue_f32(
    c: &mut [u8],
    acc: u32,
    params: u32,
    rows: u32,
    out: u32,
    (m, n): (usize, usize),
    accumulate: bool,
) -> Result<(), ExecError> {
    let ch = f32_i32_records(c, params, n)?;
    let rw = f32_i32_records(c, rows, m)?;
    let accs = bytes(Mem::Cbuf, c, acc.into(), (m * n * 4) as u64)?.to_vec();
    let o = bytes_mut(Mem::Cbuf, c, out.into(), (m * n * 4) as u64)?;
    for (i, &(s, z)) in rw.iter().enumerate() {
        for (j, &(scale, colsum)) in ch.iter().enumerate() {
            let e = i * n + j;
            let x = i32_at(&accs, e).wrapping_sub(z.wrapping_mul(colsum));
            let prev = if accumulate { f32_at(o, e) } else { 0.0 };
            let y = prev + (x as f32) * (s * scale);
            set_i32(o, e, y.to_bits() as i32);
        }
    }
    Ok(())
}

/// `ew.silu_mul`: `out = (a · sigmoid(a)) · b` over `len` f32 elements,
/// with the IR's f32 sigmoid (the vector unit's SiLU is defined as it).
fn silu_mul(c: &mut [u8], a: u32, b: u32, out: u32, len: u32) -> Result<(), ExecError> {
    let bytes_len = 4 * u64::from(len);
    let av = bytes(Mem::Cbuf, c, a.into(), bytes_len)?.to_vec();
    let bv = bytes(Mem::Cbuf, c, b.into(), bytes_len)?.to_vec();
    let o = bytes_mut(Mem::Cbuf, c, out.into(), bytes_len)?;
    for e in 0..len as usize {
        let (x, y) = (f32_at(&av, e), f32_at(&bv, e));
        let v = (x * sigmoid(x)) * y;
        set_i32(o, e, v.to_bits() as i32);
    }
    Ok(())
}

fn eltwise(c: &mut [u8], i: &Instr) -> Result<(), ExecError> {
    let Instr::Eltwise {
        op,
        a,
        b,
        out,
        params,
        len,
        a_zp,
        b_zp,
        out_zp,
    } = *i
    else {
        return Ok(());
    };
    let p = bytes(Mem::Cbuf, c, params.into(), ELT_RECORD)?;
    let (am, bm, om) = (i32_at(p, 0), i32_at(p, 1), i32_at(p, 2));
    let (ash, bsh, osh) = (shift(p[12])?, shift(p[13])?, shift(p[14])?);
    let len = u64::from(len);
    let av = bytes(Mem::Cbuf, c, a.into(), len)?.to_vec();
    let bv = bytes(Mem::Cbuf, c, b.into(), len)?.to_vec();
    let y: Vec<u8> = av
        .iter()
        .zip(&bv)
        .map(|(&x, &z)| {
            let da = i32::from(x as i8) - i32::from(a_zp);
            let db = i32::from(z as i8) - i32::from(b_zp);
            let r = match op {
                EltOp::Add => {
                    let sa = requant(da << ADD_LEFT_SHIFT, am, ash);
                    let sb = requant(db << ADD_LEFT_SHIFT, bm, bsh);
                    requant(sa.saturating_add(sb), om, osh)
                }
                EltOp::Mul => requant(da * db, om, osh),
            };
            sat8(r.saturating_add(out_zp.into())) as u8
        })
        .collect();
    bytes_mut(Mem::Cbuf, c, out.into(), len)?.copy_from_slice(&y);
    Ok(())
}

fn reduce(c: &mut [u8], i: &Instr) -> Result<(), ExecError> {
    let Instr::Reduce {
        op,
        input,
        out,
        m,
        n,
        zp,
    } = *i
    else {
        return Ok(());
    };
    let (m, n) = (m as usize, n as usize);
    let x = bytes(Mem::Cbuf, c, input.into(), (m * n) as u64)?;
    let rows: Vec<i32> = x
        .chunks_exact(n)
        .map(|row| {
            let d = row.iter().map(|&v| i32::from(v as i8) - i32::from(zp));
            match op {
                ReduceOp::SumSq => d.fold(0i32, |s, v| s.wrapping_add(v * v)),
                ReduceOp::Max => d.max().unwrap_or(i32::MIN),
            }
        })
        .collect();
    let o = bytes_mut(Mem::Cbuf, c, out.into(), (m * 4) as u64)?;
    for (r, v) in rows.iter().enumerate() {
        set_i32(o, r, *v);
    }
    Ok(())
}

/// Executes the data effect of `i` (semaphores have none).
pub fn exec(i: &Instr, ddr: &mut [u8], cbuf: &mut [u8]) -> Result<Traffic, ExecError> {
    match *i {
        Instr::DmaLoad {
            cbuf: cb,
            ddr: d,
            dims,
        } => dma_load(ddr, cbuf, cb, d, dims),
        Instr::DmaStore {
            ddr: d,
            cbuf: cb,
            dims,
        } => dma_store(ddr, cbuf, d, cb, dims),
        Instr::MatMul {
            wtype,
            a,
            w,
            acc,
            m,
            k,
            n,
            accumulate,
        } => {
            let dims = (m as usize, k as usize, n as usize);
            matmul(cbuf, wtype, a, w, acc, dims, accumulate).map(|()| Traffic::default())
        }
        Instr::Epilogue { .. } => epilogue(cbuf, i).map(|()| Traffic::default()),
        Instr::EpilogueF32 {
            acc,
            params,
            rows,
            out,
            m,
            n,
            accumulate,
        } => {
            let dims = (m as usize, n as usize);
            epilogue_f32(cbuf, acc, params, rows, out, dims, accumulate)
                .map(|()| Traffic::default())
        }
        Instr::Eltwise { .. } => eltwise(cbuf, i).map(|()| Traffic::default()),
        Instr::SiluMul { a, b, out, len } => {
            silu_mul(cbuf, a, b, out, len).map(|()| Traffic::default())
        }
        Instr::Reduce { .. } => reduce(cbuf, i).map(|()| Traffic::default()),
        Instr::RmsNorm { .. }
        | Instr::CvtF16 { .. }
        | Instr::MatMulF16 { .. }
        | Instr::SoftmaxOnline { .. }
        | Instr::Rescale { .. } => exec_float::exec(i, cbuf).map(|()| Traffic::default()),
        Instr::Signal { .. } | Instr::Wait { .. } => Ok(Traffic::default()),
    }
}
