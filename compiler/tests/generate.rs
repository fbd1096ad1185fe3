//! `slmcc generate` against PyTorch's `generate`: for every decoder in
//! `testdata/models/` (both exporters' files), 64 greedy tokens from the
//! KV-cache graphs must equal the tokens `transformers` generated
//! (`goldens/<model>/generate/`, recorded by
//! `testdata/models/generate_goldens.py`), and the logits of every step must
//! be within the golden's relative tolerance (1e-4), on the reference
//! interpreter and on the cpu backend.

mod common;

use common::{repo, slmcc, stderr, stdout, DECODERS};
use slmcc_ir::Tensor;
use slmcc_runtime::npy;

struct Golden {
    prompt: Vec<i64>,
    tokens: Vec<i64>,
    logits: Tensor,
    max_rel: f64,
}

fn golden(model: &str) -> Golden {
    let dir = repo().join("goldens").join(model).join("generate");
    let read = |f: &str| npy::read(&dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("generate.json")).unwrap()).unwrap();
    Golden {
        prompt: read("prompt_ids.npy").to_i64_vec(),
        tokens: read("tokens.npy").to_i64_vec(),
        logits: read("logits.npy"),
        max_rel: json["tolerance"]["logits_max_rel"].as_f64().unwrap(),
    }
}

/// `max|a - b| / max(max|b|, 1e-6)`, the goldens' definition.
fn rel_error(a: &[f32], b: &[f32]) -> f64 {
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() as f64)
        .fold(0.0, f64::max);
    let scale = b.iter().map(|y| y.abs() as f64).fold(1e-6, f64::max);
    diff / scale
}

fn check(file: &str, model: &str, backend: &str, extra: &[&str]) {
    check_within(file, model, backend, extra, None);
}

