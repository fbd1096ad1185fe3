//! `rope`: rotary position embedding applied to queries or keys, a fused op:
//!
//! ```text
//! %y = rope %x, %cos, %sin {rotary_dim = 64} : f32[1, 8, seq, 64]
//! %y = rope %x, %cos, %sin {rotary_dim = 32, interleaved = true} : f32[1, 8, seq, 96]
//! ```
//!
//! `rotary_dim` (required, even, `0 < rotary_dim <= d`) is always printed;
//! `interleaved` (default false) only when true.
//!
//! Shapes: `x` is `[b, h, s, d]`, a float tensor with a static `d` (`b`,
//! `h`, `s` may be symbolic); the result has `x`'s type. `cos` and `sin`
//! have `x`'s dtype, one shape between them, last dim `rotary_dim` and
//! one of these layouts (the ones HF-style exports produce), each read as a
//! `[b', h', s, rotary_dim]` table:
//!
//! - rank 2, `[s, rotary_dim]` — shared by every batch and head
//!   (`b' = h' = 1`);
//! - rank 3, `[b', s, rotary_dim]` with `b'` = `b` or 1 — HF's `cos` from
//!   `position_ids`, which the model unsqueezes at axis 1 to
//!   `[b', 1, s, rotary_dim]` (note: *not* NumPy's rank-3 broadcasting,
//!   which would align `b'` with the head axis);
//! - rank 4, `[b', h', s, rotary_dim]` with `b'` = `b` or 1 and `h'` = `h`
//!   or 1 — the already unsqueezed `[b, 1, s, rotary_dim]`, broadcast with
//!   NumPy rules.
//!
//! The `s` of the tables must equal `x`'s `s` (an exporter slices a
//! `[max_pos, rotary_dim]` cache to the current positions first).
//!
//! Semantics, per `(n, k, i)` row of `x` and channel `c`, with `C = cos`
//! and `S = sin` at `[n', k', i, c]` (`n' = 0` when `b' = 1`, likewise
//! `k'`), and `x_r = x[..., :rotary_dim]`:
//!
//! - non-interleaved (HF `rotate_half`, Llama/Qwen/Mistral/Phi-3/NeoX):
//!   `y_r = x_r · C + rotate_half(x_r) · S` with `rotate_half([a, b]) =
//!   [−b, a]` on the halves of `rotary_dim` (`half = rotary_dim / 2`), i.e.
//!   `y[c] = x[c]·C[c] − x[c+half]·S[c]` for `c < half` and
//!   `y[c] = x[c]·C[c] + x[c−half]·S[c]` for `half <= c < rotary_dim`;
//! - interleaved (GPT-J `rotate_every_two`): pairs `(x[2m], x[2m+1])`
//!   rotate, `y_r = x_r · C + rotate_every_two(x_r) · S` with
//!   `rotate_every_two(x)[2m] = −x[2m+1]`, `[2m+1] = x[2m]`, i.e.
//!   `y[2m] = x[2m]·C[2m] − x[2m+1]·S[2m]` and
//!   `y[2m+1] = x[2m+1]·C[2m+1] + x[2m]·S[2m+1]` (GPT-J's tables repeat each
//!   frequency twice, `C[2m] = C[2m+1]`, via `repeat_interleave`; the op
//!   does not require it);
//! - channels `rotary_dim..d` pass through unchanged (partial rotary:
//!   Phi-3/GPT-NeoX/GPT-J `rotary_dim < head_dim`).
//!
//! The tables carry the full `rotary_dim` (HF's `cat(freqs, freqs)` or the
//! interleaved repeat), unlike ONNX `RotaryEmbedding` whose caches hold
//! `rotary_dim / 2` values. Computed in `f32`, rounded once to `x`'s dtype.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::ops::fused_util::infer_on_tensors;
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rope {
    pub rotary_dim: i64,
    pub interleaved: bool,
}

impl Rope {
    /// Non-interleaved rotation of the first `rotary_dim` channels.
    pub fn new(rotary_dim: i64) -> Rope {
        Rope {
            rotary_dim,
            interleaved: false,
        }
    }

