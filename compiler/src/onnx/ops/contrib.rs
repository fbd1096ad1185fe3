//! onnxruntime's normalisation contrib ops, which its transformer optimizer
//! and onnxruntime-genai's model builder write, mapped onto the IR's
//! `rms_norm` (the fusion pass then makes `add` + `rms_norm` one
//! `add_rms_norm`):
//!
//! - `SimplifiedLayerNormalization(X, scale)` (in the default domain, where
//!   onnxruntime registers it, not `com.microsoft`): `X / √(mean(X²) + ε) ·
//!   scale` over the last axis, imported as opset 23's `RMSNormalization`
//!   (`axis` = -1 or rank - 1, `stash_type` 1). The `inv_std_var` output
//!   is not supported.
//! - `SkipSimplifiedLayerNormalization(input, skip, gamma[, bias])`
//!   (`com.microsoft`): the same normalisation of `input + skip (+ bias)`,
//!   whose sum is the optional output 3 (`input_skip_bias_sum`). The
//!   `mean` and `inv_std_var` outputs (1 and 2) are not supported.
//!
//! Other `com.microsoft` ops are refused with their name and domain.

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::ValueId;

use super::OpMap;
use crate::onnx::context::{fail, Ctx, R};

/// The `com.microsoft` domain as models name it.
pub const DOMAIN: &str = "com.microsoft";

/// Registers the ops that onnxruntime puts in the default domain.
pub fn register_default(reg: &mut OpMap) {
    // The same op as opset 23's `RMSNormalization`, attributes and all.
    reg.insert("SimplifiedLayerNormalization", super::transformer::rms_norm);
}

/// Registers the `com.microsoft` ops.
pub fn register(reg: &mut OpMap) {
    reg.insert(
        "SkipSimplifiedLayerNormalization",
        skip_simplified_layer_norm,
    );
}

fn skip_simplified_layer_norm(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 4)?;
    let (x, skip, gamma) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let eps = ctx.float("epsilon", 1e-12)?;
    for (i, what) in [(1, "mean"), (2, "inverse standard deviation")] {
        if ctx.output_used(i) {
            fail!("output {i} (the {what}) is not supported");
        }
    }
    ctx.only_outputs(4, "")?;
    let mut sum = ctx.add1(Binary::new(BinaryKind::Add), &[x, skip])?;
    if let Some(bias) = ctx.opt_input(3) {
        sum = ctx.add1(Binary::new(BinaryKind::Add), &[sum, bias])?;
    }
    let y = ctx.add1(RmsNorm { eps, offset: 0.0 }, &[sum, gamma])?;
    // Outputs 1 and 2 are unnamed here (checked above): any value binds
    // nothing to them.
    Ok(vec![y, y, y, sum])
}

#[cfg(test)]
mod tests {
    use super::DOMAIN;
    use crate::onnx::testutil::*;

    /// A model of one `com.microsoft` node `op` over inputs `x`, `s`
    /// (`[2, 4]`) and the initializer `g` (`[4]`).
    fn microsoft(op: &str, inputs: &[&str], outputs: &[&str]) -> onnx_protobuf::ModelProto {
        let mut n = node(op, inputs, outputs, vec![]);
        n.domain = DOMAIN.to_string();
        let used: Vec<&str> = outputs.iter().copied().filter(|o| !o.is_empty()).collect();
        let mut m = model(
            17,
            vec![input("x", &["2", "4"]), input("s", &["2", "4"])],
            &used,
            vec![f32_tensor("g", &[4], &[1.0; 4])],
            vec![n],
        );
        import_domain(&mut m, DOMAIN, 1);
        m
    }

    #[test]
    fn statistics_outputs_are_refused_by_name() {
        let op = "SkipSimplifiedLayerNormalization";
        let e = import_err(&microsoft(op, &["x", "s", "g"], &["y", "mean"]));
        assert!(e.contains("output 1 (the mean) is not supported"), "{e}");
        let e = import_err(&microsoft(op, &["x", "s", "g"], &["y", "", "inv"]));
        assert!(
            e.contains("output 2 (the inverse standard deviation)"),
            "{e}"
        );
        let m = model(
            17,
            vec![input("x", &["2", "4"])],
            &["y", "inv"],
            vec![f32_tensor("g", &[4], &[1.0; 4])],
            vec![node(
                "SimplifiedLayerNormalization",
                &["x", "g"],
                &["y", "inv"],
                vec![],
            )],
        );
        let e = import_err(&m);
        assert!(e.contains("output 1 (`inv`) is not supported"), "{e}");
    }

    #[test]
    fn an_unknown_contrib_op_is_refused_with_its_name_and_domain() {
        let e = import_err(&microsoft("FancyAttention", &["x", "s"], &["y"]));
        assert!(
            e.contains("op `FancyAttention` of domain `com.microsoft` is not supported"),
            "{e}"
        );
    }
}
