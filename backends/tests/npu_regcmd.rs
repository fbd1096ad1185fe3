//! The RK3588 register interface: single-task matmul command lists against
//! the words of the public matmul generator (testdata/npu/regcmd_mtx512.txt),
//! the register database's consistency, and rejection of bad words and
//! shapes.

use std::collections::HashMap;
use std::path::PathBuf;

use proptest::prelude::*;
use slmcc_backends::npu::regcmd::db::{self, REGISTERS};
use slmcc_backends::npu::regcmd::{
    decode, decode_buffer, encode_buffer, Block, BufferError, MatmulError, MatmulPrecision,
    MatmulTask, Word, WordError,
};

struct Case {
    precision: MatmulPrecision,
    m: u32,
    k: u32,
    n: u32,
    words: Vec<u64>,
}

fn precision(name: &str) -> MatmulPrecision {
    match name {
        "int8" => MatmulPrecision::Int8,
        "fp16-fp32" => MatmulPrecision::Fp16,
        "fp16-fp16" => MatmulPrecision::Fp16ToFp16,
        other => panic!("unknown precision {other}"),
    }
}

/// The cases of testdata/npu/regcmd_mtx512.txt, each with its 108 words.
fn generator_cases() -> Vec<Case> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/npu/regcmd_mtx512.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut bases: HashMap<String, Vec<u64>> = HashMap::new();
    let mut cases = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let mut parts = line.split_whitespace();
        let name = parts.next().unwrap().to_string();
        let mut dim = || parts.next().unwrap().parse::<u32>().unwrap();
        let (m, k, n) = (dim(), dim(), dim());
        let kind = parts.next().unwrap();
        let rest: Vec<&str> = parts.collect();
        let words = if kind == "=" {
            let words: Vec<u64> = rest
                .iter()
                .map(|w| u64::from_str_radix(w, 16).unwrap())
                .collect();
            bases.insert(name.clone(), words.clone());
            words
        } else {
            assert_eq!(kind, ":", "{line}");
            let mut words = bases[&name].clone();
            for d in rest {
                let (i, w) = d.split_once(':').unwrap();
                words[i.parse::<usize>().unwrap()] = u64::from_str_radix(w, 16).unwrap();
            }
            words
        };
        assert_eq!(words.len(), 108, "{line}");
        cases.push(Case {
            precision: precision(&name),
            m,
            k,
            n,
            words,
        });
    }
    cases
}

fn task(precision: MatmulPrecision, m: u32, k: u32, n: u32) -> MatmulTask {
    MatmulTask {
        precision,
        m,
        k,
        n,
        input: 0x1111_0000,
        weights: 0x2222_0000,
        output: 0x3333_0000,
    }
}

#[test]
fn single_task_matmuls_match_the_public_generator() {
    let cases = generator_cases();
    assert!(cases.len() > 200, "{} cases", cases.len());
    for c in &cases {
        let ours = task(c.precision, c.m, c.k, c.n).regcmd().unwrap();
        let ours: Vec<u64> = ours.iter().map(Word::encode).collect();
        for (i, (&want, &got)) in c.words.iter().zip(&ours).enumerate() {
            let name = decode(want).map(|w| w.to_string()).unwrap_or_default();
            assert_eq!(
                got, want,
                "{:?} M={} K={} N={}: word {i} is {got:#018x}, the generator writes {want:#018x} ({name})",
                c.precision, c.m, c.k, c.n
            );
        }
        assert_eq!(ours.len(), c.words.len());
    }
}

#[test]
fn the_generator_words_decode_to_ours() {
    for c in generator_cases() {
        let ours = task(c.precision, c.m, c.k, c.n).regcmd().unwrap();
        let bytes: Vec<u8> = c.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(decode_buffer(&bytes).unwrap(), ours);
        assert_eq!(encode_buffer(&ours), bytes);
    }
}

#[test]
fn the_text_form_names_registers_and_fields() {
    let words = task(MatmulPrecision::Int8, 4, 32, 16).regcmd().unwrap();
    let lines: Vec<String> = words.iter().map(Word::to_string).collect();
    assert_eq!(
        lines[2],
        "0201 1010 00000050  CNA_CONV_CON2 FEATURE_GRAINS=5"
    );
    assert_eq!(
        lines[5],
        "0201 1024 001f0020  CNA_DATA_SIZE1 DATAIN_CHANNEL_REAL=0x1f DATAIN_CHANNEL=0x20"
    );
    assert_eq!(lines[18], "0201 1060 00000000  CNA_FC_CON0");
    assert_eq!(lines[104], "0000 0000 00000000  (zero: next-task slot)");
    assert_eq!(
        lines[107],
        "0081 0008 0000000d  PC_OPERATION_ENABLE (enable) DPU_OP_EN=1 CORE_OP_EN=1 CNA_OP_EN=1"
    );
}