    /// Checks the table layout against `x = [b, h, s, d]`.
    fn check_table(&self, what: &str, x: &TensorType, c: &TensorType) -> Result<(), OpError> {
        let xd = x.shape.dims();
        let (b, h, s) = (&xd[0], &xd[1], &xd[2]);
        let one = Dim::fixed(1);
        let cd = c.shape.dims();
        let ok = match cd {
            [cs, r] => cs == s && *r == Dim::fixed(self.rotary_dim),
            [cb, cs, r] => (cb == b || *cb == one) && cs == s && *r == Dim::fixed(self.rotary_dim),
            [cb, ch, cs, r] => {
                (cb == b || *cb == one)
                    && (ch == h || *ch == one)
                    && cs == s
                    && *r == Dim::fixed(self.rotary_dim)
            }
            _ => false,
        };
        if !ok {
            bail!(
                "`rope` {what} {c} must be [s, {r}], [b or 1, s, {r}] or [b or 1, h or 1, s, {r}] for x {x}",
                r = self.rotary_dim
            );
        }
        Ok(())
    }
}

impl OpDef for Rope {
    fn mnemonic(&self) -> &'static str {
        "rope"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let mut a = vec![("rotary_dim", Attr::Int(self.rotary_dim))];
        if self.interleaved {
            a.push(("interleaved", Attr::Bool(true)));
        }
        a
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x, cos, sin] = inputs else {
            bail!(
                "`rope` takes 3 operands (x, cos, sin), got {}",
                inputs.len()
            );
        };
        let x = &x.ty;
        if !x.dtype.is_float() || x.rank() != 4 {
            bail!("`rope` needs a float x of rank 4 ([batch, heads, seq, head_dim]), got {x}");
        }
        let Some(d) = x.shape.dims()[3].as_fixed() else {
            bail!("`rope` needs a static head dim, got {x}");
        };
        let r = self.rotary_dim;
        if r <= 0 || r % 2 != 0 || r > d {
            bail!("`rope` rotary_dim must be even and in 1..={d} for x {x}, got {r}");
        }
        for (what, t) in [("cos", &cos.ty), ("sin", &sin.ty)] {
            if t.dtype != x.dtype {
                bail!("`rope` {what} must have the dtype of x: {t} vs {x}");
            }
            self.check_table(what, x, t)?;
        }
        if cos.ty.shape != sin.ty.shape {
            bail!(
                "`rope` cos and sin differ in shape: {} vs {}",
                cos.ty,
                sin.ty
            );
        }
        Ok(vec![Fact::new(x.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let (x, cos, sin) = (inputs[0], inputs[1], inputs[2]);
        let [nb, nh, s, d] = x.shape()[..] else {
            bail!("`rope` x must have rank 4");
        };
        let r = self.rotary_dim as usize;
        let half = r / 2;
        // The table as [b', h', s, r].
        let (tb, th) = match cos.shape() {
            [_, _] => (1, 1),
            [b, _, _] => (*b, 1),
            [b, h, _, _] => (*b, *h),
            _ => bail!("`rope` cos must have rank 2, 3 or 4"),
        };
        let (cv, sv) = (cos.to_f32_vec(), sin.to_f32_vec());
        let mut v = x.to_f32_vec();
        for n in 0..nb {
            for k in 0..nh {
                for i in 0..s {
                    let row = &mut v[((n * nh + k) * s + i) * d..][..r];
                    let t0 = ((n % tb * th + k % th) * s + i) * r;
                    let (c, sn) = (&cv[t0..t0 + r], &sv[t0..t0 + r]);
                    let xr = row.to_vec();
                    for ch in 0..r {
                        let rotated = match (self.interleaved, ch) {
                            (false, ch) if ch < half => -xr[ch + half],
                            (false, ch) => xr[ch - half],
                            (true, ch) if ch % 2 == 0 => -xr[ch + 1],
                            (true, ch) => xr[ch - 1],
                        };
                        row[ch] = xr[ch] * c[ch] + rotated * sn[ch];
                    }
                }
            }
        }
        Ok(vec![Tensor::from_f32(x.shape().to_vec(), v).cast(x.dtype())])
    }
}

impl OpBuild for Rope {
    const MNEMONICS: &'static [&'static str] = &["rope"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        let op = Rope {
            rotary_dim: attrs.int("rotary_dim")?,
            interleaved: attrs.bool_or("interleaved", false)?,
        };
        if op.rotary_dim <= 0 || op.rotary_dim % 2 != 0 {
            bail!(
                "`rope` rotary_dim must be positive and even, got {}",
                op.rotary_dim
            );
        }
        Ok(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::binary::BinaryKind::{Add, Mul};
    use crate::ops::concat::Concat;
    use crate::ops::fused_util::testing::*;
    use crate::ops::reshape::Reshape;
    use crate::ops::split::Split;
    use crate::ops::test_util::*;
    use crate::ops::unary::UnaryKind::Neg;
    use crate::ops::unsqueeze::Unsqueeze;
    use crate::ops::Op;

    fn split(x: &Tensor, axis: i64, sizes: &[usize]) -> Vec<Tensor> {
        let op = Split {
            axis,
            sizes: sizes.iter().map(|&s| d(s as i64)).collect(),
        };
        op.eval(&[x], &EvalCtx::default()).unwrap()
    }

    fn concat(parts: &[&Tensor], axis: i64) -> Tensor {
        ev(Concat { axis }, parts)
    }

    fn reshape(x: &Tensor, shape: &[usize]) -> Tensor {
        let target = Tensor::from_i64(vec![shape.len()], shape.iter().map(|&s| s as i64).collect());
        ev(Reshape::default(), &[x, &target])
    }

    /// HF's `apply_rotary_pos_emb` with the primitive ops: unsqueeze a
    /// rank-3 table at axis 1, split off the pass-through channels, rotate
    /// (`rotate_half`, or `rotate_every_two` through a `[.., r/2, 2]`
    /// reshape), `x·cos + rot(x)·sin`, concat back.
    fn decomposed(op: &Rope, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        let table = |t: &Tensor| match t.rank() {
            3 => ev(Unsqueeze { axes: vec![1] }, &[t]),
            _ => t.clone(),
        };
        let (cos, sin) = (table(cos), table(sin));
        let shape = x.shape().to_vec();
        let (dh, r) = (shape[3], op.rotary_dim as usize);
        let parts = split(x, -1, &[r, dh - r]);
        let (xr, pass) = (&parts[0], &parts[1]);
        let rot = if op.interleaved {
            let mut pairs_shape = shape.clone();
            pairs_shape[3] = r / 2;
            pairs_shape.push(2);
            let pairs = reshape(xr, &pairs_shape);
            let eo = split(&pairs, -1, &[1, 1]);
            let swapped = concat(&[&un(Neg, &eo[1]), &eo[0]], -1);
            let mut r_shape = shape.clone();
            r_shape[3] = r;
            reshape(&swapped, &r_shape)
        } else {
            let halves = split(xr, -1, &[r / 2, r / 2]);
            concat(&[&un(Neg, &halves[1]), &halves[0]], -1)
        };
        let yr = bin(Add, &bin(Mul, xr, &cos), &bin(Mul, &rot, &sin));
        concat(&[&yr, pass], -1)
    }

    /// HF-style tables: `cat(freqs, freqs)` (or each frequency repeated
    /// twice when interleaved) of `pos · base^(-2m/r)`, shape `[s, r]`.
    fn tables(s: usize, r: usize, interleaved: bool, first_pos: usize) -> (Tensor, Tensor) {
        let mut c = Vec::new();
        let mut sn = Vec::new();
        for p in 0..s {
            for ch in 0..r {
                let m = if interleaved { ch / 2 } else { ch % (r / 2) };
                let inv = 10000f32.powf(-2.0 * m as f32 / r as f32);
                let a = (first_pos + p) as f32 * inv;
                c.push(a.cos());
                sn.push(a.sin());
            }
        }
        (
            Tensor::from_f32(vec![s, r], c),
            Tensor::from_f32(vec![s, r], sn),
        )
    }

    #[test]
    fn matches_decomposed_graph_all_layouts() {
        let mut rng = Lcg::new(51);
        let x = rng.tensor(&[2, 3, 5, 16], 2.0);
        for interleaved in [false, true] {
            for r in [16, 8] {
                let op = Rope {
                    rotary_dim: r as i64,
                    interleaved,
                };
                // [s, r] from real frequencies, then random tables in every layout.
                let (c, s) = tables(5, r, interleaved, 3);
                let r0 = eval_checked(&op, &[&x, &c, &s]);
                assert_close(&r0[0], &decomposed(&op, &x, &c, &s), 1e-5);
                for shape in [
                    vec![5, r],
                    vec![2, 5, r],
                    vec![1, 5, r],
                    vec![2, 1, 5, r],
                    vec![1, 3, 5, r],
                    vec![2, 3, 5, r],
                    vec![1, 1, 5, r],
                ] {
                    let c = rng.tensor(&shape, 1.0);
                    let s = rng.tensor(&shape, 1.0);
                    let out = eval_checked(&op, &[&x, &c, &s]);
                    assert_close(&out[0], &decomposed(&op, &x, &c, &s), 1e-5);
                }
            }
        }
    }

    #[test]
    fn rotates_pairs_as_documented() {
        // One position, d = 6, rotary_dim = 4, angle θ on every channel.
        let x = Tensor::from_f32(vec![1, 1, 1, 6], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let (ct, st) = (0.6f32, 0.8f32);
        let c = Tensor::from_f32(vec![1, 4], vec![ct; 4]);
        let s = Tensor::from_f32(vec![1, 4], vec![st; 4]);
        let half = eval_checked(&Rope::new(4), &[&x, &c, &s]);
        // Pairs (x0, x2) and (x1, x3) rotate; x4, x5 pass.
        let want = [
            1.0 * ct - 3.0 * st,
            2.0 * ct - 4.0 * st,
            3.0 * ct + 1.0 * st,
            4.0 * ct + 2.0 * st,
            5.0,
            6.0,
        ];
        assert_close(
            &half[0],
            &Tensor::from_f32(vec![1, 1, 1, 6], want.to_vec()),
            1e-6,
        );
        let op = Rope {
            rotary_dim: 4,
            interleaved: true,
        };
        let inter = eval_checked(&op, &[&x, &c, &s]);
        // Pairs (x0, x1) and (x2, x3) rotate.
        let want = [
            1.0 * ct - 2.0 * st,
            2.0 * ct + 1.0 * st,
            3.0 * ct - 4.0 * st,
            4.0 * ct + 3.0 * st,
            5.0,
            6.0,
        ];
        assert_close(
            &inter[0],
            &Tensor::from_f32(vec![1, 1, 1, 6], want.to_vec()),
            1e-6,
        );
    }

    #[test]
    fn half_precision_computes_in_f32_and_passes_through_exactly() {
        let mut rng = Lcg::new(52);
        let x = rng.tensor(&[1, 2, 3, 8], 2.0).cast(DType::F16);
        let (c, s) = tables(3, 4, false, 0);
        let (c, s) = (c.cast(DType::F16), s.cast(DType::F16));
        let r = eval_checked(&Rope::new(4), &[&x, &c, &s]);
        assert_eq!(r[0].dtype(), DType::F16);
        let f = |t: &Tensor| t.cast(DType::F32);
        let want = decomposed(&Rope::new(4), &f(&x), &f(&c), &f(&s)).cast(DType::F16);
        assert_close(&r[0], &want, 1e-3);
        let (xv, rv) = (x.to_f32_vec(), r[0].to_f32_vec());
        for row in 0..6 {
            assert_eq!(xv[row * 8 + 4..row * 8 + 8], rv[row * 8 + 4..row * 8 + 8]);
        }
    }

    #[test]
    fn infer_symbolic_layouts() {
        let op = Rope::new(64);
        let x = fact(DType::F32, vec![sym("b"), d(8), sym("seq"), d(96)]);
        for dims in [
            vec![sym("seq"), d(64)],
            vec![sym("b"), sym("seq"), d(64)],
            vec![d(1), sym("seq"), d(64)],
            vec![sym("b"), d(1), sym("seq"), d(64)],
            vec![d(1), d(8), sym("seq"), d(64)],
        ] {
            let t = fact(DType::F32, dims.clone());
            let r = op
                .infer(&[&x, &t, &t])
                .unwrap_or_else(|e| panic!("{dims:?}: {e}"));
            assert_eq!(r[0].ty.to_string(), "f32[b, 8, seq, 96]");
        }
    }

    #[test]
    fn infer_rejects() {
        let op = Rope::new(64);
        let x = fact(DType::F32, vec![sym("b"), d(8), sym("seq"), d(96)]);
        let t = fact(DType::F32, vec![sym("seq"), d(64)]);
        let err = |op: &Rope, inputs: &[&Fact]| op.infer(inputs).unwrap_err().0;
        for dims in [
            vec![sym("seq"), d(32)],                 // not rotary_dim
            vec![sym("past"), d(64)],                // other positions
            vec![d(2), sym("seq"), d(64)],           // batch neither b nor 1
            vec![sym("b"), d(4), sym("seq"), d(64)], // heads neither h nor 1
            vec![d(64)],                             // rank 1
            vec![d(1), d(1), d(1), sym("seq"), d(64)],
        ] {
            let bad = fact(DType::F32, dims.clone());
            assert!(err(&op, &[&x, &bad, &t]).contains("cos"), "{dims:?}");
            assert!(err(&op, &[&x, &t, &bad]).contains("sin"), "{dims:?}");
        }
        let t3 = fact(DType::F32, vec![d(1), sym("seq"), d(64)]);
        assert!(err(&op, &[&x, &t, &t3]).contains("differ"));
        let t16 = fact(DType::F16, vec![sym("seq"), d(64)]);
        assert!(err(&op, &[&x, &t16, &t16]).contains("dtype"));
        let x3 = fact(DType::F32, vec![d(8), sym("seq"), d(96)]);
        assert!(err(&op, &[&x3, &t, &t]).contains("rank 4"));
        let xs = fact(DType::F32, vec![d(1), d(8), sym("seq"), sym("hd")]);
        assert!(err(&op, &[&xs, &t, &t]).contains("static"));
        for r in [0, 7, 128, -2] {
            let bad = Rope::new(r);
            assert!(err(&bad, &[&x, &t, &t]).contains("rotary_dim"), "{r}");
            let a = Attrs::from_pairs(bad.attrs().into_iter().map(|(k, v)| (k.to_string(), v)));
            if r != 128 {
                assert!(Op::build("rope", a, &[]).is_err());
            }
        }
        assert!(err(&op, &[&x, &t]).contains("3 operands"));
        let xt = Tensor::from_f32(vec![1, 1, 2, 4], vec![1.0; 8]);
        let ct = Tensor::from_f32(vec![3, 4], vec![1.0; 12]);
        assert!(eval(&Rope::new(4), &[&xt, &ct, &ct]).is_err());
        assert!(eval(&Rope::new(6), &[&xt, &ct, &ct]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Rope::new(64), &[]);
        let op = Rope {
            rotary_dim: 32,
            interleaved: true,
        };
        assert_round_trip(op, &[]);
        assert_eq!(Rope::new(64).attrs(), vec![("rotary_dim", Attr::Int(64))]);
        assert!(Op::build("rope", Attrs::new(), &[]).is_err());
    }

    #[test]
    fn text_form() {
        let src = "module @m {
  graph @g(%x: f32[1, 8, seq, 96], %cos: f32[1, seq, 32], %sin: f32[1, seq, 32]) -> (f32[1, 8, seq, 96]) {
    %y = rope %x, %cos, %sin {rotary_dim = 32, interleaved = true} : f32[1, 8, seq, 96]
    return %y
  }
}
";
        let m = crate::text::parse_module(src).unwrap();
        crate::verify_module(&m).unwrap();
        assert_eq!(crate::text::print_module(&m), src);
    }
}
