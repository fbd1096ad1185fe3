//! One 64-bit register command word: [`Word::encode`], [`decode`] and the
//! one-line text form of the disassembler.
//!
//! Layout of a word (little-endian `u64` in the command buffer):
//! `target << 48 | value << 16 | register offset`. A register write has
//! its block's id + 1 as target ([`Block::write_target`]). Three words are
//! not register writes: the all-zero word, the `0x0041` word that must
//! precede the enable, and the `0x0081` enable word, which writes the
//! block enable mask to PC register 0x0008.
//!
//! Contract: [`decode`] accepts exactly the words [`Word::encode`] can
//! produce from values the database allows, and rejects every other word
//! with a [`WordError`] naming the reason, without panicking.

use std::fmt;

use super::db::{self, Block, FieldError, Register, OP_ENABLE_FIELDS};

/// Target of the word that must come right before the enable word (the
/// TRM: "before op_en, 64'h0041_xxxx_xxxx_xxxx must be set").
pub const PRE_ENABLE_TARGET: u16 = 0x0041;
/// Target of the enable word.
pub const ENABLE_TARGET: u16 = 0x0081;
/// The register the enable word addresses (PC OPERATION_ENABLE).
pub const ENABLE_REGISTER: u16 = 0x0008;

/// One decoded register command word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// Writes `value` to `reg`.
    Write { reg: &'static Register, value: u32 },
    /// The all-zero word. In a chain of tasks it is replaced by the PC
    /// `BASE_ADDRESS` write that points at the next task.
    Zero,
    /// The `0x0041` word that precedes the enable.
    PreEnable,
    /// Starts the blocks whose bits are set (fields of
    /// [`OP_ENABLE_FIELDS`]).
    Enable { blocks: u32 },
}

/// A word that is not a valid register command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WordError {
    #[error("unknown target {0:#06x}")]
    UnknownTarget(u16),
    #[error("{block} has no register at offset {offset:#06x}")]
    UnknownRegister { block: Block, offset: u16 },
    #[error("the {PRE_ENABLE_TARGET:#06x} word must be 0x0041000000000000, found {0:#018x}")]
    PreEnable(u64),
    #[error("the enable word addresses register {0:#06x}, not {ENABLE_REGISTER:#06x}")]
    EnableRegister(u16),
    #[error("the enable word sets bits {0:#x} that enable no block")]
    EnableBits(u32),
    #[error(transparent)]
    Field(#[from] FieldError),
}

impl Word {
    /// A write of `value` to `reg`, checked against the register's fields.
    pub fn write(reg: &'static Register, value: u32) -> Result<Word, FieldError> {
        reg.unpack(value)?;
        Ok(Word::Write { reg, value })
    }

    /// The 64-bit word.
    pub fn encode(&self) -> u64 {
        let (target, value, offset) = self.parts();
        (u64::from(target) << 48) | (u64::from(value) << 16) | u64::from(offset)
    }

    /// Target, value and register offset.
    pub fn parts(&self) -> (u16, u32, u16) {
        match *self {
            Word::Write { reg, value } => (reg.block.write_target(), value, reg.offset),
            Word::Zero => (0, 0, 0),
            Word::PreEnable => (PRE_ENABLE_TARGET, 0, 0),
            Word::Enable { blocks } => (ENABLE_TARGET, blocks, ENABLE_REGISTER),
        }
    }
}

/// Decodes one word, checking it against the register database.
pub fn decode(word: u64) -> Result<Word, WordError> {
    let target = (word >> 48) as u16;
    let value = (word >> 16) as u32;
    let offset = word as u16;
    match target {
        0 if word == 0 => Ok(Word::Zero),
        PRE_ENABLE_TARGET if value == 0 && offset == 0 => Ok(Word::PreEnable),
        PRE_ENABLE_TARGET => Err(WordError::PreEnable(word)),
        ENABLE_TARGET => {
            if offset != ENABLE_REGISTER {
                return Err(WordError::EnableRegister(offset));
            }
            let known = OP_ENABLE_FIELDS.iter().fold(0, |m, f| m | f.mask());
            if value & !known != 0 {
                return Err(WordError::EnableBits(value & !known));
            }
            Ok(Word::Enable { blocks: value })
        }
        _ => {
            let block = Block::from_write_target(target).ok_or(WordError::UnknownTarget(target))?;
            let reg = db::register(offset)
                .filter(|r| r.block == block)
                .ok_or(WordError::UnknownRegister { block, offset })?;
            Ok(Word::write(reg, value)?)
        }
    }
}

/// `TTTT AAAA VVVVVVVV  NAME  FIELD=value ...`: target, register and value
/// in hex, then the register's name and its non-zero fields.
impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (target, value, offset) = self.parts();
        write!(f, "{target:04x} {offset:04x} {value:08x}  ")?;
        let fields: Vec<(&str, u32)> = match *self {
            Word::Write { reg, value } => {
                f.write_str(&reg.full_name())?;
                reg.fields
                    .iter()
                    .map(|fd| (fd.name, fd.get(value)))
                    .collect()
            }
            Word::Zero => return f.write_str("(zero: next-task slot)"),
            Word::PreEnable => return f.write_str("(before the enable)"),
            Word::Enable { blocks } => {
                f.write_str("PC_OPERATION_ENABLE (enable)")?;
                OP_ENABLE_FIELDS
                    .iter()
                    .map(|fd| (fd.name, fd.get(blocks)))
                    .collect()
            }
        };
        for (name, v) in fields.into_iter().filter(|&(_, v)| v != 0) {
            if v < 10 {
                write!(f, " {name}={v}")?;
            } else {
                write!(f, " {name}={v:#x}")?;
            }
        }
        Ok(())
    }
}
