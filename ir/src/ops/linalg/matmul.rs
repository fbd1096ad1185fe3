//! `matmul`: matrix product with NumPy semantics (ONNX `MatMul`): 1-D operands
//! are promoted and the added axis removed, leading (batch) axes broadcast.
//! Accumulation is in `f32` for float types.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::ops::broadcast::{broadcast_fixed, broadcast_shapes, source_indices};
use crate::ops::{bail, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatMul;

/// Output shape of a matmul of `a` by `b` (symbolic).
pub fn matmul_shape(a: &Shape, b: &Shape) -> Result<Shape, OpError> {
    if a.rank() == 0 || b.rank() == 0 {
        bail!("`matmul` operands must have rank >= 1, got {a} and {b}");
    }
    let one = Dim::fixed(1);
    let mut a2 = a.0.clone();
    let mut b2 = b.0.clone();
    if a.rank() == 1 {
        a2.insert(0, one.clone());
    }
    if b.rank() == 1 {
        b2.push(one);
    }
    let (m, ka) = (&a2[a2.len() - 2], &a2[a2.len() - 1]);
    let (kb, n) = (&b2[b2.len() - 2], &b2[b2.len() - 1]);
    if ka != kb {
        bail!("`matmul` contraction dims differ: {a} x {b} ({ka} vs {kb})");
    }
    let batch = broadcast_shapes(
        &Shape(a2[..a2.len() - 2].to_vec()),
        &Shape(b2[..b2.len() - 2].to_vec()),
    )?;
    let mut out = batch.0;
    if a.rank() > 1 {
        out.push(m.clone());
    }
    if b.rank() > 1 {
        out.push(n.clone());
    }
    Ok(Shape(out))
}

impl OpDef for MatMul {
    fn mnemonic(&self) -> &'static str {
        "matmul"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        Vec::new()
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [a, b] = inputs else {
            bail!("`matmul` takes 2 operands, got {}", inputs.len());
        };
        if a.ty.dtype != b.ty.dtype {
            bail!(
                "`matmul` operands differ in dtype: {} vs {}",
                a.ty.dtype,
                b.ty.dtype
            );
        }
        if !a.ty.dtype.is_float() && !a.ty.dtype.is_int() {
            bail!("`matmul` does not take {}", a.ty.dtype);
        }
        let shape = matmul_shape(&a.ty.shape, &b.ty.shape)?;
        Ok(vec![Fact::new(TensorType::new(a.ty.dtype, shape))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [a, b] = inputs else {
            bail!("`matmul` takes 2 operands");
        };
        let mut ash = a.shape().to_vec();
        let mut bsh = b.shape().to_vec();
        if ash.is_empty() || bsh.is_empty() {
            bail!(
                "`matmul` operands must have rank >= 1, got {:?} and {:?}",
                a.shape(),
                b.shape()
            );
        }
        if ash.len() == 1 {
            ash.insert(0, 1);
        }
        if bsh.len() == 1 {
            bsh.push(1);
        }
        let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
        let n = bsh[bsh.len() - 1];
        if bsh[bsh.len() - 2] != k {
            bail!(
                "`matmul` contraction dims differ: {:?} x {:?}",
                a.shape(),
                b.shape()
            );
        }
        let batch = broadcast_fixed(&ash[..ash.len() - 2], &bsh[..bsh.len() - 2])?;
        let ia = source_indices(&ash[..ash.len() - 2], &batch);
        let ib = source_indices(&bsh[..bsh.len() - 2], &batch);
        let is_float = a.dtype().is_float();
        let (af, bf) = if is_float {
            (a.to_f32_vec(), b.to_f32_vec())
        } else {
            (Vec::new(), Vec::new())
        };
        let (ai, bi) = if is_float {
            (Vec::new(), Vec::new())
        } else {
            (a.to_i64_vec(), b.to_i64_vec())
        };
        let nb = ia.len();
        let mut outf = vec![0f32; if is_float { nb * m * n } else { 0 }];
        let mut outi = vec![0i64; if is_float { 0 } else { nb * m * n }];
        for (bi_, (&sa, &sb)) in ia.iter().zip(&ib).enumerate() {
            let (oa, ob, oo) = (sa * m * k, sb * k * n, bi_ * m * n);
            for r in 0..m {
                for kk in 0..k {
                    if is_float {
                        let x = af[oa + r * k + kk];
                        for c in 0..n {
                            outf[oo + r * n + c] += x * bf[ob + kk * n + c];
                        }
                    } else {
                        let x = ai[oa + r * k + kk];
                        for c in 0..n {
                            outi[oo + r * n + c] = outi[oo + r * n + c]
                                .wrapping_add(x.wrapping_mul(bi[ob + kk * n + c]));
                        }
                    }
                }
            }
        }
        let mut out_shape = batch;
        if a.rank() > 1 {
            out_shape.push(m);
        }
        if b.rank() > 1 {
            out_shape.push(n);
        }
        let out = if is_float {
            Tensor::from_f32(out_shape, outf).cast(a.dtype())
        } else {
            Tensor::from_i64(out_shape, outi).cast(a.dtype())
        };
        Ok(vec![out])
    }
}

impl OpBuild for MatMul {
    const MNEMONICS: &'static [&'static str] = &["matmul"];

    fn build(_: &str, _: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(MatMul)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn batched_and_vector_products() {
        let a = Tensor::from_f32(vec![2, 1, 2], vec![1.0, 2.0, 3.0, 4.0]);
        let b = Tensor::from_f32(vec![2, 1], vec![10.0, 100.0]);
        let r = MatMul
            .eval(&[&a, &b], &EvalCtx::default())
            .unwrap()
            .remove(0);
        assert_eq!(r.shape(), &[2, 1, 1]);
        assert_eq!(r.as_f32().unwrap(), &[210.0, 430.0]);
        let v = Tensor::from_f32(vec![2], vec![1.0, 1.0]);
        let r = MatMul
            .eval(&[&v, &b], &EvalCtx::default())
            .unwrap()
            .remove(0);
        assert_eq!(r.shape(), &[1]);
    }

    #[test]
    fn symbolic_shapes() {
        let a = Fact::new(TensorType::new(
            DType::F32,
            vec![Dim::fixed(1), Dim::sym("seq"), Dim::fixed(64)],
        ));
        let b = Fact::new(TensorType::fixed(DType::F32, &[64, 256]));
        let out = MatMul.infer(&[&a, &b]).unwrap();
        assert_eq!(out[0].ty.to_string(), "f32[1, seq, 256]");
        let bad = Fact::new(TensorType::fixed(DType::F32, &[32, 256]));
        assert!(MatMul.infer(&[&a, &bad]).is_err());
    }
}
