//! `slmcc compile --target cpu` and the package it writes: byte-identical
//! when compiled twice, refused when corrupted (naming the part) or built
//! for another runtime ABI, run on the golden inputs within the goldens'
//! tolerance, reported, and the unsupported targets and quantizations.

mod common;

use std::path::Path;

use common::{compile_llama, repo, s, scratch_dir, slmcc, stderr, stdout, UNFUSED};
use slmcc_runtime::compare::diff;
use slmcc_runtime::package::{self, Package, HEADER_BYTES};

/// Runs the package on the seq5 golden input and returns the max relative
/// error of the logits against the golden.
fn run_seq5(pkg: &Path, dir: &Path) -> f64 {
    let out = dir.join("out");
    let input = format!(
        "input_ids={}",
        repo().join("goldens/llama/seq5/input_ids.npy").display()
    );
    let o = slmcc(&["run", s(pkg), "--input", &input, "--output-dir", s(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let got = slmcc_runtime::npy::read(&out.join("logits.npy")).unwrap();
    let want = slmcc_runtime::npy::read(&repo().join("goldens/llama/seq5/logits.npy")).unwrap();
    assert_eq!(got.shape(), want.shape());
    diff(&got, &want).unwrap().max_rel
}

#[test]
fn compiling_twice_gives_identical_bytes() {
    let dir = scratch_dir("package-twice");
    for extra in [&[][..], &["--cpu", "aarch64"][..]] {
        let (a, b) = (dir.join("a.slmpkg"), dir.join("b.slmpkg"));
        let o = compile_llama(&a, extra);
        assert!(stdout(&o).contains("buckets 8, 16"), "{}", stdout(&o));
        compile_llama(&b, extra);
        let (a, b) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert!(a == b, "{extra:?}: packages differ");
    }
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Eight compiles racing to one path, and a reader of it meanwhile: each
/// write goes through its own temporary file, so all succeed, the reader
/// sees a whole package or none, and nothing is left behind. (With one
/// temporary name per path, writers renamed each other's files away and
/// failed in two runs of three.)
#[test]
fn racing_compiles_of_one_path_never_expose_a_partial_package() {
    let dir = scratch_dir("package-race");
    let out = dir.join("m.slmpkg");
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .args(["compile", "testdata/models/llama.onnx", "--target", "cpu"])
            .args(["--buckets", "8,16", "--passes", UNFUSED, "-o", s(&out)])
            .current_dir(repo())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let writers: Vec<_> = (0..8).map(|_| spawn()).collect();
    let mut seen = 0;
    while !out.exists() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for _ in 0..20 {
        Package::open(&out).expect("a whole package");
        seen += 1;
    }
    for w in writers {
        let o = w.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    assert_eq!(seen, 20);
    assert!(run_seq5(&out, &dir) < 1e-4);
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "out")
        .collect();
    assert_eq!(names, ["m.slmpkg"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two `generate` processes on one package at once: both map it read-only
/// and give the tokens one process alone gives.
#[test]
fn two_generate_processes_share_one_package() {
    let dir = scratch_dir("package-shared");
    let pkg = dir.join("kv.slmpkg");
    let o = slmcc(&[
        "compile",
        "testdata/models/llama.onnx",
        "--target",
        "cpu",
        "--kv-cache",
        "--buckets",
        "8",
        "-o",
        s(&pkg),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spawn = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .args(["generate", s(&pkg), "--prompt-ids", "1,2,3,4,5"])
            .args(["--max-new-tokens", "24", "--backend", "cpu"])
            .current_dir(repo())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let tokens = |c: std::process::Child| {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    let alone = tokens(spawn());
    let (a, b) = (spawn(), spawn());
    assert_eq!(tokens(a), alone);
    assert_eq!(tokens(b), alone);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn runs_on_the_golden_input_and_reports() {
    let dir = scratch_dir("package-run");
    let pkg = dir.join("llama.slmpkg");
    let json = dir.join("report.json");
    compile_llama(&pkg, &["--report", s(&json)]);
    let err = run_seq5(&pkg, &dir);
    assert!(err < 1e-5, "logits max_rel {err}");

    let o = slmcc(&["report", s(&pkg)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        "package of module @llama (entry @main)",
        "verified",
        "runtime ABI 2",
        "target cpu",
        "isa host-jit",
        "buckets 8, 16",
        "bucket     @main_8 (seq = 8)",
        "no kernels (JIT-compiled from the IR at load)",
        "graph @main_16, bucket seq = 16 of @main",
        "lower bound",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }

    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let buckets = r["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 2);
    for (b, size) in buckets.iter().zip([8, 16]) {
        assert_eq!(b["size"], size);
        assert!(b["arena_bytes"].as_u64().unwrap() >= b["lower_bound_bytes"].as_u64().unwrap());
        assert!(b["fused_ops"]["attention"].is_u64(), "{b}");
    }
    let passes: Vec<&str> = r["passes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        passes,
        [
            "shape-infer",
            "const-fold",
            "dce",
            "cse",
            "bucket-specialize",
            "plan-memory"
        ]
    );
    assert!(r["passes"][0]["ms"].is_f64());
    assert_eq!(r["versions"]["runtime_abi"], 2);
    assert_eq!(
        r["bytes"]["file"].as_u64().unwrap(),
        std::fs::metadata(&pkg).unwrap().len()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn aarch64_packages_carry_objects_and_still_run_on_the_host() {
    let dir = scratch_dir("package-aarch64");
    let pkg = dir.join("llama.slmpkg");
    compile_llama(&pkg, &["--cpu", "aarch64"]);
    let p = Package::open(&pkg).unwrap();
    assert_eq!(
        p.manifest.versions.as_ref().unwrap().isa,
        "aarch64-unknown-linux-gnu"
    );
    for b in &p.manifest.buckets {
        let k = b.kernels.as_ref().expect("an object per bucket");
        assert_eq!(&k.object[..4], b"\x7fELF");
        assert!(!k.symbols.is_empty());
    }
    let o = slmcc(&["report", s(&pkg)]);
    assert!(
        stdout(&o).contains("aarch64-unknown-linux-gnu object"),
        "{}",
        stdout(&o)
    );
    // The host runtime JIT-compiles from the IR whatever the package carries.
    let err = run_seq5(&pkg, &dir);
    assert!(err < 1e-5, "logits max_rel {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn corrupted_packages_are_refused_naming_the_part() {
    let dir = scratch_dir("package-corrupt");
    let pkg = dir.join("llama.slmpkg");
    compile_llama(&pkg, &[]);
    let bytes = std::fs::read(&pkg).unwrap();
    let weights_at = bytes.len() - Package::open(&pkg).unwrap().weights_bytes();
    let input = format!(
        "input_ids={}",
        repo().join("goldens/llama/seq5/input_ids.npy").display()
    );
    for (at, part) in [
        (HEADER_BYTES + 100, "manifest: SHA-256 mismatch"),
        (
            weights_at + 5000,
            "weights: SHA-256 mismatch in section 0 of",
        ),
        (bytes.len() - 1, "weights: SHA-256 mismatch in section"),
        (
            80,
            "weights: SHA-256 mismatch: the weights' integrity table",
        ),
        (0, "header: not a slmcc package"),
        (8, "header: format version"),
    ] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        let path = dir.join("bad.slmpkg");
        std::fs::write(&path, &bad).unwrap();
        for cmd in [
            &["run", s(&path), "--input", &input][..],
            &["report", s(&path)],
        ] {
            let o = slmcc(cmd);
            assert_eq!(o.status.code(), Some(2), "byte {at}: {}", stderr(&o));
            let e = stderr(&o);
            assert!(
                e.contains(&format!("{}: {part}", path.display())),
                "byte {at}: {e}"
            );
            assert!(!e.contains("panicked"), "{e}");
        }
    }
    let path = dir.join("short.slmpkg");
    std::fs::write(&path, &bytes[..bytes.len() - 64]).unwrap();
    let o = slmcc(&["report", s(&path)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("truncated"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn another_runtime_abi_is_refused() {
    let dir = scratch_dir("package-abi");
    let pkg = dir.join("llama.slmpkg");
    compile_llama(&pkg, &[]);
    let p = Package::open(&pkg).unwrap();
    let bytes = std::fs::read(&pkg).unwrap();
    let weights = &bytes[bytes.len() - p.weights_bytes()..];
    let mut manifest = p.manifest.clone();
    manifest.versions.as_mut().unwrap().runtime_abi = 99;
    let path = dir.join("abi99.slmpkg");
    std::fs::write(&path, package::encode(&manifest, weights)).unwrap();
    let o = slmcc(&["report", s(&path)]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("version set: the package needs runtime ABI 99, this runtime implements ABI 2"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_default_pipeline_compiles_or_names_the_node_that_does_not_lower() {
    let dir = scratch_dir("package-default");
    let pkg = dir.join("llama.slmpkg");
    let o = slmcc(&[
        "compile",
        "testdata/models/llama.onnx",
        "--target",
        "cpu",
        "--buckets",
        "8",
        "-o",
        s(&pkg),
    ]);
    match o.status.code() {
        Some(0) => {
            let err = run_seq5(&pkg, &dir);
            assert!(err < 1e-5, "logits max_rel {err}");
        }
        Some(2) => {
            let e = stderr(&o);
            assert!(
                e.contains("cannot compile for --target cpu") && e.contains("node %"),
                "{e}"
            );
            assert!(!pkg.exists(), "nothing is written on failure");
        }
        c => panic!("exit {c:?}: {}", stderr(&o)),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unsupported_targets_and_options_exit_2() {
    let dir = scratch_dir("package-unsupported");
    let out = dir.join("x.slmpkg");
    for (extra, want) in [
        (
            &[
                "--target",
                "rk3588",
                "--quant",
                "w4a8",
                "--quant-group",
                "0",
            ][..],
            "--quant-group must be positive",
        ),
        (
            &["--target", "cpu", "--quant", "w8a8", "--passes", "dce"],
            "put the quantize{...} entry in the pipeline",
        ),
        (
            &["--target", "cpu", "--quant", "int3"],
            "[possible values: none, w8a8, w4a8, w8, w4]",
        ),
        (&["--target", "gpu"], "[possible values: cpu, rk3588]"),
        (
            &["--target", "cpu", "--cpu", "riscv"],
            "[possible values: host, aarch64]",
        ),
        (&["--target", "cpu", "--buckets", "8,x"], "bad bucket `x`"),
        (
            &[
                "--target",
                "cpu",
                "--buckets",
                "8",
                "--passes",
                "dce,bucket-specialize{buckets=4}",
            ],
            "cannot be combined",
        ),
    ] {
        let mut args = vec!["compile", "testdata/models/llama.onnx", "-o", s(&out)];
        args.extend_from_slice(extra);
        let o = slmcc(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{extra:?}: {}", stderr(&o));
        assert!(!out.exists());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bucket_profiles_choose_the_buckets() {
    let dir = scratch_dir("package-profile");
    let profile = dir.join("lengths.txt");
    std::fs::write(&profile, "5 10\n12 3\n30 1\n").unwrap();
    let pkg = dir.join("llama.slmpkg");
    let o = slmcc(&[
        "compile",
        "testdata/models/llama.onnx",
        "--target",
        "cpu",
        "--passes",
        UNFUSED,
        "--bucket-profile",
        s(&profile),
        "--max-buckets",
        "2",
        "-o",
        s(&pkg),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let p = Package::open(&pkg).unwrap();
    let sizes: Vec<u64> = p.manifest.buckets.iter().map(|b| b.size).collect();
    assert_eq!(sizes.len(), 2, "{sizes:?}");
    assert_eq!(*sizes.last().unwrap(), 30, "{sizes:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_node_that_does_not_lower_is_named_and_nothing_is_written() {
    let dir = scratch_dir("package-lower");
    // 4-bit arithmetic is not lowered by the cpu backend (copies are).
    let src = dir.join("q.slm");
    std::fs::write(
        &src,
        "module @q {\n  graph @main(%x: i4[1, seq]) -> (i4[1, seq]) {\n    %y = add %x, %x : i4[1, seq]\n    return %y\n  }\n}\n",
    )
    .unwrap();
    let pkg = dir.join("q.slmpkg");
    for cpu in ["host", "aarch64"] {
        let o = slmcc(&[
            "compile",
            s(&src),
            "--target",
            "cpu",
            "--cpu",
            cpu,
            "--buckets",
            "4",
            "-o",
            s(&pkg),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("cannot compile for --target cpu")
                && e.contains("graph @main_4, node %y (`add`)"),
            "{e}"
        );
        assert!(!pkg.exists());
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
