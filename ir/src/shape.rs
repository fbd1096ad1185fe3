//! Shapes and tensor types.
//!
//! A [`Shape`] is a list of [`Dim`]s; a [`TensorType`] pairs it with a dtype.
//! Both print in the textual form `f32[1, seq, 128]` (`f32[]` for a scalar).

use std::collections::HashMap;
use std::fmt;

use crate::dim::Dim;
use crate::dtype::DType;

/// The shape of a tensor: one [`Dim`] per axis.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn fixed(dims: &[i64]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::fixed(d)).collect())
    }

    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The static extents, when no dim is symbolic.
    pub fn as_fixed(&self) -> Option<Vec<usize>> {
        self.0
            .iter()
            .map(|d| d.as_fixed().and_then(|v| usize::try_from(v).ok()))
            .collect()
    }

    /// Number of elements as a (possibly symbolic) dim.
    pub fn volume(&self) -> Dim {
        self.0.iter().fold(Dim::fixed(1), |acc, d| &acc * d)
    }

    pub fn is_unknown(&self) -> bool {
        self.0.iter().any(Dim::is_unknown)
    }

    /// Evaluates every dim with the given symbol values.
    pub fn eval(&self, bindings: &HashMap<String, i64>) -> Option<Vec<usize>> {
        self.0
            .iter()
            .map(|d| d.eval(bindings).and_then(|v| usize::try_from(v).ok()))
            .collect()
    }

    pub fn substitute(&self, subst: &HashMap<String, Dim>) -> Shape {
        Shape(self.0.iter().map(|d| d.substitute(subst)).collect())
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(v: Vec<Dim>) -> Shape {
        Shape(v)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The type of an SSA value: element type and shape.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    pub fn fixed(dtype: DType, dims: &[i64]) -> TensorType {
        TensorType::new(dtype, Shape::fixed(dims))
    }

    pub fn scalar(dtype: DType) -> TensorType {
        TensorType::new(dtype, Shape::scalar())
    }

    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

impl fmt::Debug for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_types() {
        let t = TensorType::new(
            DType::F32,
            vec![Dim::fixed(1), Dim::sym("seq"), Dim::fixed(128)],
        );
        assert_eq!(t.to_string(), "f32[1, seq, 128]");
        assert_eq!(TensorType::scalar(DType::I64).to_string(), "i64[]");
        assert_eq!(t.shape.volume().to_string(), "128*seq");
    }
}
