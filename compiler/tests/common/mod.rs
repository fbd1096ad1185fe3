//! Helpers shared by the integration tests that run the `slmcc` binary.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use slmcc_ir::{Module, Tensor};

/// Says that `what` did not run because `reason`: on stderr past the test
/// harness's capture (so a passing `cargo test` still shows a `SKIP` line).
/// Under `SLMCC_REQUIRE_ALL=1`, which `scripts/test` (and so CI) sets, a
/// skip is a failure instead: there every input is provided, and a test
/// that does not run must not pass.
pub fn skip(what: &str, reason: &str) {
    use std::io::Write as _;
    if std::env::var_os("SLMCC_REQUIRE_ALL").is_some_and(|v| v != "0") {
        panic!("{what} cannot run: {reason} (SLMCC_REQUIRE_ALL is set: no test may be skipped)");
    }
    let _ = writeln!(std::io::stderr(), "SKIP {what}: {reason}");
}

/// Checks that the part of the repository file `doc` between the lines
/// `begin` and `end` is `generated`, or with `SLMCC_BLESS=1` rewrites it
/// (for tables in the docs that the code generates).
pub fn check_generated_doc(doc: &str, begin: &str, end: &str, generated: &str) {
    let path = repo().join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
        panic!("{doc}: no `{begin}` ... `{end}` markers");
    };
    if text[b + begin.len()..e] == *generated {
        return;
    }
    if std::env::var_os("SLMCC_BLESS").is_some() {
        let new = format!("{}{begin}{generated}{}", &text[..b], &text[e..]);
        std::fs::write(&path, new).unwrap();
        return;
    }
    panic!("{doc}: the generated part differs (rerun with SLMCC_BLESS=1):\n{generated}");
}

/// Runs `slmcc` from the repository root.
pub fn slmcc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run slmcc")
}

/// Runs `slmcc` from the repository root with `env` set, logging warnings
/// without colour.
pub fn slmcc_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(args)
        .current_dir(repo())
        .envs(env.iter().copied())
        .env("SLMCC_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .expect("run slmcc")
}

/// The `first divergence` line of a failed `golden check`, after
/// asserting that the check failed (exit 1); `what` labels the failures.
pub fn first_divergence(o: &Output, what: &str) -> String {
    assert_eq!(o.status.code(), Some(1), "{what}: {}", stderr(o));
    stdout(o)
        .lines()
        .find(|l| l.starts_with("first divergence"))
        .unwrap_or_else(|| panic!("{what}: no divergence named:\n{}", stdout(o)))
        .to_string()
}

/// A fresh, empty folder for one test: `slmcc-NAME-PID` in the temporary
/// directory.
pub fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("slmcc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The pipeline without fusion: every op of it lowers on the cpu backend
/// (the fused attention/rope/add+norm kernels are lowered separately).
pub const UNFUSED: &str = "shape-infer,const-fold,dce,cse";

/// `slmcc compile` of llama (unfused, buckets 8 and 16, cpu) into `out`
/// with `extra` args; panics unless it succeeds.
pub fn compile_llama(out: &Path, extra: &[&str]) -> Output {
    let out = out.to_str().unwrap();
    let mut args = vec![
        "compile",
        "testdata/models/llama.onnx",
        "--target",
        "cpu",
        "--buckets",
        "8,16",
        "--passes",
        UNFUSED,
        "-o",
        out,
    ];
    args.extend_from_slice(extra);
    let o = slmcc(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    o
}

/// `slmcc keygen DIR/NAME`: the private and the public key's paths.
pub fn keygen_in(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let o = slmcc(&["keygen", dir.join(name).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("key ed25519:"), "{}", stdout(&o));
    (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    )
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `p` as the `&str` a command line takes.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

/// Asserts that the command succeeded.
pub fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
}

/// Asserts that the command refused its input as user input is refused:
/// exit code 2, `reason` in the message, no panic.
pub fn refused(o: &Output, reason: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains(reason), "want `{reason}`: {e}");
    assert!(!e.contains("panicked"), "{e}");
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The exported decoder models of `testdata/models/`.
pub const DECODERS: [&str; 4] = ["llama", "qwen2", "phi3", "gpt2"];

/// Runs a pipeline with the verifier after each pass; panics naming it.
pub fn run_pipeline(m: &mut Module, pipeline: &str) {
    slmcc_passes::run_pipeline(m, pipeline).unwrap_or_else(|e| panic!("{pipeline}: {e}"));
}

/// `n` token ids below `vocab`, from a fixed-seed LCG.
pub fn tokens(n: usize, vocab: u64, seed: u64) -> Vec<i64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % vocab) as i64
        })
        .collect()
}

/// The greedy tokens `slmcc generate MODEL --prompt-ids .. --max-new-tokens
/// N --quiet [extra]` prints, parsed.
pub fn generate_tokens(
    model: &Path,
    prompt: &[i64],
    new_tokens: usize,
    extra: &[&str],
) -> Vec<i64> {
    let ids: Vec<String> = prompt.iter().map(i64::to_string).collect();
    let ids = ids.join(",");
    let n = new_tokens.to_string();
    let mut args = vec![
        "generate",
        model.to_str().expect("a UTF-8 path"),
        "--prompt-ids",
        &ids,
        "--max-new-tokens",
        &n,
        "--quiet",
    ];
    args.extend_from_slice(extra);
    let o = slmcc(&args);
    assert!(o.status.success(), "{}: {}", model.display(), stderr(&o));
    stdout(&o)
        .split_whitespace()
        .map(|t| t.parse().expect("a token id"))
        .collect()
}

/// Of the positions of two logit tensors (`[..., vocab]`), how many pick
/// the same arg-max, and how many there are.
pub fn top1_agreement(a: &Tensor, b: &Tensor) -> (usize, usize) {
    let vocab = *a.shape().last().unwrap();
    let (a, b) = (a.to_f32_vec(), b.to_f32_vec());
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
    let n = a.len() / vocab;
    let same = (0..n)
        .filter(|t| {
            let r = t * vocab..(t + 1) * vocab;
            argmax(&a[r.clone()]) == argmax(&b[r])
        })
        .count();
    (same, n)
}
