//! The NPU instruction encoding: round trips, rejection of bad words,
//! disassembly syntax.

use proptest::prelude::*;
use slmcc_backends::npu::isa::{DmaDims, EltOp, Instr, OutType, ReduceOp, WeightType};
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

fn instr() -> impl Strategy<Value = Instr> {
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
    fn random_words_never_panic(word in any::<[u8; 16]>(), op in 0usize..20) {
        let ops = [0x01u8, 0x02, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x20, 0x21];
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
";
    assert_eq!(text, expected);
}
