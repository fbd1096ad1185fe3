//! Activations composed from IR element-wise ops: `Gelu` (opset 20, exact
//! or `tanh`), `LeakyRelu`, `PRelu`, `Elu`, `HardSigmoid`, `HardSwish`,
//! `Softplus`, `Mish`, `Swish` (opset 24), each as its ONNX function body
//! defines it.

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ops::where_::Where;
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{fail, Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("Gelu", gelu);
    reg.insert("LeakyRelu", leaky_relu);
    reg.insert("PRelu", prelu);
    reg.insert("Elu", elu);
    reg.insert("HardSigmoid", hard_sigmoid);
    reg.insert("HardSwish", hard_swish);
    reg.insert("Softplus", softplus);
    reg.insert("Mish", mish);
    reg.insert("Swish", swish);
}

fn bin(ctx: &mut Ctx, kind: BinaryKind, a: ValueId, b: ValueId) -> R<ValueId> {
    ctx.add1(Binary::new(kind), &[a, b])
}

fn un(ctx: &mut Ctx, kind: UnaryKind, x: ValueId) -> R<ValueId> {
    ctx.add1(Unary { kind }, &[x])
}

/// The single float operand.
fn float_input(ctx: &mut Ctx) -> R<ValueId> {
    let x = ctx.input(0)?;
    if !ctx.ty(x).dtype.is_float() {
        fail!("needs a float input, got {}", ctx.ty(x));
    }
    Ok(x)
}

/// `where(x < 0, neg, x)`.
fn where_negative(ctx: &mut Ctx, x: ValueId, neg: ValueId) -> R<ValueId> {
    let zero = ctx.scalar(ctx.ty(x).dtype, 0.0)?;
    let lt = bin(ctx, BinaryKind::Less, x, zero)?;
    ctx.add1(Where, &[lt, neg, x])
}

fn leaky_relu(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let alpha = ctx.float("alpha", 0.01)?;
    let x = float_input(ctx)?;
    let a = ctx.scalar(ctx.ty(x).dtype, alpha as f64)?;
    let ax = bin(ctx, BinaryKind::Mul, x, a)?;
    one(where_negative(ctx, x, ax)?)
}

fn prelu(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let x = float_input(ctx)?;
    let slope = ctx.input(1)?;
    let sx = bin(ctx, BinaryKind::Mul, x, slope)?;
    if ctx.ty(sx) != ctx.ty(x) {
        fail!(
            "slope {} does not broadcast to {}",
            ctx.ty(slope),
            ctx.ty(x)
        );
    }
    one(where_negative(ctx, x, sx)?)
}

fn elu(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let alpha = ctx.float("alpha", 1.0)?;
    let x = float_input(ctx)?;
    let dt = ctx.ty(x).dtype;
    let e = un(ctx, UnaryKind::Exp, x)?;
    let one_c = ctx.scalar(dt, 1.0)?;
    let em1 = bin(ctx, BinaryKind::Sub, e, one_c)?;
    let a = ctx.scalar(dt, alpha as f64)?;
    let neg = bin(ctx, BinaryKind::Mul, em1, a)?;
    one(where_negative(ctx, x, neg)?)
}

/// `max(0, min(1, alpha * x + beta))`.
fn hard_sigmoid_of(ctx: &mut Ctx, x: ValueId, alpha: f32, beta: f32) -> R<ValueId> {
    let dt = ctx.ty(x).dtype;
    let a = ctx.scalar(dt, alpha as f64)?;
    let b = ctx.scalar(dt, beta as f64)?;
    let ax = bin(ctx, BinaryKind::Mul, x, a)?;
    let axb = bin(ctx, BinaryKind::Add, ax, b)?;
    let one_c = ctx.scalar(dt, 1.0)?;
    let zero = ctx.scalar(dt, 0.0)?;
    let lo = bin(ctx, BinaryKind::Min, axb, one_c)?;
    bin(ctx, BinaryKind::Max, lo, zero)
}

fn hard_sigmoid(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let alpha = ctx.float("alpha", 0.2)?;
    let beta = ctx.float("beta", 0.5)?;
    let x = float_input(ctx)?;
    one(hard_sigmoid_of(ctx, x, alpha, beta)?)
}

fn hard_swish(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let x = float_input(ctx)?;
    let h = hard_sigmoid_of(ctx, x, 1.0 / 6.0, 0.5)?;
    one(bin(ctx, BinaryKind::Mul, x, h)?)
}

/// `log(exp(x) + 1)`.
fn softplus_of(ctx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let e = un(ctx, UnaryKind::Exp, x)?;
    let one_c = ctx.scalar(ctx.ty(x).dtype, 1.0)?;
    let s = bin(ctx, BinaryKind::Add, e, one_c)?;
    un(ctx, UnaryKind::Log, s)
}

fn softplus(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let x = float_input(ctx)?;
    one(softplus_of(ctx, x)?)
}

fn mish(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let x = float_input(ctx)?;
    let sp = softplus_of(ctx, x)?;
    let t = un(ctx, UnaryKind::Tanh, sp)?;
    one(bin(ctx, BinaryKind::Mul, x, t)?)
}

/// `Swish` (opset 24): `x * sigmoid(alpha * x)`; with the default `alpha`
/// of 1 the SiLU that `swiglu` fusion recognises.
fn swish(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let alpha = ctx.float("alpha", 1.0)?;
    let x = float_input(ctx)?;
    let z = if alpha == 1.0 {
        x
    } else {
        let a = ctx.scalar(ctx.ty(x).dtype, f64::from(alpha))?;
        bin(ctx, BinaryKind::Mul, x, a)?
    };
    let s = un(ctx, UnaryKind::Sigmoid, z)?;
    one(bin(ctx, BinaryKind::Mul, x, s)?)
}

