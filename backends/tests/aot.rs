//! AOT objects for aarch64: every kind of kernel compiles for the board's
//! target, and the object exports one function per node and imports the
//! math helpers.

mod common;

use common::{one_node, Kind, Lcg};
use object::{Architecture, BinaryFormat, Object, ObjectSymbol, SymbolKind};
use slmcc_backends::cpu::aot::{compile_object, AARCH64_LINUX};
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::ops::add_layer_norm::AddLayerNorm;
use slmcc_ir::ops::add_rms_norm::AddRmsNorm;
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::cast::Cast;
use slmcc_ir::ops::gather::Gather;
use slmcc_ir::ops::gather_elements::GatherElements;
use slmcc_ir::ops::gather_nd::GatherNd;
use slmcc_ir::ops::gelu::GeluApprox;
use slmcc_ir::ops::glu::Glu;
use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::matmul::MatMul;
use slmcc_ir::ops::reduce::{Reduce, ReduceKind};
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::ops::rope::Rope;
use slmcc_ir::ops::softmax::Softmax;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ops::where_::Where;
use slmcc_ir::text::parse_module;
use slmcc_ir::{DType, Op, Tensor};

#[test]
fn kernels_are_exported_and_math_imported() {
    let src = r#"
module @m {
  graph @main(%x: f32[2, 5, 8], %w: f32[8, 6]) -> (f32[2, 5, 6]) {
    %a = matmul %x, %w : f32[2, 5, 6]
    %h = constant {value = 0.5} : f32[]
    %b = mul %a, %h : f32[2, 5, 6]
    %s = softmax %b {axis = -1} : f32[2, 5, 6]
    return %s
  }
}
"#;
    let m = parse_module(src).unwrap();
    // Without `fast_math` softmax calls the reference's `expf` (with it,
    // the exp is inline vector code).
    let options = CpuOptions {
        fast_math: false,
        ..CpuOptions::default()
    };
    let obj = compile_object(&m.graphs[0], AARCH64_LINUX, "slm_main", &options).unwrap();
    assert_eq!(obj.kernels.len(), 4);
    let file = object::File::parse(&*obj.bytes).unwrap();
    assert_eq!(file.format(), BinaryFormat::Elf);
    assert_eq!(file.architecture(), Architecture::Aarch64);
    let defined: Vec<String> = file
        .symbols()
        .filter(|s| s.is_definition() && s.kind() == SymbolKind::Text && s.is_global())
        .map(|s| s.name().unwrap().to_string())
        .collect();
    for (k, want) in ["matmul", "constant", "mul", "softmax"].iter().enumerate() {
        let name = format!("slm_main_{k}_{want}");
        assert!(defined.contains(&name), "{name} not in {defined:?}");
        assert_eq!(obj.kernels[k].symbol, name);
    }
    let undefined: Vec<String> = file
        .symbols()
        .filter(|s| s.is_undefined())
        .map(|s| s.name().unwrap().to_string())
        .collect();
    assert!(
        undefined.contains(&"slmcc_expf".to_string()),
        "{undefined:?}"
    );
}

