//! The floating-point instructions (`norm.rms`, `cvt.f16`, `mm.f16`,
//! `sm.online`, `ew.rescale`) in the simulator: `norm.rms` bit for bit
//! against the IR's `rms_norm` / `add_rms_norm` evaluation on random data,
//! the others against hand-computed values and plainly written
//! references of the documented operation order, their cycles, and
//! out-of-range operands leaving the CBUF unchanged.

use super::{ExecError, NpuSim, SimError};
use half::f16;
use slmcc_backends::npu::isa::{CoreProgram, Instr, Program, RescaleMode, ScoreMask};
use slmcc_backends::npu::Target;
use slmcc_ir::ops::add_rms_norm::AddRmsNorm;
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::{EvalCtx, OpDef, Tensor};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let s = &mut self.0;
        *s ^= *s >> 12;
        *s ^= *s << 25;
        *s ^= *s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `[-mag, mag)`.
    fn f(&mut self, mag: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * mag
    }
}

fn one_core(compute: Vec<Instr>) -> Program {
    Program {
        cores: vec![CoreProgram {
            dma: vec![],
            compute,
        }],
    }
}

fn new_sim() -> NpuSim {
    NpuSim::new(Target::rk3588(), vec![0; 64])
}

fn put_f32(sim: &mut NpuSim, at: u32, v: &[f32]) {
    for (e, x) in v.iter().enumerate() {
        sim.cbuf[0][at as usize + 4 * e..][..4].copy_from_slice(&x.to_le_bytes());
    }
}

fn put_f16(sim: &mut NpuSim, at: u32, v: &[f16]) {
    for (e, x) in v.iter().enumerate() {
        sim.cbuf[0][at as usize + 2 * e..][..2].copy_from_slice(&x.to_le_bytes());
    }
}

fn get_f32(sim: &NpuSim, at: u32, count: usize) -> Vec<f32> {
    sim.cbuf[0][at as usize..][..4 * count]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn get_u16(sim: &NpuSim, at: u32, count: usize) -> Vec<u16> {
    sim.cbuf[0][at as usize..][..2 * count]
        .chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs one instruction on core 0 and returns its cycles.
fn run1(sim: &mut NpuSim, i: Instr) -> u64 {
    sim.run(&one_core(vec![i])).unwrap().cycles
}

/// The instruction fails with an out-of-range CBUF access and leaves the
/// CBUF exactly as it was.
fn assert_oob_unchanged(sim: &mut NpuSim, i: Instr) {
    let before = sim.cbuf[0].clone();
    let err = sim.run(&one_core(vec![i])).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::Exec {
                source: ExecError::OutOfRange { .. },
                ..
            }
        ),
        "{i}: {err}"
    );
    assert!(
        sim.cbuf[0] == before,
        "{i} wrote to the CBUF before failing"
    );
}

// ---- norm.rms ----

/// Rows with values of mixed magnitudes, some signed zeros.
fn rows(rng: &mut Rng, len: usize) -> Vec<f32> {
    (0..len)
        .map(|e| match rng.next() % 16 {
            0 => 0.0,
            1 => -0.0,
            2 => rng.f(1e-3),
            3 => rng.f(300.0),
            _ => rng.f(2.0) + if e % 7 == 0 { 1e-4 } else { 0.0 },
        })
        .collect()
}

/// `norm.rms` against `RmsNorm::eval` and `AddRmsNorm::eval` bit for bit:
/// random shapes (incl. `n = 1`, odd `n`), `eps` and `offset` values,
/// with and without the residual, in place (`y = x`, `s = r`) too.
#[test]
fn norm_rms_matches_ir_bit_for_bit() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let shapes: [(u32, u32); 6] = [(1, 1), (1, 64), (3, 37), (4, 128), (2, 1000), (5, 3)];
    for (case, &(m, n)) in shapes.iter().enumerate() {
        for (eps, offset) in [(1e-6f32, 0.0f32), (1e-5, 1.0), (0.0, -0.5)] {
            let (mu, nu) = (m as usize, n as usize);
            let x = rows(&mut rng, mu * nu);
            let r = rows(&mut rng, mu * nu);
            let w: Vec<f32> = (0..nu).map(|_| rng.f(1.5)).collect();
            let xt = Tensor::from_f32(vec![mu, nu], x.clone());
            let rt = Tensor::from_f32(vec![mu, nu], r.clone());
            let wt = Tensor::from_f32(vec![nu], w.clone());
            let ctx = EvalCtx::default();
            let want_y = RmsNorm { eps, offset }.eval(&[&xt, &wt], &ctx).unwrap()[0].to_f32_vec();
            let add = AddRmsNorm { eps, offset }
                .eval(&[&xt, &rt, &wt], &ctx)
                .unwrap();
            let (want_s, want_sy) = (add[0].to_f32_vec(), add[1].to_f32_vec());
            let bytes = 4 * m * n;
            let (xa, ra, qa) = (
                0u32,
                bytes.next_multiple_of(16),
                2 * bytes.next_multiple_of(16),
            );
            let (sa, ya) = (qa + (16 + 4 * n).next_multiple_of(16), 0x40000);
            for in_place in [false, true] {
                let mut s = new_sim();
                put_f32(&mut s, xa, &x);
                put_f32(&mut s, ra, &r);
                put_f32(&mut s, qa, &[eps, offset, f32::NAN, 7.0]);
                put_f32(&mut s, qa + 16, &w);
                let y = if in_place { xa } else { ya };
                run1(
                    &mut s,
                    Instr::RmsNorm {
                        x: xa,
                        residual: None,
                        params: qa,
                        y,
                        m,
                        n,
                    },
                );
                assert_eq!(
                    bits(&get_f32(&s, y, m as usize * n as usize)),
                    bits(&want_y),
                    "case {case} eps {eps} offset {offset}"
                );
                // With the residual: `s` and `y` (in place: `s = r`, `y = x`).
                put_f32(&mut s, xa, &x);
                let (sd, y) = if in_place { (ra, xa) } else { (sa, ya) };
                run1(
                    &mut s,
                    Instr::RmsNorm {
                        x: xa,
                        residual: Some((ra, sd)),
                        params: qa,
                        y,
                        m,
                        n,
                    },
                );
                assert_eq!(bits(&get_f32(&s, sd, mu * nu)), bits(&want_s));
                assert_eq!(bits(&get_f32(&s, y, mu * nu)), bits(&want_sy));
            }
        }
    }
}

