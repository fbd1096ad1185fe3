//! ONNX backend conformance: runs `slmcc onnx-test` on the node tests listed
//! in `testdata/onnx_conformance/manifest.txt`, and on those of opsets 22-24
//! in `manifest-opset22-24.txt`. The tests are generated from the pinned
//! `onnx` packages by `scripts/test` (which sets `SLMCC_ONNX_NODE_TESTS`
//! and, for the newer onnx, `SLMCC_ONNX_NODE_TESTS_NEW`); every listed test
//! must pass, on the reference evaluation, the cpu backend and the npu-sim
//! backend.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{repo, skip};

/// The node tests generated into `$var`, or `None` after a [`skip`] when
/// it is unset.
fn node_tests(var: &str, what: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(var).map(PathBuf::from);
    if dir.is_none() {
        skip(
            what,
            &format!("{var} is not set (scripts/test generates the node tests and sets it)"),
        );
    }
    dir
}

/// The opset-13-to-21 list: at least 250 tests.
const MANIFEST: (&str, &str, usize) = ("SLMCC_ONNX_NODE_TESTS", "manifest.txt", 250);
/// The opset-22-to-24 list (a newer onnx): at least 140 tests.
const MANIFEST_NEW: (&str, &str, usize) =
    ("SLMCC_ONNX_NODE_TESTS_NEW", "manifest-opset22-24.txt", 140);

/// Runs a manifest's node tests on `backend`; asserts that every one
/// passes and that the manifest covers at least its minimum of tests.
fn manifest_passes_on((var, file, minimum): (&str, &str, usize), backend: &str) {
    let Some(dir) = node_tests(var, &format!("ONNX conformance ({file}) on {backend}")) else {
        return;
    };
    let manifest = repo().join("testdata/onnx_conformance").join(file);
    let out = Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(["onnx-test", "--backend", backend, "--manifest"])
        .arg(&manifest)
        .arg(&dir)
        .output()
        .expect("run slmcc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failures: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    let summary = stdout.lines().last().unwrap_or("");
    eprintln!("ONNX conformance ({file}, {backend}): {summary}");
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
        passed >= minimum,
        "{file} must cover at least {minimum} node tests, {passed} ran"
    );
}

#[test]
fn manifest_node_tests_pass_on_reference() {
    manifest_passes_on(MANIFEST, "reference");
}

/// The same list on the Cranelift CPU backend (JIT): every test passes,
/// none is left unsupported.
#[test]
fn manifest_node_tests_pass_on_cpu() {
    manifest_passes_on(MANIFEST, "cpu");
}

/// The same list on `npu-sim`: each graph lowered for the RK3588 (the
/// register interface takes only W8A8 products, which these graphs lack,
/// so every node runs on the CPU kernels behind the NPU kernel set).
#[test]
fn manifest_node_tests_pass_on_npu_sim() {
    manifest_passes_on(MANIFEST, "npu-sim");
}

/// The node tests of opsets 22-24 (opset 23's `Attention`,
/// `RMSNormalization` and `RotaryEmbedding` and their function bodies,
/// opset 24's `Swish`, the activations of opset 22) on every backend.
#[test]
fn opset_22_to_24_node_tests_pass_on_reference() {
    manifest_passes_on(MANIFEST_NEW, "reference");
}

#[test]
fn opset_22_to_24_node_tests_pass_on_cpu() {
    manifest_passes_on(MANIFEST_NEW, "cpu");
}

#[test]
fn opset_22_to_24_node_tests_pass_on_npu_sim() {
    manifest_passes_on(MANIFEST_NEW, "npu-sim");
}
