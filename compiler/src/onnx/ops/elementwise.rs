//! Element-wise arithmetic: the binary ops (`Add`, `Sub`, `Mul`, `Div`,
//! `Pow`, `Mod`), the unary ones (`Neg`, `Sqrt`, `Exp`, `Erf`, `Sigmoid`,
//! ...), the variadic `Max`, `Min`, `Sum`, `Mean` (folded pairwise, with
//! broadcasting).

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{fail, Ctx, R};

macro_rules! register_kinds {
    ($reg:ident, $f:ident, $kind:ident: $($name:literal => $variant:ident),* $(,)?) => {
        $( $reg.insert($name, |ctx| $f(ctx, $kind::$variant)); )*
    };
}

pub fn register(reg: &mut OpMap) {
    register_kinds!(reg, binary, BinaryKind:
        "Add" => Add, "Sub" => Sub, "Mul" => Mul, "Div" => Div, "Pow" => Pow,
    );
    register_kinds!(reg, unary, UnaryKind:
        "Neg" => Neg, "Abs" => Abs, "Sqrt" => Sqrt, "Reciprocal" => Reciprocal,
        "Exp" => Exp, "Log" => Log, "Erf" => Erf, "Tanh" => Tanh, "Sigmoid" => Sigmoid,
        "Cos" => Cos, "Sin" => Sin, "Relu" => Relu, "Floor" => Floor, "Ceil" => Ceil,
        "Sign" => Sign,
    );
    reg.insert("Max", |ctx| variadic(ctx, BinaryKind::Max, false));
    reg.insert("Min", |ctx| variadic(ctx, BinaryKind::Min, false));
    reg.insert("Sum", |ctx| variadic(ctx, BinaryKind::Add, false));
    reg.insert("Mean", |ctx| variadic(ctx, BinaryKind::Add, true));
    reg.insert("Mod", modulo);
}

/// A binary op with NumPy broadcasting.
pub fn binary(ctx: &mut Ctx, kind: BinaryKind) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let (a, b) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add1(Binary::new(kind), &[a, b])?)
}

/// A unary op.
pub fn unary(ctx: &mut Ctx, kind: UnaryKind) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let x = ctx.input(0)?;
    one(ctx.add1(Unary { kind }, &[x])?)
}

/// `Max`, `Min`, `Sum` (and `Mean`, which divides the sum by the count):
/// any number of operands, folded left to right.
fn variadic(ctx: &mut Ctx, kind: BinaryKind, mean: bool) -> R<Vec<ValueId>> {
    let xs = ctx.all_inputs()?;
    let Some((&first, rest)) = xs.split_first() else {
        fail!("needs at least one input");
    };
    let mut acc = first;
    for &x in rest {
        acc = ctx.add1(Binary::new(kind), &[acc, x])?;
    }
    if mean && !rest.is_empty() {
        let n = ctx.scalar(ctx.ty(first).dtype, xs.len() as f64)?;
        acc = ctx.add1(Binary::new(BinaryKind::Div), &[acc, n])?;
    }
    one(acc)
}

