//! The KV cache ops that the `kv-cache` pass builds: `kv_write` stores a
//! step's new keys or values into a preallocated cache, `kv_mask` says which
//! cache slots each of the step's queries may attend to.
//!
//! ```text
//! %kc = kv_write %kv.0.key, %k, %cache_pos : f32[1, 2, 260, 16]
//! %kc = kv_write %kv.0.key, %k, %cache_pos {sinks = 4, window = 256} : f32[1, 2, 260, 16]
//! %m = kv_mask %kc, %k, %cache_pos {sinks = 4, window = 256} : bool[1, 1, seq, 260]
//! %m = kv_mask %kc, %k, %cache_pos {window = 71, span = 8} : bool[1, 1, seq, 71]
//! ```
//!
//! Operands, for both ops: `cache` is `[b, h, C, d]` (`C` slots, the
//! capacity; any float dtype), `new` is `[b, h, s, d]` (the step's `s` new
//! entries; any float dtype, converted to the cache's with round to nearest
//! even), `pos` is the `i64` absolute position of the step's first token
//! (rank 0, or `[1]`). `kv_mask` reads only the shapes of `cache` and `new`.
//!
//! **The INT8 cache.** An `i8` cache is `[b, h, C, d + 4]` in the *q8 row*
//! format: each entry (row) of `d` values is quantized on its own, per
//! head and token, to `q = clamp(round_half_even(x / scale), -127, 127)`
//! with `scale = max|x| / 127` (the maximum ignoring NaNs; a NaN quotient,
//! as for an all-zero row, gives 0), and stored as the `d` values `q`
//! followed by the four bytes of `scale` (`f32`, little-endian). A row
//! reads back as `q · scale` ([`q8_decode`]). `attention` reads such a
//! cache as it is stored.
//!
//! **Slots.** Without a window (`window = 0`) position `p` lives in slot `p`
//! and writing `p >= C` is an error (the context is full). With a window
//! `W > 0` (StreamingLLM: `sinks = S` first tokens kept for good, then a
//! ring of the last `W`), `C` must be `S + W`; position `p < S` lives in slot
//! `p`, and `p >= S` in slot `S + (p - S) mod W`, overwriting the entry `W`
//! positions older. Keys keep the rotary position they were written with.
//!
//! **`kv_write`** returns the cache with the entries of positions `pos ..
//! pos + s` written (`new[:, :, i]` into the slot of `pos + i`, in order, so
//! a later entry wins a slot). The memory planner computes it in place: the
//! cache is state that lives across steps (see `docs/ARCHITECTURE.md`).
//!
//! **`kv_mask`** is `bool[1, 1, s, C]`: `true` where query `i` (at absolute
//! position `q = pos + i`) may attend to slot `j`, after the write: slot `j`
//! holds position `P(j)` (the latest position `< pos + s` that maps to it;
//! none if no such position) and the query attends iff `P(j) <= q`. This is
//! the causal mask over the cache (and with a `span`, also `P(j) > q -
//! span`); for `s = 1` without a span it is every filled slot. Used as
//! `attention`'s bool mask operand.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::fused_util::infer_on_tensors;
use crate::ops::{bail, check_arity, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::{Tensor, TensorData};

/// The bytes that follow a q8 row's values: its `f32` scale.
pub const Q8_SCALE_BYTES: usize = 4;

/// Quantizes `row` (`d` values) into `out` (`d + 4` bytes) in the q8 row
/// format (see the module doc).
pub fn q8_encode(row: &[f32], out: &mut [i8]) {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = max / 127.0;
    for (q, &x) in out.iter_mut().zip(row) {
        *q = (x / scale).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    for (b, v) in out[row.len()..].iter_mut().zip(scale.to_le_bytes()) {
        *b = v as i8;
    }
}

/// The values of a q8 row (`d + 4` bytes) into `out` (`d` values).
pub fn q8_decode(row: &[i8], out: &mut [f32]) {
    let d = out.len();
    let b = |i: usize| row[d + i] as u8;
    let scale = f32::from_le_bytes([b(0), b(1), b(2), b(3)]);
    for (o, &q) in out.iter_mut().zip(row) {
        *o = f32::from(q) * scale;
    }
}

/// Every row of a q8 tensor (`[..., d + 4]`, `i8`) decoded to `f32`
/// (`[..., d]`, flattened).
pub fn q8_decode_all(t: &Tensor) -> Result<Vec<f32>, OpError> {
    let (TensorData::I8(bytes), Some(&last)) = (t.data(), t.shape().last()) else {
        bail!("a q8 cache must be i8 of rank >= 1, got {}", t.dtype());
    };
    let Some(d) = last.checked_sub(Q8_SCALE_BYTES) else {
        bail!("a q8 row needs at least {Q8_SCALE_BYTES} bytes, got {last}");
    };
    let mut out = vec![0f32; bytes.len() / last.max(1) * d];
    for (row, o) in bytes
        .chunks_exact(last.max(1))
        .zip(out.chunks_exact_mut(d.max(1)))
    {
        q8_decode(row, o);
    }
    Ok(out)
}

/// How positions map to slots: the attributes both ops share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvLayout {
    pub sinks: i64,
    pub window: i64,
    /// The model's sliding window that `kv_mask` applies (0: none).
    pub span: i64,
}

impl KvLayout {
    /// The slot of absolute position `p` in a cache of `capacity` slots,
    /// or `None` when the context is full (no window and `p >= capacity`)
    /// or `p < 0`.
    pub fn slot(&self, p: i64, capacity: i64) -> Option<i64> {
        if p < 0 {
            return None;
        }
        if self.window == 0 {
            return (p < capacity).then_some(p);
        }
        if p < self.sinks {
            return Some(p);
        }
        Some(self.sinks + (p - self.sinks) % self.window)
    }

    /// Whether a query at position `q` attends to a key at position `p`.
    pub fn sees(&self, p: i64, q: i64) -> bool {
        p <= q && (self.span == 0 || p > q - self.span)
    }

    /// The position slot `j` holds once positions `0 .. total` are
    /// written in order, if any.
    pub fn position_in(&self, j: i64, total: i64) -> Option<i64> {
        if self.window == 0 || j < self.sinks {
            return (j < total).then_some(j);
        }
        // Ring index of the latest position written, and of slot `j`.
        let last = total - 1 - self.sinks;
        let r = j - self.sinks;
        let p = last - (last - r).rem_euclid(self.window);
        (p >= 0).then_some(self.sinks + p)
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let mut a = Vec::new();
        if self.sinks != 0 {
            a.push(("sinks", Attr::Int(self.sinks)));
        }
        if self.window != 0 {
            a.push(("window", Attr::Int(self.window)));
        }
        if self.span != 0 {
            a.push(("span", Attr::Int(self.span)));
        }
        a
    }

    fn build(attrs: &mut Attrs) -> Result<KvLayout, OpError> {
        let l = KvLayout {
            sinks: attrs.int_or("sinks", 0)?,
            window: attrs.int_or("window", 0)?,
            span: attrs.int_or("span", 0)?,
        };
        l.check()?;
        Ok(l)
    }

    fn check(&self) -> Result<(), OpError> {
        if self.sinks < 0 || self.window < 0 {
            bail!(
                "KV cache sinks and window must be >= 0, got sinks = {}, window = {}",
                self.sinks,
                self.window
            );
        }
        if self.sinks > 0 && self.window == 0 {
            bail!("KV cache sinks = {} needs a window > 0", self.sinks);
        }
        if self.span < 0
            || (self.span > 0 && self.window > 0 && (self.sinks > 0 || self.window < self.span))
        {
            bail!(
                "KV cache span = {} needs span >= 0 and, with a ring, no sinks and a window of at least the span (sinks = {}, window = {})",
                self.span,
                self.sinks,
                self.window
            );
        }
        Ok(())
    }

    /// Checks the operands of either op; returns `(cache dims, new dims)`.
    fn check_operands<'a>(
        &self,
        op: &str,
        inputs: &'a [&Fact],
    ) -> Result<(&'a [Dim], &'a [Dim]), OpError> {
        check_arity(op, inputs.len(), 3, 3)?;
        self.check()?;
        let (cache, new, pos) = (&inputs[0].ty, &inputs[1].ty, &inputs[2].ty);
        let q8 = cache.dtype == DType::I8;
        if !(cache.dtype.is_float() || q8) || !new.dtype.is_float() {
            bail!("`{op}` needs a float or i8 (q8) cache and float new entries, got {cache} and {new}");
        }
        if cache.rank() != 4 || new.rank() != 4 {
            bail!("`{op}` needs rank-4 cache [b, h, slots, d] and new [b, h, s, d], got {cache} and {new}");
        }
        let (c, n) = (cache.shape.dims(), new.shape.dims());
        let row = match q8 {
            true => &n[3] + &Dim::fixed(Q8_SCALE_BYTES as i64),
            false => n[3].clone(),
        };
        if c[0] != n[0] || c[1] != n[1] || c[3] != row {
            bail!("`{op}` cache {cache} and new {new} differ in batch, heads or head dim (a q8 cache's rows are d + 4 bytes)");
        }
        if pos.dtype != DType::I64
            || pos.rank() > 1
            || pos.shape.dims().iter().any(|d| d.as_fixed() != Some(1))
        {
            bail!("`{op}` position must be an i64 scalar (or [1]), got {pos}");
        }
        if self.window > 0 {
            let want = Dim::fixed(self.sinks + self.window);
            if c[2] != want {
                bail!(
                    "`{op}` with sinks = {} and window = {} needs {want} cache slots, got {cache}",
                    self.sinks,
                    self.window
                );
            }
        } else if c[2].as_fixed().is_none() {
            bail!("`{op}` needs a static cache capacity, got {cache}");
        }
        Ok((c, n))
    }
}