/// `norm.rms` by hand on one row, its cycles (`P = 2` without the
/// residual, 3 with), and an out-of-range `y` after an in-range `s`.
#[test]
fn norm_rms_by_hand_timing_and_errors() {
    let mut s = new_sim();
    // Row [3, 4]: ss = 25, ss / 2 = 12.5, + eps 0 -> inv = 1/sqrt(12.5).
    put_f32(&mut s, 0, &[3.0, 4.0]);
    put_f32(&mut s, 0x100, &[0.0, 1.0, 0.0, 0.0, 1.0, -1.0]);
    let i = Instr::RmsNorm {
        x: 0,
        residual: None,
        params: 0x100,
        y: 0x200,
        m: 1,
        n: 2,
    };
    assert_eq!(run1(&mut s, i), 16 + 1);
    let inv = 1.0f32 / 12.5f32.sqrt();
    assert_eq!(
        bits(&get_f32(&s, 0x200, 2)),
        bits(&[(3.0 * inv) * 2.0, (4.0 * inv) * 0.0])
    );
    let t = Target::rk3588();
    let timed = |residual| {
        let i = Instr::RmsNorm {
            x: 0,
            residual,
            params: 0x100,
            y: 0x200,
            m: 2,
            n: 64,
        };
        NpuSim::time(&t, &one_core(vec![i])).unwrap().cycles
    };
    assert_eq!(timed(None), 16 + 2 * 128 / 64);
    assert_eq!(timed(Some((0x400, 0x800))), 16 + 3 * 128 / 64);
    // 3 rows of 5: 16 + ceil(2 · 15 / 64) = 17.
    let i = Instr::RmsNorm {
        x: 0,
        residual: None,
        params: 0x100,
        y: 0x200,
        m: 3,
        n: 5,
    };
    assert_eq!(NpuSim::time(&t, &one_core(vec![i])).unwrap().cycles, 17);
    // `s` fits, `y` does not: nothing is written.
    let past = t.cbuf_bytes - 16;
    assert_oob_unchanged(
        &mut s,
        Instr::RmsNorm {
            x: 0,
            residual: Some((0x20, 0x300)),
            params: 0x100,
            y: past,
            m: 1,
            n: 8,
        },
    );
    // Weights past the end.
    assert_oob_unchanged(
        &mut s,
        Instr::RmsNorm {
            x: 0,
            residual: None,
            params: t.cbuf_bytes - 32,
            y: 0x300,
            m: 1,
            n: 8,
        },
    );
}

// ---- cvt.f16 ----

