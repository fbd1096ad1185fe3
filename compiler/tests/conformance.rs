//! ONNX backend conformance: runs `slmcc onnx-test` on the node tests listed
//! in `testdata/onnx_conformance/manifest.txt`. The tests are generated from
//! the pinned `onnx` package by `scripts/test` (which sets
//! `SLMCC_ONNX_NODE_TESTS`); every listed test must pass, on the
//! reference evaluation, the cpu backend and the npu-sim backend.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{repo, skip};

/// The generated node tests, or `None` after a [`skip`] when they are
/// absent.
fn node_tests(what: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("SLMCC_ONNX_NODE_TESTS").map(PathBuf::from);
    if dir.is_none() {
        skip(
            what,
            "SLMCC_ONNX_NODE_TESTS is not set (scripts/test generates the node tests and sets it)",
        );
    }
    dir
}

/// Runs the manifest's node tests on `backend`; asserts that every one
/// passes and that the manifest covers at least 250 tests.
fn manifest_passes_on(backend: &str) {
    let Some(dir) = node_tests(&format!("ONNX conformance on {backend}")) else {
        return;
    };
    let manifest = repo().join("testdata/onnx_conformance/manifest.txt");
    let out = Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(["onnx-test", "--backend", backend, "--manifest"])
        .arg(&manifest)
        .arg(&dir)
        .output()
        .expect("run slmcc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failures: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    let summary = stdout.lines().last().unwrap_or("");
    eprintln!("ONNX conformance ({backend}): {summary}");
    assert!(
        out.status.success() && failures.is_empty(),
        "{summary}\n{}\n{}",
        failures.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    let passed: usize = summary
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        passed >= 250,
        "the manifest must cover at least 250 node tests, {passed} ran"
    );
}

#[test]
fn manifest_node_tests_pass_on_reference() {
    manifest_passes_on("reference");
}

/// The same list on the Cranelift CPU backend (JIT): every test passes,
/// none is left unsupported.
#[test]
fn manifest_node_tests_pass_on_cpu() {
    manifest_passes_on("cpu");
}

/// The same list on `npu-sim`: each graph lowered for the RK3588 (the
/// register interface takes only W8A8 products, which these graphs lack,
/// so every node runs on the CPU kernels behind the NPU kernel set).
#[test]
fn manifest_node_tests_pass_on_npu_sim() {
    manifest_passes_on("npu-sim");
}
