//! Every op the cpu backend lowers, JIT-compiled and run on random shapes
//! and values, against the op's reference evaluation.
//!
//! With `CpuOptions::exact()` (what `check` uses) every kernel performs the
//! reference's operations in the reference's order and the comparison is
//! bit-exact: element-wise ops, casts, data movement, reductions, softmax,
//! the norms and add+norms, rope, trilu/cum_sum/range, matmul/GLU (also
//! packed and blocked over `k`), and attention whose keys fit one tile.
//! Attention over several tiles (online softmax) is within 1e-5 relative.
//! With the default options (FMA, `fast_math`: the vector exp and vector
//! partial sums) matmul, GLU and attention are checked within 1e-5 (the
//! goldens' measure), and exp, sigmoid and softmax element by element
//! within 1e-6 (the exp over its whole range within 2e-7).

mod common;

use common::{broadcast_of, check, check_with, run_jit, shape, Expect, Kind, Lcg};
use proptest::prelude::*;
use slmcc_backends::cpu::{CpuError, CpuOptions};
use slmcc_ir::ops::add_layer_norm::AddLayerNorm;
use slmcc_ir::ops::add_rms_norm::AddRmsNorm;
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::cast::Cast;
use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::constant_of_shape::ConstantOfShape;
use slmcc_ir::ops::cum_sum::CumSum;
use slmcc_ir::ops::expand::Expand;
use slmcc_ir::ops::gather::Gather;
use slmcc_ir::ops::gather_elements::GatherElements;
use slmcc_ir::ops::gather_nd::GatherNd;
use slmcc_ir::ops::gelu::{Gelu, GeluApprox};
use slmcc_ir::ops::glu::Glu;
use slmcc_ir::ops::kv_cache::{q8_encode, Q8_SCALE_BYTES};
use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::matmul::MatMul;
use slmcc_ir::ops::range::Range;
use slmcc_ir::ops::reduce::{Reduce, ReduceKind};
use slmcc_ir::ops::reshape::Reshape;
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::ops::rope::Rope;
use slmcc_ir::ops::shape_of::ShapeOf;
use slmcc_ir::ops::size::Size;
use slmcc_ir::ops::slice::Slice;
use slmcc_ir::ops::softmax::Softmax;
use slmcc_ir::ops::split::Split;
use slmcc_ir::ops::squeeze::Squeeze;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::ops::trilu::Trilu;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ops::unsqueeze::Unsqueeze;
use slmcc_ir::ops::where_::Where;
use slmcc_ir::{DType, Dim, Op, Tensor};

use Kind::{Const, Input, Weight};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 32,
        ..ProptestConfig::default()
    }
}