#[test]
fn the_database_is_consistent() {
    let mut last = None;
    for r in REGISTERS {
        assert!(last < Some(r.offset), "{} out of order", r.full_name());
        last = Some(r.offset);
        assert!(
            (r.block.base()..r.block.base() + 0x1000).contains(&r.offset),
            "{} outside its block",
            r.full_name()
        );
        let mut covered = 0u32;
        let mut prev_lo = 32;
        for f in r.fields {
            assert!(f.hi < 32 && f.lo <= f.hi, "{}.{}", r.full_name(), f.name);
            assert!(
                f.hi < prev_lo,
                "{}.{} not in descending order",
                r.full_name(),
                f.name
            );
            prev_lo = f.lo;
            assert_eq!(
                covered & f.mask(),
                0,
                "{}.{} overlaps",
                r.full_name(),
                f.name
            );
            covered |= f.mask();
        }
        assert_eq!(db::register(r.offset), Some(r));
        assert_eq!(db::lookup(r.block, r.name), Some(r));
    }
}

#[test]
fn bad_words_are_rejected_with_the_reason() {
    // An unknown target, a register of another block, bits outside the
    // fields, an undocumented register with a value, bad special words.
    let cases: [(u64, WordError); 6] = [
        (0x0401_0000_0000_2004, WordError::UnknownTarget(0x0401)),
        (
            0x0201_0000_0000_4020,
            WordError::UnknownRegister {
                block: Block::Cna,
                offset: 0x4020,
            },
        ),
        (
            0x0041_0000_0000_0001,
            WordError::PreEnable(0x0041_0000_0000_0001),
        ),
        (0x0081_0000_000d_0010, WordError::EnableRegister(0x0010)),
        (0x0081_0000_0002_0008, WordError::EnableBits(0x2)),
        (0x0000_0000_0000_0008, WordError::UnknownTarget(0)),
    ];
    for (word, want) in cases {
        assert_eq!(decode(word), Err(want), "{word:#018x}");
    }
    // CNA DATA_SIZE2 has one field, DATAOUT_WIDTH[10:0].
    let err = decode(0x0201_0000_0800_1028).unwrap_err();
    assert_eq!(
        err.to_string(),
        "CNA.DATA_SIZE2: value 0x00000800 sets bits 0x00000800 outside its fields"
    );
    let err = decode(0x0801_0000_0001_3030).unwrap_err();
    assert!(err.to_string().contains("UNDOCUMENTED_3030"), "{err}");
    assert_eq!(decode_buffer(&[0; 12]), Err(BufferError::Length(12)));
    let mut bytes = vec![0u8; 16];
    bytes[8..].copy_from_slice(&0x0401_0000_0000_2004u64.to_le_bytes());
    let err = decode_buffer(&bytes).unwrap_err();
    assert_eq!(
        err.to_string(),
        "word 1 (0x0401000000002004): unknown target 0x0401"
    );
}

#[test]
fn shapes_that_are_not_one_task_are_refused() {
    let int8 = MatmulPrecision::Int8;
    let fp16 = MatmulPrecision::Fp16;
    assert!(matches!(
        task(int8, 4, 48, 16).regcmd(),
        Err(MatmulError::KAlign { k: 48, .. })
    ));
    assert!(matches!(
        task(int8, 4, 32, 24).regcmd(),
        Err(MatmulError::NAlign { n: 24, .. })
    ));
    assert!(matches!(
        task(int8, 0, 32, 16).regcmd(),
        Err(MatmulError::Empty { what: "M" })
    ));
    // 12 banks of features leave none for the weights.
    assert!(matches!(
        task(fp16, 192, 1024, 16).regcmd(),
        Err(MatmulError::FeaturesTooLarge { banks: 12, .. })
    ));
    // fp16 1024 x 256 weights are 512 KiB: more than the whole CBUF.
    assert!(matches!(
        task(fp16, 32, 1024, 256).regcmd(),
        Err(MatmulError::WeightsTooLarge { banks: 10, .. })
    ));
    // FEATURE_GRAINS (M + 1) has 10 bits: M = 1023 does not fit, even with
    // features that do.
    let err = task(int8, 1023, 32, 16).regcmd().unwrap_err();
    assert_eq!(
        err.to_string(),
        "register field: CNA.CONV_CON2.FEATURE_GRAINS = 0x400 does not fit its 10 bits"
    );
}

