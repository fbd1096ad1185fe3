//! Fusion on the exported test models, from both PyTorch exporters:
//! `eqsat-fuse` forms one causal attention (no mask operand left), two
//! RoPEs and one gated/GELU MLP per layer and an add+norm for every
//! residual add that feeds a norm, leaves no unfused candidate, and the
//! fused graphs still match the onnxruntime goldens (max_rel < 1e-5 on every
//! layer) under the reference interpreter.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use slmcc_ir::Module;
use slmcc_passes::PassRecord;
use slmcc_runtime::compare::diff;
use slmcc_runtime::{npy, run_graph, Capture};

/// The pipeline `slmcc golden check` should run on the reference backend.
const PIPELINE: &str = "shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The model file a golden manifest names.
fn model_path(model: &str) -> PathBuf {
    let text =
        std::fs::read_to_string(repo().join("goldens").join(model).join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    repo().join(manifest["model"].as_str().unwrap())
}

fn fuse(model: &str) -> (Module, PassRecord) {
    let path = model_path(model);
    let mut m = slmcc::onnx::import_model(&path).unwrap_or_else(|e| panic!("{model}: {e}"));
    let records =
        slmcc_passes::run_pipeline(&mut m, PIPELINE).unwrap_or_else(|e| panic!("{model}: {e}"));
    let fuse = records
        .into_iter()
        .find(|r| r.name == "eqsat-fuse")
        .unwrap();
    (m, fuse)
}

/// (model, layers, MLP statistic, add+norm statistic, add+norms formed)
const MODELS: &[(&str, u64, &str, &str, u64)] = &[
    // Llama-style: the norm after attention and the next layer's (or the
    // final) norm each follow a residual add; the first norm reads the
    // embedding.
    ("llama", 2, "formed-swiglu", "formed-add-rms-norm", 4),
    ("qwen2", 2, "formed-swiglu", "formed-add-rms-norm", 4),
    ("phi3", 2, "formed-swiglu", "formed-add-rms-norm", 4),
    // GPT-2 adds the position embedding before the first norm too.
    ("gpt2", 2, "formed-gelu", "formed-add-layer-norm", 5),
    // The same models from the TorchScript exporter (opset 17): `Gather`
    // from a `Flatten` in the mask, `chunk` as slices without steps.
    ("llama_ts", 2, "formed-swiglu", "formed-add-rms-norm", 4),
    ("qwen2_ts", 2, "formed-swiglu", "formed-add-rms-norm", 4),
    ("phi3_ts", 2, "formed-swiglu", "formed-add-rms-norm", 4),
    ("gpt2_ts", 2, "formed-gelu", "formed-add-layer-norm", 5),
];

#[test]
fn every_model_fuses_completely() {
    for &(model, layers, mlp, add_norm, add_norms) in MODELS {
        let (_, r) = fuse(model);
        let s = &r.stats;
        eprintln!("{model}: {s}");
        assert_eq!(s.get("formed-attention"), layers, "{model}: {s}");
        // The exporters' mask (range, gather_nd, cum_sum, ...) is proven causal.
        assert_eq!(s.get("attention-mask-operands"), 0, "{model}: {s}");
        if !model.starts_with("gpt2") {
            assert_eq!(s.get("formed-rope"), 2 * layers, "{model}: {s}");
        }
        assert_eq!(s.get(mlp), layers, "{model}: {s}");
        assert_eq!(s.get(add_norm), add_norms, "{model}: {s}");
        for (k, v) in s.iter() {
            if k.starts_with("unfused-") {
                assert_eq!(v, 0, "{model}: {k}: {s}");
            }
        }
        assert_eq!(s.get("stop-saturated"), 1, "{model}: {s}");
    }
}

#[test]
fn fused_models_match_the_goldens() {
    // MiniLM (BERT: erf GELU, padding mask) is assembled by a script.
    let minilm = model_path("minilm").exists();
    if !minilm {
        common::skip(
            "MiniLM fused against its goldens",
            "testdata/generated/minilm.onnx is absent (scripts/test assembles it)",
        );
    }
    let extra: &[&str] = if minilm { &["minilm"] } else { &[] };
    for model in MODELS.iter().map(|m| m.0).chain(extra.iter().copied()) {
        let (m, _) = fuse(model);
        let g = m.graph("main").unwrap();
        let dir = repo().join("goldens").join(model);
        let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
        let max_rel = manifest["tolerances"]["reference"]["max_rel"]
            .as_f64()
            .unwrap();
        for case in manifest["cases"].as_array().unwrap() {
            let inputs: Vec<(String, slmcc_ir::Tensor)> = case["inputs"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(n, f)| {
                    (
                        n.clone(),
                        npy::read(&dir.join(f.as_str().unwrap())).unwrap(),
                    )
                })
                .collect();
            let layers = case["layers"].as_array().unwrap();
            let names: HashSet<String> = layers
                .iter()
                .map(|l| l["value"].as_str().unwrap().to_string())
                .collect();
            let out = run_graph(&m, g, &inputs, &Capture::Names(names)).unwrap();
            for l in layers {
                let value = l["value"].as_str().unwrap();
                let got = out
                    .captured
                    .get(value)
                    .or_else(|| out.outputs.iter().find(|(n, _)| n == value).map(|(_, t)| t))
                    .unwrap_or_else(|| panic!("{model}: value `{value}` is gone after fusion"));
                let want = npy::read(&dir.join(l["file"].as_str().unwrap())).unwrap();
                let d = diff(got, &want).unwrap();
                eprintln!(
                    "{model} {} {}: max_rel {:.2e}",
                    case["name"], l["layer"], d.max_rel
                );
                assert!(
                    d.max_rel < max_rel && d.mismatched_specials == 0,
                    "{model} {} layer {}: max_rel {:e}",
                    case["name"],
                    l["layer"],
                    d.max_rel
                );
            }
        }
    }
}
