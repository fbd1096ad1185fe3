//! `slmcc import` end to end: the malformed models of `testdata/malformed/`
//! (made by `make_onnx.py` there) are rejected with exit code 2 and one line
//! naming the file, node and reason, leaving no output behind; valid models
//! (external data, the exported test models) import, verify, write their
//! weights beside the IR and go through `slmcc opt`.

mod common;

use std::path::{Path, PathBuf};

use common::{repo, slmcc, stderr, stdout};

/// A fresh empty folder for outputs.
fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slmcc-import-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Imports `model` with `-o` into a fresh folder and checks the failure:
/// exit code 2, one line `error: <model>: <want>`, nothing written.
fn expect_rejected(model: &str, want: &str) {
    let dir = out_dir(Path::new(model).file_stem().unwrap().to_str().unwrap());
    let out = dir.join("out.slm");
    let o = slmcc(&["import", model, "-o", out.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{model}: {err}");
    assert_eq!(err, format!("error: {model}: {want}\n"), "{model}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(stdout(&o).is_empty());
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "{model} left {left:?} behind");
}

const M: &str = "testdata/malformed";

#[test]
fn truncated_model() {
    expect_rejected(
        &format!("{M}/truncated.onnx"),
        "not a valid ONNX model: Unexpected EOF",
    );
}

#[test]
fn missing_external_data() {
    expect_rejected(
        &format!("{M}/missing_external_data.onnx"),
        &format!("initializer `w`: external data file `{M}/missing_weights.bin` does not exist"),
    );
}

#[test]
fn external_data_escaping_the_model_folder() {
    expect_rejected(
        &format!("{M}/external_data_escape.onnx"),
        "initializer `w`: external data location `../../etc/passwd` escapes the model's folder",
    );
}

#[test]
fn initializer_size_mismatch() {
    expect_rejected(
        &format!("{M}/initializer_size_mismatch.onnx"),
        "initializer `w`: raw_data has 8 bytes, but dims [4, 4] of f32 need 64",
    );
}

#[test]
fn cycle() {
    expect_rejected(
        &format!("{M}/cycle.onnx"),
        "node `add_a` (Add, opset 17): uses `b` before it is defined \
         (graph not topologically sorted or has a cycle)",
    );
}

#[test]
fn unknown_op() {
    expect_rejected(
        &format!("{M}/unknown_op.onnx"),
        "node `frob` (Frobnicate, opset 17): op `Frobnicate` is not supported",
    );
}

#[test]
fn bad_opset() {
    expect_rejected(
        &format!("{M}/bad_opset.onnx"),
        "default-domain opset 7 is not supported (supported: 13 to 24)",
    );
}

#[test]
fn folder_instead_of_model() {
    expect_rejected(M, "is a folder, not an ONNX model file");
}

#[test]
fn missing_model_file() {
    expect_rejected(
        &format!("{M}/no_such_model.onnx"),
        "cannot read the file: No such file or directory (os error 2)",
    );
}

#[test]
fn external_data_imports_and_writes_weights_beside_the_ir() {
    let o = slmcc(&["import", &format!("{M}/external_data.onnx")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("module @external_data {\n"), "{text}");
    assert!(text.contains("weight @w : f32[4, 4]"), "{text}");
    assert!(
        text.contains("%y = matmul %x, @w : f32[1, seq, 4]"),
        "{text}"
    );

    let dir = out_dir("external-ok");
    let out = dir.join("m.slm");
    let o = slmcc(&[
        "import",
        &format!("{M}/external_data.onnx"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(
        written.starts_with("module @external_data weights \"m.safetensors\" {"),
        "{written}"
    );
    let store = slmcc_ir::WeightStore::open(&dir.join("m.safetensors")).unwrap();
    let w = store.tensor("w").unwrap().unwrap();
    let want: Vec<f32> = (0..16).map(|v| v as f32 / 8.0).collect();
    assert_eq!(w.as_f32().unwrap(), &want[..]);
    // Only the two outputs, no temporary files.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
}

/// The models the exporter script writes: each imports, verifies, and goes
/// through the shape pipeline with `seq` left symbolic.
#[test]
fn exported_models_import_and_optimize() {
    let models = repo().join("testdata/models");
    let mut found = 0;
    for name in ["llama", "qwen2", "phi3", "gpt2"] {
        let model = models.join(format!("{name}.onnx"));
        if !model.exists() {
            continue;
        }
        found += 1;
        let dir = out_dir(&format!("model-{name}"));
        let out = dir.join(format!("{name}.slm"));
        let o = slmcc(&[
            "import",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert!(dir.join(format!("{name}.safetensors")).exists());
        let o = slmcc(&[
            "opt",
            out.to_str().unwrap(),
            "--passes",
            "shape-infer,const-fold,dce,cse",
            "--verify-each",
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(
            text.contains("graph @main(%input_ids: i64[1, seq]) -> (f32[1, seq, 512])"),
            "{name}: {text}"
        );
    }
    assert!(found > 0, "no exported models in {}", models.display());
}
