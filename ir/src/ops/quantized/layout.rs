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
//! - [`QLayout::Rk3588`] (`layout = "rk3588-k<B>"`, `B` the K block): the
//!   order the RK3588 NPU's convolution DMA reads weights in (`docs/NPU.md`),
//!   so that one stored weight serves the NPU's tasks and, through this
//!   index, the CPU's kernels. `i8` only; `N` a multiple of 32, `B` a
//!   multiple of 32 that divides `K` (and the op's group). `K` comes in
//!   blocks of `B` rows; within a block the weight is `N/32` blocks of 32
//!   kernels (columns) × `B` channels (rows), each as `B/32` tiles of 32
//!   kernels × 32 channels, kernel-major: element `q[k, n]` is at
//!   `(k/B)·B·N + cna_weight_index(n, k % B, N, B, 32)`. A task over
//!   columns `n0 .. n0 + w` (`n0` and `w` multiples of 32) of K block `b`
//!   reads the `w·B` bytes from `b·B·N + n0·B`: one contiguous run.
//!
//! The `pack-weights` pass rewrites weights into `strips16`, the NPU
//! lowering (`slmcc_backends::npu::lower`) into `rk3588`; the reference
//! ([`QLayout::row_major`]) reads any layout back as `[K, N]`.

use crate::dtype::DType;

/// Columns of one strip of [`QLayout::Strips16`].
pub const STRIP_COLUMNS: usize = 16;

/// Channels (rows of `K`) per weight tile of the NPU's layout, and the
/// alignment of `K` blocks in [`QLayout::Rk3588`].
pub const NPU_CHANNEL_BLOCK: usize = 32;

/// Kernels (columns) per int8 weight block of [`QLayout::Rk3588`].
pub const NPU_KERNEL_BLOCK: usize = 32;

/// Index of weight (kernel `n`, channel `k`) among `kernels` kernels of
/// `channels` channels in the layout the NPU's convolution DMA reads:
/// blocks of `kb` kernels, `[kernels/kb][channels/32][kb][32]` (a last
/// block of fewer than `kb` kernels is that many wide, as Mesa's rocket
/// driver packs int8 weights). The one formula of that layout: the NPU's
/// task packing and [`QLayout::Rk3588`] both use it.
#[inline]
pub fn cna_weight_index(n: usize, k: usize, kernels: usize, channels: usize, kb: usize) -> usize {
    let start = n / kb * kb;
    let width = kb.min(kernels - start);
    start * channels
        + (k / NPU_CHANNEL_BLOCK) * width * NPU_CHANNEL_BLOCK
        + (n - start) * NPU_CHANNEL_BLOCK
        + k % NPU_CHANNEL_BLOCK
}

/// The storage order of a quantized weight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QLayout {
    /// `q[k, n]` at element `k·N + n`.
    #[default]
    RowMajor,
    /// Strips of 16 columns, four (`i8`) or eight (`i4`) rows per 64-byte
    /// block (see the module doc).
    Strips16,
    /// The RK3588 NPU's weight layout in K blocks of `k_block` rows (see
    /// the module doc).
    Rk3588 { k_block: u32 },
}

impl QLayout {
    /// The attribute value (`None` for the default).
    pub fn attr_name(self) -> Option<String> {
        match self {
            QLayout::RowMajor => None,
            QLayout::Strips16 => Some("strips16".into()),
            QLayout::Rk3588 { k_block } => Some(format!("rk3588-k{k_block}")),
        }
    }

    /// Parses an attribute value.
    pub fn from_name(name: &str) -> Option<QLayout> {
        match name {
            "row-major" => Some(QLayout::RowMajor),
            "strips16" => Some(QLayout::Strips16),
            _ => {
                let digits = name.strip_prefix("rk3588-k")?;
                // Canonical decimal only: the printer's form.
                if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let k_block = digits.parse().ok().filter(|&b: &u32| b > 0)?;
                Some(QLayout::Rk3588 { k_block })
            }
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
            QLayout::Rk3588 { k_block } => {
                let kb = k_block as usize;
                if dtype != DType::I8 {
                    Some(format!("{dtype} weights (the NPU's layout holds i8)"))
                } else if !n.is_multiple_of(NPU_KERNEL_BLOCK) {
                    Some(format!("N = {n} is not a multiple of {NPU_KERNEL_BLOCK}"))
                } else if !kb.is_multiple_of(NPU_CHANNEL_BLOCK) {
                    Some(format!(
                        "the K block {kb} is not a multiple of {NPU_CHANNEL_BLOCK}"
                    ))
                } else if !k.is_multiple_of(kb) {
                    Some(format!("K = {k} is not a multiple of the K block {kb}"))
                } else {
                    None
                }
            }
        }
    }