/// The step's first position from a `pos` operand.
fn first_position(op: &str, pos: &Tensor) -> Result<i64, OpError> {
    match pos.len() {
        1 => Ok(pos.get_i64(0)),
        n => bail!("`{op}` position must hold one value, got {n}"),
    }
}

/// `kv_write %cache, %new, %pos {sinks, window}` (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvWrite {
    pub layout: KvLayout,
}

impl OpDef for KvWrite {
    fn mnemonic(&self) -> &'static str {
        "kv_write"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        self.layout.attrs()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        self.layout.check_operands("kv_write", inputs)?;
        Ok(vec![Fact::new(inputs[0].ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let (cache, new) = (inputs[0], inputs[1]);
        let pos = first_position("kv_write", inputs[2])?;
        let [b, h, cap, d] = cache.shape()[..] else {
            bail!("`kv_write` cache must have rank 4");
        };
        let s = new.shape()[2];
        if cache.dtype() == DType::I8 {
            return self.write_q8(cache, &new.to_f32_vec(), s, pos);
        }
        // Entries are converted to the cache's dtype first.
        let new = new.cast(cache.dtype()).to_f32_vec();
        let mut out = cache.to_f32_vec();
        for i in 0..s {
            let p = pos + i as i64;
            let Some(slot) = self.layout.slot(p, cap as i64) else {
                bail!("`kv_write`: position {p} does not fit the cache of {cap} slots (the context is full)");
            };
            let slot = slot as usize;
            for n in 0..b * h {
                let src = &new[(n * s + i) * d..][..d];
                out[(n * cap + slot) * d..][..d].copy_from_slice(src);
            }
        }
        Ok(vec![
            Tensor::from_f32(vec![b, h, cap, d], out).cast(cache.dtype())
        ])
    }
}

impl KvWrite {
    /// `kv_write` into a q8 cache: each new row quantized into its slot.
    fn write_q8(
        &self,
        cache: &Tensor,
        new: &[f32],
        s: usize,
        pos: i64,
    ) -> Result<Vec<Tensor>, OpError> {
        let [b, h, cap, row] = cache.shape()[..] else {
            bail!("`kv_write` cache must have rank 4");
        };
        let TensorData::I8(bytes) = cache.data() else {
            bail!("`kv_write` q8 cache must be i8");
        };
        let d = row - Q8_SCALE_BYTES;
        let mut out = bytes.clone();
        for i in 0..s {
            let p = pos + i as i64;
            let Some(slot) = self.layout.slot(p, cap as i64) else {
                bail!("`kv_write`: position {p} does not fit the cache of {cap} slots (the context is full)");
            };
            for n in 0..b * h {
                let src = &new[(n * s + i) * d..][..d];
                q8_encode(src, &mut out[(n * cap + slot as usize) * row..][..row]);
            }
        }
        Ok(vec![Tensor::new(vec![b, h, cap, row], TensorData::I8(out))
            .map_err(|e| OpError(e.to_string()))?])
    }
}

impl OpBuild for KvWrite {
    const MNEMONICS: &'static [&'static str] = &["kv_write"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(KvWrite {
            layout: KvLayout::build(attrs)?,
        })
    }
}

/// `kv_mask %cache, %new, %pos {sinks, window}` (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvMask {
    pub layout: KvLayout,
}

