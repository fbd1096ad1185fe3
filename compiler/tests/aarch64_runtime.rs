//! The board's runtime, run: `slmcc` built for aarch64-unknown-linux-gnu
//! (static, `scripts/build-aarch64`) runs under `qemu-aarch64` on packages
//! of the committed Qwen2 model compiled six ways — rk3588 W8A8 and W4A8
//! with the KV cache (the W8A8 products as register programs on the NPU's
//! functional model, the 4-bit ones on the CPU), and cpu for aarch64 with
//! the KV cache in f32, W8A8, W4A8 and weight-only W4 — and `generate`
//! gives the same 32 greedy tokens as the host binary on the same package.
//! The board binary loads the package's aarch64 kernel objects (no
//! compiler runs at load), which it says; the quantized cpu packages'
//! products run on the runtime's `slmcc_qgemm` (which the objects import):
//! `sdot` for W8A8/W4A8, the NEON float panels for W4.
//!
//! `SLMCC_AARCH64_SLMCC` names the aarch64 binary (`scripts/test` builds it
//! and sets it); without it the test is skipped (a failure under
//! `SLMCC_REQUIRE_ALL`). `SLMCC_QEMU_AARCH64` names another qemu.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{repo, skip, slmcc, stderr, stdout};

const PROMPT: &str = "3,14,15,92,65,35,89,79,32,38,46";

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("slmcc-aarch64-rt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn generate_args(pkg: &str) -> Vec<String> {
    [
        "generate",
        pkg,
        "--prompt-ids",
        PROMPT,
        "--max-new-tokens",
        "32",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn board_binary_generates_the_host_tokens_from_its_objects() {
    let Some(bin) = std::env::var_os("SLMCC_AARCH64_SLMCC").map(PathBuf::from) else {
        skip(
            "aarch64 runtime under qemu",
            "SLMCC_AARCH64_SLMCC is not set (scripts/test builds the binary with scripts/build-aarch64)",
        );
        return;
    };
    assert!(bin.is_file(), "{}: no such binary", bin.display());
    let qemu = std::env::var("SLMCC_QEMU_AARCH64").unwrap_or_else(|_| "qemu-aarch64".into());
    let dir = tmpdir();
    let model = repo().join("testdata/models/qwen2.onnx");
    let ways: [(&str, &[&str]); 6] = [
        ("rk3588-w8a8", &["--target", "rk3588", "--quant", "w8a8"]),
        ("rk3588-w4a8", &["--target", "rk3588", "--quant", "w4a8"]),
        ("cpu-aarch64", &["--target", "cpu", "--cpu", "aarch64"]),
        (
            "cpu-aarch64-w8a8",
            &["--target", "cpu", "--cpu", "aarch64", "--quant", "w8a8"],
        ),
        (
            "cpu-aarch64-w4a8",
            &["--target", "cpu", "--cpu", "aarch64", "--quant", "w4a8"],
        ),
        (
            "cpu-aarch64-w4",
            &["--target", "cpu", "--cpu", "aarch64", "--quant", "w4"],
        ),
    ];
    for (name, flags) in ways {
        let pkg = dir.join(format!("{name}.slmpkg"));
        let pkg = pkg.to_str().unwrap();
        let mut args = vec!["compile", model.to_str().unwrap()];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--kv-cache", "--buckets", "16", "-o", pkg]);
        let o = slmcc(&args);
        assert!(o.status.success(), "{name}: compile: {}", stderr(&o));

        let host = slmcc(
            &generate_args(pkg)
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert!(host.status.success(), "{name}: host: {}", stderr(&host));
        let board = Command::new(&qemu)
            .arg(&bin)
            .arg("-v")
            .args(generate_args(pkg))
            .env("SLMCC_LOG", "info")
            .output()
            .unwrap_or_else(|e| panic!("{qemu}: {e}"));
        let log = stderr(&board);
        assert!(board.status.success(), "{name}: board: {log}");
        let tokens = stdout(&board);
        assert_eq!(tokens.split_whitespace().count(), 32, "{name}: {tokens}");
        assert_eq!(
            tokens,
            stdout(&host),
            "{name}: board and host tokens differ"
        );
        assert!(
            log.contains("loaded the package's aarch64-unknown-linux-gnu kernels"),
            "{name}: the board binary did not use the package's objects:\n{log}"
        );
        assert!(
            !log.contains("cpu backend:"),
            "{name}: the board compiled kernels:\n{log}"
        );
        if name.starts_with("cpu-aarch64-w") {
            let object = std::fs::read(pkg).unwrap();
            assert!(
                object.windows(11).any(|w| w == b"slmcc_qgemm"),
                "{name}: the package's object does not import slmcc_qgemm"
            );
            // qemu's default CPU has the int8 matrix multiply too.
            assert!(
                log.contains("quantized products: NeonDot")
                    || log.contains("quantized products: NeonI8mm"),
                "{name}: the board did not use its sdot/smmla kernel:\n{log}"
            );
        }
        eprintln!("{name}: 32 tokens equal on the board binary and the host");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
