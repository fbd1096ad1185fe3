//! The ONNX that users download, for tiny Llama, Qwen2 and Phi-3 decoders:
//! Optimum's exports with and without past (`testdata/hub/export_optimum.py`)
//! against onnxruntime's greedy tokens, and onnxruntime-genai's model
//! builder's fp32 and int4 models (`testdata/hub/export_genai.py`) against
//! onnxruntime-genai's (`testdata/hub/expected.json`).

mod common;

use std::path::PathBuf;

use common::{generate_tokens, ok, refused, repo, s, scratch_dir, slmcc, stdout};
use slmcc_ir::Tensor;
use slmcc_runtime::npy;

const NEW_TOKENS: usize = 32;

struct Expected {
    model: PathBuf,
    prompt: Vec<i64>,
    tokens: Vec<i64>,
}

fn expected(prefix: &str) -> Vec<Expected> {
    let hub = repo().join("testdata/hub");
    let text = std::fs::read_to_string(hub.join("expected.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ints = |v: &serde_json::Value| -> Vec<i64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap())
            .collect()
    };
    let all: Vec<Expected> = json
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(name, e)| Expected {
            model: hub.join(name),
            prompt: ints(&e["prompt"]),
            tokens: ints(&e["tokens"]),
        })
        .collect();
    assert!(!all.is_empty(), "no expected tokens for {prefix}");
    all
}

#[test]
fn optimum_exports_generate_onnxruntimes_greedy_tokens() {
    for e in expected("from_optimum/") {
        let got = generate_tokens(&e.model, &e.prompt, NEW_TOKENS, &[]);
        assert_eq!(got, e.tokens, "{}", e.model.display());
    }
}

#[test]
fn genai_models_generate_onnxruntime_genais_greedy_tokens() {
    for e in expected("from_genai/") {
        let got = generate_tokens(&e.model, &e.prompt, NEW_TOKENS, &[]);
        assert_eq!(got, e.tokens, "{}", e.model.display());
    }
}

/// A name for a model of `testdata/hub`: `from_genai/llama_int4/model.onnx`
/// -> `genai-llama_int4`.
fn tag(model: &std::path::Path) -> String {
    let rel = model.strip_prefix(repo().join("testdata/hub")).unwrap();
    let rel = rel.to_str().unwrap().trim_end_matches("/model.onnx");
    rel.trim_end_matches(".onnx")
        .replace("from_", "")
        .replace('/', "-")
}

/// `compile MODEL --target TARGET --kv-cache --buckets 16 [extra]`.
fn compile_kv(model: &std::path::Path, pkg: &std::path::Path, target: &str, extra: &[&str]) {
    let mut args = vec![
        "compile",
        s(model),
        "--target",
        target,
        "--kv-cache",
        "--buckets",
        "16",
        "-o",
        s(pkg),
    ];
    args.extend_from_slice(extra);
    ok(&slmcc(&args));
}

#[test]
fn kv_cache_packages_of_downloaded_models_generate_the_same_tokens() {
    let dir = scratch_dir("hub-packages");
    let mut models = expected("from_optimum/");
    models.extend(expected("from_genai/"));
    for e in models {
        let name = tag(&e.model);
        let pkg = dir.join(format!("{name}.slmpkg"));
        compile_kv(&e.model, &pkg, "cpu", &[]);
        let got = generate_tokens(&pkg, &e.prompt, NEW_TOKENS, &[]);
        assert_eq!(got, e.tokens, "{}", pkg.display());
        // W8A8 on the NPU's functional model: quantized, so the tokens may
        // part from FP32's (the agreement is measured below); it generates.
        let npu = dir.join(format!("{name}-rk3588.slmpkg"));
        compile_kv(&e.model, &npu, "rk3588", &["--quant", "w8a8"]);
        let got = generate_tokens(&npu, &e.prompt, NEW_TOKENS, &[]);
        assert_eq!(got.len(), NEW_TOKENS, "{}", npu.display());
    }
}

/// The share of positions whose arg-max logit agrees.
fn top1_share(a: &Tensor, b: &Tensor) -> f64 {
    let (same, n) = common::top1_agreement(a, b);
    same as f64 / n as f64
}

