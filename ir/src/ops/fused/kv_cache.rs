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
use crate::tensor::Tensor;

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
        if !cache.dtype.is_float() || !new.dtype.is_float() {
            bail!("`{op}` needs float cache and new entries, got {cache} and {new}");
        }
        if cache.rank() != 4 || new.rank() != 4 {
            bail!("`{op}` needs rank-4 cache [b, h, slots, d] and new [b, h, s, d], got {cache} and {new}");
        }
        let (c, n) = (cache.shape.dims(), new.shape.dims());
        if c[0] != n[0] || c[1] != n[1] || c[3] != n[3] {
            bail!("`{op}` cache {cache} and new {new} differ in batch, heads or head dim");
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