proptest! {
    /// Every word of every single-task list decodes back to itself.
    #[test]
    fn matmul_words_round_trip(
        p in prop_oneof![
            Just(MatmulPrecision::Int8),
            Just(MatmulPrecision::Fp16),
            Just(MatmulPrecision::Fp16ToFp16)
        ],
        m in 1u32..=1022,
        k in (1u32..=64).prop_map(|k| k * 32),
        n in (1u32..=64).prop_map(|n| n * 16),
        input: u32, weights: u32, output: u32,
    ) {
        let task = MatmulTask { precision: p, m, k, n, input, weights, output };
        match task.regcmd() {
            Ok(words) => {
                prop_assert_eq!(words.len(), 108);
                for w in words {
                    prop_assert_eq!(decode(w.encode()), Ok(w));
                }
            }
            Err(MatmulError::FeaturesTooLarge { .. } | MatmulError::WeightsTooLarge { .. }) => {}
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    /// Arbitrary words decode or are refused; they never panic, and what
    /// decodes encodes back to the same word.
    #[test]
    fn any_word_decodes_or_is_refused(word: u64) {
        if let Ok(w) = decode(word) {
            prop_assert_eq!(w.encode(), word);
        }
    }
}

/// The packers against the layouts as the public sources write them down
/// (the generator's test helpers for features and weights; Mesa's narrower
/// block for fewer than 32 int8 kernels).
#[test]
fn layouts_follow_the_public_formulas() {
    use slmcc_backends::npu::regcmd::layout::{cube_index, pack_weights, weight_index};
    // int8 weights: [N/32][K/32][32][32].
    for (nt, kt) in [(64, 96), (256, 1024)] {
        for n in 0..nt {
            for k in 0..kt {
                let want = (n / 32) * 32 * kt + (k / 32) * 32 * 32 + (n % 32) * 32 + k % 32;
                assert_eq!(weight_index(n, k, nt, kt, 32), want, "int8 n={n} k={k}");
            }
        }
    }
    // fp16 weights: [N/16][K/32][16][32].
    for (nt, kt) in [(16, 64), (48, 512)] {
        for n in 0..nt {
            for k in 0..kt {
                let want = (n / 16) * 16 * kt + (k / 32) * 16 * 32 + (n % 16) * 32 + k % 32;
                assert_eq!(weight_index(n, k, nt, kt, 16), want, "fp16 n={n} k={k}");
            }
        }
    }
    // int8 with 16 kernels: one block 16 kernels wide.
    for k in 0..96 {
        for n in 0..16 {
            assert_eq!(
                weight_index(n, k, 16, 96, 32),
                (k / 32) * 16 * 32 + n * 32 + k % 32
            );
        }
    }
    // Every packing is a permutation, also with a narrower last block.
    let b: Vec<u32> = (0..96 * 48).collect();
    let mut packed = pack_weights(&b, 96, 48, 32);
    packed.sort_unstable();
    assert_eq!(packed, b);
    // Features: ((c / C2)·H·W + h·W + w)·C2 + c % C2 with W = 1.
    for (c2, h_total) in [(16, 5), (8, 32), (4, 3)] {
        for c in 0..64 {
            for h in 0..h_total {
                assert_eq!(
                    cube_index(c, h, h_total, c2),
                    ((c / c2) * h_total + h) * c2 + c % c2
                );
            }
        }
    }
}

proptest! {
    /// A plan's tiles cover every (row, kernel, K block) exactly once, each
    /// is one task the CBUF holds, K blocks stay inside groups, the N tiles
    /// go round-robin over the cores, and a core's tasks run N tile by N
    /// tile.
    #[test]
    fn tile_plans_cover_the_matmul_with_single_tasks(
        m in 1u32..=1100,
        n in (1u32..=40).prop_map(|n| n * 16),
        group in (1u32..=16).prop_map(|k| k * 32),
        groups in 1u32..=4,
        cores in 1u32..=3,
        fp16: bool,
    ) {
        use slmcc_backends::npu::regcmd::tiling::TilePlan;
        let p = if fp16 { MatmulPrecision::Fp16 } else { MatmulPrecision::Int8 };
        let k = group * groups;
        let plan = TilePlan::new(p, (m, k, n), group, cores).unwrap();
        prop_assert!(group.is_multiple_of(plan.kt) && plan.kt.is_multiple_of(32));
        let blocks = plan.k_blocks();
        prop_assert_eq!(blocks * plan.kt, k);
        let mut seen = vec![0u8; (m * n * blocks) as usize];
        let per_core = plan.tiles();
        prop_assert_eq!(per_core.len(), cores as usize);
        let mut count = 0u64;
        for (core, tiles) in per_core.iter().enumerate() {
            let mut last_n0 = None;
            for t in tiles {
                prop_assert_eq!(t.core as usize, core);
                prop_assert_eq!((t.n0 / plan.nt) % cores, core as u32);
                prop_assert!(last_n0 <= Some(t.n0));
                last_n0 = Some(t.n0);
                plan.task(t, 0, 0, 0).regcmd().unwrap();
                for r in t.m0..t.m0 + t.rows {
                    for c in t.n0..t.n0 + t.kernels {
                        seen[((t.kb * m + r) * n + c) as usize] += 1;
                    }
                }
                count += 1;
            }
        }
        prop_assert_eq!(count, plan.task_count());
        prop_assert!(seen.iter().all(|&s| s == 1));
    }
}