/// Values with a few specials mixed in (zeros, infinities, NaN).
fn with_specials(t: Tensor, rng: &mut Lcg) -> Tensor {
    let mut v = t.to_f32_vec();
    for x in v.iter_mut() {
        match rng.below(40) {
            0 => *x = 0.0,
            1 => *x = f32::INFINITY,
            2 => *x = f32::NEG_INFINITY,
            3 => *x = f32::NAN,
            _ => {}
        }
    }
    Tensor::from_f32(t.shape().to_vec(), v)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn unary_f32(s in shape(4, 9), seed: u64) {
        let mut rng = Lcg(seed);
        let x = with_specials(rng.tensor(&s, 4.0), &mut rng);
        for kind in UnaryKind::ALL {
            if kind != UnaryKind::Not {
                check(Unary::new(kind), &[(x.clone(), Input)], Expect::Exact);
            }
        }
    }

    #[test]
    fn unary_int_and_bool(s in shape(3, 7), seed: u64) {
        let mut rng = Lcg(seed);
        let x = rng.ints(&s, -5, 5);
        for kind in [UnaryKind::Neg, UnaryKind::Abs, UnaryKind::Sign, UnaryKind::Relu] {
            check(Unary::new(kind), &[(x.clone(), Input)], Expect::Exact);
            check(Unary::new(kind), &[(x.cast(DType::I32), Input)], Expect::Exact);
        }
        check(Unary::new(UnaryKind::Not), &[(rng.bools(&s), Input)], Expect::Exact);
    }

    #[test]
    fn binary_f32_broadcast(s in shape(4, 9), seed: u64) {
        let mut rng = Lcg(seed);
        let t = broadcast_of(&s, &mut rng);
        let (a, b) = if rng.below(2) == 0 { (s.clone(), t) } else { (t, s.clone()) };
        let x = with_specials(rng.tensor(&a, 3.0), &mut rng);
        let y = with_specials(rng.tensor(&b, 3.0), &mut rng);
        for kind in BinaryKind::ALL {
            if !kind.is_logic() {
                check(Binary::new(kind), &[(x.clone(), Input), (y.clone(), Input)], Expect::Exact);
            }
        }
        // A constant operand, as exporters write `x * 0.5`.
        check(Binary::new(BinaryKind::Mul), &[(x, Input), (Tensor::scalar_f32(0.5), Const)], Expect::Exact);
    }

    #[test]
    fn binary_int_and_logic(s in shape(3, 7), seed: u64) {
        let mut rng = Lcg(seed);
        let t = broadcast_of(&s, &mut rng);
        let (x, y) = (rng.ints(&s, -9, 9), rng.ints(&t, -9, 9));
        for kind in BinaryKind::ALL {
            if matches!(kind, BinaryKind::Div | BinaryKind::Mod | BinaryKind::Pow) || kind.is_logic() {
                continue;
            }
            check(Binary::new(kind), &[(x.clone(), Input), (y.clone(), Input)], Expect::Exact);
            check(Binary::new(kind), &[(x.cast(DType::I32), Input), (y.cast(DType::I32), Input)], Expect::Exact);
        }
        let (p, q) = (rng.bools(&s), rng.bools(&t));
        for kind in [BinaryKind::And, BinaryKind::Or, BinaryKind::Xor] {
            check(Binary::new(kind), &[(p.clone(), Input), (q.clone(), Input)], Expect::Exact);
        }
    }

    #[test]
    fn casts(s in shape(3, 9), seed: u64) {
        let mut rng = Lcg(seed);
        let f = with_specials(rng.tensor(&s, 5e9), &mut rng);
        let small = rng.tensor(&s, 100.0);
        let i = rng.ints(&s, -(1 << 40), 1 << 40);
        let b = rng.bools(&s);
        let all = [DType::F32, DType::I64, DType::I32, DType::Bool];
        for x in [f, small, i.clone(), i.cast(DType::I32), b] {
            for to in all {
                check(Cast { to }, &[(x.clone(), Input)], Expect::Exact);
            }
        }
    }

    #[test]
    fn where_broadcast(s in shape(3, 8), seed: u64) {
        let mut rng = Lcg(seed);
        let c = broadcast_of(&s, &mut rng);
        let y = broadcast_of(&s, &mut rng);
        let cond = rng.bools(&c);
        check(Where, &[(cond.clone(), Input), (rng.tensor(&s, 1.0), Input), (rng.tensor(&y, 1.0), Input)], Expect::Exact);
        check(Where, &[(cond, Input), (rng.ints(&s, -3, 3), Input), (rng.ints(&y, -3, 3), Input)], Expect::Exact);
    }

    #[test]
    fn matmul(batch in shape(2, 3), m in 1usize..11, k in 1usize..13, n in 1usize..21, seed: u64) {
        let mut rng = Lcg(seed);
        let bb = broadcast_of(&batch, &mut rng);
        let mut a = batch.clone();
        a.extend([m, k]);
        let mut b = bb;
        b.extend([k, n]);
        let (x, w) = (rng.tensor(&a, 1.0), rng.tensor(&b, 1.0));
        let kind = if rng.below(2) == 0 { Input } else { Weight };
        check(MatMul, &[(x.clone(), Input), (w.clone(), kind)], Expect::Exact);
        check_with(MatMul, &[(x, Input), (w, kind)], Expect::Rel(1e-5), CpuOptions::default());
        // 1-D operands are promoted, and the added axis removed.
        let v = rng.tensor(&[k], 1.0);
        check(MatMul, &[(v.clone(), Input), (rng.tensor(&[k, n], 1.0), Input)], Expect::Exact);
        check(MatMul, &[(rng.tensor(&[m, k], 1.0), Input), (v, Input)], Expect::Exact);
    }

    #[test]
    fn softmax_any_axis(s in shape(4, 9).prop_filter("rank >= 1", |s| !s.is_empty()), seed: u64) {
        let mut rng = Lcg(seed);
        let axis = rng.below(s.len() as u64) as i64 - if rng.below(2) == 0 { s.len() as i64 } else { 0 };
        let mut x = rng.tensor(&s, 30.0);
        if rng.below(3) == 0 {
            x = with_specials(x, &mut rng);
        }
        check(Softmax { axis }, &[(x, Input)], Expect::Exact);
    }

    #[test]
    fn reductions(s in shape(4, 7), seed: u64) {
        let mut rng = Lcg(seed);
        let x = rng.tensor(&s, 4.0);
        let r = s.len();
        let axes = match rng.below(4) {
            0 => None,
            1 if r > 0 => Some(vec![-1]),
            _ => Some((0..r as i64).filter(|_| rng.below(2) == 0).collect()),
        };
        for kind in ReduceKind::ALL {
            let keep = rng.below(2) == 0;
            check(Reduce::new(kind, axes.clone(), keep), &[(x.clone(), Input)], Expect::Exact);
        }
    }

    #[test]
    fn transpose_reshape_squeeze(s in shape(4, 6), seed: u64) {
        let mut rng = Lcg(seed);
        let x = rng.tensor(&s, 1.0);
        let mut perm: Vec<i64> = (0..s.len() as i64).collect();
        for i in (1..perm.len()).rev() {
            perm.swap(i, rng.below(i as u64 + 1) as usize);
        }
        check(Transpose { perm: perm.clone() }, &[(x.clone(), Input)], Expect::Exact);
        check(Transpose { perm }, &[(rng.ints(&s, -99, 99), Input)], Expect::Exact);
        let n: usize = s.iter().product();
        let target = Tensor::from_i64(vec![2], vec![-1, 1]);
        check(Reshape::default(), &[(x.clone(), Input), (target, Const)], Expect::Exact);
        let _ = n;
        check(Unsqueeze { axes: vec![0, -1] }, &[(x.clone(), Input)], Expect::Exact);
        let mut ones = s.clone();
        ones.insert(0, 1);
        let y = rng.bools(&ones);
        check(Squeeze { axes: vec![0] }, &[(y, Input)], Expect::Exact);
    }

    #[test]
    fn expand_slice(s in shape(3, 6).prop_filter("rank >= 1", |s| !s.is_empty()), seed: u64) {
        let mut rng = Lcg(seed);
        let t = broadcast_of(&s, &mut rng);
        let target = Tensor::from_i64(vec![s.len()], s.iter().map(|&d| d as i64).collect());
        check(Expand, &[(rng.tensor(&t, 1.0), Input), (target, Const)], Expect::Exact);
        let x = rng.tensor(&s, 1.0);
        let axes: Vec<i64> = (0..s.len() as i64).filter(|_| rng.below(2) == 0).collect();
        let pick = |rng: &mut Lcg| rng.below(17) as i64 - 8;
        let starts: Vec<i64> = axes.iter().map(|_| pick(&mut rng)).collect();
        let ends: Vec<i64> = axes.iter().map(|_| match rng.below(4) { 0 => i64::MAX, 1 => i64::MIN, _ => pick(&mut rng) }).collect();
        let steps: Vec<i64> = axes.iter().map(|_| [1, 1, 2, -1, -2, 3][rng.below(6) as usize]).collect();
        let v = |v: &[i64]| Tensor::from_i64(vec![v.len()], v.to_vec());
        check(
            Slice,
            &[(x, Input), (v(&starts), Const), (v(&ends), Const), (v(&axes), Const), (v(&steps), Const)],
            Expect::Exact,
        );
    }

    #[test]
    fn concat_split(s in shape(3, 6).prop_filter("rank >= 1", |s| !s.is_empty()), seed: u64) {
        let mut rng = Lcg(seed);
        let axis = rng.below(s.len() as u64) as usize;
        let parts: Vec<Tensor> = (0..1 + rng.below(3))
            .map(|_| {
                let mut p = s.clone();
                p[axis] = 1 + rng.below(4) as usize;
                rng.tensor(&p, 1.0)
            })
            .collect();
        let ops: Vec<(Tensor, Kind)> = parts.iter().map(|p| (p.clone(), Input)).collect();
        check(Concat { axis: axis as i64 }, &ops, Expect::Exact);
        let x = rng.tensor(&s, 1.0);
        let first = rng.below(s[axis] as u64 + 1) as i64;
        let sizes = vec![Dim::fixed(first), Dim::fixed(s[axis] as i64 - first)];
        check(Split { axis: axis as i64 - s.len() as i64, sizes }, &[(x, Input)], Expect::Exact);
    }

    #[test]
    fn gather_rows(s in shape(3, 6).prop_filter("rank >= 1", |s| !s.is_empty()), idx in shape(2, 5), seed: u64) {
        let mut rng = Lcg(seed);
        let axis = rng.below(s.len() as u64) as i64;
        let n = s[axis as usize] as i64;
        let data = rng.tensor(&s, 1.0);
        let i = rng.ints(&idx, -n, n - 1);
        check(Gather { axis }, &[(data.clone(), Weight), (i.clone(), Input)], Expect::Exact);
        check(Gather { axis }, &[(data, Input), (i.cast(DType::I32), Input)], Expect::Exact);
    }

    #[test]
    fn gathers_with_constant_indices(s in shape(3, 5).prop_filter("rank >= 1", |s| !s.is_empty()), lead in shape(2, 4), seed: u64) {
        let mut rng = Lcg(seed);
        let data = rng.tensor(&s, 1.0);
        // gather_nd: index tuples of length q into the first q axes.
        let q = 1 + rng.below(s.len() as u64) as usize;
        let mut ishape = lead.clone();
        ishape.push(q);
        let count: usize = ishape.iter().product();
        let idx: Vec<i64> = (0..count).map(|i| {
            let d = s[i % q] as i64;
            rng.below(2 * d as u64) as i64 - d
        }).collect();
        let idx = Tensor::from_i64(ishape, idx);
        check(GatherNd { batch_dims: 0 }, &[(data.clone(), Input), (idx, Const)], Expect::Exact);
        // gather_elements along one axis.
        let axis = rng.below(s.len() as u64) as usize;
        let mut es = s.clone();
        es[axis] = 1 + rng.below(4) as usize;
        let e = rng.ints(&es, -(s[axis] as i64), s[axis] as i64 - 1);
        check(GatherElements { axis: axis as i64 }, &[(rng.bools(&s), Input), (e, Const)], Expect::Exact);
    }

    #[test]
    fn norms_and_activations(s in shape(3, 9).prop_filter("rank >= 1", |s| !s.is_empty()), seed: u64) {
        let mut rng = Lcg(seed);
        let x = rng.tensor(&s, 3.0);
        let h = *s.last().unwrap();
        let w = rng.tensor(&[h], 1.0);
        check(RmsNorm { eps: 1e-6, offset: 0.0 }, &[(x.clone(), Input), (w.clone(), Weight)], Expect::Exact);
        check(RmsNorm { eps: 1e-5, offset: 1.0 }, &[(x.clone(), Input), (w.clone(), Input)], Expect::Exact);
        let axis = -(1 + rng.below(s.len() as u64) as i64);
        let p: Vec<usize> = s[(s.len() as i64 + axis) as usize..].to_vec();
        let (sc, b) = (rng.tensor(&p, 1.0), rng.tensor(&p, 1.0));
        let ln = LayerNorm { axis, eps: 1e-5 };
        check(ln, &[(x.clone(), Input), (sc.clone(), Weight), (b, Weight)], Expect::Exact);
        check(ln, &[(x.clone(), Input), (sc, Input)], Expect::Exact);
        for approximate in [GeluApprox::None, GeluApprox::Tanh] {
            check(Gelu { approximate }, &[(x.clone(), Input)], Expect::Exact);
        }
    }

    #[test]
    fn gated_mlps(rows in shape(2, 5), hidden in 1usize..12, inter in 1usize..14, seed: u64) {
        let mut rng = Lcg(seed);
        let mut xs = rows.clone();
        xs.push(hidden);
        let x = rng.tensor(&xs, 1.0);
        let (g, u) = (rng.tensor(&[hidden, inter], 1.0), rng.tensor(&[hidden, inter], 1.0));
        let gu = rng.tensor(&[hidden, 2 * inter], 1.0);
        for op in [Glu::swiglu(), Glu::geglu(GeluApprox::None), Glu::geglu(GeluApprox::Tanh)] {
            check(op, &[(x.clone(), Input), (g.clone(), Weight), (u.clone(), Weight)], Expect::Exact);
            check(op, &[(x.clone(), Input), (gu.clone(), Weight)], Expect::Exact);
            check_with(op, &[(x.clone(), Input), (gu.clone(), Weight)], Expect::Rel(1e-5), CpuOptions::default());
        }
    }
}

