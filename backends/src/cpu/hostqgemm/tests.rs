//! `slmcc_qgemm` against the reference `qmatmul`/`qswiglu` arithmetic
//! (`QMatMul::product`): bit for bit, on every path this CPU runs
//! ([`available`]: the plain loops and each vector kernel), for tails,
//! remainders, odd strides and threads; and the
//! weight-only products (`activations = "f32"`) the same way on every set
//! of panels this CPU runs ([`weight_only::available`]), in both layouts.

use slmcc_ir::ops::fused_util::sigmoid;
use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::ops::qmatmul::{QActivations, QColumns, QMatMul};
use slmcc_ir::{DType, Tensor};

use super::{available, detect, run, weight_only, Call, QKernel, Weight};

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo + 1) as u64) as i32
    }
    fn f32(&mut self) -> f32 {
        (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0
    }
}

/// A `[k, stride]` weight with its scales: the values, and the bytes as
/// the weight store packs them.
struct Stored {
    values: Vec<i32>,
    bytes: Vec<u8>,
    scale: Vec<f32>,
}

fn stored(
    rng: &mut Rng,
    k: usize,
    stride: usize,
    group: usize,
    int4: bool,
    layout: QLayout,
) -> Stored {
    let (lo, hi) = if int4 { (-8, 7) } else { (-128, 127) };
    let values: Vec<i32> = (0..k * stride).map(|_| rng.int(lo, hi)).collect();
    let dtype = if int4 { DType::I4 } else { DType::I8 };
    let order = layout.pack(dtype, k, stride, &values);
    let bytes = if int4 {
        let mut b = vec![0u8; values.len().div_ceil(2)];
        for (i, &v) in order.iter().enumerate() {
            b[i / 2] |= ((v as u8) & 15) << (4 * (i % 2));
        }
        b
    } else {
        order.iter().map(|&v| v as i8 as u8).collect()
    };
    let scale = (0..k / group * stride)
        .map(|_| rng.f32().abs() / 64.0 + 1e-4)
        .collect();
    Stored {
        values,
        bytes,
        scale,
    }
}

/// One case: `rows × k` by columns `col0 .. col0 + n` (and, for a
/// `qswiglu`, `col0_2 ..`) of a row-major `[k, stride]` weight.
#[allow(clippy::too_many_arguments)]
fn check(
    seed: u64,
    rows: usize,
    k: usize,
    group: usize,
    n: usize,
    stride: usize,
    cols: &[usize],
    int4: bool,
) {
    let case = Case::Int8(QLayout::RowMajor);
    check_case(seed, rows, k, group, n, stride, cols, int4, case);
}

/// What a case multiplies.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// INT8 activations, the weight stored in this layout.
    Int8(QLayout),
    /// Weight-only: f32 activations, the weight stored in this layout.
    WeightOnly(QLayout),
}

/// [`check`] with the weight stored in `layout`.
#[allow(clippy::too_many_arguments)]
fn check_layout(
    seed: u64,
    rows: usize,
    k: usize,
    group: usize,
    n: usize,
    stride: usize,
    cols: &[usize],
    int4: bool,
    layout: QLayout,
) {
    let case = Case::Int8(layout);
    check_case(seed, rows, k, group, n, stride, cols, int4, case);
}

/// [`check`] for `case`.
#[allow(clippy::too_many_arguments)]
fn check_case(
    seed: u64,
    rows: usize,
    k: usize,
    group: usize,
    n: usize,
    stride: usize,
    cols: &[usize],
    int4: bool,
    case: Case,
) {
    let (layout, activations) = match case {
        Case::Int8(layout) => (layout, QActivations::Int8),
        Case::WeightOnly(layout) => (layout, QActivations::F32),
    };
    let mut rng = Rng(seed);
    let mut x: Vec<f32> = (0..rows * k).map(|_| rng.f32() * 3.0).collect();
    if rows > 1 {
        // An all-zero row (s = 1) and a NaN element.
        x[k..2 * k].fill(0.0);
        x[k / 2] = f32::NAN;
    }
    let w = stored(&mut rng, k, stride, group, int4, layout);
    let op = QMatMul {
        activations,
        ..QMatMul::new(if int4 { 4 } else { 8 }, group as i64).unwrap()
    };
    let xt = Tensor::from_f32(vec![rows, k], x.clone());
    let columns: Vec<QColumns> = cols
        .iter()
        .map(|&col0| QColumns {
            q: &w.values,
            scale: &w.scale,
            stride,
            col0,
            n,
        })
        .collect();
    let reference = op.product(&xt, &columns);
    let want: Vec<f32> = match cols.len() {
        1 => reference[0].clone(),
        _ => reference[0]
            .iter()
            .zip(&reference[1])
            .map(|(&g, &u)| (g * sigmoid(g)) * u)
            .collect(),
    };
    let weight = |col0| Weight {
        q: w.bytes.as_ptr(),
        scale: w.scale.as_ptr(),
        stride,
        col0,
        rows: k,
        layout,
    };
    // Weight-only products run every set of panels; the INT8 ones every
    // dot-product kernel.
    let paths: Vec<(QKernel, Option<weight_only::Panels>)> = match case {
        Case::Int8(_) => available().into_iter().map(|k| (k, None)).collect(),
        Case::WeightOnly(_) => weight_only::available()
            .into_iter()
            .map(|p| (detect(), Some(p)))
            .collect(),
    };
    for (kernel, panels) in paths {
        for threads in [1, 2] {
            let mut y = vec![f32::NAN; rows * n];
            let call = Call {
                rows,
                k,
                n,
                group,
                int4,
                x: x.as_ptr(),
                weights: [weight(cols[0]), weight(*cols.last().unwrap())],
                count: cols.len(),
                y: y.as_mut_ptr(),
                kernel,
            };
            // SAFETY: the buffers hold what the shapes say.
            unsafe {
                match panels {
                    None => run(&call, threads),
                    Some(panels) => weight_only::run_with(&call, threads, panels),
                }
            }
            for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{kernel:?} {panels:?} threads {threads}: rows {rows} k {k} g {group} n {n} \
                     stride {stride} cols {cols:?} int4 {int4} {case:?}: element {i}: \
                     {a} != {b}"
                );
            }
        }
    }
}

