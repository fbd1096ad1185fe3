//! Simulator tests: a quantized matmul program against a plain reference
//! of the same integer arithmetic (random shapes, INT8 and INT4 weights),
//! the cycle model by hand, and error cases (deadlock, out of range,
//! wrong queue, bad shift).

use super::{ExecError, NpuSim, SimError};
use proptest::prelude::*;
use slmcc_backends::npu::isa::{
    CoreProgram, DmaDims, EltOp, Instr, OutType, Program, ReduceOp, WeightType,
};
use slmcc_backends::npu::Target;

// ---- reference arithmetic, written independently of `arith` ----

fn ref_srdhm(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    (i128::from(a) * i128::from(b) + (1 << 30)).div_euclid(1 << 31) as i32
}

fn ref_rdbpot(x: i32, e: u32) -> i32 {
    if e == 0 {
        return x;
    }
    let mag = (i64::from(x).abs() + (1i64 << (e - 1))) >> e;
    (if x < 0 { -mag } else { mag }) as i32
}

fn ref_requant(x: i32, mult: i32, rshift: i8) -> i32 {
    if rshift < 0 {
        let v = (i64::from(x) * (1i64 << -rshift)).clamp(i32::MIN.into(), i32::MAX.into());
        ref_srdhm(v as i32, mult)
    } else {
        ref_rdbpot(ref_srdhm(x, mult), rshift as u32)
    }
}

fn ref_sat8(x: i64) -> i8 {
    x.clamp(-128, 127) as i8
}

// ---- the matmul + epilogue program ----

#[derive(Clone, Debug)]
struct Case {
    m: usize,
    k: usize,
    n: usize,
    int4: bool,
    a: Vec<i8>,
    /// `k×n`, each in `-8..=7` when `int4`.
    w: Vec<i8>,
    bias: Vec<i32>,
    mult: Vec<i32>,
    shift: Vec<i8>,
    out_zp: i8,
    lut: Option<Vec<i8>>,
    residual: Option<(Vec<i8>, i8, i32, i8)>,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=6, 1usize..=48, 1usize..=24, any::<bool>()).prop_flat_map(|(m, k, n, int4)| {
        let wr = if int4 { -8i8..=7 } else { i8::MIN..=i8::MAX };
        (
            (
                proptest::collection::vec(any::<i8>(), m * k),
                proptest::collection::vec(wr, k * n),
                proptest::collection::vec(-5000i32..5000, n),
                proptest::collection::vec((1i32 << 30)..i32::MAX, n),
                proptest::collection::vec(-2i8..=14, n),
            ),
            any::<i8>(),
            proptest::option::of(proptest::collection::vec(any::<i8>(), 256)),
            proptest::option::of((
                proptest::collection::vec(any::<i8>(), m * n),
                any::<i8>(),
                (1i32 << 29)..i32::MAX,
                -1i8..=3,
            )),
        )
            .prop_map(
                move |((a, w, bias, mult, shift), out_zp, lut, residual)| Case {
                    m,
                    k,
                    n,
                    int4,
                    a,
                    w,
                    bias,
                    mult,
                    shift,
                    out_zp,
                    lut,
                    residual,
                },
            )
    })
}

fn reference(c: &Case) -> Vec<i8> {
    let mut out = Vec::new();
    for i in 0..c.m {
        for j in 0..c.n {
            let mut acc: i32 = 0;
            for p in 0..c.k {
                acc += i32::from(c.a[i * c.k + p]) * i32::from(c.w[p * c.n + j]);
            }
            let x = acc.wrapping_add(c.bias[j]);
            let mut q =
                ref_sat8(i64::from(ref_requant(x, c.mult[j], c.shift[j])) + i64::from(c.out_zp));
            if let Some(t) = &c.lut {
                q = t[(i32::from(q) + 128) as usize];
            }
            if let Some((r, zp, rm, rs)) = &c.residual {
                let d = ref_requant(i32::from(r[i * c.n + j]) - i32::from(*zp), *rm, *rs);
                q = ref_sat8(i64::from(q) + i64::from(d));
            }
            out.push(q);
        }
    }
    out
}

fn pack_int4(w: &[i8]) -> Vec<u8> {
    w.chunks(2)
        .map(|p| (p[0] as u8 & 0x0f) | ((*p.get(1).unwrap_or(&0) as u8 & 0x0f) << 4))
        .collect()
}

