//! Reductions: `ReduceSum`, `ReduceMean`, `ReduceMax`, `ReduceMin`,
//! `ReduceProd`, and `ReduceSumSquare`, `ReduceL1`, `ReduceL2`,
//! `ReduceLogSum`, `ReduceLogSumExp` composed from a sum as their ONNX
//! function bodies define them.
//!
//! The axes are the `axes` attribute before opset 18 (before 13 for
//! `ReduceSum`) and the optional second input from then on, which must be
//! known at compile time. Absent or empty axes reduce every axis, or none
//! when `noop_with_empty_axes = 1`.

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::reduce::{Reduce, ReduceKind};
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{Ctx, R};

/// What is applied before the reduction.
#[derive(Clone, Copy, PartialEq)]
enum Pre {
    None,
    Square,
    Unary(UnaryKind),
}

/// A reduction as ONNX defines it: `post(reduce(pre(x)))`.
#[derive(Clone, Copy)]
struct Recipe {
    kind: ReduceKind,
    /// The opset from which the axes are an input rather than an attribute.
    axes_input_since: i64,
    pre: Pre,
    post: Option<UnaryKind>,
}

const fn plain(kind: ReduceKind, axes_input_since: i64) -> Recipe {
    Recipe {
        kind,
        axes_input_since,
        pre: Pre::None,
        post: None,
    }
}

const fn sum_of(pre: Pre, post: Option<UnaryKind>) -> Recipe {
    Recipe {
        kind: ReduceKind::Sum,
        axes_input_since: 18,
        pre,
        post,
    }
}

pub fn register(reg: &mut OpMap) {
    use ReduceKind::*;
    reg.insert("ReduceSum", |ctx| reduce(ctx, plain(Sum, 13)));
    reg.insert("ReduceMean", |ctx| reduce(ctx, plain(Mean, 18)));
    reg.insert("ReduceMax", |ctx| reduce(ctx, plain(Max, 18)));
    reg.insert("ReduceMin", |ctx| reduce(ctx, plain(Min, 18)));
    reg.insert("ReduceProd", |ctx| reduce(ctx, plain(Prod, 18)));
    reg.insert("ReduceSumSquare", |ctx| {
        reduce(ctx, sum_of(Pre::Square, None))
    });
    reg.insert("ReduceL1", |ctx| {
        reduce(ctx, sum_of(Pre::Unary(UnaryKind::Abs), None))
    });
    reg.insert("ReduceL2", |ctx| {
        reduce(ctx, sum_of(Pre::Square, Some(UnaryKind::Sqrt)))
    });
    reg.insert("ReduceLogSum", |ctx| {
        reduce(ctx, sum_of(Pre::None, Some(UnaryKind::Log)))
    });
    reg.insert("ReduceLogSumExp", |ctx| {
        reduce(
            ctx,
            sum_of(Pre::Unary(UnaryKind::Exp), Some(UnaryKind::Log)),
        )
    });
}

