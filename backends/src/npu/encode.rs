//! Binary encoding of [`Instr`]: one little-endian 128-bit word per
//! instruction, opcode in the low byte (layout table in `docs/NPU_ISA.md`).
//!
//! Contract: [`encode`] accepts exactly the instructions [`Instr::check`]
//! accepts; [`decode`] inverts it (`decode(&encode(i)?) == Ok(i)`) and
//! rejects every other word with a [`DecodeError`] — unknown opcodes and
//! non-zero reserved bits included — without panicking. CBUF addresses
//! are stored in 16-byte granules, counts and sizes as `value - 1`, zero
//! points as two's-complement bytes. [`disassemble`] prints one line per
//! word in the assembly syntax of `Instr`'s `Display`.

use crate::npu::isa::{
    DmaDims, EltOp, Instr, IsaError, OutType, ReduceOp, RescaleMode, ScoreMask, WeightType,
    CBUF_ALIGN,
};

/// Opcodes (low byte of the word).
pub mod opcode {
    pub const DMA_LOAD: u8 = 0x01;
    pub const DMA_STORE: u8 = 0x02;
    pub const MATMUL: u8 = 0x10;
    pub const EPILOGUE: u8 = 0x11;
    pub const ELTWISE: u8 = 0x12;
    pub const REDUCE: u8 = 0x13;
    pub const EPILOGUE_F32: u8 = 0x14;
    pub const SILU_MUL: u8 = 0x15;
    pub const NORM_RMS: u8 = 0x16;
    pub const CVT_F16: u8 = 0x17;
    pub const MATMUL_F16: u8 = 0x18;
    pub const SOFTMAX_ONLINE: u8 = 0x19;
    pub const RESCALE: u8 = 0x1a;
    pub const SIGNAL: u8 = 0x20;
    pub const WAIT: u8 = 0x21;
}

/// Bytes per encoded instruction.
pub const WORD_BYTES: usize = 16;

/// A word that is not the encoding of any instruction.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("opcode {opcode:#04x}: reserved bits set ({bits:#x})")]
    ReservedBits { opcode: u8, bits: u128 },
}

/// A byte string that does not disassemble.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DisasmError {
    #[error("{0} bytes is not a whole number of 16-byte instructions")]
    Length(usize),
    #[error("at byte {offset:#x}: {source}")]
    At { offset: usize, source: DecodeError },
}

struct W(u128);

impl W {
    fn put(&mut self, lo: u32, width: u32, v: u64) {
        let mask = (1u128 << width) - 1;
        self.0 |= (u128::from(v) & mask) << lo;
    }
}

fn get(w: u128, lo: u32, width: u32) -> u32 {
    ((w >> lo) & ((1u128 << width) - 1)) as u32
}

fn g(a: u32) -> u64 {
    u64::from(a / CBUF_ALIGN)
}

fn ug(w: u128, lo: u32) -> u32 {
    get(w, lo, 15) * CBUF_ALIGN
}

/// Width of `sm.online`'s two's-complement `diag` field.
const DIAG_BITS: u32 = 20;

/// `sm.online`'s mask kind field: 0 none, 1 keep, 2 add (3 invalid).
fn mask_kind(m: ScoreMask) -> u64 {
    match m {
        ScoreMask::None => 0,
        ScoreMask::Keep(_) => 1,
        ScoreMask::Add(_) => 2,
    }
}

/// `ew.rescale`'s mode field: 0 first, 1 accumulate, 2 finish (3 invalid).
fn rescale_mode(m: RescaleMode) -> u64 {
    match m {
        RescaleMode::First => 0,
        RescaleMode::Accumulate => 1,
        RescaleMode::Finish => 2,
    }
}

fn zp(v: i8) -> u64 {
    u64::from(v as u8)
}

fn izp(w: u128, lo: u32) -> i8 {
    get(w, lo, 8) as u8 as i8
}

