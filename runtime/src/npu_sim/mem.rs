//! Bounds-checked access to DDR and CBUF byte arrays. Every access the
//! simulator makes goes through these helpers, so an out-of-range address
//! becomes an [`ExecError::OutOfRange`] instead of a panic.

use super::ExecError;
use std::ops::Range;

/// Which memory an access is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mem {
    Ddr,
    Cbuf,
}

impl std::fmt::Display for Mem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mem::Ddr => "ddr",
            Mem::Cbuf => "cbuf",
        })
    }
}

/// The byte range `[addr, addr + len)` of a memory of `size` bytes.
pub fn range(mem: Mem, size: usize, addr: u64, len: u64) -> Result<Range<usize>, ExecError> {
    let err = || ExecError::OutOfRange {
        mem,
        addr,
        len,
        size: size as u64,
    };
    let end = addr.checked_add(len).ok_or_else(err)?;
    if end > size as u64 {
        return Err(err());
    }
    Ok(addr as usize..end as usize)
}

/// `len` bytes at `addr`.
pub fn bytes(mem: Mem, m: &[u8], addr: u64, len: u64) -> Result<&[u8], ExecError> {
    Ok(&m[range(mem, m.len(), addr, len)?])
}

/// `len` bytes at `addr`, mutable.
pub fn bytes_mut(mem: Mem, m: &mut [u8], addr: u64, len: u64) -> Result<&mut [u8], ExecError> {
    let r = range(mem, m.len(), addr, len)?;
    Ok(&mut m[r])
}

/// Little-endian INT32 `i` of a byte slice whose length is a multiple of 4
/// and greater than `4 * i`.
pub fn i32_at(b: &[u8], i: usize) -> i32 {
    i32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

/// Stores little-endian INT32 `i`.
pub fn set_i32(b: &mut [u8], i: usize, v: i32) {
    b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
}