/// One graph per kernel family, so every lowering goes through the aarch64
/// backend (vector selects, FMA, calls, traps-free gathers).
#[test]
fn every_kernel_family_compiles_for_aarch64() {
    let mut rng = Lcg(5);
    let x = rng.tensor(&[3, 7, 9], 1.0);
    let w = rng.tensor(&[9, 10], 1.0);
    let hw = rng.tensor(&[9], 1.0);
    let x7 = rng.tensor(&[3, 7], 1.0);
    let h7 = rng.tensor(&[7], 1.0);
    let cases: Vec<(Op, Vec<(Tensor, Kind)>)> = vec![
        (
            MatMul.into(),
            vec![(x.clone(), Kind::Input), (w.clone(), Kind::Weight)],
        ),
        (
            Glu::swiglu().into(),
            vec![(x.clone(), Kind::Input), (w.clone(), Kind::Weight)],
        ),
        (
            Glu::geglu(GeluApprox::Tanh).into(),
            vec![
                (x.clone(), Kind::Input),
                (w.clone(), Kind::Weight),
                (w, Kind::Weight),
            ],
        ),
        (Softmax { axis: 1 }.into(), vec![(x.clone(), Kind::Input)]),
        (
            Reduce::new(ReduceKind::Max, Some(vec![0, 2]), true).into(),
            vec![(x.clone(), Kind::Input)],
        ),
        (
            RmsNorm::default().into(),
            vec![(x.clone(), Kind::Input), (hw.clone(), Kind::Weight)],
        ),
        (
            LayerNorm {
                axis: -1,
                eps: 1e-5,
            }
            .into(),
            vec![
                (x.clone(), Kind::Input),
                (hw.clone(), Kind::Input),
                (hw, Kind::Input),
            ],
        ),
        (
            Unary::new(UnaryKind::Relu).into(),
            vec![(x.clone(), Kind::Input)],
        ),
        (
            Unary::new(UnaryKind::Sign).into(),
            vec![(x.clone(), Kind::Input)],
        ),
        (
            Unary::new(UnaryKind::Tanh).into(),
            vec![(x.clone(), Kind::Input)],
        ),
        (
            Binary::new(BinaryKind::Less).into(),
            vec![(x.clone(), Kind::Input), (x.clone(), Kind::Input)],
        ),
        (
            Cast { to: DType::I32 }.into(),
            vec![(x.clone(), Kind::Input)],
        ),
        (
            Where.into(),
            vec![
                (rng.bools(&[7, 1]), Kind::Input),
                (x.clone(), Kind::Input),
                (Tensor::scalar_f32(0.0), Kind::Const),
            ],
        ),
        (
            Transpose {
                perm: vec![2, 0, 1],
            }
            .into(),
            vec![(x.clone(), Kind::Input)],
        ),
        (
            Gather { axis: 1 }.into(),
            vec![(x, Kind::Weight), (rng.ints(&[2, 3], -7, 6), Kind::Input)],
        ),
    ];
    // The fused transformer ops, and a GEMM large enough to pack and block.
    let q = rng.tensor(&[1, 4, 5, 8], 1.0);
    let kv = rng.tensor(&[1, 2, 600, 8], 1.0);
    let table = rng.tensor(&[5, 8], 1.0);
    let table4 = rng.tensor(&[5, 4], 1.0);
    let big = rng.tensor(&[70, 1100], 1.0);
    let bw = rng.tensor(&[1100, 24], 1.0);
    let fused: Vec<(Op, Vec<(Tensor, Kind)>)> = vec![
        (
            Attention {
                causal: true,
                window: 3,
                softcap: 5.0,
                ..Attention::new(2, 0.3)
            }
            .into(),
            vec![
                (q.clone(), Kind::Input),
                (kv.clone(), Kind::Input),
                (kv, Kind::Input),
                (rng.bools(&[1, 1, 5, 600]), Kind::Input),
            ],
        ),
        (
            Rope::new(8).into(),
            vec![
                (q.clone(), Kind::Input),
                (table.clone(), Kind::Input),
                (table, Kind::Input),
            ],
        ),
        (
            Rope {
                rotary_dim: 4,
                interleaved: true,
            }
            .into(),
            vec![
                (q, Kind::Input),
                (table4.clone(), Kind::Input),
                (table4, Kind::Input),
            ],
        ),
        (
            AddRmsNorm::default().into(),
            vec![
                (x7.clone(), Kind::Input),
                (x7.clone(), Kind::Input),
                (h7.clone(), Kind::Weight),
            ],
        ),
        (
            AddLayerNorm::default().into(),
            vec![
                (x7.clone(), Kind::Input),
                (x7, Kind::Input),
                (h7.clone(), Kind::Weight),
                (h7, Kind::Weight),
            ],
        ),
        (
            MatMul.into(),
            vec![(big.clone(), Kind::Input), (bw.clone(), Kind::Weight)],
        ),
        (
            Glu::swiglu().into(),
            vec![
                (big, Kind::Input),
                (bw.clone(), Kind::Weight),
                (bw, Kind::Weight),
            ],
        ),
    ];
    for (op, operands) in cases.into_iter().chain(fused) {
        let m = one_node(&op, &operands).unwrap();
        let what = slmcc_ir::OpDef::mnemonic(&op);
        let obj = compile_object(&m.graphs[0], AARCH64_LINUX, "k", &CpuOptions::default())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let file = object::File::parse(&*obj.bytes).unwrap();
        assert_eq!(file.architecture(), Architecture::Aarch64, "{what}");
    }
}