/// rk3588 W8A8 (on `npu-sim`) keeps the FP32 model's top-1 token at 95 %
/// of the positions of the prompt and its 32 greedy tokens.
#[test]
fn rk3588_w8a8_keeps_top1_agreement() {
    let dir = scratch_dir("hub-w8a8");
    for e in expected("from_optimum/")
        .iter()
        .filter(|e| !tag(&e.model).ends_with("_past"))
    {
        let name = tag(&e.model);
        let mut ids = e.prompt.clone();
        ids.extend(&e.tokens);
        let input = dir.join(format!("{name}-ids.npy"));
        write_npy(&input, &Tensor::from_i64(vec![1, ids.len()], ids));
        let logits = |model: &std::path::Path, out: &str| {
            let spec = format!("input_ids={}", s(&input));
            let out = dir.join(out);
            ok(&slmcc(&[
                "run",
                s(model),
                "--input",
                &spec,
                "--output-dir",
                s(&out),
            ]));
            npy::read(&out.join("logits.npy")).unwrap()
        };
        let fp32 = logits(&e.model, &format!("{name}-fp32"));
        let pkg = dir.join(format!("{name}-w8a8.slmpkg"));
        let args = [
            "compile",
            s(&e.model),
            "--target",
            "rk3588",
            "--quant",
            "w8a8",
        ];
        ok(&slmcc(
            &[&args[..], &["--buckets", "64", "-o", s(&pkg)]].concat(),
        ));
        let agreement = top1_share(&fp32, &logits(&pkg, &format!("{name}-w8a8")));
        assert!(agreement >= 0.95, "{name}: top-1 agreement {agreement}");
    }
}

/// The int4 model keeps its 4-bit weights: its package is less than half
/// the fp32 one, and its rk3588 package, whose 4-bit products stay on the
/// CPU (docs/NPU.md), generates the same tokens.
#[test]
fn int4_models_stay_4_bit() {
    let dir = scratch_dir("hub-int4");
    for family in ["llama", "qwen2", "phi3"] {
        let model =
            |p: &str| repo().join(format!("testdata/hub/from_genai/{family}_{p}/model.onnx"));
        let (fp32, int4) = (
            dir.join(format!("{family}-fp32.slmpkg")),
            dir.join(format!("{family}-int4.slmpkg")),
        );
        compile_kv(&model("fp32"), &fp32, "cpu", &[]);
        compile_kv(&model("int4"), &int4, "cpu", &[]);
        let size = |p: &std::path::Path| std::fs::metadata(p).unwrap().len() as f64;
        let ratio = size(&int4) / size(&fp32);
        assert!(
            ratio <= 0.45,
            "{family}: the int4 package is {ratio:.3} of the fp32 one"
        );
        let npu = dir.join(format!("{family}-int4-rk3588.slmpkg"));
        compile_kv(&model("int4"), &npu, "rk3588", &[]);
        let e = expected(&format!("from_genai/{family}_int4/")).remove(0);
        assert_eq!(
            generate_tokens(&npu, &e.prompt, NEW_TOKENS, &[]),
            e.tokens,
            "{family}"
        );
    }
}

fn write_npy(path: &std::path::Path, t: &Tensor) {
    std::fs::write(path, npy::to_bytes(t).unwrap()).unwrap();
}

/// `run` takes Optimum's inputs as onnxruntime does: an all-ones mask and
/// the positions may be given or left out (the graph computes them); a
/// padded mask is refused, since the graph computes a mask of ones.
#[test]
fn run_takes_or_computes_the_mask_and_positions() {
    let dir = scratch_dir("hub-run");
    let model = repo().join("testdata/hub/from_optimum/qwen2.onnx");
    let ids = dir.join("ids.npy");
    write_npy(&ids, &Tensor::from_i64(vec![1, 4], vec![3, 1, 4, 1]));
    let ones = dir.join("ones.npy");
    write_npy(&ones, &Tensor::from_i64(vec![1, 4], vec![1; 4]));
    let padded = dir.join("padded.npy");
    write_npy(&padded, &Tensor::from_i64(vec![1, 4], vec![0, 1, 1, 1]));
    let pos = dir.join("pos.npy");
    write_npy(&pos, &Tensor::from_i64(vec![1, 4], vec![0, 1, 2, 3]));
    let run = |extra: &[&str]| {
        let ids = format!("input_ids={}", s(&ids));
        let mut args = vec!["run", s(&model), "--input", ids.as_str()];
        args.extend_from_slice(extra);
        slmcc(&args)
    };
    let bare = run(&[]);
    ok(&bare);
    let mask = format!("attention_mask={}", s(&ones));
    let positions = format!("position_ids={}", s(&pos));
    let given = run(&["--input", &mask, "--input", &positions]);
    ok(&given);
    assert_eq!(stdout(&bare), stdout(&given));
    let padded = format!("attention_mask={}", s(&padded));
    refused(
        &run(&["--input", &padded]),
        "`attention_mask` differs from what the graph computes at batch 1",
    );
}

/// `max|a - b| / max|b|`.
fn rel_error(a: &Tensor, b: &Tensor) -> f64 {
    let (a, b) = (a.to_f32_vec(), b.to_f32_vec());
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    let scale = b.iter().map(|y| y.abs()).fold(1e-6, f32::max);
    f64::from(diff / scale)
}

