//! Changes to the kernels' code (`SLMCC_KERNEL_MUTANT`,
//! backends/src/mutant.rs, and `SLMCC_KERNEL_FAULT=swap-rows:qmatmul`,
//! runtime/src/kernel_fault.rs; the `fault-injection` feature), each a
//! regression the checks must catch on the backend it affects:
//! - FP32 goldens catch a cpu kernel's change, and goldens of every value
//!   name the op that first diverges;
//! - self-goldens (bit for bit) catch a change in a quantized or NPU path
//!   that the FP32 goldens' tolerance lets through;
//! - a package compiled before a kernel change is refused by the changed
//!   binary (its kernel fingerprints), unless told to run anyway.
#![cfg(feature = "fault-injection")]

mod common;

use std::path::Path;
use std::process::Output;

use common::{first_divergence, refused, s, scratch_dir, slmcc_env, stderr, stdout};

const INPUT: &str = "input_ids=goldens/qwen2/seq5/input_ids.npy";

/// `golden record` of qwen2 into `dir` with `flags` (none: onnxruntime's
/// FP32 values; `--self ...`: ours).
fn record(dir: &Path, flags: &[&str]) {
    let mut args = vec![
        "golden",
        "record",
        "testdata/models/qwen2.onnx",
        "-o",
        s(dir),
        "--input",
        INPUT,
    ];
    args.extend(flags);
    let o = slmcc_env(&[], &args);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `slmcc compile` of qwen2 for `target` into `pkg`, bucket 16 (clean
/// kernels: no mutant).
fn compile_qwen2(pkg: &Path, target: &str) {
    let args = [
        "compile",
        "testdata/models/qwen2.onnx",
        "--target",
        target,
        "--buckets",
        "16",
        "-o",
        s(pkg),
    ];
    let o = slmcc_env(&[], &args);
    assert!(o.status.success(), "{}", stderr(&o));
}

fn check(env: &[(&str, &str)], dir: &str, flags: &[&str]) -> Output {
    let mut args = vec!["golden", "check", dir];
    args.extend(flags);
    slmcc_env(env, &args)
}

#[test]
fn fp32_goldens_name_the_op_a_cpu_kernel_mutant_changes() {
    let dir = scratch_dir("mutants-fp32");
    let every = dir.join("every");
    record(&every, &[]);
    let cpu = ["--backend", "cpu"];
    assert!(check(&[], s(&every), &cpu).status.success());
    for (mutant, op) in [
        ("rms-norm-eps", "rms_norm"),
        ("exp-coefficient", "attention"),
    ] {
        let env = [("SLMCC_KERNEL_MUTANT", mutant)];
        // The block goldens fail at the first block...
        let line = first_divergence(&check(&env, "goldens/qwen2", &cpu), mutant);
        assert!(line.contains("layer `model.layers.0`"), "{mutant}: {line}");
        // ...and the goldens of every value at the op.
        let line = first_divergence(&check(&env, s(&every), &cpu), mutant);
        assert!(
            line.contains(&format!("produced by `{op}` node")),
            "{mutant}: {line}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn self_goldens_catch_the_npu_rounding_mutant_that_fp32_goldens_let_through() {
    let dir = scratch_dir("mutants-npu");
    let flags = ["--backend", "npu-sim", "--quant", "w8a8"];
    let mut self_flags = vec!["--self"];
    self_flags.extend(flags);
    record(&dir, &self_flags);
    assert!(check(&[], s(&dir), &flags).status.success());
    let env = [("SLMCC_KERNEL_MUTANT", "npu-rounding")];
    let o = check(&env, "goldens/qwen2", &flags);
    assert!(o.status.success(), "{}", stdout(&o));
    let line = first_divergence(&check(&env, s(&dir), &flags), "npu-rounding");
    assert!(line.contains("produced by `qmatmul` node"), "{line}");
    assert!(line.contains("(tolerance 0e0)"), "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn self_goldens_catch_swapped_qmatmul_rows_on_both_quantized_paths() {
    let root = scratch_dir("mutants-swap");
    for backend in ["cpu", "npu-sim"] {
        let dir = root.join(backend);
        let flags = ["--backend", backend, "--quant", "w8a8"];
        let mut self_flags = vec!["--self"];
        self_flags.extend(flags);
        record(&dir, &self_flags);
        let env = [("SLMCC_KERNEL_FAULT", "swap-rows:qmatmul")];
        let line = first_divergence(&check(&env, s(&dir), &flags), backend);
        assert!(
            line.contains("produced by `qmatmul` node"),
            "{backend}: {line}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// A W8A8 rk3588 package's self-goldens, recorded from the package as
/// compiled, pass bit for bit on `npu-sim` and `cpu`, and catch the NPU
/// path's rounding mutant at its first `qmatmul`.
#[test]
fn a_packages_self_goldens_are_checked_bit_for_bit() {
    let dir = scratch_dir("mutants-package-self");
    let pkg = dir.join("qwen2.slmpkg");
    compile_qwen2(&pkg, "rk3588");
    let goldens = dir.join("self");
    let record = |extra: &[&str]| {
        let mut args = vec![
            "golden",
            "record",
            s(&pkg),
            "-o",
            s(&goldens),
            "--input",
            INPUT,
        ];
        args.extend(extra);
        slmcc_env(&[], &args)
    };
    refused(&record(&[]), "record a package's own values with --self");
    refused(
        &record(&["--self", "--quant", "w8a8"]),
        "a package is recorded as it was compiled",
    );
    let o = record(&["--self", "--backend", "npu-sim"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for backend in ["npu-sim", "cpu"] {
        let o = check(&[], s(&goldens), &["--backend", backend]);
        assert!(o.status.success(), "{backend}: {}", stdout(&o));
    }
    let env = [("SLMCC_KERNEL_MUTANT", "npu-rounding")];
    let line = first_divergence(
        &check(&env, s(&goldens), &["--backend", "npu-sim"]),
        "npu-rounding",
    );
    assert!(line.contains("produced by `qmatmul` node"), "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_package_compiled_before_a_kernel_change_is_refused() {
    let dir = scratch_dir("mutants-package");
    let pkg = dir.join("qwen2.slmpkg");
    compile_qwen2(&pkg, "cpu");
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut args = vec!["run", s(&pkg), "--input", INPUT];
        args.extend(extra);
        slmcc_env(env, &args)
    };
    let clean = run(&[], &[]);
    assert!(clean.status.success(), "{}", stderr(&clean));
    assert!(
        !stderr(&clean).contains("fingerprint"),
        "{}",
        stderr(&clean)
    );
    for mutant in ["rms-norm-eps", "exp-coefficient"] {
        let env = [("SLMCC_KERNEL_MUTANT", mutant)];
        let o = run(&env, &[]);
        refused(&o, "bucket @main_16: this slmcc");
        assert!(stderr(&o).contains("kernel fingerprint"), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("pass --allow-kernel-change to run it anyway"),
            "{}",
            stderr(&o)
        );
        let o = run(&env, &["--allow-kernel-change"]);
        assert!(o.status.success(), "{mutant}: {}", stderr(&o));
        assert!(stderr(&o).contains("running it anyway"), "{}", stderr(&o));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_mutant_is_refused() {
    let o = slmcc_env(&[("SLMCC_KERNEL_MUTANT", "bogus")], &["passes"]);
    refused(
        &o,
        "SLMCC_KERNEL_MUTANT=bogus: expected one of rms-norm-eps, exp-coefficient, npu-rounding",
    );
}
