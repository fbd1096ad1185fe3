//! The cpu kernels on the dtypes beyond `f32`/`i64`/`i32`/`bool` and the
//! forms lowered for them, against the reference evaluation on random odd
//! shapes (bit-exact): element-wise ops on `f16` and `bf16` (computed in
//! `f32`, rounded back to nearest even), integer arithmetic on `i8`, `u8`,
//! `i32` and `i64` (wrapping; `div`, `mod`, `pow`), `pow` with operands of
//! two dtypes, casts between every pair, `where` on any dtype, and
//! `gather_nd`/`gather_elements` with indices read at run time. Also: the
//! 16-bit conversions on every `f16` pattern and on `f32` patterns around
//! every rounding boundary, and the statuses of an integer division by
//! zero and a gather index out of range.

mod common;

use common::{broadcast_of, check, run_jit, shape, Expect, Kind, Lcg};
use proptest::prelude::*;
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::cast::Cast;
use slmcc_ir::ops::gather_elements::GatherElements;
use slmcc_ir::ops::gather_nd::GatherNd;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ops::where_::Where;
use slmcc_ir::{DType, EvalCtx, Op, OpDef, Tensor};

use Kind::{Const, Input};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    }
}

/// `f32` values with zeros, infinities, NaN, tiny and huge ones mixed in.
fn floats(rng: &mut Lcg, s: &[usize], scale: f32) -> Tensor {
    let mut v = rng.tensor(s, scale).to_f32_vec();
    for x in v.iter_mut() {
        match rng.below(30) {
            0 => *x = 0.0,
            1 => *x = f32::INFINITY,
            2 => *x = f32::NEG_INFINITY,
            3 => *x = f32::NAN,
            4 => *x *= 1e-6,
            5 => *x *= 1e5,
            _ => {}
        }
    }
    Tensor::from_f32(s.to_vec(), v)
}

/// Runs `op` on the JIT and asserts the result's bytes equal the
/// reference's (NaN payloads included).
fn check_bits(op: impl Into<Op>, operands: &[(Tensor, Kind)]) {
    let op: Op = op.into();
    let refs: Vec<&Tensor> = operands.iter().map(|(t, _)| t).collect();
    let want = op.eval(&refs, &EvalCtx::default()).unwrap().remove(0);
    let got = run_jit(&op, operands, CpuOptions::exact())
        .unwrap()
        .remove(0);
    assert_eq!(got.dtype(), want.dtype());
    let (g, w) = (got.to_le_bytes(), want.to_le_bytes());
    let eb = want.dtype().bits() / 8;
    if let Some(i) = (0..want.len()).find(|&i| g[i * eb..(i + 1) * eb] != w[i * eb..(i + 1) * eb]) {
        let input = operands[0].0.to_le_bytes();
        let ib = operands[0].0.dtype().bits() / 8;
        panic!(
            "`{}` element {i}: input {:02x?}: jit {:02x?} vs reference {:02x?}",
            op.mnemonic(),
            &input[i * ib..(i + 1) * ib],
            &g[i * eb..(i + 1) * eb],
            &w[i * eb..(i + 1) * eb]
        );
    }
}

#[test]
fn every_f16_widens_exactly_and_rounds_back() {
    let all: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    let h = Tensor::from_le_bytes(DType::F16, vec![1 << 16], &all).unwrap();
    check_bits(Cast { to: DType::F32 }, &[(h.clone(), Input)]);
    check_bits(Cast { to: DType::F16 }, &[(h.cast(DType::F32), Input)]);
    let b = Tensor::from_le_bytes(DType::BF16, vec![1 << 16], &all).unwrap();
    check_bits(Cast { to: DType::F32 }, &[(b.clone(), Input)]);
    check_bits(Cast { to: DType::BF16 }, &[(b.cast(DType::F32), Input)]);
    // Between the two 16-bit formats, through f32.
    check_bits(Cast { to: DType::BF16 }, &[(h.clone(), Input)]);
    check_bits(Cast { to: DType::F16 }, &[(b, Input)]);
}

