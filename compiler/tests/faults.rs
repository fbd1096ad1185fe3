//! Faults injected in the test builds (the `fault-injection` feature).
//!
//! Into the NPU path (`SLMCC_NPU_FAULT`, runtime/src/npu_device/fault.rs):
//! they end in correct output or a clear error, never a hang or a silent
//! wrong answer. A transient submit failure is retried; a persistent one,
//! or a timeout, falls back to the CPU kernels, said once; a corrupted
//! output tile is caught by `golden check`, which names the layer.
//!
//! Into one kernel's result (`SLMCC_KERNEL_FAULT`,
//! runtime/src/kernel_fault.rs): `golden check` fails and names the first
//! layer the change reaches.
#![cfg(feature = "fault-injection")]

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{first_divergence, slmcc_env, stderr, stdout};

const INPUT: &str = "input_ids=goldens/qwen2/seq11/input_ids.npy";
const FALLBACK: &str = "the quantized products run on the CPU from now on";

fn slmcc_with(fault: &str, args: &[&str]) -> Output {
    slmcc_env(&[("SLMCC_NPU_FAULT", fault)], args)
}

/// The qwen2 W8A8 rk3588 packages (bucket 11, and with a KV cache), made
/// once per test.
fn packages(tag: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("slmcc-faults-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pkg, kv) = (dir.join("qwen2.slmpkg"), dir.join("qwen2-kv.slmpkg"));
    for (extra, out) in [("--buckets=11", &pkg), ("--kv-cache", &kv)] {
        let o = slmcc_with(
            "",
            &[
                "compile",
                "testdata/models/qwen2.onnx",
                "--target",
                "rk3588",
                "--quant",
                "w8a8",
                extra,
                "-o",
                out.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    (pkg, kv)
}

#[test]
fn failed_and_timed_out_submits_are_retried_then_run_on_the_cpu() {
    let (pkg, kv) = packages("fail");
    let (pkg, kv) = (pkg.to_str().unwrap(), kv.to_str().unwrap());
    let run = |fault: &str, backend: &str| {
        let o = slmcc_with(fault, &["run", pkg, "--backend", backend, "--input", INPUT]);
        assert!(o.status.success(), "{fault}: {}", stderr(&o));
        (stdout(&o), stderr(&o))
    };
    let (cpu, _) = run("", "cpu");
    let (npu, log) = run("", "npu-sim");
    assert_eq!(npu, cpu);
    assert!(!log.contains(FALLBACK), "{log}");
    // Transient: each product's first submit fails, its retry succeeds,
    // and nothing falls back.
    let (out, log) = run("fail-once", "npu-sim");
    assert_eq!(out, cpu, "fail-once");
    assert!(!log.contains(FALLBACK), "fail-once: {log}");
    // Persistent, or a driver's timeout: the retry fails too, the
    // products run on the CPU from then on, said once.
    for fault in ["fail", "timeout"] {
        let (out, log) = run(fault, "npu-sim");
        assert_eq!(out, cpu, "{fault}");
        assert_eq!(log.matches(FALLBACK).count(), 1, "{fault}: {log}");
    }
    // Decoding with the KV cache, step after step, falls back alike.
    let generate = |fault: &str, backend: &str| {
        let args = [
            "generate",
            kv,
            "--prompt-ids",
            "1,2,3,4,5",
            "--max-new-tokens",
            "8",
            "--backend",
            backend,
        ];
        let o = slmcc_with(fault, &args);
        assert!(o.status.success(), "{fault}: {}", stderr(&o));
        (stdout(&o), stderr(&o))
    };
    let (tokens, _) = generate("", "cpu");
    let (faulty, log) = generate("fail", "npu-sim");
    assert_eq!(faulty, tokens);
    assert_eq!(log.matches(FALLBACK).count(), 1, "{log}");
}

#[test]
fn a_corrupted_output_tile_is_caught_by_the_golden_check_naming_the_layer() {
    let (pkg, _) = packages("corrupt");
    let pkg = pkg.to_str().unwrap();
    let run = |fault: &str, backend: &str| {
        let o = slmcc_with(fault, &["run", pkg, "--backend", backend, "--input", INPUT]);
        assert!(o.status.success(), "{fault}: {}", stderr(&o));
        stdout(&o)
    };
    // Silent: the run succeeds with other logits.
    assert_ne!(run("corrupt", "npu-sim"), run("", "cpu"));
    let check = |fault: &str| {
        slmcc_with(
            fault,
            &[
                "golden",
                "check",
                "goldens/qwen2",
                "--backend",
                "npu-sim",
                "--quant",
                "w8a8",
            ],
        )
    };
    let clean = check("");
    assert!(clean.status.success(), "{}", stderr(&clean));
    let o = check("corrupt");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("first divergence: goldens/qwen2 seq5 layer `model.layers.0`"),
        "{out}"
    );
    assert!(out.contains("model.embed_tokens"), "{out}");
}

#[test]
fn an_unknown_fault_plan_is_refused() {
    let o = slmcc_with(
        "sometimes",
        &[
            "run",
            "testdata/models/qwen2.onnx",
            "--backend",
            "npu-sim",
            "--quant",
            "w8a8",
            "--input",
            INPUT,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("SLMCC_NPU_FAULT=sometimes: expected fail-once, fail, timeout or corrupt"),
        "{}",
        stderr(&o)
    );
}

/// Two rows of one kernel's result swapped: the FP32 check on `cpu` and
/// the W8A8 check on `npu-sim` fail at the layer that holds the kernel.
#[test]
fn a_mutated_kernel_result_fails_the_golden_check_at_its_layer() {
    let check = |fault: &str, backend: &[&str]| {
        let mut args = vec!["golden", "check", "goldens/qwen2", "--backend"];
        args.extend_from_slice(backend);
        slmcc_env(&[("SLMCC_KERNEL_FAULT", fault)], &args)
    };
    for backend in [&["cpu"][..], &["npu-sim", "--quant", "w8a8"]] {
        let clean = check("", backend);
        assert!(clean.status.success(), "{backend:?}: {}", stderr(&clean));
        for (fault, layer) in [
            ("swap-rows:rope", "model.layers.0"),
            ("swap-rows:attention#1", "model.layers.1"),
            ("swap-rows:rms_norm", "model.layers.0"),
        ] {
            let o = check(fault, backend);
            assert_eq!(
                o.status.code(),
                Some(1),
                "{fault} {backend:?}: {}",
                stderr(&o)
            );
            assert!(
                stderr(&o).contains("mutating the result of node"),
                "{}",
                stderr(&o)
            );
            let want = format!("first divergence: goldens/qwen2 seq5 layer `{layer}`");
            assert!(
                stdout(&o).contains(&want),
                "{fault} {backend:?}: {}",
                stdout(&o)
            );
        }
    }
}

/// With goldens of every value (`golden record`), the check names the op
/// whose result was changed, not only its block: the first `rope`.
#[test]
fn every_value_goldens_name_the_op_that_diverges() {
    let dir = std::env::temp_dir().join(format!("slmcc-faults-every-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = slmcc_env(
        &[],
        &[
            "golden",
            "record",
            "testdata/models/qwen2.onnx",
            "-o",
            dir.to_str().unwrap(),
            "--input",
            "input_ids=goldens/qwen2/seq5/input_ids.npy",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = slmcc_env(
        &[("SLMCC_KERNEL_FAULT", "swap-rows:rope")],
        &["golden", "check", dir.to_str().unwrap(), "--backend", "cpu"],
    );
    let line = first_divergence(&o, "swap-rows:rope");
    assert!(line.contains("produced by `rope` node"), "{line}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Self-goldens (`golden record --self`) compare bit for bit: a 1-ulp
/// change of one kernel's result, which the FP32 goldens' tolerance lets
/// through, fails the check and names the op, on the cpu kernels and on
/// the NPU's W8A8 path.
#[test]
fn self_goldens_catch_a_one_ulp_change_and_name_the_op() {
    let root = std::env::temp_dir().join(format!("slmcc-faults-self-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (i, (backend, quant, fault, op)) in [
        ("cpu", None, "ulp:attention#1", "attention"),
        ("cpu", None, "ulp:rms_norm", "rms_norm"),
        ("npu-sim", Some("w8a8"), "ulp:qmatmul", "qmatmul"),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = root.join(format!("{i}-{backend}"));
        let dir = dir.to_str().unwrap();
        let mut flags = vec!["--backend", backend];
        if let Some(q) = quant {
            flags.extend(["--quant", q]);
        }
        let mut record = vec![
            "golden",
            "record",
            "testdata/models/qwen2.onnx",
            "-o",
            dir,
            "--self",
            "--input",
            "input_ids=goldens/qwen2/seq5/input_ids.npy",
        ];
        record.extend(&flags);
        let o = slmcc_env(&[], &record);
        assert!(o.status.success(), "{}", stderr(&o));
        let mut check = vec!["golden", "check", dir];
        check.extend(&flags);
        let clean = slmcc_env(&[], &check);
        assert!(clean.status.success(), "{backend}: {}", stdout(&clean));
        // The FP32 goldens do not see the change...
        let mut fp32 = vec!["golden", "check", "goldens/qwen2"];
        fp32.extend(&flags);
        let o = slmcc_env(&[("SLMCC_KERNEL_FAULT", fault)], &fp32);
        assert!(o.status.success(), "{fault} {backend}: {}", stdout(&o));
        // ...the self-goldens do, at the op.
        let o = slmcc_env(&[("SLMCC_KERNEL_FAULT", fault)], &check);
        let line = first_divergence(&o, &format!("{fault} {backend}"));
        assert!(
            line.contains(&format!("produced by `{op}` node")),
            "{fault}: {line}"
        );
        assert!(line.contains("(tolerance 0e0)"), "{line}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}
