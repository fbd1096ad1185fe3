//! `Identity`, `Dropout` (inference: the identity; the mask output and
//! training mode are not supported), `CumSum` (the axis operand must be
//! known), `Trilu`, `Clip` (`max`/`min` with the optional bounds).

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::cum_sum::CumSum;
use slmcc_ir::ops::trilu::Trilu;
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{fail, Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("Identity", identity);
    reg.insert("Dropout", dropout);
    reg.insert("CumSum", cum_sum);
    reg.insert("Trilu", trilu);
    reg.insert("Clip", clip);
}

/// The operand itself; the import loop gives it the output's name with an
/// IR `identity` node.
fn identity(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    one(ctx.input(0)?)
}

fn dropout(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 3)?;
    ctx.ignore_attrs(&["seed"]);
    ctx.only_outputs(1, " (the dropout mask)")?;
    if ctx.opt_input(2).is_some() {
        match ctx.known_tensor(2) {
            Some(t) if t.len() == 1 && t.get_i64(0) == 0 => {}
            Some(_) => fail!("training_mode = true is not supported"),
            None => fail!("training_mode must be known at compile time"),
        }
    }
    one(ctx.input(0)?)
}

fn cum_sum(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let exclusive = ctx.int("exclusive", 0)? != 0;
    let reverse = ctx.int("reverse", 0)? != 0;
    let axis = match ctx.known_ints(1, "axis")?[..] {
        [a] => a,
        ref v => fail!("axis must be a single value, got {v:?}"),
    };
    let x = ctx.input(0)?;
    one(ctx.add1(
        CumSum {
            axis,
            exclusive,
            reverse,
        },
        &[x],
    )?)
}

fn trilu(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 2)?;
    let upper = ctx.int("upper", 1)? != 0;
    let mut v = vec![ctx.input(0)?];
    v.extend(ctx.opt_input(1));
    one(ctx.add1(Trilu { upper }, &v)?)
}

fn clip(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 3)?;
    let mut y = ctx.input(0)?;
    if let Some(lo) = ctx.opt_input(1) {
        y = ctx.add1(Binary::new(BinaryKind::Max), &[y, lo])?;
    }
    if let Some(hi) = ctx.opt_input(2) {
        y = ctx.add1(Binary::new(BinaryKind::Min), &[y, hi])?;
    }
    one(y)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use onnx_protobuf::tensor_proto::DataType;
    use slmcc_ir::Tensor;

    #[test]
    fn dropout_is_the_identity_in_inference() {
        let m = |outs: &[&str]| {
            model(
                13,
                vec![input("x", &["2"])],
                &["y"],
                vec![],
                vec![node("Dropout", &["x"], outs, vec![a_int("seed", 3)])],
            )
        };
        assert!(import_text(&m(&["y"])).contains("%y = identity %x : f32[2]"));
        assert!(import_err(&m(&["y", "mask"]))
            .ends_with("output 1 (`mask`) is not supported (the dropout mask)"));
        let mut t = onnx_protobuf::TensorProto::new();
        t.name = "train".into();
        t.data_type = DataType::BOOL as i32;
        t.int32_data = vec![1];
        let m = model(
            13,
            vec![input("x", &["2"])],
            &["y"],
            vec![t],
            vec![node("Dropout", &["x", "", "train"], &["y"], vec![])],
        );
        assert!(import_err(&m).ends_with("training_mode = true is not supported"));
    }

    #[test]
    fn cum_sum_trilu_clip() {
        let m = model(
            14,
            vec![input("x", &["2", "2"])],
            &["c", "t", "k"],
            vec![
                i64_tensor("ax", &[], &[1]),
                f32_tensor("lo", &[], &[0.5]),
                f32_tensor("hi", &[], &[2.5]),
            ],
            vec![
                node("CumSum", &["x", "ax"], &["c"], vec![a_int("reverse", 1)]),
                node("Trilu", &["x"], &["t"], vec![a_int("upper", 0)]),
                node("Clip", &["x", "lo", "hi"], &["k"], vec![]),
            ],
        );
        let module = try_import(&m).unwrap();
        let out = run(
            &module,
            &[Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0])],
        );
        assert_eq!(out[0].as_f32().unwrap(), &[3.0, 2.0, 7.0, 4.0]);
        assert_eq!(out[1].as_f32().unwrap(), &[1.0, 0.0, 3.0, 4.0]);
        assert_eq!(out[2].as_f32().unwrap(), &[1.0, 2.0, 2.5, 2.5]);
    }
}
