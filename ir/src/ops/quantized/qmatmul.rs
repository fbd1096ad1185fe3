//! `qmatmul`: matrix product of f32 activations by a quantized weight, with
//! dynamic per-token INT8 quantization of the activations and exact integer
//! accumulation (`quantize` introduces it in place of `matmul %x, @w`).
//!
//! ```text
//! %y = qmatmul %x, @w.q, @w.scale {bits = 8, group = 64} : f32[1, seq, 256]
//! %y = qmatmul %x, @w.q, @w.scale {bits = 4, group = 32} : f32[1, seq, 256]
//! ```
//!
//! Operands: `x: f32[..., M, K]` (rank >= 2), `q: [K, N]` the quantized
//! weight, `i8` for `bits = 8` and `i4` for `bits = 4` (values in `-8..=7`;
//! the weight store packs them two per byte), and `scale: f32[K/G, N]`, one
//! scale per group of `G = group` consecutive rows along `K` and output
//! column (`G = K`, one row of scales, is per output channel). `K` must be
//! static and a multiple of `G`, and `1 <= G <= 65536` (so that the integer
//! accumulation below cannot overflow). The result is `f32[..., M, N]`.
//!
//! Semantics, exactly (a kernel must reproduce them bit for bit). For every
//! row `m` of `x` (one token: the last axis, length `K`), in `f32`
//! arithmetic and in this order:
//!
//! 1. `lo = min(0, min_k x[m,k])`, `hi = max(0, max_k x[m,k])` (NaN elements
//!    are skipped by min/max);
//! 2. `s = (hi - lo) / 255`; if `s == 0` then `s = 1`;
//! 3. `z = clamp(round_half_even(-128 - lo / s), -128, 127)`;
//! 4. `xq[k] = clamp(round_half_even(x[m,k] / s) + z, -128, 127)`, then
//!    converted to an integer (a NaN converts to 0, as Rust's `as i32`);
//! 5. per group `g` (rows `g·G .. (g+1)·G` of `q`), in `i32`, exact:
//!    `acc_g[n] = Σ_{k in g} (xq[k] - z) · q[k,n]` (`|xq - z| <= 255`,
//!    `|q| <= 128`, so `G <= 65536` keeps every sum below `2^31`);
//! 6. `y[m,n] = Σ_g (acc_g[n] as f32) · (s · scale[g,n])`: the product
//!    `s · scale[g,n]` first, then the product with the accumulator, added
//!    to a sum that starts at `+0.0`, groups in increasing order, no fused
//!    multiply-add.
//!
//! Weight-only quantization (`activations = "f32"`, `--quant w8`/`w4`)
//! replaces steps 1–6: the activations stay `f32`, and per group the
//! weights multiply them as they are stored, the scale once per group:
//!
//! - `a_g[m,n] = fma(x[m,k], q[k,n] as f32, a)` for `k` in group `g` in
//!   increasing order, from `a = +0.0`, each step one fused multiply-add
//!   (one rounding: `f32::mul_add`);
//! - `y[m,n] = Σ_g a_g[m,n] · scale[g,n]`, each product rounded, added to a
//!   sum that starts at `+0.0`, groups in increasing order, no fused
//!   multiply-add.
//!
//! Mathematically the `matmul` of `x` by the dequantized weight
//! `q · scale`; fixing the order makes kernels reproduce it bit for bit
//! (their lanes are output columns).
//!
//! Half-precision activations (`x: f16` or `bf16`, from a model exported
//! in half precision) take the same steps on `x` converted to `f32`
//! (exact), and the result, of `x`'s dtype, is `y` rounded once to it, as
//! `matmul` on half operands does. The cpu backend computes such products
//! after `widen-half` made the conversions explicit.
//!
//! The weights are quantized ahead of time by the `quantize` pass (see its
//! documentation for the round-to-nearest rule); this op only consumes them.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::fused_util::infer_on_tensors;
use crate::ops::quantized::layout::QLayout;
use crate::ops::{bail, check_arity, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

/// The largest group: `255 · 128 · 65536 < 2^31`, so `i32` sums are exact.
pub const MAX_GROUP: i64 = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QMatMul {
    /// Weight bits: 8 (`i8` weights) or 4 (`i4` weights).
    pub bits: u8,
    /// Rows of `K` sharing one scale per output column.
    pub group: i64,
    /// The storage order of `q` ([`QLayout`]; `layout = "strips16"`).
    pub layout: QLayout,
    /// How the activations are multiplied (`activations = "f32"`:
    /// weight-only quantization).
    pub activations: QActivations,
}

/// How `qmatmul` multiplies its activations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QActivations {
    /// Quantized to INT8 per token, exact integer sums (steps 1–6).
    #[default]
    Int8,
    /// Kept `f32`, by the dequantized weight (weight-only quantization).
    F32,
}