fn as_bytes(v: &[i8]) -> Vec<u8> {
    v.iter().map(|&x| x as u8).collect()
}

const fn align(x: usize) -> usize {
    x.div_ceil(16) * 16
}

/// Lays the case out in DDR (the weights as the left columns of a wider
/// matrix for INT8, to exercise strides), builds the two queues, runs, and
/// reads the output back from DDR (rows `OUT_STRIDE` apart).
fn run_case(c: &Case) -> Vec<i8> {
    const W_DDR: usize = 0x1000;
    const P_DDR: usize = 0x8000;
    const L_DDR: usize = 0x9000;
    const R_DDR: usize = 0xa000;
    const O_DDR: usize = 0xc000;
    const OUT_STRIDE: usize = 40;
    let (m, k, n) = (c.m, c.k, c.n);
    let mut ddr = vec![0u8; 0x10000];
    ddr[..m * k].copy_from_slice(&as_bytes(&c.a));
    let (w_dims, w_bytes) = if c.int4 {
        let p = pack_int4(&c.w);
        ddr[W_DDR..W_DDR + p.len()].copy_from_slice(&p);
        (DmaDims::contiguous(p.len() as u32), p.len())
    } else {
        let wide = n + 3;
        for p in 0..k {
            for j in 0..n {
                ddr[W_DDR + p * wide + j] = c.w[p * n + j] as u8;
            }
        }
        (DmaDims::rows(n as u32, k as u32, wide as u32), k * n)
    };
    for j in 0..n {
        let r = P_DDR + 16 * j;
        ddr[r..r + 4].copy_from_slice(&c.bias[j].to_le_bytes());
        ddr[r + 4..r + 8].copy_from_slice(&c.mult[j].to_le_bytes());
        let (rm, rs) = c
            .residual
            .as_ref()
            .map_or((0, 0), |(_, _, rm, rs)| (*rm, *rs));
        ddr[r + 8..r + 12].copy_from_slice(&rm.to_le_bytes());
        ddr[r + 12] = c.shift[j] as u8;
        ddr[r + 13] = rs as u8;
    }
    if let Some(t) = &c.lut {
        ddr[L_DDR..L_DDR + 256].copy_from_slice(&as_bytes(t));
    }
    if let Some((r, ..)) = &c.residual {
        ddr[R_DDR..R_DDR + m * n].copy_from_slice(&as_bytes(r));
    }
    // CBUF layout.
    let a_cb = 0;
    let w_cb = align(m * k);
    let p_cb = align(w_cb + w_bytes);
    let acc_cb = align(p_cb + 16 * n);
    let out_cb = align(acc_cb + 4 * m * n);
    let lut_cb = align(out_cb + m * n);
    let res_cb = align(lut_cb + 256);
    let u = |x: usize| x as u32;
    let mut dma = vec![
        Instr::DmaLoad {
            cbuf: u(a_cb),
            ddr: 0,
            dims: DmaDims::contiguous(u(m * k)),
        },
        Instr::DmaLoad {
            cbuf: u(w_cb),
            ddr: u(W_DDR),
            dims: w_dims,
        },
        Instr::DmaLoad {
            cbuf: u(p_cb),
            ddr: u(P_DDR),
            dims: DmaDims::contiguous(u(16 * n)),
        },
    ];
    if c.lut.is_some() {
        dma.push(Instr::DmaLoad {
            cbuf: u(lut_cb),
            ddr: u(L_DDR),
            dims: DmaDims::contiguous(256),
        });
    }
    if c.residual.is_some() {
        dma.push(Instr::DmaLoad {
            cbuf: u(res_cb),
            ddr: u(R_DDR),
            dims: DmaDims::contiguous(u(m * n)),
        });
    }
    dma.extend([
        Instr::Signal { sem: 0 },
        Instr::Wait { sem: 1 },
        Instr::DmaStore {
            ddr: u(O_DDR),
            cbuf: u(out_cb),
            dims: DmaDims::rows(u(n), u(m), u(OUT_STRIDE)),
        },
    ]);
    let compute = vec![
        Instr::Wait { sem: 0 },
        Instr::MatMul {
            wtype: if c.int4 {
                WeightType::I4
            } else {
                WeightType::I8
            },
            a: u(a_cb),
            w: u(w_cb),
            acc: u(acc_cb),
            m: u(m),
            k: u(k),
            n: u(n),
            accumulate: false,
        },
        Instr::Epilogue {
            out_type: OutType::I8,
            acc: u(acc_cb),
            params: u(p_cb),
            out: u(out_cb),
            m: u(m),
            n: u(n),
            out_zp: c.out_zp,
            lut: c.lut.as_ref().map(|_| u(lut_cb)),
            residual: c.residual.as_ref().map(|(_, zp, ..)| (u(res_cb), *zp)),
        },
        Instr::Signal { sem: 1 },
    ];
    let prog = Program {
        cores: vec![CoreProgram { dma, compute }],
    };
    let mut sim = NpuSim::new(Target::rk3588(), ddr);
    let stats = sim.run(&prog).expect("program runs");
    assert_eq!(stats.macs, (m * k * n) as u64);
    assert_eq!(stats.ddr_bytes_written, (m * n) as u64);
    let mut out = Vec::new();
    for i in 0..m {
        out.extend(
            sim.ddr[O_DDR + i * OUT_STRIDE..][..n]
                .iter()
                .map(|&b| b as i8),
        );
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn matmul_epilogue_matches_reference(c in case()) {
        prop_assert_eq!(run_case(&c), reference(&c));
    }

    #[test]
    fn arith_matches_reference(x in any::<i32>(), mult in any::<i32>(), s in -31i8..=31) {
        prop_assert_eq!(super::arith::requant(x, mult, s), ref_requant(x, mult, s));
        prop_assert_eq!(super::arith::srdhm(x, mult), ref_srdhm(x, mult));
    }
}

#[test]
fn int4_odd_count_and_accumulate() {
    // k·n odd: the last byte's high nibble is padding.
    let c = Case {
        m: 1,
        k: 3,
        n: 1,
        int4: true,
        a: vec![1, -2, 3],
        w: vec![-8, 7, -1],
        bias: vec![0],
        mult: vec![i32::MAX],
        shift: vec![0],
        out_zp: 0,
        lut: None,
        residual: None,
    };
    // -8 - 14 - 3 = -25, times ~1.
    assert_eq!(run_case(&c), vec![-25]);
    assert_eq!(reference(&c), vec![-25]);
}

// ---- timing ----

fn timing_program() -> CoreProgram {
    CoreProgram {
        dma: vec![
            Instr::DmaLoad {
                cbuf: 0,
                ddr: 0,
                dims: DmaDims::rows(100, 10, 200),
            },
            Instr::Signal { sem: 0 },
            Instr::Wait { sem: 1 },
            Instr::DmaStore {
                ddr: 0x4000,
                cbuf: 0x1000,
                dims: DmaDims::contiguous(128),
            },
        ],
        compute: vec![
            Instr::Wait { sem: 0 },
            Instr::MatMul {
                wtype: WeightType::I8,
                a: 0,
                w: 0x400,
                acc: 0x1000,
                m: 4,
                k: 64,
                n: 32,
                accumulate: false,
            },
            Instr::Signal { sem: 1 },
        ],
    }
}

#[test]
fn cycles_follow_the_documented_formula() {
    let t = Target::rk3588();
    let mut sim = NpuSim::new(t.clone(), vec![0; 0x8000]);
    let stats = sim
        .run(&Program {
            cores: vec![timing_program()],
        })
        .unwrap();
    // load: 64 + ceil(1000 / 25) = 104; signal done at 105.
    // compute: wait → max(0, 105) + 1 = 106; matmul 16 + ceil(8192 / 1024)
    // = 24 → 130; signal → 131.
    // dma: wait → max(105, 131) + 1 = 132; store 64 + ceil(128 / 25) = 70
    // → 202.
    assert_eq!(stats.cores[0].compute.finish, 131);
    assert_eq!(stats.cores[0].dma.finish, 202);
    assert_eq!(stats.cores[0].dma.busy, 104 + 1 + 1 + 70);
    assert_eq!(stats.cycles, 202);
    assert_eq!(stats.macs, 8192);
    assert_eq!((stats.ddr_bytes_read, stats.ddr_bytes_written), (1000, 128));
    let expect = 8192.0 / (202.0 * 1024.0 * 3.0);
    assert!((stats.utilisation - expect).abs() < 1e-12);
    assert!((stats.cores[0].utilisation(&t) - 8192.0 / (202.0 * 1024.0)).abs() < 1e-12);

    // Two cores with DMA share the bandwidth: each load takes
    // 64 + ceil(1000 · 2 / 25) = 144, the store 64 + ceil(256 / 25) = 75.
    let mut sim = NpuSim::new(t, vec![0; 0x8000]);
    let stats = sim
        .run(&Program {
            cores: vec![timing_program(), timing_program()],
        })
        .unwrap();
    // compute: 146 → 170 → 171; dma: 172 + 75 = 247.
    assert_eq!(stats.cores[1].compute.finish, 171);
    assert_eq!(stats.cycles, 247);
}

// ---- other instructions ----

#[test]
fn eltwise_and_reduce() {
    let t = Target::rk3588();
    let mut sim = NpuSim::new(t, vec![0; 16]);
    let c = &mut sim.cbuf[0];
    let a: [i8; 4] = [10, -20, 127, -128];
    let b: [i8; 4] = [3, 4, -5, 6];
    for e in 0..4 {
        c[e] = a[e] as u8;
        c[16 + e] = b[e] as u8;
    }
    // Add params: inputs ×0.5 / 2^20 back... a_mult = b_mult = 2^30 with a
    // right shift of 0 halves (a << 20); out_mult 2^30 with shift 19
    // divides by 2^20: out = a/2 + b/2 (each rounded at 2^-20) ... exact
    // here: (a + b) / 2 rounded.
    let mut p = [0u8; 16];
    p[0..4].copy_from_slice(&(1i32 << 30).to_le_bytes());
    p[4..8].copy_from_slice(&(1i32 << 30).to_le_bytes());
    p[8..12].copy_from_slice(&i32::MAX.to_le_bytes());
    p[12] = 0;
    p[13] = 0;
    p[14] = 20;
    c[32..48].copy_from_slice(&p);
    let zp = |v: i8| v;
    let prog = Program {
        cores: vec![CoreProgram {
            dma: vec![],
            compute: vec![
                Instr::Eltwise {
                    op: EltOp::Add,
                    a: 0,
                    b: 16,
                    out: 64,
                    params: 32,
                    len: 4,
                    a_zp: 0,
                    b_zp: 0,
                    out_zp: zp(1),
                },
                Instr::Eltwise {
                    op: EltOp::Mul,
                    a: 0,
                    b: 16,
                    out: 80,
                    params: 32,
                    len: 4,
                    a_zp: 0,
                    b_zp: 2,
                    out_zp: 0,
                },
                Instr::Reduce {
                    op: ReduceOp::SumSq,
                    input: 0,
                    out: 96,
                    m: 2,
                    n: 2,
                    zp: 1,
                },
                Instr::Reduce {
                    op: ReduceOp::Max,
                    input: 0,
                    out: 112,
                    m: 1,
                    n: 4,
                    zp: 0,
                },
            ],
        }],
    };
    sim.run(&prog).unwrap();
    let c = &sim.cbuf[0];
    let i8s = |o: usize| (0..4).map(|e| c[o + e] as i8).collect::<Vec<_>>();
    let i32s = |o: usize, n: usize| {
        (0..n)
            .map(|e| i32::from_le_bytes(c[o + 4 * e..o + 4 * e + 4].try_into().unwrap()))
            .collect::<Vec<_>>()
    };
    // (a + b) / 2 (out_mult ≈ 1, shift 20 undoes the << 20), + zp 1.
    let add: Vec<i8> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| {
            let s = ref_requant(i32::from(x) << 20, 1 << 30, 0)
                + ref_requant(i32::from(y) << 20, 1 << 30, 0);
            ref_sat8(i64::from(ref_requant(s, i32::MAX, 20)) + 1)
        })
        .collect();
    assert_eq!(i8s(64), add);
    assert_eq!(i8s(64), vec![8, -7, 62, -60]);
    let mul: Vec<i8> = a
        .iter()
        .zip(&b)
        .map(|(&x, &y)| {
            ref_sat8(i64::from(ref_requant(
                i32::from(x) * (i32::from(y) - 2),
                i32::MAX,
                20,
            )))
        })
        .collect();
    assert_eq!(i8s(80), mul);
    // Σ (x - 1)²: 81 + 441, 126² + 129².
    assert_eq!(i32s(96, 2), vec![522, 15876 + 16641]);
    assert_eq!(i32s(112, 1), vec![127]);
}