/// `Gelu` (opset 20): `0.5 * x * (1 + erf(x / sqrt(2)))`, or with
/// `approximate = "tanh"`, `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`.
fn gelu(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let approx = ctx
        .opt_string("approximate")?
        .unwrap_or_else(|| "none".into());
    let x = ctx.input(0)?;
    let dt = ctx.ty(x).dtype;
    if !dt.is_float() {
        fail!("needs a float input, got {}", ctx.ty(x));
    }
    let mul = Binary::new(BinaryKind::Mul);
    let add = Binary::new(BinaryKind::Add);
    let inner = match approx.as_str() {
        "none" => {
            let c = ctx.scalar(dt, std::f64::consts::FRAC_1_SQRT_2)?;
            let s = ctx.add1(mul, &[x, c])?;
            ctx.add1(
                Unary {
                    kind: UnaryKind::Erf,
                },
                &[s],
            )?
        }
        "tanh" => {
            let x2 = ctx.add1(mul, &[x, x])?;
            let x3 = ctx.add1(mul, &[x2, x])?;
            let k = ctx.scalar(dt, 0.044715)?;
            let kx3 = ctx.add1(mul, &[x3, k])?;
            let sum = ctx.add1(add, &[x, kx3])?;
            let c = ctx.scalar(dt, (2.0 / std::f64::consts::PI).sqrt())?;
            let s = ctx.add1(mul, &[sum, c])?;
            ctx.add1(
                Unary {
                    kind: UnaryKind::Tanh,
                },
                &[s],
            )?
        }
        other => fail!("attribute `approximate` = \"{other}\" is not supported (none or tanh)"),
    };
    let one_c = ctx.scalar(dt, 1.0)?;
    let half = ctx.scalar(dt, 0.5)?;
    let t = ctx.add1(add, &[inner, one_c])?;
    let hx = ctx.add1(mul, &[x, half])?;
    one(ctx.add1(mul, &[hx, t])?)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use slmcc_ir::Tensor;

    fn act(op: &str, attrs: Vec<onnx_protobuf::AttributeProto>, xs: &[f32]) -> Vec<f32> {
        let opset = if op == "Gelu" { 20 } else { 18 };
        let n = xs.len().to_string();
        let m = model(
            opset,
            vec![input("x", &[&n])],
            &["y"],
            vec![],
            vec![node(op, &["x"], &["y"], attrs)],
        );
        run1(&m, &[Tensor::from_f32(vec![xs.len()], xs.to_vec())]).to_f32_vec()
    }

    #[test]
    fn piecewise_activations() {
        let xs = [-2.0f32, 0.0, 3.0];
        assert_close(
            &act("LeakyRelu", vec![a_float("alpha", 0.5)], &xs),
            &[-1.0, 0.0, 3.0],
            1e-6,
        );
        assert_close(
            &act("Elu", vec![], &xs),
            &[(-2f32).exp() - 1.0, 0.0, 3.0],
            1e-6,
        );
        assert_close(&act("HardSigmoid", vec![], &xs), &[0.1, 0.5, 1.0], 1e-6);
        assert_close(
            &act("HardSwish", vec![], &xs),
            &[-2.0 * (1.0 / 6.0), 0.0, 3.0],
            1e-6,
        );
        let sp = |v: f32| (v.exp() + 1.0).ln();
        assert_close(&act("Softplus", vec![], &xs), &xs.map(sp), 1e-6);
        assert_close(
            &act("Mish", vec![], &xs),
            &xs.map(|v| v * sp(v).tanh()),
            1e-6,
        );
        let m = model(
            18,
            vec![input("x", &["2", "2"])],
            &["y"],
            vec![f32_tensor("s", &[2], &[0.1, 0.2])],
            vec![node("PRelu", &["x", "s"], &["y"], vec![])],
        );
        let y = run1(
            &m,
            &[Tensor::from_f32(vec![2, 2], vec![-1.0, -1.0, 1.0, -2.0])],
        );
        assert_close(y.as_f32().unwrap(), &[-0.1, -0.2, 1.0, -0.4], 1e-6);
    }

    #[test]
    fn gelu_both_forms() {
        let xs = [-2.0f32, -0.5, 0.0, 1.0, 3.0];
        let x = Tensor::from_f32(vec![5], xs.to_vec());
        let erf = |v: f32| 0.5 * v * (1.0 + erf_series(v / 2f32.sqrt()));
        let tanh = |v: f32| {
            0.5 * v
                * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh())
        };
        for (approx, f) in [("none", &erf as &dyn Fn(f32) -> f32), ("tanh", &tanh)] {
            let m = model(
                20,
                vec![input("x", &["5"])],
                &["y"],
                vec![],
                vec![node(
                    "Gelu",
                    &["x"],
                    &["y"],
                    vec![a_string("approximate", approx)],
                )],
            );
            let want: Vec<f32> = xs.iter().map(|&v| f(v)).collect();
            assert_close(
                run1(&m, std::slice::from_ref(&x)).as_f32().unwrap(),
                &want,
                1e-5,
            );
        }
    }

    /// erf by its series (enough terms for |x| <= 3).
    fn erf_series(x: f32) -> f32 {
        let x = x as f64;
        let mut sum = 0.0;
        let mut term = x;
        for n in 0..60 {
            sum += term / (2 * n + 1) as f64;
            term *= -x * x / (n + 1) as f64;
        }
        (sum * 2.0 / std::f64::consts::PI.sqrt()) as f32
    }
}
