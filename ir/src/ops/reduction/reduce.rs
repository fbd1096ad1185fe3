//! Reductions: `reduce_sum`, `reduce_mean`, `reduce_max`, `reduce_min`,
//! `reduce_prod` (ONNX `ReduceSum`, `ReduceMean`, ...), as
//! `%y = reduce_sum %x {axes = [-1], keep_dims = false}`.
//!
//! The axes are an attribute here (the ONNX frontend turns the opset-13/18
//! `axes` operand into it). `axes` absent means every axis; `axes = []`
//! reduces no axis, so the op is the identity. The frontend maps ONNX's
//! empty/absent axes to "absent" when `noop_with_empty_axes = 0` and to
//! `[]` when it is 1. `keep_dims` (ONNX `keepdims`) defaults to true and is
//! printed only when false; `axes` is printed only when present.
//!
//! Floats accumulate in `f32` (the result is cast back), integers in `i64`
//! with wrapping; `reduce_mean` of integers truncates toward zero. Reducing
//! an empty set gives 0 (sum), 1 (prod), NaN (float mean), `-inf`/`+inf`
//! (float max/min) or the dtype's lowest/highest value (integer max/min), as
//! ONNX opset 18 specifies; the integer mean of nothing is an error. Float
//! max/min propagate NaN. `bool` is not accepted.
//!
//! Known integer values (shape vectors) are reduced symbolically during
//! inference where the arithmetic is exact (`reduce_prod` of `[seq, 4]` is
//! `4*seq`).

use crate::attr::{Attr, Attrs};
use crate::dim::Dim;
use crate::dtype::DType;
use crate::ops::{
    bail, fact_maybe_dims, known_dims, norm_axis, EvalCtx, Fact, OpBuild, OpDef, OpError,
};
use crate::shape::{Shape, TensorType};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
}

impl ReduceKind {
    pub const ALL: [ReduceKind; 5] = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::Prod,
    ];

    pub fn mnemonic(self) -> &'static str {
        match self {
            ReduceKind::Sum => "reduce_sum",
            ReduceKind::Mean => "reduce_mean",
            ReduceKind::Max => "reduce_max",
            ReduceKind::Min => "reduce_min",
            ReduceKind::Prod => "reduce_prod",
        }
    }

    fn f32(self, v: impl Iterator<Item = f32>) -> f32 {
        match self {
            ReduceKind::Sum => v.sum(),
            ReduceKind::Prod => v.product(),
            ReduceKind::Mean => {
                let (s, n) = v.fold((0f32, 0usize), |(s, n), x| (s + x, n + 1));
                s / n as f32
            }
            ReduceKind::Max => v.fold(f32::NEG_INFINITY, |a, x| {
                if a.is_nan() || x.is_nan() {
                    f32::NAN
                } else {
                    a.max(x)
                }
            }),
            ReduceKind::Min => v.fold(f32::INFINITY, |a, x| {
                if a.is_nan() || x.is_nan() {
                    f32::NAN
                } else {
                    a.min(x)
                }
            }),
        }
    }

    fn i64(self, v: impl Iterator<Item = i64>, dtype: DType) -> Result<i64, OpError> {
        Ok(match self {
            ReduceKind::Sum => v.fold(0i64, i64::wrapping_add),
            ReduceKind::Prod => v.fold(1i64, i64::wrapping_mul),
            ReduceKind::Mean => {
                let (s, n) = v.fold((0i64, 0i64), |(s, n), x| (s.wrapping_add(x), n + 1));
                if n == 0 {
                    bail!("`reduce_mean` of an empty set of {dtype} values");
                }
                s / n
            }
            ReduceKind::Max => v.fold(int_range(dtype).0, i64::max),
            ReduceKind::Min => v.fold(int_range(dtype).1, i64::min),
        })
    }

    /// Symbolic reduction, where exact.
    fn dims(self, v: &[&Dim]) -> Option<Dim> {
        match self {
            ReduceKind::Sum => Some(v.iter().fold(Dim::fixed(0), |a, &x| &a + x)),
            ReduceKind::Prod => Some(v.iter().fold(Dim::fixed(1), |a, &x| &a * x)),
            ReduceKind::Mean => {
                let s = v.iter().fold(Dim::fixed(0), |a, &x| &a + x);
                let n = Dim::fixed(v.len() as i64);
                match s.as_fixed() {
                    Some(s) if !v.is_empty() => Some(Dim::fixed(s / v.len() as i64)),
                    Some(_) => None,
                    None => s.div_exact(&n),
                }
            }
            ReduceKind::Max | ReduceKind::Min => {
                let fixed: Option<Vec<i64>> = v.iter().map(|d| d.as_fixed()).collect();
                match fixed {
                    Some(f) if !f.is_empty() => Some(Dim::fixed(if self == ReduceKind::Max {
                        f.into_iter().max()?
                    } else {
                        f.into_iter().min()?
                    })),
                    _ if !v.is_empty() && v.iter().all(|&x| x == v[0]) => Some(v[0].clone()),
                    _ => None,
                }
            }
        }
    }
}

