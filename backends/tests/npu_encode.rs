//! The NPU instruction encoding: round trips, rejection of bad words,
//! disassembly syntax.

use proptest::prelude::*;
use slmcc_backends::npu::isa::{
    DmaDims, EltOp, Instr, OutType, ReduceOp, RescaleMode, ScoreMask, WeightType,
};
use slmcc_backends::npu::{decode, decode_stream, disassemble, encode, DecodeError, DisasmError};

fn cbuf() -> impl Strategy<Value = u32> {
    (0u32..(1 << 15)).prop_map(|g| g * 16)
}

fn dims() -> impl Strategy<Value = DmaDims> {
    (
        1u32..=8192,
        1u32..=1024,
        0u32..(1 << 20),
        1u32..=1024,
        0u32..(1 << 20),
    )
        .prop_map(|(run, count1, stride1, count2, stride2)| DmaDims {
            run,
            count1,
            stride1,
            count2,
            stride2,
        })
}

/// The f32/f16 instructions (`norm.rms`, `cvt.f16`, `mm.f16`, `sm.online`,
/// `ew.rescale`).
fn float_instr() -> impl Strategy<Value = Instr> {
    let mn = 1u32..=4096;
    let sm = 1u32..=1024;
    prop_oneof![
        (
            (
                cbuf(),
                proptest::option::of((cbuf(), cbuf())),
                cbuf(),
                cbuf()
            ),
            (mn.clone(), 1u32..=16384)
        )
            .prop_map(|((x, residual, params, y), (m, n))| Instr::RmsNorm {
                x,
                residual,
                params,
                y,
                m,
                n
            }),
        (
            cbuf(),
            cbuf(),
            1u32..=(1 << 19),
            proptest::option::of(cbuf())
        )
            .prop_map(|(input, out, len, lo)| Instr::CvtF16 {
                input,
                out,
                len,
                lo
            }),
        (
            (cbuf(), cbuf(), cbuf()),
            (mn.clone(), 1u32..=16384, mn.clone()),
            (any::<bool>(), any::<bool>())
        )
            .prop_map(|((a, b, acc), (m, k, n), (b_transposed, accumulate))| {
                Instr::MatMulF16 {
                    a,
                    b,
                    acc,
                    m,
                    k,
                    n,
                    b_transposed,
                    accumulate,
                }
            }),
        (
            (cbuf(), cbuf(), cbuf(), cbuf()),
            (0u8..3, cbuf(), sm.clone(), sm),
            (
                proptest::option::of(prop_oneof![
                    -(1i32 << 19)..=(1 << 19) - 1,
                    Just(-(1i32 << 19)),
                    Just((1i32 << 19) - 1),
                    Just(-1i32),
                ]),
                any::<bool>()
            )
        )
            .prop_map(
                |((scores, probs, rows, params), (kind, ma, m, n), (causal, first))| {
                    Instr::SoftmaxOnline {
                        scores,
                        probs,
                        rows,
                        params,
                        mask: match kind {
                            0 => ScoreMask::None,
                            1 => ScoreMask::Keep(ma),
                            _ => ScoreMask::Add(ma),
                        },
                        m,
                        n,
                        causal,
                        first,
                    }
                }
            ),
        ((cbuf(), cbuf(), cbuf()), (mn.clone(), mn, 0u8..3)).prop_map(
            |((out, t, rows), (m, n, mode))| {
                let mode = [
                    RescaleMode::First,
                    RescaleMode::Accumulate,
                    RescaleMode::Finish,
                ][usize::from(mode)];
                Instr::Rescale {
                    out,
                    t: if mode == RescaleMode::Finish { 0 } else { t },
                    rows,
                    m,
                    n,
                    mode,
                }
            }
        ),
    ]
}

fn instr() -> impl Strategy<Value = Instr> {
    prop_oneof![5 => int_instr(), 2 => float_instr()]
}

