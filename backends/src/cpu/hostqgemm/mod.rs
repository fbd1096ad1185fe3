//! The quantized products (`qmatmul`, `qswiglu`) as a function of the
//! runtime, on the CPU's integer dot-product instructions: `slmcc_qgemm`.
//!
//! Kernels import [`QGEMM_SYMBOL`] as they import the math helpers and the
//! host GEMM ([`super::hostgemm`]); the JIT links it, and the runtime's
//! object loader resolves it for a package's AOT objects, so a package
//! built for the board uses the board's instructions. The inner loop is
//! chosen once per process from what the CPU has ([`detect`]):
//!
//! - x86-64 with AVX-VNNI or AVX-512 VNNI (+VL): `vpdpbusd` on 256-bit
//!   vectors (`x86.rs`);
//! - aarch64 with the dot-product extension (Cortex-A76 and later, so
//!   every RK3588): `sdot` (`aarch64.rs`), and `smmla` for tiles of two
//!   rows or more where the CPU also has the int8 matrix multiply
//!   (Cortex-A710/X2 and later);
//! - otherwise plain loops, correct but slow; the JIT then keeps the
//!   generated kernel instead ([`fast`]).
//!
//! The weights are read in their stored form (`i8`, or `i4` two per byte):
//! decode with 4-bit weights reads 4 bits per weight.
//!
//! Numerics: bit-exact with `slmcc_ir::ops::qmatmul` (and `qswiglu`'s
//! epilogue with the reference `sigmoid`), on every path and for any
//! number of threads. Per row (token) the reference's own functions give
//! `(s, z)` and the quantized row `xq`. The exact integer sums of each
//! group are computed as `Σ xq·q - z·Σ q` (x86 adds 128 to `xq` to make it
//! unsigned for `vpdpbusd`, and subtracts `(z + 128)·Σ q`); both terms and
//! the result fit `i32` (see `MAX_GROUP`). The float steps are the
//! reference's, in its order.
//!
//! Work split: columns in chunks of [`CHUNK`] (the tasks of
//! [`super::threads::parallel_for`] when the call may use more than one
//! thread and the product is large enough), rows in tiles of up to
//! [`TILE_ROWS`] (from bands quantized once per call on the calling
//! thread into a 128 KiB stack buffer, hence [`MAX_K`]), columns
//! in strips of 16 whose weights are read four rows of `K` at a time and
//! interleaved so that each 32-bit lane holds one column's four weights;
//! each group's sums become floats and are scaled and added in vector
//! registers (the same IEEE operations as the reference, lane by lane).
//! Columns past the last whole strip, an `i4` weight whose rows do not
//! start on a byte, and a group of a length that is not a multiple of 4
//! take the plain loops.
//!
//! Weight-only products ([`FLAG_F32_ACTIVATIONS`], `--quant w8`/`w4`) keep
//! the activations in `f32` and take their own panels (`weight_only/`:
//! per group, one fused multiply-add per weight into float accumulators,
//! AVX2 with FMA or NEON), bit-exact with the reference as well.

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;
mod weight_only;

use std::sync::OnceLock;

use slmcc_ir::ops::fused_util::sigmoid;
use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::ops::qmatmul::{activation_params, quantize_activation};
use slmcc_ir::DType;

use super::threads::parallel_for;

/// The symbol kernels import.
pub const QGEMM_SYMBOL: &str = "slmcc_qgemm";

/// `slmcc_qgemm`'s `flags`: the weights are `i4` (else `i8`).
pub const FLAG_INT4: u64 = 1;

/// `slmcc_qgemm`'s `flags`: the weights are stored in `strips16`.
pub const FLAG_STRIPS16: u64 = 2;

/// `slmcc_qgemm`'s `flags`: the activations stay `f32` (weight-only
/// quantization, `activations = "f32"`; `weight_only/`).
pub const FLAG_F32_ACTIVATIONS: u64 = 4;

/// `slmcc_qgemm`'s `flags`: the `i8` weights are stored in the NPU's
/// `rk3588` layout, whose K block is `flags >> 32` ([`layout_flags`]).
pub const FLAG_RK3588: u64 = 8;

/// The `flags` bits that say how weights in `layout` are stored.
pub fn layout_flags(layout: QLayout) -> u64 {
    match layout {
        QLayout::RowMajor => 0,
        QLayout::Strips16 => FLAG_STRIPS16,
        QLayout::Rk3588 { k_block } => FLAG_RK3588 | u64::from(k_block) << 32,
    }
}

