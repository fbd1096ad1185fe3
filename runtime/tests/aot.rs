//! Loading the cpu backend's ahead-of-time objects into the process: a
//! graph compiled to an ELF object for this machine (the same code path
//! `slmcc compile --cpu aarch64` takes for the board) is loaded by
//! `AotKernels` and run on the executor; its outputs equal the reference
//! interpreter's (bit for bit with exact options). The graph uses constants (read-only data
//! reached through the GOT), math helpers the object imports
//! (`slmcc_expf`, `slmcc_erff` with exact options) and the generated GEMM.

use slmcc_backends::cpu::aot::compile_object;
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::text::parse_module;
use slmcc_ir::{DType, Module, Tensor};
use slmcc_runtime::aot::{host_triple, AotKernels};
use slmcc_runtime::compare::diff;
use slmcc_runtime::interp::{run_graph, Capture};
use slmcc_runtime::jit::run_static;

const SRC: &str = r#"
module @m {
  graph @main(%x: f32[3, 8], %w: f32[8, 70], %i: i64[2]) -> (f32[3, 70], f32[2, 70], f32[3, 70]) {
    %a = matmul %x, %w : f32[3, 70]
    %c = constant {value = 0.5} : f32[]
    %h = mul %a, %c : f32[3, 70]
    %g = gelu %h : f32[3, 70]
    %e = exp %g : f32[3, 70]
    %s = softmax %e {axis = -1} : f32[3, 70]
    %t = gather %s, %i {axis = 0} : f32[2, 70]
    %u = sigmoid %a : f32[3, 70]
    return %s, %t, %u
  }
}
"#;

fn inputs() -> Vec<(String, Tensor)> {
    let f = |n: usize, seed: f32| -> Vec<f32> {
        (0..n)
            .map(|k| ((k as f32 * 0.37 + seed).sin()) * 0.8)
            .collect()
    };
    vec![
        ("x".into(), Tensor::from_f32(vec![3, 8], f(24, 0.1))),
        ("w".into(), Tensor::from_f32(vec![8, 70], f(560, 0.7))),
        ("i".into(), Tensor::from_i64(vec![2], vec![2, 0])),
    ]
}

fn module() -> Module {
    parse_module(SRC).unwrap()
}

fn run_aot(options: &CpuOptions) -> Vec<Tensor> {
    let m = module();
    let g = m.graph("main").unwrap();
    let triple = host_triple().expect("a host this test knows");
    let obj = compile_object(g, triple, "t", options).unwrap();
    let kernels: Vec<(usize, String)> = obj
        .kernels
        .iter()
        .map(|k| (k.node, k.symbol.clone()))
        .collect();
    let aot = AotKernels::load(&obj.bytes, &kernels).unwrap();
    let r = run_static(&m, g, &inputs(), &Capture::Nothing, &aot).unwrap();
    r.outputs.iter().map(|(_, t)| (**t).clone()).collect()
}

#[test]
fn loaded_object_matches_the_reference_bit_for_bit_in_exact_mode() {
    let m = module();
    let g = m.graph("main").unwrap();
    let want = run_graph(&m, g, &inputs(), &Capture::Nothing).unwrap();
    let got = run_aot(&CpuOptions::exact());
    assert_eq!(got.len(), want.outputs.len());
    for (a, b) in got.iter().zip(&want.outputs) {
        assert_eq!(a.dtype(), DType::F32);
        assert_eq!(a.to_f32_vec(), b.1.to_f32_vec());
    }
}

/// With the default options (FMA where the object's target has it, the
/// inline vector exp) results differ from the reference by rounding only:
/// within 1e-5, the goldens' measure. (The JIT may use host features a
/// baseline object does not, so the two are not compared bit for bit.)
#[test]
fn loaded_object_with_default_options_is_within_rounding_of_the_reference() {
    let m = module();
    let g = m.graph("main").unwrap();
    let want = run_graph(&m, g, &inputs(), &Capture::Nothing).unwrap();
    let options = CpuOptions {
        host_gemm: false,
        ..CpuOptions::default()
    };
    let got = run_aot(&options);
    for (a, (name, b)) in got.iter().zip(&want.outputs) {
        let d = diff(a, b).unwrap();
        assert!(d.max_rel < 1e-5, "{name}: {d:?}");
    }
}

#[test]
fn an_object_for_another_machine_is_refused() {
    let m = module();
    let g = m.graph("main").unwrap();
    let other = if cfg!(target_arch = "aarch64") {
        "x86_64-unknown-linux-gnu"
    } else {
        "aarch64-unknown-linux-gnu"
    };
    let obj = compile_object(g, other, "t", &CpuOptions::exact()).unwrap();
    let e = AotKernels::load(&obj.bytes, &[]).err().unwrap();
    assert!(e.contains("this machine is"), "{e}");
}

#[test]
fn garbage_is_refused() {
    let e = AotKernels::load(b"not an object", &[]).err().unwrap();
    assert!(e.contains("not an object file"), "{e}");
}