/// Encodes a checked instruction.
pub fn encode(i: &Instr) -> Result<[u8; WORD_BYTES], IsaError> {
    i.check()?;
    let mut w = W(0);
    let m1 = |v: u32| u64::from(v - 1);
    match *i {
        Instr::DmaLoad { cbuf, ddr, dims } | Instr::DmaStore { ddr, cbuf, dims } => {
            let op = if matches!(i, Instr::DmaLoad { .. }) {
                opcode::DMA_LOAD
            } else {
                opcode::DMA_STORE
            };
            w.put(0, 8, op.into());
            w.put(8, 15, g(cbuf));
            w.put(23, 32, ddr.into());
            w.put(55, 13, m1(dims.run));
            w.put(68, 10, m1(dims.count1));
            w.put(78, 20, dims.stride1.into());
            w.put(98, 10, m1(dims.count2));
            w.put(108, 20, dims.stride2.into());
        }
        Instr::MatMul {
            wtype,
            a,
            w: wt,
            acc,
            m,
            k,
            n,
            accumulate,
        } => {
            w.put(0, 8, opcode::MATMUL.into());
            w.put(8, 15, g(a));
            w.put(23, 15, g(wt));
            w.put(38, 15, g(acc));
            w.put(53, 12, m1(m));
            w.put(65, 14, m1(k));
            w.put(79, 12, m1(n));
            w.put(91, 1, u64::from(wtype == WeightType::I4));
            w.put(92, 1, u64::from(accumulate));
        }
        Instr::Epilogue {
            out_type,
            acc,
            params,
            out,
            m,
            n,
            out_zp,
            lut,
            residual,
        } => {
            w.put(0, 8, opcode::EPILOGUE.into());
            w.put(8, 15, g(acc));
            w.put(23, 15, g(params));
            w.put(38, 15, g(out));
            w.put(53, 15, lut.map_or(0, g));
            w.put(68, 15, residual.map_or(0, |(r, _)| g(r)));
            w.put(83, 12, m1(m));
            w.put(95, 12, m1(n));
            w.put(107, 8, zp(out_zp));
            w.put(115, 8, residual.map_or(0, |(_, z)| zp(z)));
            w.put(123, 1, u64::from(out_type == OutType::I32));
            w.put(124, 1, u64::from(lut.is_some()));
            w.put(125, 1, u64::from(residual.is_some()));
        }
        Instr::EpilogueF32 {
            acc,
            params,
            rows,
            out,
            m,
            n,
            accumulate,
        } => {
            w.put(0, 8, opcode::EPILOGUE_F32.into());
            w.put(8, 15, g(acc));
            w.put(23, 15, g(params));
            w.put(38, 15, g(rows));
            w.put(53, 15, g(out));
            w.put(68, 12, m1(m));
            w.put(80, 12, m1(n));
            w.put(92, 1, u64::from(accumulate));
        }
        Instr::Eltwise {
            op,
            a,
            b,
            out,
            params,
            len,
            a_zp,
            b_zp,
            out_zp,
        } => {
            w.put(0, 8, opcode::ELTWISE.into());
            w.put(8, 15, g(a));
            w.put(23, 15, g(b));
            w.put(38, 15, g(out));
            w.put(53, 15, g(params));
            w.put(68, 19, m1(len));
            w.put(87, 8, zp(a_zp));
            w.put(95, 8, zp(b_zp));
            w.put(103, 8, zp(out_zp));
            w.put(111, 1, u64::from(op == EltOp::Mul));
        }
        Instr::SiluMul { a, b, out, len } => {
            w.put(0, 8, opcode::SILU_MUL.into());
            w.put(8, 15, g(a));
            w.put(23, 15, g(b));
            w.put(38, 15, g(out));
            w.put(53, 19, m1(len));
        }
        Instr::RmsNorm {
            x,
            residual,
            params,
            y,
            m,
            n,
        } => {
            w.put(0, 8, opcode::NORM_RMS.into());
            w.put(8, 15, g(x));
            w.put(23, 15, residual.map_or(0, |(r, _)| g(r)));
            w.put(38, 15, g(params));
            w.put(53, 15, residual.map_or(0, |(_, s)| g(s)));
            w.put(68, 15, g(y));
            w.put(83, 12, m1(m));
            w.put(95, 14, m1(n));
            w.put(109, 1, u64::from(residual.is_some()));
        }
        Instr::CvtF16 {
            input,
            out,
            len,
            lo,
        } => {
            w.put(0, 8, opcode::CVT_F16.into());
            w.put(8, 15, g(input));
            w.put(23, 15, g(out));
            w.put(38, 19, m1(len));
            w.put(57, 15, g(lo.unwrap_or(0)));
            w.put(72, 1, u64::from(lo.is_some()));
        }
        Instr::MatMulF16 {
            a,
            b,
            acc,
            m,
            k,
            n,
            b_transposed,
            accumulate,
        } => {
            w.put(0, 8, opcode::MATMUL_F16.into());
            w.put(8, 15, g(a));
            w.put(23, 15, g(b));
            w.put(38, 15, g(acc));
            w.put(53, 12, m1(m));
            w.put(65, 14, m1(k));
            w.put(79, 12, m1(n));
            w.put(91, 1, u64::from(b_transposed));
            w.put(92, 1, u64::from(accumulate));
        }
        Instr::SoftmaxOnline {
            scores,
            probs,
            rows,
            params,
            mask,
            m,
            n,
            causal,
            first,
        } => {
            let mask_addr = match mask {
                ScoreMask::None => 0,
                ScoreMask::Keep(a) | ScoreMask::Add(a) => g(a),
            };
            w.put(0, 8, opcode::SOFTMAX_ONLINE.into());
            w.put(8, 15, g(scores));
            w.put(23, 15, g(probs));
            w.put(38, 15, g(rows));
            w.put(53, 15, g(params));
            w.put(68, 15, mask_addr);
            w.put(83, 10, m1(m));
            w.put(93, 10, m1(n));
            // Two's complement, truncated to the field (checked in range).
            w.put(103, DIAG_BITS, u64::from(causal.unwrap_or(0) as u32));
            w.put(123, 1, u64::from(causal.is_some()));
            w.put(124, 2, mask_kind(mask));
            w.put(126, 1, u64::from(first));
        }
        Instr::Rescale {
            out,
            t,
            rows,
            m,
            n,
            mode,
        } => {
            w.put(0, 8, opcode::RESCALE.into());
            w.put(8, 15, g(out));
            w.put(23, 15, g(t));
            w.put(38, 15, g(rows));
            w.put(53, 12, m1(m));
            w.put(65, 12, m1(n));
            w.put(77, 2, rescale_mode(mode));
        }
        Instr::Reduce {
            op,
            input,
            out,
            m,
            n,
            zp: z,
        } => {
            w.put(0, 8, opcode::REDUCE.into());
            w.put(8, 15, g(input));
            w.put(23, 15, g(out));
            w.put(38, 12, m1(m));
            w.put(50, 14, m1(n));
            w.put(64, 8, zp(z));
            w.put(72, 1, u64::from(op == ReduceOp::Max));
        }
        Instr::Signal { sem } => {
            w.put(0, 8, opcode::SIGNAL.into());
            w.put(8, 4, sem.into());
        }
        Instr::Wait { sem } => {
            w.put(0, 8, opcode::WAIT.into());
            w.put(8, 4, sem.into());
        }
    }
    Ok(w.0.to_le_bytes())
}