/// The layout `flags` names (the inverse of [`layout_flags`]).
fn flags_layout(flags: u64) -> QLayout {
    if flags & FLAG_RK3588 != 0 {
        QLayout::Rk3588 {
            k_block: (flags >> 32) as u32,
        }
    } else if flags & FLAG_STRIPS16 != 0 {
        QLayout::Strips16
    } else {
        QLayout::RowMajor
    }
}

/// The longest `K` the function takes with INT8 activations (at least one
/// quantized row must fit the band buffer); a longer `K` keeps the
/// generated kernel. Weight-only products take any `K`.
pub const MAX_K: usize = BAND_BYTES;

/// Rows of `x` quantized and multiplied together (each weight strip read
/// once per tile).
pub const TILE_ROWS: usize = 4;

/// Output columns per task.
pub const CHUNK: usize = 64;

/// Output columns per vector strip.
const BLOCK: usize = 16;

/// Multiply-adds below which a call runs on the calling thread alone.
const PARALLEL_MIN_MACS: usize = 1 << 18;

/// Every symbol of this module with its address, for the JIT and the
/// object loader.
pub fn host_symbols() -> Vec<(&'static str, *const u8)> {
    vec![(QGEMM_SYMBOL, slmcc_qgemm as *const u8)]
}

/// The inner loop this process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QKernel {
    /// Plain loops.
    Scalar,
    /// x86-64 AVX-VNNI `vpdpbusd` (VEX), 256-bit.
    AvxVnni,
    /// x86-64 AVX-512 VNNI `vpdpbusd` (EVEX) on 256-bit vectors.
    Avx512Vnni,
    /// aarch64 `sdot`.
    NeonDot,
    /// aarch64 `smmla` (int8 matrix multiply) for tiles of two rows or
    /// more, `sdot` otherwise.
    NeonI8mm,
}

impl QKernel {
    /// What is added to the quantized activations before the products
    /// (`vpdpbusd` multiplies unsigned bytes by signed ones).
    fn bias(self) -> i32 {
        match self {
            QKernel::AvxVnni | QKernel::Avx512Vnni => 128,
            QKernel::Scalar | QKernel::NeonDot | QKernel::NeonI8mm => 0,
        }
    }
}

/// The inner loop for this CPU (detected once).
pub fn detect() -> QKernel {
    static KERNEL: OnceLock<QKernel> = OnceLock::new();
    *KERNEL.get_or_init(detect_now)
}

fn detect_now() -> QKernel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            if std::arch::is_x86_feature_detected!("avxvnni") {
                return QKernel::AvxVnni;
            }
            if std::arch::is_x86_feature_detected!("avx512vnni")
                && std::arch::is_x86_feature_detected!("avx512vl")
            {
                return QKernel::Avx512Vnni;
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            if std::arch::is_aarch64_feature_detected!("i8mm") {
                return QKernel::NeonI8mm;
            }
            return QKernel::NeonDot;
        }
    }
    QKernel::Scalar
}

/// Every inner loop this CPU can run, the plain loops first (the tests
/// check each against the reference).
pub fn available() -> Vec<QKernel> {
    let mut kernels = vec![QKernel::Scalar];
    match detect() {
        QKernel::Scalar => {}
        QKernel::NeonI8mm => kernels.extend([QKernel::NeonDot, QKernel::NeonI8mm]),
        chosen => kernels.push(chosen),
    }
    #[cfg(target_arch = "x86_64")]
    if detect() == QKernel::AvxVnni
        && std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vl")
    {
        kernels.push(QKernel::Avx512Vnni);
    }
    kernels
}

/// Whether this CPU has a dot-product path (else the JIT keeps its
/// generated kernel, which is faster than the plain loops).
pub fn fast() -> bool {
    detect() != QKernel::Scalar
}

/// One weight operand: columns `col0 ..` of a `[K, stride]` buffer (`i8`,
/// or `i4` two per byte, low nibble first, in row-major element order or
/// in `strips16`, [`QLayout`]) and its `[K / G, stride]` scales.
#[derive(Clone, Copy)]
struct Weight {
    q: *const u8,
    scale: *const f32,
    stride: usize,
    col0: usize,
    /// `K`.
    rows: usize,
    layout: QLayout,
}

impl Weight {
    /// The weight at row `k`, column `c` (of this operand's columns).
    ///
    /// # Safety
    /// `k < K` and `col0 + c < stride`.
    #[inline]
    unsafe fn get(&self, int4: bool, k: usize, c: usize) -> i32 {
        let dtype = if int4 { DType::I4 } else { DType::I8 };
        let e = self
            .layout
            .index(dtype, self.rows, self.stride, k, self.col0 + c);
        if int4 {
            let b = *self.q.add(e / 2);
            let nibble = if e.is_multiple_of(2) { b & 15 } else { b >> 4 };
            (nibble ^ 8) as i32 - 8
        } else {
            *self.q.add(e) as i8 as i32
        }
    }