/// `cvt.f16`: exact values, ties to even (normal and subnormal), overflow
/// to ±∞ (65520 is the first value that rounds up to ∞), signed zeros,
/// infinities, NaN; in place; cycles; out of range.
#[test]
fn cvt_f16_rounding() {
    let one = 1.0f32;
    let cases: [(f32, u16); 20] = [
        (one, 0x3c00),
        (-2.0, 0xc000),
        (0.0, 0x0000),
        (-0.0, 0x8000),
        // Halfway between 1 and 1 + 2^-10: to even (1).
        (one + 2f32.powi(-11), 0x3c00),
        // Halfway between 1 + 2^-10 and 1 + 2^-9: to even (1 + 2^-9).
        (one + 3.0 * 2f32.powi(-11), 0x3c02),
        // Just above the halfway point: up.
        (one + 2f32.powi(-11) + 2f32.powi(-20), 0x3c01),
        (65504.0, 0x7bff),
        (65519.996, 0x7bff),
        (65520.0, 0x7c00),
        (-65520.0, 0xfc00),
        (1e6, 0x7c00),
        (f32::INFINITY, 0x7c00),
        (f32::NEG_INFINITY, 0xfc00),
        // Subnormals: 2^-24 is the smallest; 2^-25 ties to 0, 3·2^-25 to 2.
        (2f32.powi(-24), 0x0001),
        (2f32.powi(-25), 0x0000),
        (-2f32.powi(-25), 0x8000),
        (3.0 * 2f32.powi(-25), 0x0002),
        (2f32.powi(-14), 0x0400),
        (0.1, 0x2e66),
    ];
    let mut s = new_sim();
    let mut input: Vec<f32> = cases.iter().map(|c| c.0).collect();
    input.push(f32::NAN);
    input.push(-f32::NAN);
    put_f32(&mut s, 0x100, &input);
    // Past the converted data, to check only 2·LEN bytes are written.
    let len = input.len();
    let cycles = run1(
        &mut s,
        Instr::CvtF16 {
            input: 0x100,
            out: 0x100,
            len: len as u32,
            lo: None,
        },
    );
    assert_eq!(cycles, 16 + 1);
    let got = get_u16(&s, 0x100, len);
    for (e, &(x, want)) in cases.iter().enumerate() {
        assert_eq!(got[e], want, "{x:e}: {:#06x}", got[e]);
    }
    for (h, sign) in got[cases.len()..].iter().zip([0u16, 0x8000]) {
        assert!(f16::from_bits(*h).is_nan(), "{h:#06x}");
        assert_eq!(h & 0x8000, sign);
    }
    // The second half of the input is untouched.
    assert_eq!(
        bits(&get_f32(&s, 0x100 + 2 * len as u32 + 4, 1)),
        bits(&input[len / 2 + 1..len / 2 + 2])
    );
    let t = Target::rk3588();
    let long = Instr::CvtF16 {
        input: 0,
        out: 0x1000,
        len: 200,
        lo: None,
    };
    assert_eq!(
        NpuSim::time(&t, &one_core(vec![long])).unwrap().cycles,
        16 + 4
    );
    assert_oob_unchanged(
        &mut s,
        Instr::CvtF16 {
            input: 0,
            out: t.cbuf_bytes - 16,
            len: 9,
            lo: None,
        },
    );
    assert_oob_unchanged(
        &mut s,
        Instr::CvtF16 {
            input: t.cbuf_bytes - 16,
            out: 0,
            len: 5,
            lo: None,
        },
    );
}

// ---- mm.f16 ----

/// The plain `mm.f16` reference: `d` from `+0`, sequential.
fn ref_mm(a: &[f16], b: &[f16], (m, k, n): (usize, usize, usize), bt: bool) -> Vec<f32> {
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut d = 0.0f32;
            for p in 0..k {
                let bv = if bt { b[j * k + p] } else { b[p * n + j] };
                d += a[i * k + p].to_f32() * bv.to_f32();
            }
            out[i * n + j] = d;
        }
    }
    out
}

fn h(v: &[f32]) -> Vec<f16> {
    v.iter().map(|&x| f16::from_f32(x)).collect()
}