/// The int4 models' logits for the prompt (empty past), on reference and
/// cpu, against onnxruntime's: within 1e-5 of its run with float
/// activations (`accuracy_level` 0, what slmcc computes), and within 0.05,
/// with the same top-1 tokens, of its run as built (level 4, where it
/// quantizes the activations to int8).
#[test]
fn int4_logits_match_onnxruntimes_int4_runs() {
    let dir = scratch_dir("hub-int4-logits");
    let ids = dir.join("ids.npy");
    let e = expected("from_genai/llama_int4/").remove(0);
    write_npy(
        &ids,
        &Tensor::from_i64(vec![1, e.prompt.len()], e.prompt.clone()),
    );
    let empty = dir.join("empty.npy");
    write_npy(&empty, &Tensor::from_f32(vec![1, 2, 0, 16], vec![]));
    for family in ["llama", "qwen2", "phi3"] {
        let folder = repo().join(format!("testdata/hub/from_genai/{family}_int4"));
        let level0 = npy::read(&folder.join("logits_level0.npy")).unwrap();
        let as_built = npy::read(&folder.join("logits_as_built.npy")).unwrap();
        for backend in ["reference", "cpu"] {
            let out = dir.join(format!("{family}-{backend}"));
            let mut args = vec![
                "run".to_string(),
                s(&folder.join("model.onnx")).to_string(),
                "--backend".to_string(),
                backend.to_string(),
                "--input".to_string(),
                format!("input_ids={}", s(&ids)),
                "--output-dir".to_string(),
                s(&out).to_string(),
            ];
            for l in 0..2 {
                for which in ["key", "value"] {
                    args.push("--input".to_string());
                    args.push(format!("past_key_values.{l}.{which}={}", s(&empty)));
                }
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ok(&slmcc(&args));
            let got = npy::read(&out.join("logits.npy")).unwrap();
            let (e0, e4) = (rel_error(&got, &level0), rel_error(&got, &as_built));
            assert!(
                e0 <= 1e-5,
                "{family} on {backend}: {e0} from onnxruntime at level 0"
            );
            assert!(
                e4 <= 0.05,
                "{family} on {backend}: {e4} from onnxruntime as built"
            );
            assert_eq!(top1_share(&got, &as_built), 1.0, "{family} on {backend}");
        }
    }
}

/// A model with past inputs compiled without `--kv-cache` is refused with
/// the flag to use, before any pass runs.
#[test]
fn a_with_past_model_asks_for_kv_cache() {
    let dir = scratch_dir("hub-no-kv");
    let pkg = dir.join("x.slmpkg");
    let model = repo().join("testdata/hub/from_optimum/qwen2_past.onnx");
    let o = slmcc(&["compile", s(&model), "--target", "cpu", "-o", s(&pkg)]);
    refused(&o, "compile it with --kv-cache");
    assert!(!pkg.exists());
}

/// `golden record` of an Optimum export from onnxruntime, with only the
/// token ids (the mask and positions made for onnxruntime) or with all
/// three inputs; `golden check` then matches every value on reference and
/// cpu.
#[test]
fn goldens_of_an_optimum_export_record_and_check() {
    let dir = scratch_dir("hub-goldens");
    let model = repo().join("testdata/hub/from_optimum/llama.onnx");
    let file = |name: &str, t: Tensor| {
        let p = dir.join(name);
        write_npy(&p, &t);
        p
    };
    let ids = file(
        "ids.npy",
        Tensor::from_i64(vec![1, 6], vec![1, 5, 7, 9, 11, 13]),
    );
    let mask = file("mask.npy", Tensor::from_i64(vec![1, 6], vec![1; 6]));
    let pos = file("pos.npy", Tensor::from_i64(vec![1, 6], (0..6).collect()));
    let ids = format!("input_ids={}", s(&ids));
    let all = [
        ids.clone(),
        format!("attention_mask={}", s(&mask)),
        format!("position_ids={}", s(&pos)),
    ];
    for (k, given) in [&all[..1], &all[..]].into_iter().enumerate() {
        let out = dir.join(format!("goldens{k}"));
        let mut args = vec!["golden", "record", s(&model), "-o", s(&out)];
        for g in given {
            args.extend(["--input", g.as_str()]);
        }
        ok(&slmcc(&args));
        for backend in ["reference", "cpu"] {
            let o = slmcc(&["golden", "check", s(&out), "--backend", backend]);
            ok(&o);
            assert!(
                stdout(&o).contains("layers within tolerance"),
                "{}",
                stdout(&o)
            );
        }
    }
}