fn reduce(ctx: &mut Ctx, r: Recipe) -> R<Vec<ValueId>> {
    let keep_dims = ctx.int("keepdims", 1)? != 0;
    let axes_input = ctx.opset() >= r.axes_input_since;
    let axes = if axes_input {
        ctx.expect_inputs(1, 2)?;
        match ctx.opt_input(1) {
            Some(_) => Some(ctx.known_ints(1, "axes")?),
            None => None,
        }
    } else {
        ctx.expect_inputs(1, 1)?;
        ctx.opt_ints("axes")?
    };
    let noop = axes_input && ctx.int("noop_with_empty_axes", 0)? != 0;
    let axes = match axes {
        Some(a) if !a.is_empty() => Some(a),
        _ if noop => Some(Vec::new()),
        _ => None,
    };
    let mut x = ctx.input(0)?;
    x = match r.pre {
        Pre::None => x,
        Pre::Square => ctx.add1(Binary::new(BinaryKind::Mul), &[x, x])?,
        Pre::Unary(kind) => ctx.add1(Unary { kind }, &[x])?,
    };
    let mut y = ctx.add1(Reduce::new(r.kind, axes, keep_dims), &[x])?;
    if let Some(kind) = r.post {
        y = ctx.add1(Unary { kind }, &[y])?;
    }
    one(y)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use onnx_protobuf::tensor_proto::DataType;
    use onnx_protobuf::{AttributeProto, ModelProto};
    use slmcc_ir::Tensor;

    fn reduce(
        opset: i64,
        op: &str,
        axes: Option<&[i64]>,
        attrs: Vec<AttributeProto>,
    ) -> ModelProto {
        let mut inputs = vec!["x"];
        let mut inits = vec![];
        if let Some(a) = axes {
            inputs.push("axes");
            inits.push(i64_tensor("axes", &[a.len() as i64], a));
        }
        model(
            opset,
            vec![input("x", &["2", "seq", "4"])],
            &["y"],
            inits,
            vec![node(op, &inputs, &["y"], attrs)],
        )
    }

    #[test]
    fn axes_input_from_opset_18() {
        let text = import_text(&reduce(18, "ReduceMean", Some(&[-1]), vec![]));
        assert!(
            text.contains("%y = reduce_mean %x {axes = [-1]} : f32[2, seq, 1]"),
            "{text}"
        );
        let text = import_text(&reduce(
            13,
            "ReduceMean",
            None,
            vec![a_ints("axes", &[0, 2]), a_int("keepdims", 0)],
        ));
        assert!(
            text.contains("{axes = [0, 2], keep_dims = false} : f32[seq]"),
            "{text}"
        );
        let text = import_text(&reduce(13, "ReduceSum", Some(&[1]), vec![]));
        assert!(
            text.contains("reduce_sum %x {axes = [1]} : f32[2, 1, 4]"),
            "{text}"
        );
        // Opset 13 ReduceMean still takes the attribute, not an input.
        assert!(import_err(&reduce(13, "ReduceMean", Some(&[1]), vec![]))
            .contains("expects 1 input(s), got 2"));
    }

    #[test]
    fn empty_axes() {
        let text = import_text(&reduce(18, "ReduceMax", None, vec![a_int("keepdims", 0)]));
        assert!(
            text.contains("%y = reduce_max %x {keep_dims = false} : f32[]"),
            "{text}"
        );
        let text = import_text(&reduce(
            18,
            "ReduceMax",
            Some(&[]),
            vec![a_int("noop_with_empty_axes", 1)],
        ));
        assert!(
            text.contains("%y = reduce_max %x {axes = []} : f32[2, seq, 4]"),
            "{text}"
        );
    }

    #[test]
    fn axes_must_be_known() {
        let m = model(
            18,
            vec![
                input("x", &["2", "3"]),
                tensor_info("axes", DataType::INT64, &["1"]),
            ],
            &["y"],
            vec![],
            vec![node("ReduceMean", &["x", "axes"], &["y"], vec![])],
        );
        assert_eq!(
            import_err(&m),
            "test.onnx: node `reducemean_y` (ReduceMean, opset 18): axes must be known at compile time"
        );
    }

    #[test]
    fn sum_square_and_l2() {
        let x = Tensor::from_f32(vec![2, 2], vec![3.0, 4.0, 1.0, 2.0]);
        let m = model(
            18,
            vec![input("x", &["2", "2"])],
            &["y"],
            vec![i64_tensor("a", &[1], &[1])],
            vec![node("ReduceL2", &["x", "a"], &["y"], vec![])],
        );
        assert_close(
            run1(&m, std::slice::from_ref(&x)).as_f32().unwrap(),
            &[5.0, 5f32.sqrt()],
            1e-6,
        );
        let m = model(
            18,
            vec![input("x", &["2", "2"])],
            &["y"],
            vec![],
            vec![node(
                "ReduceSumSquare",
                &["x"],
                &["y"],
                vec![a_int("keepdims", 0)],
            )],
        );
        assert_close(
            run1(&m, std::slice::from_ref(&x)).as_f32().unwrap(),
            &[30.0],
            1e-6,
        );
        let m = model(
            18,
            vec![input("x", &["2", "2"])],
            &["y"],
            vec![],
            vec![node("ReduceLogSumExp", &["x"], &["y"], vec![])],
        );
        let want = [3f32, 4.0, 1.0, 2.0]
            .iter()
            .map(|v| v.exp())
            .sum::<f32>()
            .ln();
        assert_close(run1(&m, &[x]).as_f32().unwrap(), &[want], 1e-5);
    }
}
