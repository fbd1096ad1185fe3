//! `softmax`: `%y = softmax %x {axis = -1}` normalises `exp(x)` along one
//! axis (ONNX `Softmax`, opset 13 semantics: the reduction is over `axis`
//! alone, not over every axis from `axis` on as in opsets 1–12; the frontend
//! rewrites the old form with reshapes). Float operands only; the math is
//! done in `f32` with the maximum subtracted first, like onnxruntime.

use crate::attr::{Attr, Attrs};
use crate::ops::{bail, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Softmax {
    pub axis: i64,
}

impl Default for Softmax {
    fn default() -> Softmax {
        Softmax { axis: -1 }
    }
}

impl OpDef for Softmax {
    fn mnemonic(&self) -> &'static str {
        "softmax"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        vec![("axis", Attr::Int(self.axis))]
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x] = inputs else {
            bail!("`softmax` takes 1 operand, got {}", inputs.len());
        };
        if !x.ty.dtype.is_float() {
            bail!("`softmax` needs a float operand, got {}", x.ty);
        }
        norm_axis(self.axis, x.ty.rank())
            .map_err(|e| OpError(format!("`softmax` on {}: {e}", x.ty)))?;
        Ok(vec![Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x] = inputs else {
            bail!("`softmax` takes 1 operand, got {}", inputs.len());
        };
        if !x.dtype().is_float() {
            bail!("`softmax` needs a float operand, got {}", x.dtype());
        }
        let axis = norm_axis(self.axis, x.rank())?;
        let shape = x.shape();
        let n = shape[axis];
        let inner: usize = shape[axis + 1..].iter().product();
        let outer: usize = shape[..axis].iter().product();
        let mut v = x.to_f32_vec();
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| (o * n + k) * inner + i;
                let max = (0..n).map(|k| v[at(k)]).fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                for k in 0..n {
                    let e = (v[at(k)] - max).exp();
                    v[at(k)] = e;
                    sum += e;
                }
                for k in 0..n {
                    v[at(k)] /= sum;
                }
            }
        }
        Ok(vec![Tensor::from_f32(shape.to_vec(), v).cast(x.dtype())])
    }
}

impl OpBuild for Softmax {
    const MNEMONICS: &'static [&'static str] = &["softmax"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Softmax {
            axis: attrs.int_or("axis", -1)?,
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
            assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn onnx_example() {
        // ONNX `Softmax` doc example: [[-1, 0, 1]].
        let x = Tensor::from_f32(vec![1, 3], vec![-1.0, 0.0, 1.0]);
        let r = eval_checked(&Softmax::default(), &[&x]);
        close(
            r[0].as_f32().unwrap(),
            &[0.090_030_57, 0.244_728_48, 0.665_240_94],
        );
    }

    #[test]
    fn large_values_and_other_axis() {
        // Max subtraction keeps large inputs finite.
        let x = Tensor::from_f32(vec![2, 2], vec![1000.0, 0.0, 1001.0, 0.0]);
        let r = eval_checked(&Softmax { axis: 0 }, &[&x]);
        close(
            r[0].as_f32().unwrap(),
            &[0.268_941_43, 0.5, 0.731_058_6, 0.5],
        );
        let h = x.cast(DType::F16);
        let r = eval_checked(&Softmax { axis: 0 }, &[&h]);
        assert_eq!(r[0].dtype(), DType::F16);
    }

    #[test]
    fn infer_checks() {
        let x = fact(DType::F32, vec![d(1), sym("seq"), sym("seq")]);
        let r = Softmax::default().infer(&[&x]).unwrap();
        assert_eq!(r[0].ty, x.ty);
        assert!(Softmax { axis: 3 }.infer(&[&x]).is_err());
        let i = fact(DType::I64, vec![d(3)]);
        let e = Softmax::default().infer(&[&i]).unwrap_err();
        assert!(e.0.contains("`softmax`") && e.0.contains("i64[3]"), "{e}");
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Softmax::default(), &[]);
        assert_round_trip(Softmax { axis: 1 }, &[]);
    }
}