// ---- errors ----

fn one_core(dma: Vec<Instr>, compute: Vec<Instr>) -> Program {
    Program {
        cores: vec![CoreProgram { dma, compute }],
    }
}

#[test]
fn deadlock_is_an_error() {
    let mut sim = NpuSim::new(Target::rk3588(), vec![0; 64]);
    let prog = one_core(vec![Instr::Wait { sem: 1 }], vec![Instr::Wait { sem: 0 }]);
    match sim.run(&prog) {
        Err(SimError::Deadlock(msg)) => assert!(msg.contains("sem.wait s0"), "{msg}"),
        other => panic!("expected a deadlock, got {other:?}"),
    }
}

#[test]
fn out_of_range_is_an_error() {
    let mut sim = NpuSim::new(Target::rk3588(), vec![0; 64]);
    let mut out_of_range = |load: Instr| {
        let err = sim.run(&one_core(vec![load], vec![])).unwrap_err();
        assert!(
            matches!(
                err,
                SimError::Exec {
                    source: ExecError::OutOfRange { .. },
                    ..
                }
            ),
            "{err}"
        );
    };
    let load = Instr::DmaLoad {
        cbuf: 0,
        ddr: 60,
        dims: DmaDims::contiguous(8),
    };
    out_of_range(load);
    // Encodable but past the 384 KiB CBUF.
    let load = Instr::DmaLoad {
        cbuf: 0x7fff0,
        ddr: 0,
        dims: DmaDims::contiguous(8),
    };
    out_of_range(load);
    // A huge strided store starting in range.
    let dims = DmaDims {
        run: 8192,
        count1: 1024,
        stride1: 0xfffff,
        count2: 1024,
        stride2: 0xfffff,
    };
    let store = Instr::DmaStore {
        ddr: 0,
        cbuf: 0,
        dims,
    };
    assert!(sim.run(&one_core(vec![store], vec![])).is_err());
}