/// [`check`] with the logits' tolerance `max_rel` instead of the golden's.
fn check_within(file: &str, model: &str, backend: &str, extra: &[&str], max_rel: Option<f64>) {
    let mut g = golden(model);
    if let Some(t) = max_rel {
        g.max_rel = t;
    }
    let out = tempdir();
    let logits_file = out.join(format!("{}-{backend}.npy", file.replace('/', "-")));
    let ids: Vec<String> = g.prompt.iter().map(|t| t.to_string()).collect();
    let ids = ids.join(",");
    let model_path = repo().join("testdata/models").join(format!("{file}.onnx"));
    assert!(model_path.exists(), "{}", model_path.display());
    let mut args = vec![
        "generate",
        model_path.to_str().unwrap(),
        "--backend",
        backend,
        "--prompt-ids",
        &ids,
        "--max-new-tokens",
        "64",
        "--quiet",
        "--logits-out",
        logits_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = slmcc(&args);
    assert!(o.status.success(), "{file} {backend}: {}", stderr(&o));
    let tokens: Vec<i64> = stdout(&o)
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(
        tokens, g.tokens,
        "{file} on {backend} {extra:?}: tokens differ from transformers' generate"
    );
    let logits = npy::read(&logits_file).unwrap();
    assert_eq!(logits.shape(), g.logits.shape());
    let (got, want) = (logits.to_f32_vec(), g.logits.to_f32_vec());
    let vocab = want.len() / 64;
    for step in 0..64 {
        let row = step * vocab..(step + 1) * vocab;
        let e = rel_error(&got[row.clone()], &want[row]);
        assert!(
            e <= g.max_rel,
            "{file} on {backend} {extra:?}, step {step}: logits relative error {e:.3e} > {}",
            g.max_rel
        );
    }
}

fn tempdir() -> std::path::PathBuf {
    let d = repo().join("target/tmp/generate");
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn greedy_tokens_equal_transformers_generate_on_reference() {
    for model in DECODERS {
        for file in [model.to_string(), format!("{model}_ts")] {
            check(&file, model, "reference", &[]);
        }
    }
}

#[test]
fn greedy_tokens_equal_transformers_generate_on_cpu() {
    for model in DECODERS {
        for file in [model.to_string(), format!("{model}_ts")] {
            check(&file, model, "cpu", &[]);
        }
    }
}

#[test]
fn exports_with_past_key_values_use_the_static_cache() {
    // `testdata/models/past/`: the same models exported with
    // `past_key_values.*` inputs and `present.*` outputs; their concats
    // become in-place cache writes.
    for model in DECODERS {
        for backend in ["cpu", "reference"] {
            check(&format!("past/{model}_past"), model, backend, &[]);
        }
    }
}

#[test]
fn prefill_in_chunks_and_an_f16_cache_keep_the_tokens() {
    // A prompt longer than the largest bucket runs in chunks; a small
    // context forces the chunks to shrink near its end.
    check(
        "qwen2",
        "qwen2",
        "cpu",
        &["--buckets", "2,4", "--max-context", "72"],
    );
    // Every row's logits, as the export computes them (by default the LM
    // head multiplies only each chunk's last row): the same tokens.
    check("llama", "llama", "cpu", &["--prefill-logits", "all"]);
    check("qwen2", "qwen2", "reference", &["--prefill-logits", "all"]);
    // An f16 cache rounds keys and values to 11 significant bits (relative
    // error up to 2^-11 ≈ 4.9e-4 each): the greedy tokens stay, and the
    // logits stay within 2e-3 of transformers' FP32 ones.
    check_within("llama", "llama", "cpu", &["--kv-dtype", "f16"], Some(2e-3));
    check_within(
        "qwen2",
        "qwen2",
        "reference",
        &["--kv-dtype", "f16"],
        Some(2e-3),
    );
}

#[test]
fn a_full_context_is_a_clear_error() {
    let model = repo().join("testdata/models/qwen2.onnx");
    let o = slmcc(&[
        "generate",
        model.to_str().unwrap(),
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "20",
        "--max-context",
        "8",
        "--quiet",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("the context is full"), "{}", stderr(&o));
}

#[test]
fn a_package_compiled_with_a_kv_cache_generates_the_same_tokens() {
    let g = golden("qwen2");
    let pkg = tempdir().join("qwen2-kv.slmpkg");
    let o = slmcc(&[
        "compile",
        "testdata/models/qwen2.onnx",
        "--target",
        "cpu",
        "--kv-cache",
        "--buckets",
        "4,16",
        "--max-context",
        "128",
        "-o",
        pkg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ids: Vec<String> = g.prompt.iter().map(|t| t.to_string()).collect();
    let o = slmcc(&[
        "generate",
        pkg.to_str().unwrap(),
        "--prompt-ids",
        &ids.join(","),
        "--max-new-tokens",
        "64",
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let tokens: Vec<i64> = stdout(&o)
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(tokens, g.tokens);
}

/// Weight-only packages (`--quant w8`, `w4`; their weights stay row-major,
/// `pack-weights` leaves f32-activation products alone) generate on the CPU
/// the tokens the reference interpreter generates from the same model
/// quantized the same way: `slmcc_qgemm`'s weight-only loops are
/// bit-exact with the op.
#[test]
fn weight_only_packages_generate_the_reference_tokens() {
    let dir = tempdir();
    for quant in ["w8", "w4"] {
        let pkg = dir.join(format!("qwen2-{quant}.slmpkg"));
        let pkg = pkg.to_str().unwrap();
        let model = "testdata/models/qwen2.onnx";
        let quantized = ["--quant", quant];
        let compile = [
            "compile",
            model,
            "--target",
            "cpu",
            "--kv-cache",
            "--buckets",
            "16",
            "-o",
            pkg,
        ];
        let o = slmcc(&[&compile[..], &quantized].concat());
        assert!(o.status.success(), "{quant}: {}", stderr(&o));
        let prompt = ["--prompt-ids", "3,1,4,1,5", "--max-new-tokens", "24"];
        let o = slmcc(&[&["generate", pkg][..], &prompt].concat());
        assert!(o.status.success(), "{quant}: {}", stderr(&o));
        let reference = ["generate", model, "--backend", "reference"];
        let want = slmcc(&[&reference[..], &quantized, &prompt].concat());
        assert!(want.status.success(), "{quant}: {}", stderr(&want));
        assert_eq!(stdout(&o).split_whitespace().count(), 24, "{quant}");
        assert_eq!(stdout(&o), stdout(&want), "{quant}: cpu and reference");
    }
}

/// `slmcc generate testdata/models/llama.onnx --max-new-tokens 8` with
/// the prompt arguments `prompt`; its output.
fn generate_llama(prompt: &[&str], quiet: bool) -> std::process::Output {
    let mut args = vec![
        "generate",
        "testdata/models/llama.onnx",
        "--max-new-tokens",
        "8",
    ];
    args.extend_from_slice(prompt);
    if quiet {
        args.push("--quiet");
    }
    let o = slmcc(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

#[test]
fn a_text_prompt_goes_through_the_tokenizer() {
    // `testdata/tokenizers/README.md`: the Python `tokenizers` library
    // encodes "Hello world" as [42, 71, 286, 81, 436, 278].
    let text = [
        "--prompt",
        "Hello world",
        "--tokenizer",
        "testdata/tokenizers/tiny-bpe.json",
    ];
    let by_text = generate_llama(&text, true);
    let by_ids = generate_llama(&["--prompt-ids", "42,71,286,81,436,278"], true);
    assert_eq!(stdout(&by_text), stdout(&by_ids));
    // Streaming with the tokenizer prints the text of the generated ids
    // (piece by piece, as characters complete), and the timing on stderr.
    let o = generate_llama(&text, false);
    assert!(stderr(&o).contains("time to first token"), "{}", stderr(&o));
    let t =
        tokenizers::Tokenizer::from_file(repo().join("testdata/tokenizers/tiny-bpe.json")).unwrap();
    let ids: Vec<u32> = stdout(&by_text)
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    let want = t.decode(&ids, true).unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("{want}\n"));
}

/// `--profile` on `generate` and `run`: the results stay those of a run
/// without it, and stderr holds the per-op table (the quantized products
/// among the ops), the slowest nodes, both phases' rates (`generate`) and
/// the peak memory; the reference interpreter, which has no kernels to
/// time, is refused.
#[test]
fn profile_reports_ops_phases_and_memory() {
    let dir = tempdir();
    let model = repo().join("testdata/models/qwen2.onnx");
    let model = model.to_str().unwrap();
    let pkg = dir.join("profile-w4a8.slmpkg");
    let pkg = pkg.to_str().unwrap();
    let o = slmcc(&[
        "compile",
        model,
        "--target",
        "cpu",
        "--quant",
        "w4a8",
        "--kv-cache",
        "--buckets",
        "16",
        "-o",
        pkg,
    ]);
    assert!(o.status.success(), "compile: {}", stderr(&o));
    let args = [
        "generate",
        pkg,
        "--prompt-ids",
        "3,1,4,1,5",
        "--max-new-tokens",
        "8",
    ];
    let plain = slmcc(&args);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let profiled = slmcc(&[&args[..], &["--profile"]].concat());
    assert!(profiled.status.success(), "{}", stderr(&profiled));
    assert_eq!(
        stdout(&profiled),
        stdout(&plain),
        "--profile changed the tokens"
    );
    let err = stderr(&profiled);
    for want in [
        "profile (wall time of every kernel call)",
        "\nqmatmul ",
        "\nqswiglu ",
        "slowest nodes:",
        "prefill: 5 tokens in ",
        "decode: 7 steps in ",
        "peak memory (resident): ",
    ] {
        assert!(err.contains(want), "no `{want}` in:\n{err}");
    }

    let plain_pkg = dir.join("profile-f32.slmpkg");
    let plain_pkg = plain_pkg.to_str().unwrap();
    let o = slmcc(&[
        "compile",
        model,
        "--target",
        "cpu",
        "--buckets",
        "16",
        "-o",
        plain_pkg,
    ]);
    assert!(o.status.success(), "compile: {}", stderr(&o));
    let input = repo().join("goldens/qwen2/seq11/input_ids.npy");
    let input = format!("input_ids={}", input.display());
    let run = ["run", plain_pkg, "--input", input.as_str()];
    let plain = slmcc(&run);
    let profiled = slmcc(&[&run[..], &["--profile"]].concat());
    assert!(profiled.status.success(), "{}", stderr(&profiled));
    assert_eq!(stdout(&profiled), stdout(&plain));
    let err = stderr(&profiled);
    assert!(
        err.contains("\nmatmul ") && err.contains("\nrun: "),
        "{err}"
    );

    let refused = slmcc(&[
        "generate",
        model,
        "--backend",
        "reference",
        "--prompt-ids",
        "1,2",
        "--profile",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--profile times kernels"));
}

/// The bytes that `--profile` reports for one op kind (its "MB moved"
/// column), or 0 when no such row is printed.
fn profiled_mb(err: &str, op: &str) -> f64 {
    err.lines()
        .find(|l| l.split_whitespace().next() == Some(op))
        .map_or(0.0, |l| {
            l.split_whitespace().nth(4).unwrap().parse().unwrap()
        })
}

/// `--kv-dtype f16`: attention reads the cache as stored, so it moves half
/// the bytes of an `f32` cache, no `cast` converts the cache at each step,
/// and the tokens are those of the `f32` cache on this model. `--kv-dtype
/// i8` reads its q8 rows as stored too.
#[test]
fn an_f16_cache_is_read_as_stored() {
    let model = repo().join("testdata/models/llama.onnx");
    let generate = |dtype: &str| {
        let o = slmcc(&[
            "generate",
            model.to_str().unwrap(),
            "--prompt-ids",
            "3,1,4,1,5",
            "--max-new-tokens",
            "24",
            "--max-context",
            "256",
            "--kv-dtype",
            dtype,
            "--profile",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        (stdout(&o), stderr(&o))
    };
    let (f32_tokens, f32_profile) = generate("f32");
    let (f16_tokens, f16_profile) = generate("f16");
    assert_eq!(f16_tokens, f32_tokens);
    let (wide, half) = (
        profiled_mb(&f32_profile, "attention"),
        profiled_mb(&f16_profile, "attention"),
    );
    assert!(
        wide > 0.0 && (half / wide - 0.5).abs() < 0.02,
        "attention MB: f32 {wide}, f16 {half}"
    );
    let casts = profiled_mb(&f16_profile, "cast");
    assert!(
        casts < 0.01 * half,
        "cast MB {casts} beside attention {half}:\n{f16_profile}"
    );
    // An INT8 cache: a row of this model's 16-wide heads is 16 bytes and
    // its 4-byte scale, 20/32 of the f16 row; still no cast.
    let (_, i8_profile) = generate("i8");
    let q8 = profiled_mb(&i8_profile, "attention");
    assert!(
        (q8 / half - 0.625).abs() < 0.02,
        "attention MB: f16 {half}, i8 {q8}"
    );
    assert!(profiled_mb(&i8_profile, "cast") < 0.01 * q8, "{i8_profile}");
}
