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
