//! Normalisations: `LayerNormalization` (output `Y` only; `stash_type` 1),
//! `Softmax` (opset 13 semantics, as every supported opset has) and
//! `LogSoftmax` (`log` of the `softmax`).

use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::softmax::Softmax;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("LayerNormalization", layer_norm);
    reg.insert("Softmax", softmax);
    reg.insert("LogSoftmax", log_softmax);
}

fn layer_norm(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 3)?;
    let axis = ctx.int("axis", -1)?;
    let eps = ctx.float("epsilon", 1e-5)?;
    ctx.int_only("stash_type", 1, " (statistics are computed in f32)")?;
    ctx.only_outputs(1, " (Mean and InvStdDev are training outputs)")?;
    let mut v = vec![ctx.input(0)?, ctx.input(1)?];
    v.extend(ctx.opt_input(2));
    one(ctx.add1(LayerNorm { axis, eps }, &v)?)
}

fn softmax(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let axis = ctx.int("axis", -1)?;
    let x = ctx.input(0)?;
    one(ctx.add1(Softmax { axis }, &[x])?)
}

fn log_softmax(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let axis = ctx.int("axis", -1)?;
    let x = ctx.input(0)?;
    let s = ctx.add1(Softmax { axis }, &[x])?;
    one(ctx.add1(
        Unary {
            kind: UnaryKind::Log,
        },
        &[s],
    )?)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use slmcc_ir::Tensor;

    fn ln(
        outputs: &[&str],
        attrs: Vec<onnx_protobuf::AttributeProto>,
    ) -> onnx_protobuf::ModelProto {
        model(
            17,
            vec![input("x", &["seq", "4"])],
            &["y"],
            vec![
                f32_tensor("g", &[4], &[1.0; 4]),
                f32_tensor("b", &[4], &[0.0; 4]),
            ],
            vec![node("LayerNormalization", &["x", "g", "b"], outputs, attrs)],
        )
    }

    #[test]
    fn layer_norm() {
        let text = import_text(&ln(&["y"], vec![a_float("epsilon", 1e-6)]));
        assert!(
            text.contains("%y = layer_norm %x, %g, %b {axis = -1, eps = 1e-6} : f32[seq, 4]"),
            "{text}"
        );
        // Unused optional outputs (empty names) are fine; used ones are not.
        assert!(import_text(&ln(&["y", "", ""], vec![])).contains("layer_norm"));
        let e = import_err(&ln(&["y", "mean"], vec![]));
        assert!(
            e.ends_with(
                "output 1 (`mean`) is not supported (Mean and InvStdDev are training outputs)"
            ),
            "{e}"
        );
        let e = import_err(&ln(&["y"], vec![a_int("stash_type", 0)]));
        assert!(
            e.ends_with(
                "attribute `stash_type` = 0 is not supported (statistics are computed in f32)"
            ),
            "{e}"
        );
    }

    #[test]
    fn softmax_and_log_softmax() {
        let x = Tensor::from_f32(vec![1, 2], vec![0.0, 0.0]);
        let m = model(
            13,
            vec![input("x", &["1", "2"])],
            &["y"],
            vec![],
            vec![node("Softmax", &["x"], &["y"], vec![])],
        );
        assert_close(
            run1(&m, std::slice::from_ref(&x)).as_f32().unwrap(),
            &[0.5, 0.5],
            1e-6,
        );
        let m = model(
            13,
            vec![input("x", &["1", "2"])],
            &["y"],
            vec![],
            vec![node("LogSoftmax", &["x"], &["y"], vec![a_int("axis", 1)])],
        );
        assert_close(run1(&m, &[x]).as_f32().unwrap(), &[-(2f32.ln()); 2], 1e-6);
    }
}
