//! `Cast` (`to` mapped from the ONNX data type; unsupported types are an
//! error) and `CastLike` (the dtype of the second operand).

use slmcc_ir::ops::cast::Cast;
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("Cast", cast);
    reg.insert("CastLike", cast_like);
}

fn cast(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let to = ctx.dtype("to")?;
    // `saturate` (opset 19) only concerns float8 targets, which the IR lacks.
    ctx.ignore_attrs(&["saturate"]);
    let x = ctx.input(0)?;
    one(ctx.add1(Cast { to }, &[x])?)
}

fn cast_like(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    ctx.ignore_attrs(&["saturate"]);
    let (x, like) = (ctx.input(0)?, ctx.input(1)?);
    let to = ctx.ty(like).dtype;
    one(ctx.add1(Cast { to }, &[x])?)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use onnx_protobuf::tensor_proto::DataType;

    #[test]
    fn cast_targets() {
        let m = |to: DataType| {
            model(
                19,
                vec![input("x", &["2"])],
                &["y"],
                vec![],
                vec![node(
                    "Cast",
                    &["x"],
                    &["y"],
                    vec![a_int("to", to as i64), a_int("saturate", 1)],
                )],
            )
        };
        assert!(import_text(&m(DataType::FLOAT16)).contains("%y = cast %x {to = f16} : f16[2]"));
        assert!(import_text(&m(DataType::BOOL)).contains("{to = bool}"));
        assert!(
            import_err(&m(DataType::DOUBLE)).ends_with("`to`: data type DOUBLE is not supported")
        );
        let like = model(
            15,
            vec![
                input("x", &["2"]),
                tensor_info("t", DataType::INT32, &["1"]),
            ],
            &["y"],
            vec![],
            vec![node("CastLike", &["x", "t"], &["y"], vec![])],
        );
        assert!(import_text(&like).contains("%y = cast %x {to = i32} : i32[2]"));
    }
}
