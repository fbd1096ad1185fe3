//! `slmcc run --buckets`: a 45-token prompt runs padded in the 64 bucket
//! (on cpu inside its planned arena) and gives the reference run's outputs.

mod common;

use std::path::{Path, PathBuf};

use common::{slmcc, stderr, stdout};
use slmcc_ir::Tensor;
use slmcc_runtime::compare::diff;

/// A fresh temporary folder for one test.
fn temp(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("slmcc-run-buckets-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `n` token ids below 512 as `input_ids.npy` in `dir`.
fn write_ids(dir: &Path, n: usize) -> String {
    let mut s = 0x5eedu64;
    let ids = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 512) as i64
        })
        .collect();
    let path = dir.join(format!("ids{n}.npy"));
    slmcc_runtime::npy::write(&path, &Tensor::from_i64(vec![1, n], ids)).unwrap();
    format!("input_ids={}", path.display())
}

/// Runs `slmcc run MODEL --input INPUT --output-dir OUT EXTRA...` and reads the logits.
fn run(model: &str, input: &str, out: &Path, extra: &[&str]) -> (Tensor, String) {
    let mut args = vec![
        "-v",
        "run",
        model,
        "--input",
        input,
        "--output-dir",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = slmcc(&args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    assert!(
        stdout(&o).starts_with("logits: f32 [1, 45, 512] -> "),
        "{args:?}: {}",
        stdout(&o)
    );
    let t = slmcc_runtime::npy::read(&out.join("logits.npy")).unwrap();
    (t, stderr(&o))
}

fn assert_close(got: &Tensor, want: &Tensor, what: &str) {
    let d = diff(got, want).unwrap();
    assert!(
        d.max_rel < 1e-5 && d.mismatched_specials == 0,
        "{what}: {d:?}"
    );
}

#[test]
fn cpu_buckets_match_the_reference_run() {
    let dir = temp("cpu");
    let input = write_ids(&dir, 45);
    for model in ["llama", "gpt2"] {
        let path = format!("testdata/models/{model}.onnx");
        let (want, _) = run(&path, &input, &dir.join(format!("{model}-ref")), &[]);
        let (got, log) = run(
            &path,
            &input,
            &dir.join(format!("{model}-cpu")),
            &["--backend", "cpu", "--buckets", "64,128"],
        );
        assert!(
            log.contains("ran 45 tokens in the 64 bucket of @main"),
            "{log}"
        );
        assert_close(&got, &want, &format!("{model} cpu --buckets 64,128"));
        let (got, log) = run(
            &path,
            &input,
            &dir.join(format!("{model}-refb")),
            &["--buckets", "128"],
        );
        assert!(log.contains("in the 128 bucket"), "{log}");
        assert_close(&got, &want, &format!("{model} reference --buckets 128"));
    }
}

#[test]
fn a_module_specialised_ahead_of_time_runs_on_its_buckets() {
    let dir = temp("slm");
    let input = write_ids(&dir, 45);
    let slm = dir.join("qwen2.slm");
    let o = slmcc(&[
        "import",
        "testdata/models/qwen2.onnx",
        "-o",
        slm.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let planned = dir.join("planned.slm");
    let o = slmcc(&[
        "opt",
        slm.to_str().unwrap(),
        "--passes",
        "const-fold,dce,bucket-specialize{buckets=32,64},plan-memory",
        "-o",
        planned.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (want, _) = run("testdata/models/qwen2.onnx", &input, &dir.join("ref"), &[]);
    let (got, log) = run(
        planned.to_str().unwrap(),
        &input,
        &dir.join("cpu"),
        &["--backend", "cpu"],
    );
    assert!(log.contains("in the 64 bucket"), "{log}");
    assert_close(&got, &want, "planned .slm on cpu");
}

fn expect_bad_input(args: &[&str], want: &str) {
    let o = slmcc(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: expected `{want}` in `{err}`");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bucket_errors_are_bad_input() {
    let dir = temp("err");
    let long = write_ids(&dir, 200);
    let short = write_ids(&dir, 45);
    let model = "testdata/models/llama.onnx";
    let cpu = ["--backend", "cpu"];
    expect_bad_input(
        &[
            &["run", model, "--input", &long, "--buckets", "64,128"][..],
            &cpu,
        ]
        .concat(),
        "testdata/models/llama.onnx: graph @main: input has seq = 200, which exceeds the largest bucket (128)",
    );
    expect_bad_input(
        &["run", model, "--input", &short, "--buckets", "64,0"],
        "--buckets: ",
    );
    let wrong = short.replacen("input_ids", "ids", 1);
    expect_bad_input(
        &[
            &["run", model, "--input", &wrong, "--buckets", "64"][..],
            &cpu,
        ]
        .concat(),
        "graph @main: `ids` is not an input of the graph",
    );
    let fixed = dir.join("fixed.slm");
    std::fs::write(
        &fixed,
        "module @m {\n  graph @main(%input_ids: i64[1, 45]) -> (i64[1, 45]) {\n    %y = identity %input_ids : i64[1, 45]\n    return %y\n  }\n}\n",
    )
    .unwrap();
    expect_bad_input(
        &[
            "run",
            fixed.to_str().unwrap(),
            "--input",
            &short,
            "--buckets",
            "64",
        ],
        "graph @main has no input with a `seq` axis to specialise for --buckets",
    );
}