fn reserved(w: u128, opcode: u8, used_bits: u32, extra_zero: u128) -> Result<(), DecodeError> {
    let high = if used_bits >= 128 {
        0
    } else {
        w >> used_bits << used_bits
    };
    let bits = high | (w & extra_zero);
    if bits == 0 {
        Ok(())
    } else {
        Err(DecodeError::ReservedBits { opcode, bits })
    }
}

fn field_mask(lo: u32, width: u32) -> u128 {
    ((1u128 << width) - 1) << lo
}

/// Decodes one word; never panics.
pub fn decode(bytes: &[u8; WORD_BYTES]) -> Result<Instr, DecodeError> {
    let w = u128::from_le_bytes(*bytes);
    let op = (w & 0xff) as u8;
    let p1 = |lo, width| get(w, lo, width) + 1;
    let b = |bit| get(w, bit, 1) == 1;
    match op {
        opcode::DMA_LOAD | opcode::DMA_STORE => {
            let cbuf = ug(w, 8);
            let ddr = get(w, 23, 32);
            let dims = DmaDims {
                run: p1(55, 13),
                count1: p1(68, 10),
                stride1: get(w, 78, 20),
                count2: p1(98, 10),
                stride2: get(w, 108, 20),
            };
            Ok(if op == opcode::DMA_LOAD {
                Instr::DmaLoad { cbuf, ddr, dims }
            } else {
                Instr::DmaStore { ddr, cbuf, dims }
            })
        }
        opcode::MATMUL => {
            reserved(w, op, 93, 0)?;
            Ok(Instr::MatMul {
                wtype: if b(91) {
                    WeightType::I4
                } else {
                    WeightType::I8
                },
                a: ug(w, 8),
                w: ug(w, 23),
                acc: ug(w, 38),
                m: p1(53, 12),
                k: p1(65, 14),
                n: p1(79, 12),
                accumulate: b(92),
            })
        }
        opcode::EPILOGUE => {
            let (has_lut, has_res, i32_out) = (b(124), b(125), b(123));
            let mut zero = 0;
            if !has_lut {
                zero |= field_mask(53, 15);
            }
            if !has_res {
                zero |= field_mask(68, 15) | field_mask(115, 8);
            }
            reserved(w, op, 126, zero)?;
            if i32_out && (has_lut || has_res) {
                return Err(DecodeError::ReservedBits {
                    opcode: op,
                    bits: w & field_mask(124, 2),
                });
            }
            Ok(Instr::Epilogue {
                out_type: if i32_out { OutType::I32 } else { OutType::I8 },
                acc: ug(w, 8),
                params: ug(w, 23),
                out: ug(w, 38),
                m: p1(83, 12),
                n: p1(95, 12),
                out_zp: izp(w, 107),
                lut: has_lut.then(|| ug(w, 53)),
                residual: has_res.then(|| (ug(w, 68), izp(w, 115))),
            })
        }
        opcode::EPILOGUE_F32 => {
            reserved(w, op, 93, 0)?;
            Ok(Instr::EpilogueF32 {
                acc: ug(w, 8),
                params: ug(w, 23),
                rows: ug(w, 38),
                out: ug(w, 53),
                m: p1(68, 12),
                n: p1(80, 12),
                accumulate: b(92),
            })
        }
        opcode::ELTWISE => {
            reserved(w, op, 112, 0)?;
            Ok(Instr::Eltwise {
                op: if b(111) { EltOp::Mul } else { EltOp::Add },
                a: ug(w, 8),
                b: ug(w, 23),
                out: ug(w, 38),
                params: ug(w, 53),
                len: p1(68, 19),
                a_zp: izp(w, 87),
                b_zp: izp(w, 95),
                out_zp: izp(w, 103),
            })
        }
        opcode::SILU_MUL => {
            reserved(w, op, 72, 0)?;
            Ok(Instr::SiluMul {
                a: ug(w, 8),
                b: ug(w, 23),
                out: ug(w, 38),
                len: p1(53, 19),
            })
        }
        opcode::NORM_RMS => {
            let has_res = b(109);
            let zero = if has_res {
                0
            } else {
                field_mask(23, 15) | field_mask(53, 15)
            };
            reserved(w, op, 110, zero)?;
            Ok(Instr::RmsNorm {
                x: ug(w, 8),
                residual: has_res.then(|| (ug(w, 23), ug(w, 53))),
                params: ug(w, 38),
                y: ug(w, 68),
                m: p1(83, 12),
                n: p1(95, 14),
            })
        }
        opcode::CVT_F16 => {
            reserved(w, op, 73, 0)?;
            let has_lo = b(72);
            if !has_lo && get(w, 57, 15) != 0 {
                return Err(DecodeError::ReservedBits {
                    opcode: op,
                    bits: w & (((1u128 << 15) - 1) << 57),
                });
            }
            Ok(Instr::CvtF16 {
                input: ug(w, 8),
                out: ug(w, 23),
                len: p1(38, 19),
                lo: has_lo.then(|| ug(w, 57)),
            })
        }
        opcode::MATMUL_F16 => {
            reserved(w, op, 93, 0)?;
            Ok(Instr::MatMulF16 {
                a: ug(w, 8),
                b: ug(w, 23),
                acc: ug(w, 38),
                m: p1(53, 12),
                k: p1(65, 14),
                n: p1(79, 12),
                b_transposed: b(91),
                accumulate: b(92),
            })
        }
        opcode::SOFTMAX_ONLINE => {
            let (causal, kind) = (b(123), get(w, 124, 2));
            let mut zero = 0;
            if kind == 0 {
                zero |= field_mask(68, 15);
            }
            if !causal {
                zero |= field_mask(103, DIAG_BITS);
            }
            reserved(w, op, 127, zero)?;
            let addr = ug(w, 68);
            let mask = match kind {
                0 => ScoreMask::None,
                1 => ScoreMask::Keep(addr),
                2 => ScoreMask::Add(addr),
                _ => {
                    return Err(DecodeError::ReservedBits {
                        opcode: op,
                        bits: w & field_mask(124, 2),
                    })
                }
            };
            // Sign-extend the 20-bit diagonal.
            let diag = ((get(w, 103, DIAG_BITS) << (32 - DIAG_BITS)) as i32) >> (32 - DIAG_BITS);
            Ok(Instr::SoftmaxOnline {
                scores: ug(w, 8),
                probs: ug(w, 23),
                rows: ug(w, 38),
                params: ug(w, 53),
                mask,
                m: p1(83, 10),
                n: p1(93, 10),
                causal: causal.then_some(diag),
                first: b(126),
            })
        }
        opcode::RESCALE => {
            let mode = match get(w, 77, 2) {
                0 => RescaleMode::First,
                1 => RescaleMode::Accumulate,
                2 => RescaleMode::Finish,
                _ => {
                    return Err(DecodeError::ReservedBits {
                        opcode: op,
                        bits: w & field_mask(77, 2),
                    })
                }
            };
            // `t` is unused and 0 with finish.
            let zero = if mode == RescaleMode::Finish {
                field_mask(23, 15)
            } else {
                0
            };
            reserved(w, op, 79, zero)?;
            Ok(Instr::Rescale {
                out: ug(w, 8),
                t: ug(w, 23),
                rows: ug(w, 38),
                m: p1(53, 12),
                n: p1(65, 12),
                mode,
            })
        }
        opcode::REDUCE => {
            reserved(w, op, 73, 0)?;
            Ok(Instr::Reduce {
                op: if b(72) {
                    ReduceOp::Max
                } else {
                    ReduceOp::SumSq
                },
                input: ug(w, 8),
                out: ug(w, 23),
                m: p1(38, 12),
                n: p1(50, 14),
                zp: izp(w, 64),
            })
        }
        opcode::SIGNAL | opcode::WAIT => {
            reserved(w, op, 12, 0)?;
            let sem = get(w, 8, 4) as u8;
            Ok(if op == opcode::SIGNAL {
                Instr::Signal { sem }
            } else {
                Instr::Wait { sem }
            })
        }
        _ => Err(DecodeError::UnknownOpcode(op)),
    }
}