fn int_instr() -> impl Strategy<Value = Instr> {
    let mn = 1u32..=4096;
    prop_oneof![
        (cbuf(), any::<u32>(), dims()).prop_map(|(cbuf, ddr, dims)| Instr::DmaLoad {
            cbuf,
            ddr,
            dims
        }),
        (cbuf(), any::<u32>(), dims()).prop_map(|(cbuf, ddr, dims)| Instr::DmaStore {
            ddr,
            cbuf,
            dims
        }),
        (
            any::<bool>(),
            cbuf(),
            cbuf(),
            cbuf(),
            mn.clone(),
            1u32..=16384,
            mn.clone(),
            any::<bool>()
        )
            .prop_map(|(i4, a, w, acc, m, k, n, accumulate)| Instr::MatMul {
                wtype: if i4 { WeightType::I4 } else { WeightType::I8 },
                a,
                w,
                acc,
                m,
                k,
                n,
                accumulate
            }),
        (
            (cbuf(), cbuf(), cbuf(), mn.clone(), mn.clone(), any::<i8>()),
            (
                any::<bool>(),
                proptest::option::of(cbuf()),
                proptest::option::of((cbuf(), any::<i8>()))
            )
        )
            .prop_map(
                |((acc, params, out, m, n, out_zp), (i32_out, lut, residual))| {
                    let i32_out = i32_out && lut.is_none() && residual.is_none();
                    Instr::Epilogue {
                        out_type: if i32_out { OutType::I32 } else { OutType::I8 },
                        acc,
                        params,
                        out,
                        m,
                        n,
                        out_zp,
                        lut,
                        residual,
                    }
                }
            ),
        (
            (cbuf(), cbuf(), cbuf(), cbuf()),
            (mn.clone(), mn.clone(), any::<bool>())
        )
            .prop_map(|((acc, params, rows, out), (m, n, accumulate))| {
                Instr::EpilogueF32 {
                    acc,
                    params,
                    rows,
                    out,
                    m,
                    n,
                    accumulate,
                }
            }),
        (
            any::<bool>(),
            cbuf(),
            cbuf(),
            cbuf(),
            cbuf(),
            1u32..=(1 << 19),
            any::<[i8; 3]>()
        )
            .prop_map(|(mul, a, b, out, params, len, z)| Instr::Eltwise {
                op: if mul { EltOp::Mul } else { EltOp::Add },
                a,
                b,
                out,
                params,
                len,
                a_zp: z[0],
                b_zp: z[1],
                out_zp: z[2],
            }),
        (cbuf(), cbuf(), cbuf(), 1u32..=(1 << 19))
            .prop_map(|(a, b, out, len)| { Instr::SiluMul { a, b, out, len } }),
        (any::<bool>(), cbuf(), cbuf(), mn, 1u32..=16384, any::<i8>()).prop_map(
            |(max, input, out, m, n, zp)| Instr::Reduce {
                op: if max { ReduceOp::Max } else { ReduceOp::SumSq },
                input,
                out,
                m,
                n,
                zp,
            }
        ),
        (0u8..16).prop_map(|sem| Instr::Signal { sem }),
        (0u8..16).prop_map(|sem| Instr::Wait { sem }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn round_trip(i in instr()) {
        let word = encode(&i).unwrap();
        prop_assert_eq!(decode(&word), Ok(i));
        // The text form is one line.
        prop_assert!(!i.to_string().contains('\n'));
    }

    #[test]
    fn random_words_never_panic(word in any::<[u8; 16]>(), op in 0usize..30) {
        let ops = [
            0x01u8, 0x02, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x20,
            0x21,
        ];
        let mut word = word;
        // Half the time force a valid opcode so the field decoders run.
        if op % 2 == 0 {
            word[0] = ops[op / 2];
        }
        if let Ok(i) = decode(&word) {
            // Whatever decodes is canonical: it re-encodes to the same word.
            prop_assert_eq!(encode(&i).unwrap(), word);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Words of the float opcodes with sparse random fields (so flag /
    /// field combinations that decode are common): whatever decodes
    /// re-encodes to the same word, and flipping one bit of a valid word
    /// either fails to decode or decodes to a different instruction.
    #[test]
    fn float_words_are_canonical(
        op in 0x16u8..=0x1a,
        bits in proptest::collection::vec(8u32..128, 0..12),
        flip in 0u32..128,
        i in float_instr(),
    ) {
        let mut w = u128::from(op);
        for b in bits {
            w |= 1u128 << b;
        }
        if let Ok(d) = decode(&w.to_le_bytes()) {
            prop_assert_eq!(u128::from_le_bytes(encode(&d).unwrap()), w);
        }
        let good = u128::from_le_bytes(encode(&i).unwrap());
        let flipped = (good ^ (1u128 << flip)).to_le_bytes();
        if let Ok(d) = decode(&flipped) {
            prop_assert_ne!(d, i);
            prop_assert_eq!(encode(&d).unwrap(), flipped);
        }
    }
}

/// The flag/field rules of the float opcodes (`docs/NPU_ISA.md`, binary
/// encoding table): every mismatch is rejected.
#[test]
fn float_field_rules() {
    let bad = |w: u128| {
        let r = decode(&w.to_le_bytes());
        assert!(
            matches!(r, Err(DecodeError::ReservedBits { .. })),
            "{w:#x}: {r:?}"
        );
    };
    let enc = |i: &Instr| u128::from_le_bytes(encode(i).unwrap());
    // norm.rms: r and s 0 without has-res; 110..128 reserved.
    let norm = |residual| Instr::RmsNorm {
        x: 0x100,
        residual,
        params: 0x200,
        y: 0x300,
        m: 2,
        n: 16384,
    };
    let w = enc(&norm(None));
    assert_eq!(w & 0xff, 0x16);
    assert_eq!((w >> 95) & 0x3fff, 16383);
    bad(w | 1 << 23);
    bad(w | 1 << 53);
    bad(w | 1 << 110);
    bad(w | 1 << 127);
    // has-res with r = s = 0 is fine (a residual at address 0).
    let res0 = norm(Some((0, 0)));
    assert_eq!(decode(&enc(&res0).to_le_bytes()), Ok(res0));
    assert_eq!(enc(&res0), w | 1 << 109);
    // cvt.f16: lo 0 without has-lo, 73..128 reserved.
    let cvt = |len| Instr::CvtF16 {
        input: 0x40,
        out: 0x40,
        len,
        lo: None,
    };
    let w = enc(&cvt(1 << 19));
    assert_eq!(w, 0x17 | 4 << 8 | 4 << 23 | ((1u128 << 19) - 1) << 38);
    bad(w | 1 << 57);
    bad(w | 1 << 73);
    let with_lo = Instr::CvtF16 {
        input: 0x40,
        out: 0x40,
        len: 8,
        lo: Some(0x80),
    };
    let wl = enc(&with_lo);
    assert_eq!(wl & (((1u128 << 16) - 1) << 57), 8 << 57 | 1 << 72);
    assert_eq!(decode(&wl.to_le_bytes()), Ok(with_lo));
    assert!(encode(&cvt(0)).is_err());
    assert!(encode(&cvt((1 << 19) + 1)).is_err());
    // mm.f16: 93..128 reserved.
    let mm = |k| Instr::MatMulF16 {
        a: 0,
        b: 0x10,
        acc: 0x20,
        m: 1,
        k,
        n: 1,
        b_transposed: true,
        accumulate: false,
    };
    let w = enc(&mm(1));
    assert_eq!(w, 0x18 | 1 << 23 | 2 << 38 | 1 << 91);
    bad(w | 1 << 93);
    assert!(encode(&mm(16385)).is_err());
    // sm.online: mask 0 with kind 0, diag 0 without causal, kind 3, bit 127.
    let sm = |mask, m, n, causal, first| Instr::SoftmaxOnline {
        scores: 0x1000,
        probs: 0x2000,
        rows: 0x3000,
        params: 0x4000,
        mask,
        m,
        n,
        causal,
        first,
    };
    let w = enc(&sm(ScoreMask::None, 1024, 1, None, false));
    assert_eq!(w & 0xff, 0x19);
    bad(w | 1 << 68);
    bad(w | 1 << 103);
    bad(w | 1 << 122);
    bad(w | 3 << 124);
    bad(w | 1 << 127);
    assert_eq!(
        decode(&(w | 1 << 124 | 1 << 68).to_le_bytes()),
        Ok(sm(ScoreMask::Keep(16), 1024, 1, None, false))
    );
    for (diag, field) in [
        (-1i32, 0xfffffu128),
        (-(1 << 19), 0x80000),
        ((1 << 19) - 1, 0x7ffff),
        (5, 5),
        (0, 0),
    ] {
        let c = sm(ScoreMask::Add(0x20), 1024, 1, Some(diag), true);
        let cw = enc(&c);
        assert_eq!((cw >> 103) & 0xfffff, field, "diag {diag}");
        assert_eq!(cw >> 123 & 0xf, 1 | 2 << 1 | 1 << 3);
        assert_eq!(decode(&cw.to_le_bytes()), Ok(c));
    }
    for diag in [1 << 19, -(1 << 19) - 1] {
        let c = sm(ScoreMask::None, 1, 1, Some(diag), false);
        assert!(encode(&c).is_err(), "diag {diag}");
    }
    assert!(encode(&sm(ScoreMask::None, 1025, 1, None, false)).is_err());
    assert!(encode(&sm(ScoreMask::None, 1, 0, None, false)).is_err());
    assert!(encode(&sm(ScoreMask::Keep(8), 1, 1, None, false)).is_err());
    // ew.rescale: mode 3 invalid, t 0 with finish, 79..128 reserved.
    let rs = |t, mode| Instr::Rescale {
        out: 0x100,
        t,
        rows: 0x200,
        m: 3,
        n: 4096,
        mode,
    };
    let w = enc(&rs(0, RescaleMode::Finish));
    assert_eq!(w >> 77 & 3, 2);
    bad(w | 1 << 23);
    bad(w | 1 << 77);
    bad(w | 1 << 79);
    assert_eq!(
        decode(&(w & !(3u128 << 77) | 1 << 23).to_le_bytes()),
        Ok(rs(0x10, RescaleMode::First))
    );
    assert!(encode(&rs(0x10, RescaleMode::Finish)).is_err());
}

#[test]
fn rejects_bad_words() {
    assert_eq!(decode(&[0; 16]), Err(DecodeError::UnknownOpcode(0)));
    let mut w = encode(&Instr::Signal { sem: 3 }).unwrap();
    w[15] = 0x80;
    assert!(matches!(
        decode(&w),
        Err(DecodeError::ReservedBits { opcode: 0x20, .. })
    ));
    assert_eq!(decode_stream(&[0x20; 17]), Err(DisasmError::Length(17)));
    let bad = [encode(&Instr::Wait { sem: 1 }).unwrap(), [0xff; 16]].concat();
    assert!(matches!(
        disassemble(&bad),
        Err(DisasmError::At { offset: 16, .. })
    ));
}

#[test]
fn rejects_out_of_range_fields() {
    let unaligned = Instr::DmaLoad {
        cbuf: 8,
        ddr: 0,
        dims: DmaDims::contiguous(16),
    };
    assert!(encode(&unaligned).is_err());
    let zero_run = Instr::DmaLoad {
        cbuf: 0,
        ddr: 0,
        dims: DmaDims::contiguous(0),
    };
    assert!(encode(&zero_run).is_err());
    let big_k = Instr::MatMul {
        wtype: WeightType::I8,
        a: 0,
        w: 0,
        acc: 0,
        m: 1,
        k: 16385,
        n: 1,
        accumulate: false,
    };
    assert!(encode(&big_k).is_err());
    let epi_f32 = |m, rows| Instr::EpilogueF32 {
        acc: 0,
        params: 0x100,
        rows,
        out: 0x200,
        m,
        n: 1,
        accumulate: false,
    };
    assert!(encode(&epi_f32(4097, 0x300)).is_err());
    assert!(encode(&epi_f32(1, 0x308)).is_err());
    // Reserved bits of `epi.f32` (93..128) must be zero.
    let mut w = encode(&epi_f32(1, 0x300)).unwrap();
    assert_eq!(w[0], 0x14);
    w[11] |= 0x20; // bit 93
    assert!(matches!(
        decode(&w),
        Err(DecodeError::ReservedBits { opcode: 0x14, .. })
    ));
    let silu = |a, len| Instr::SiluMul {
        a,
        b: 0x100,
        out: a,
        len,
    };
    assert!(encode(&silu(0x10, 1 << 19)).is_ok());
    assert!(encode(&silu(0x10, 0)).is_err());
    assert!(encode(&silu(0x10, (1 << 19) + 1)).is_err());
    assert!(encode(&silu(0x18, 1)).is_err());
    assert!(encode(&silu(0x80000, 1)).is_err());
    // Reserved bits of `ew.silu_mul` (72..128) must be zero.
    let mut w = encode(&silu(0x10, 7)).unwrap();
    assert_eq!(w[0], 0x15);
    w[9] |= 0x01; // bit 72
    assert!(matches!(
        decode(&w),
        Err(DecodeError::ReservedBits { opcode: 0x15, .. })
    ));
    assert!(encode(&Instr::Signal { sem: 16 }).is_err());
}

#[test]
fn disassembly_syntax() {
    let prog = [
        Instr::DmaLoad {
            cbuf: 0,
            ddr: 0x1000,
            dims: DmaDims::rows(128, 64, 4096),
        },
        Instr::Signal { sem: 0 },
        Instr::MatMul {
            wtype: WeightType::I4,
            a: 0x100,
            w: 0x2000,
            acc: 0x8000,
            m: 4,
            k: 64,
            n: 32,
            accumulate: true,
        },
        Instr::Epilogue {
            out_type: OutType::I8,
            acc: 0x8000,
            params: 0x9000,
            out: 0xa000,
            m: 4,
            n: 32,
            out_zp: -3,
            lut: Some(0xb000),
            residual: None,
        },
        Instr::EpilogueF32 {
            acc: 0x8000,
            params: 0x9000,
            rows: 0x9800,
            out: 0xc000,
            m: 4,
            n: 32,
            accumulate: true,
        },
        Instr::EpilogueF32 {
            acc: 0x8000,
            params: 0x9100,
            rows: 0x9800,
            out: 0xc000,
            m: 1,
            n: 4096,
            accumulate: false,
        },
        Instr::SiluMul {
            a: 0xc000,
            b: 0xd000,
            out: 0xc000,
            len: 128,
        },
        Instr::RmsNorm {
            x: 0x100,
            residual: Some((0x200, 0x300)),
            params: 0x400,
            y: 0x500,
            m: 2,
            n: 64,
        },
        Instr::RmsNorm {
            x: 0x100,
            residual: None,
            params: 0x400,
            y: 0x100,
            m: 1,
            n: 8,
        },
        Instr::CvtF16 {
            input: 0x600,
            out: 0x600,
            len: 32,
            lo: None,
        },
        Instr::CvtF16 {
            input: 0x600,
            out: 0x600,
            len: 32,
            lo: Some(0x640),
        },
        Instr::MatMulF16 {
            a: 0,
            b: 0x1000,
            acc: 0x2000,
            m: 4,
            k: 64,
            n: 16,
            b_transposed: true,
            accumulate: false,
        },
        Instr::MatMulF16 {
            a: 0,
            b: 0x1000,
            acc: 0x2000,
            m: 4,
            k: 64,
            n: 16,
            b_transposed: false,
            accumulate: true,
        },
        Instr::SoftmaxOnline {
            scores: 0x2000,
            probs: 0x3000,
            rows: 0x3800,
            params: 0x3900,
            mask: ScoreMask::Keep(0x4000),
            m: 4,
            n: 16,
            causal: Some(-3),
            first: true,
        },
        Instr::SoftmaxOnline {
            scores: 0x2000,
            probs: 0x3000,
            rows: 0x3800,
            params: 0x3900,
            mask: ScoreMask::Add(0x4000),
            m: 4,
            n: 16,
            causal: None,
            first: false,
        },
        Instr::Rescale {
            out: 0x5000,
            t: 0x6000,
            rows: 0x3800,
            m: 4,
            n: 16,
            mode: RescaleMode::First,
        },
        Instr::Rescale {
            out: 0x5000,
            t: 0x6000,
            rows: 0x3800,
            m: 4,
            n: 16,
            mode: RescaleMode::Accumulate,
        },
        Instr::Rescale {
            out: 0x5000,
            t: 0,
            rows: 0x3800,
            m: 4,
            n: 16,
            mode: RescaleMode::Finish,
        },
    ];
    let bytes: Vec<u8> = prog.iter().flat_map(|i| encode(i).unwrap()).collect();
    let text = disassemble(&bytes).unwrap();
    let expected = "\
000000: dma.load cbuf[0x00000] <- ddr[0x00001000] dims [128B, 64 x 0x1000, 1 x 0x0]
000010: sem.signal s0
000020: mm.i4 acc[0x08000] += a[0x00100] * w[0x02000] m=4 k=64 n=32
000030: epi.i8 out[0x0a000] <- acc[0x08000] params[0x09000] m=4 n=32 zp=-3 lut[0x0b000]
000040: epi.f32 out[0x0c000] += acc[0x08000] params[0x09000] rows[0x09800] m=4 n=32
000050: epi.f32 out[0x0c000] = acc[0x08000] params[0x09100] rows[0x09800] m=1 n=4096
000060: ew.silu_mul out[0x0c000] = a[0x0c000], b[0x0d000] len=128
000070: norm.rms y[0x00500], s[0x00300] <- x[0x00100], r[0x00200] params[0x00400] m=2 n=64
000080: norm.rms y[0x00100] <- x[0x00100] params[0x00400] m=1 n=8
000090: cvt.f16 out[0x00600] <- in[0x00600] len=32
0000a0: cvt.f16 out[0x00600] <- in[0x00600] len=32 lo[0x00640]
0000b0: mm.f16 acc[0x02000] = a[0x00000] * b[0x01000]^T m=4 k=64 n=16
0000c0: mm.f16 acc[0x02000] += a[0x00000] * b[0x01000] m=4 k=64 n=16
0000d0: sm.online p[0x03000] <- s[0x02000] rows[0x03800] params[0x03900] m=4 n=16 keep[0x04000] causal diag=-3 first
0000e0: sm.online p[0x03000] <- s[0x02000] rows[0x03800] params[0x03900] m=4 n=16 add[0x04000]
0000f0: ew.rescale out[0x05000] = t[0x06000] m=4 n=16
000100: ew.rescale out[0x05000] = out * alpha[0x03800] + t[0x06000] m=4 n=16
000110: ew.rescale out[0x05000] /= sum[0x03800] m=4 n=16
";
    assert_eq!(text, expected);
}
