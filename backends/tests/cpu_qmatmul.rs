//! `qmatmul` on the JIT against its reference evaluation, bit for bit:
//! random shapes (`M` in 1..9, `K` a multiple of the group, `N` in 1..40,
//! 8- and 4-bit weights, odd and even `N`, groups from 1 row to all of
//! `K`), activation rows of every kind the quantization treats specially
//! (all zeros, all equal, all negative, holding NaN or an infinity, exact
//! half steps), weights as module weights (packed two per byte for `i4`)
//! and as graph inputs, with the exact options (the generated kernel) and
//! the default ones (the runtime's `slmcc_qgemm` where the host has a
//! dot-product path, else the generated kernel): both are exact.
//!
//! `qswiglu` (the same kernel code, two products and the SiLU gate) on the
//! same operands, two weights and the fused gate/up weight: bit for bit
//! with the exact options, within 1e-6 relative per element with the
//! default ones (the generated kernel's inline vector sigmoid;
//! `slmcc_qgemm` is exact).
//!
//! Weight-only products (`activations = "f32"`, always `slmcc_qgemm`): the
//! same operands, both ops, bit for bit, and a `K` past the limit of the
//! INT8 path.

mod common;

use common::{check, check_with, Expect, Kind, Lcg};
use proptest::prelude::*;
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::ops::qmatmul::{QActivations, QMatMul};
use slmcc_ir::ops::qswiglu::QSwiGlu;
use slmcc_ir::{DType, Tensor};

/// Random weights of `bits` in their full range (`-128..=127`, `-8..=7`).
/// Activations `[m, k]`, or `[batch, m, k]` when `batch > 0`.
fn batched_activations(rng: &mut Lcg, batch: usize, m: usize, k: usize) -> Tensor {
    let mut xs = vec![m, k];
    if batch > 0 {
        xs.insert(0, batch);
    }
    let rows = xs.iter().product::<usize>() / k;
    Tensor::from_f32(xs, activations(rng, rows, k))
}

fn weights(rng: &mut Lcg, k: usize, n: usize, bits: i64) -> Tensor {
    let (lo, hi, dt) = if bits == 4 {
        (-8, 7, DType::I4)
    } else {
        (-128, 127, DType::I8)
    };
    rng.ints(&[k, n], lo, hi).cast(dt)
}

/// Activation rows of `k` elements, each of a randomly chosen kind.
fn activations(rng: &mut Lcg, rows: usize, k: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(rows * k);
    for _ in 0..rows {
        let scale = [0.01f32, 1.0, 3.0, 1000.0][rng.below(4) as usize];
        let mut row: Vec<f32> = (0..k).map(|_| rng.f32() * scale).collect();
        match rng.below(10) {
            0 => row.fill(0.0),
            1 => row.fill(rng.f32() * scale),
            2 => row.iter_mut().for_each(|x| *x = -x.abs() - 0.5),
            3 => row.iter_mut().for_each(|x| *x = x.abs()),
            4 => row[rng.below(k as u64) as usize] = f32::NAN,
            5 => row.fill(f32::NAN),
            6 => {
                let inf = if rng.below(2) == 0 {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                };
                row[rng.below(k as u64) as usize] = inf;
            }
            7 => {
                // Halves of the step: x / s lands on .5 ties.
                let lo = -(rng.below(200) as f32) * 0.5;
                row.iter_mut()
                    .for_each(|x| *x = lo + (rng.below(511) as f32) * 0.5);
                row[0] = lo;
            }
            8 => {
                row[rng.below(k as u64) as usize] = -0.0;
            }
            _ => {}
        }
        v.extend(row);
    }
    v
}

fn check_both(op: QMatMul, operands: &[(Tensor, Kind)]) {
    check(op, operands, Expect::Exact);
    check_with(op, operands, Expect::Exact, CpuOptions::default());
}

fn check_qswiglu(op: QSwiGlu, operands: &[(Tensor, Kind)]) {
    check(op, operands, Expect::Exact);
    check_with(op, operands, Expect::ElemRel(1e-6), CpuOptions::default());
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn qmatmul_matches_the_reference(
        batch in 0usize..3,
        m in 1usize..9,
        group in 1usize..12,
        groups in 1usize..5,
        n in 1usize..40,
        int4: bool,
        seed: u64,
    ) {
        let mut rng = Lcg(seed);
        let k = group * groups;
        let bits = if int4 { 4 } else { 8 };
        let x = batched_activations(&mut rng, batch, m, k);
        let q = weights(&mut rng, k, n, bits);
        let scale = rng.tensor(&[groups, n], 0.05);
        let kind = if rng.below(2) == 0 { Kind::Weight } else { Kind::Input };
        let op = QMatMul::new(bits, group as i64).unwrap();
        check_both(op, &[(x.clone(), Kind::Input), (q.clone(), kind), (scale.clone(), kind)]);
        // The same weights with one group over all of K (per channel).
        let op = QMatMul::new(bits, k as i64).unwrap();
        let s1 = rng.tensor(&[1, n], 0.05);
        check_both(op, &[(x, Kind::Input), (q, kind), (s1, kind)]);
    }

    #[test]
    fn qswiglu_matches_the_reference(
        batch in 0usize..3,
        m in 1usize..9,
        group in 1usize..12,
        groups in 1usize..5,
        n in 1usize..40,
        int4: bool,
        seed: u64,
    ) {
        let mut rng = Lcg(seed);
        let k = group * groups;
        let bits = if int4 { 4 } else { 8 };
        let x = (batched_activations(&mut rng, batch, m, k), Kind::Input);
        let kind = if rng.below(2) == 0 { Kind::Weight } else { Kind::Input };
        let op = QSwiGlu::new(bits, group as i64).unwrap();
        let (gq, uq) = (weights(&mut rng, k, n, bits), weights(&mut rng, k, n, bits));
        let (gs, us) = (rng.tensor(&[groups, n], 0.05), rng.tensor(&[groups, n], 0.05));
        check_qswiglu(op, &[x.clone(), (gq, kind), (gs, kind), (uq, kind), (us, kind)]);
        // The fused gate/up weight `[K, 2N]` (for `i4`, an odd `N` puts the
        // up half's rows off byte boundaries).
        let q = weights(&mut rng, k, 2 * n, bits);
        let s = rng.tensor(&[groups, 2 * n], 0.05);
        check_qswiglu(op, &[x, (q, kind), (s, kind)]);
    }
}

