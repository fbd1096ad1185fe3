//! `transpose`: `%y = transpose %x {perm = [0, 2, 1, 3]}` permutes the axes:
//! output axis `i` is input axis `perm[i]` (ONNX `Transpose`).
//!
//! Difference from ONNX: `perm` is mandatory (ONNX reverses the axes when it
//! is absent; the frontend writes the reversed permutation out). Negative
//! entries are not accepted, as in ONNX.

use crate::attr::{Attr, Attrs};
use crate::ops::{bail, strides, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Transpose {
    pub perm: Vec<i64>,
}

impl Transpose {
    /// The permutation as indices, checked against `rank`.
    fn perm(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        let perm = &self.perm;
        if perm.len() != rank {
            bail!(
                "`transpose` perm {perm:?} has {} entries for rank {rank}",
                perm.len()
            );
        }
        let mut seen = vec![false; rank];
        for &p in perm {
            if p < 0 || p as usize >= rank || std::mem::replace(&mut seen[p as usize], true) {
                bail!("`transpose` perm {perm:?} is not a permutation of 0..{rank}");
            }
        }
        Ok(perm.iter().map(|&p| p as usize).collect())
    }
}

/// Input element index for every output element of the transpose.
pub fn transpose_order(shape: &[usize], perm: &[usize]) -> Vec<usize> {
    let in_strides = strides(shape);
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let eff: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let n: usize = out.iter().product();
    let mut order = Vec::with_capacity(n);
    let mut idx = vec![0usize; out.len()];
    for _ in 0..n {
        order.push(idx.iter().zip(&eff).map(|(i, s)| i * s).sum());
        for ax in (0..out.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < out[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    order
}

impl OpDef for Transpose {
    fn mnemonic(&self) -> &'static str {
        "transpose"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("perm", Attr::ints(&self.perm))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`transpose` takes 1 operand, got {}", inputs.len());
        };
        let perm = self.perm(x.ty.rank())?;
        let dims = perm.iter().map(|&p| x.ty.shape.0[p].clone()).collect();
        Ok(vec![Fact::new(TensorType::new(x.ty.dtype, Shape(dims)))])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`transpose` takes 1 operand, got {}", inputs.len());
        };
        let perm = self.perm(x.rank())?;
        let out: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        let order = transpose_order(x.shape(), &perm);
        Ok(vec![Tensor::new(out, x.data().gather(order.into_iter()))?])
    }
}

impl OpBuild for Transpose {
    const MNEMONICS: &'static [&'static str] = &["transpose"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Transpose {
            perm: attrs.ints("perm")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::test_util::*;

    #[test]
    fn permutes_like_numpy() {
        // np.transpose(np.arange(24).reshape(2, 3, 4), (1, 0, 2))
        let x = Tensor::from_i64(vec![2, 3, 4], (0..24).collect());
        let r = eval_checked(
            &Transpose {
                perm: vec![1, 0, 2],
            },
            &[&x],
        );
        assert_eq!(r[0].shape(), &[3, 2, 4]);
        assert_eq!(
            &r[0].as_i64().unwrap()[..12],
            &[0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7]
        );
        let m = Tensor::from_f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let r = eval_checked(&Transpose { perm: vec![1, 0] }, &[&m]);
        assert_eq!(r[0].as_f32().unwrap(), &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    }

    #[test]
    fn symbolic_and_errors() {
        let x = fact(DType::F16, vec![d(1), sym("seq"), d(4), d(32)]);
        let r = Transpose {
            perm: vec![0, 2, 1, 3],
        }
        .infer(&[&x])
        .unwrap();
        assert_eq!(r[0].ty.to_string(), "f16[1, 4, seq, 32]");
        for bad in [vec![0, 1, 2], vec![0, 1, 1, 3], vec![0, 1, 2, -1]] {
            let e = Transpose { perm: bad }.infer(&[&x]).unwrap_err();
            assert!(e.0.contains("`transpose` perm"), "{e}");
        }
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Transpose { perm: vec![1, 0] }, &[]);
    }
}