#[test]
fn invalid_programs_are_rejected() {
    let mut sim = NpuSim::new(Target::rk3588(), vec![0; 64]);
    let mm = Instr::MatMul {
        wtype: WeightType::I8,
        a: 0,
        w: 0,
        acc: 0,
        m: 1,
        k: 1,
        n: 1,
        accumulate: false,
    };
    assert!(matches!(
        sim.run(&one_core(vec![mm], vec![])),
        Err(SimError::Invalid(_))
    ));
    assert!(matches!(
        sim.run(&one_core(vec![], vec![Instr::Signal { sem: 9 }])),
        Err(SimError::Invalid(_))
    ));
    let four = Program {
        cores: vec![CoreProgram::default(); 4],
    };
    assert!(matches!(sim.run(&four), Err(SimError::Invalid(_))));
    // A shift byte of 40 in the epilogue parameters.
    sim.cbuf[0][12] = 40;
    let epi = Instr::Epilogue {
        out_type: OutType::I8,
        acc: 0x100,
        params: 0,
        out: 0x200,
        m: 1,
        n: 1,
        out_zp: 0,
        lut: None,
        residual: None,
    };
    let err = sim.run(&one_core(vec![], vec![epi])).unwrap_err();
    assert!(
        matches!(
            err,
            SimError::Exec {
                source: ExecError::BadShift(40),
                ..
            }
        ),
        "{err}"
    );
}