impl OpDef for KvMask {
    fn mnemonic(&self) -> &'static str {
        "kv_mask"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        self.layout.attrs()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let (c, n) = self.layout.check_operands("kv_mask", inputs)?;
        let shape = Shape(vec![
            Dim::fixed(1),
            Dim::fixed(1),
            n[2].clone(),
            c[2].clone(),
        ]);
        Ok(vec![Fact::new(TensorType::new(DType::Bool, shape))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let cap = inputs[0].shape()[2];
        let s = inputs[1].shape()[2];
        let pos = first_position("kv_mask", inputs[2])?;
        let total = pos + s as i64;
        let mut keep = vec![false; s * cap];
        for j in 0..cap {
            let Some(p) = self.layout.position_in(j as i64, total) else {
                continue;
            };
            for i in 0..s {
                keep[i * cap + j] = self.layout.sees(p, pos + i as i64);
            }
        }
        Ok(vec![Tensor::from_bool(vec![1, 1, s, cap], keep)])
    }
}

impl OpBuild for KvMask {
    const MNEMONICS: &'static [&'static str] = &["kv_mask"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(KvMask {
            layout: KvLayout::build(attrs)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::fused_util::tensor_type;
    use crate::ops::fused_util::testing::*;

    fn cache(cap: usize) -> Tensor {
        Tensor::zeros(DType::F32, vec![1, 1, cap, 2])
    }

    fn new(vals: &[f32]) -> Tensor {
        Tensor::from_f32(vec![1, 1, vals.len() / 2, 2], vals.to_vec())
    }

    /// A q8 cache: each written row is its values rounded by the row's
    /// own scale, followed by the scale; rows decode within half a step.
    #[test]
    fn q8_rows_round_per_row_and_hold_their_scale() {
        let op = KvWrite::default();
        let cache = Tensor::zeros(DType::I8, vec![1, 1, 3, 6]);
        let rows = new(&[0.5, -1.27, 100.0, 0.0]);
        let out = ev(op, &[&cache, &rows, &Tensor::scalar_i64(1)]);
        let TensorData::I8(b) = out.data() else {
            panic!()
        };
        assert_eq!(&b[..6], &[0; 6], "slot 0 untouched");
        assert_eq!(&b[6..8], &[50, -127]);
        assert_eq!(&b[8..12], &(1.27f32 / 127.0).to_le_bytes().map(|x| x as i8));
        assert_eq!(&b[12..14], &[127, 0]);
        let back = q8_decode_all(&out).unwrap();
        assert_eq!(back.len(), 6);
        assert!((back[2] - 0.5).abs() <= 0.01 / 2.0 && back[3] == -1.27);
        assert_eq!(&back[4..], &[100.0, 0.0]);
        // An all-zero row has scale 0 and decodes to zeros.
        let out = ev(op, &[&cache, &new(&[0.0, 0.0]), &Tensor::scalar_i64(0)]);
        assert_eq!(&q8_decode_all(&out).unwrap()[..2], &[0.0, 0.0]);
        // Rows must be d + 4 bytes.
        let bad = Tensor::zeros(DType::I8, vec![1, 1, 3, 2]);
        let err = op
            .eval(&[&bad, &rows, &Tensor::scalar_i64(0)], &EvalCtx::default())
            .unwrap_err();
        assert!(err.0.contains("d + 4"), "{err}");
    }

    #[test]
    fn writes_at_positions_and_refuses_a_full_context() {
        let op = KvWrite::default();
        let pos = Tensor::scalar_i64(1);
        let out = ev(op, &[&cache(4), &new(&[1., 2., 3., 4.]), &pos]);
        assert_eq!(out.as_f32().unwrap(), &[0., 0., 1., 2., 3., 4., 0., 0.]);
        let pos = Tensor::scalar_i64(3);
        let err = op
            .eval(
                &[&cache(4), &new(&[1., 2., 3., 4.]), &pos],
                &EvalCtx::default(),
            )
            .unwrap_err();
        assert!(err.0.contains("position 4 does not fit"), "{err}");
    }

    #[test]
    fn the_ring_keeps_sinks_and_the_last_window() {
        let l = KvLayout {
            sinks: 2,
            window: 3,
            span: 0,
        };
        let slots: Vec<i64> = (0..9).map(|p| l.slot(p, 5).unwrap()).collect();
        assert_eq!(slots, [0, 1, 2, 3, 4, 2, 3, 4, 2]);
        // After 9 positions: sinks 0, 1; the ring holds 6, 7, 8.
        let held: Vec<Option<i64>> = (0..5).map(|j| l.position_in(j, 9)).collect();
        assert_eq!(held, [Some(0), Some(1), Some(8), Some(6), Some(7)]);
        let held: Vec<Option<i64>> = (0..5).map(|j| l.position_in(j, 3)).collect();
        assert_eq!(held, [Some(0), Some(1), Some(2), None, None]);
        let op = KvWrite { layout: l };
        let pos = Tensor::scalar_i64(4);
        let c = Tensor::from_f32(vec![1, 1, 5, 2], (0..10).map(|x| x as f32).collect());
        let out = ev(op, &[&c, &new(&[-1., -2., -3., -4.]), &pos]);
        // Position 4 -> slot 4, position 5 -> slot 2.
        assert_eq!(
            out.as_f32().unwrap(),
            &[0., 1., 2., 3., -3., -4., 6., 7., -1., -2.]
        );
    }

    #[test]
    fn the_mask_is_causal_over_filled_slots() {
        let op = KvMask::default();
        let pos = Tensor::scalar_i64(1);
        let m = ev(op, &[&cache(4), &new(&[0.; 4]), &pos]);
        assert_eq!(m.shape(), &[1, 1, 2, 4]);
        let t = true;
        let f = false;
        assert_eq!(m.as_bool().unwrap(), &[t, t, f, f, t, t, t, f]);
        let ring = KvMask {
            layout: KvLayout {
                sinks: 1,
                window: 2,
                span: 0,
            },
        };
        let pos = Tensor::scalar_i64(7);
        let m = ev(ring, &[&cache(3), &new(&[0.; 2]), &pos]);
        assert_eq!(m.as_bool().unwrap(), &[t, t, t]);
    }

    #[test]
    fn a_span_keeps_the_last_positions_of_each_query() {
        // A ring of 4 slots for a span of 2; a step of 3 tokens at 5 writes
        // positions 5, 6, 7 into slots 1, 2, 3 (slot 0 holds 4).
        let op = KvMask {
            layout: KvLayout {
                sinks: 0,
                window: 4,
                span: 2,
            },
        };
        let pos = Tensor::scalar_i64(5);
        let m = ev(op, &[&cache(4), &new(&[0.; 6]), &pos]);
        let (t, f) = (true, false);
        // Query 5 sees 4, 5; query 6 sees 5, 6; query 7 sees 6, 7.
        assert_eq!(m.as_bool().unwrap(), &[t, t, f, f, f, t, t, f, f, f, t, t]);
        let bad = KvLayout {
            sinks: 0,
            window: 1,
            span: 2,
        };
        assert!(bad.check().is_err());
    }

    #[test]
    fn checks_its_operands() {
        let f = |t: &Tensor| Fact::new(tensor_type(t));
        let bad_pos = Tensor::scalar_f32(0.0);
        let (c, n) = (cache(4), new(&[0.; 2]));
        let err = KvWrite::default()
            .infer(&[&f(&c), &f(&n), &f(&bad_pos)])
            .unwrap_err();
        assert!(err.0.contains("i64 scalar"), "{err}");
        let ring = KvWrite {
            layout: KvLayout {
                sinks: 4,
                window: 8,
                span: 0,
            },
        };
        let pos = Tensor::scalar_i64(0);
        let err = ring.infer(&[&f(&c), &f(&n), &f(&pos)]).unwrap_err();
        assert!(err.0.contains("needs 12 cache slots"), "{err}");
    }
}
