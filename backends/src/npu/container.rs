//! Binary container of a whole [`Program`] (for packages): a header, the
//! queue lengths, then every queue's encoded words.
//!
//! Layout (little-endian): magic `b"SLMNPU\0\x01"` (8 bytes, the last byte
//! the format version), core count `u32`, then per core the DMA and
//! compute queue lengths (`u32` each), then per core the DMA queue's words
//! followed by the compute queue's words (16 bytes each). [`read_program`]
//! rejects truncated or trailing bytes, bad magic and bad words with a
//! [`ContainerError`], never a panic; `read_program(&write_program(p)?)`
//! returns `p` for every program whose instructions encode.

use crate::npu::encode::{decode_stream, encode_stream, DisasmError, WORD_BYTES};
use crate::npu::isa::{CoreProgram, IsaError, Program};

/// Magic and format version.
pub const MAGIC: [u8; 8] = *b"SLMNPU\0\x01";

/// Bytes that are not a program container.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContainerError {
    #[error("not an NPU program (bad magic or version)")]
    Magic,
    #[error("truncated NPU program: needs {need} bytes, has {have}")]
    Truncated { need: u64, have: usize },
    #[error("{0} trailing bytes after the NPU program")]
    Trailing(usize),
    #[error("core {core}: {source}")]
    Word { core: usize, source: DisasmError },
}

/// Serialises a program (fails if an instruction does not encode).
pub fn write_program(p: &Program) -> Result<Vec<u8>, IsaError> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&(p.cores.len() as u32).to_le_bytes());
    for c in &p.cores {
        out.extend_from_slice(&(c.dma.len() as u32).to_le_bytes());
        out.extend_from_slice(&(c.compute.len() as u32).to_le_bytes());
    }
    for c in &p.cores {
        out.extend(encode_stream(&c.dma)?);
        out.extend(encode_stream(&c.compute)?);
    }
    Ok(out)
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, ContainerError> {
    let s = b.get(off..off + 4).ok_or(ContainerError::Truncated {
        need: off as u64 + 4,
        have: b.len(),
    })?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Parses a program container.
pub fn read_program(b: &[u8]) -> Result<Program, ContainerError> {
    if b.get(..8) != Some(&MAGIC[..]) {
        return Err(ContainerError::Magic);
    }
    let cores = u32_at(b, 8)? as u64;
    let header = 12 + 8 * cores;
    if header > b.len() as u64 {
        return Err(ContainerError::Truncated {
            need: header,
            have: b.len(),
        });
    }
    let mut lens = Vec::new();
    let mut need = header;
    for c in 0..cores as usize {
        let d = u64::from(u32_at(b, 12 + 8 * c)?);
        let k = u64::from(u32_at(b, 16 + 8 * c)?);
        need = need.saturating_add((d + k).saturating_mul(WORD_BYTES as u64));
        lens.push((d as usize * WORD_BYTES, k as usize * WORD_BYTES));
    }
    if need > b.len() as u64 {
        return Err(ContainerError::Truncated {
            need,
            have: b.len(),
        });
    }
    if need < b.len() as u64 {
        return Err(ContainerError::Trailing(b.len() - need as usize));
    }
    let mut off = header as usize;
    let mut program = Program::default();
    for (core, (d, k)) in lens.into_iter().enumerate() {
        let word = |source| ContainerError::Word { core, source };
        let dma = decode_stream(&b[off..off + d]).map_err(word)?;
        let compute = decode_stream(&b[off + d..off + d + k]).map_err(word)?;
        off += d + k;
        program.cores.push(CoreProgram { dma, compute });
    }
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npu::isa::{DmaDims, Instr};

    #[test]
    fn round_trip_and_errors() {
        let p = Program {
            cores: vec![
                CoreProgram {
                    dma: vec![
                        Instr::DmaLoad {
                            cbuf: 0x100,
                            ddr: 7,
                            dims: DmaDims::contiguous(9),
                        },
                        Instr::Signal { sem: 0 },
                    ],
                    compute: vec![Instr::Wait { sem: 0 }],
                },
                CoreProgram::default(),
            ],
        };
        let bytes = write_program(&p).unwrap();
        assert_eq!(bytes.len(), 12 + 16 + 3 * 16);
        assert_eq!(read_program(&bytes), Ok(p));
        assert_eq!(read_program(b"SLMNPU"), Err(ContainerError::Magic));
        let short = &bytes[..bytes.len() - 1];
        assert!(matches!(
            read_program(short),
            Err(ContainerError::Truncated { .. })
        ));
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(read_program(&long), Err(ContainerError::Trailing(1)));
        let mut bad = bytes.clone();
        bad[28] = 0; // first word's opcode
        assert!(matches!(
            read_program(&bad),
            Err(ContainerError::Word { core: 0, .. })
        ));
        // A huge core count in a short buffer.
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            read_program(&huge),
            Err(ContainerError::Truncated { .. })
        ));
    }
}
