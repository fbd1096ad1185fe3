//! `attention`: scaled dot-product attention with grouped KV heads, causal
//! and sliding-window masking, logit soft-capping and an optional mask
//! operand (a fused op; ONNX has `Attention` only from opset 23):
//!
//! ```text
//! %o = attention %q, %k, %v {kv_heads = 2, scale = 0.125, causal = true} : f32[1, 8, seq, 64]
//! %o = attention %q, %k, %v, %mask {kv_heads = 8, scale = 0.125} : f32[1, 8, seq, 64]
//! ```
//!
//! Attributes: `kv_heads` (integer >= 1) and `scale` (finite float), always
//! printed; `causal = false`, `window = 0` and `softcap = 0.0`, printed only
//! when not at their default.
//!
//! Shapes: `q` is `[b, hq, s, d]`, `k` is `[b, hkv, t, d]`, `v` is
//! `[b, hkv, t, dv]`, the result `[b, hq, s, dv]`. `q`, `k` and `v` are
//! floats and the result has `q`'s dtype; `k` and `v` share one dtype,
//! which may differ from `q`'s (an `f32` query over an `f16` KV cache,
//! read as it is stored: every operand is converted exactly to `f32`).
//! `k` and `v` may also be an INT8 cache in the q8 row format of
//! [`kv_cache`](crate::ops::kv_cache): `i8[b, hkv, t, d + 4]` and
//! `i8[b, hkv, t, dv + 4]`, each row read as its values times its scale. `b`, `s`, `t` (and the others) may be
//! symbolic; equal dims must be equal expressions. `hkv` must equal
//! `kv_heads`, and `hq` must be a multiple of it (provably, for a symbolic
//! `hq`). The optional `mask` is `bool` or `q`'s dtype, of rank <= 4, and
//! broadcasts (NumPy rules, unidirectionally) to `[b, hq, s, t]`.
//!
//! Semantics, for batch `n`, query head `h`, query `i` (0-based among `s`)
//! and key `j` (among `t`), all in `f32`:
//!
//! 1. Query head `h` reads KV head `h / (hq / hkv)` (integer division):
//!    consecutive query heads share a KV head, as `repeat_interleave(k,
//!    hq / hkv, dim=1)` and the exporters' `Unsqueeze → Expand → Reshape`
//!    repeat do (MQA when `hkv = 1`, plain multi-head when `hkv = hq`).
//! 2. `score = scale · Σ_c q[n,h,i,c] · k[n,h',j,c]`.
//! 3. If `softcap > 0`: `score = softcap · tanh(score / softcap)` (Gemma 2),
//!    before any masking.
//! 4. The mask operand, broadcast to `[b, hq, s, t]`: a float mask is
//!    added to the score (HF's additive mask: `0` keeps, `-inf` or a large
//!    negative value such as `finfo.min` masks); a bool mask keeps the
//!    score where `true` and sets it to `-inf` where `false` (the
//!    `scaled_dot_product_attention` convention).
//! 5. If `causal`: the score is `-inf` unless `j <= i + (t - s)`, so the `s`
//!    queries are the last `s` positions of the `t` keys (with a KV cache of
//!    `past = t - s` entries; `s = t` is the plain lower triangle). If also
//!    `window > 0` (sliding window, Mistral/Gemma 2): `-inf` unless
//!    `j > i + (t - s) - window`, so each query sees at most `window` keys,
//!    itself included. `window > 0` requires `causal = true`.
//! 6. `p = softmax over j` with the row maximum subtracted first. A row
//!    whose every score is `-inf` (every key masked, or `t = 0`) gives
//!    `p = 0` and an output row of zeros, not the NaN of a literal softmax;
//!    a finite large negative mask value is an ordinary score (such a row
//!    averages `v` uniformly, as the decomposed graph does).
//! 7. `out[n,h,i,:] = Σ_j p_j · v[n,h',j,:]`, rounded once to the dtype.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::broadcast::{broadcast_shapes, source_indices};
use crate::ops::constant::f32_as_f64;
use crate::ops::fused_util::infer_on_tensors;
use crate::ops::kv_cache::{q8_decode_all, Q8_SCALE_BYTES};
use crate::ops::{bail, check_arity, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Attention {
    pub kv_heads: i64,
    pub scale: f32,
    pub causal: bool,
    pub window: i64,
    pub softcap: f32,
}

impl Attention {
    /// Unmasked attention with `kv_heads` KV heads, scaled by `scale`.
    pub fn new(kv_heads: i64, scale: f32) -> Attention {
        Attention {
            kv_heads,
            scale,
            causal: false,
            window: 0,
            softcap: 0.0,
        }
    }

    /// Checks the attribute values.
    fn check_attrs(&self) -> Result<(), OpError> {
        if self.kv_heads < 1 {
            bail!("`attention` kv_heads must be >= 1, got {}", self.kv_heads);
        }
        if !self.scale.is_finite() {
            bail!("`attention` scale must be finite, got {}", self.scale);
        }
        if self.window < 0 {
            bail!("`attention` window must be >= 0, got {}", self.window);
        }
        if self.window > 0 && !self.causal {
            bail!("`attention` window = {} needs causal = true", self.window);
        }
        if !(self.softcap.is_finite() && self.softcap >= 0.0) {
            bail!(
                "`attention` softcap must be finite and >= 0, got {}",
                self.softcap
            );
        }
        Ok(())
    }
}

/// `[a, b, c, d]` of a rank-4 operand.
fn rank4<'a>(what: &str, t: &'a TensorType) -> Result<&'a [Dim], OpError> {
    if t.rank() != 4 {
        bail!("`attention` {what} must have rank 4 ([batch, heads, seq, head_dim]), got {t}");
    }
    Ok(t.shape.dims())
}

