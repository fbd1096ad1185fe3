//! `MatMul` (the IR `matmul`) and `Gemm`, which becomes
//! `alpha * (A' @ B') + beta * C` with `transpose` for `transA`/`transB`
//! and the scaling and addition left out when `alpha = 1`, `beta = 1` or
//! `C` is absent.

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::matmul::MatMul;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{fail, Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("MatMul", matmul);
    reg.insert("Gemm", gemm);
}

fn matmul(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let (a, b) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add1(MatMul, &[a, b])?)
}

fn gemm(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 3)?;
    let alpha = ctx.float("alpha", 1.0)?;
    let beta = ctx.float("beta", 1.0)?;
    let trans_a = ctx.int("transA", 0)? != 0;
    let trans_b = ctx.int("transB", 0)? != 0;
    let (mut a, mut b) = (ctx.input(0)?, ctx.input(1)?);
    for v in [a, b] {
        if ctx.ty(v).rank() != 2 {
            fail!(
                "A and B must be matrices, got {} and {}",
                ctx.ty(a),
                ctx.ty(b)
            );
        }
    }
    let dtype = ctx.ty(a).dtype;
    let t = Transpose { perm: vec![1, 0] };
    if trans_a {
        a = ctx.add1(t.clone(), &[a])?;
    }
    if trans_b {
        b = ctx.add1(t, &[b])?;
    }
    let mut y = ctx.add1(MatMul, &[a, b])?;
    if alpha != 1.0 {
        let s = ctx.scalar(dtype, alpha as f64)?;
        y = ctx.add1(Binary::new(BinaryKind::Mul), &[y, s])?;
    }
    if let Some(mut c) = ctx.opt_input(2) {
        if beta != 0.0 {
            if beta != 1.0 {
                let s = ctx.scalar(dtype, beta as f64)?;
                c = ctx.add1(Binary::new(BinaryKind::Mul), &[c, s])?;
            }
            let sum = ctx.add1(Binary::new(BinaryKind::Add), &[y, c])?;
            if ctx.ty(sum) != ctx.ty(y) {
                fail!(
                    "C {} does not broadcast to the product {}",
                    ctx.ty(c),
                    ctx.ty(y)
                );
            }
            y = sum;
        }
    }
    one(y)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use slmcc_ir::Tensor;

    /// Gemm of A [2, 3] (or its transpose) and B [3, 2] (or its transpose),
    /// C [2] when given, against a direct computation.
    fn check(trans_a: bool, trans_b: bool, alpha: f32, beta: f32, with_c: bool) {
        let a: Vec<f32> = (0..6).map(|v| v as f32 - 2.0).collect();
        let b: Vec<f32> = (0..6).map(|v| (v as f32) * 0.5).collect();
        let c = [10.0f32, -1.0];
        let (at, bt) = (
            |i: usize, k: usize| a[i * 3 + k],
            |k: usize, j: usize| b[k * 2 + j],
        );
        let mut want = vec![0f32; 4];
        for i in 0..2 {
            for j in 0..2 {
                let dot: f32 = (0..3).map(|k| at(i, k) * bt(k, j)).sum();
                want[i * 2 + j] = alpha * dot + if with_c { beta * c[j] } else { 0.0 };
            }
        }
        // Feed transposed data when the node transposes it back.
        let transpose = |v: &[f32], r: usize, c: usize| -> Vec<f32> {
            (0..c)
                .flat_map(|j| (0..r).map(move |i| v[i * c + j]))
                .collect()
        };
        let (a_in, a_dims) = if trans_a {
            (transpose(&a, 2, 3), ["3", "2"])
        } else {
            (a.clone(), ["2", "3"])
        };
        let (b_in, b_dims) = if trans_b {
            (transpose(&b, 3, 2), ["2", "3"])
        } else {
            (b.clone(), ["3", "2"])
        };
        let mut attrs = vec![
            a_int("transA", trans_a as i64),
            a_int("transB", trans_b as i64),
        ];
        attrs.push(a_float("alpha", alpha));
        attrs.push(a_float("beta", beta));
        let mut inputs = vec!["a", "b"];
        let mut inits = vec![];
        if with_c {
            inputs.push("c");
            inits.push(f32_tensor("c", &[2], &c));
        }
        let m = model(
            13,
            vec![input("a", &a_dims), input("b", &b_dims)],
            &["y"],
            inits,
            vec![node("Gemm", &inputs, &["y"], attrs)],
        );
        let y = run1(
            &m,
            &[
                Tensor::from_f32(a_dims.iter().map(|d| d.parse().unwrap()).collect(), a_in),
                Tensor::from_f32(b_dims.iter().map(|d| d.parse().unwrap()).collect(), b_in),
            ],
        );
        assert_eq!(y.shape(), &[2, 2]);
        assert_close(y.as_f32().unwrap(), &want, 1e-5);
    }

    #[test]
    fn gemm_attribute_combinations() {
        for ta in [false, true] {
            for tb in [false, true] {
                check(ta, tb, 1.0, 1.0, true);
                check(ta, tb, 2.0, 0.5, true);
                check(ta, tb, 0.25, 1.0, false);
            }
        }
        check(false, false, 1.0, 0.0, true);
    }

    #[test]
    fn gemm_without_scaling_is_matmul_and_add() {
        let m = model(
            13,
            vec![input("a", &["2", "3"]), input("b", &["3", "2"])],
            &["y"],
            vec![f32_tensor("c", &[2], &[1.0, 2.0])],
            vec![node("Gemm", &["a", "b", "c"], &["y"], vec![])],
        );
        let text = import_text(&m);
        assert!(
            text.contains("%y_matmul = matmul %a, %b : f32[2, 2]"),
            "{text}"
        );
        assert!(
            text.contains("%y = add %y_matmul, %c : f32[2, 2]"),
            "{text}"
        );
        assert!(
            !text.contains("transpose") && !text.contains(" = mul "),
            "{text}"
        );
    }

    #[test]
    fn gemm_needs_matrices() {
        let m = model(
            13,
            vec![input("a", &["2", "3", "1"]), input("b", &["3", "2"])],
            &["y"],
            vec![],
            vec![node("Gemm", &["a", "b"], &["y"], vec![])],
        );
        assert!(import_err(&m).contains("A and B must be matrices"));
    }
}
