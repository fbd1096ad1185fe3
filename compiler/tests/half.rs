//! Decoders exported in half precision (`testdata/models/half/`, written by
//! `testdata/models/half.py`: llama3 and qwen2 cast with `.half()`, sdpa,
//! dynamo), against onnxruntime's results on the same files:
//!
//! - `widen-half` changes no bit: every value of the fused module on the
//!   reference interpreter, before and after the pass;
//! - `run` on the reference and cpu backends gives onnxruntime's `f16`
//!   logits within a few `f16` ulps, and its arg-max everywhere;
//! - packages compiled with `--target cpu --kv-cache` generate
//!   onnxruntime's greedy tokens with `f32` compute and with 8-bit
//!   weights (weight-only `w8`, and `w8a8`), and with 4-bit weights
//!   (`w4`, `w4a8`) the tokens the reference interpreter generates from
//!   the same quantized model.

mod common;

use std::path::{Path, PathBuf};

use common::{generate_tokens, repo, run_pipeline, slmcc, stderr};
use slmcc_ir::{DType, Module, Tensor};
use slmcc_runtime::{npy, run_graph, Capture};

const FAMILIES: [&str; 2] = ["llama3", "qwen2"];
const FUSE: &str = "shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse";

fn model(family: &str) -> PathBuf {
    repo().join(format!("testdata/models/half/{family}_f16.onnx"))
}

fn reference(family: &str, what: &str) -> Tensor {
    let p = repo().join(format!("testdata/models/half/{family}_f16.{what}.npy"));
    npy::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("slmcc-half-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn widening_changes_no_value() {
    for family in FAMILIES {
        let mut fused: Module = slmcc::onnx::import_model(&model(family)).unwrap();
        run_pipeline(&mut fused, FUSE);
        let mut widened = fused.clone();
        run_pipeline(&mut widened, "widen-half,verify");
        let inputs = [("input_ids".to_string(), reference(family, "ids"))];
        let run = |m: &Module| {
            run_graph(m, &m.graphs[0], &inputs, &Capture::All)
                .unwrap_or_else(|e| panic!("{family}: {e}"))
        };
        let (before, after) = (run(&fused), run(&widened));
        let mut compared = 0;
        for (name, want) in &before.captured {
            let got = &after.captured[name];
            assert_eq!(got.dtype(), want.dtype(), "{family} %{name}");
            assert_eq!(got.to_le_bytes(), want.to_le_bytes(), "{family} %{name}");
            compared += 1;
        }
        let half = before
            .captured
            .values()
            .filter(|t| t.dtype() == DType::F16)
            .count();
        assert!(
            half > 50 && compared > half,
            "{family}: {half} of {compared}"
        );
        let widened_nodes = widened.graphs[0].nodes.len() - fused.graphs[0].nodes.len();
        assert!(widened_nodes > 20, "{family}: {widened_nodes} casts");
    }
}

/// `slmcc run MODEL --input input_ids=.. --backend B`'s logits.
fn logits(family: &str, backend: &str, dir: &Path) -> Tensor {
    let ids = repo().join(format!("testdata/models/half/{family}_f16.ids.npy"));
    let out = dir.join(format!("{family}-{backend}"));
    let spec = format!("input_ids={}", ids.display());
    let o = slmcc(&[
        "run",
        model(family).to_str().unwrap(),
        "--input",
        &spec,
        "--backend",
        backend,
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{family} {backend}: {}", stderr(&o));
    npy::read(&out.join("logits.npy")).unwrap()
}

fn argmax_rows(t: &Tensor) -> Vec<usize> {
    let vocab = *t.shape().last().unwrap();
    t.to_f32_vec()
        .chunks(vocab)
        .map(|r| (0..vocab).max_by(|&i, &j| r[i].total_cmp(&r[j])).unwrap())
        .collect()
}

#[test]
fn reference_and_cpu_give_onnxruntime_logits() {
    let dir = tempdir();
    for family in FAMILIES {
        let want = reference(family, "logits");
        assert_eq!(want.dtype(), DType::F16);
        for backend in ["reference", "cpu"] {
            let got = logits(family, backend, &dir);
            assert_eq!(got.dtype(), DType::F16, "{family} {backend}");
            assert_eq!(got.shape(), want.shape(), "{family} {backend}");
            // |logits| <= 4, where an f16 ulp is 2^-8: onnxruntime rounds
            // between ops in its own order, so a few ulps apart.
            let worst = got
                .to_f32_vec()
                .iter()
                .zip(want.to_f32_vec())
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst <= 4.0 / 256.0, "{family} {backend}: {worst}");
            assert_eq!(argmax_rows(&got), argmax_rows(&want), "{family} {backend}");
        }
    }
}

#[test]
fn cpu_packages_generate_onnxruntime_tokens() {
    let dir = tempdir();
    for family in FAMILIES {
        let prompt = reference(family, "ids").to_i64_vec();
        let greedy = reference(family, "greedy").to_i64_vec();
        let src = model(family);
        for quant in ["none", "w8", "w8a8", "w4", "w4a8"] {
            let pkg = dir.join(format!("{family}-{quant}.slmpkg"));
            let o = slmcc(&[
                "compile",
                src.to_str().unwrap(),
                "--target",
                "cpu",
                "--quant",
                quant,
                "--kv-cache",
                "--buckets",
                "16",
                "-o",
                pkg.to_str().unwrap(),
            ]);
            assert!(o.status.success(), "{family} {quant}: {}", stderr(&o));
            let got = generate_tokens(&pkg, &prompt, 16, &[]);
            let want = match quant {
                "none" | "w8" | "w8a8" => greedy.clone(),
                _ => generate_tokens(
                    &src,
                    &prompt,
                    16,
                    &[
                        "--backend",
                        "reference",
                        "--quant",
                        quant,
                        "--buckets",
                        "16",
                    ],
                ),
            };
            assert_eq!(got, want, "{family} {quant}");
        }
    }
}