/// The element-wise kernels on 16-bit floats (vector loads, narrowing
/// stores) and small integers, integer `div`/`pow` (the `f64` helper) and
/// the gathers with run-time indices compile for aarch64 too.
#[test]
fn dtype_kernels_compile_for_aarch64() {
    let mut rng = Lcg(9);
    let x = rng.tensor(&[3, 7, 9], 4.0);
    let h = x.cast(DType::F16);
    let i = rng.ints(&[3, 7, 9], -50, 50);
    let nz = Tensor::from_i64(vec![9], (1..=9).collect());
    let cases: Vec<(Op, Vec<(Tensor, Kind)>)> = vec![
        (
            Binary::new(BinaryKind::Mul).into(),
            vec![(h.clone(), Kind::Input), (h.clone(), Kind::Input)],
        ),
        (
            Unary::new(UnaryKind::Exp).into(),
            vec![(x.cast(DType::BF16), Kind::Input)],
        ),
        (
            Cast { to: DType::F16 }.into(),
            vec![(x.clone(), Kind::Input)],
        ),
        (
            Cast { to: DType::I8 }.into(),
            vec![(h.clone(), Kind::Input)],
        ),
        (
            Binary::new(BinaryKind::Div).into(),
            vec![
                (i.cast(DType::I8), Kind::Input),
                (nz.cast(DType::I8), Kind::Input),
            ],
        ),
        (
            Binary::new(BinaryKind::Mod).into(),
            vec![(i.clone(), Kind::Input), (nz.clone(), Kind::Input)],
        ),
        (
            Binary::new(BinaryKind::Pow).into(),
            vec![
                (i.cast(DType::U8), Kind::Input),
                (nz.cast(DType::U8), Kind::Input),
            ],
        ),
        (
            Binary::new(BinaryKind::Pow).into(),
            vec![(x.clone(), Kind::Input), (nz.cast(DType::I32), Kind::Input)],
        ),
        (
            GatherNd { batch_dims: 1 }.into(),
            vec![(h, Kind::Input), (rng.ints(&[3, 4, 1], -7, 6), Kind::Input)],
        ),
        (
            GatherElements { axis: 2 }.into(),
            vec![(x, Kind::Input), (rng.ints(&[3, 7, 2], -9, 8), Kind::Input)],
        ),
    ];
    for (op, operands) in cases {
        let m = one_node(&op, &operands).unwrap();
        let what = slmcc_ir::OpDef::mnemonic(&op);
        let obj = compile_object(&m.graphs[0], AARCH64_LINUX, "k", &CpuOptions::default())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let file = object::File::parse(&*obj.bytes).unwrap();
        assert_eq!(file.architecture(), Architecture::Aarch64, "{what}");
    }
}

#[test]
fn unknown_targets_are_errors() {
    let m =
        parse_module("module @m {\n  graph @g(%x: f32[2]) -> (f32[2]) {\n    return %x\n  }\n}\n")
            .unwrap();
    let e = compile_object(&m.graphs[0], "nonsense-arch", "k", &CpuOptions::default()).unwrap_err();
    assert!(e.to_string().contains("nonsense-arch"), "{e}");
}