/// Encodes a queue of instructions back to back.
pub fn encode_stream(instrs: &[Instr]) -> Result<Vec<u8>, IsaError> {
    let mut out = Vec::with_capacity(instrs.len() * WORD_BYTES);
    for i in instrs {
        out.extend_from_slice(&encode(i)?);
    }
    Ok(out)
}

/// Decodes a byte string of whole words.
pub fn decode_stream(bytes: &[u8]) -> Result<Vec<Instr>, DisasmError> {
    if !bytes.len().is_multiple_of(WORD_BYTES) {
        return Err(DisasmError::Length(bytes.len()));
    }
    bytes
        .chunks_exact(WORD_BYTES)
        .enumerate()
        .map(|(n, c)| {
            let mut word = [0u8; WORD_BYTES];
            word.copy_from_slice(c);
            decode(&word).map_err(|source| DisasmError::At {
                offset: n * WORD_BYTES,
                source,
            })
        })
        .collect()
}

/// Disassembles whole words: one `OFFSET: instruction` line each.
pub fn disassemble(bytes: &[u8]) -> Result<String, DisasmError> {
    let instrs = decode_stream(bytes)?;
    let mut s = String::new();
    for (n, i) in instrs.iter().enumerate() {
        s.push_str(&format!("{:06x}: {i}\n", n * WORD_BYTES));
    }
    Ok(s)
}