#[test]
fn qmatmul_bit_exact_with_the_reference() {
    let mut seed = 1;
    for int4 in [false, true] {
        for (k, group) in [
            (64, 32),
            (96, 96),
            (40, 8),
            (36, 12),
            (30, 10),
            (8, 8),
            (260, 4),
        ] {
            for rows in [1, 2, 5, 9] {
                for n in [16, 33, 64, 100] {
                    seed += 1;
                    check(seed, rows, k, group, n, n, &[0], int4);
                }
            }
        }
    }
}

#[test]
fn column_ranges_odd_strides_and_long_rows() {
    for int4 in [false, true] {
        // Columns 6.. of a [k, 70] buffer; an odd stride (i4 rows off a byte).
        check(7, 3, 64, 16, 48, 70, &[6], int4);
        check(8, 2, 64, 64, 33, 33, &[0], int4);
        // A K longer than a band of 64 rows holds, many rows.
        check(9, 70, 2048, 128, 40, 40, &[0], int4);
    }
}

#[test]
fn qswiglu_fused_and_separate_weights() {
    for int4 in [false, true] {
        // Fused gate/up [k, 2n]: gate columns 0.., up columns n...
        check(11, 3, 64, 32, 40, 80, &[0, 40], int4);
        check(12, 1, 128, 64, 64, 128, &[0, 64], int4);
        // Two weights of one buffer shape: gate and up at column 0 of
        // the same buffer (equal values are fine for the arithmetic).
        check(13, 5, 32, 32, 17, 17, &[0, 0], int4);
    }
}

/// Every `strips16` case of `kind` (INT8 activations or weight-only):
/// groups of whole blocks, 1 to 9 rows, column ranges and both `qswiglu`
/// forms, then a group that splits the layout's blocks (4 rows, `i4`
/// blocks of 8), which takes the plain loops through the layout.
fn check_strips16(mut seed: u64, case: Case) {
    for int4 in [false, true] {
        for (k, group) in [(64, 32), (96, 96), (48, 8), (256, 128), (2048, 64)] {
            for rows in [1, 2, 3, 4, 5, 9] {
                for (n, stride, cols) in [
                    (16, 16, vec![0]),
                    (64, 64, vec![0]),
                    // Columns of a wider buffer, and a chunk's partial
                    // strips past a task's 64 columns.
                    (32, 96, vec![48]),
                    (80, 80, vec![0]),
                    (48, 48, vec![0]),
                    // qswiglu, fused gate/up and two weights.
                    (32, 64, vec![0, 32]),
                    (48, 48, vec![0, 0]),
                ] {
                    seed += 1;
                    check_case(seed, rows, k, group, n, stride, &cols, int4, case);
                }
            }
        }
        check_case(3, 2, 32, 4, 16, 16, &[0], int4, case);
    }
}

#[test]
fn strips16_weights_bit_exact_with_the_reference() {
    check_strips16(100, Case::Int8(QLayout::Strips16));
}

#[test]
fn rk3588_weights_bit_exact_with_the_reference() {
    let mut seed = 300;
    for (k, group, k_block) in [(64, 64, 32), (128, 64, 64), (256, 256, 128), (96, 96, 96)] {
        let layout = QLayout::Rk3588 { k_block };
        for rows in [1, 2, 4, 5, 9] {
            for (n, stride, cols) in [
                (32, 32, vec![0]),
                (96, 96, vec![0]),
                // A strip off the vector path (col0 not a multiple of 16),
                // columns of a wider buffer, and qswiglu's fused gate/up.
                (40, 96, vec![8]),
                (48, 96, vec![0, 48]),
                (32, 32, vec![0, 0]),
            ] {
                seed += 1;
                check_layout(seed, rows, k, group, n, stride, &cols, false, layout);
            }
        }
    }
}

#[test]
fn weight_only_bit_exact_with_the_reference() {
    let mut seed = 500;
    for int4 in [false, true] {
        for (k, group) in [(64, 32), (96, 96), (40, 8), (30, 10), (260, 4), (8192, 128)] {
            for rows in [1, 2, 4, 5, 9] {
                for (n, stride, cols) in [
                    (16, 16, vec![0]),
                    (33, 33, vec![0]),
                    (100, 100, vec![0]),
                    // Columns of a wider buffer at an odd offset.
                    (48, 70, vec![6]),
                    (40, 80, vec![0, 40]),
                    (17, 17, vec![0, 0]),
                ] {
                    seed += 1;
                    let case = Case::WeightOnly(QLayout::RowMajor);
                    check_case(seed, rows, k, group, n, stride, &cols, int4, case);
                }
            }
        }
    }
}

#[test]
fn weight_only_strips16_bit_exact_with_the_reference() {
    check_strips16(700, Case::WeightOnly(QLayout::Strips16));
}

#[test]
fn this_machine_has_a_fast_path_where_expected() {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avxvnni") {
        assert_eq!(detect(), QKernel::AvxVnni);
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("dotprod") {
        let want = if std::arch::is_aarch64_feature_detected!("i8mm") {
            QKernel::NeonI8mm
        } else {
            QKernel::NeonDot
        };
        assert_eq!(detect(), want);
    }
}