/// A random attention node and operands: GQA/MQA/MHA, any `s` against
/// `t` (fewer keys than queries too), head dims that are not multiples of
/// 4, causal with or without a window, soft-capping, and no mask, a float
/// mask (with `-inf` and large negative entries) or a bool mask, of any
/// shape that broadcasts to the scores.
fn attention_case(rng: &mut Lcg, t_max: usize) -> (Attention, Vec<(Tensor, Kind)>) {
    let b = 1 + rng.below(2) as usize;
    let hkv = 1 + rng.below(3) as usize;
    let hq = hkv * (1 + rng.below(3) as usize);
    let s = 1 + rng.below(6) as usize;
    let t = rng.below(t_max as u64 + 1) as usize;
    let d = 1 + rng.below(19) as usize;
    let dv = 1 + rng.below(19) as usize;
    let causal = rng.below(2) == 0;
    let op = Attention {
        kv_heads: hkv as i64,
        scale: 0.1 + rng.f32().abs(),
        causal,
        window: if causal && rng.below(2) == 0 {
            1 + rng.below(4) as i64
        } else {
            0
        },
        softcap: if rng.below(4) == 0 {
            0.5 + 2.0 * rng.f32().abs()
        } else {
            0.0
        },
    };
    let mut operands = vec![
        (rng.tensor(&[b, hq, s, d], 2.0), Input),
        (rng.tensor(&[b, hkv, t, d], 2.0), Input),
        (rng.tensor(&[b, hkv, t, dv], 2.0), Input),
    ];
    let scores = [b, hq, s, t];
    match rng.below(3) {
        0 => {}
        kind => {
            let shape: Vec<usize> = scores[rng.below(5) as usize..]
                .iter()
                .map(|&x| if rng.below(3) == 0 { 1 } else { x })
                .collect();
            let m = if kind == 1 {
                let mut v = rng.tensor(&shape, 3.0).to_f32_vec();
                for x in v.iter_mut() {
                    match rng.below(6) {
                        0 => *x = f32::NEG_INFINITY,
                        1 => *x = f32::MIN,
                        _ => {}
                    }
                }
                Tensor::from_f32(shape, v)
            } else {
                let n = shape.iter().product();
                Tensor::from_bool(shape, (0..n).map(|_| rng.below(4) != 0).collect())
            };
            operands.push((m, if rng.below(2) == 0 { Input } else { Const }));
        }
    }
    (op, operands)
}