impl QMatMul {
    /// The weight dtype for the op's `bits`.
    pub fn weight_dtype(&self) -> DType {
        if self.bits == 4 {
            DType::I4
        } else {
            DType::I8
        }
    }
}

/// Per-token activation quantization parameters of one row: `(s, z)`.
pub fn activation_params(row: &[f32]) -> (f32, f32) {
    let lo = row.iter().fold(0f32, |a, &v| a.min(v));
    let hi = row.iter().fold(0f32, |a, &v| a.max(v));
    let mut s = (hi - lo) / 255.0;
    if s == 0.0 {
        s = 1.0;
    }
    let z = (-128.0 - lo / s).round_ties_even().clamp(-128.0, 127.0);
    (s, z)
}

/// The quantized activation of `x` under `(s, z)`, as an integer.
pub fn quantize_activation(x: f32, s: f32, z: f32) -> i32 {
    ((x / s).round_ties_even() + z).clamp(-128.0, 127.0) as i32
}

impl OpDef for QMatMul {
    fn mnemonic(&self) -> &'static str {
        "qmatmul"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let mut attrs = vec![
            ("bits", Attr::Int(self.bits as i64)),
            ("group", Attr::Int(self.group)),
        ];
        if let Some(name) = self.layout.attr_name() {
            attrs.push(("layout", Attr::Str(name)));
        }
        if self.activations == QActivations::F32 {
            attrs.push(("activations", Attr::Str("f32".to_string())));
        }
        attrs
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        check_arity("qmatmul", inputs.len(), 3, 3)?;
        let x = &inputs[0].ty;
        let n = self.check_operands("qmatmul", x, &inputs[1].ty, &inputs[2].ty)?;
        Ok(vec![Fact::new(result_type(x, n))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let out_ty = infer_on_tensors(self, inputs)?.remove(0).ty;
        let Some(out_shape) = out_ty.shape.as_fixed() else {
            bail!("`qmatmul` result shape {} is not static", out_ty.shape);
        };
        let (x, q, scale) = (inputs[0], inputs[1], inputs[2]);
        let n = q.shape()[1];
        let (qs, ss) = (weight_values(q, self.layout), scale.to_f32_vec());
        let w = QColumns {
            q: &qs,
            scale: &ss,
            stride: n,
            col0: 0,
            n,
        };
        let y = self.product(x, &[w]).remove(0);
        Ok(vec![Tensor::from_f32(out_shape, y).cast(out_ty.dtype)])
    }
}

/// The result type `T[..., M, N]` of activations `x: T[..., M, K]`.
pub fn result_type(x: &TensorType, n: Dim) -> TensorType {
    let mut out = x.shape.dims().to_vec();
    *out.last_mut().expect("rank >= 2") = n;
    TensorType::new(x.dtype, Shape(out))
}

/// A quantized weight's values (`q: [K, N]` as `i32`, stored in `layout`)
/// in row-major order.
pub fn weight_values(q: &Tensor, layout: QLayout) -> Vec<i32> {
    let stored: Vec<i32> = q.to_i64_vec().into_iter().map(|v| v as i32).collect();
    match q.shape() {
        &[k, n] => layout.row_major(q.dtype(), k, n, &stored),
        _ => stored,
    }
}

/// Columns `col0 .. col0 + n` of a quantized weight `q: [K, stride]` (as
/// `i32`, row-major) and its scales `[K / G, stride]`.
#[derive(Clone, Copy, Debug)]
pub struct QColumns<'a> {
    pub q: &'a [i32],
    pub scale: &'a [f32],
    pub stride: usize,
    pub col0: usize,
    pub n: usize,
}