#[test]
fn f32_rounds_to_16_bit_floats_like_the_reference() {
    // Every exponent and sign, with mantissas at and around the rounding
    // boundaries of both formats, then random patterns.
    let mut mantissas = Vec::new();
    for hi in [0u32, 1, 2, 0x155, 0x200, 0x3fe, 0x3ff] {
        for lo in [0u32, 1, 0x7ff, 0x800, 0xfff, 0x1000, 0x1001, 0x17ff, 0x1fff] {
            mantissas.push((hi << 13) | lo);
        }
    }
    for lo16 in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0x8007, 0x8008, 0xffff] {
        for hi in [0u32, 1, 0x40, 0x7e, 0x7f] {
            mantissas.push((hi << 16) | lo16);
        }
    }
    let mut bits = Vec::new();
    for sign in [0u32, 1 << 31] {
        for exp in 0..256u32 {
            for &m in &mantissas {
                bits.push(sign | (exp << 23) | (m & 0x7f_ffff));
            }
        }
    }
    let mut rng = Lcg(7);
    bits.extend((0..100_003).map(|_| rng.next_u64() as u32));
    let x = Tensor::from_f32(
        vec![bits.len()],
        bits.iter().map(|&b| f32::from_bits(b)).collect(),
    );
    check_bits(Cast { to: DType::F16 }, &[(x.clone(), Input)]);
    check_bits(Cast { to: DType::BF16 }, &[(x, Input)]);
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn unary_on_16_bit_floats(s in shape(4, 9), seed: u64) {
        let mut rng = Lcg(seed);
        let x = floats(&mut rng, &s, 4.0);
        for d in [DType::F16, DType::BF16] {
            let x = x.cast(d);
            for kind in UnaryKind::ALL {
                if kind != UnaryKind::Not {
                    check(Unary::new(kind), &[(x.clone(), Input)], Expect::Exact);
                }
            }
        }
    }

    #[test]
    fn binary_on_16_bit_floats(s in shape(4, 9), seed: u64) {
        let mut rng = Lcg(seed);
        let t = broadcast_of(&s, &mut rng);
        let (a, b) = if rng.below(2) == 0 { (s.clone(), t) } else { (t, s.clone()) };
        let (x, y) = (floats(&mut rng, &a, 3.0), floats(&mut rng, &b, 3.0));
        for d in [DType::F16, DType::BF16] {
            for kind in BinaryKind::ALL {
                if !kind.is_logic() {
                    check(Binary::new(kind), &[(x.cast(d), Input), (y.cast(d), Input)], Expect::Exact);
                }
            }
        }
    }

    #[test]
    fn integer_arithmetic_wraps_like_the_reference(s in shape(3, 7), seed: u64) {
        let mut rng = Lcg(seed);
        let t = broadcast_of(&s, &mut rng);
        for (d, lo, hi, min) in [
            (DType::I8, -128, 127, -128),
            (DType::U8, 0, 255, 0),
            (DType::I32, i32::MIN as i64, i32::MAX as i64, i32::MIN as i64),
            (DType::I64, i64::MIN / 4, i64::MAX / 4, i64::MIN),
            (DType::I64, -9, 9, i64::MIN),
        ] {
            let x = rng.ints(&s, lo, hi).cast(d);
            // Divisors without zeros, some -1 (`MIN / -1` wraps).
            let y: Vec<i64> = rng.ints(&t, lo.max(-20), hi.min(20)).to_i64_vec()
                .into_iter()
                .map(|v| if v == 0 { -1 } else { v })
                .collect();
            let y = Tensor::from_i64(t.clone(), y).cast(d);
            for kind in BinaryKind::ALL {
                if kind.is_logic() || kind == BinaryKind::Pow {
                    continue;
                }
                check(Binary::new(kind), &[(x.clone(), Input), (y.clone(), Input)], Expect::Exact);
            }
            let min = Tensor::from_i64(vec![1], vec![min]).cast(d);
            let m1 = Tensor::from_i64(vec![1], vec![-1]).cast(d);
            check(Binary::new(BinaryKind::Div), &[(min.clone(), Input), (m1.clone(), Input)], Expect::Exact);
            check(Binary::new(BinaryKind::Mod), &[(min, Input), (m1, Input)], Expect::Exact);
            // Small bases and exponents (negative ones give fractions,
            // `0^-1` infinity: both truncate and saturate).
            let base = rng.ints(&s, if d == DType::U8 { 0 } else { -9 }, 9).cast(d);
            let exp = rng.ints(&t, if d == DType::U8 { 0 } else { -3 }, 12).cast(d);
            check(Binary::new(BinaryKind::Pow), &[(base, Input), (exp, Input)], Expect::Exact);
        }
        let (p, q) = (rng.bools(&s), rng.bools(&t));
        for kind in [BinaryKind::Equal, BinaryKind::Less, BinaryKind::GreaterOrEqual] {
            check(Binary::new(kind), &[(p.clone(), Input), (q.clone(), Input)], Expect::Exact);
        }
        for kind in [UnaryKind::Neg, UnaryKind::Abs, UnaryKind::Sign, UnaryKind::Relu] {
            check(Unary::new(kind), &[(rng.ints(&s, -128, 127).cast(DType::I8), Input)], Expect::Exact);
        }
    }

    #[test]
    fn pow_with_two_dtypes(s in shape(3, 7), seed: u64) {
        let mut rng = Lcg(seed);
        let t = broadcast_of(&s, &mut rng);
        let fbase = rng.tensor(&s, 3.0);
        let fexp = rng.tensor(&t, 3.0);
        let ibase = rng.ints(&s, -6, 6);
        let iexp = rng.ints(&t, -2, 9);
        let pairs = [
            (fbase.clone(), iexp.clone()),
            (fbase.clone(), iexp.cast(DType::I32)),
            (fbase.cast(DType::F16), iexp.clone()),
            (fbase, iexp.cast(DType::U8)),
            (ibase.clone(), fexp.clone()),
            (ibase.cast(DType::I32), fexp.clone()),
            (ibase.cast(DType::I8), fexp.cast(DType::F16)),
            (ibase.clone(), iexp.cast(DType::I32)),
            (ibase.cast(DType::I32), iexp),
        ];
        for (a, b) in pairs {
            check(Binary::new(BinaryKind::Pow), &[(a, Input), (b, Input)], Expect::Exact);
        }
    }

    #[test]
    fn casts_between_every_dtype(s in shape(3, 9), seed: u64) {
        let mut rng = Lcg(seed);
        let all = [
            DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32,
            DType::I8, DType::U8, DType::Bool,
        ];
        let sources = [
            floats(&mut rng, &s, 300.0),
            floats(&mut rng, &s, 1e5),
            rng.ints(&s, -(1 << 40), 1 << 40),
            rng.ints(&s, -300, 300),
            rng.bools(&s),
        ];
        for x in sources {
            for from in all {
                let x = x.cast(from);
                for to in all {
                    check(Cast { to }, &[(x.clone(), Input)], Expect::Exact);
                }
            }
        }
    }

    #[test]
    fn where_copies_any_dtype(s in shape(3, 8), seed: u64) {
        let mut rng = Lcg(seed);
        let (c, y) = (broadcast_of(&s, &mut rng), broadcast_of(&s, &mut rng));
        let cond = rng.bools(&c);
        for d in [DType::F16, DType::BF16, DType::I8, DType::U8] {
            let a = floats(&mut rng, &s, 200.0).cast(d);
            let b = floats(&mut rng, &y, 200.0).cast(d);
            check(Where, &[(cond.clone(), Input), (a, Input), (b, Input)], Expect::Exact);
        }
    }

    #[test]
    fn gathers_with_indices_at_run_time(
        s in shape(4, 5).prop_filter("rank >= 1", |s| !s.is_empty()),
        lead in shape(2, 4),
        seed: u64,
    ) {
        let mut rng = Lcg(seed);
        let data = floats(&mut rng, &s, 10.0);
        // gather_nd: batch dims shared with the indices, then tuples of
        // length m into the next m axes (negative indices too).
        let b = rng.below(s.len() as u64) as usize;
        let m = 1 + rng.below((s.len() - b) as u64) as usize;
        let mut ishape = s[..b].to_vec();
        ishape.extend(&lead);
        ishape.push(m);
        let count: usize = ishape.iter().product();
        let idx: Vec<i64> = (0..count)
            .map(|i| {
                let d = s[b + i % m] as i64;
                rng.below(2 * d as u64) as i64 - d
            })
            .collect();
        let idx = Tensor::from_i64(ishape, idx);
        let op = GatherNd { batch_dims: b as i64 };
        check(op, &[(data.clone(), Input), (idx.clone(), Input)], Expect::Exact);
        check(op, &[(data.cast(DType::F16), Input), (idx.cast(DType::I32), Input)], Expect::Exact);
        // gather_elements along one axis; other dims at most the data's.
        let axis = rng.below(s.len() as u64) as usize;
        let es: Vec<usize> = s
            .iter()
            .enumerate()
            .map(|(i, &d)| if i == axis { 1 + rng.below(6) as usize } else { 1 + rng.below(d as u64) as usize })
            .collect();
        let e = rng.ints(&es, -(s[axis] as i64), s[axis] as i64 - 1);
        let op = GatherElements { axis: axis as i64 - if rng.below(2) == 0 { s.len() as i64 } else { 0 } };
        check(op, &[(data.clone(), Input), (e.clone(), Input)], Expect::Exact);
        check(op, &[(rng.ints(&s, -99, 99), Input), (e.cast(DType::I32), Input)], Expect::Exact);
        check(op, &[(rng.bools(&s), Input), (e, Const)], Expect::Exact);
    }
}

