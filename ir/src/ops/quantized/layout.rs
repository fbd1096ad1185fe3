//! The storage order of a quantized weight (`q` of `qmatmul`/`qswiglu`):
//! the op's `layout` attribute.
//!
//! A weight is logically `q: [K, N]` whatever its layout; the layout says
//! at which element of the stored tensor (`i8` one per byte, `i4` two per
//! byte, low nibble first, as `Tensor::to_le_bytes` writes them) the value
//! `q[k, n]` lies:
//!
//! - [`QLayout::RowMajor`] (the default, not printed): element `k·N + n`.
//! - [`QLayout::Strips16`] (`layout = "strips16"`): the order the CPU's
//!   integer dot products (`vpdpbusd`, `sdot`) read without shuffles.
//!   Columns come in strips of 16 (`N` must be a multiple of 16); within a
//!   strip, rows of `K` come in blocks of 4 (`i8`) or 8 (`i4`), and each
//!   block is 64 bytes in which the 4 bytes from `4·j` hold column `j`'s
//!   four consecutive weights. For `i8` (`K` a multiple of 4) that is
//!   element `s·16·K + (k/4)·64 + 4·j + k%4` for strip `s = n/16`,
//!   `j = n%16`. For `i4` (`K` a multiple of 8) the byte is
//!   `s·8·K + (k/8)·64 + 4·j + k%4`, its low nibble for `k%8 < 4` and its
//!   high nibble otherwise: one 64-byte block is two such `i8` blocks, the
//!   second in the high nibbles.
//!
//! The `pack-weights` pass rewrites weights into `strips16`; the reference
//! ([`QLayout::row_major`]) reads any layout back as `[K, N]`.

use crate::dtype::DType;

/// Columns of one strip of [`QLayout::Strips16`].
pub const STRIP_COLUMNS: usize = 16;

/// The storage order of a quantized weight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QLayout {
    /// `q[k, n]` at element `k·N + n`.
    #[default]
    RowMajor,
    /// Strips of 16 columns, four (`i8`) or eight (`i4`) rows per 64-byte
    /// block (see the module doc).
    Strips16,
}

impl QLayout {
    /// The attribute value (`None` for the default).
    pub fn attr_name(self) -> Option<&'static str> {
        match self {
            QLayout::RowMajor => None,
            QLayout::Strips16 => Some("strips16"),
        }
    }

    /// Parses an attribute value.
    pub fn from_name(name: &str) -> Option<QLayout> {
        match name {
            "row-major" => Some(QLayout::RowMajor),
            "strips16" => Some(QLayout::Strips16),
            _ => None,
        }
    }

    /// Rows of `K` per 64-byte block of `strips16` for weights of `dtype`.
    pub fn block_rows(dtype: DType) -> usize {
        if dtype == DType::I4 {
            8
        } else {
            4
        }
    }

    /// Why a `[k, n]` weight of `dtype` cannot be stored in this layout,
    /// if it cannot.
    pub fn unfit(self, dtype: DType, k: usize, n: usize) -> Option<String> {
        match self {
            QLayout::RowMajor => None,
            QLayout::Strips16 => {
                let rows = Self::block_rows(dtype);
                if !n.is_multiple_of(STRIP_COLUMNS) {
                    Some(format!("N = {n} is not a multiple of {STRIP_COLUMNS}"))
                } else if !k.is_multiple_of(rows) {
                    Some(format!("K = {k} is not a multiple of {rows} for {dtype}"))
                } else {
                    None
                }
            }
        }
    }

    /// The stored element index of `q[k, n]` in a `[rows, cols]` weight of
    /// `dtype` (which fits this layout).
    #[inline]
    pub fn index(self, dtype: DType, rows: usize, cols: usize, k: usize, n: usize) -> usize {
        match self {
            QLayout::RowMajor => k * cols + n,
            QLayout::Strips16 => {
                let (s, j) = (n / STRIP_COLUMNS, n % STRIP_COLUMNS);
                if dtype == DType::I4 {
                    let byte = s * 8 * rows + (k / 8) * 64 + 4 * j + k % 4;
                    2 * byte + (k % 8) / 4
                } else {
                    s * 16 * rows + (k / 4) * 64 + 4 * j + k % 4
                }
            }
        }
    }

    /// Row-major `[rows, cols]` values into this layout's order.
    pub fn pack<T: Copy>(self, dtype: DType, rows: usize, cols: usize, values: &[T]) -> Vec<T> {
        let mut out = values.to_vec();
        for k in 0..rows {
            for n in 0..cols {
                out[self.index(dtype, rows, cols, k, n)] = values[k * cols + n];
            }
        }
        out
    }

    /// Values stored in this layout back into row-major `[rows, cols]`.
    pub fn row_major<T: Copy>(
        self,
        dtype: DType,
        rows: usize,
        cols: usize,
        stored: &[T],
    ) -> Vec<T> {
        if self == QLayout::RowMajor {
            return stored.to_vec();
        }
        let mut out = stored.to_vec();
        for k in 0..rows {
            for n in 0..cols {
                out[k * cols + n] = stored[self.index(dtype, rows, cols, k, n)];
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips16_is_a_permutation_and_round_trips() {
        for (dtype, k, n) in [(DType::I8, 8, 32), (DType::I4, 16, 48), (DType::I4, 8, 16)] {
            let values: Vec<i64> = (0..(k * n) as i64).collect();
            let packed = QLayout::Strips16.pack(dtype, k, n, &values);
            let mut sorted = packed.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, values, "{dtype} {k}x{n}");
            assert_eq!(QLayout::Strips16.row_major(dtype, k, n, &packed), values);
        }
    }

    #[test]
    fn strips16_places_four_rows_of_a_column_in_one_lane() {
        // i8: column 1's rows 0..4 are bytes 4..8 of the first block, row 4
        // starts the second block; the second strip starts after 16·K.
        let l = QLayout::Strips16;
        let at = |k, n| l.index(DType::I8, 8, 32, k, n);
        assert_eq!([at(0, 1), at(1, 1), at(3, 1), at(4, 0)], [4, 5, 7, 64]);
        assert_eq!(at(0, 16), 16 * 8);
        // i4: rows 4..8 go to the high nibbles of the bytes rows 0..4 use.
        let at4 = |k, n| l.index(DType::I4, 16, 16, k, n);
        assert_eq!([at4(0, 0), at4(4, 0), at4(1, 2), at4(5, 2)], [0, 1, 18, 19]);
        assert_eq!(at4(8, 0), 128);
    }

    #[test]
    fn unfit_shapes_are_named() {
        let l = QLayout::Strips16;
        assert!(l.unfit(DType::I8, 4, 16).is_none());
        assert!(l.unfit(DType::I8, 4, 24).unwrap().contains("N = 24"));
        assert!(l.unfit(DType::I4, 12, 16).unwrap().contains("K = 12"));
        assert!(QLayout::RowMajor.unfit(DType::I4, 3, 5).is_none());
        assert_eq!(QLayout::from_name("strips16"), Some(l));
        assert_eq!(QLayout::from_name("other"), None);
    }
}