/// `mm.f16` by hand (both layouts), the sequential f32 sum (`2^24 + 1 +
/// 1` stays `2^24`), accumulate, random shapes against the reference,
/// MACs and cycles, out of range.
#[test]
fn matmul_f16_layouts_and_accumulate() {
    // a = [[1, 2, 3], [-1, 0.5, 4096]], b = [[1, 0], [2, 1], [-1, 4096]].
    let a = h(&[1.0, 2.0, 3.0, -1.0, 0.5, 4096.0]);
    let b = h(&[1.0, 0.0, 2.0, 1.0, -1.0, 4096.0]);
    let bt = h(&[1.0, 2.0, -1.0, 0.0, 1.0, 4096.0]);
    let want = [2.0f32, 12290.0, -4096.0, 16777216.0];
    let mut s = new_sim();
    put_f16(&mut s, 0, &a);
    for (bv, transposed) in [(&b, false), (&bt, true)] {
        put_f16(&mut s, 0x100, bv);
        put_f32(&mut s, 0x200, &[9.0; 4]);
        let mm = |accumulate| Instr::MatMulF16 {
            a: 0,
            b: 0x100,
            acc: 0x200,
            m: 2,
            k: 3,
            n: 2,
            b_transposed: transposed,
            accumulate,
        };
        run1(&mut s, mm(false));
        // -1·0 + 0.5·1 = 0.5; + 4096·4096 = 2^24 + 0.5 rounds to 2^24.
        assert_eq!(bits(&get_f32(&s, 0x200, 4)), bits(&want));
        run1(&mut s, mm(true));
        let twice: Vec<f32> = want.iter().map(|w| w + w).collect();
        assert_eq!(bits(&get_f32(&s, 0x200, 4)), bits(&twice));
    }
    // Order: 2^24 + 1 + 1 sequentially is 2^24 (each +1 is a tie to even).
    put_f16(&mut s, 0, &h(&[4096.0, 1.0, 1.0]));
    put_f16(&mut s, 0x100, &h(&[4096.0, 1.0, 1.0]));
    let dot = Instr::MatMulF16 {
        a: 0,
        b: 0x100,
        acc: 0x200,
        m: 1,
        k: 3,
        n: 1,
        b_transposed: false,
        accumulate: false,
    };
    run1(&mut s, dot);
    assert_eq!(get_f32(&s, 0x200, 1)[0], 16777216.0);
    // Random shapes against the reference.
    let mut rng = Rng(42);
    for &(m, k, n) in &[
        (1usize, 1usize, 1usize),
        (3, 17, 5),
        (8, 64, 16),
        (2, 200, 3),
    ] {
        let a = h(&(0..m * k).map(|_| rng.f(4.0)).collect::<Vec<_>>());
        let b = h(&(0..k * n).map(|_| rng.f(4.0)).collect::<Vec<_>>());
        let prev: Vec<f32> = (0..m * n).map(|_| rng.f(10.0)).collect();
        for transposed in [false, true] {
            let mut s = new_sim();
            put_f16(&mut s, 0, &a);
            put_f16(&mut s, 0x2000, &b);
            put_f32(&mut s, 0x4000, &prev);
            let stats = s
                .run(&one_core(vec![Instr::MatMulF16 {
                    a: 0,
                    b: 0x2000,
                    acc: 0x4000,
                    m: m as u32,
                    k: k as u32,
                    n: n as u32,
                    b_transposed: transposed,
                    accumulate: true,
                }]))
                .unwrap();
            assert_eq!(stats.macs, (m * k * n) as u64);
            let d = ref_mm(&a, &b, (m, k, n), transposed);
            let want: Vec<f32> = prev.iter().zip(&d).map(|(p, d)| p + d).collect();
            assert_eq!(bits(&get_f32(&s, 0x4000, m * n)), bits(&want));
        }
    }
    // 4·64·16 = 4096 MACs at 512 per cycle: 16 + 8.
    let t = Target::rk3588();
    let mm = |b, acc, (m, k, n)| Instr::MatMulF16 {
        a: 0,
        b,
        acc,
        m,
        k,
        n,
        b_transposed: true,
        accumulate: false,
    };
    let stats = NpuSim::time(&t, &one_core(vec![mm(0x1000, 0x2000, (4, 64, 16))])).unwrap();
    assert_eq!((stats.cycles, stats.macs), (16 + 8, 4096));
    let odd = mm(0x1000, 0x2000, (3, 5, 7));
    assert_eq!(NpuSim::time(&t, &one_core(vec![odd])).unwrap().cycles, 17);
    let mut s = new_sim();
    put_f16(&mut s, 0, &h(&[1.0; 16]));
    assert_oob_unchanged(&mut s, mm(0x100, t.cbuf_bytes - 16, (4, 2, 2)));
    assert_oob_unchanged(&mut s, mm(t.cbuf_bytes - 16, 0x100, (1, 4, 4)));
}

// ---- sm.online ----

/// One row record: (max, sum, alpha).
type Rec = (f32, f32, f32);

/// The plain `sm.online` reference (documented steps, literally). `keep`
/// and `add` are the mask tiles, `causal` `(diag, window)`.
#[allow(clippy::too_many_arguments)]
fn ref_sm(
    s: &[f32],
    (m, n): (usize, usize),
    scale: f32,
    keep: Option<&[u8]>,
    add: Option<&[f32]>,
    causal: Option<(i64, i64)>,
    old: Option<&[Rec]>,
) -> (Vec<Rec>, Vec<u16>) {
    let mut recs = Vec::new();
    let mut p = Vec::new();
    for ii in 0..m {
        let (max_old, sum_old) = match old {
            Some(o) => (o[ii].0, o[ii].1),
            None => (f32::NEG_INFINITY, 0.0),
        };
        let mut x = vec![0.0f32; n];
        for (jj, xj) in x.iter_mut().enumerate() {
            let e = ii * n + jj;
            *xj = scale * s[e];
            if let Some(a) = add {
                *xj += a[e];
            }
            if keep.is_some_and(|k| k[e] == 0) {
                *xj = f32::NEG_INFINITY;
            }
            if let Some((d, w)) = causal {
                let r = jj as i64 - ii as i64;
                if r > d || (w > 0 && r <= d - w) {
                    *xj = f32::NEG_INFINITY;
                }
            }
        }
        let mut mt = f32::NEG_INFINITY;
        for &v in &x {
            mt = mt.max(v);
        }
        let mn = max_old.max(mt);
        if mn == f32::NEG_INFINITY {
            recs.push((mn, sum_old, 1.0));
            p.extend(std::iter::repeat_n(0u16, n));
            continue;
        }
        let alpha = (max_old - mn).exp();
        let mut t = 0.0f32;
        for &v in &x {
            let pj = (v - mn).exp();
            t += pj;
            p.push(f16::from_f32(pj).to_bits());
        }
        recs.push((mn, sum_old * alpha + t, alpha));
    }
    (recs, p)
}