    /// The first byte of columns `c ..` of row `k` (row-major; `i4`: the
    /// element index must be even).
    #[inline]
    unsafe fn row_ptr(&self, int4: bool, k: usize, c: usize) -> *const u8 {
        let e = k * self.stride + self.col0 + c;
        self.q.add(if int4 { e / 2 } else { e })
    }

    /// The first byte of the `strips16` block holding rows `k ..` of the
    /// strip of columns `c .. c + 16` (`col0 + c` a multiple of 16, `k` of
    /// the block's rows).
    #[inline]
    unsafe fn block_ptr(&self, int4: bool, k: usize, c: usize) -> *const u8 {
        let s = (self.col0 + c) / BLOCK;
        let (strip_bytes, rows) = if int4 { (8, 8) } else { (16, 4) };
        self.q.add(s * strip_bytes * self.rows + (k / rows) * 64)
    }

    /// The first of the four bytes of rows `k .. k + 4` of column `c` in
    /// the `rk3588` layout (`k` a multiple of 4): the other columns of its
    /// block of 32 kernels follow at a stride of 32 bytes.
    #[inline]
    unsafe fn npu_ptr(&self, k: usize, c: usize) -> *const u8 {
        let e = self
            .layout
            .index(DType::I8, self.rows, self.stride, k, self.col0 + c);
        self.q.add(e)
    }

    /// The scale of group `g`, column `c`.
    #[inline]
    unsafe fn scale(&self, g: usize, c: usize) -> f32 {
        *self.scale.add(g * self.stride + self.col0 + c)
    }
}

/// One call's operands.
struct Call {
    rows: usize,
    k: usize,
    n: usize,
    group: usize,
    int4: bool,
    x: *const f32,
    weights: [Weight; 2],
    /// 1 (`qmatmul`) or 2 (`qswiglu`: gate, up).
    count: usize,
    y: *mut f32,
    kernel: QKernel,
}

impl Call {
    /// The result from the first weight's sum `g` and the second's `u`:
    /// `g` for `qmatmul`, `(g · sigmoid(g)) · u` for `qswiglu`.
    #[inline]
    fn output(&self, g: f32, u: f32) -> f32 {
        match self.count {
            1 => g,
            _ => (g * sigmoid(g)) * u,
        }
    }
}

// SAFETY: the pointers are only read (x, weights) or written at disjoint
// columns per task (y) while the call runs.
unsafe impl Sync for Call {}

/// The stack buffer that rows are quantized into, together, on the
/// calling thread: each task reads the weights once per such band of
/// `BAND_BYTES / K` rows (at most [`BAND_ROWS`]).
const BAND_BYTES: usize = 128 * 1024;

/// Most rows of a band.
const BAND_ROWS: usize = 64;

/// Up to [`TILE_ROWS`] quantized rows: `xq + bias` as bytes (`K` each),
/// and each row's `s` and `z + bias` (the correction's factor).
pub(super) struct Tile<'a> {
    rows: usize,
    /// The bytes are `u8` (bias 128), else `i8`.
    unsigned: bool,
    xq: [&'a [u8]; TILE_ROWS],
    s: [f32; TILE_ROWS],
    zc: [i32; TILE_ROWS],
}

impl Tile<'_> {
    /// Row `r`'s stored value at `k`, as an integer.
    #[inline]
    fn x(&self, r: usize, k: usize) -> i32 {
        let b = self.xq[r][k];
        if self.unsigned {
            b as i32
        } else {
            b as i8 as i32
        }
    }
}

/// One strip of a product: columns `c .. c + 16` of weight `w`, every
/// group (of `group` rows, a multiple of 4), by the tile's rows.
#[derive(Clone, Copy)]
pub(super) struct Strip<'a> {
    int4: bool,
    w: &'a Weight,
    tile: &'a Tile<'a>,
    group: usize,
    groups: usize,
    c: usize,
}

