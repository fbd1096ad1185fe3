//! Multidirectional (NumPy-style) broadcasting, for symbolic and static shapes.

use crate::dim::Dim;
use crate::ops::{bail, strides, OpError};
use crate::shape::Shape;

/// The broadcast of two symbolic shapes. Equal dims match, a static 1
/// stretches; two different symbolic dims are an error because their
/// equality cannot be proven.
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Result<Shape, OpError> {
    let rank = a.rank().max(b.rank());
    let one = Dim::fixed(1);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = (i + a.rank()).checked_sub(rank).map_or(&one, |j| &a.0[j]);
        let db = (i + b.rank()).checked_sub(rank).map_or(&one, |j| &b.0[j]);
        let d = if da == db || *db == one {
            da.clone()
        } else if *da == one {
            db.clone()
        } else {
            bail!("shapes {a} and {b} do not broadcast (axis {i}: {da} vs {db})");
        };
        out.push(d);
    }
    Ok(Shape(out))
}

/// Broadcast of several symbolic shapes.
pub fn broadcast_all<'a>(shapes: impl IntoIterator<Item = &'a Shape>) -> Result<Shape, OpError> {
    shapes
        .into_iter()
        .try_fold(Shape::scalar(), |acc, s| broadcast_shapes(&acc, s))
}

/// Broadcast of static shapes.
pub fn broadcast_fixed(a: &[usize], b: &[usize]) -> Result<Vec<usize>, OpError> {
    let s = broadcast_shapes(&to_shape(a), &to_shape(b))?;
    Ok(s.as_fixed().expect("broadcast of static shapes is static"))
}

fn to_shape(s: &[usize]) -> Shape {
    Shape(s.iter().map(|&d| Dim::fixed(d as i64)).collect())
}

/// For every element of `out` (row-major), the index of the element of an
/// input of shape `input` that broadcasts to it.
pub fn source_indices(input: &[usize], out: &[usize]) -> Vec<usize> {
    let n: usize = out.iter().product();
    let in_strides = strides(input);
    let offset = out.len() - input.len();
    // Stride 0 on stretched axes.
    let eff: Vec<usize> = (0..out.len())
        .map(|i| {
            if i < offset || input[i - offset] == 1 {
                0
            } else {
                in_strides[i - offset]
            }
        })
        .collect();
    let mut idx = vec![0usize; out.len()];
    let mut result = Vec::with_capacity(n);
    let mut src = 0usize;
    for _ in 0..n {
        result.push(src);
        for ax in (0..out.len()).rev() {
            idx[ax] += 1;
            src += eff[ax];
            if idx[ax] < out[ax] {
                break;
            }
            src -= eff[ax] * idx[ax];
            idx[ax] = 0;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_broadcast() {
        let a = Shape(vec![Dim::fixed(1), Dim::sym("seq"), Dim::fixed(8)]);
        let b = Shape::fixed(&[8]);
        assert_eq!(broadcast_shapes(&a, &b).unwrap(), a);
        let c = Shape(vec![Dim::sym("past")]);
        assert!(broadcast_shapes(&Shape(vec![Dim::sym("seq")]), &c).is_err());
    }

    #[test]
    fn indices_follow_numpy() {
        assert_eq!(source_indices(&[3], &[2, 3]), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(source_indices(&[2, 1], &[2, 3]), vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(source_indices(&[], &[2]), vec![0, 0]);
    }
}