const S: u32 = 0x1000;
const P: u32 = 0x2000;
const R: u32 = 0x3000;
const Q: u32 = 0x3800;
const K: u32 = 0x4000;

/// Writes the row records with a sentinel in bytes 12..16.
fn put_recs(sim: &mut NpuSim, recs: &[Rec]) {
    for (i, r) in recs.iter().enumerate() {
        let at = R + 16 * i as u32;
        put_f32(sim, at, &[r.0, r.1, r.2, f32::from_bits(0xdead_beef)]);
    }
}

fn get_recs(sim: &NpuSim, m: usize) -> Vec<Rec> {
    (0..m)
        .map(|i| {
            let v = get_f32(sim, R + 16 * i as u32, 4);
            assert_eq!(v[3].to_bits(), 0xdead_beef, "record {i}: bytes 12..16 kept");
            (v[0], v[1], v[2])
        })
        .collect()
}

fn rec_bits(r: &[Rec]) -> Vec<[u32; 3]> {
    r.iter()
        .map(|x| [x.0.to_bits(), x.1.to_bits(), x.2.to_bits()])
        .collect()
}

fn sm_instr(mask: ScoreMask, (m, n): (u32, u32), causal: Option<i32>, first: bool) -> Instr {
    Instr::SoftmaxOnline {
        scores: S,
        probs: P,
        rows: R,
        params: Q,
        mask,
        m,
        n,
        causal,
        first,
    }
}

/// The `sm.online` parameter record without soft-capping (bytes 12..16,
/// which the instruction ignores, hold junk).
fn put_params(sim: &mut NpuSim, scale: f32, window: i32) {
    put_f32(sim, Q, &[scale, f32::from_bits(window as u32), 0.0, 2.0]);
}

/// `sm.online` first and non-first steps by hand and against the
/// reference: the new max, `alpha = 0` after `first`, `exp(max_old - mn)`
/// after, the row maximum's `p = 1`, the sum, f16 probabilities.
#[test]
fn softmax_online_first_then_next() {
    let (m, n) = (2usize, 3usize);
    let s1 = [1.0f32, 3.0, 2.0, -4.0, 0.0, -1.0];
    let s2 = [8.0f32, 0.0, -2.0, -6.0, -8.0, -2.0];
    let mut sim = new_sim();
    put_params(&mut sim, 0.5, 0);
    put_recs(&mut sim, &[(f32::NAN, f32::NAN, f32::NAN); 2]);
    put_f32(&mut sim, S, &s1);
    let cycles = run1(&mut sim, sm_instr(ScoreMask::None, (2, 3), None, true));
    assert_eq!(cycles, 16 + 1);
    let r1 = get_recs(&sim, m);
    // Row 0: x = [0.5, 1.5, 1]; max 1.5, sum = e^-1 + 1 + e^-0.5.
    let e = |v: f32| v.exp();
    assert_eq!(
        rec_bits(&r1[..1]),
        rec_bits(&[(1.5, ((0.0 + e(-1.0)) + 1.0) + e(-0.5), 0.0)])
    );
    let p1 = get_u16(&sim, P, m * n);
    assert_eq!(p1[1], 0x3c00);
    assert_eq!(p1[0], f16::from_f32(e(-1.0)).to_bits());
    let (want_r, want_p) = ref_sm(&s1, (m, n), 0.5, None, None, None, None);
    assert_eq!(rec_bits(&r1), rec_bits(&want_r));
    assert_eq!(p1, want_p);
    // Next tile: row 0's max grows to 4 (alpha = e^(1.5 - 4)), row 1's
    // stays 0 (alpha = 1).
    put_f32(&mut sim, S, &s2);
    run1(&mut sim, sm_instr(ScoreMask::None, (2, 3), None, false));
    let r2 = get_recs(&sim, m);
    assert_eq!(r2[0].0, 4.0);
    assert_eq!(r2[0].2, e(1.5 - 4.0));
    assert_eq!(r2[1].0, 0.0);
    assert_eq!(r2[1].2, 1.0);
    assert_eq!(
        r2[1].1.to_bits(),
        (r1[1].1 * 1.0 + ((0.0 + e(-3.0)) + e(-4.0)) + e(-1.0)).to_bits()
    );
    let (want_r, want_p) = ref_sm(&s2, (m, n), 0.5, None, None, None, Some(&r1));
    assert_eq!(rec_bits(&r2), rec_bits(&want_r));
    assert_eq!(get_u16(&sim, P, m * n), want_p);
}

