//! Comparing tensors: error measures for golden checks and the tolerance
//! test of the ONNX backend tests.

use slmcc_ir::Tensor;

/// How far `actual` is from `expected`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Diff {
    /// max |a - b| over all elements.
    pub max_abs: f64,
    /// `max_abs / max(max |b|, 1e-6)`: the error relative to the layer's scale.
    pub max_rel: f64,
    /// Index of the element with the largest absolute error.
    pub worst_index: usize,
    /// Elements where exactly one side is NaN, or infinities differ.
    pub mismatched_specials: usize,
    /// `a·b / (|a| |b|)` over the finite elements (1 when either side is
    /// all zeros and the other too, 0 when only one is): how well the
    /// direction is kept, the usual measure of a quantized layer.
    pub cosine: f64,
}

/// Compares two tensors of equal shape element by element (as `f64`).
pub fn diff(actual: &Tensor, expected: &Tensor) -> Result<Diff, String> {
    if actual.shape() != expected.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            actual.shape(),
            expected.shape()
        ));
    }
    let mut d = Diff {
        max_abs: 0.0,
        max_rel: 0.0,
        worst_index: 0,
        mismatched_specials: 0,
        cosine: 1.0,
    };
    let mut scale = 0f64;
    let (mut dot, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for i in 0..actual.len() {
        let (a, b) = (actual.get_f64(i), expected.get_f64(i));
        if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
            if !(a.is_nan() && b.is_nan()) && a != b {
                d.mismatched_specials += 1;
            }
            continue;
        }
        scale = scale.max(b.abs());
        dot += a * b;
        aa += a * a;
        bb += b * b;
        let e = (a - b).abs();
        if e > d.max_abs {
            d.max_abs = e;
            d.worst_index = i;
        }
    }
    d.max_rel = d.max_abs / scale.max(1e-6);
    d.cosine = match (aa > 0.0, bb > 0.0) {
        (true, true) => dot / (aa.sqrt() * bb.sqrt()),
        (false, false) => 1.0,
        _ => 0.0,
    };
    Ok(d)
}

/// NumPy's `allclose(actual, expected, rtol, atol)` with NaN == NaN, as the
/// ONNX backend tests use it; integers and booleans must match exactly
/// (which `atol < 1` gives). `Err` says where and how it fails.
pub fn allclose(actual: &Tensor, expected: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if actual.dtype() != expected.dtype() {
        return Err(format!(
            "dtype {}, expected {}",
            actual.dtype(),
            expected.dtype()
        ));
    }
    if actual.shape() != expected.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            actual.shape(),
            expected.shape()
        ));
    }
    let mut bad = 0usize;
    let mut first = None;
    for i in 0..actual.len() {
        let (a, b) = (actual.get_f64(i), expected.get_f64(i));
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if a.is_infinite() || b.is_infinite() {
            a == b
        } else if actual.dtype().is_float() {
            (a - b).abs() <= atol + rtol * b.abs()
        } else {
            actual.get_i64(i) == expected.get_i64(i)
        };
        if !ok {
            bad += 1;
            first.get_or_insert((i, a, b));
        }
    }
    match first {
        None => Ok(()),
        Some((i, a, b)) => Err(format!(
            "{bad} of {} elements differ; first at index {i}: got {a}, expected {b}",
            actual.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_error_uses_layer_scale() {
        let a = Tensor::from_f32(vec![3], vec![1.0, 100.0, 0.0]);
        let b = Tensor::from_f32(vec![3], vec![1.0, 100.5, 0.0]);
        let d = diff(&a, &b).unwrap();
        assert_eq!(d.worst_index, 1);
        assert!((d.max_rel - 0.5 / 100.5).abs() < 1e-12);
    }

    #[test]
    fn allclose_matches_numpy() {
        let a = Tensor::from_f32(vec![3], vec![1.0, f32::NAN, 2.0]);
        let b = Tensor::from_f32(vec![3], vec![1.0005, f32::NAN, 2.0]);
        assert!(allclose(&a, &b, 1e-3, 1e-7).is_ok());
        assert!(allclose(&a, &b, 1e-4, 1e-7).is_err());
        let i = Tensor::from_i64(vec![1], vec![3]);
        let j = Tensor::from_i64(vec![1], vec![4]);
        assert!(allclose(&i, &j, 1.0, 1.0).is_err());
    }
}