/// `t` (`[.., d]`, f32) as q8 rows (`i8[.., d + 4]`), as `kv_write` stores them.
fn q8_rows(t: &Tensor) -> Tensor {
    let d = *t.shape().last().unwrap();
    let mut shape = t.shape().to_vec();
    *shape.last_mut().unwrap() = d + Q8_SCALE_BYTES;
    let mut bytes = vec![0i8; shape.iter().product()];
    if d > 0 {
        for (row, out) in t
            .to_f32_vec()
            .chunks(d)
            .zip(bytes.chunks_mut(d + Q8_SCALE_BYTES))
        {
            q8_encode(row, out);
        }
    }
    Tensor::new(shape, slmcc_ir::TensorData::I8(bytes)).unwrap()
}

proptest! {
    #![proptest_config(config())]

    /// Up to one tile of keys: bit-exact in the reference's order; with
    /// `fast_math` and FMA within 1e-5 (the goldens' measure). The same
    /// with keys and values in `f16` or `bf16`, read as stored.
    #[test]
    fn attention_one_tile(seed: u64) {
        let mut rng = Lcg(seed);
        let (op, mut operands) = attention_case(&mut rng, 12);
        check(op, &operands, Expect::Exact);
        check_with(op, &operands, Expect::Rel(1e-5), CpuOptions::default());
        let mut q8 = operands.clone();
        let half = if rng.below(2) == 0 { DType::F16 } else { DType::BF16 };
        for (t, _) in &mut operands[1..3] {
            *t = t.cast(half);
        }
        check(op, &operands, Expect::Exact);
        check_with(op, &operands, Expect::Rel(1e-5), CpuOptions::default());
        // And as an INT8 cache's q8 rows.
        for (t, _) in &mut q8[1..3] {
            *t = q8_rows(t);
        }
        check(op, &q8, Expect::Exact);
        check_with(op, &q8, Expect::Rel(1e-5), CpuOptions::default());
    }
}

