//! Element types of tensors.
//!
//! The closed set of dtypes the IR knows. Sub-byte types (`i4`, `u4`) are
//! described here with their bit width; how they are packed is a concern of
//! the weight store and the backends.

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    I64,
    I32,
    I8,
    U8,
    I4,
    U4,
    Bool,
}

impl DType {
    /// Every dtype, in a fixed order (useful for tests and generators).
    pub const ALL: [DType; 10] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I8,
        DType::U8,
        DType::I4,
        DType::U4,
        DType::Bool,
    ];

    /// The name used in the textual IR (`f32`, `i4`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I4 => "i4",
            DType::U4 => "u4",
            DType::Bool => "bool",
        }
    }

    /// Storage width of one element in bits.
    pub fn bits(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 32,
            DType::F16 | DType::BF16 => 16,
            DType::I64 => 64,
            DType::I8 | DType::U8 | DType::Bool => 8,
            DType::I4 | DType::U4 => 4,
        }
    }

    /// Bytes needed to store `n` elements (sub-byte types are packed two per byte).
    pub fn bytes_for(self, n: usize) -> usize {
        (n * self.bits()).div_ceil(8)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I64 | DType::I32 | DType::I8 | DType::U8 | DType::I4 | DType::U4
        )
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I64 | DType::I32 | DType::I8 | DType::I4)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown dtype `{s}`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.name().parse::<DType>().unwrap(), d);
        }
        assert!("f31".parse::<DType>().is_err());
    }

    #[test]
    fn packed_sizes() {
        assert_eq!(DType::I4.bytes_for(3), 2);
        assert_eq!(DType::F16.bytes_for(3), 6);
        assert_eq!(DType::Bool.bytes_for(3), 3);
    }
}
