//! `layer_norm`: `%y = layer_norm %x, %scale[, %bias] {axis = -1, eps = 1e-5}`
//! normalises `x` over the axes `axis..rank` and applies `scale` and the
//! optional `bias` (ONNX `LayerNormalization`, opset 17).
//!
//! `y = (x - mean) * (1 / sqrt(var + eps)) * scale + bias`, with the mean
//! and (biased) variance taken over axes `axis..rank`, computed in `f32`
//! whatever the float dtype (ONNX `stash_type = 1`, the default). `scale`
//! and `bias` share `x`'s dtype and broadcast to `x`'s shape
//! (unidirectionally, as the ONNX function body's `Mul`/`Add` require).
//!
//! Differences from ONNX: only the first result `Y` is produced; the
//! optional `Mean` and `InvStdDev` results (used for training) are not, and
//! `stash_type` is not an attribute (always `f32`).

use crate::attr::{Attr, Attrs};
use crate::ops::broadcast::{broadcast_shapes, source_indices};
use crate::ops::constant::f32_as_f64;
use crate::ops::{bail, check_arity, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm {
    pub axis: i64,
    pub eps: f32,
}

impl Default for LayerNorm {
    fn default() -> LayerNorm {
        LayerNorm {
            axis: -1,
            eps: 1e-5,
        }
    }
}

impl OpDef for LayerNorm {
    fn mnemonic(&self) -> &'static str {
        "layer_norm"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![
            ("axis", Attr::Int(self.axis)),
            ("eps", Attr::Float(f32_as_f64(self.eps))),
        ]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        check_arity("layer_norm", inputs.len(), 2, 3)?;
        let x = inputs[0];
        if !x.ty.dtype.is_float() {
            bail!("`layer_norm` needs a float operand, got {}", x.ty);
        }
        norm_axis(self.axis, x.ty.rank())
            .map_err(|e| OpError(format!("`layer_norm` on {}: {e}", x.ty)))?;
        for (what, p) in ["scale", "bias"].iter().zip(&inputs[1..]) {
            if p.ty.dtype != x.ty.dtype {
                bail!(
                    "`layer_norm` {what} must have the dtype of x: {} vs {}",
                    p.ty,
                    x.ty
                );
            }
            let b = broadcast_shapes(&x.ty.shape, &p.ty.shape);
            if b.as_ref() != Ok(&x.ty.shape) {
                bail!(
                    "`layer_norm` {what} {} does not broadcast to x {}",
                    p.ty,
                    x.ty
                );
            }
        }
        Ok(vec![Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        check_arity("layer_norm", inputs.len(), 2, 3)?;
        let x = inputs[0];
        if !x.dtype().is_float() {
            bail!("`layer_norm` needs a float operand, got {}", x.dtype());
        }
        let axis = norm_axis(self.axis, x.rank())?;
        let shape = x.shape();
        let xs = Shape(crate::ops::static_dims(shape));
        let mut params = Vec::new();
        for (what, p) in ["scale", "bias"].iter().zip(&inputs[1..]) {
            let ps = Shape(crate::ops::static_dims(p.shape()));
            if broadcast_shapes(&xs, &ps).as_ref() != Ok(&xs) {
                bail!(
                    "`layer_norm` {what} of shape {:?} does not broadcast to x of shape {shape:?}",
                    p.shape()
                );
            }
            params.push((p.to_f32_vec(), source_indices(p.shape(), shape)));
        }
        let n: usize = shape[axis..].iter().product();
        let mut v = x.to_f32_vec();
        for row in v.chunks_mut(n.max(1)) {
            let mean = row.iter().sum::<f32>() / n as f32;
            let var = row.iter().map(|&a| (a - mean) * (a - mean)).sum::<f32>() / n as f32;
            let inv = 1.0 / (var + self.eps).sqrt();
            for a in row.iter_mut() {
                *a = (*a - mean) * inv;
            }
        }
        let (scale, si) = &params[0];
        for (k, a) in v.iter_mut().enumerate() {
            *a *= scale[si[k]];
            if let Some((bias, bi)) = params.get(1) {
                *a += bias[bi[k]];
            }
        }
        Ok(vec![Tensor::from_f32(shape.to_vec(), v).cast(x.dtype())])
    }
}

impl OpBuild for LayerNorm {
    const MNEMONICS: &'static [&'static str] = &["layer_norm"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(LayerNorm {
            axis: attrs.int_or("axis", -1)?,
            eps: attrs.float_or("eps", 1e-5)? as f32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::test_util::*;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn normalises_last_axis() {
        let x = Tensor::from_f32(vec![2, 3], vec![1.0, 2.0, 3.0, 0.0, 0.0, 6.0]);
        let s = Tensor::from_f32(vec![3], vec![1.0, 2.0, 1.0]);
        let b = Tensor::from_f32(vec![3], vec![0.0, 0.0, 1.0]);
        let r = eval_checked(&LayerNorm::default(), &[&x, &s, &b]);
        // Row 1: mean 2, var 2/3; row 2: mean 2, var 8.
        let k1 = 1.0 / (2.0f32 / 3.0 + 1e-5).sqrt();
        let k2 = 1.0 / (8.0f32 + 1e-5).sqrt();
        close(
            r[0].as_f32().unwrap(),
            &[-k1, 0.0, k1 + 1.0, -2.0 * k2, -4.0 * k2, 4.0 * k2 + 1.0],
        );
    }

    #[test]
    fn normalises_from_axis_without_bias() {
        // ONNX test `layer_norm_2d_axis0` shape: mean over both axes.
        let x = Tensor::from_f32(vec![2, 2], vec![1.0, 3.0, 5.0, 7.0]);
        let s = Tensor::from_f32(vec![2, 2], vec![1.0; 4]);
        let op = LayerNorm { axis: 0, eps: 0.0 };
        let r = eval_checked(&op, &[&x, &s]);
        let k = 1.0 / 5.0f32.sqrt();
        close(r[0].as_f32().unwrap(), &[-3.0 * k, -k, k, 3.0 * k]);
    }

    #[test]
    fn infer_checks() {
        let x = fact(DType::F16, vec![d(1), sym("seq"), d(64)]);
        let s = fact(DType::F16, vec![d(64)]);
        let r = LayerNorm::default().infer(&[&x, &s, &s]).unwrap();
        assert_eq!(r[0].ty.to_string(), "f16[1, seq, 64]");
        let s32 = fact(DType::F32, vec![d(64)]);
        let e = LayerNorm::default().infer(&[&x, &s32]).unwrap_err();
        assert!(e.0.contains("f32[64] vs f16[1, seq, 64]"), "{e}");
        let wide = fact(DType::F16, vec![d(2), d(1), d(64)]);
        let e = LayerNorm::default().infer(&[&x, &s, &wide]).unwrap_err();
        assert!(e.0.contains("bias"), "{e}");
        assert!(LayerNorm::default().infer(&[&x]).is_err());
        let op = LayerNorm { axis: 3, eps: 1e-5 };
        assert!(op.infer(&[&x, &s]).is_err());
    }

    #[test]
    fn round_trip() {
        assert_round_trip(LayerNorm::default(), &[]);
        assert_round_trip(LayerNorm { axis: 1, eps: 1e-6 }, &[]);
    }
}
