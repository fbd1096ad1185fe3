//! Golden-tensor checks: every model under `goldens/` runs on each backend
//! and every recorded layer matches onnxruntime within the manifest's
//! tolerance for that backend.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{repo, skip};

fn golden_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("goldens"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// The model a manifest names, if it is not on disk.
fn missing_model(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let j: serde_json::Value = serde_json::from_str(&text).unwrap();
    let model = j["model"].as_str().unwrap().to_string();
    (!dir.join(&model).exists() && !repo().join(&model).exists()).then_some(model)
}

/// Runs `slmcc golden check --backend BACKEND` on every golden folder.
/// Models assembled on demand (MiniLM) are skipped when absent (a failure
/// under `SLMCC_REQUIRE_ALL`, as in CI).
fn check_all(backend: &str) {
    check_all_with(backend, &[]);
}

/// [`check_all`] with more arguments (`--quant w8a8`).
fn check_all_with(backend: &str, extra: &[&str]) {
    let dirs = golden_dirs();
    assert!(
        dirs.len() >= 4,
        "expected goldens for the testdata models, found {dirs:?}"
    );
    for dir in dirs {
        if let Some(missing) = missing_model(&dir) {
            skip(
                &format!("golden check {} on {backend}", dir.display()),
                &format!("model {missing} is absent (scripts/test assembles it)"),
            );
            continue;
        }
        let out = Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .current_dir(repo())
            .args(["golden", "check", "--backend", backend])
            .args(extra)
            .arg(&dir)
            .output()
            .expect("run slmcc");
        let stdout = String::from_utf8_lossy(&out.stdout);
        eprintln!("{stdout}");
        assert!(
            out.status.success() && stdout.contains("layers within tolerance"),
            "{} on {backend} {extra:?}: {stdout}\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The reference backend runs the fusion pipeline, so this also checks the
/// fused graphs against onnxruntime.
#[test]
fn every_golden_model_matches_on_reference() {
    check_all("reference");
}

/// Every golden model also runs end to end on the Cranelift CPU backend
/// (JIT) within the manifests' `cpu` tolerance.
#[test]
fn every_golden_model_matches_on_cpu() {
    check_all("cpu");
}

/// Quantized (INT8 weights, INT8 activations per token) on the CPU backend,
/// against the FP32 goldens within the manifests' `w8a8` tolerance.
#[test]
fn every_golden_model_quantized_w8a8_stays_within_tolerance_on_cpu() {
    check_all_with("cpu", &["--quant", "w8a8"]);
}

/// The same with INT4 weights (default group 128, narrowed per weight).
#[test]
fn every_golden_model_quantized_w4a8_stays_within_tolerance_on_cpu() {
    check_all_with("cpu", &["--quant", "w4a8"]);
}

/// Quantized with the W8A8 products on the register interface's
/// functional model (the rest, 4-bit products included, on the cpu
/// backend): the same tolerances, since those tasks are bit-exact; and
/// unquantized, where everything runs on the cpu kernels, with cpu's.
#[test]
fn every_golden_model_stays_within_tolerance_on_npu_sim() {
    check_all_with("npu-sim", &["--quant", "w8a8"]);
    check_all_with("npu-sim", &["--quant", "w4a8"]);
    check_all_with("npu-sim", &[]);
}

/// A copy of the qwen2 goldens whose input is a `.pb` TensorProto passes;
/// a `model_sha256` that names another model, an unknown value name, an
/// input of the wrong dtype or shape and a folder without a manifest are
/// refused with exit 2, naming what is wrong.
#[test]
fn golden_check_reads_pb_inputs_and_refuses_bad_folders() {
    let dir = std::env::temp_dir().join(format!("slmcc-goldens-pb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("seq5")).unwrap();
    let src = repo().join("goldens/qwen2");
    for entry in std::fs::read_dir(src.join("seq5")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join("seq5").join(p.file_name().unwrap())).unwrap();
    }
    // input_ids [1, 5] i64 as an ONNX TensorProto: dims 1 and 5 (field 1,
    // varints), data_type INT64 = 7 (field 2), name (field 8), raw_data
    // (field 9).
    let ids = slmcc_runtime::npy::read(&src.join("seq5/input_ids.npy")).unwrap();
    let raw: Vec<u8> = ids
        .to_i64_vec()
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut pb = vec![0x08, 1, 0x08, 5, 0x10, 7, 0x42, 9];
    pb.extend_from_slice(b"input_ids");
    pb.push(0x4a);
    pb.push(raw.len() as u8);
    pb.extend_from_slice(&raw);
    std::fs::write(dir.join("seq5/input_ids.pb"), pb).unwrap();
    let text = std::fs::read_to_string(src.join("manifest.json")).unwrap();
    let mut j: serde_json::Value = serde_json::from_str(&text).unwrap();
    j["model"] = serde_json::Value::String(
        repo()
            .join("testdata/models/qwen2.onnx")
            .display()
            .to_string(),
    );
    let cases = j["cases"].as_array_mut().unwrap();
    cases.retain(|c| c["name"] == "seq5");
    cases[0]["inputs"]["input_ids"] = serde_json::Value::String("seq5/input_ids.pb".into());
    let check = |j: &serde_json::Value| {
        std::fs::write(dir.join("manifest.json"), j.to_string()).unwrap();
        Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .args(["golden", "check", "--backend", "cpu"])
            .arg(&dir)
            .output()
            .unwrap()
    };
    let o = check(&j);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("all 5 layers within tolerance"), "{out}");
    let good = j.clone();
    j["model_sha256"] = serde_json::Value::String("00".repeat(32));
    let o = check(&j);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("but the goldens were recorded from 0000"),
        "{err}"
    );
    // Bad inputs and names: exit 2, naming what is wrong.
    let refused = |j: &serde_json::Value, want: &str| {
        let o = check(j);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{want}: {err}");
        assert!(err.contains(want), "want `{want}`: {err}");
    };
    let mut j = good.clone();
    j["cases"][0]["layers"][0]["value"] = "no_such_value".into();
    refused(
        &j,
        "case seq5, layer `model.embed_tokens`: value `no_such_value` is not computed by the graph",
    );
    let ids = slmcc_runtime::npy::read(&src.join("seq5/input_ids.npy")).unwrap();
    let as_f32 = slmcc_ir::Tensor::from_f32(ids.shape().to_vec(), vec![1.0; ids.len()]);
    slmcc_runtime::npy::write(&dir.join("seq5/f32.npy"), &as_f32).unwrap();
    let flat = slmcc_ir::Tensor::from_i64(vec![ids.len()], ids.to_i64_vec());
    slmcc_runtime::npy::write(&dir.join("seq5/flat.npy"), &flat).unwrap();
    for (file, want) in [
        (
            "f32.npy",
            "input `input_ids` is f32[1, 5], the graph expects i64[1, seq]",
        ),
        (
            "flat.npy",
            "input `input_ids` has shape [5], the graph expects [1, seq]",
        ),
    ] {
        let mut j = good.clone();
        j["cases"][0]["inputs"]["input_ids"] = format!("seq5/{file}").into();
        refused(&j, want);
    }
    std::fs::remove_file(dir.join("manifest.json")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(["golden", "check"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("manifest.json: No such file"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `golden record` on a model outside `goldens/`: every value of the fused
/// graph from onnxruntime, which `golden check` then matches on every
/// backend; bad requests exit 2 and leave nothing.
#[test]
fn golden_record_records_every_value_that_check_then_matches() {
    let dir = std::env::temp_dir().join(format!("slmcc-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("qwen2");
    let slmcc = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .current_dir(repo())
            .args(args)
            .output()
            .unwrap()
    };
    let input = "input_ids=goldens/qwen2/seq11/input_ids.npy";
    let record = |out: &Path, input: &str| {
        slmcc(&[
            "golden",
            "record",
            "testdata/models/qwen2.onnx",
            "-o",
            out.to_str().unwrap(),
            "--input",
            input,
        ])
    };
    let o = record(&out, input);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let layers = manifest["cases"][0]["layers"].as_array().unwrap();
    // The block-level goldens hold 5 layers; every value is ten times that.
    assert!(layers.len() > 40, "{} layers", layers.len());
    assert!(manifest["source"]
        .as_str()
        .unwrap()
        .starts_with("onnxruntime "));
    for backend in ["reference", "cpu", "npu-sim"] {
        let o = slmcc(&[
            "golden",
            "check",
            out.to_str().unwrap(),
            "--backend",
            backend,
        ]);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{backend}: {stdout}");
        assert!(
            stdout.contains(&format!("all {} layers within tolerance", layers.len())),
            "{backend}: {stdout}"
        );
    }
    // Bad requests: nothing is written.
    let again = record(&out, input);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists and is not an empty folder"));
    let fresh = dir.join("never");
    let o = record(&fresh, "ids=goldens/qwen2/seq11/input_ids.npy");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("`ids` is not an input of the model (its inputs: input_ids)"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let no_python = Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .current_dir(repo())
        .args(["golden", "record", "testdata/models/qwen2.onnx", "-o"])
        .arg(&fresh)
        .args(["--input", input, "--python", "/bin/false"])
        .output()
        .unwrap();
    assert_eq!(no_python.status.code(), Some(2));
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["qwen2"], "a failed record leaves nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--quant-tolerances` measures the quantized runs against the FP32
/// values it records and writes their tolerances, which `golden check
/// --quant` then reads and passes.
#[test]
fn golden_record_measures_quantized_tolerances() {
    let dir = common::scratch_dir("record-quant");
    let out = dir.join("qwen2");
    let o = common::slmcc(&[
        "golden",
        "record",
        "testdata/models/qwen2.onnx",
        "-o",
        out.to_str().unwrap(),
        "--input",
        "input_ids=goldens/qwen2/seq5/input_ids.npy",
        "--quant-tolerances",
        "w8a8,w4a8",
    ]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    for (scheme, at_most) in [("w8a8", 0.1), ("w4a8", 1.0)] {
        let t = &manifest["tolerances"][scheme];
        let max_rel = t["max_rel"].as_f64().unwrap();
        // A measured error with margin: above zero, below what would let
        // anything through.
        assert!(max_rel > 0.0 && max_rel < at_most, "{scheme}: {t}");
        assert!(t["min_cosine"].as_f64().unwrap() > 0.5, "{scheme}: {t}");
        let o = common::slmcc(&[
            "golden",
            "check",
            out.to_str().unwrap(),
            "--backend",
            "cpu",
            "--quant",
            scheme,
        ]);
        assert!(o.status.success(), "{scheme}: {}", common::stdout(&o));
    }
    let o = common::slmcc(&[
        "golden",
        "record",
        "testdata/models/qwen2.onnx",
        "-o",
        dir.join("never").to_str().unwrap(),
        "--self",
        "--quant-tolerances",
        "w8a8",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The CI recipe of docs/GOLDENS.md, as a user's CI runs it
/// (docs/examples/goldens-ci.sh): record once, then check.
#[test]
fn the_documented_ci_recipe_records_and_checks() {
    let dir = std::env::temp_dir().join(format!("slmcc-recipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let script = repo().join("docs/examples/goldens-ci.sh");
    let run = |args: &[&str]| {
        Command::new("bash")
            .arg(&script)
            .args(args)
            .current_dir(repo())
            .env("SLMCC", env!("CARGO_BIN_EXE_slmcc"))
            .output()
            .unwrap()
    };
    let out = dir.to_str().unwrap();
    let o = run(&[
        "record",
        "testdata/models/qwen2.onnx",
        "input_ids=goldens/qwen2/seq5/input_ids.npy",
        out,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["check", out]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        stdout.matches("layers within tolerance").count(),
        4,
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A package is checked as compiled: its bucket graphs run on inputs padded
/// into a bucket (never re-fused or re-planned), every recorded layer cut
/// back to the real length; its own quantization picks the tolerance.
#[test]
fn packages_are_checked_as_compiled() {
    let dir = std::env::temp_dir().join(format!("slmcc-goldens-pkg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = repo().join("goldens/qwen2");
    let text = std::fs::read_to_string(src.join("manifest.json")).unwrap();
    let slmcc = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .args(args)
            .current_dir(repo())
            .output()
            .unwrap()
    };
    for (target, backends) in [
        ("cpu", &["reference", "cpu"][..]),
        ("rk3588", &["npu-sim"][..]),
    ] {
        let folder = dir.join(target);
        for case in ["seq5", "seq11"] {
            std::fs::create_dir_all(folder.join(case)).unwrap();
            for entry in std::fs::read_dir(src.join(case)).unwrap() {
                let p = entry.unwrap().path();
                std::fs::copy(&p, folder.join(case).join(p.file_name().unwrap())).unwrap();
            }
        }
        let pkg = folder.join("qwen2.slmpkg");
        let o = slmcc(&[
            "compile",
            "testdata/models/qwen2.onnx",
            "--target",
            target,
            "--buckets",
            "16",
            "-o",
            pkg.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut j: serde_json::Value = serde_json::from_str(&text).unwrap();
        j["model"] = "qwen2.slmpkg".into();
        let hash = slmcc_runtime::package::sha256_file(&pkg).unwrap();
        j["model_sha256"] = slmcc_runtime::package::hex(&hash).into();
        std::fs::write(folder.join("manifest.json"), j.to_string()).unwrap();
        for backend in backends {
            let o = slmcc(&[
                "golden",
                "check",
                folder.to_str().unwrap(),
                "--backend",
                backend,
            ]);
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{target} on {backend}: {out}{}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(out.contains("all 10 layers within tolerance"), "{out}");
            // The rk3588 package is W8A8: its tolerance is the manifest's w8a8.
            let tolerance = if target == "rk3588" {
                "max_rel 5.3e-2"
            } else {
                "max_rel 1e-5"
            };
            assert!(out.contains(tolerance), "{target}: {out}");
        }
        let o = slmcc(&[
            "golden",
            "check",
            folder.to_str().unwrap(),
            "--quant",
            "w8a8",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("a package is checked as it was compiled"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A signed, encrypted package is checked with its keys: `--decrypt` for
/// its weights, `--trust` for its signer; without the weights key it is
/// refused, as `run` refuses it.
#[test]
fn an_encrypted_signed_package_is_checked_with_its_keys() {
    let dir = std::env::temp_dir().join(format!("slmcc-goldens-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let src = repo().join("goldens/qwen2");
    std::fs::create_dir_all(dir.join("seq5")).unwrap();
    for entry in std::fs::read_dir(src.join("seq5")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join("seq5").join(p.file_name().unwrap())).unwrap();
    }
    let (signing, trusted) = common::keygen_in(&dir, "signer");
    let (_, stranger) = common::keygen_in(&dir, "stranger");
    let weights_key = dir.join("weights.key");
    std::fs::write(&weights_key, "ab".repeat(32)).unwrap();
    let slmcc = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .args(args)
            .current_dir(repo())
            .output()
            .unwrap()
    };
    let pkg = dir.join("qwen2.slmpkg");
    let p = |p: &Path| p.to_str().unwrap().to_string();
    let o = slmcc(&[
        "compile",
        "testdata/models/qwen2.onnx",
        "--target",
        "cpu",
        "--buckets",
        "16",
        "--sign",
        &p(&signing),
        "--encrypt",
        &p(&weights_key),
        "-o",
        &p(&pkg),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(src.join("manifest.json")).unwrap();
    let mut j: serde_json::Value = serde_json::from_str(&text).unwrap();
    j["model"] = "qwen2.slmpkg".into();
    j["model_sha256"] =
        slmcc_runtime::package::hex(&slmcc_runtime::package::sha256_file(&pkg).unwrap()).into();
    j["cases"]
        .as_array_mut()
        .unwrap()
        .retain(|c| c["name"] == "seq5");
    std::fs::write(dir.join("manifest.json"), j.to_string()).unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec!["golden".to_string(), "check".to_string(), p(&dir)];
        args.extend(extra.iter().map(|s| s.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        slmcc(&args)
    };
    let o = check(&["--decrypt", &p(&weights_key), "--trust", &p(&trusted)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("all 5 layers within tolerance"), "{out}");
    let stranger_args = [
        "--decrypt".to_string(),
        p(&weights_key),
        "--trust".to_string(),
        p(&stranger),
    ];
    for (extra, reason) in [
        (&[][..], "give the key with --decrypt"),
        (&stranger_args[..], "not by the trusted key"),
    ] {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let o = check(&extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(reason), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
