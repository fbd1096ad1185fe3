//! onnxruntime's contrib ops that exports carry: runs `slmcc onnx-test` on
//! the node tests in `testdata/contrib/node_tests`, made by
//! `testdata/contrib/generate.py` with onnxruntime's outputs as the expected
//! ones, on every backend; every test of `testdata/contrib/manifest.txt`
//! must pass.

mod common;

use std::process::Command;

use common::repo;

fn manifest_passes_on(backend: &str) {
    let dir = repo().join("testdata/contrib");
    let manifest = dir.join("manifest.txt");
    let listed = std::fs::read_to_string(&manifest)
        .expect("read the manifest")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    let out = Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(["onnx-test", "--backend", backend, "--manifest"])
        .arg(&manifest)
        .arg(dir.join("node_tests"))
        .output()
        .expect("run slmcc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        out.status.success() && summary == format!("{listed} passed, 0 failed"),
        "{backend}: {summary}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn contrib_node_tests_pass_on_reference() {
    manifest_passes_on("reference");
}

#[test]
fn contrib_node_tests_pass_on_cpu() {
    manifest_passes_on("cpu");
}

#[test]
fn contrib_node_tests_pass_on_npu_sim() {
    manifest_passes_on("npu-sim");
}