/// Lowest and highest value of an integer dtype.
fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::U8 => (0, u8::MAX as i64),
        DType::I4 => (-8, 7),
        DType::U4 => (0, 15),
        _ => (i64::MIN, i64::MAX),
    }
}

/// A reduction over `axes` (all axes when `None`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reduce {
    pub kind: ReduceKind,
    pub axes: Option<Vec<i64>>,
    pub keep_dims: bool,
}

impl Reduce {
    pub fn new(kind: ReduceKind, axes: Option<Vec<i64>>, keep_dims: bool) -> Reduce {
        Reduce {
            kind,
            axes,
            keep_dims,
        }
    }

    /// Which axes of a rank-`rank` operand are reduced.
    fn reduced(&self, rank: usize) -> Result<Vec<bool>, OpError> {
        let name = self.kind.mnemonic();
        let Some(axes) = &self.axes else {
            return Ok(vec![true; rank]);
        };
        let mut mask = vec![false; rank];
        for &a in axes {
            let i = norm_axis(a, rank).map_err(|e| OpError(format!("`{name}`: {e}")))?;
            if std::mem::replace(&mut mask[i], true) {
                bail!("`{name}` axes {axes:?} repeat axis {i}");
            }
        }
        Ok(mask)
    }

    fn out_dims<T: Clone>(&self, dims: &[T], mask: &[bool], one: T) -> Vec<T> {
        dims.iter()
            .zip(mask)
            .filter_map(|(d, &r)| match (r, self.keep_dims) {
                (false, _) => Some(d.clone()),
                (true, true) => Some(one.clone()),
                (true, false) => None,
            })
            .collect()
    }
}