#[test]
fn integer_division_by_zero_is_an_error_not_a_trap() {
    for kind in [BinaryKind::Div, BinaryKind::Mod] {
        for d in [DType::I64, DType::I32, DType::I8, DType::U8] {
            let x = Tensor::from_i64(vec![3], vec![7, 8, 9]).cast(d);
            let y = Tensor::from_i64(vec![3], vec![1, 0, 2]).cast(d);
            let op = Op::Binary(Binary::new(kind));
            assert!(op.eval(&[&x, &y], &EvalCtx::default()).is_err());
            let e = run_jit(&op, &[(x, Input), (y, Input)], CpuOptions::default()).unwrap_err();
            assert!(e.to_string().contains("integer division by zero"), "{e}");
        }
    }
}

#[test]
fn gather_indices_out_of_range_are_errors_not_crashes() {
    let data = Tensor::from_f32(vec![2, 3], vec![0.0; 6]);
    let cases: [(Op, Tensor); 4] = [
        (
            GatherNd { batch_dims: 0 }.into(),
            Tensor::from_i64(vec![2, 2], vec![1, 2, 0, 3]),
        ),
        (
            GatherNd { batch_dims: 1 }.into(),
            Tensor::from_i64(vec![2, 1], vec![0, -4]),
        ),
        (
            GatherElements { axis: 1 }.into(),
            Tensor::from_i64(vec![1, 2], vec![2, 3]),
        ),
        (
            GatherElements { axis: 0 }.into(),
            Tensor::from_i64(vec![2, 1], vec![-3, 0]),
        ),
    ];
    for (op, idx) in cases {
        assert!(op.eval(&[&data, &idx], &EvalCtx::default()).is_err());
        let e = run_jit(
            &op,
            &[(data.clone(), Input), (idx, Input)],
            CpuOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("index out of range"), "{e}");
    }
}