    /// Why products in groups of `group` rows cannot read weights in this
    /// layout, if they cannot: an `rk3588` K block must lie in one group.
    pub fn unfit_group(self, group: usize) -> Option<String> {
        match self {
            QLayout::Rk3588 { k_block } if !group.is_multiple_of(k_block as usize) => Some(
                format!("the group {group} is not a multiple of the K block {k_block}"),
            ),
            _ => None,
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
            QLayout::Rk3588 { k_block } => {
                let kb = k_block as usize;
                (k / kb) * kb * cols + cna_weight_index(n, k % kb, cols, kb, NPU_KERNEL_BLOCK)
            }
        }
    }

    /// Row-major `[rows, cols]` values into this layout's order.
    pub fn pack<T: Copy>(self, dtype: DType, rows: usize, cols: usize, values: &[T]) -> Vec<T> {
        let mut out = values.to_vec();
        if let QLayout::Rk3588 { k_block } = self {
            // `index` split into a row part, a column part and their
            // product, so the loop does no division (this stores every
            // weight of an rk3588 package).
            let kb = k_block as usize;
            let (col, width): (Vec<usize>, Vec<usize>) = (0..cols)
                .map(|n| {
                    let start = n / NPU_KERNEL_BLOCK * NPU_KERNEL_BLOCK;
                    let width = NPU_KERNEL_BLOCK.min(cols - start);
                    (start * kb + (n - start) * NPU_CHANNEL_BLOCK, width)
                })
                .unzip();
            for (k, row) in values.chunks_exact(cols.max(1)).take(rows).enumerate() {
                let kk = k % kb;
                let base = (k / kb) * kb * cols + kk % NPU_CHANNEL_BLOCK;
                let step = kk / NPU_CHANNEL_BLOCK * NPU_CHANNEL_BLOCK;
                for ((&v, &c), &w) in row.iter().zip(&col).zip(&width) {
                    out[base + c + step * w] = v;
                }
            }
            return out;
        }
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
    fn rk3588_pack_follows_index() {
        // K blocks of 32 and 64; N with and without a partial kernel block.
        for (k, n, kb) in [(64, 64, 32), (128, 48, 64), (64, 80, 64), (32, 16, 32)] {
            let layout = QLayout::Rk3588 { k_block: kb };
            let values: Vec<u32> = (0..(k * n) as u32).collect();
            let packed = layout.pack(DType::I8, k, n, &values);
            for kk in 0..k {
                for nn in 0..n {
                    let at = layout.index(DType::I8, k, n, kk, nn);
                    assert_eq!(
                        packed[at],
                        values[kk * n + nn],
                        "[{kk}, {nn}] of {k}x{n}/{kb}"
                    );
                }
            }
            assert_eq!(layout.row_major(DType::I8, k, n, &packed), values);
        }
    }

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
        let npu = QLayout::Rk3588 { k_block: 64 };
        assert!(npu.unfit(DType::I8, 128, 64).is_none());
        assert!(npu.unfit(DType::I4, 128, 64).unwrap().contains("i4"));
        assert!(npu.unfit(DType::I8, 128, 48).unwrap().contains("N = 48"));
        assert!(npu.unfit(DType::I8, 96, 64).unwrap().contains("K = 96"));
        let odd = QLayout::Rk3588 { k_block: 48 };
        assert!(odd.unfit(DType::I8, 96, 64).unwrap().contains("K block 48"));
        assert!(npu.unfit_group(128).is_none());
        assert!(npu.unfit_group(96).unwrap().contains("group 96"));
        for (name, want) in [
            ("rk3588-k64", Some(npu)),
            ("rk3588-k064", None),
            ("rk3588-k0", None),
            ("rk3588-k", None),
            ("rk3588-k+64", None),
        ] {
            assert_eq!(QLayout::from_name(name), want, "{name}");
        }
        assert_eq!(npu.attr_name().as_deref(), Some("rk3588-k64"));
    }

    #[test]
    fn rk3588_is_a_permutation_whose_task_slices_are_contiguous() {
        let (k, n, kb) = (128, 96, 64);
        let l = QLayout::Rk3588 { k_block: kb as u32 };
        let values: Vec<i64> = (0..(k * n) as i64).collect();
        let packed = l.pack(DType::I8, k, n, &values);
        let mut sorted = packed.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, values);
        assert_eq!(l.row_major(DType::I8, k, n, &packed), values);
        // K block 1, kernels 32..96: one run from 1·64·96 + 32·64, whose
        // tiles are 32 kernels × 32 channels, kernel-major.
        let at = |kk: usize, nn: usize| l.index(DType::I8, k, n, kk, nn);
        let start = kb * n + 32 * kb;
        assert_eq!(at(64, 32), start);
        assert_eq!(at(65, 32), start + 1);
        assert_eq!(at(64, 33), start + 32);
        assert_eq!(at(96, 32), start + 32 * 32);
        assert_eq!(at(64, 64), start + 32 * kb);
        assert_eq!(at(127, 95), k * n - 1);
    }
}