impl QMatMul {
    /// Checks the operands `x`, `q`, `scale` of `op` (the mnemonic errors
    /// name) as `qmatmul` takes them; returns `N`.
    pub fn check_operands(
        &self,
        op: &str,
        x: &TensorType,
        q: &TensorType,
        scale: &TensorType,
    ) -> Result<Dim, OpError> {
        if !x.dtype.is_float() || x.rank() < 2 {
            bail!("`{op}` activations must be f32, f16 or bf16 of rank >= 2, got {x}");
        }
        let wdt = self.weight_dtype();
        if q.dtype != wdt || q.rank() != 2 {
            bail!(
                "`{op}` with bits = {} needs {wdt}[K, N] weights, got {q}",
                self.bits
            );
        }
        let (k, n) = (&q.shape.dims()[0], &q.shape.dims()[1]);
        let Some(kv) = k.as_fixed() else {
            bail!("`{op}` weights need a static K, got {q}");
        };
        if self.layout != QLayout::RowMajor {
            let Some(nv) = n.as_fixed() else {
                bail!(
                    "`{op}` with layout {:?} needs a static N, got {q}",
                    self.layout
                );
            };
            if let Some(why) = self.layout.unfit(wdt, kv as usize, nv as usize) {
                bail!(
                    "`{op}` weights {q} do not fit layout {:?}: {why}",
                    self.layout
                );
            }
        }
        if x.shape.dims().last() != Some(k) {
            bail!("`{op}` contraction dims differ: x {x} vs weights {q}");
        }
        if kv % self.group != 0 {
            bail!(
                "`{op}` K = {kv} is not a multiple of group = {}",
                self.group
            );
        }
        if let Some(why) = self.layout.unfit_group(self.group as usize) {
            bail!(
                "`{op}` weights {q} do not fit layout {:?}: {why}",
                self.layout
            );
        }
        let groups = Dim::fixed(kv / self.group);
        if scale.dtype != DType::F32 || scale.shape.dims() != [groups.clone(), n.clone()] {
            bail!("`{op}` scales must be f32[{groups}, {n}] (K / group, N), got {scale}");
        }
        Ok(n.clone())
    }

    /// Steps 1–6 of the op for every row of `x` (`[..., K]`, checked
    /// against the weights) by each of `ws`: one row-major `[rows, w.n]`
    /// result per weight. A row's quantization (steps 1–4) is computed once
    /// and used for every weight, which is what each weight's own `qmatmul`
    /// computes from it.
    pub fn product(&self, x: &Tensor, ws: &[QColumns]) -> Vec<Vec<f32>> {
        let k = x.shape().last().copied().unwrap_or(0);
        let rows: usize = x.shape()[..x.rank().saturating_sub(1)].iter().product();
        let g = self.group as usize;
        let xs = x.to_f32_vec();
        if self.activations == QActivations::F32 {
            return ws
                .iter()
                .map(|w| weight_only_product(&xs, rows, k, g, w))
                .collect();
        }
        let mut ys: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; rows * w.n]).collect();
        let mut acc = Vec::new();
        let mut xq = vec![0i32; k];
        for m in 0..rows {
            let row = &xs[m * k..(m + 1) * k];
            let (s, z) = activation_params(row);
            let zi = z as i32;
            for (d, &v) in xq.iter_mut().zip(row) {
                *d = quantize_activation(v, s, z) - zi;
            }
            for (w, y) in ws.iter().zip(&mut ys) {
                let out = &mut y[m * w.n..(m + 1) * w.n];
                acc.resize(w.n, 0i32);
                for gi in 0..k / g {
                    acc.fill(0);
                    for (kk, &a) in xq.iter().enumerate().skip(gi * g).take(g) {
                        let at = kk * w.stride + w.col0;
                        for (c, &q) in acc.iter_mut().zip(&w.q[at..at + w.n]) {
                            *c += a * q;
                        }
                    }
                    let srow = &w.scale[gi * w.stride + w.col0..][..w.n];
                    for (o, (&a, &sc)) in out.iter_mut().zip(acc.iter().zip(srow)) {
                        *o += a as f32 * (s * sc);
                    }
                }
            }
        }
        ys
    }
}