/// The quantized products, in the reference's numerics (see the module
/// doc): `y[m, j]` for rows `m < rows` and columns `j < n` is `qmatmul` of
/// row `m` of `x: f32[rows, k]` by columns `col0 .. col0 + n` of the
/// weight `(q, scale)` (`[k, stride]`, `[k / group, stride]`); with a
/// second weight (`q2` not null, same `stride`, columns from `col0_2`), it
/// is `qswiglu`'s `(g · sigmoid(g)) · u`, `g` by the first and `u` by the
/// second. `flags` bit 0 ([`FLAG_INT4`]) reads `i4` weights, bit 1
/// ([`FLAG_STRIPS16`]) weights stored in `strips16` (else row-major), for
/// which `stride` must be a multiple of 16, bit 3 ([`FLAG_RK3588`]) `i8`
/// weights in the NPU's `rk3588` layout of K blocks of `flags >> 32`
/// rows (a multiple of 32 that divides `group`; `stride` a multiple of
/// 32), bit 2
/// ([`FLAG_F32_ACTIVATIONS`]) computes the weight-only product instead
/// (the `f32` activations by the dequantized weight). `threads` is the most threads
/// the call may use, 0 for the process's setting for loaded objects
/// ([`super::threads::object_threads`]).
///
/// # Safety
/// The buffers hold what the shapes say, `k <= MAX_K` (unless weight-only),
/// `k % group == 0`,
/// and `y` does not overlap the inputs.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn slmcc_qgemm(
    rows: u64,
    k: u64,
    n: u64,
    group: u64,
    flags: u64,
    x: *const f32,
    q: *const u8,
    scale: *const f32,
    stride: u64,
    col0: u64,
    q2: *const u8,
    scale2: *const f32,
    col0_2: u64,
    y: *mut f32,
    threads: u64,
) {
    let (stride, col0) = (stride as usize, col0 as usize);
    let layout = flags_layout(flags);
    let first = Weight {
        q,
        scale,
        stride,
        col0,
        rows: k as usize,
        layout,
    };
    let second = Weight {
        q: q2,
        scale: scale2,
        col0: col0_2 as usize,
        ..first
    };
    let call = Call {
        rows: rows as usize,
        k: k as usize,
        n: n as usize,
        group: group as usize,
        int4: flags & FLAG_INT4 != 0,
        x,
        weights: [first, second],
        count: if q2.is_null() { 1 } else { 2 },
        y,
        kernel: detect(),
    };
    let threads = match threads {
        0 => super::threads::object_threads(),
        t => t as usize,
    };
    if flags & FLAG_F32_ACTIVATIONS != 0 {
        weight_only::run(&call, threads);
    } else {
        run(&call, threads);
    }
}

/// The product `call` describes, on up to `threads` threads.
unsafe fn run(call: &Call, threads: usize) {
    if call.rows == 0 || call.n == 0 {
        return;
    }
    let tasks = call.n.div_ceil(CHUNK);
    let parallel = threads > 1 && tasks > 1;
    let bias = call.kernel.bias();
    let mut buffer = std::mem::MaybeUninit::<[u8; BAND_BYTES]>::uninit();
    let buffer = buffer.as_mut_ptr().cast::<u8>();
    let band_rows = (BAND_BYTES / call.k.max(1)).min(BAND_ROWS);
    let mut m0 = 0;
    while m0 < call.rows {
        let rows = (call.rows - m0).min(band_rows);
        let mut s = [0f32; BAND_ROWS];
        let mut zc = [0i32; BAND_ROWS];
        let mut band: [&[u8]; BAND_ROWS] = [&[]; BAND_ROWS];
        for r in 0..rows {
            let row = std::slice::from_raw_parts(call.x.add((m0 + r) * call.k), call.k);
            let (sr, z) = activation_params(row);
            let dst = std::slice::from_raw_parts_mut(buffer.add(r * call.k), call.k);
            for (d, &v) in dst.iter_mut().zip(row) {
                *d = (quantize_activation(v, sr, z) + bias) as u8;
            }
            band[r] = dst;
            s[r] = sr;
            zc[r] = z as i32 + bias;
        }
        let run = |t: usize| {
            let (c0, c1) = (t * CHUNK, ((t + 1) * CHUNK).min(call.n));
            let mut r0 = 0;
            while r0 < rows {
                let count = (rows - r0).min(TILE_ROWS);
                let mut tile = Tile {
                    rows: count,
                    unsigned: bias != 0,
                    xq: [band[r0]; TILE_ROWS],
                    s: [0.0; TILE_ROWS],
                    zc: [0; TILE_ROWS],
                };
                tile.xq[..count].copy_from_slice(&band[r0..r0 + count]);
                tile.s[..count].copy_from_slice(&s[r0..r0 + count]);
                tile.zc[..count].copy_from_slice(&zc[r0..r0 + count]);
                // SAFETY: the caller's contract; task `t` writes its own columns.
                unsafe { chunk(call, &tile, m0 + r0, c0, c1) };
                r0 += count;
            }
        };
        if parallel && rows * call.k * call.n * call.count >= PARALLEL_MIN_MACS {
            parallel_for(threads, tasks, &run);
        } else {
            (0..tasks).for_each(run);
        }
        m0 += rows;
    }
}