/// `Mod`: `fmod = 0` (integers only) is the IR `mod` (the sign of the
/// divisor); `fmod = 1` is C's `fmod` (the sign of the dividend), composed
/// as `a - trunc(a / b) * b` (integer division truncates already; for
/// floats `trunc(q) = sign(q) * floor(abs(q))`).
fn modulo(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let fmod = ctx.int("fmod", 0)?;
    let (a, b) = (ctx.input(0)?, ctx.input(1)?);
    let dtype = ctx.ty(a).dtype;
    let bin = |k| Binary::new(k);
    match (fmod, dtype.is_float()) {
        (0, true) => fail!("fmod = 0 is not defined for {dtype} operands (set fmod = 1)"),
        (0, false) => one(ctx.add1(bin(BinaryKind::Mod), &[a, b])?),
        (1, is_float) => {
            let mut q = ctx.add1(bin(BinaryKind::Div), &[a, b])?;
            if is_float {
                let s = ctx.add1(
                    Unary {
                        kind: UnaryKind::Sign,
                    },
                    &[q],
                )?;
                let m = ctx.add1(
                    Unary {
                        kind: UnaryKind::Abs,
                    },
                    &[q],
                )?;
                let f = ctx.add1(
                    Unary {
                        kind: UnaryKind::Floor,
                    },
                    &[m],
                )?;
                q = ctx.add1(bin(BinaryKind::Mul), &[s, f])?;
            }
            let p = ctx.add1(bin(BinaryKind::Mul), &[q, b])?;
            one(ctx.add1(bin(BinaryKind::Sub), &[a, p])?)
        }
        (v, _) => fail!("attribute `fmod` must be 0 or 1, got {v}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use onnx_protobuf::tensor_proto::DataType;
    use slmcc_ir::Tensor;

    fn binary_model(
        op: &str,
        dt: DataType,
        attrs: Vec<onnx_protobuf::AttributeProto>,
    ) -> onnx_protobuf::ModelProto {
        model(
            13,
            vec![tensor_info("a", dt, &["4"]), tensor_info("b", dt, &["4"])],
            &["y"],
            vec![],
            vec![node(op, &["a", "b"], &["y"], attrs)],
        )
    }

    #[test]
    fn mod_follows_fmod() {
        let a = Tensor::from_f32(vec![4], vec![5.5, -5.5, 5.5, -5.5]);
        let b = Tensor::from_f32(vec![4], vec![2.0, 2.0, -2.0, -2.0]);
        let m = binary_model("Mod", DataType::FLOAT, vec![a_int("fmod", 1)]);
        assert_close(
            run1(&m, &[a, b]).as_f32().unwrap(),
            &[1.5, -1.5, 1.5, -1.5],
            1e-6,
        );
        let a = Tensor::from_i64(vec![4], vec![7, -7, 7, -7]);
        let b = Tensor::from_i64(vec![4], vec![3, 3, -3, -3]);
        let m = binary_model("Mod", DataType::INT64, vec![]);
        assert_eq!(
            run1(&m, &[a.clone(), b.clone()]).to_i64_vec(),
            vec![1, 2, -2, -1]
        );
        let m = binary_model("Mod", DataType::INT64, vec![a_int("fmod", 1)]);
        assert_eq!(run1(&m, &[a, b]).to_i64_vec(), vec![1, -1, 1, -1]);
        let m = binary_model("Mod", DataType::FLOAT, vec![]);
        assert!(import_err(&m).contains("fmod = 0 is not defined for f32"));
    }

    #[test]
    fn variadic_ops_broadcast() {
        let m = model(
            13,
            vec![
                input("a", &["2", "1"]),
                input("b", &["3"]),
                input("c", &["1"]),
            ],
            &["mx", "mean", "one"],
            vec![],
            vec![
                node("Max", &["a", "b", "c"], &["mx"], vec![]),
                node("Mean", &["a", "b"], &["mean"], vec![]),
                node("Sum", &["c"], &["one"], vec![]),
            ],
        );
        let module = try_import(&m).unwrap();
        let out = run(
            &module,
            &[
                Tensor::from_f32(vec![2, 1], vec![0.0, 5.0]),
                Tensor::from_f32(vec![3], vec![1.0, -1.0, 2.0]),
                Tensor::from_f32(vec![1], vec![0.5]),
            ],
        );
        assert_eq!(out[0].shape(), &[2, 3]);
        assert_eq!(out[0].as_f32().unwrap(), &[1.0, 0.5, 2.0, 5.0, 5.0, 5.0]);
        assert_eq!(out[1].as_f32().unwrap(), &[0.5, -0.5, 1.0, 3.0, 2.0, 3.5]);
        assert_eq!(out[2].as_f32().unwrap(), &[0.5]);
    }
}