/// For every output element (row-major, keep-dims layout), the input
/// element indices reduced into it.
fn groups(shape: &[usize], mask: &[bool]) -> Vec<Vec<usize>> {
    let out: Vec<usize> = shape
        .iter()
        .zip(mask)
        .map(|(&d, &r)| if r { 1 } else { d })
        .collect();
    let out_strides = crate::ops::strides(&out);
    let mut g = vec![Vec::new(); out.iter().product()];
    let n: usize = shape.iter().product();
    let mut idx = vec![0usize; shape.len()];
    for i in 0..n {
        let o: usize = idx
            .iter()
            .zip(mask)
            .zip(&out_strides)
            .map(|((&k, &r), &s)| if r { 0 } else { k * s })
            .sum();
        g[o].push(i);
        for ax in (0..shape.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < shape[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    g
}

impl OpDef for Reduce {
    fn mnemonic(&self) -> &'static str {
        self.kind.mnemonic()
    }

    fn attrs(&self) -> Vec<(&'static str, Attr)> {
        let mut a = Vec::new();
        if let Some(axes) = &self.axes {
            a.push(("axes", Attr::ints(axes)));
        }
        if !self.keep_dims {
            a.push(("keep_dims", Attr::Bool(false)));
        }
        a
    }

    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
        let name = self.mnemonic();
        let [x] = inputs else {
            bail!("`{name}` takes 1 operand, got {}", inputs.len());
        };
        let dt = x.ty.dtype;
        if !dt.is_float() && !dt.is_int() {
            bail!("`{name}` does not take {}", x.ty);
        }
        let mask = self.reduced(x.ty.rank())?;
        let dims = self.out_dims(&x.ty.shape.0, &mask, Dim::fixed(1));
        let ty = TensorType::new(dt, Shape(dims));
        let values = (|| {
            let v = known_dims(x)?;
            groups(&v.shape, &mask)
                .iter()
                .map(|g| {
                    let items: Vec<&Dim> = g.iter().map(|&i| &v.values[i]).collect();
                    self.kind.dims(&items)
                })
                .collect::<Option<Vec<Dim>>>()
        })();
        Ok(vec![fact_maybe_dims(ty, values)])
    }

    fn eval(&self, inputs: &[&Tensor], _: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
        let name = self.mnemonic();
        let [x] = inputs else {
            bail!("`{name}` takes 1 operand, got {}", inputs.len());
        };
        let dt = x.dtype();
        let mask = self.reduced(x.rank())?;
        let shape = self.out_dims(x.shape(), &mask, 1);
        let g = groups(x.shape(), &mask);
        let out = if dt.is_float() {
            let v = x.to_f32_vec();
            let r = g.iter().map(|g| self.kind.f32(g.iter().map(|&i| v[i])));
            Tensor::from_f32(shape, r.collect()).cast(dt)
        } else if dt.is_int() {
            let v = x.to_i64_vec();
            let r = g
                .iter()
                .map(|g| self.kind.i64(g.iter().map(|&i| v[i]), dt))
                .collect::<Result<Vec<_>, _>>()?;
            Tensor::from_i64(shape, r).cast(dt)
        } else {
            bail!("`{name}` does not take {dt}");
        };
        Ok(vec![out])
    }
}

impl OpBuild for Reduce {
    const MNEMONICS: &'static [&'static str] = &[
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "reduce_min",
        "reduce_prod",
    ];

    fn build(mnemonic: &str, attrs: &mut Attrs, _: &[TensorType]) -> Result<Self, OpError> {
        let Some(&kind) = ReduceKind::ALL.iter().find(|k| k.mnemonic() == mnemonic) else {
            bail!("unknown reduction `{mnemonic}`");
        };
        Ok(Reduce {
            kind,
            axes: attrs.opt_ints("axes")?,
            keep_dims: attrs.bool_or("keep_dims", true)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::*;

    /// The 3x2x2 input of the ONNX Reduce* doc examples.
    fn onnx_data() -> Tensor {
        Tensor::from_f32(
            vec![3, 2, 2],
            vec![
                5.0, 1.0, 20.0, 2.0, 30.0, 1.0, 40.0, 2.0, 55.0, 1.0, 60.0, 2.0,
            ],
        )
    }

    fn run(kind: ReduceKind, axes: Option<Vec<i64>>, keep: bool, x: &Tensor) -> Tensor {
        eval_checked(&Reduce::new(kind, axes, keep), &[x]).remove(0)
    }

    #[test]
    fn onnx_examples() {
        let x = onnx_data();
        // ReduceMean, axes [1], keepdims 1.
        let r = run(ReduceKind::Mean, Some(vec![1]), true, &x);
        assert_eq!(r.shape(), &[3, 1, 2]);
        assert_eq!(r.as_f32().unwrap(), &[12.5, 1.5, 35.0, 1.5, 57.5, 1.5]);
        // ReduceSum, axes [1], keepdims 0.
        let s_data: Vec<f32> = (1..=12).map(|v| v as f32).collect();
        let s = Tensor::from_f32(vec![3, 2, 2], s_data);
        let r = run(ReduceKind::Sum, Some(vec![1]), false, &s);
        assert_eq!(r.shape(), &[3, 2]);
        assert_eq!(r.as_f32().unwrap(), &[4.0, 6.0, 12.0, 14.0, 20.0, 22.0]);
        // ReduceMax, axes [1], keepdims 1.
        let r = run(ReduceKind::Max, Some(vec![1]), true, &x);
        assert_eq!(r.as_f32().unwrap(), &[20.0, 2.0, 40.0, 2.0, 60.0, 2.0]);
        // ReduceMin, axes [1], keepdims 1.
        let r = run(ReduceKind::Min, Some(vec![1]), true, &x);
        assert_eq!(r.as_f32().unwrap(), &[5.0, 1.0, 30.0, 1.0, 55.0, 1.0]);
        // ReduceProd, axes [1], keepdims 1.
        let r = run(ReduceKind::Prod, Some(vec![1]), true, &s);
        assert_eq!(r.as_f32().unwrap(), &[3.0, 8.0, 35.0, 48.0, 99.0, 120.0]);
        // Default axes: everything, keepdims 1.
        let r = run(ReduceKind::Sum, None, true, &s);
        assert_eq!(r.shape(), &[1, 1, 1]);
        assert_eq!(r.as_f32().unwrap(), &[78.0]);
        // Negative axis.
        let r = run(ReduceKind::Mean, Some(vec![-2]), true, &x);
        assert_eq!(r.as_f32().unwrap(), &[12.5, 1.5, 35.0, 1.5, 57.5, 1.5]);
    }

    #[test]
    fn empty_axes_is_identity_and_empty_sets() {
        let x = onnx_data();
        let r = run(ReduceKind::Sum, Some(vec![]), false, &x);
        assert_eq!(r, x);
        let e = Tensor::from_f32(vec![2, 0], vec![]);
        let r = run(ReduceKind::Max, Some(vec![1]), false, &e);
        assert_eq!(r.as_f32().unwrap(), &[f32::NEG_INFINITY; 2]);
        let r = run(ReduceKind::Prod, Some(vec![1]), false, &e);
        assert_eq!(r.as_f32().unwrap(), &[1.0; 2]);
        let ei = Tensor::zeros(DType::I32, vec![0]);
        let r = run(ReduceKind::Min, None, false, &ei);
        assert_eq!(r.to_i64_vec(), vec![i32::MAX as i64]);
        let op = Reduce::new(ReduceKind::Mean, None, false);
        assert!(eval(&op, &[&ei]).is_err());
    }

    #[test]
    fn integers() {
        let x = Tensor::from_i64(vec![2, 2], vec![-7, 2, 3, 4]);
        let r = run(ReduceKind::Mean, Some(vec![1]), false, &x);
        assert_eq!(r.as_i64().unwrap(), &[-2, 3]);
        let r = run(ReduceKind::Max, Some(vec![0]), false, &x);
        assert_eq!(r.as_i64().unwrap(), &[3, 4]);
    }

    #[test]
    fn symbolic_shapes_and_values() {
        let x = fact(DType::F32, vec![d(1), sym("seq"), d(64)]);
        let op = Reduce::new(ReduceKind::Mean, Some(vec![-1]), true);
        assert_eq!(op.infer(&[&x]).unwrap()[0].ty.to_string(), "f32[1, seq, 1]");
        let op = Reduce::new(ReduceKind::Sum, Some(vec![0, 2]), false);
        assert_eq!(op.infer(&[&x]).unwrap()[0].ty.to_string(), "f32[seq]");
        // Flatten bookkeeping: reduce_prod of a shape slice.
        let shape = known(&[2], vec![sym("seq"), d(4)]);
        let op = Reduce::new(ReduceKind::Prod, None, true);
        let r = op.infer(&[&shape]).unwrap().remove(0);
        assert_eq!(r.ty.to_string(), "i64[1]");
        assert_eq!(r.dims_value().unwrap(), vec![&sym("seq") * &d(4)]);
        let op = Reduce::new(ReduceKind::Max, None, false);
        assert!(op.infer(&[&shape]).unwrap()[0].value.is_none());
    }

    #[test]
    fn bad_axes_and_types() {
        let x = fact(DType::F32, vec![d(2), d(3)]);
        let op = Reduce::new(ReduceKind::Sum, Some(vec![2]), true);
        let e = op.infer(&[&x]).unwrap_err();
        assert!(
            e.0.contains("`reduce_sum`") && e.0.contains("out of range"),
            "{e}"
        );
        let op = Reduce::new(ReduceKind::Sum, Some(vec![1, -1]), true);
        assert!(op.infer(&[&x]).unwrap_err().0.contains("repeat"));
        let b = fact(DType::Bool, vec![d(2)]);
        let op = Reduce::new(ReduceKind::Max, None, true);
        assert!(op.infer(&[&b]).unwrap_err().0.contains("bool[2]"));
    }

    #[test]
    fn round_trip() {
        for kind in ReduceKind::ALL {
            assert_round_trip(Reduce::new(kind, None, true), &[]);
            assert_round_trip(Reduce::new(kind, Some(vec![0, -1]), false), &[]);
            assert_round_trip(Reduce::new(kind, Some(vec![]), true), &[]);
        }
    }
}
