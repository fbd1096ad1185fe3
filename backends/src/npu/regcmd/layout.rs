//! The data layouts of a matmul task in NPU memory: features and outputs
//! in NC1HWC2, weights as CNA reads them. Packing happens at compile time;
//! the functional model reads and writes the same layouts.
//!
//! - NC1HWC2: element (c, h, w) of a C×H×W cube is at
//!   `((c / C2)·H·W + h·W + w)·C2 + c % C2`; every (h, w) atom is 16
//!   bytes, so C2 is 16 / element bytes (int8 16, fp16 8, int32/fp32 4).
//!   Channels past C are padding (zero when packed here).
//! - Weights: N kernels of K channels in blocks of `kb` kernels × 32
//!   channels, `[N/kb][K/32][kb][32]`, with `kb` 32 for int8 and 16 for
//!   fp16 (the public generator's layout). A last block of fewer than `kb`
//!   kernels (int8 with N not a multiple of 32) is that many kernels wide,
//!   as Mesa packs int8 weights; the generator's formula overruns its
//!   buffer there, and no public run settles which the hardware reads.

use super::matmul::MatmulPrecision;

/// Bytes per NC1HWC2 atom.
pub const ATOM_BYTES: usize = 16;

impl MatmulPrecision {
    /// C2 of the input feature cube.
    pub fn input_atom_channels(self) -> usize {
        ATOM_BYTES / self.input_bytes() as usize
    }

    /// C2 of the output cube.
    pub fn output_atom_channels(self) -> usize {
        ATOM_BYTES / self.output_bytes() as usize
    }

    /// Kernels per weight block.
    pub fn kernel_block(self) -> usize {
        match self {
            MatmulPrecision::Int8 => 32,
            MatmulPrecision::Fp16 | MatmulPrecision::Fp16ToFp16 => 16,
        }
    }
}

/// Elements of an NC1HWC2 cube with `channels` channels (padded to `c2`)
/// of `rows` rows of width 1.
pub fn cube_len(channels: usize, rows: usize, c2: usize) -> usize {
    channels.div_ceil(c2) * c2 * rows
}

/// Index of (channel `c`, row `h`) in an NC1HWC2 cube of width 1 and
/// `rows` rows.
pub fn cube_index(c: usize, h: usize, rows: usize, c2: usize) -> usize {
    ((c / c2) * rows + h) * c2 + c % c2
}

/// A row-major `[rows, channels]` matrix as an NC1HWC2 cube (width 1,
/// height `rows`), padding channels with `T::default()`.
pub fn pack_cube<T: Copy + Default>(a: &[T], rows: usize, channels: usize, c2: usize) -> Vec<T> {
    assert_eq!(a.len(), rows * channels, "matrix size");
    let mut out = vec![T::default(); cube_len(channels, rows, c2)];
    for h in 0..rows {
        for c in 0..channels {
            out[cube_index(c, h, rows, c2)] = a[h * channels + c];
        }
    }
    out
}

/// The row-major `[rows, channels]` matrix of an NC1HWC2 cube.
pub fn unpack_cube<T: Copy>(cube: &[T], rows: usize, channels: usize, c2: usize) -> Vec<T> {
    assert!(cube.len() >= cube_len(channels, rows, c2), "cube size");
    let mut out = Vec::with_capacity(rows * channels);
    for h in 0..rows {
        for c in 0..channels {
            out.push(cube[cube_index(c, h, rows, c2)]);
        }
    }
    out
}

/// Index of weight (kernel `n`, channel `k`) of `kernels` kernels of
/// `channels` channels, in blocks of `kb` kernels (see the module doc):
/// the IR's formula, which its `rk3588` weight layout is made of.
pub use slmcc_ir::ops::qlayout::cna_weight_index as weight_index;

/// Row-major `[K, N]` matmul weights in the layout CNA reads.
pub fn pack_weights<T: Copy + Default>(b: &[T], k: usize, n: usize, kb: usize) -> Vec<T> {
    assert_eq!(b.len(), k * n, "weight size");
    let mut out = vec![T::default(); k * n];
    for kk in 0..k {
        for nn in 0..n {
            out[weight_index(nn, kk, n, k, kb)] = b[kk * n + nn];
        }
    }
    out
}
