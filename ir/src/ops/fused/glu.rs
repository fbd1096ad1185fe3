//! `swiglu` and `geglu`: the gated MLP up-projection of Llama/Qwen/Mistral
//! (SwiGLU) and Gemma (GeGLU), a fused op:
//!
//! ```text
//! %m = swiglu %x, %w_gate, %w_up : f32[1, seq, 172]
//! %m = swiglu %x, %w_gate_up : f32[1, seq, 172]
//! %m = geglu %x, %w_gate, %w_up {approximate = "tanh"} : f32[1, seq, 172]
//! ```
//!
//! `m = act(x @ w_gate) · (x @ w_up)`, with `act` = SiLU,
//! `g · sigmoid(g)`, for `swiglu` and GELU for `geglu` (the `approximate`
//! attribute as in [`gelu`](crate::ops::gelu): `"none"`, the default and not
//! printed, or `"tanh"`; `swiglu` takes no attribute). This is HF's
//! `act_fn(gate_proj(x)) * up_proj(x)` with the linear layers exported as
//! `MatMul` by the transposed weight.
//!
//! With two operands, `%w_gate_up` is `[hidden, 2·inter]`: `w_gate` is its
//! first `inter` columns and `w_up` the last `inter` (Phi-3's fused
//! `gate_up_proj`, `gate, up = chunk(2, dim=-1)` of `x @ w_gate_up`).
//!
//! Shapes: `x` is a float tensor `[..., hidden]` of rank >= 1 (leading dims
//! carry through, as `matmul` by a rank-2 operand does; a rank-1 `x` gives
//! `[inter]`); `w_gate` and `w_up` are rank 2, `[hidden, inter]`, equal
//! shapes, `x`'s dtype. The result is `[..., inter]`, `x`'s dtype. Dims may
//! be symbolic; a fused `[hidden, n]` weight needs `n` provably even (`2·k`).
//!
//! Computed in `f32` (the products accumulate in `f32` in `k` order, as
//! `matmul` does), rounded once to `x`'s dtype at the end.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::ops::fused_util::{check_hidden_operand, infer_on_tensors, sigmoid};
use crate::ops::gelu::GeluApprox;
use crate::ops::{bail, check_arity, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

/// The gate activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GluKind {
    /// `swiglu`: SiLU, `g · sigmoid(g)`.
    SwiGlu,
    /// `geglu`: GELU, exact or tanh-approximated.
    GeGlu(GeluApprox),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Glu {
    pub kind: GluKind,
}

impl Glu {
    pub fn swiglu() -> Glu {
        Glu {
            kind: GluKind::SwiGlu,
        }
    }

    pub fn geglu(approximate: GeluApprox) -> Glu {
        Glu {
            kind: GluKind::GeGlu(approximate),
        }
    }

    fn act(&self, g: f32) -> f32 {
        match self.kind {
            GluKind::SwiGlu => g * sigmoid(g),
            GluKind::GeGlu(a) => a.apply(g),
        }
    }

    /// The `inter` dim from the weight operands.
    fn inter(&self, x: &TensorType, ws: &[&TensorType]) -> Result<Dim, OpError> {
        let name = self.mnemonic();
        let hidden = x.shape.dims().last();
        for w in ws {
            if w.dtype != x.dtype {
                bail!("`{name}` weights must have the dtype of x: {w} vs {x}");
            }
            if w.rank() != 2 || Some(&w.shape.0[0]) != hidden {
                bail!("`{name}` weights must be [hidden, n] with hidden the last dim of x: {w} vs x {x}");
            }
        }
        match ws {
            [g, u] if g.shape != u.shape => {
                bail!("`{name}` gate and up weights differ in shape: {g} vs {u}")
            }
            [g, _] => Ok(g.shape.0[1].clone()),
            [gu] => match gu.shape.0[1].div_exact(&Dim::fixed(2)) {
                Some(half) => Ok(half),
                None => bail!("`{name}` fused gate/up weight {gu} needs an even number of columns"),
            },
            _ => bail!("`{name}` takes 2 or 3 operands"),
        }
    }
}

impl OpDef for Glu {
    fn mnemonic(&self) -> &'static str {
        match self.kind {
            GluKind::SwiGlu => "swiglu",
            GluKind::GeGlu(_) => "geglu",
        }
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        match self.kind {
            GluKind::SwiGlu => Vec::new(),
            GluKind::GeGlu(a) => a.attr().into_iter().collect(),
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let name = self.mnemonic();
        check_arity(name, inputs.len(), 2, 3)?;
        let x = &inputs[0].ty;
        check_hidden_operand(name, x)?;
        let ws: Vec<&TensorType> = inputs[1..].iter().map(|f| &f.ty).collect();
        let inter = self.inter(x, &ws)?;
        let mut dims = x.shape.0[..x.rank() - 1].to_vec();
        dims.push(inter);
        Ok(vec![Fact::new(TensorType::new(x.dtype, Shape(dims)))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        infer_on_tensors(self, inputs)?;
        let x = inputs[0];
        let hidden = x.shape()[x.rank() - 1];
        let rows: usize = x.shape()[..x.rank() - 1].iter().product();
        let xv = x.to_f32_vec();
        // (data, row stride, first column) of the gate and up matrices.
        let (gate, up, inter) = match inputs[1..] {
            [g, u] => {
                let n = g.shape()[1];
                ((g.to_f32_vec(), n, 0), (u.to_f32_vec(), n, 0), n)
            }
            [gu] => {
                let n = gu.shape()[1];
                let v = gu.to_f32_vec();
                ((v.clone(), n, 0), (v, n, n / 2), n / 2)
            }
            _ => bail!("`{}` takes 2 or 3 operands", self.mnemonic()),
        };
        let dot = |row: &[f32], (w, stride, col0): &(Vec<f32>, usize, usize), j: usize| {
            let mut acc = 0f32;
            for (k, a) in row.iter().enumerate() {
                acc += a * w[k * stride + col0 + j];
            }
            acc
        };
        let mut out = Vec::with_capacity(rows * inter);
        for r in 0..rows {
            let row = &xv[r * hidden..(r + 1) * hidden];
            for j in 0..inter {
                out.push(self.act(dot(row, &gate, j)) * dot(row, &up, j));
            }
        }
        let mut shape = x.shape()[..x.rank() - 1].to_vec();
        shape.push(inter);
        Ok(vec![Tensor::from_f32(shape, out).cast(x.dtype())])
    }
}

impl OpBuild for Glu {
    const MNEMONICS: &'static [&'static str] = &["swiglu", "geglu"];

    fn build(mnemonic: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        match mnemonic {
            "swiglu" => Ok(Glu::swiglu()),
            "geglu" => Ok(Glu::geglu(GeluApprox::from_attrs("geglu", attrs)?)),
            _ => bail!("unknown gated MLP op `{mnemonic}`"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::binary::BinaryKind::Mul;
    use crate::ops::fused_util::testing::*;
    use crate::ops::gelu::Gelu;
    use crate::ops::matmul::MatMul;
    use crate::ops::split::Split;
    use crate::ops::test_util::*;
    use crate::ops::unary::UnaryKind::Sigmoid;
    use crate::ops::Op;

    /// `act(matmul(x, wg)) * matmul(x, wu)` with the primitive ops.
    fn decomposed(op: &Glu, x: &Tensor, wg: &Tensor, wu: &Tensor) -> Tensor {
        let g = ev(MatMul, &[x, wg]);
        let u = ev(MatMul, &[x, wu]);
        let a = match op.kind {
            GluKind::SwiGlu => bin(Mul, &g, &un(Sigmoid, &g)),
            GluKind::GeGlu(approximate) => ev(Gelu { approximate }, &[&g]),
        };
        bin(Mul, &a, &u)
    }

    fn all_kinds() -> [Glu; 3] {
        [
            Glu::swiglu(),
            Glu::geglu(GeluApprox::None),
            Glu::geglu(GeluApprox::Tanh),
        ]
    }

    #[test]
    fn matches_decomposed_graph() {
        let mut rng = Lcg::new(31);
        let wg = rng.tensor(&[24, 40], 0.5);
        let wu = rng.tensor(&[24, 40], 0.5);
        for shape in [vec![2, 3, 24], vec![5, 24], vec![24]] {
            let x = rng.tensor(&shape, 2.0);
            for op in all_kinds() {
                let r = eval_checked(&op, &[&x, &wg, &wu]);
                assert_close(&r[0], &decomposed(&op, &x, &wg, &wu), 1e-5);
            }
        }
    }

    #[test]
    fn fused_gate_up_weight_splits_columns_in_half() {
        let mut rng = Lcg::new(32);
        let x = rng.tensor(&[1, 6, 16], 2.0);
        let w = rng.tensor(&[16, 2 * 12], 0.5);
        for op in all_kinds() {
            let r = eval_checked(&op, &[&x, &w]);
            assert_eq!(r[0].shape(), &[1, 6, 12]);
            // Phi-3: `gate, up = (x @ w).chunk(2, dim=-1)`.
            let gu = ev(MatMul, &[&x, &w]);
            let split = Split {
                axis: -1,
                sizes: vec![d(12), d(12)],
            };
            let parts = split.eval(&[&gu], &EvalCtx::default()).unwrap();
            let (g, u) = (&parts[0], &parts[1]);
            let a = match op.kind {
                GluKind::SwiGlu => bin(Mul, g, &un(Sigmoid, g)),
                GluKind::GeGlu(approximate) => ev(Gelu { approximate }, &[g]),
            };
            assert_close(&r[0], &bin(Mul, &a, u), 1e-5);
        }
    }

    #[test]
    fn half_precision_computes_in_f32() {
        let mut rng = Lcg::new(33);
        let x = rng.tensor(&[3, 8], 1.0).cast(DType::F16);
        let wg = rng.tensor(&[8, 4], 0.5).cast(DType::F16);
        let wu = rng.tensor(&[8, 4], 0.5).cast(DType::F16);
        let r = eval_checked(&Glu::swiglu(), &[&x, &wg, &wu]);
        assert_eq!(r[0].dtype(), DType::F16);
        let f = |t: &Tensor| t.cast(DType::F32);
        let want = decomposed(&Glu::swiglu(), &f(&x), &f(&wg), &f(&wu));
        assert_close(&r[0], &want.cast(DType::F16), 1e-3);
    }

    #[test]
    fn infer_checks() {
        let op = Glu::swiglu();
        let x = fact(DType::F32, vec![d(1), sym("seq"), d(64)]);
        let w = fact(DType::F32, vec![d(64), d(172)]);
        let r = op.infer(&[&x, &w, &w]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[1, seq, 172]");
        let gu = fact(DType::F32, vec![d(64), d(344)]);
        assert_eq!(op.infer(&[&x, &gu]).unwrap()[0].ty, r[0].ty);
        // Symbolic sizes: `2*inter` halves to `inter`; `n` cannot.
        let xs = fact(DType::F32, vec![sym("seq"), sym("hidden")]);
        let gs = fact(DType::F32, vec![sym("hidden"), &d(2) * &sym("inter")]);
        let r = Glu::geglu(GeluApprox::Tanh).infer(&[&xs, &gs]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f32[seq, inter]");
        let odd = fact(DType::F32, vec![sym("hidden"), sym("n")]);
        let e = op.infer(&[&xs, &odd]).unwrap_err();
        assert!(e.0.contains("even"), "{e}");
        let odd = fact(DType::F32, vec![d(64), d(7)]);
        assert!(op.infer(&[&x, &odd]).is_err());
        // Wrong contraction dim, rank, dtype, mismatched gate/up.
        let bad = fact(DType::F32, vec![d(32), d(172)]);
        let e = op.infer(&[&x, &bad, &bad]).unwrap_err();
        assert!(e.0.contains("[hidden, n]"), "{e}");
        let w3 = fact(DType::F32, vec![d(1), d(64), d(172)]);
        assert!(op.infer(&[&x, &w3, &w3]).is_err());
        let w16 = fact(DType::F16, vec![d(64), d(172)]);
        assert!(op.infer(&[&x, &w16, &w16]).is_err());
        let w2 = fact(DType::F32, vec![d(64), d(100)]);
        let e = op.infer(&[&x, &w, &w2]).unwrap_err();
        assert!(e.0.contains("differ"), "{e}");
        assert!(op.infer(&[&x]).is_err());
        assert!(op.infer(&[&x, &w, &w, &w]).is_err());
        let s = fact(DType::F32, vec![]);
        assert!(op.infer(&[&s, &w, &w]).is_err());
        let xt = Tensor::from_f32(vec![2, 3], vec![1.0; 6]);
        let wt = Tensor::from_f32(vec![3, 3], vec![1.0; 9]);
        assert!(eval(&op, &[&xt, &wt]).is_err());
        assert!(eval(&op, &[&xt]).is_err());
    }

    #[test]
    fn round_trip() {
        for op in all_kinds() {
            assert_round_trip(op, &[]);
        }
        assert!(Glu::swiglu().attrs().is_empty());
        assert!(Glu::geglu(GeluApprox::None).attrs().is_empty());
        // `swiglu` has no `approximate`.
        let a = Attrs::from_pairs([("approximate".into(), Attr::Str("tanh".into()))]);
        assert!(Op::build("swiglu", a.clone(), &[]).is_err());
        assert_eq!(
            Op::build("geglu", a, &[]).unwrap(),
            Op::Glu(Glu::geglu(GeluApprox::Tanh))
        );
    }

    #[test]
    fn text_form() {
        let src = "module @m {
  graph @g(%x: f32[1, seq, 64], %wg: f32[64, 172], %wu: f32[64, 172], %wgu: f32[64, 344]) -> (f32[1, seq, 172], f32[1, seq, 172]) {
    %a = swiglu %x, %wg, %wu : f32[1, seq, 172]
    %b = geglu %x, %wgu {approximate = \"tanh\"} : f32[1, seq, 172]
    return %a, %b
  }
}
";
        let m = crate::text::parse_module(src).unwrap();
        crate::verify_module(&m).unwrap();
        assert_eq!(crate::text::print_module(&m), src);
    }
}
