//! The RK3588 NPU's own register interface: register command lists as the
//! board's driver submits them (the mainline `rocket` driver's task is a
//! command buffer address and a word count; the vendor `rknpu` driver's
//! is the same buffer).
//!
//! [`db`] is the register database (blocks, registers, fields); [`word`]
//! encodes and decodes one 64-bit command word and prints it;
//! [`matmul`] builds the command list of one single-task matmul and
//! [`layout`] packs its data in the layouts the hardware reads; [`tiling`]
//! splits a larger matmul into such tasks over the cores. This
//! part is checked against public facts (Mesa's register description and
//! the words of the public matmul generator that ran on boards; see
//! `docs/NPU.md`); the runtime's `npu_model` executes these lists and
//! `npu_device` submits them; [`super::lower`] builds them from the graph.
//! The DPU epilogues are not programmed: scales, bias and activations run
//! on the CPU after the task's int32 sums come back (`docs/NPU.md`).

pub mod db;
pub mod layout;
pub mod matmul;
pub mod tiling;
pub mod word;

pub use db::{Block, Field, FieldError, Register};
pub use matmul::{MatmulError, MatmulPrecision, MatmulTask, TaskBuffer, TaskError};
pub use word::{decode, Word, WordError};

/// Bytes per command word.
pub const WORD_BYTES: usize = 8;

/// A command buffer that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BufferError {
    #[error("{0} bytes is not a whole number of 8-byte words")]
    Length(usize),
    #[error("word {index} ({word:#018x}): {source}")]
    Word {
        index: usize,
        word: u64,
        source: WordError,
    },
}

/// Decodes a command buffer of little-endian 64-bit words.
pub fn decode_buffer(bytes: &[u8]) -> Result<Vec<Word>, BufferError> {
    if !bytes.len().is_multiple_of(WORD_BYTES) {
        return Err(BufferError::Length(bytes.len()));
    }
    bytes
        .chunks_exact(WORD_BYTES)
        .enumerate()
        .map(|(index, chunk)| {
            let word = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
            decode(word).map_err(|source| BufferError::Word {
                index,
                word,
                source,
            })
        })
        .collect()
}

/// The command buffer of `words` (little-endian).
pub fn encode_buffer(words: &[Word]) -> Vec<u8> {
    words
        .iter()
        .flat_map(|w| w.encode().to_le_bytes())
        .collect()
}
