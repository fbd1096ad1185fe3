//! `--target rk3588` end to end: every decoder (both exporters' forms)
//! compiles quantized (w8a8 and w4a8) into a package; the package runs on
//! `npu-sim` (its W8A8 products as the stored register programs on the
//! register interface's functional model) with the same logits and tokens
//! as on the cpu kernels; and `slmcc report` gives the estimate (the W8A8
//! products on the NPU, 4-bit ones on the CPU) and the register programs.

mod common;

use common::{repo, scratch_dir, slmcc, stderr, stdout};

fn ok(args: &[&str]) -> String {
    let o = slmcc(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn every_decoder_compiles_runs_on_npu_sim_like_cpu_and_reports() {
    let dir = scratch_dir("rk3588-models");
    let models = [
        "llama", "qwen2", "phi3", "gpt2", "llama_ts", "qwen2_ts", "phi3_ts", "gpt2_ts",
    ];
    for model in models {
        for quant in ["w8a8", "w4a8"] {
            let pkg = dir.join(format!("{model}-{quant}.slmpkg"));
            let pkg = pkg.to_str().unwrap();
            let onnx = format!("testdata/models/{model}.onnx");
            let out = ok(&[
                "compile",
                &onnx,
                "--target",
                "rk3588",
                "--quant",
                quant,
                "--buckets",
                "16",
                "-o",
                pkg,
            ]);
            assert!(
                out.contains("target rk3588") && out.contains(quant),
                "{out}"
            );
            let input = format!(
                "input_ids={}",
                repo()
                    .join(format!("goldens/{model}/seq11/input_ids.npy"))
                    .display()
            );
            let on = |backend: &str| {
                let o = slmcc(&["run", pkg, "--backend", backend, "--input", &input]);
                assert!(
                    o.status.success(),
                    "{model} {quant} {backend}: {}",
                    stderr(&o)
                );
                stdout(&o)
            };
            // The summary line prints the logits' range and first values
            // to 6 decimals: equal text, and the kernels are bit-exact.
            let cpu = on("cpu");
            assert_eq!(on("npu-sim"), cpu, "{model} {quant}");
            let report = ok(&["report", pkg, "--prompt-len", "11"]);
            // The register interface takes W8A8 products (those whose N
            // and group are whole 32-blocks: all but the 176-wide MLPs of
            // these tiny models); 4-bit weights stay on the CPU, and so do
            // attention and the norms.
            let mut want = vec![
                "estimate for rk3588",
                "cpu  attention",
                "time to first token",
                "MAC utilisation",
            ];
            match quant {
                "w8a8" => want.extend(["NPU programs (", "npu  qmatmul"]),
                _ => assert!(
                    !report.contains("npu  ") && !report.contains("NPU programs"),
                    "{model} {quant}:\n{report}"
                ),
            }
            for want in want {
                assert!(
                    report.contains(want),
                    "{model} {quant}: no `{want}`:\n{report}"
                );
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_same_model_compiles_to_the_same_bytes() {
    let dir = scratch_dir("rk3588-same");
    let (a, b) = (dir.join("a.slmpkg"), dir.join("b.slmpkg"));
    for p in [&a, &b] {
        ok(&[
            "compile",
            "testdata/models/phi3.onnx",
            "--target",
            "rk3588",
            "--quant",
            "w8a8",
            "--buckets",
            "1,8",
            "--kv-cache",
            "-o",
            p.to_str().unwrap(),
        ]);
    }
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
    let report = ok(&["report", a.to_str().unwrap(), "--prompt-len", "8"]);
    assert!(report.contains("tokens/s (estimate"), "{report}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn report_prints_the_register_programs_and_estimates_decode() {
    let out = ok(&[
        "report",
        "testdata/models/qwen2.onnx",
        "--target",
        "rk3588",
        "--quant",
        "w8a8",
        "--buckets",
        "1,16",
        "--asm",
    ]);
    for want in [
        "qmatmul M=16 K=64 N=64 x 1",
        "; task 0: core 0",
        "0201 1010 00000110  CNA_CONV_CON2 FEATURE_GRAINS=0x11",
        "DPU_DST_BASE_ADDR",
        "0081 0008 0000000d  PC_OPERATION_ENABLE",
    ] {
        assert!(out.contains(want), "no `{want}`:\n{out}");
    }
    // No KV cache: bucket 1 is a one-token prefill, not a decode step.
    assert!(out.contains("no decode graph"), "{out}");
}

#[test]
fn generate_on_npu_sim_equals_cpu() {
    let run = |backend: &str| {
        ok(&[
            "generate",
            "testdata/models/qwen2.onnx",
            "--backend",
            backend,
            "--quant",
            "w8a8",
            "--prompt-ids",
            "1,2,3,4",
            "--max-new-tokens",
            "8",
            "--buckets",
            "8",
        ])
    };
    let cpu = run("cpu");
    assert_eq!(run("npu-sim"), cpu);
    assert_eq!(cpu.split_whitespace().count(), 8, "{cpu}");
}

#[test]
fn a_cpu_report_has_no_npu_programs() {
    let o = slmcc(&[
        "report",
        "testdata/models/qwen2.onnx",
        "--buckets",
        "8",
        "--asm",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("only rk3588 models"), "{}", stderr(&o));
}

/// `--backend npu-sim`: the W8A8 qmatmuls and qswiglus as tasks of the
/// RK3588's own register interface on its functional model, the rest on
/// the CPU. The same logits and tokens as the cpu kernels (both bit-exact
/// with the ops), and the log says how many nodes ran there. `--backend
/// npu` without a device runs them on the CPU and says so once.
#[test]
fn npu_sim_runs_the_qmatmuls_through_the_register_interface() {
    let dir = scratch_dir("rk3588-npu-sim");
    // The tiny models: q, k, v and o of 2 layers (phi3: its fused qkv, o
    // and fused gate_up `qswiglu`); their 176-wide MLPs stay on the CPU.
    // The trained Llama (hidden 256, MLP 704): every projection of its 4
    // layers, the `qswiglu`s and down projections included.
    for (model, on_npu) in [
        ("qwen2", 8),
        ("llama", 8),
        ("phi3", 6),
        ("trained/llama_trained", 24),
    ] {
        let onnx = repo().join(format!("testdata/models/{model}.onnx"));
        let stem = model.replace('/', "-");
        let pkg = dir.join(format!("{stem}.slmpkg"));
        let kv = dir.join(format!("{stem}-kv.slmpkg"));
        let (onnx, pkg, kv) = (
            onnx.to_str().unwrap(),
            pkg.to_str().unwrap(),
            kv.to_str().unwrap(),
        );
        for (extra, out) in [("--buckets=16", pkg), ("--kv-cache", kv)] {
            ok(&[
                "compile", onnx, "--target", "rk3588", "--quant", "w8a8", extra, "-o", out,
            ]);
        }
        let golden = if model.contains('/') { "llama" } else { model };
        let input = format!(
            "input_ids={}",
            repo()
                .join(format!("goldens/{golden}/seq11/input_ids.npy"))
                .display()
        );
        let run = |backend: &str| {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_slmcc"))
                .args(["run", pkg, "--backend", backend, "--input", &input])
                .env("SLMCC_LOG", "warn,slmcc_runtime=info")
                .current_dir(repo())
                .output()
                .unwrap();
            assert!(o.status.success(), "{model} {backend}: {}", stderr(&o));
            (stdout(&o), stderr(&o))
        };
        let (cpu, _) = run("cpu");
        let (model_out, log) = run("npu-sim");
        assert_eq!(model_out, cpu, "{model}");
        assert!(
            log.contains(&format!(
                "{on_npu} qmatmul/qswiglu node(s) on the RK3588 register-interface model"
            )),
            "{model}: {log}"
        );
        let generate = |backend: &str| {
            ok(&[
                "generate",
                kv,
                "--prompt-ids",
                "1,2,3,4,5",
                "--max-new-tokens",
                "8",
                "--backend",
                backend,
            ])
            .lines()
            .next()
            .unwrap_or_default()
            .to_string()
        };
        assert_eq!(generate("npu-sim"), generate("cpu"), "{model}");
        // `npu`: the board's NPU. Where there is none (no /dev/accel here),
        // the CPU kernels, said once.
        if !std::path::Path::new("/dev/accel").exists() {
            let (board, log) = run("npu");
            assert_eq!(board, cpu, "{model}");
            assert_eq!(log.matches("no NPU device").count(), 1, "{model}: {log}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
