//! `Constant`: `value` (a tensor; large float ones become a weight named
//! after the output, as initializers do), `value_float(s)`,
//! `value_int(s)`. String and sparse values are not supported.

use slmcc_ir::{Tensor, ValueId};

use super::{one, OpMap};
use crate::onnx::context::{fail, Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("Constant", constant);
}

fn constant(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(0, 0)?;
    for unsupported in ["sparse_value", "value_string", "value_strings"] {
        if ctx.has_attr(unsupported) {
            fail!("attribute `{unsupported}` is not supported");
        }
    }
    let mut found = Vec::new();
    if let Some(t) = ctx.opt_tensor("value")? {
        found.push(t);
    }
    if let Some(f) = ctx.opt_float("value_float")? {
        found.push(Tensor::scalar_f32(f));
    }
    if let Some(v) = ctx.opt_floats("value_floats")? {
        found.push(Tensor::from_f32(vec![v.len()], v));
    }
    if let Some(i) = ctx.opt_int("value_int")? {
        found.push(Tensor::scalar_i64(i));
    }
    if let Some(v) = ctx.opt_ints("value_ints")? {
        found.push(Tensor::from_i64(vec![v.len()], v));
    }
    match found.len() {
        1 => {
            let t = found.remove(0);
            one(ctx.tensor_value(t)?)
        }
        0 => fail!("needs a value attribute"),
        n => fail!("has {n} value attributes, expected one"),
    }
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;

    #[test]
    fn constant_forms() {
        let m = |attrs| {
            model(
                13,
                vec![],
                &["c"],
                vec![],
                vec![node("Constant", &[], &["c"], attrs)],
            )
        };
        assert!(import_text(&m(vec![a_ints("value_ints", &[1, 2])]))
            .contains("%c = constant {value = [1, 2]} : i64[2]"));
        assert!(import_text(&m(vec![a_float("value_float", 0.5)]))
            .contains("%c = constant {value = 0.5} : f32[]"));
        assert!(import_text(&m(vec![a_int("value_int", 3)]))
            .contains("%c = constant {value = 3} : i64[]"));
        assert!(import_err(&m(vec![a_string("value_string", "x")]))
            .ends_with("attribute `value_string` is not supported"));
        assert!(import_err(&m(vec![])).ends_with("needs a value attribute"));
        assert!(
            import_err(&m(vec![a_int("value_int", 3), a_float("value_float", 1.0)]))
                .ends_with("has 2 value attributes, expected one")
        );
    }
}