/// The weight-only product: `rows` rows of `x` (`[rows, k]`) by the
/// columns `w`, per group the fused sums by the stored weights, then
/// scaled and added (see the module documentation).
fn weight_only_product(xs: &[f32], rows: usize, k: usize, g: usize, w: &QColumns) -> Vec<f32> {
    let mut y = vec![0f32; rows * w.n];
    let mut acc = vec![0f32; w.n];
    for m in 0..rows {
        let y = &mut y[m * w.n..(m + 1) * w.n];
        for gi in 0..k.checked_div(g).unwrap_or(0) {
            acc.fill(0.0);
            for kk in gi * g..(gi + 1) * g {
                let xv = xs[m * k + kk];
                let at = kk * w.stride + w.col0;
                for (a, &q) in acc.iter_mut().zip(&w.q[at..at + w.n]) {
                    *a = xv.mul_add(q as f32, *a);
                }
            }
            let at = gi * w.stride + w.col0;
            for ((o, &a), &sc) in y.iter_mut().zip(&acc).zip(&w.scale[at..at + w.n]) {
                *o += a * sc;
            }
        }
    }
    y
}

impl OpBuild for QMatMul {
    const MNEMONICS: &'static [&'static str] = &["qmatmul"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        let bits = attrs.int("bits")?;
        let group = attrs.int("group")?;
        let layout = layout_attr("qmatmul", attrs)?;
        let activations = activations_attr("qmatmul", attrs)?;
        Ok(QMatMul {
            layout,
            activations,
            ..QMatMul::new(bits, group)?
        })
    }
}

/// The optional `activations` attribute of `op` (`int8` when absent).
pub(crate) fn activations_attr(op: &str, attrs: &mut Attrs) -> Result<QActivations, OpError> {
    match attrs.opt_str("activations")?.as_deref() {
        None | Some("int8") => Ok(QActivations::Int8),
        Some("f32") => Ok(QActivations::F32),
        Some(other) => bail!("`{op}` activations must be \"int8\" or \"f32\", got {other:?}"),
    }
}

/// The optional `layout` attribute of `op` (row-major when absent).
pub(crate) fn layout_attr(op: &str, attrs: &mut Attrs) -> Result<QLayout, OpError> {
    match attrs.opt_str("layout")? {
        None => Ok(QLayout::RowMajor),
        Some(name) => match QLayout::from_name(&name) {
            Some(layout) => Ok(layout),
            None => bail!(
                "`{op}` layout must be \"row-major\", \"strips16\" or \"rk3588-k<B>\", got {name:?}"
            ),
        },
    }
}