/// Soft-capping (`softcap` @8 of the parameter record) caps the scaled
/// scores before the mask: `x = cap · tanh(scale · s / cap)`.
#[test]
fn softmax_online_soft_caps_the_scores() {
    let s = [40.0f32, 2.0, -30.0];
    let mut sim = new_sim();
    put_f32(&mut sim, Q, &[0.5, 0.0, 5.0, 0.0]);
    put_recs(&mut sim, &[(f32::NAN, f32::NAN, f32::NAN)]);
    put_f32(&mut sim, S, &s);
    run1(&mut sim, sm_instr(ScoreMask::None, (1, 3), None, true));
    let cap = |v: f32| 5.0 * ((0.5 * v) / 5.0).tanh();
    let x: Vec<f32> = s.iter().map(|&v| cap(v)).collect();
    let r = get_recs(&sim, 1);
    assert_eq!(r[0].0.to_bits(), x[0].to_bits());
    assert!(r[0].0 < 5.0, "the max is capped: {}", r[0].0);
    let sum = ((0.0 + (x[0] - x[0]).exp()) + (x[1] - x[0]).exp()) + (x[2] - x[0]).exp();
    assert_eq!(r[0].1.to_bits(), sum.to_bits());
}

/// Keep and add masks against the reference; masked keys get `p = 0`.
#[test]
fn softmax_online_masks() {
    let mut rng = Rng(7);
    let (m, n) = (5usize, 37usize);
    let s: Vec<f32> = (0..m * n).map(|_| rng.f(6.0)).collect();
    let keep: Vec<u8> = (0..m * n)
        .map(|_| [0u8, 1, 255, 7][(rng.next() % 4) as usize])
        .collect();
    let add: Vec<f32> = (0..m * n)
        .map(|_| {
            if rng.next().is_multiple_of(5) {
                f32::NEG_INFINITY
            } else {
                rng.f(2.0)
            }
        })
        .collect();
    let old: Vec<Rec> = (0..m).map(|i| (i as f32 - 2.0, 1.5, 0.0)).collect();
    for (kind, first) in [(1, true), (1, false), (2, true), (2, false)] {
        let mut sim = new_sim();
        put_params(&mut sim, 0.125, 0);
        put_f32(&mut sim, S, &s);
        put_recs(&mut sim, &old);
        let mask = if kind == 1 {
            sim.cbuf[0][K as usize..][..m * n].copy_from_slice(&keep);
            ScoreMask::Keep(K)
        } else {
            put_f32(&mut sim, K, &add);
            ScoreMask::Add(K)
        };
        run1(&mut sim, sm_instr(mask, (m as u32, n as u32), None, first));
        let (want_r, want_p) = ref_sm(
            &s,
            (m, n),
            0.125,
            (kind == 1).then_some(&keep[..]),
            (kind == 2).then_some(&add[..]),
            None,
            (!first).then_some(&old[..]),
        );
        assert_eq!(rec_bits(&get_recs(&sim, m)), rec_bits(&want_r));
        let p = get_u16(&sim, P, m * n);
        assert_eq!(p, want_p);
        for e in 0..m * n {
            let masked = if kind == 1 {
                keep[e] == 0
            } else {
                add[e] == f32::NEG_INFINITY
            };
            if masked {
                assert_eq!(p[e], 0, "element {e}");
            }
        }
    }
}

/// The causal rule: key `jj` of row `ii` masked when `jj - ii > diag`, or
/// with `window > 0` when `jj - ii <= diag - window`; rows with nothing
/// kept (first: max `-inf`, sum 0, alpha 1, p 0; non-first with an old
/// max: alpha 1, sum unchanged).
#[test]
fn softmax_online_causal_window_and_masked_rows() {
    let (m, n) = (4usize, 6usize);
    let s: Vec<f32> = (0..m * n).map(|e| (e % 5) as f32 - 1.5).collect();
    let kept_pattern = |diag: i32, window: i32| -> Vec<bool> {
        (0..m * n)
            .map(|e| {
                let r = (e % n) as i32 - (e / n) as i32;
                r <= diag && !(window > 0 && r <= diag - window)
            })
            .collect()
    };
    for (diag, window) in [(1, 2), (1, 0), (0, 1), (2, 3), (-2, 0), (3, 1)] {
        let mut sim = new_sim();
        put_params(&mut sim, 1.0, window);
        put_f32(&mut sim, S, &s);
        put_recs(&mut sim, &[(0.0, 0.0, 0.0); 4]);
        run1(
            &mut sim,
            sm_instr(ScoreMask::None, (4, 6), Some(diag), true),
        );
        let (want_r, want_p) = ref_sm(
            &s,
            (m, n),
            1.0,
            None,
            None,
            Some((diag.into(), window.into())),
            None,
        );
        let r = get_recs(&sim, m);
        assert_eq!(
            rec_bits(&r),
            rec_bits(&want_r),
            "diag {diag} window {window}"
        );
        let p = get_u16(&sim, P, m * n);
        assert_eq!(p, want_p);
        let kept = kept_pattern(diag, window);
        for e in 0..m * n {
            assert_eq!(
                p[e] != 0,
                kept[e],
                "diag {diag} window {window} element {e}"
            );
        }
        for (ii, rec) in r.iter().enumerate() {
            if !kept[ii * n..][..n].iter().any(|&k| k) {
                assert_eq!(
                    rec_bits(&[*rec]),
                    rec_bits(&[(f32::NEG_INFINITY, 0.0, 1.0)])
                );
            }
        }
    }
    // diag 1, window 2: row ii keeps exactly keys ii and ii + 1.
    let k = kept_pattern(1, 2);
    for ii in 0..m {
        let row: Vec<usize> = (0..n).filter(|&jj| k[ii * n + jj]).collect();
        assert_eq!(row, vec![ii, ii + 1]);
    }
    // Window is ignored without causal.
    let mut sim = new_sim();
    put_params(&mut sim, 1.0, 1);
    put_f32(&mut sim, S, &s);
    run1(&mut sim, sm_instr(ScoreMask::None, (4, 6), None, true));
    assert!(get_u16(&sim, P, m * n).iter().all(|&p| p != 0));
    // Fully masked rows after earlier tiles: with no old max the record
    // keeps -inf and its sum; with an old max, alpha = 1 and the sum stays.
    let mut sim = new_sim();
    put_params(&mut sim, 1.0, 0);
    put_f32(&mut sim, S, &s);
    put_f32(&mut sim, P, &[1.0; 12]);
    sim.cbuf[0][K as usize..][..m * n].fill(0);
    put_recs(
        &mut sim,
        &[
            (f32::NEG_INFINITY, 0.0, 5.0),
            (f32::NEG_INFINITY, 2.5, 5.0),
            (2.0, 3.5, 5.0),
            (-1.0, 0.25, 5.0),
        ],
    );
    run1(&mut sim, sm_instr(ScoreMask::Keep(K), (4, 6), None, false));
    assert_eq!(
        rec_bits(&get_recs(&sim, m)),
        rec_bits(&[
            (f32::NEG_INFINITY, 0.0, 1.0),
            (f32::NEG_INFINITY, 2.5, 1.0),
            (2.0, 3.5, 1.0),
            (-1.0, 0.25, 1.0),
        ])
    );
    assert!(get_u16(&sim, P, m * n).iter().all(|&p| p == 0));
}

