//! Comparisons and logic: `Equal`, `Less`, `LessOrEqual`, `Greater`,
//! `GreaterOrEqual`, `And`, `Or`, `Xor`, `Not`, `IsNaN`, `IsInf` (with
//! `detect_negative`/`detect_positive` composed from a sign test), `Where`.

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::constant_of_shape::ConstantOfShape;
use slmcc_ir::ops::shape_of::ShapeOf;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ops::where_::Where;
use slmcc_ir::{Tensor, ValueId};

use super::elementwise::{binary, unary};
use super::{one, OpMap};
use crate::onnx::context::{Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("Equal", |ctx| binary(ctx, BinaryKind::Equal));
    reg.insert("Less", |ctx| binary(ctx, BinaryKind::Less));
    reg.insert("LessOrEqual", |ctx| binary(ctx, BinaryKind::LessOrEqual));
    reg.insert("Greater", |ctx| binary(ctx, BinaryKind::Greater));
    reg.insert("GreaterOrEqual", |ctx| {
        binary(ctx, BinaryKind::GreaterOrEqual)
    });
    reg.insert("And", |ctx| binary(ctx, BinaryKind::And));
    reg.insert("Or", |ctx| binary(ctx, BinaryKind::Or));
    reg.insert("Xor", |ctx| binary(ctx, BinaryKind::Xor));
    reg.insert("Not", |ctx| unary(ctx, UnaryKind::Not));
    reg.insert("IsNaN", |ctx| unary(ctx, UnaryKind::IsNan));
    reg.insert("IsInf", is_inf);
    reg.insert("Where", where_);
}

fn is_inf(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let neg = ctx.int("detect_negative", 1)? != 0;
    let pos = ctx.int("detect_positive", 1)? != 0;
    let x = ctx.input(0)?;
    let inf = ctx.add1(
        Unary {
            kind: UnaryKind::IsInf,
        },
        &[x],
    )?;
    let sign = match (neg, pos) {
        (true, true) => return one(inf),
        (false, true) => BinaryKind::Greater,
        (true, false) => BinaryKind::Less,
        (false, false) => {
            let s = ctx.add1(ShapeOf::default(), &[x])?;
            let f = Tensor::from_bool(Vec::new(), vec![false]);
            return one(ctx.add1(ConstantOfShape { value: f }, &[s])?);
        }
    };
    let zero = ctx.scalar(ctx.ty(x).dtype, 0.0)?;
    let side = ctx.add1(Binary::new(sign), &[x, zero])?;
    one(ctx.add1(Binary::new(BinaryKind::And), &[inf, side])?)
}

fn where_(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 3)?;
    let v = ctx.all_inputs()?;
    one(ctx.add1(Where, &v)?)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use slmcc_ir::Tensor;

    #[test]
    fn is_inf_sides() {
        let x = Tensor::from_f32(
            vec![4],
            vec![f32::INFINITY, f32::NEG_INFINITY, 1.0, f32::NAN],
        );
        for (neg, pos, want) in [
            (1, 1, [true, true, false, false]),
            (0, 1, [true, false, false, false]),
            (1, 0, [false, true, false, false]),
            (0, 0, [false; 4]),
        ] {
            let attrs = vec![a_int("detect_negative", neg), a_int("detect_positive", pos)];
            let m = model(
                13,
                vec![input("x", &["4"])],
                &["y"],
                vec![],
                vec![node("IsInf", &["x"], &["y"], attrs)],
            );
            assert_eq!(
                run1(&m, std::slice::from_ref(&x)).as_bool().unwrap(),
                &want,
                "{neg} {pos}"
            );
        }
    }

    #[test]
    fn comparisons_and_where() {
        let m = model(
            13,
            vec![input("a", &["3"]), input("b", &["3"])],
            &["y"],
            vec![],
            vec![
                node("LessOrEqual", &["a", "b"], &["le"], vec![]),
                node("Not", &["le"], &["gt"], vec![]),
                node("Where", &["gt", "a", "b"], &["y"], vec![]),
            ],
        );
        let y = run1(
            &m,
            &[
                Tensor::from_f32(vec![3], vec![1.0, 5.0, 2.0]),
                Tensor::from_f32(vec![3], vec![3.0, 4.0, 2.0]),
            ],
        );
        assert_eq!(y.as_f32().unwrap(), &[3.0, 5.0, 2.0]);
    }
}