impl QMatMul {
    /// Checks `bits` (4 or 8) and `group` (`1..=MAX_GROUP`).
    pub fn new(bits: i64, group: i64) -> Result<QMatMul, OpError> {
        if bits != 4 && bits != 8 {
            bail!("`qmatmul` bits must be 4 or 8, got {bits}");
        }
        if !(1..=MAX_GROUP).contains(&group) {
            bail!("`qmatmul` group must be in 1..={MAX_GROUP}, got {group}");
        }
        Ok(QMatMul {
            bits: bits as u8,
            group,
            layout: QLayout::RowMajor,
            activations: QActivations::Int8,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{assert_round_trip, d, eval, eval_checked, fact, sym};

    fn i8s(shape: Vec<usize>, v: &[i64]) -> Tensor {
        Tensor::from_i64(shape, v.to_vec()).cast(DType::I8)
    }

    #[test]
    fn hand_computed_two_groups() {
        // x = [0.25, -25.5, 102, 0.75]: lo = -25.5, hi = 102, s = 127.5 / 255
        // = 0.5, z = round(-128 + 51) = -77; x / s = [0.5, -51, 204, 1.5]
        // rounds half to even to [0, -51, 204, 2], + z = [-77, -128, 127,
        // -75], minus z = [0, -51, 204, 2].
        let x = Tensor::from_f32(vec![1, 4], vec![0.25, -25.5, 102.0, 0.75]);
        let q = i8s(vec![4, 2], &[1, 2, 3, -1, 1, 0, 5, 7]);
        let scale = Tensor::from_f32(vec![2, 2], vec![0.5, 0.25, 2.0, 1.0]);
        let op = QMatMul::new(8, 2).unwrap();
        assert_eq!(activation_params(&[0.25, -25.5, 102.0, 0.75]), (0.5, -77.0));
        let y = eval_checked(&op, &[&x, &q, &scale]).remove(0);
        // Group 0: [0·1 - 51·3, 0·2 + 51] = [-153, 51]; group 1: [204 + 2·5,
        // 0 + 2·7] = [214, 14]. y = [-153·0.25 + 214·1, 51·0.125 + 14·0.5].
        assert_eq!(y.shape(), &[1, 2]);
        assert_eq!(y.as_f32().unwrap(), &[175.75, 13.375]);
    }

    #[test]
    fn zero_rows_and_int4_weights() {
        let x = Tensor::from_f32(vec![2, 1, 2], vec![0.0, 0.0, 1.0, 1.0]);
        let q = Tensor::from_f64(DType::I4, vec![2, 1], &[-8.0, 7.0]).unwrap();
        let scale = Tensor::from_f32(vec![1, 1], vec![0.5]);
        let op = QMatMul::new(4, 2).unwrap();
        let y = eval_checked(&op, &[&x, &q, &scale]).remove(0);
        // Row 0 is all zeros: s = 1, z = -128, y = 0. Row 1: lo = 0, hi = 1,
        // s = 1/255, z = -128, xq - z = [255, 255]; acc = 255·(-8 + 7).
        let s = 1.0f32 / 255.0;
        assert_eq!(y.shape(), &[2, 1, 1]);
        assert_eq!(y.as_f32().unwrap(), &[0.0, -255.0 * (s * 0.5)]);
    }

    #[test]
    fn symbolic_inference_and_round_trip() {
        let op = QMatMul::new(4, 32).unwrap();
        let x = fact(DType::F32, vec![d(1), sym("seq"), d(64)]);
        let q = fact(DType::I4, vec![d(64), d(256)]);
        let scale = fact(DType::F32, vec![d(2), d(256)]);
        let out = op.infer(&[&x, &q, &scale]).unwrap();
        assert_eq!(out[0].ty.to_string(), "f32[1, seq, 256]");
        assert_round_trip(op, &[]);
    }

    #[test]
    fn strips16_weights_compute_what_row_major_ones_do() {
        let (k, n) = (16, 32);
        let x = Tensor::from_f32(
            vec![2, k],
            (0..2 * k).map(|i| (i as f32 * 0.37).sin() * 3.0).collect(),
        );
        let scale = Tensor::from_f32(
            vec![2, n],
            (0..2 * n).map(|i| 0.01 + i as f32 * 1e-3).collect(),
        );
        for (bits, dtype) in [(8, DType::I8), (4, DType::I4)] {
            let lim = if bits == 4 { 8 } else { 128 };
            let values: Vec<f64> = (0..k * n)
                .map(|i| ((i * 7919) % (2 * lim)) as f64 - lim as f64)
                .collect();
            let packed = QLayout::Strips16.pack(dtype, k, n, &values);
            let q = Tensor::from_f64(dtype, vec![k, n], &values).unwrap();
            let qp = Tensor::from_f64(dtype, vec![k, n], &packed).unwrap();
            let op = QMatMul::new(bits, 8).unwrap();
            let strips = QMatMul {
                layout: QLayout::Strips16,
                ..op
            };
            let want = eval_checked(&op, &[&x, &q, &scale]).remove(0);
            let got = eval_checked(&strips, &[&x, &qp, &scale]).remove(0);
            assert_eq!(want.as_f32().unwrap(), got.as_f32().unwrap(), "bits {bits}");
            assert_round_trip(strips, &[]);
        }
        // A weight the layout cannot hold is refused by inference.
        let op = QMatMul {
            layout: QLayout::Strips16,
            ..QMatMul::new(8, 4).unwrap()
        };
        let x = fact(DType::F32, vec![d(1), d(8)]);
        let q = fact(DType::I8, vec![d(8), d(24)]);
        let s = fact(DType::F32, vec![d(2), d(24)]);
        let err = op.infer(&[&x, &q, &s]).unwrap_err().to_string();
        assert!(err.contains("N = 24 is not a multiple of 16"), "{err}");
    }

    #[test]
    fn weight_only_is_the_product_by_the_dequantized_weight() {
        // x = [1, -2, 0.5, 4]; q = [[1, 2], [3, -1], [1, 0], [5, 7]], group 2
        // with scales [[0.5, 0.25], [2, 1]]: dequantized [[0.5, 0.5],
        // [1.5, -0.25], [2, 0], [10, 7]].
        let x = Tensor::from_f32(vec![1, 4], vec![1.0, -2.0, 0.5, 4.0]);
        let q = i8s(vec![4, 2], &[1, 2, 3, -1, 1, 0, 5, 7]);
        let scale = Tensor::from_f32(vec![2, 2], vec![0.5, 0.25, 2.0, 1.0]);
        let op = QMatMul {
            activations: QActivations::F32,
            ..QMatMul::new(8, 2).unwrap()
        };
        let y = eval_checked(&op, &[&x, &q, &scale]).remove(0);
        // Per group, then scaled: [(1 - 6)·0.5 + (0.5 + 20)·2,
        // (2 + 2)·0.25 + (0 + 28)·1]: [0.5 - 3 + 1 + 40, 0.5 + 0.5 + 0 + 28].
        assert_eq!(y.as_f32().unwrap(), &[38.5, 29.0]);
        // One rounding per step: (1 + 2^-23)·3 = 3 + 1.5·2^-22 rounds to
        // 3 + 2^-21 as a product, but fma(1 + 2^-23, 3, -3) is 3·2^-23.
        let e = 2f32.powi(-23);
        let x = Tensor::from_f32(vec![1, 2], vec![-1.0, 1.0 + e]);
        let q = i8s(vec![2, 1], &[3, 3]);
        let scale = Tensor::from_f32(vec![1, 1], vec![1.0]);
        let op1 = QMatMul { group: 2, ..op };
        let y = eval_checked(&op1, &[&x, &q, &scale]).remove(0);
        assert_eq!(y.as_f32().unwrap(), &[3.0 * e]);
        assert_round_trip(op, &[]);
        let mut attrs = Attrs::from_pairs([
            ("bits".to_string(), Attr::Int(8)),
            ("group".to_string(), Attr::Int(2)),
            ("activations".to_string(), Attr::Str("f16".to_string())),
        ]);
        let err = QMatMul::build("qmatmul", &mut attrs, &[]).unwrap_err();
        assert!(err.0.contains("activations must be"), "{}", err.0);
    }

    #[test]
    fn rejects_bad_operands_and_attributes() {
        let x = fact(DType::F32, vec![d(3), d(64)]);
        let q8 = fact(DType::I8, vec![d(64), d(8)]);
        let s1 = fact(DType::F32, vec![d(1), d(8)]);
        let err = |op: QMatMul, fs: &[&Fact]| op.infer(fs).unwrap_err().to_string();
        let op8 = QMatMul::new(8, 64).unwrap();
        assert!(err(QMatMul::new(8, 48).unwrap(), &[&x, &q8, &s1]).contains("multiple of group"));
        assert!(err(QMatMul::new(4, 64).unwrap(), &[&x, &q8, &s1]).contains("needs i4[K, N]"));
        let s2 = fact(DType::F32, vec![d(2), d(8)]);
        assert!(err(op8, &[&x, &q8, &s2]).contains("scales must be f32[1, 8]"));
        let x32 = fact(DType::F32, vec![d(3), d(32)]);
        assert!(err(op8, &[&x32, &q8, &s1]).contains("contraction dims differ"));
        let xv = fact(DType::F32, vec![d(64)]);
        assert!(err(op8, &[&xv, &q8, &s1]).contains("rank >= 2"));
        assert!(err(op8, &[&x, &q8]).contains("takes 3 operand"));
        assert!(QMatMul::new(3, 64).is_err());
        assert!(QMatMul::new(8, 0).is_err());
        assert!(QMatMul::new(8, MAX_GROUP + 1).is_err());
        // Evaluation rejects what inference rejects, without panicking.
        let xt = Tensor::from_f32(vec![1, 3], vec![1.0; 3]);
        let qt = i8s(vec![2, 1], &[1, 1]);
        let st = Tensor::from_f32(vec![1, 1], vec![1.0]);
        assert!(eval(&op8, &[&xt, &qt, &st]).is_err());
    }
}