/// More keys than one tile: the online softmax over tiles, within 1e-5 in
/// both modes, for prefill-like and decode-like rows.
#[test]
fn attention_many_tiles() {
    let mut rng = Lcg(7);
    for (s, t, window, mask) in [
        (3, 1300, 0, false),
        (2, 1100, 700, false),
        (1, 1030, 0, true),
        (600, 600, 0, false),
    ] {
        let op = Attention {
            causal: s != 1,
            window,
            ..Attention::new(2, 0.125)
        };
        let (hq, d) = (4, 16);
        let mut operands = vec![
            (rng.tensor(&[1, hq, s, d], 3.0), Input),
            (rng.tensor(&[1, 2, t, d], 3.0), Input),
            (rng.tensor(&[1, 2, t, 12], 1.0), Input),
        ];
        if mask {
            // Masks every key of the first tile: the second raises the max from -inf.
            let keep: Vec<bool> = (0..t).map(|j| j >= 600 && j % 7 != 0).collect();
            operands.push((Tensor::from_bool(vec![1, 1, 1, t], keep), Input));
        }
        check(op, &operands, Expect::Rel(1e-5));
        check_with(op, &operands, Expect::Rel(1e-5), CpuOptions::default());
    }
}

#[test]
fn attention_fully_masked_rows_are_zero() {
    let mut rng = Lcg(11);
    let q = rng.tensor(&[1, 2, 2, 8], 1.0);
    let k = rng.tensor(&[1, 1, 3, 8], 1.0);
    let v = rng.tensor(&[1, 1, 3, 8], 1.0);
    let mut keep = vec![true; 12];
    keep[..3].fill(false);
    let m = Tensor::from_bool(vec![1, 2, 2, 3], keep);
    let ops = [
        (q.clone(), Input),
        (k.clone(), Input),
        (v.clone(), Input),
        (m, Input),
    ];
    for options in [CpuOptions::exact(), CpuOptions::default()] {
        let got = run_jit(&Op::Attention(Attention::new(1, 0.3)), &ops, options).unwrap();
        let out = got[0].to_f32_vec();
        assert!(out[..8].iter().all(|&x| x == 0.0), "{out:?}");
        assert!(out[8..].iter().all(|x| x.is_finite() && *x != 0.0));
    }
    // More queries than keys: the first ones see nothing; and no keys at all.
    let causal = Attention {
        causal: true,
        ..Attention::new(1, 0.3)
    };
    let q4 = rng.tensor(&[1, 1, 4, 8], 1.0);
    let k2 = rng.tensor(&[1, 1, 2, 8], 1.0);
    check(
        causal,
        &[(q4.clone(), Input), (k2.clone(), Input), (k2, Input)],
        Expect::Exact,
    );
    let k0 = Tensor::from_f32(vec![1, 1, 0, 8], vec![]);
    check(
        causal,
        &[(q4, Input), (k0.clone(), Input), (k0, Input)],
        Expect::Exact,
    );
}