/// Columns `c0 .. c1` of result rows `m0 ..` (the tile's).
unsafe fn chunk(call: &Call, tile: &Tile, m0: usize, c0: usize, c1: usize) {
    let ws = &call.weights[..call.count];
    // A row-major i4 strip is read a byte at a time: its first element
    // must be even. A strips16 strip must be one of the layout's.
    let aligned = |c: usize| match ws[0].layout {
        QLayout::RowMajor => !call.int4 || ws.iter().all(|w| w.stride % 2 == 0 && w.col0 % 2 == 0),
        QLayout::Strips16 => ws.iter().all(|w| (w.col0 + c).is_multiple_of(BLOCK)),
        // 16 columns inside one block of 32 kernels; `i8` only.
        QLayout::Rk3588 { .. } => {
            !call.int4 && ws.iter().all(|w| (w.col0 + c).is_multiple_of(BLOCK))
        }
    };
    let mut c = c0;
    while c < c1 {
        let width = if call.kernel != QKernel::Scalar && c + BLOCK <= c1 && aligned(c) {
            BLOCK
        } else {
            1
        };
        let mut sums = [[[0f32; BLOCK]; TILE_ROWS]; 2];
        for (wi, w) in call.weights[..call.count].iter().enumerate() {
            columns(call, w, tile, c, width, &mut sums[wi]);
        }
        let [first, second] = &sums;
        for (r, (g_row, u_row)) in first.iter().zip(second).take(tile.rows).enumerate() {
            let out = call.y.add((m0 + r) * call.n + c);
            for (j, (&g, &u)) in g_row.iter().zip(u_row).take(width).enumerate() {
                *out.add(j) = call.output(g, u);
            }
        }
        c += width;
    }
}

/// The sums of `width` columns (16 on the vector path, else 1) from `c`
/// of weight `w` for every row of the tile: steps 5 and 6 of `qmatmul`.
unsafe fn columns(
    call: &Call,
    w: &Weight,
    tile: &Tile,
    c: usize,
    width: usize,
    out: &mut [[f32; BLOCK]; TILE_ROWS],
) {
    let g = call.group;
    let block_rows = match w.layout {
        QLayout::Strips16 if call.int4 => 8,
        _ => 4,
    };
    if width == BLOCK && g.is_multiple_of(block_rows) {
        let strip = Strip {
            int4: call.int4,
            w,
            tile,
            group: g,
            groups: call.k / g,
            c,
        };
        if vector_strip(call.kernel, strip, out) {
            return;
        }
    }
    for gi in 0..call.k / g {
        let mut raw = [[0i32; BLOCK]; TILE_ROWS];
        let mut csum = [0i32; BLOCK];
        for k in gi * g..(gi + 1) * g {
            for j in 0..width {
                let q = w.get(call.int4, k, c + j);
                csum[j] += q;
                for (r, sums) in raw.iter_mut().enumerate().take(tile.rows) {
                    sums[j] += tile.x(r, k) * q;
                }
            }
        }
        for (r, row) in out.iter_mut().enumerate().take(tile.rows) {
            let (s, zc) = (tile.s[r], tile.zc[r]);
            for (j, o) in row.iter_mut().enumerate().take(width) {
                let acc = raw[r][j].wrapping_sub(zc.wrapping_mul(csum[j]));
                *o += acc as f32 * (s * w.scale(gi, c + j));
            }
        }
    }
}

/// Steps 5 and 6 for `strip` on this process's dot-product instructions,
/// into `out` (which starts at `+0.0`); false when it has none (the plain
/// loops then run).
unsafe fn vector_strip(kernel: QKernel, strip: Strip, out: &mut [[f32; BLOCK]; TILE_ROWS]) -> bool {
    match kernel {
        #[cfg(target_arch = "x86_64")]
        QKernel::AvxVnni => x86::strip_avxvnni(strip, out),
        #[cfg(target_arch = "x86_64")]
        QKernel::Avx512Vnni => x86::strip_avx512vnni(strip, out),
        #[cfg(target_arch = "aarch64")]
        QKernel::NeonDot => aarch64::strip_sdot(strip, out),
        #[cfg(target_arch = "aarch64")]
        QKernel::NeonI8mm => aarch64::strip_i8mm(strip, out),
        _ => return false,
    }
    true
}
