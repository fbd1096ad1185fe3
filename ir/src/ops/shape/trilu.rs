//! `trilu`: `%y = trilu %x[, %k] {upper = false}` keeps the upper
//! (`upper = true`, the default, printed only when false) or lower triangle
//! of the last two axes of `x` and zeroes the rest (ONNX `Trilu`). The
//! optional `k` (an `i64` scalar, `[]` or `[1]`, default 0) shifts the
//! diagonal: the upper triangle keeps `col - row >= k`, the lower one
//! `col - row <= k`. `x` has rank >= 2 and any dtype; leading axes are
//! batch axes. `k`'s value is only needed at evaluation.

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::{bail, check_arity, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::TensorType;
use crate::tensor::{Tensor, TensorData};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Trilu {
    pub upper: bool,
}

impl Default for Trilu {
    fn default() -> Trilu {
        Trilu { upper: true }
    }
}

impl OpDef for Trilu {
    fn mnemonic(&self) -> &'static str {
        "trilu"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        if self.upper {
            Vec::new()
        } else {
            vec![("upper", Attr::Bool(false))]
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        check_arity("trilu", inputs.len(), 1, 2)?;
        let x = inputs[0];
        if x.ty.rank() < 2 {
            bail!("`trilu` needs an operand of rank >= 2, got {}", x.ty);
        }
        if let Some(k) = inputs.get(1) {
            let scalar = k.ty.rank() == 0 || k.ty.shape.0 == [Dim::fixed(1)];
            if k.ty.dtype != DType::I64 || !scalar {
                bail!("`trilu` k must be an i64 scalar, got {}", k.ty);
            }
        }
        Ok(vec![Fact::new(x.ty.clone())])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        check_arity("trilu", inputs.len(), 1, 2)?;
        let x = inputs[0];
        let r = x.rank();
        if r < 2 {
            bail!(
                "`trilu` needs an operand of rank >= 2, got shape {:?}",
                x.shape()
            );
        }
        let k = match inputs.get(1) {
            Some(k) if k.len() == 1 && k.dtype().is_int() => k.get_i64(0),
            Some(k) => bail!(
                "`trilu` k must be an i64 scalar, got {}{:?}",
                k.dtype(),
                k.shape()
            ),
            None => 0,
        };
        let (rows, cols) = (x.shape()[r - 2], x.shape()[r - 1]);
        // Zeroed elements pick the extra zero appended after the data.
        let zero = TensorData::zeros(x.dtype(), 1);
        let all = TensorData::concat(&[x.data(), &zero]).expect("same dtype");
        let order = (0..x.len()).map(|i| {
            let (row, col) = ((i / cols.max(1)) % rows.max(1), i % cols.max(1));
            let diff = col as i64 - row as i64;
            let keep = if self.upper { diff >= k } else { diff <= k };
            if keep {
                i
            } else {
                x.len()
            }
        });
        Ok(vec![Tensor::new(x.shape().to_vec(), all.gather(order))?])
    }
}

impl OpBuild for Trilu {
    const MNEMONICS: &'static [&'static str] = &["trilu"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Trilu {
            upper: attrs.bool_or("upper", true)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    /// The 4x5 input of the ONNX `Trilu` tests.
    fn x() -> Tensor {
        Tensor::from_i64(
            vec![4, 5],
            vec![4, 7, 3, 7, 9, 1, 2, 8, 6, 9, 9, 4, 0, 8, 7, 4, 3, 4, 2, 4],
        )
    }

    fn run(upper: bool, k: Option<i64>, x: &Tensor) -> Vec<i64> {
        let k = k.map(Tensor::scalar_i64);
        let mut inputs = vec![x];
        inputs.extend(k.as_ref());
        eval_checked(&Trilu { upper }, &inputs)
            .remove(0)
            .to_i64_vec()
    }

    #[test]
    fn onnx_examples() {
        let x = x();
        // triu
        #[rustfmt::skip]
        assert_eq!(run(true, None, &x), [
            4, 7, 3, 7, 9,
            0, 2, 8, 6, 9,
            0, 0, 0, 8, 7,
            0, 0, 0, 2, 4,
        ]);
        // triu_neg (k = -1)
        #[rustfmt::skip]
        assert_eq!(run(true, Some(-1), &x), [
            4, 7, 3, 7, 9,
            1, 2, 8, 6, 9,
            0, 4, 0, 8, 7,
            0, 0, 4, 2, 4,
        ]);
        // triu_pos (k = 2)
        #[rustfmt::skip]
        assert_eq!(run(true, Some(2), &x), [
            0, 0, 3, 7, 9,
            0, 0, 0, 6, 9,
            0, 0, 0, 0, 7,
            0, 0, 0, 0, 0,
        ]);
        // tril
        #[rustfmt::skip]
        assert_eq!(run(false, None, &x), [
            4, 0, 0, 0, 0,
            1, 2, 0, 0, 0,
            9, 4, 0, 0, 0,
            4, 3, 4, 2, 0,
        ]);
        // tril_pos (k = 2)
        #[rustfmt::skip]
        assert_eq!(run(false, Some(2), &x), [
            4, 7, 3, 0, 0,
            1, 2, 8, 6, 0,
            9, 4, 0, 8, 7,
            4, 3, 4, 2, 4,
        ]);
        // triu_out_pos (k = 6) and tril_out_neg (k = -7): all zeros.
        assert_eq!(run(true, Some(6), &x), [0; 20]);
        assert_eq!(run(false, Some(-7), &x), [0; 20]);
        // Extreme k does not overflow.
        assert_eq!(run(true, Some(i64::MIN), &x), x.to_i64_vec());
        // tril_zero: an empty [3, 0, 5] input.
        let e = Tensor::zeros(DType::F32, vec![3, 0, 5]);
        let r = eval_checked(&Trilu { upper: false }, &[&e, &Tensor::scalar_i64(6)]);
        assert_eq!(r[0].shape(), &[3, 0, 5]);
    }

    #[test]
    fn batched_causal_mask() {
        let ones = Tensor::from_bool(vec![2, 2, 2], vec![true; 8]);
        let r = eval_checked(&Trilu { upper: false }, &[&ones]);
        assert_eq!(
            r[0].as_bool().unwrap(),
            &[true, false, true, true, true, false, true, true]
        );
    }

    #[test]
    fn infer_checks() {
        let m = fact(DType::F32, vec![d(1), sym("seq"), sym("seq")]);
        let k = fact(DType::I64, vec![]);
        assert_eq!(Trilu::default().infer(&[&m, &k]).unwrap()[0].ty, m.ty);
        let v = fact(DType::F32, vec![d(3)]);
        assert!(Trilu::default()
            .infer(&[&v])
            .unwrap_err()
            .0
            .contains("rank >= 2"));
        let k32 = fact(DType::I32, vec![]);
        let e = Trilu::default().infer(&[&m, &k32]).unwrap_err();
        assert!(e.0.contains("k must be an i64 scalar, got i32[]"), "{e}");
    }

    #[test]
    fn round_trip() {
        assert_round_trip(Trilu::default(), &[]);
        assert_round_trip(Trilu { upper: false }, &[]);
    }
}