proptest! {
    #![proptest_config(config())]

    /// Bit-exact: every layout of the tables, partial rotary, both
    /// rotations.
    #[test]
    fn rope_all_layouts(b in 1usize..3, h in 1usize..4, s in 1usize..6, half in 1usize..7, extra in 0usize..5, seed: u64) {
        let mut rng = Lcg(seed);
        let r = 2 * half;
        let d = r + extra;
        let x = rng.tensor(&[b, h, s, d], 3.0);
        let layout = match rng.below(5) {
            0 => vec![s, r],
            1 => vec![if rng.below(2) == 0 { b } else { 1 }, s, r],
            _ => vec![
                if rng.below(2) == 0 { b } else { 1 },
                if rng.below(2) == 0 { h } else { 1 },
                s,
                r,
            ],
        };
        let (c, sn) = (rng.tensor(&layout, 1.0), rng.tensor(&layout, 1.0));
        for interleaved in [false, true] {
            let op = Rope { rotary_dim: r as i64, interleaved };
            let kind = if rng.below(2) == 0 { Input } else { Const };
            check(op, &[(x.clone(), Input), (c.clone(), kind), (sn.clone(), kind)], Expect::Exact);
        }
    }

    /// Bit-exact: both results of the add+norms.
    #[test]
    fn add_norms(rows in shape(2, 5), hidden in 1usize..40, seed: u64) {
        let mut rng = Lcg(seed);
        let mut s = rows.clone();
        s.push(hidden);
        let (x, r) = (rng.tensor(&s, 3.0), rng.tensor(&s, 3.0));
        let (w, bias) = (rng.tensor(&[hidden], 1.0), rng.tensor(&[hidden], 1.0));
        for op in [AddRmsNorm::default(), AddRmsNorm { eps: 1e-5, offset: 1.0 }] {
            check(op, &[(x.clone(), Input), (r.clone(), Input), (w.clone(), Weight)], Expect::Exact);
        }
        let ln = AddLayerNorm { eps: 1e-5 };
        check(ln, &[(x.clone(), Input), (r.clone(), Input), (w.clone(), Weight), (bias, Weight)], Expect::Exact);
        check(ln, &[(x, Input), (r, Input), (w, Input)], Expect::Exact);
    }

    /// Bit-exact: triangles of any dtype with any `k`, running sums of
    /// floats and integers in every direction, ranges, and the shape ops.
    #[test]
    fn trilu_cum_sum_range_shapes(s in shape(4, 6).prop_filter("rank >= 2", |s| s.len() >= 2), seed: u64) {
        let mut rng = Lcg(seed);
        let x = rng.tensor(&s, 2.0);
        let k = Tensor::scalar_i64(rng.below(9) as i64 - 4);
        for upper in [false, true] {
            check(Trilu { upper }, &[(x.clone(), Input)], Expect::Exact);
            check(Trilu { upper }, &[(rng.bools(&s), Input), (k.clone(), Const)], Expect::Exact);
            check(Trilu { upper }, &[(rng.ints(&s, -9, 9), Input), (k.clone(), Input)], Expect::Exact);
        }
        let axis = rng.below(s.len() as u64) as i64 - if rng.below(2) == 0 { s.len() as i64 } else { 0 };
        for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
            let op = CumSum { axis, exclusive, reverse };
            check(op, &[(x.clone(), Input)], Expect::Exact);
            let i = rng.ints(&s, -(1 << 61), 1 << 61);
            check(op, &[(i.clone(), Input)], Expect::Exact);
            check(op, &[(i.cast(DType::I32), Input)], Expect::Exact);
        }
        let (a, b) = (rng.below(20) as i64 - 10, rng.below(20) as i64 - 10);
        let step = [1, 2, 3, -1, -2][rng.below(5) as usize];
        let ints = [Tensor::scalar_i64(a), Tensor::scalar_i64(b), Tensor::scalar_i64(step)];
        check(Range, &[(ints[0].clone(), Const), (ints[1].clone(), Const), (ints[2].clone(), Const)], Expect::Exact);
        let f = |v: i64| Tensor::scalar_f32(v as f32 * 0.37);
        check(Range, &[(f(a), Const), (f(b), Const), (f(step), Const)], Expect::Exact);
        let r = ints.iter().map(|t| (t.cast(DType::I32), Const)).collect::<Vec<_>>();
        check(Range, &r, Expect::Exact);
        check(Size, &[(x.clone(), Input)], Expect::Exact);
        let start = rng.below(5) as i64 - 2;
        let end = if rng.below(2) == 0 { None } else { Some(rng.below(5) as i64 - 2) };
        check(ShapeOf { start, end }, &[(x, Input)], Expect::Exact);
        let dims = Tensor::from_i64(vec![s.len()], s.iter().map(|&d| d as i64).collect());
        let op = ConstantOfShape { value: Tensor::from_f32(vec![1], vec![2.5]) };
        check(op, &[(dims, Const)], Expect::Exact);
    }

    /// `fast_math`: the vector exp, sigmoid (and SiLU in swiglu) and
    /// softmax within 1e-6 relative of the reference, element by element.
    #[test]
    fn fast_math_transcendentals(s in shape(3, 9).prop_filter("rank >= 1", |s| !s.is_empty()), seed: u64) {
        let mut rng = Lcg(seed);
        let fast = CpuOptions::default();
        let x = with_specials(rng.tensor(&s, 30.0), &mut rng);
        for kind in [UnaryKind::Exp, UnaryKind::Sigmoid] {
            check_with(Unary::new(kind), &[(x.clone(), Input)], Expect::ElemRel(1e-6), fast);
        }
        let axis = rng.below(s.len() as u64) as i64;
        check_with(Softmax { axis }, &[(rng.tensor(&s, 30.0), Input)], Expect::ElemRel(1e-6), fast);
    }
}

