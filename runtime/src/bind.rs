//! Binding symbols from the shapes of the inputs a graph is run with.
//!
//! A declared input dim that is a lone symbol (`seq`) binds it; a static dim
//! must match; any other expression (`past+seq`) is checked once everything
//! that can be bound is.

use std::collections::HashMap;

use slmcc_ir::{Dim, TensorType};

/// Binds the symbols of `declared` against the actual `shape` of input
/// `name`, adding to `bindings`. Expressions are left for [`check_shape`].
pub fn bind_shape(
    name: &str,
    declared: &TensorType,
    shape: &[usize],
    bindings: &mut HashMap<String, i64>,
) -> Result<(), String> {
    if declared.rank() != shape.len() {
        return Err(format!(
            "input `{name}` has shape {shape:?}, the graph expects {}",
            declared.shape
        ));
    }
    for (d, &actual) in declared.shape.dims().iter().zip(shape) {
        let actual = actual as i64;
        if let Some(v) = d.as_fixed() {
            if v != actual {
                return Err(format!(
                    "input `{name}` has shape {shape:?}, the graph expects {}",
                    declared.shape
                ));
            }
        } else if let [sym] = d.symbols()[..] {
            if *d == Dim::sym(sym) {
                match bindings.get(sym) {
                    Some(&b) if b != actual => {
                        return Err(format!(
                            "input `{name}` gives {sym} = {actual}, another input gave {sym} = {b}"
                        ))
                    }
                    _ => {
                        bindings.insert(sym.to_string(), actual);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Checks a concrete shape against a declared one under `bindings`.
pub fn check_shape(
    declared: &TensorType,
    shape: &[usize],
    bindings: &HashMap<String, i64>,
) -> Result<(), String> {
    match declared.shape.eval(bindings) {
        Some(want) if want == shape => Ok(()),
        Some(want) => Err(format!(
            "shape {shape:?}, declared {} = {want:?}",
            declared.shape
        )),
        None => Err(format!(
            "shape {shape:?}, declared {} has unbound symbols",
            declared.shape
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::DType;

    fn ty(dims: Vec<Dim>) -> TensorType {
        TensorType::new(DType::F32, dims)
    }

    #[test]
    fn binds_and_checks() {
        let mut b = HashMap::new();
        let t = ty(vec![Dim::fixed(1), Dim::sym("seq")]);
        bind_shape("x", &t, &[1, 7], &mut b).unwrap();
        assert_eq!(b["seq"], 7);
        assert!(bind_shape("y", &t, &[1, 8], &mut b)
            .unwrap_err()
            .contains("seq = 7"));
        assert!(bind_shape("z", &t, &[2, 7], &mut b).is_err());
        let sum = ty(vec![&Dim::sym("seq") + &Dim::fixed(1)]);
        bind_shape("w", &sum, &[9], &mut b).unwrap();
        assert!(check_shape(&sum, &[9], &b).is_err());
        assert!(check_shape(&sum, &[8], &b).is_ok());
    }
}