/// `op` with f32 activations (weight-only).
fn weight_only(op: QMatMul) -> QMatMul {
    QMatMul {
        activations: QActivations::F32,
        ..op
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn weight_only_matches_the_reference(
        batch in 0usize..3,
        m in 1usize..9,
        group in 1usize..12,
        groups in 1usize..5,
        n in 1usize..40,
        int4: bool,
        seed: u64,
    ) {
        let mut rng = Lcg(seed);
        let k = group * groups;
        let bits = if int4 { 4 } else { 8 };
        let x = (batched_activations(&mut rng, batch, m, k), Kind::Input);
        let kind = if rng.below(2) == 0 { Kind::Weight } else { Kind::Input };
        let op = weight_only(QMatMul::new(bits, group as i64).unwrap());
        let q = weights(&mut rng, k, 2 * n, bits);
        let s = rng.tensor(&[groups, 2 * n], 0.05);
        let operands = [x.clone(), (q.clone(), kind), (s.clone(), kind)];
        check_both(op, &operands);
        // The gate/up halves of the same buffer as a fused `qswiglu`.
        let swiglu = QSwiGlu::from(op);
        check(swiglu, &operands, Expect::Exact);
        check_with(swiglu, &operands, Expect::Exact, CpuOptions::default());
    }
}

/// A weight-only product with a `K` longer than the INT8 path takes.
#[test]
fn weight_only_long_k() {
    let mut rng = Lcg(5);
    let (m, k, n, group) = (2, 140_000, 18, 1000);
    assert!(k > slmcc_backends::cpu::hostqgemm::MAX_K);
    let x = Tensor::from_f32(vec![m, k], activations(&mut rng, m, k));
    for bits in [8, 4] {
        let q = weights(&mut rng, k, n, bits);
        let scale = rng.tensor(&[k / group, n], 0.05);
        let op = weight_only(QMatMul::new(bits, group as i64).unwrap());
        let w = Kind::Weight;
        check_both(op, &[(x.clone(), Kind::Input), (q, w), (scale, w)]);
    }
}

/// `qswiglu` on wide rows (vector strips and a tail), both forms, both
/// widths of weight, and a `K` past the stack scratch.
#[test]
fn qswiglu_wide_rows_and_long_k() {
    let mut rng = Lcg(11);
    for (m, k, n, group) in [(3, 256, 70, 64), (2, 128, 48, 128), (1, 16400, 19, 400)] {
        let x = (
            Tensor::from_f32(vec![m, k], activations(&mut rng, m, k)),
            Kind::Input,
        );
        for bits in [8, 4] {
            let op = QSwiGlu::new(bits, group as i64).unwrap();
            let groups = k / group;
            let (gq, uq) = (weights(&mut rng, k, n, bits), weights(&mut rng, k, n, bits));
            let (gs, us) = (
                rng.tensor(&[groups, n], 0.05),
                rng.tensor(&[groups, n], 0.05),
            );
            let w = Kind::Weight;
            check_qswiglu(op, &[x.clone(), (gq, w), (gs, w), (uq, w), (us, w)]);
            let q = weights(&mut rng, k, 2 * n, bits);
            let s = rng.tensor(&[groups, 2 * n], 0.05);
            check_qswiglu(op, &[x.clone(), (q, w), (s, w)]);
        }
    }
}

/// The hand-computed case of the op's documentation.
#[test]
fn hand_computed_two_groups() {
    let x = Tensor::from_f32(vec![1, 4], vec![0.25, -25.5, 102.0, 0.75]);
    let q = Tensor::from_i64(vec![4, 2], vec![1, 2, 3, -1, 1, 0, 5, 7]).cast(DType::I8);
    let scale = Tensor::from_f32(vec![2, 2], vec![0.5, 0.25, 2.0, 1.0]);
    let op = QMatMul::new(8, 2).unwrap();
    let ops = [(x, Kind::Input), (q, Kind::Weight), (scale, Kind::Weight)];
    let got = common::run_jit(&op.into(), &ops, CpuOptions::exact()).unwrap();
    assert_eq!(got[0].as_f32().unwrap(), &[175.75, 13.375]);
}

/// Wide strips (several vector strips plus a scalar tail), large groups,
/// and a `K` whose quantized row does not fit the stack scratch (the
/// quantized activations are then recomputed where they are used).
#[test]
fn wide_rows_and_long_k() {
    let mut rng = Lcg(7);
    for (m, k, n, group) in [
        (3, 256, 70, 64),
        (2, 512, 48, 512),
        (1, 16400, 37, 400),
        (2, 16400, 34, 16400),
    ] {
        let x = Tensor::from_f32(vec![m, k], activations(&mut rng, m, k));
        for bits in [8, 4] {
            let q = weights(&mut rng, k, n, bits);
            let scale = rng.tensor(&[k / group, n], 0.05);
            let op = QMatMul::new(bits, group as i64).unwrap();
            check_both(
                op,
                &[
                    (x.clone(), Kind::Input),
                    (q, Kind::Weight),
                    (scale, Kind::Weight),
                ],
            );
        }
    }
}