/// The vector exp over its whole range, against the reference's `expf`:
/// within 2e-7 relative (about 1.5 ulp), with `inf` above 88.72, zero and
/// subnormals below -87.3, and NaN through.
#[test]
fn fast_exp_sweep() {
    let n = 200_001;
    let mut v: Vec<f32> = (0..n)
        .map(|i| -105.0 + 195.0 * i as f32 / (n - 1) as f32)
        .collect();
    v.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        88.72,
        88.73,
        -87.33,
        -103.9,
        -104.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    let x = Tensor::from_f32(vec![v.len()], v);
    for options in [
        CpuOptions::default(),
        CpuOptions {
            fma: false,
            fast_math: true,
            host_gemm: false,
            host_qgemm: false,
            threads: 1,
        },
    ] {
        check_with(
            Unary::new(UnaryKind::Exp),
            &[(x.clone(), Input)],
            Expect::ElemRel(2e-7),
            options,
        );
        check_with(
            Unary::new(UnaryKind::Sigmoid),
            &[(x.clone(), Input)],
            Expect::ElemRel(2e-7),
            options,
        );
    }
}

/// Large operands take the packed GEMM path with `k` split into blocks
/// (partial sums stored in `C`, and for the gated MLPs the second product's
/// in a stack buffer, then reloaded; the activation in a pass of its own):
/// still bit-exact without FMA.
#[test]
fn gemm_blocked_over_k() {
    let mut rng = Lcg(5);
    // Matmuls pack from 64 rows on, gated MLPs from 8; the last case has
    // too many rows for a gated MLP's up sums on the stack: it takes the
    // direct path.
    for (m, k, n) in [
        (9, 2100, 37),
        (64, 1030, 8),
        (70, 2100, 21),
        (66, 300, 19),
        (3, 1500, 70),
        (13, 4099, 9),
        (8200, 6, 9),
    ] {
        let x = rng.tensor(&[m, k], 1.0);
        let w = rng.tensor(&[k, n], 1.0);
        check(
            MatMul,
            &[(x.clone(), Input), (w.clone(), Weight)],
            Expect::Exact,
        );
        check_with(
            MatMul,
            &[(x.clone(), Input), (w, Weight)],
            Expect::Rel(1e-5),
            CpuOptions::default(),
        );
        let (g, u) = (rng.tensor(&[k, n], 1.0), rng.tensor(&[k, n], 1.0));
        let gu = rng.tensor(&[k, 2 * n], 1.0);
        for op in [Glu::swiglu(), Glu::geglu(GeluApprox::Tanh)] {
            let sep = [(x.clone(), Input), (g.clone(), Weight), (u.clone(), Weight)];
            check(op, &sep, Expect::Exact);
            check(
                op,
                &[(x.clone(), Input), (gu.clone(), Weight)],
                Expect::Exact,
            );
            check_with(op, &sep, Expect::Rel(1e-5), CpuOptions::default());
        }
    }
}