/// `sm.online` cycles and out-of-range operands (the records are not
/// updated when `p` does not fit).
#[test]
fn softmax_online_timing_and_errors() {
    let t = Target::rk3588();
    let time = |i| NpuSim::time(&t, &one_core(vec![i])).unwrap().cycles;
    assert_eq!(time(sm_instr(ScoreMask::None, (4, 16), None, true)), 16 + 2);
    assert_eq!(
        time(sm_instr(ScoreMask::Add(K), (3, 5), Some(0), false)),
        17
    );
    assert_eq!(
        time(sm_instr(ScoreMask::None, (64, 64), None, false)),
        16 + 128
    );
    let mut sim = new_sim();
    put_params(&mut sim, 1.0, 0);
    put_recs(&mut sim, &[(1.0, 2.0, 3.0); 4]);
    let past = t.cbuf_bytes - 16;
    let with = |probs, mask| Instr::SoftmaxOnline {
        scores: S,
        probs,
        rows: R,
        params: Q,
        mask,
        m: 4,
        n: 16,
        causal: None,
        first: false,
    };
    assert_oob_unchanged(&mut sim, with(past, ScoreMask::None));
    assert_oob_unchanged(&mut sim, with(P, ScoreMask::Add(past)));
    assert_oob_unchanged(&mut sim, with(P, ScoreMask::Keep(t.cbuf_bytes - 32)));
}

// ---- ew.rescale ----

const O: u32 = 0x5000;
const T: u32 = 0x6000;

fn rescale(mode: RescaleMode, (m, n): (u32, u32)) -> Instr {
    Instr::Rescale {
        out: O,
        t: if mode == RescaleMode::Finish { 0 } else { T },
        rows: R,
        m,
        n,
        mode,
    }
}

