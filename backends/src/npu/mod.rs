//! The modelled RK3588 NPU target.
//!
//! [`target`] describes the hardware the compiler and the simulator assume
//! (cores, MAC throughput, CBUF, DDR bandwidth, timing constants); [`isa`]
//! is the instruction set of our NPU programs and [`mod@encode`] its fixed
//! 128-bit binary form and disassembler; [`container`] serialises whole
//! programs. [`regcmd`] is the hardware's own register interface (register
//! database, command words, the single-task matmul), which is to replace
//! our ISA. The semantics and the timing model are specified in
//! `docs/NPU_ISA.md`; the runtime's `npu_sim` implements them. Everything said about NPU speed is an estimate of this model.

pub mod container;
pub mod encode;
pub mod isa;
pub mod kernels;
pub mod regcmd;
pub mod target;
pub mod tiler;

pub use encode::{
    decode, decode_stream, disassemble, encode, encode_stream, DecodeError, DisasmError,
};
pub use isa::{CoreProgram, DmaDims, Instr, IsaError, Program, Queue};
pub use target::Target;
