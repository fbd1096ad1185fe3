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

use crate::npu::isa::{DmaDims, EltOp, Instr, IsaError, OutType, ReduceOp, WeightType, CBUF_ALIGN};

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