/// `ew.rescale` first (copy), accumulate (`out·alpha + t`, two roundings),
/// finish (`out / sum`, `+0` for a zero sum of either sign), cycles,
/// out of range.
#[test]
fn rescale_modes() {
    let out = [1.5f32, -2.0, 1e30, -5.0, f32::NAN, -0.0, 7.0, 3.0, 0.1];
    let t = [0.25f32, -0.0, 1e30, 3.0, 1.0, -0.0, 0.3, -3.0, 1e-8];
    let recs = [
        (0.0, 3.0, 0.1f32),
        (0.0, 0.0, 2.0),
        (f32::NEG_INFINITY, -0.0, 1.0),
    ];
    let mut sim = new_sim();
    put_recs(&mut sim, &recs);
    put_f32(&mut sim, T, &t);
    put_f32(&mut sim, O, &out);
    assert_eq!(run1(&mut sim, rescale(RescaleMode::First, (3, 3))), 17);
    assert_eq!(bits(&get_f32(&sim, O, 9)), bits(&t));
    put_f32(&mut sim, O, &out);
    run1(&mut sim, rescale(RescaleMode::Accumulate, (3, 3)));
    let want: Vec<f32> = (0..9).map(|e| out[e] * recs[e / 3].2 + t[e]).collect();
    assert_eq!(bits(&get_f32(&sim, O, 9)), bits(&want));
    // 1e30 · 0.1 + 1e30 in two roundings; NaN propagates.
    assert_eq!(get_f32(&sim, O, 3)[2], 1e30f32 * 0.1 + 1e30);
    assert!(get_f32(&sim, O, 5)[4].is_nan());
    put_f32(&mut sim, O, &out);
    run1(&mut sim, rescale(RescaleMode::Finish, (3, 3)));
    let got = get_f32(&sim, O, 9);
    assert_eq!(bits(&got[..3]), bits(&[0.5, -2.0 / 3.0, 1e30 / 3.0]));
    // Rows 1 (sum +0) and 2 (sum -0): zeros, whatever `out` held.
    assert_eq!(bits(&got[3..]), vec![0u32; 6]);
    let tg = Target::rk3588();
    let time = |i| NpuSim::time(&tg, &one_core(vec![i])).unwrap().cycles;
    assert_eq!(time(rescale(RescaleMode::Accumulate, (4, 100))), 16 + 7);
    assert_eq!(time(rescale(RescaleMode::Finish, (64, 64))), 16 + 64);
    let past = tg.cbuf_bytes - 16;
    let bad = |t, rows, mode| Instr::Rescale {
        out: O,
        t,
        rows,
        m: 3,
        n: 3,
        mode,
    };
    assert_oob_unchanged(&mut sim, bad(past, R, RescaleMode::Accumulate));
    assert_oob_unchanged(&mut sim, bad(past, R, RescaleMode::First));
    assert_oob_unchanged(&mut sim, bad(0, past, RescaleMode::Finish));
    assert_oob_unchanged(
        &mut sim,
        Instr::Rescale {
            out: past,
            t: T,
            rows: R,
            m: 1,
            n: 8,
            mode: RescaleMode::First,
        },
    );
}

// ---- the flash-attention chain ----

/// `mm.f16` (`Q·Kᵀ`), `sm.online`, `mm.f16` (`P·V`) and `ew.rescale` over
/// two key tiles, causal with a past, against a float64 softmax: the
/// instructions compose to attention (within f16 rounding of `p`).
#[test]
fn flash_attention_chain() {
    let (m, d, keys, kt, dv) = (4usize, 8usize, 12usize, 6usize, 5usize);
    let past = (keys - m) as i32;
    let mut rng = Rng(99);
    let q = h(&(0..m * d).map(|_| rng.f(1.0)).collect::<Vec<_>>());
    let k = h(&(0..keys * d).map(|_| rng.f(1.0)).collect::<Vec<_>>());
    let v = h(&(0..keys * dv).map(|_| rng.f(1.0)).collect::<Vec<_>>());
    let scale = 1.0 / (d as f32).sqrt();
    let (qa, ka, va, sa, pa, ta) = (0u32, 0x100u32, 0x400u32, S, P, T);
    let mut sim = new_sim();
    put_f16(&mut sim, qa, &q);
    put_params(&mut sim, scale, 0);
    let mut prog = Vec::new();
    for j in 0..keys / kt {
        let j0 = (j * kt) as u32;
        put_f16(&mut sim, ka + 0x100 * j as u32, &k[j * kt * d..][..kt * d]);
        put_f16(
            &mut sim,
            va + 0x100 * j as u32,
            &v[j * kt * dv..][..kt * dv],
        );
        prog.push(Instr::MatMulF16 {
            a: qa,
            b: ka + 0x100 * j as u32,
            acc: sa,
            m: m as u32,
            k: d as u32,
            n: kt as u32,
            b_transposed: true,
            accumulate: false,
        });
        prog.push(sm_instr(
            ScoreMask::None,
            (m as u32, kt as u32),
            Some(past - j0 as i32),
            j == 0,
        ));
        prog.push(Instr::MatMulF16 {
            a: pa,
            b: va + 0x100 * j as u32,
            acc: ta,
            m: m as u32,
            k: kt as u32,
            n: dv as u32,
            b_transposed: false,
            accumulate: false,
        });
        let mode = if j == 0 {
            RescaleMode::First
        } else {
            RescaleMode::Accumulate
        };
        prog.push(rescale(mode, (m as u32, dv as u32)));
    }
    prog.push(rescale(RescaleMode::Finish, (m as u32, dv as u32)));
    let stats = sim.run(&one_core(prog)).unwrap();
    assert_eq!(stats.macs, 2 * (m * d * kt + m * kt * dv) as u64);
    let got = get_f32(&sim, O, m * dv);
    for i in 0..m {
        let pos = i + past as usize;
        let sc: Vec<f64> = (0..=pos)
            .map(|j| {
                (0..d)
                    .map(|p| q[i * d + p].to_f64() * k[j * d + p].to_f64())
                    .sum::<f64>()
                    * f64::from(scale)
            })
            .collect();
        let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = sc.iter().map(|s| (s - mx).exp()).collect();
        let total: f64 = w.iter().sum();
        for c in 0..dv {
            let want: f64 = (0..=pos)
                .map(|j| w[j] * v[j * dv + c].to_f64())
                .sum::<f64>()
                / total;
            let g = f64::from(got[i * dv + c]);
            assert!((g - want).abs() < 2e-3, "row {i} col {c}: {g} vs {want}");
        }
    }
}
