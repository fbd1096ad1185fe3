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

/// A `MatMulNBits` model's cpu package keeps the weights in 4 bits: about
/// the size of the ONNX file (`B` and its scales), not a widened copy, nor
/// `B` beside the imported weight.
#[test]
fn matmul_nbits_packages_stay_four_bit() {
    let model = repo().join(
        "testdata/contrib/node_tests/test_matmul_nbits_4bit_k512_n256_block32_level0/model.onnx",
    );
    let dir = std::env::temp_dir().join(format!("slmcc-contrib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pkg = dir.join("nbits.slmpkg");
    let out = Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(["compile", "--target", "cpu", "--buckets", "4", "-o"])
        .arg(&pkg)
        .arg(&model)
        .output()
        .expect("run slmcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (onnx, package) = (
        std::fs::metadata(&model).unwrap().len() as f64,
        std::fs::metadata(&pkg).unwrap().len() as f64,
    );
    let _ = std::fs::remove_dir_all(&dir);
    // 64 KiB of nibbles and 16 KiB of scales; the package adds its
    // manifest and code.
    assert!(
        package < 1.15 * onnx,
        "package {package} bytes, the ONNX model {onnx} bytes"
    );
}
