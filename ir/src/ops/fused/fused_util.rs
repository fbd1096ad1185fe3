//! Helpers shared by the fused transformer ops (`rms_norm`, `add_rms_norm`,
//! `add_layer_norm`, `gelu`, `swiglu`/`geglu`, `attention`, `rope`), which
//! the fusion pass introduces in place of their decomposed graphs.
//!
//! Their evaluation validates the concrete operands by running the op's own
//! inference on the operands' (static) types first, so shape and dtype
//! errors are reported the same way at compile time and at evaluation, and
//! the reference loops can index without further checks.

use crate::ops::{bail, static_dims, Fact, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

/// The static type of a concrete tensor.
pub fn tensor_type(t: &Tensor) -> TensorType {
    TensorType::new(t.dtype(), static_dims(t.shape()))
}

/// Runs `op`'s inference on the types of concrete operands, so evaluation
/// rejects exactly what inference rejects.
pub fn infer_on_tensors(op: &impl OpDef, inputs: &[&Tensor]) -> Result<Vec<Fact>, OpError> {
    let facts: Vec<Fact> = inputs.iter().map(|t| Fact::new(tensor_type(t))).collect();
    let refs: Vec<&Fact> = facts.iter().collect();
    op.infer(&refs)
}

/// Checks that `x` is a float tensor of rank >= 1 (a normalised or
/// projected operand whose last axis is the hidden axis).
pub fn check_hidden_operand(op: &str, x: &TensorType) -> Result<(), OpError> {
    if !x.dtype.is_float() {
        bail!("`{op}` needs a float operand, got {x}");
    }
    if x.rank() == 0 {
        bail!("`{op}` needs an operand of rank >= 1, got {x}");
    }
    Ok(())
}

/// Checks a per-channel parameter (`weight`, `bias`): `x`'s dtype and shape
/// `[hidden]`, `hidden` being `x`'s last dim.
pub fn check_channel_param(
    op: &str,
    what: &str,
    x: &TensorType,
    p: &TensorType,
) -> Result<(), OpError> {
    if p.dtype != x.dtype {
        bail!("`{op}` {what} must have the dtype of x: {p} vs {x}");
    }
    let hidden = x.shape.dims().last();
    if p.rank() != 1 || p.shape.dims().last() != hidden {
        bail!("`{op}` {what} must have shape [hidden] = [last dim of x]: {p} vs x {x}");
    }
    Ok(())
}

/// The numerically stable logistic function, as `sigmoid` evaluates it.
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Test helpers: a seeded generator and comparisons against the
    //! decomposed computation.

    use crate::ops::binary::{Binary, BinaryKind};
    use crate::ops::unary::{Unary, UnaryKind};
    use crate::ops::{EvalCtx, OpDef};
    use crate::tensor::Tensor;

    /// A 64-bit linear congruential generator (Knuth's MMIX constants).
    pub struct Lcg(u64);

    impl Lcg {
        pub fn new(seed: u64) -> Lcg {
            Lcg(seed)
        }

        /// Uniform in `[-1, 1)`.
        pub fn next_f32(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }

        /// An `f32` tensor of uniform values in `[-scale, scale)`.
        pub fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
            let n = shape.iter().product();
            let v = (0..n).map(|_| self.next_f32() * scale).collect();
            Tensor::from_f32(shape.to_vec(), v)
        }
    }

    /// The first result of evaluating `op` (panics on error: tests only).
    pub fn ev(op: impl OpDef, inputs: &[&Tensor]) -> Tensor {
        op.eval(inputs, &EvalCtx::default())
            .unwrap_or_else(|e| panic!("{}: {e}", op.mnemonic()))
            .remove(0)
    }

    pub fn bin(kind: BinaryKind, a: &Tensor, b: &Tensor) -> Tensor {
        ev(Binary::new(kind), &[a, b])
    }

    pub fn un(kind: UnaryKind, a: &Tensor) -> Tensor {
        ev(Unary::new(kind), &[a])
    }

    pub fn scalar(v: f32) -> Tensor {
        Tensor::scalar_f32(v)
    }

    /// Same shape and dtype, and every element within `rtol` relative
    /// (plus a tiny absolute slack for values near zero).
    pub fn assert_close(got: &Tensor, want: &Tensor, rtol: f32) {
        assert_eq!(got.shape(), want.shape(), "shape");
        assert_eq!(got.dtype(), want.dtype(), "dtype");
        let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            let ok = (a - b).abs() <= rtol * a.abs().max(b.abs()) + rtol * 0.1
                || (a.is_nan() && b.is_nan())
                || a == b;
            assert!(ok, "element {i}: {a} vs {b} (rtol {rtol})");
        }
    }
}