impl OpDef for Attention {
    fn mnemonic(&self) -> &'static str {
        "attention"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let mut a = vec![
            ("kv_heads", Attr::Int(self.kv_heads)),
            ("scale", Attr::Float(f32_as_f64(self.scale))),
        ];
        if self.causal {
            a.push(("causal", Attr::Bool(true)));
        }
        if self.window != 0 {
            a.push(("window", Attr::Int(self.window)));
        }
        if self.softcap != 0.0 {
            a.push(("softcap", Attr::Float(f32_as_f64(self.softcap))));
        }
        a
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        check_arity("attention", inputs.len(), 3, 4)?;
        self.check_attrs()?;
        let (q, k, v) = (&inputs[0].ty, &inputs[1].ty, &inputs[2].ty);
        let q8 = k.dtype == DType::I8;
        if !q.dtype.is_float() || !(k.dtype.is_float() || q8) || v.dtype != k.dtype {
            bail!("`attention` needs float q, and k and v of one float dtype (or q8 i8), got {q}, {k}, {v}");
        }
        let (qd, kd, vd) = (rank4("q", q)?, rank4("k", k)?, rank4("v", v)?);
        let (b, hq, s, d) = (&qd[0], &qd[1], &qd[2], &qd[3]);
        // A q8 row holds its scale after the values.
        let scale_bytes = Dim::fixed(if q8 { Q8_SCALE_BYTES as i64 } else { 0 });
        let (t, dv) = (&kd[2], &(&vd[3] - &scale_bytes));
        let kd3 = &kd[3] - &scale_bytes;
        if &kd[0] != b || &vd[0] != b {
            bail!("`attention` batch dims differ: q {q}, k {k}, v {v}");
        }
        let hkv = Dim::fixed(self.kv_heads);
        if kd[1] != hkv || vd[1] != hkv {
            bail!(
                "`attention` k and v must have kv_heads = {} heads: k {k}, v {v}",
                self.kv_heads
            );
        }
        if hq.div_exact(&hkv).is_none() || hq.as_fixed() == Some(0) {
            bail!(
                "`attention` query heads ({hq}) must be a non-zero multiple of kv_heads = {}: q {q}",
                self.kv_heads
            );
        }
        if &vd[2] != t {
            bail!("`attention` k and v differ in length: k {k}, v {v}");
        }
        if &kd3 != d {
            bail!("`attention` q and k differ in head dim: q {q}, k {k}");
        }
        if let Some(m) = inputs.get(3) {
            let m = &m.ty;
            if m.dtype != DType::Bool && m.dtype != q.dtype {
                bail!("`attention` mask must be bool or the dtype of q: {m} vs q {q}");
            }
            let scores = Shape(vec![b.clone(), hq.clone(), s.clone(), t.clone()]);
            if m.rank() > 4 || broadcast_shapes(&scores, &m.shape).as_ref() != Ok(&scores) {
                bail!("`attention` mask {m} does not broadcast to the scores {scores}");
            }
        }
        let out = Shape(vec![b.clone(), hq.clone(), s.clone(), dv.clone()]);
        Ok(vec![Fact::new(TensorType::new(q.dtype, out))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
        let [nb, hq, s, d] = q.shape()[..] else {
            bail!("`attention` q must have rank 4");
        };
        let (hkv, t) = (k.shape()[1], k.shape()[2]);
        let group = hq / hkv;
        let (kv, vv) = match k.dtype() {
            DType::I8 => (q8_decode_all(k)?, q8_decode_all(v)?),
            _ => (k.to_f32_vec(), v.to_f32_vec()),
        };
        let dv = match k.dtype() {
            DType::I8 => v.shape()[3] - Q8_SCALE_BYTES,
            _ => v.shape()[3],
        };
        let qv = q.to_f32_vec();
        // The mask, broadcast to [b, hq, s, t]: additive values or keep flags.
        let scores_shape = [nb, hq, s, t];
        let (add_mask, keep_mask) = match inputs.get(3) {
            None => (None, None),
            Some(m) => {
                let idx = source_indices(m.shape(), &scores_shape);
                match m.as_bool() {
                    Some(b) => (None, Some(idx.iter().map(|&i| b[i]).collect::<Vec<_>>())),
                    None => {
                        let f = m.to_f32_vec();
                        (Some(idx.iter().map(|&i| f[i]).collect::<Vec<_>>()), None)
                    }
                }
            }
        };
        // Query i sits at key position i + past.
        let past = t as i64 - s as i64;
        let mut out = vec![0f32; nb * hq * s * dv];
        let mut scores = vec![0f32; t];
        for n in 0..nb {
            for h in 0..hq {
                let kvh = h / group;
                for i in 0..s {
                    let row = ((n * hq + h) * s + i) * t;
                    let qrow = &qv[((n * hq + h) * s + i) * d..][..d];
                    for (j, sc) in scores.iter_mut().enumerate() {
                        let krow = &kv[((n * hkv + kvh) * t + j) * d..][..d];
                        let dot: f32 = qrow.iter().zip(krow).map(|(a, b)| a * b).sum();
                        let mut x = self.scale * dot;
                        if self.softcap > 0.0 {
                            x = self.softcap * (x / self.softcap).tanh();
                        }
                        if let Some(m) = &add_mask {
                            x += m[row + j];
                        }
                        if keep_mask.as_ref().is_some_and(|m| !m[row + j]) {
                            x = f32::NEG_INFINITY;
                        }
                        let pos = i as i64 + past;
                        let j = j as i64;
                        if self.causal && (j > pos || (self.window > 0 && j <= pos - self.window)) {
                            x = f32::NEG_INFINITY;
                        }
                        *sc = x;
                    }
                    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    if max == f32::NEG_INFINITY {
                        continue; // every key masked: a row of zeros
                    }
                    let mut sum = 0f32;
                    for sc in scores.iter_mut() {
                        *sc = (*sc - max).exp();
                        sum += *sc;
                    }
                    let orow = &mut out[((n * hq + h) * s + i) * dv..][..dv];
                    for (j, p) in scores.iter().enumerate() {
                        let p = p / sum;
                        let vrow = &vv[((n * hkv + kvh) * t + j) * dv..][..dv];
                        for (o, x) in orow.iter_mut().zip(vrow) {
                            *o += p * x;
                        }
                    }
                }
            }
        }
        let shape = vec![nb, hq, s, dv];
        Ok(vec![Tensor::from_f32(shape, out).cast(q.dtype())])
    }
}

impl OpBuild for Attention {
    const MNEMONICS: &'static [&'static str] = &["attention"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        let op = Attention {
            kv_heads: attrs.int("kv_heads")?,
            scale: attrs
                .opt_float("scale")?
                .ok_or_else(|| OpError("missing attribute `scale`".into()))?
                as f32,
            causal: attrs.bool_or("causal", false)?,
            window: attrs.int_or("window", 0)?,
            softcap: attrs.float_or("softcap", 0.0)? as f32,
        };
        op.check_attrs()?;
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::binary::BinaryKind::{Add, Div, Mul};
    use crate::ops::fused_util::testing::*;
    use crate::ops::gather::Gather;
    use crate::ops::matmul::MatMul;
    use crate::ops::softmax::Softmax;
    use crate::ops::test_util::*;
    use crate::ops::transpose::Transpose;
    use crate::ops::trilu::Trilu;
    use crate::ops::unary::UnaryKind::Tanh;
    use crate::ops::where_::Where;
    use crate::ops::Op;

    /// The decomposed graph, with the primitive ops: repeat the KV heads
    /// (`gather` along axis 1), `q @ kᵀ · scale`, soft-cap, mask (`add` or
    /// `where`), causal/window masks from `trilu` of ones, `softmax`,
    /// `@ v`.
    fn decomposed(
        op: &Attention,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        m: Option<&Tensor>,
    ) -> Tensor {
        let (hq, s, t) = (q.shape()[1], q.shape()[2], k.shape()[2]);
        let group = hq / op.kv_heads as usize;
        let heads = Tensor::from_i64(vec![hq], (0..hq).map(|h| (h / group) as i64).collect());
        let repeat = |x: &Tensor| ev(Gather { axis: 1 }, &[x, &heads]);
        let (k, v) = (repeat(k), repeat(v));
        let kt = ev(
            Transpose {
                perm: vec![0, 1, 3, 2],
            },
            &[&k],
        );
        let mut sc = bin(Mul, &ev(MatMul, &[q, &kt]), &scalar(op.scale));
        if op.softcap > 0.0 {
            let c = scalar(op.softcap);
            sc = bin(Mul, &c, &un(Tanh, &bin(Div, &sc, &c)));
        }
        let neg_inf = scalar(f32::NEG_INFINITY);
        match m {
            Some(m) if m.dtype() == DType::Bool => sc = ev(Where, &[m, &sc, &neg_inf]),
            Some(m) => sc = bin(Add, &sc, m),
            None => {}
        }
        if op.causal {
            let ones = Tensor::from_f32(vec![s, t], vec![1.0; s * t]);
            let past = t as i64 - s as i64;
            // Lower: col - row <= past. Upper: col - row >= past - window + 1.
            let lower = Trilu { upper: false };
            let mut keep = ev(lower, &[&ones, &Tensor::scalar_i64(past)]);
            if op.window > 0 {
                let k = Tensor::scalar_i64(past - op.window + 1);
                let upper = ev(Trilu { upper: true }, &[&ones, &k]);
                keep = bin(Mul, &keep, &upper);
            }
            sc = ev(Where, &[&keep.cast(DType::Bool), &sc, &neg_inf]);
        }
        let p = ev(Softmax { axis: -1 }, &[&sc]);
        ev(MatMul, &[&p, &v])
    }

    fn qkv(rng: &mut Lcg, b: usize, hq: usize, hkv: usize, s: usize, t: usize) -> [Tensor; 3] {
        [
            rng.tensor(&[b, hq, s, 16], 1.0),
            rng.tensor(&[b, hkv, t, 16], 1.0),
            rng.tensor(&[b, hkv, t, 8], 1.0),
        ]
    }

    fn check(op: &Attention, inputs: &[&Tensor]) {
        let r = eval_checked(op, inputs);
        let want = decomposed(op, inputs[0], inputs[1], inputs[2], inputs.get(3).copied());
        assert_close(&r[0], &want, 1e-5);
    }

    #[test]
    fn matches_decomposed_graph_gqa_mqa_mha() {
        let mut rng = Lcg::new(41);
        for (hq, hkv) in [(4, 2), (4, 1), (4, 4)] {
            let [q, k, v] = qkv(&mut rng, 2, hq, hkv, 5, 5);
            check(&Attention::new(hkv as i64, 0.25), &[&q, &k, &v]);
            let causal = Attention {
                causal: true,
                ..Attention::new(hkv as i64, 0.25)
            };
            check(&causal, &[&q, &k, &v]);
        }
    }

    #[test]
    fn causal_with_kv_cache_window_and_softcap() {
        let mut rng = Lcg::new(42);
        // 3 new queries over 7 keys (4 cached): query i sees keys j <= i + 4.
        let [q, k, v] = qkv(&mut rng, 1, 6, 2, 3, 7);
        let mut op = Attention {
            causal: true,
            ..Attention::new(2, 0.25)
        };
        check(&op, &[&q, &k, &v]);
        op.window = 3;
        check(&op, &[&q, &k, &v]);
        op.softcap = 0.5;
        check(&op, &[&q, &k, &v]);
        // Decode: one query sees every key but the window.
        let [q, k, v] = qkv(&mut rng, 1, 2, 2, 1, 9);
        check(&op, &[&q, &k, &v]);
        op.window = 0;
        check(&op, &[&q, &k, &v]);
    }

    #[test]
    fn float_and_bool_masks() {
        let mut rng = Lcg::new(43);
        let [q, k, v] = qkv(&mut rng, 2, 4, 2, 3, 6);
        let op = Attention::new(2, 0.25);
        // A padding mask [b, 1, 1, t] (HF's expanded additive mask), with
        // -inf and a large finite negative value.
        let mut pad = vec![0.0f32; 12];
        pad[5] = f32::NEG_INFINITY;
        pad[6] = f32::MIN;
        pad[7] = -1e9;
        let fmask = Tensor::from_f32(vec![2, 1, 1, 6], pad);
        check(&op, &[&q, &k, &v, &fmask]);
        // A random additive bias of shape [s, t], broadcast.
        let bias = rng.tensor(&[3, 6], 2.0);
        check(&op, &[&q, &k, &v, &bias]);
        // A bool mask [b, hq, s, t] with some false.
        let keep: Vec<bool> = (0..2 * 4 * 3 * 6).map(|i| i % 5 != 1).collect();
        let bmask = Tensor::from_bool(vec![2, 4, 3, 6], keep);
        check(&op, &[&q, &k, &v, &bmask]);
        let causal = Attention { causal: true, ..op };
        check(&causal, &[&q, &k, &v, &bmask]);
    }

    #[test]
    fn fully_masked_rows_are_zero() {
        let mut rng = Lcg::new(44);
        let [q, k, v] = qkv(&mut rng, 1, 2, 1, 2, 3);
        // Row 0 of head 0 masks every key; the other rows are untouched.
        let mut keep = vec![true; 2 * 2 * 3];
        keep[..3].fill(false);
        let m = Tensor::from_bool(vec![1, 2, 2, 3], keep);
        let op = Attention::new(1, 0.25);
        let r = eval_checked(&op, &[&q, &k, &v, &m]);
        let out = r[0].to_f32_vec();
        assert!(out[..8].iter().all(|&x| x == 0.0), "{out:?}");
        let rest = decomposed(&op, &q, &k, &v, Some(&m)).to_f32_vec();
        assert!(
            rest[..8].iter().all(|x| x.is_nan()),
            "the literal graph gives NaN"
        );
        for (a, b) in out[8..].iter().zip(&rest[8..]) {
            assert!((a - b).abs() < 1e-5);
        }
        // Causal with more queries than keys: the first queries see nothing.
        let [q, k, v] = qkv(&mut rng, 1, 1, 1, 4, 2);
        let causal = Attention {
            causal: true,
            ..Attention::new(1, 0.25)
        };
        let out = eval_checked(&causal, &[&q, &k, &v])[0].to_f32_vec();
        assert!(out[..16].iter().all(|&x| x == 0.0) && out[16..].iter().all(|x| x.is_finite()));
        // No keys at all.
        let [q, k, v] = qkv(&mut rng, 1, 1, 1, 2, 0);
        let out = eval_checked(&causal, &[&q, &k, &v]);
        assert!(out[0].to_f32_vec().iter().all(|&x| x == 0.0));
    }

    #[test]
    fn half_precision_computes_in_f32() {
        let mut rng = Lcg::new(45);
        let [q, k, v] = qkv(&mut rng, 1, 4, 2, 4, 4);
        let h = |t: &Tensor| t.cast(DType::F16);
        let op = Attention {
            causal: true,
            ..Attention::new(2, 0.25)
        };
        let r = eval_checked(&op, &[&h(&q), &h(&k), &h(&v)]);
        assert_eq!(r[0].dtype(), DType::F16);
        let f = |t: &Tensor| h(t).cast(DType::F32);
        let want = decomposed(&op, &f(&q), &f(&k), &f(&v), None);
        assert_close(&r[0], &want.cast(DType::F16), 1e-3);
        // An f32 mask with f16 q is rejected; an f16 or bool mask is fine.
        let m = Tensor::from_f32(vec![4, 4], vec![0.0; 16]);
        assert!(eval(&op, &[&h(&q), &h(&k), &h(&v), &m]).is_err());
        assert!(eval(&op, &[&h(&q), &h(&k), &h(&v), &h(&m)]).is_ok());
        // An f32 query over half keys and values (a KV cache read as it
        // is stored) is the attention of their exact f32 values.
        let r = eval_checked(&op, &[&q, &h(&k), &h(&v)]);
        assert_eq!(r[0].dtype(), DType::F32);
        let want = eval_checked(&op, &[&q, &f(&k), &f(&v)]);
        assert_eq!(r[0].to_f32_vec(), want[0].to_f32_vec());
        // An INT8 (q8) cache is the attention of its decoded rows.
        let q8 = |t: &Tensor| {
            let [b, h, n, d] = t.shape()[..] else {
                panic!()
            };
            let mut bytes = vec![0i8; b * h * n * (d + Q8_SCALE_BYTES)];
            for (row, out) in t
                .to_f32_vec()
                .chunks(d)
                .zip(bytes.chunks_mut(d + Q8_SCALE_BYTES))
            {
                crate::ops::kv_cache::q8_encode(row, out);
            }
            Tensor::new(
                vec![b, h, n, d + Q8_SCALE_BYTES],
                crate::tensor::TensorData::I8(bytes),
            )
            .unwrap()
        };
        let (kq, vq) = (q8(&k), q8(&v));
        let dq = |t: &Tensor| {
            let mut s = t.shape().to_vec();
            s[3] -= Q8_SCALE_BYTES;
            Tensor::from_f32(s, q8_decode_all(t).unwrap())
        };
        let r = eval_checked(&op, &[&q, &kq, &vq]);
        let want = eval_checked(&op, &[&q, &dq(&kq), &dq(&vq)]);
        assert_eq!(r[0].shape(), want[0].shape());
        assert_eq!(r[0].to_f32_vec(), want[0].to_f32_vec());
    }

    #[test]
    fn infer_symbolic() {
        let op = Attention {
            causal: true,
            ..Attention::new(2, 0.125)
        };
        let q = fact(DType::F32, vec![sym("b"), d(8), sym("seq"), d(64)]);
        let past_seq = &sym("past") + &sym("seq");
        let k = fact(DType::F32, vec![sym("b"), d(2), past_seq.clone(), d(64)]);
        let v = fact(DType::F32, vec![sym("b"), d(2), past_seq.clone(), d(32)]);
        let r = op.infer(&[&q, &k, &v]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[b, 8, seq, 32]");
        // Masks broadcasting to [b, 8, seq, past+seq].
        for dims in [
            vec![sym("b"), d(1), sym("seq"), past_seq.clone()],
            vec![d(1), d(1), d(1), past_seq.clone()],
            vec![sym("seq"), past_seq.clone()],
            vec![],
        ] {
            let m = fact(DType::Bool, dims.clone());
            assert!(op.infer(&[&q, &k, &v, &m]).is_ok(), "{dims:?}");
            let m = fact(DType::F32, dims);
            assert!(op.infer(&[&q, &k, &v, &m]).is_ok());
        }
        // A symbolic number of query heads that is provably a multiple.
        let op1 = Attention::new(2, 0.125);
        let qh = fact(DType::F32, vec![d(1), &d(2) * &sym("g"), sym("seq"), d(64)]);
        let kh = fact(DType::F32, vec![d(1), d(2), sym("t"), d(64)]);
        let r = op1.infer(&[&qh, &kh, &kh]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[1, 2*g, seq, 64]");
    }

    #[test]
    fn infer_rejects() {
        let op = Attention::new(2, 0.125);
        let q = fact(DType::F32, vec![d(1), d(8), sym("seq"), d(64)]);
        let k = fact(DType::F32, vec![d(1), d(2), sym("t"), d(64)]);
        let err = |inputs: &[&Fact]| op.infer(inputs).unwrap_err().0;
        // Heads: k's dim 1 must be kv_heads; hq a multiple of it.
        let k4 = fact(DType::F32, vec![d(1), d(4), sym("t"), d(64)]);
        assert!(err(&[&q, &k4, &k4]).contains("kv_heads = 2"));
        let q3 = fact(DType::F32, vec![d(1), d(3), sym("seq"), d(64)]);
        assert!(err(&[&q3, &k, &k]).contains("multiple"));
        let qs = fact(DType::F32, vec![d(1), sym("h"), sym("seq"), d(64)]);
        assert!(err(&[&qs, &k, &k]).contains("multiple"));
        // Batch, length, head dim, rank, dtype.
        let kb = fact(DType::F32, vec![d(2), d(2), sym("t"), d(64)]);
        assert!(err(&[&q, &kb, &kb]).contains("batch"));
        let vt = fact(DType::F32, vec![d(1), d(2), sym("u"), d(64)]);
        assert!(err(&[&q, &k, &vt]).contains("length"));
        let kd = fact(DType::F32, vec![d(1), d(2), sym("t"), d(32)]);
        assert!(err(&[&q, &kd, &k]).contains("head dim"));
        let k3 = fact(DType::F32, vec![d(2), sym("t"), d(64)]);
        assert!(err(&[&q, &k3, &k]).contains("rank 4"));
        // k and v may be half with an f32 q, but not of two dtypes.
        let k16 = fact(DType::F16, vec![d(1), d(2), sym("t"), d(64)]);
        assert!(err(&[&q, &k16, &k]).contains("dtype"));
        let ki = fact(DType::I32, vec![d(1), d(2), sym("t"), d(64)]);
        assert!(err(&[&q, &ki, &ki]).contains("float"));
        let qi = fact(DType::I64, vec![d(1), d(8), sym("seq"), d(64)]);
        assert!(err(&[&qi, &k, &k]).contains("float"));
        // Masks: wrong dtype, not broadcastable, bidirectional, too high rank.
        for (dt, dims) in [
            (DType::I64, vec![sym("seq"), sym("t")]),
            (DType::F32, vec![sym("seq"), d(3)]),
            (DType::F32, vec![d(2), d(8), sym("seq"), sym("t")]),
            (DType::Bool, vec![d(1), d(1), d(1), sym("seq"), sym("t")]),
        ] {
            let m = fact(dt, dims);
            assert!(err(&[&q, &k, &k, &m]).contains("mask"));
        }
        assert!(err(&[&q, &k]).contains("operands"));
        // Attribute values.
        for bad in [
            Attention::new(0, 0.1),
            Attention::new(2, f32::NAN),
            Attention {
                window: 4,
                ..Attention::new(2, 0.1)
            },
            Attention {
                window: -1,
                causal: true,
                ..Attention::new(2, 0.1)
            },
            Attention {
                softcap: -1.0,
                ..Attention::new(2, 0.1)
            },
        ] {
            assert!(bad.infer(&[&q, &k, &k]).is_err(), "{bad:?}");
            let t = Tensor::from_f32(vec![1, 2, 1, 1], vec![1.0; 2]);
            assert!(eval(&bad, &[&t, &t, &t]).is_err());
            let attrs = Attrs::from_pairs(bad.attrs().into_iter().map(|(k, v)| (k.to_string(), v)));
            assert!(Op::build("attention", attrs, &[]).is_err());
        }
        // Evaluation rejects mismatched shapes without panicking.
        let a = Tensor::from_f32(vec![1, 2, 1, 4], vec![1.0; 8]);
        let b = Tensor::from_f32(vec![1, 2, 1, 3], vec![1.0; 6]);
        assert!(eval(&op, &[&a, &b, &b]).is_err());
        assert!(eval(&op, &[&a, &a]).is_err());
    }

    #[test]
    fn round_trip_and_printing() {
        let op = Attention::new(2, 0.125);
        assert_round_trip(op, &[]);
        assert_eq!(
            op.attrs(),
            vec![("kv_heads", Attr::Int(2)), ("scale", Attr::Float(0.125))]
        );
        let full = Attention {
            kv_heads: 1,
            scale: 0.088_388_35,
            causal: true,
            window: 4096,
            softcap: 50.0,
        };
        assert_round_trip(full, &[]);
        assert_eq!(full.attrs().len(), 5);
        // kv_heads and scale are required.
        let a = Attrs::from_pairs([("kv_heads".to_string(), Attr::Int(2))]);
        assert!(Op::build("attention", a, &[]).is_err());
        let a = Attrs::from_pairs([("scale".to_string(), Attr::Float(0.1))]);
        assert!(Op::build("attention", a, &[]).is_err());
    }

    #[test]
    fn text_form() {
        let src = "module @m {
  graph @g(%q: f32[1, 8, seq, 64], %k: f32[1, 2, past+seq, 64], %v: f32[1, 2, past+seq, 64], %mask: bool[1, 1, seq, past+seq]) -> (f32[1, 8, seq, 64], f32[1, 8, seq, 64]) {
    %a = attention %q, %k, %v {kv_heads = 2, scale = 0.125, causal = true, window = 16, softcap = 50.0} : f32[1, 8, seq, 64]
    %b = attention %q, %k, %v, %mask {kv_heads = 2, scale = 0.125} : f32[1, 8, seq, 64]
    return %a, %b
  }
}
";
        let m = crate::text::parse_module(src).unwrap();
        crate::verify_module(&m).unwrap();
        assert_eq!(crate::text::print_module(&m), src);
    }
}