/// `epi.f32` by hand: the `z·colsum` correction (wrapping), the product
/// order `(acc as f32) · (s · scale)`, `+0.0` as the start without
/// `accumulate` (so a `-0.0` product gives `+0.0`), and its cycles.
#[test]
fn epilogue_f32_by_hand() {
    let put = |c: &mut Vec<u8>, at: usize, words: &[u32]| {
        for (i, w) in words.iter().enumerate() {
            c[at + 4 * i..at + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
    };
    let (s0, s1) = (2.0f32, 0.1f32);
    let (c0, c1) = (0.5f32, -0.25f32);
    let prev = [1.0f32, -0.0, 2.5, 3.0];
    for accumulate in [false, true] {
        let mut sim = NpuSim::new(Target::rk3588(), vec![0; 64]);
        let c = &mut sim.cbuf[0];
        // acc 2×2 at 0, channel records at 0x100, row records at 0x200.
        put(c, 0, &[10, (-3i32) as u32, i32::MAX as u32, 0]);
        put(c, 0x100, &[c0.to_bits(), 2, c1.to_bits(), (-1i32) as u32]);
        put(c, 0x200, &[s0.to_bits(), 3, s1.to_bits(), (-1i32) as u32]);
        put(c, 0x300, &prev.map(f32::to_bits));
        let epi = Instr::EpilogueF32 {
            acc: 0,
            params: 0x100,
            rows: 0x200,
            out: 0x300,
            m: 2,
            n: 2,
            accumulate,
        };
        let stats = sim.run(&one_core(vec![], vec![epi])).unwrap();
        assert_eq!(stats.cycles, 16 + 1);
        let got: Vec<u32> = (0..4)
            .map(|e| {
                let b = &sim.cbuf[0][0x300 + 4 * e..][..4];
                u32::from_le_bytes([b[0], b[1], b[2], b[3]])
            })
            .collect();
        // Corrected sums: 10 - 3·2 = 4, -3 - 3·(-1) = 0,
        // i32::MAX - (-1)·2 wraps to i32::MIN + 1, 0 - (-1)·(-1) = -1.
        let x = [4.0f32, 0.0, (i32::MIN + 1) as f32, -1.0];
        let sc = [s0 * c0, s0 * c1, s1 * c0, s1 * c1];
        let want: Vec<u32> = (0..4)
            .map(|e| {
                let base = if accumulate { prev[e] } else { 0.0 };
                (base + x[e] * sc[e]).to_bits()
            })
            .collect();
        assert_eq!(got, want);
        if !accumulate {
            // 0 · -0.5 = -0.0; +0.0 + -0.0 = +0.0.
            assert_eq!(got[1], 0);
        }
    }
}

/// `ew.silu_mul` by hand: `(a · sigmoid(a)) · b` with the IR's sigmoid on
/// both branches, signed zeros, infinities and NaN, in place (`out = a`),
/// its cycles, and an out-of-range operand.
#[test]
fn silu_mul_by_hand() {
    use slmcc_ir::ops::fused_util::sigmoid;
    let a = [
        0.0f32,
        -0.0,
        1.5,
        -1.5,
        20.0,
        -20.0,
        -100.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        3.0e-39,
        88.0,
        -0.3,
        7.25,
        1e-3,
        -9.5,
    ];
    let b: Vec<f32> = (0..a.len()).map(|i| (i as f32 - 5.5) * 0.75).collect();
    let mut sim = NpuSim::new(Target::rk3588(), vec![0; 64]);
    for (e, (x, y)) in a.iter().zip(&b).enumerate() {
        sim.cbuf[0][4 * e..][..4].copy_from_slice(&x.to_bits().to_le_bytes());
        sim.cbuf[0][0x100 + 4 * e..][..4].copy_from_slice(&y.to_bits().to_le_bytes());
    }
    let len = a.len() as u32;
    let i = Instr::SiluMul {
        a: 0,
        b: 0x100,
        out: 0,
        len,
    };
    let stats = sim.run(&one_core(vec![], vec![i])).unwrap();
    assert_eq!(stats.cycles, 16 + 1);
    for (e, (x, y)) in a.iter().zip(&b).enumerate() {
        let got = u32::from_le_bytes(sim.cbuf[0][4 * e..][..4].try_into().unwrap());
        let want = ((x * sigmoid(*x)) * y).to_bits();
        assert_eq!(got, want, "element {e}: a={x} b={y}");
    }
    // 200 elements: 16 + ceil(200 / 64) cycles.
    let long = Instr::SiluMul {
        a: 0,
        b: 0x400,
        out: 0x800,
        len: 200,
    };
    let stats = NpuSim::time(&Target::rk3588(), &one_core(vec![], vec![long])).unwrap();
    assert_eq!(stats.cycles, 16 + 4);
    let t = Target::rk3588();
    let past = t.cbuf_bytes - 16;
    let bad = Instr::SiluMul {
        a: 0,
        b: past,
        out: 0x800,
        len: 8,
    };
    let mut sim = NpuSim::new(t, vec![0; 64]);
    assert!(matches!(
        sim.run(&one_core(vec![], vec![bad])),
        Err(SimError::Exec { .. })
    ));
}
