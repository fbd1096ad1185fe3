//! `compile --lora DIR[:WEIGHT]`: PEFT adapters merged into the weights.
//!
//! The reference is PEFT itself: `testdata/models/lora_peft.py` (pinned
//! `peft`) made the adapters in `testdata/lora/` and recorded the logits of
//! `merge_and_unload()` for one input. A package compiled with the same
//! adapters must give those logits within 1e-5, for models exported by
//! either exporter (dynamo names its weights `val_N`; GPT-2's Conv1D layers
//! are `Gemm`s), with one adapter and with two at different weights. An
//! adapter that does not fit the model is refused with exit code 2, naming
//! the module, and nothing is written.

mod common;

use std::path::{Path, PathBuf};

use common::{ok, refused, repo, s, scratch_dir, slmcc};
use slmcc_ir::weights::WeightStore;
use slmcc_ir::Tensor;

fn lora(name: &str) -> PathBuf {
    repo().join("testdata/lora").join(name)
}

/// Compiles `model` (a file of testdata/models) for the cpu with `extra`
/// options into `out`.
fn compile(model: &str, out: &Path, extra: &[&str]) -> std::process::Output {
    let m = repo().join("testdata/models").join(model);
    let mut args = vec!["compile", s(&m), "--target", "cpu", "--buckets", "16"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-o", s(out)]);
    slmcc(&args)
}

/// Runs `pkg` on the recorded input; its logits.
fn logits(pkg: &Path, dir: &Path) -> Tensor {
    let ids = lora("input_ids.npy");
    let input = format!("input_ids={}", s(&ids));
    ok(&slmcc(&[
        "run",
        s(pkg),
        "--input",
        &input,
        "--output-dir",
        s(dir),
    ]));
    slmcc_runtime::npy::read(&dir.join("logits.npy")).unwrap()
}

fn assert_matches_peft(model: &str, adapters: &[&str], expected: &str) {
    let dir = scratch_dir(&format!("lora-{model}-{expected}"));
    let pkg = dir.join("merged.slmpkg");
    let args: Vec<String> = adapters
        .iter()
        .flat_map(|a| {
            let (name, weight) = a.split_once(':').map_or((*a, ""), |(n, w)| (n, w));
            let path = lora(name).display().to_string();
            let arg = match weight {
                "" => path,
                w => format!("{path}:{w}"),
            };
            ["--lora".to_string(), arg]
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&compile(model, &pkg, &args));
    let got = logits(&pkg, &dir);
    let want = slmcc_runtime::npy::read(&lora(&format!("{expected}.logits.npy"))).unwrap();
    let d = slmcc_runtime::compare::diff(&got, &want).unwrap();
    assert!(d.max_abs < 1e-5, "{model} + {adapters:?}: {d:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_adapter_matches_peft_merge_for_both_exporters() {
    for model in ["qwen2.onnx", "qwen2_ts.onnx"] {
        assert_matches_peft(model, &["qwen2_attn"], "qwen2_attn");
    }
}

#[test]
fn weighted_adapters_match_peft_merge() {
    // qwen2_mlp: rsLoRA, rank_pattern, alpha_pattern, and the lm_head
    // (whose base weight PEFT saves with the adapter).
    for model in ["qwen2.onnx", "qwen2_ts.onnx"] {
        assert_matches_peft(
            model,
            &["qwen2_attn", "qwen2_mlp:0.5"],
            "qwen2_attn1_mlp0.5",
        );
    }
}

#[test]
fn conv1d_adapter_matches_peft_merge() {
    // GPT-2's Conv1D (fan_in_fan_out), exported as Gemm.
    for model in ["gpt2.onnx", "gpt2_ts.onnx"] {
        assert_matches_peft(model, &["gpt2_conv"], "gpt2_conv");
    }
}

#[test]
fn the_card_records_the_adapters_and_quantized_targets_merge_first() {
    let dir = scratch_dir("lora-card");
    let pkg = dir.join("q.slmpkg");
    let q = repo().join("testdata/models/qwen2.onnx");
    let a = lora("qwen2_attn");
    let arg = format!("{}:0.25", s(&a));
    ok(&slmcc(&[
        "compile",
        s(&q),
        "--target",
        "rk3588",
        "--quant",
        "w8a8",
        "--buckets",
        "16",
        "--lora",
        &arg,
        "-o",
        s(&pkg),
    ]));
    let o = slmcc(&["report", s(&pkg), "--card", "json"]);
    ok(&o);
    let card: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let entries = card["model"]["lora"].as_array().expect("a lora list");
    assert_eq!(entries.len(), 1, "{card}");
    let e = &entries[0];
    assert_eq!(e["adapter"], "qwen2_attn");
    assert_eq!(e["weight"], 0.25);
    assert_eq!(e["r"], 4);
    assert_eq!(e["lora_alpha"], 8.0);
    assert_eq!(e["modules"], 8);
    let digest = slmcc_runtime::package::sha256_file(&a.join("adapter_model.safetensors"));
    assert_eq!(
        e["safetensors_sha256"],
        slmcc_runtime::package::hex(&digest.unwrap())
    );
    let o = slmcc(&["report", s(&pkg), "--card", "md"]);
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("| LoRA merged | `qwen2_attn` × 0.25: r 4"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes an adapter folder: `config` as adapter_config.json and `tensors`
/// (name, shape) filled with 0.01.
fn write_adapter(dir: &Path, config: &str, tensors: &[(&str, &[usize])]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("adapter_config.json"), config).unwrap();
    let mut store = WeightStore::new();
    for &(name, shape) in tensors {
        let n = shape.iter().product();
        store.insert(name, Tensor::from_f32(shape.to_vec(), vec![0.01; n]));
    }
    store.save(&dir.join("adapter_model.safetensors")).unwrap();
}

const CONFIG: &str = r#"{"peft_type": "LORA", "r": 4, "lora_alpha": 8}"#;
const Q_PROJ: &str = "base_model.model.model.layers.0.self_attn.q_proj";

#[test]
fn adapters_that_do_not_fit_are_refused_naming_the_module() {
    let dir = scratch_dir("lora-refused");
    let out = dir.join("out.slmpkg");
    let try_adapter = |name: &str, config: &str, tensors: &[(&str, &[usize])], reason: &str| {
        let a = dir.join(name);
        write_adapter(&a, config, tensors);
        let o = compile("qwen2.onnx", &out, &["--lora", s(&a)]);
        refused(&o, reason);
        assert!(!out.exists(), "{name}: a package was written");
    };
    let a_name = format!("{Q_PROJ}.lora_A.weight");
    let b_name = format!("{Q_PROJ}.lora_B.weight");
    // The shapes of another model (hidden 96, not 64).
    try_adapter(
        "shape",
        CONFIG,
        &[(&a_name, &[4, 96]), (&b_name, &[96, 4])],
        "module `model.layers.0.self_attn.q_proj`: the adapter maps 96 inputs to 96 outputs",
    );
    // A module the model does not have.
    let missing = "base_model.model.model.layers.7.self_attn.q_proj";
    try_adapter(
        "module",
        CONFIG,
        &[
            (&format!("{missing}.lora_A.weight"), &[4, 64]),
            (&format!("{missing}.lora_B.weight"), &[64, 4]),
        ],
        "module `model.layers.7.self_attn.q_proj` is not a linear layer of the model",
    );
    // A rank the config does not state.
    try_adapter(
        "rank",
        r#"{"r": 8, "lora_alpha": 8}"#,
        &[(&a_name, &[4, 64]), (&b_name, &[64, 4])],
        "the factors have rank 4, the config says r = 8",
    );
    // Variants the merge does not implement.
    try_adapter(
        "dora",
        r#"{"r": 4, "lora_alpha": 8, "use_dora": true}"#,
        &[(&a_name, &[4, 64]), (&b_name, &[64, 4])],
        "DoRA adapters are not supported",
    );
    try_adapter(
        "half",
        CONFIG,
        &[(&a_name, &[4, 64])],
        "module `model.layers.0.self_attn.q_proj` lacks lora_A or lora_B",
    );
    try_adapter(
        "embedding",
        CONFIG,
        &[(
            "base_model.model.model.embed_tokens.lora_embedding_A",
            &[4, 512],
        )],
        "a LoRA on an embedding, which is not supported",
    );
    try_adapter(
        "regex",
        r#"{"r": 4, "lora_alpha": 8, "rank_pattern": {"layers\\.0\\..*": 2}}"#,
        &[(&a_name, &[4, 64]), (&b_name, &[64, 4])],
        "is a regular expression",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_adapter_folders_and_arguments_are_refused() {
    let dir = scratch_dir("lora-args");
    let out = dir.join("out.slmpkg");
    let nothing = dir.join("nothing");
    refused(
        &compile("qwen2.onnx", &out, &["--lora", s(&nothing)]),
        "is not a folder",
    );
    let pickle = dir.join("pickle");
    std::fs::create_dir_all(&pickle).unwrap();
    std::fs::write(pickle.join("adapter_config.json"), CONFIG).unwrap();
    std::fs::write(pickle.join("adapter_model.bin"), b"PK").unwrap();
    refused(
        &compile("qwen2.onnx", &out, &["--lora", s(&pickle)]),
        "adapter_model.bin (a pickle",
    );
    let a = lora("qwen2_attn");
    refused(
        &compile("qwen2.onnx", &out, &["--lora", &format!("{}:inf", s(&a))]),
        "is not a finite number",
    );
    // Another model's adapter: GPT-2's modules on Qwen2.
    refused(
        &compile("qwen2.onnx", &out, &["--lora", s(&lora("gpt2_conv"))]),
        "module `transformer.h.0.attn.c_attn` is not a linear layer of the model",
    );
    // IR text has no exporter scopes to match by.
    let ir = dir.join("m.slm");
    ok(&slmcc(&[
        "import",
        s(&repo().join("testdata/models/qwen2.onnx")),
        "-o",
        s(&ir),
    ]));
    let o = slmcc(&[
        "compile",
        s(&ir),
        "--target",
        "cpu",
        "--lora",
        s(&a),
        "-o",
        s(&out),
    ]);
    refused(&o, "--lora needs an ONNX model");
    assert!(!out.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
