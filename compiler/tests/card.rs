//! The model card `slmcc compile` writes into a package and `slmcc report
//! PKG --card` prints: checked against what others say of the same things
//! (the `onnx` Python package for the source's provenance and licence, the
//! package's own NPU programs for the placement, its plans for the memory
//! totals, `slmcc eval ppl` for the quality numbers).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ok, repo, s, scratch_dir, skip, slmcc, stderr, stdout};
use serde_json::Value;
use slmcc_ir::Region;
use slmcc_runtime::package::{hex, sha256, Package};

fn card_of(pkg: &Path) -> Value {
    let o = slmcc(&["report", s(pkg), "--card", "json"]);
    ok(&o);
    serde_json::from_str(&stdout(&o)).unwrap()
}

/// The Python of the tests' venv (`scripts/test`), with `onnx`.
fn python() -> Option<PathBuf> {
    std::env::var_os("SLMCC_PYTHON").map(PathBuf::from)
}

/// An rk3588 package of the dynamo-exported Qwen2 with a KV cache: the
/// card names the source as the `onnx` package reads it, places on the NPU
/// exactly the products the package holds programs for, gives each
/// bucket's plan totals and marks every latency as an estimate.
#[test]
fn the_card_records_the_source_the_placement_and_the_memory() {
    let dir = scratch_dir("card-qwen2");
    let model = repo().join("testdata/models/qwen2.onnx");
    let pkg = dir.join("qwen2.slmpkg");
    ok(&slmcc(&[
        "compile",
        s(&model),
        "--target",
        "rk3588",
        "--kv-cache",
        "--buckets",
        "16,32",
        "-o",
        s(&pkg),
    ]));
    let card = card_of(&pkg);
    assert_eq!(card["card"], "slmcc model card 1");
    let m = &card["model"];
    assert_eq!(m["source"], "qwen2.onnx");
    assert_eq!(m["sha256"], hex(&sha256(&std::fs::read(&model).unwrap())));
    assert_eq!(card["compiler"]["target"], "rk3588");
    assert_eq!(card["quantization"]["scheme"], "w8a8");
    assert!(card["compiler"]["pipeline"]
        .as_str()
        .unwrap()
        .contains("quantize"));

    // The source, as the onnx package reads it.
    match python() {
        Some(py) => {
            let o = Command::new(py)
                .args(["-c", "import json, sys, onnx\n\
                    m = onnx.load(sys.argv[1], load_external_data=False)\n\
                    print(json.dumps({'producer': (m.producer_name + ' ' + m.producer_version).strip(),\n\
                      'ir_version': m.ir_version,\n\
                      'opsets': [{'domain': o.domain or 'ai.onnx', 'version': o.version} for o in m.opset_import]}))"])
                .arg(&model)
                .output()
                .unwrap();
            ok(&o);
            let want: Value = serde_json::from_str(&stdout(&o)).unwrap();
            assert_eq!(m["producer"], want["producer"]);
            assert_eq!(m["ir_version"], want["ir_version"]);
            assert_eq!(m["opsets"], want["opsets"]);
            assert!(m["producer"].as_str().unwrap().starts_with("pytorch"));
        }
        None => skip(
            "the card's provenance against onnx",
            "SLMCC_PYTHON is not set",
        ),
    }
    assert_eq!(m["licence"], Value::Null);

    // Placement: the NPU nodes are the products the package holds
    // programs for; memory: each bucket's plan.
    let p = Package::open(&pkg).unwrap();
    let module = p.module().unwrap();
    let placement = card["placement"].as_array().unwrap();
    let buckets = card["buckets"].as_array().unwrap();
    assert_eq!(placement.len(), p.manifest.buckets.len());
    for ((entry, place), bucket) in p.manifest.buckets.iter().zip(placement).zip(buckets) {
        assert_eq!(place["graph"], entry.graph.as_str());
        let npu = place["npu_nodes"].as_array().unwrap();
        assert!(!npu.is_empty());
        assert_eq!(npu.len(), entry.npu.len(), "@{}", entry.graph);
        let g = module.graph(&entry.graph).unwrap();
        for (name, program) in npu.iter().zip(&entry.npu) {
            let node = &g.nodes[program.node as usize];
            assert_eq!(
                name.as_str().unwrap(),
                format!("%{}", g.value(node.outputs[0]).name)
            );
        }
        let plan = &module.plans[&entry.graph];
        for r in Region::ALL {
            assert_eq!(
                bucket["memory_bytes"][r.name()],
                plan.regions.get(r),
                "{}",
                r.name()
            );
        }
        assert_eq!(bucket["tokens"], entry.size);
    }
    assert_eq!(buckets[0]["kind"], "decode");
    assert!(buckets[0]["memory_bytes"]["kv_cache"].as_u64().unwrap() > 0);

    // Every latency is marked as an estimate.
    let e = &card["estimates"];
    assert_eq!(e["estimate"], true);
    assert!(e["basis"].as_str().unwrap().contains("not a measurement"));
    assert_eq!(e["buckets"].as_array().unwrap().len(), 3);
    assert!(e["decode"]["tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(card["quality"]["measured"], false);
    let o = slmcc(&["report", s(&pkg), "--card"]);
    ok(&o);
    let md = stdout(&o);
    assert!(md.starts_with("# Model card: qwen2.onnx"), "{md}");
    assert!(md.contains("## Estimates (not measurements)"), "{md}");
    assert!(md.contains("latency ms (estimate)"), "{md}");
    assert!(md.contains("Not measured"), "{md}");

    // --card on a model, not a package.
    let o = slmcc(&["report", s(&model), "--card"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--card prints the model card"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The licence a model's metadata states (written here by the onnx
/// package) is copied into the card.
#[test]
fn the_card_copies_the_licence_from_the_metadata() {
    let Some(py) = python() else {
        skip("the card's licence", "SLMCC_PYTHON is not set");
        return;
    };
    let dir = scratch_dir("card-licence");
    let model = dir.join("llama.onnx");
    let o = Command::new(py)
        .args([
            "-c",
            "import sys, onnx\n\
            m = onnx.load(sys.argv[1])\n\
            onnx.helper.set_model_props(m, {'license': 'apache-2.0', 'origin': 'test'})\n\
            onnx.save(m, sys.argv[2])",
        ])
        .arg(repo().join("testdata/models/llama.onnx"))
        .arg(&model)
        .output()
        .unwrap();
    ok(&o);
    let pkg = dir.join("llama.slmpkg");
    ok(&slmcc(&[
        "compile",
        s(&model),
        "--target",
        "cpu",
        "--buckets",
        "8",
        "-o",
        s(&pkg),
    ]));
    let card = card_of(&pkg);
    assert_eq!(card["model"]["licence"]["value"], "apache-2.0");
    assert_eq!(card["model"]["licence"]["from"], "metadata_props[license]");
    assert_eq!(card["model"]["metadata"]["origin"], "test");
    assert!(card["estimates"]["none"].is_string());
    let md = stdout(&slmcc(&["report", s(&pkg), "--card", "md"]));
    assert!(
        md.contains("| licence | apache-2.0 (from metadata_props[license]) |"),
        "{md}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `compile --eval` records the perplexity of the model quantized as the
/// package is and of the float model: the numbers `slmcc eval ppl` prints.
#[test]
fn eval_records_the_perplexities_eval_ppl_measures() {
    let dir = scratch_dir("card-eval");
    let t = repo().join("testdata/models/trained");
    let (model, text, tok) = (
        t.join("llama_trained.onnx"),
        t.join("heldout.txt"),
        t.join("tokenizer.json"),
    );
    let pkg = dir.join("trained.slmpkg");
    ok(&slmcc(&[
        "compile",
        s(&model),
        "--target",
        "cpu",
        "--quant",
        "w8a8",
        "--buckets",
        "64",
        "--eval",
        s(&text),
        "--eval-tokenizer",
        s(&tok),
        "--eval-max-tokens",
        "1024",
        "-o",
        s(&pkg),
    ]));
    let q = &card_of(&pkg)["quality"];
    assert_eq!(q["measured"], true);
    assert_eq!(q["data"]["tokens"], 1024);
    let results = q["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, quant) in results.iter().zip([&["--quant", "w8a8"][..], &[]]) {
        let mut args = vec![
            "eval",
            "ppl",
            s(&model),
            "--text",
            s(&text),
            "--tokenizer",
            s(&tok),
            "--max-tokens",
            "1024",
        ];
        args.extend_from_slice(quant);
        let o = slmcc(&args);
        ok(&o);
        let printed: f64 = stdout(&o)
            .strip_prefix("perplexity ")
            .and_then(|r| r.split_whitespace().next())
            .unwrap()
            .parse()
            .unwrap();
        let recorded = r["perplexity"].as_f64().unwrap();
        assert!((recorded - printed).abs() < 1e-3, "{recorded} vs {printed}");
        assert_eq!(r["tokens_scored"], 1024 - 8);
    }
    // A bad --eval file writes nothing.
    let never = dir.join("never.slmpkg");
    let o = slmcc(&[
        "compile",
        s(&model),
        "--target",
        "cpu",
        "--eval",
        s(&text),
        "-o",
        s(&never),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--eval-tokenizer"), "{}", stderr(&o));
    assert!(!never.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
