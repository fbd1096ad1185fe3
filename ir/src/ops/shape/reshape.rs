//! `reshape`: `%y = reshape %x, %shape {allow_zero = false}` with ONNX
//! `Reshape` semantics: a `0` in the target copies the input dim (unless
//! `allow_zero`), one `-1` takes what is left. The target must be known at
//! compile time, possibly symbolically (`[1, seq, 4, 32]`).

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::{bail, fact_maybe_dims, EvalCtx, Fact, OpBuild, OpDef, OpError};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Reshape {
    pub allow_zero: bool,
}

/// Resolves an ONNX reshape target against the input shape.
pub fn resolve_target(input: &Shape, target: &[Dim], allow_zero: bool) -> Result<Shape, OpError> {
    let minus_one = Dim::fixed(-1);
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, d) in target.iter().enumerate() {
        if *d == minus_one {
            if infer_at.replace(i).is_some() {
                bail!("reshape target {target:?} has more than one -1");
            }
            out.push(Dim::fixed(1));
        } else if d.as_fixed() == Some(0) && !allow_zero {
            match input.0.get(i) {
                Some(src) => out.push(src.clone()),
                None => bail!(
                    "reshape target {target:?} copies axis {i} of rank-{} input",
                    input.rank()
                ),
            }
        } else if d.as_fixed().is_some_and(|v| v < 0) {
            bail!("reshape target {target:?} has a negative dim");
        } else {
            out.push(d.clone());
        }
    }
    let total = input.volume();
    let known = Shape(out.clone()).volume();
    if let Some(i) = infer_at {
        match total.div_exact(&known) {
            Some(q) => out[i] = q,
            None => {
                bail!("cannot reshape {input} to {target:?}: {total} is not a multiple of {known}")
            }
        }
    } else if total != known {
        bail!("cannot reshape {input} ({total} elements) to {target:?} ({known} elements)");
    }
    Ok(Shape(out))
}

impl OpDef for Reshape {
    fn mnemonic(&self) -> &'static str {
        "reshape"
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        if self.allow_zero {
            vec![("allow_zero", Attr::Bool(true))]
        } else {
            Vec::new()
        }
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let [x, shape] = inputs else {
            bail!(
                "`reshape` takes 2 operands (data, shape), got {}",
                inputs.len()
            );
        };
        if shape.ty.dtype != DType::I64 || shape.ty.rank() != 1 {
            bail!("`reshape` shape operand must be i64[n], got {}", shape.ty);
        }
        let Some(target) = shape.dims_value() else {
            bail!("`reshape` target is not known at compile time");
        };
        let out = resolve_target(&x.ty.shape, &target, self.allow_zero)?;
        let dims = x.value.as_ref().and_then(|v| v.as_dims()).map(|s| s.values);
        Ok(vec![fact_maybe_dims(
            TensorType::new(x.ty.dtype, out),
            dims,
        )])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let [x, shape] = inputs else {
            bail!("`reshape` takes 2 operands");
        };
        let target: Vec<Dim> = shape.to_i64_vec().into_iter().map(Dim::fixed).collect();
        let input = Shape::fixed(&x.shape().iter().map(|&d| d as i64).collect::<Vec<_>>());
        let out = resolve_target(&input, &target, self.allow_zero)?;
        let out = out.as_fixed().expect("static input gives static output");
        Ok(vec![(*x)
            .clone()
            .reshaped(out)
            .map_err(|e| OpError(e.to_string()))?])
    }
}

impl OpBuild for Reshape {
    const MNEMONICS: &'static [&'static str] = &["reshape"];

    fn build(_: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        Ok(Reshape {
            allow_zero: attrs.bool_or("allow_zero", false)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_targets() {
        let x = Shape(vec![Dim::fixed(1), Dim::sym("seq"), Dim::fixed(128)]);
        let t = [Dim::fixed(0), Dim::fixed(0), Dim::fixed(4), Dim::fixed(-1)];
        assert_eq!(
            resolve_target(&x, &t, false).unwrap().to_string(),
            "[1, seq, 4, 32]"
        );
        let t = [Dim::fixed(-1), Dim::fixed(128)];
        assert_eq!(
            resolve_target(&x, &t, false).unwrap().to_string(),
            "[seq, 128]"
        );
        let t = [Dim::fixed(3), Dim::fixed(-1)];
        assert!(resolve_target(&x, &t, false).is_err());
    }
}
