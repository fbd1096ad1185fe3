//! `qswiglu`: the fused gated MLP `swiglu` by quantized weights, each
//! product a [`qmatmul`](crate::ops::qmatmul) (`quantize` introduces it in place
//! of `swiglu %x, @w_gate, @w_up` by module weights):
//!
//! ```text
//! %m = qswiglu %x, @wg.q, @wg.scale, @wu.q, @wu.scale {bits = 4, group = 128} : f32[1, seq, 176]
//! %m = qswiglu %x, @wgu.q, @wgu.scale {bits = 8, group = 64} : f32[1, seq, 176]
//! ```
//!
//! Operands: `x: f32[..., M, K]` (rank >= 2) and either two quantized
//! weights, gate then up, each a `q: [K, N]` and its `scale: f32[K/G, N]`
//! exactly as `qmatmul` takes them (same `bits` and `group` for both, equal
//! shapes), or one fused gate/up weight `q: [K, 2·N]`, `scale: f32[K/G,
//! 2·N]` whose first `N` columns are the gate and last `N` the up
//! projection (Phi-3's `gate_up_proj`; its column count must be even).
//! The dtype rules (`i8` for `bits = 8`, `i4` for `bits = 4`), the static
//! `K` and the group limits are `qmatmul`'s. The result is
//! `f32[..., M, N]` (for half-precision `x`, of `x`'s dtype: computed as
//! below on `x` converted to `f32`, rounded once, as `qmatmul` does).
//!
//! Semantics, exactly (a kernel must reproduce them bit for bit):
//!
//! 1. `g[m,n]` is what `qmatmul %x, gate.q, gate.scale` computes and
//!    `u[m,n]` what `qmatmul %x, up.q, up.scale` computes (for the fused
//!    weight: the `qmatmul` by all `2·N` columns, gate = its first `N`
//!    columns, up = its last `N`; a column of `qmatmul` depends only on
//!    its own weight column and scales). Both use the same per-token
//!    quantization of `x` (steps 1–4 of `qmatmul` depend on `x` alone);
//! 2. `out[m,n] = (g · sigmoid(g)) · u` in `f32`, in that order (two
//!    rounded products), `sigmoid` being
//!    [`fused_util::sigmoid`](crate::ops::fused_util::sigmoid) (the `sigmoid`
//!    op's function).
//!
//! So `qswiglu` equals, bit for bit, the graph `quantize` builds with
//! `glus=split`: two `qmatmul`s (or one and a `split`), `sigmoid`, `mul`,
//! `mul`.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::fused_util::{infer_on_tensors, sigmoid};
use crate::ops::qmatmul::{
    activations_attr, layout_attr, result_type, weight_values, QActivations, QColumns, QMatMul,
};
use crate::ops::quantized::layout::QLayout;
use crate::ops::{bail, check_arity, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QSwiGlu {
    /// Weight bits: 8 (`i8` weights) or 4 (`i4` weights).
    pub bits: u8,
    /// Rows of `K` sharing one scale per output column.
    pub group: i64,
    /// The storage order of the weights (`qmatmul`'s `layout`).
    pub layout: QLayout,
    /// How the activations are multiplied (`qmatmul`'s `activations`).
    pub activations: QActivations,
}

impl QSwiGlu {
    /// Checks `bits` (4 or 8) and `group` as [`QMatMul::new`] does.
    pub fn new(bits: i64, group: i64) -> Result<QSwiGlu, OpError> {
        let q = QMatMul::new(bits, group)
            .map_err(|e| OpError(e.0.replace("`qmatmul`", "`qswiglu`")))?;
        Ok(QSwiGlu::from(q))
    }

    /// The `qmatmul` computing each of the two products.
    pub fn qmatmul(&self) -> QMatMul {
        QMatMul {
            bits: self.bits,
            group: self.group,
            layout: self.layout,
            activations: self.activations,
        }
    }

    /// The weight dtype for the op's `bits`.
    pub fn weight_dtype(&self) -> DType {
        self.qmatmul().weight_dtype()
    }

    /// The gated MLP's `(g, u)` → `(g · sigmoid(g)) · u`.
    pub fn gate(g: f32, u: f32) -> f32 {
        (g * sigmoid(g)) * u
    }
}

impl From<QMatMul> for QSwiGlu {
    fn from(q: QMatMul) -> QSwiGlu {
        QSwiGlu {
            bits: q.bits,
            group: q.group,
            layout: q.layout,
            activations: q.activations,
        }
    }
}

impl OpDef for QSwiGlu {
    fn mnemonic(&self) -> &'static str {
        "qswiglu"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        self.qmatmul().attrs()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let name = "qswiglu";
        check_arity(name, inputs.len(), 3, 5)?;
        let mm = self.qmatmul();
        let x = &inputs[0].ty;
        let n = match inputs[1..] {
            [q, s] => {
                let both = mm.check_operands(name, x, &q.ty, &s.ty)?;
                match both.div_exact(&Dim::fixed(2)) {
                    Some(half) => half,
                    None => bail!(
                        "`{name}` fused gate/up weight {} needs an even number of columns",
                        q.ty
                    ),
                }
            }
            [gq, gs, uq, us] => {
                let n = mm.check_operands(name, x, &gq.ty, &gs.ty)?;
                mm.check_operands(name, x, &uq.ty, &us.ty)?;
                if gq.ty.shape != uq.ty.shape {
                    bail!(
                        "`{name}` gate and up weights differ in shape: {} vs {}",
                        gq.ty,
                        uq.ty
                    );
                }
                n
            }
            _ => bail!(
                "`{name}` takes 3 (fused gate/up) or 5 (gate, up) operands, got {}",
                inputs.len()
            ),
        };
        Ok(vec![Fact::new(result_type(x, n))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let out_ty = infer_on_tensors(self, inputs)?.remove(0).ty;
        let Some(out_shape) = out_ty.shape.as_fixed() else {
            bail!("`qswiglu` result shape {} is not static", out_ty.shape);
        };
        let n = *out_shape.last().expect("rank >= 2");
        let qs: Vec<Vec<i32>> = inputs[1..]
            .iter()
            .step_by(2)
            .map(|q| weight_values(q, self.layout))
            .collect();
        let ss: Vec<Vec<f32>> = inputs[2..]
            .iter()
            .step_by(2)
            .map(|s| s.to_f32_vec())
            .collect();
        let cols = |i: usize, stride: usize, col0: usize| QColumns {
            q: &qs[i],
            scale: &ss[i],
            stride,
            col0,
            n,
        };
        let ws = match qs.len() {
            1 => [cols(0, 2 * n, 0), cols(0, 2 * n, n)],
            _ => [cols(0, n, 0), cols(1, n, 0)],
        };
        let gu = self.qmatmul().product(inputs[0], &ws);
        let y = gu[0]
            .iter()
            .zip(&gu[1])
            .map(|(&g, &u)| QSwiGlu::gate(g, u))
            .collect();
        Ok(vec![Tensor::from_f32(out_shape, y).cast(out_ty.dtype)])
    }
}

impl OpBuild for QSwiGlu {
    const MNEMONICS: &'static [&'static str] = &["qswiglu"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        let bits = attrs.int("bits")?;
        let group = attrs.int("group")?;
        let layout = layout_attr("qswiglu", attrs)?;
        let activations = activations_attr("qswiglu", attrs)?;
        Ok(QSwiGlu {
            layout,
            activations,
            ..QSwiGlu::new(bits, group)?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::binary::BinaryKind::Mul;
    use crate::ops::fused_util::testing::*;
    use crate::ops::split::Split;
    use crate::ops::test_util::{assert_round_trip, d, eval, eval_checked, fact, sym};
    use crate::ops::unary::UnaryKind::Sigmoid;
    use crate::ops::Op;

    fn weights(rng: &mut Lcg, k: usize, n: usize, bits: u8) -> Tensor {
        let (lo, hi, dt) = if bits == 4 {
            (-8.0, 7.0, DType::I4)
        } else {
            (-128.0, 127.0, DType::I8)
        };
        let v: Vec<f64> = (0..k * n)
            .map(|_| (lo + ((rng.next_f32() as f64 + 1.0) * 0.5 * (hi - lo + 1.0)).floor()).min(hi))
            .collect();
        Tensor::from_f64(dt, vec![k, n], &v).unwrap()
    }

    fn activations(rng: &mut Lcg, shape: Vec<usize>) -> Tensor {
        let n = shape.iter().product();
        let mut v: Vec<f32> = (0..n).map(|_| rng.next_f32() * 3.0).collect();
        // A row of zeros and a NaN: the quantization's special cases.
        let k = *shape.last().unwrap();
        v[..k].fill(0.0);
        if n > 2 * k {
            v[k + 1] = f32::NAN;
        }
        Tensor::from_f32(shape, v)
    }

    /// The composition: two `qmatmul`s, then `(g * sigmoid(g)) * u` with
    /// the `sigmoid` and `mul` ops.
    fn composed(op: QSwiGlu, x: &Tensor, ws: &[&Tensor]) -> Tensor {
        let mm = op.qmatmul();
        let (g, u) = match ws {
            [gq, gs, uq, us] => (ev(mm, &[x, gq, gs]), ev(mm, &[x, uq, us])),
            [q, s] => {
                let both = ev(mm, &[x, q, s]);
                let n = both.shape()[both.rank() - 1] / 2;
                let split = Split {
                    axis: -1,
                    sizes: vec![Dim::fixed(n as i64), Dim::fixed(n as i64)],
                };
                let mut r = Op::Split(split)
                    .eval(&[&both], &EvalCtx::default())
                    .unwrap();
                let u = r.remove(1);
                (r.remove(0), u)
            }
            _ => unreachable!(),
        };
        bin(Mul, &bin(Mul, &g, &un(Sigmoid, &g)), &u)
    }

    fn bits_of(t: &Tensor) -> Vec<u32> {
        t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn equals_two_qmatmuls_and_the_gate_bit_for_bit() {
        let mut rng = Lcg::new(11);
        for (bits, group, k, n, shape) in [
            (8u8, 4usize, 8usize, 5usize, vec![3usize, 8usize]),
            (4, 2, 6, 3, vec![2, 2, 6]),
            (4, 6, 6, 4, vec![1, 3, 6]),
            (8, 16, 16, 16, vec![4, 16]),
        ] {
            let op = QSwiGlu::new(bits as i64, group as i64).unwrap();
            let x = activations(&mut rng, shape);
            let (gq, uq) = (weights(&mut rng, k, n, bits), weights(&mut rng, k, n, bits));
            let gs = rng.tensor(&[k / group, n], 0.1);
            let us = rng.tensor(&[k / group, n], 0.1);
            let got = eval_checked(&op, &[&x, &gq, &gs, &uq, &us]).remove(0);
            let want = composed(op, &x, &[&gq, &gs, &uq, &us]);
            assert_eq!(got.shape(), want.shape());
            assert_eq!(bits_of(&got), bits_of(&want));
            // The fused weight `[K, 2N]`.
            let q = weights(&mut rng, k, 2 * n, bits);
            let s = rng.tensor(&[k / group, 2 * n], 0.1);
            let got = eval_checked(&op, &[&x, &q, &s]).remove(0);
            let want = composed(op, &x, &[&q, &s]);
            assert_eq!(got.shape(), want.shape());
            assert_eq!(bits_of(&got), bits_of(&want));
        }
    }

    #[test]
    fn symbolic_inference_and_round_trip() {
        let op = QSwiGlu::new(4, 32).unwrap();
        let x = fact(DType::F32, vec![d(1), sym("seq"), d(64)]);
        let q = fact(DType::I4, vec![d(64), d(176)]);
        let s = fact(DType::F32, vec![d(2), d(176)]);
        let out = op.infer(&[&x, &q, &s, &q, &s]).unwrap();
        assert_eq!(out[0].ty.to_string(), "f32[1, seq, 176]");
        let q2 = fact(DType::I4, vec![d(64), d(352)]);
        let s2 = fact(DType::F32, vec![d(2), d(352)]);
        let out = op.infer(&[&x, &q2, &s2]).unwrap();
        assert_eq!(out[0].ty.to_string(), "f32[1, seq, 176]");
        assert_round_trip(op, &[]);
    }

    #[test]
    fn rejects_bad_operands_and_attributes() {
        let x = fact(DType::F32, vec![d(3), d(64)]);
        let q8 = fact(DType::I8, vec![d(64), d(8)]);
        let s1 = fact(DType::F32, vec![d(1), d(8)]);
        let err = |op: QSwiGlu, fs: &[&Fact]| op.infer(fs).unwrap_err().to_string();
        let op8 = QSwiGlu::new(8, 64).unwrap();
        let e = err(QSwiGlu::new(8, 48).unwrap(), &[&x, &q8, &s1]);
        assert!(
            e.contains("`qswiglu` K = 64 is not a multiple of group"),
            "{e}"
        );
        let e = err(QSwiGlu::new(4, 64).unwrap(), &[&x, &q8, &s1, &q8, &s1]);
        assert!(e.contains("`qswiglu` with bits = 4 needs i4[K, N]"), "{e}");
        let s2 = fact(DType::F32, vec![d(2), d(8)]);
        assert!(err(op8, &[&x, &q8, &s2]).contains("scales must be f32[1, 8]"));
        assert!(err(op8, &[&x, &q8, &s1, &q8, &s2]).contains("scales must be f32[1, 8]"));
        let q7 = fact(DType::I8, vec![d(64), d(7)]);
        let s7 = fact(DType::F32, vec![d(1), d(7)]);
        assert!(err(op8, &[&x, &q7, &s7]).contains("even number of columns"));
        let e = err(op8, &[&x, &q8, &s1, &q7, &s7]);
        assert!(e.contains("gate and up weights differ in shape"), "{e}");
        let x32 = fact(DType::F32, vec![d(3), d(32)]);
        assert!(err(op8, &[&x32, &q8, &s1]).contains("contraction dims differ"));
        let xv = fact(DType::F32, vec![d(64)]);
        assert!(err(op8, &[&xv, &q8, &s1]).contains("rank >= 2"));
        assert!(err(op8, &[&x, &q8]).contains("takes 3 to 5 operands"));
        assert!(err(op8, &[&x, &q8, &s1, &q8]).contains("takes 3 (fused gate/up) or 5"));
        let e = QSwiGlu::new(3, 64).unwrap_err().to_string();
        assert!(e.contains("`qswiglu` bits must be 4 or 8"), "{e}");
        assert!(QSwiGlu::new(8, 0).is_err());
        // Evaluation rejects what inference rejects, without panicking.
        let xt = Tensor::from_f32(vec![1, 2], vec![1.0; 2]);
        let qt = Tensor::from_i64(vec![2, 3], vec![1; 6]).cast(DType::I8);
        let st = Tensor::from_f32(vec![1, 3], vec![1.0; 3]);
        assert!(eval(&op8, &[&xt, &qt, &st]).is_err());
    }
}