#[test]
fn constants_are_copied_from_data() {
    let t = Tensor::from_f32(vec![2, 3], vec![1.0, -2.0, 3.5, 0.0, f32::NAN, 7.0]);
    let op = Op::Constant(slmcc_ir::ops::constant::Constant::from_tensor(t.clone()));
    let got = run_jit(&op, &[], CpuOptions::default()).unwrap();
    common::assert_same(&got[0], &t, Expect::Exact, "constant");
    let b = Tensor::from_bool(vec![3], vec![true, false, true]);
    let op = Op::Constant(slmcc_ir::ops::constant::Constant::from_tensor(b.clone()));
    assert_eq!(run_jit(&op, &[], CpuOptions::default()).unwrap()[0], b);
}

#[test]
fn gather_index_out_of_range_is_an_error_not_a_crash() {
    let data = Tensor::from_f32(vec![3, 2], vec![0.0; 6]);
    let idx = Tensor::from_i64(vec![2], vec![1, 3]);
    let e = run_jit(
        &Op::Gather(Gather { axis: 0 }),
        &[(data, Input), (idx, Input)],
        CpuOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("index out of range"), "{e}");
}

/// Every `f16` and `bf16` bit pattern (zeros, subnormals, normals,
/// infinities, NaNs with their payloads) widens to the reference's `f32`
/// bits, in vectors and in the scalar tail.
#[test]
fn every_half_bit_pattern_widens_exactly() {
    let bytes: Vec<u8> = (0..=u16::MAX)
        .chain([0x3c00])
        .flat_map(u16::to_le_bytes)
        .collect();
    for dtype in [DType::F16, DType::BF16] {
        let x = Tensor::from_le_bytes(dtype, vec![65537], &bytes).unwrap();
        let want = x.cast(DType::F32).to_le_bytes();
        for options in [CpuOptions::exact(), CpuOptions::default()] {
            let got = run_jit(
                &Op::Cast(Cast { to: DType::F32 }),
                &[(x.clone(), Input)],
                options,
            )
            .unwrap();
            let got = got[0].to_le_bytes();
            for (i, (g, w)) in got.chunks(4).zip(want.chunks(4)).enumerate() {
                assert_eq!(g, w, "{dtype} bits {i:#06x}");
            }
        }
    }
}

#[test]
fn unsupported_ops_name_the_op() {
    let x = Tensor::from_f32(vec![4], vec![1.0; 4]);
    // Reductions compute on f32 only.
    let h = x.cast(DType::F16);
    let e = run_jit(
        &Op::Reduce(Reduce::new(ReduceKind::Sum, None, false)),
        &[(h, Input)],
        CpuOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("op `reduce_sum` on f16 is not supported by the cpu backend yet"),
        "{e}"
    );
    assert!(matches!(e, CpuError::AtNode { .. }), "{e:?}");
    // 4-bit elements are not addressable one by one.
    let e = run_jit(
        &Op::Cast(Cast { to: DType::I4 }),
        &[(x, Input)],
        CpuOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("op `cast` from f32 to i4"), "{e}");
}
