//! `slmcc-bench`: prefill latency of slmcc's cpu backend against
//! onnxruntime and tract on the same ONNX models, one table.
//!
//! For every model and prefill length the same token ids (seeded) go
//! through three engines, each timed on the step alone (loading and
//! compiling are not timed; warm-up runs first, then the median of the
//! timed runs):
//!
//! - slmcc: the compiler's pipeline with one bucket per length, the planned
//!   arena and the JIT kernels, one `PlannedBuckets::step` ([`slmcc_engine`]);
//! - onnxruntime, from Python (`bench/ort_bench.py`, [`ort`]), whose logits
//!   are the reference;
//! - tract (`tract-onnx`, [`tract_engine`]).
//!
//! slmcc's and tract's logits are compared with onnxruntime's before they
//! are timed: slmcc beyond `--tolerance` is not timed at all and the run
//! fails. `--profile` adds slmcc's time per op kind and its slowest nodes.
//! `scripts/bench` builds and runs this; see `bench/README.md`.

mod measure;
mod ort;
mod slmcc_engine;
mod tract_engine;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use slmcc_ir::Tensor;

use measure::{measure, Policy, Timing};
use slmcc_engine::{Profile, SlmccModel};
use tract_engine::TractModel;

/// The models `--models` names by default (the tiny exports, then the
/// benchmark-sized Llama).
const DEFAULT_MODELS: &str = "llama,qwen2,phi3,gpt2,llama_h512";
/// The version requirement of `tract-onnx` in `bench/Cargo.toml`.
const TRACT_VERSION: &str = "0.23";
/// How to make the models under `testdata/generated/` that need torch.
const GENERATE_HINT: &str = "generate it with `python testdata/models/generate.py --large` \
     in a venv with testdata/requirements-gen.txt (torch)";

/// Prefill latency of slmcc (cpu) against onnxruntime and tract.
#[derive(Parser, Debug)]
#[command(name = "slmcc-bench", version)]
struct Args {
    /// Models: names under testdata/models/ or testdata/generated/ (`llama`,
    /// `llama_h512`) or paths to .onnx files.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_MODELS)]
    models: Vec<String>,
    /// Prefill lengths (tokens).
    #[arg(long, value_delimiter = ',', default_value = "1,32,128,512")]
    lens: Vec<usize>,
    /// Threads for every engine.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Engines to run (onnxruntime's logits are the reference: without
    /// `ort` nothing is checked).
    #[arg(long, value_delimiter = ',', default_value = "slmcc,ort,tract")]
    engines: Vec<String>,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// At least this many timed runs...
    #[arg(long, default_value_t = 10)]
    min_runs: usize,
    /// ...and at least this many seconds of them...
    #[arg(long, default_value_t = 1.0)]
    min_time: f64,
    /// ...but no more runs than this.
    #[arg(long, default_value_t = 10_000)]
    max_runs: usize,
    /// Seed of the token ids.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Largest relative error of slmcc's logits against onnxruntime's
    /// (max |x - ort| / max |ort|) that is still timed.
    #[arg(long, default_value_t = 1e-4)]
    tolerance: f64,
    /// Also print slmcc's time per op kind and its slowest nodes.
    #[arg(long)]
    profile: bool,
    /// The Python with onnxruntime [default: ROOT/target/pyenv/bin/python].
    #[arg(long)]
    python: Option<PathBuf>,
    /// The repository [default: the parent of bench/].
    #[arg(long)]
    root: Option<PathBuf>,
}

/// Which engines run.
struct Engines {
    slmcc: bool,
    ort: bool,
    tract: bool,
}

impl Engines {
    fn parse(names: &[String]) -> anyhow::Result<Engines> {
        let mut e = Engines {
            slmcc: false,
            ort: false,
            tract: false,
        };
        for n in names {
            match n.as_str() {
                "slmcc" => e.slmcc = true,
                "ort" | "onnxruntime" => e.ort = true,
                "tract" => e.tract = true,
                _ => bail!("--engines: unknown engine `{n}` (valid: slmcc, ort, tract)"),
            }
        }
        Ok(e)
    }
}

/// A latency cell of the table.
#[derive(Clone, Debug)]
enum Cell {
    /// Not run.
    Skipped,
    /// Median milliseconds.
    Ms(f64),
    /// Median milliseconds on onnxruntime's constant-folded graph.
    Folded(f64),
    /// The engine failed (see the notes).
    Failed,
    /// The logits were wrong: not timed.
    Wrong,
}

impl Cell {
    fn ms(&self) -> Option<f64> {
        match self {
            Cell::Ms(v) | Cell::Folded(v) => Some(*v),
            _ => None,
        }
    }

    fn show(&self) -> String {
        match self {
            Cell::Skipped => "-".to_string(),
            Cell::Ms(v) => fmt_ms(*v),
            Cell::Folded(v) => format!("{}†", fmt_ms(*v)),
            Cell::Failed => "failed".to_string(),
            Cell::Wrong => "WRONG".to_string(),
        }
    }
}

/// One row: a model at one length.
struct Row {
    model: String,
    len: usize,
    slmcc: Cell,
    ort: Cell,
    tract: Cell,
    slmcc_err: Option<f64>,
    tract_err: Option<f64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the benchmark; `Ok(false)` when a check failed (wrong logits, an
/// engine of ours failed).
fn run(args: &Args) -> anyhow::Result<bool> {
    let engines = Engines::parse(&args.engines)?;
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    if args.lens.is_empty() || args.lens.contains(&0) {
        bail!("--lens: expected positive lengths, e.g. 1,32,128");
    }
    if !(args.min_time >= 0.0 && args.min_time.is_finite()) {
        bail!("--min-time: expected a non-negative number of seconds");
    }
    let mut lens = args.lens.clone();
    lens.sort_unstable();
    lens.dedup();
    let root = match &args.root {
        Some(r) => r.clone(),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| anyhow!("cannot find the repository (pass --root)"))?,
    };
    let python = args
        .python
        .clone()
        .unwrap_or_else(|| root.join("target/pyenv/bin/python"));
    let script = root.join("bench/ort_bench.py");
    let models = args
        .models
        .iter()
        .map(|m| resolve_model(&root, m))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let policy = Policy {
        warmup: args.warmup,
        min_runs: args.min_runs,
        min_time: Duration::from_secs_f64(args.min_time),
        max_runs: args.max_runs,
    };

    let mut notes: Vec<String> = Vec::new();
    let (slmcc_options, slmcc_threads) = slmcc_engine::cpu_options(args.threads);
    if let Some(note) = &slmcc_threads {
        notes.push(note.clone());
    }
    let tract_threads = tract_engine::set_threads(args.threads);
    let scratch = ScratchDir::new()?;
    let dir = scratch.0.clone();
    let mut rows: Vec<Row> = Vec::new();
    let mut profiles = String::new();
    let mut ok = true;
    let mut ort_version = None;
    // Models tract could not load as exported, with the first error.
    let mut tract_fallbacks: Vec<(String, String)> = Vec::new();
    let load = busy_cores();
    if let Some(l) = load.filter(|&l| l > 0.25) {
        notes.push(format!(
            "other processes kept {l:.1} cores busy when the benchmark started: \
             times may be inflated"
        ));
    }

    for (name, path) in &models {
        eprintln!("== {name} ({})", path.display());
        let vocab = logits_vocab(path)?;
        let all_ids = token_ids(args.seed, *lens.last().expect("non-empty"), vocab);
        for &len in &lens {
            let t = Tensor::from_i64(vec![1, len], all_ids[..len].to_vec());
            let p = dir.join(format!("ids_{len}.npy"));
            slmcc_runtime::npy::write(&p, &t).map_err(|e| anyhow!("{}: {e}", p.display()))?;
        }
        let mut model_rows: Vec<Row> = lens
            .iter()
            .map(|&len| Row {
                model: name.clone(),
                len,
                slmcc: Cell::Skipped,
                ort: Cell::Skipped,
                tract: Cell::Skipped,
                slmcc_err: None,
                tract_err: None,
            })
            .collect();

        // onnxruntime first: its logits are the reference.
        let mut reference: Vec<Option<Tensor>> = vec![None; lens.len()];
        if engines.ort {
            let t = Instant::now();
            match ort::run(&python, &script, path, &dir, &lens, args.threads, &policy) {
                Ok(run) => {
                    ort_version = Some(run.version);
                    for (len, r) in run.results {
                        if let Some(i) = lens.iter().position(|&l| l == len) {
                            model_rows[i].ort = Cell::Ms(r.median_ms);
                            eprintln!(
                                "   onnxruntime  len {len:>4}: {} ms (median of {})",
                                fmt_ms(r.median_ms),
                                r.runs
                            );
                            reference[i] = Some(r.logits);
                        }
                    }
                }
                Err(e) => {
                    notes.push(format!("{name}: {e:#}"));
                    model_rows.iter_mut().for_each(|r| r.ort = Cell::Failed);
                    ok = false;
                }
            }
            eprintln!("   onnxruntime done in {:.1} s", t.elapsed().as_secs_f64());
        }

        if engines.slmcc {
            let t = Instant::now();
            let loaded = slmcc_engine::prepare(path, &lens)
                .and_then(|p| Ok((SlmccModel::load(&p, &slmcc_options)?, p)));
            match loaded {
                Ok((mut model, prepared)) => {
                    eprintln!(
                        "   slmcc: imported, fused, planned and compiled {} bucket(s) in {:.1} s",
                        lens.len(),
                        t.elapsed().as_secs_f64()
                    );
                    for (i, &len) in lens.iter().enumerate() {
                        let row = &mut model_rows[i];
                        match bench_slmcc(
                            &mut model,
                            &all_ids[..len],
                            reference[i].as_ref(),
                            args.tolerance,
                            &policy,
                        ) {
                            Ok((cell, err)) => {
                                if matches!(cell, Cell::Wrong) {
                                    ok = false;
                                    notes.push(format!(
                                        "{name} at {len}: slmcc's logits differ from onnxruntime's by {} (> --tolerance {}): not timed",
                                        fmt_err(err), args.tolerance
                                    ));
                                }
                                eprintln!("   slmcc        len {len:>4}: {}", cell.show());
                                row.slmcc = cell;
                                row.slmcc_err = err;
                            }
                            Err(e) => {
                                ok = false;
                                notes.push(format!("{name} at {len}: {e:#}"));
                                row.slmcc = Cell::Failed;
                            }
                        }
                    }
                    drop(model);
                    if args.profile {
                        match profile_slmcc(
                            name,
                            &prepared,
                            &all_ids,
                            &lens,
                            &policy,
                            &slmcc_options,
                        ) {
                            Ok(text) => profiles.push_str(&text),
                            Err(e) => notes.push(format!("{name}: profile: {e:#}")),
                        }
                    }
                }
                Err(e) => {
                    ok = false;
                    notes.push(format!("{name}: {e:#}"));
                    model_rows.iter_mut().for_each(|r| r.slmcc = Cell::Failed);
                }
            }
        }

        if engines.tract {
            // tract cannot evaluate some exports' shape arithmetic (the
            // dynamo exporter's causal mask: CumSum over shape values); it
            // then runs on onnxruntime's constant-folded graph instead.
            let mut folded = false;
            for (i, &len) in lens.iter().enumerate() {
                let ids = &all_ids[..len];
                let mut result = Err(anyhow!("not run"));
                if !folded {
                    result = bench_tract(path, ids, reference[i].as_ref(), &policy);
                    if let Err(e) = &result {
                        tract_fallbacks.push((name.clone(), format!("{e:#}")));
                        folded = true;
                    }
                }
                if folded {
                    let out = dir.join(format!("folded_{len}.onnx"));
                    result = ort::fold(&python, &script, path, len, &out)
                        .and_then(|()| bench_tract(&out, ids, reference[i].as_ref(), &policy));
                }
                let row = &mut model_rows[i];
                match result {
                    Ok((timing, err)) => {
                        eprintln!(
                            "   tract        len {len:>4}: {} ms (median of {}){}",
                            fmt_ms(timing.median_ms()),
                            timing.runs,
                            if folded { ", folded graph" } else { "" }
                        );
                        row.tract = if folded {
                            Cell::Folded(timing.median_ms())
                        } else {
                            Cell::Ms(timing.median_ms())
                        };
                        row.tract_err = err;
                        if err.is_some_and(|e| e.is_nan() || e > args.tolerance) {
                            notes.push(format!(
                                "{name} at {len}: tract's logits differ from onnxruntime's by {}",
                                fmt_err(err)
                            ));
                        }
                    }
                    Err(e) => {
                        notes.push(format!("{name} at {len}: {e:#}"));
                        row.tract = Cell::Failed;
                    }
                }
            }
        }
        rows.extend(model_rows);
    }
    drop(scratch);
    if let Some((first, error)) = tract_fallbacks.first() {
        let names: Vec<&str> = tract_fallbacks.iter().map(|(n, _)| n.as_str()).collect();
        notes.push(format!(
            "tract cannot load the export of {} ({first}: {error}); its times there (†) are on \
             the graph onnxruntime's basic optimisations (ORT_ENABLE_BASIC: constant folding) \
             give with the input fixed to each length",
            names.join(", ")
        ));
    }

    let header = Header {
        threads: args.threads,
        ort: ort_version,
        tract: tract_threads,
        slmcc: slmcc_threads,
        policy,
        tolerance: args.tolerance,
        load,
    };
    print!("{}", table(&header, &rows, &notes));
    if !profiles.is_empty() {
        print!("{profiles}");
    }
    Ok(ok)
}

/// `llama` → `ROOT/testdata/models/llama.onnx` (or `testdata/generated/`);
/// a path as is.
fn resolve_model(root: &Path, name: &str) -> anyhow::Result<(String, PathBuf)> {
    if name.ends_with(".onnx") || name.contains('/') {
        let p = PathBuf::from(name);
        if !p.is_file() {
            bail!("model {}: no such file", p.display());
        }
        let stem = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| name.to_string());
        return Ok((stem, p));
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        bail!("--models: `{name}` is neither a model name (letters, digits, _) nor a .onnx path");
    }
    for folder in ["testdata/models", "testdata/generated"] {
        let p = root.join(folder).join(format!("{name}.onnx"));
        if p.is_file() {
            return Ok((name.to_string(), p));
        }
    }
    bail!(
        "model `{name}`: neither testdata/models/{name}.onnx nor testdata/generated/{name}.onnx exists{}",
        if name == "llama_h512" {
            format!(" ({GENERATE_HINT})")
        } else {
            String::new()
        }
    )
}

/// The vocabulary of a decoder: the last dim of its first output (the
/// logits, `[1, seq, vocab]`), read from the ONNX file.
fn logits_vocab(path: &Path) -> anyhow::Result<usize> {
    let module = slmcc::onnx::import_model(path)
        .with_context(|| format!("cannot import {}", path.display()))?;
    let g = module
        .graph("main")
        .or(module.graphs.first())
        .ok_or_else(|| anyhow!("{}: no graph", path.display()))?;
    let out = g
        .outputs
        .first()
        .ok_or_else(|| anyhow!("{}: the graph has no output", path.display()))?;
    let ty = g.ty(*out);
    ty.shape
        .dims()
        .last()
        .and_then(|d| d.as_fixed())
        .filter(|&v| v > 0)
        .map(|v| v as usize)
        .ok_or_else(|| {
            anyhow!(
                "{}: first output {ty} is not [.., vocab] logits",
                path.display()
            )
        })
}

/// `n` token ids in `[0, vocab)` from `seed` (splitmix64): the same on every
/// machine, for every engine.
fn token_ids(seed: u64, n: usize, vocab: usize) -> Vec<i64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z % vocab as u64) as i64
        })
        .collect()
}

/// A folder for the ids, onnxruntime's logits and folded models, unique to
/// this run and removed with it.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> anyhow::Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!("slmcc-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Checks slmcc's logits against the reference, then times the step.
fn bench_slmcc(
    model: &mut SlmccModel,
    ids: &[i64],
    reference: Option<&Tensor>,
    tolerance: f64,
    policy: &Policy,
) -> anyhow::Result<(Cell, Option<f64>)> {
    let mut buf = model.buffers(ids);
    model.run_step(&mut buf)?;
    let err = match reference {
        Some(r) => Some(rel_err(&model.logits(&buf)?, r)?),
        None => None,
    };
    if err.is_some_and(|e| e.is_nan() || e > tolerance) {
        return Ok((Cell::Wrong, err));
    }
    let timing = measure(policy, || model.run_step(&mut buf))?;
    Ok((Cell::Ms(timing.median_ms()), err))
}

/// Loads tract for this length, checks its logits, times its step.
fn bench_tract(
    path: &Path,
    ids: &[i64],
    reference: Option<&Tensor>,
    policy: &Policy,
) -> anyhow::Result<(Timing, Option<f64>)> {
    let mut model = TractModel::load(path, ids)?;
    model.run_step()?;
    let err = match reference {
        Some(r) => Some(rel_err(&model.logits()?, r)?),
        None => None,
    };
    let timing = measure(policy, || model.run_step())?;
    Ok((timing, err))
}

/// The golden checks' measure: max |x - r| / max(max |r|, 1e-6).
fn rel_err(x: &Tensor, reference: &Tensor) -> anyhow::Result<f64> {
    let d = slmcc_runtime::compare::diff(x, reference)
        .map_err(|e| anyhow!("comparing the logits with onnxruntime's: {e}"))?;
    if d.mismatched_specials > 0 {
        return Ok(f64::NAN);
    }
    Ok(d.max_rel)
}

/// slmcc's time per op kind and its slowest nodes, per length, as text.
fn profile_slmcc(
    name: &str,
    prepared: &slmcc_engine::Prepared,
    ids: &[i64],
    lens: &[usize],
    policy: &Policy,
    options: &slmcc_backends::cpu::CpuOptions,
) -> anyhow::Result<String> {
    let profile = Profile::default();
    let mut model = SlmccModel::load_profiled(prepared, &profile, options)?;
    let mut out = String::new();
    for &len in lens {
        let graph = model.bucket_graph(len)?.to_string();
        let mut buf = model.buffers(&ids[..len]);
        for _ in 0..policy.warmup {
            model.run_step(&mut buf)?;
        }
        profile.reset(&graph);
        let timing = measure(
            &Policy {
                warmup: 0,
                ..*policy
            },
            || model.run_step(&mut buf),
        )?;
        let b = profile.breakdown(&graph, timing.runs)?;
        let step = timing.mean;
        let _ = writeln!(
            out,
            "\n### slmcc profile: {name}, prefill {len} (@{graph})\n\n\
             Means over {} steps with every kernel timed: step {} ms, kernels {} ms; \
             the rest ({} ms) is copying the ids in and the logits out, and dispatch.\n",
            timing.runs,
            fmt_ms(ms(step)),
            fmt_ms(ms(b.kernels)),
            fmt_ms(ms(step.saturating_sub(b.kernels))),
        );
        let _ = writeln!(out, "| op | nodes | ms | % of kernels |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        for (op, n, t) in &b.by_op {
            let _ = writeln!(
                out,
                "| {op} | {n} | {} | {:.1} |",
                fmt_ms(ms(*t)),
                pct(*t, b.kernels)
            );
        }
        let _ = writeln!(out, "\nSlowest nodes:\n");
        let _ = writeln!(out, "| node | op | result | ms | % of kernels |");
        let _ = writeln!(out, "|---|---|---|---:|---:|");
        for (label, op, ty, t) in b.by_node.iter().take(10) {
            let _ = writeln!(
                out,
                "| `{label}` | {op} | `{ty}` | {} | {:.1} |",
                fmt_ms(ms(*t)),
                pct(*t, b.kernels)
            );
        }
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pct(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        100.0 * part.as_secs_f64() / whole.as_secs_f64()
    }
}

/// Milliseconds with three significant digits or so.
fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn fmt_err(e: Option<f64>) -> String {
    match e {
        Some(e) if e.is_nan() => "NaN/inf".to_string(),
        Some(e) => format!("{e:.1e}"),
        None => "-".to_string(),
    }
}

fn fmt_ratio(a: &Cell, b: &Cell) -> String {
    match (a.ms(), b.ms()) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_string(),
    }
}

/// What the table header states.
struct Header {
    threads: usize,
    ort: Option<String>,
    tract: String,
    slmcc: Option<String>,
    policy: Policy,
    tolerance: f64,
    /// How many cores other processes kept busy when the benchmark started.
    load: Option<f64>,
}

/// The table (Markdown), its header and notes.
fn table(h: &Header, rows: &[Row], notes: &[String]) -> String {
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(
        out,
        "\n## Prefill latency, {} ({} UTC, {}, {cores} cores; other processes: {} cores busy at the start)\n",
        threads(h.threads),
        today(),
        cpu_model(),
        h.load.map_or("?".to_string(), |l| format!("{l:.1}")),
    );
    let _ = writeln!(
        out,
        "slmcc: cpu backend, planned arena, kernels compiled at load{}; onnxruntime {}: intra_op = inter_op = {}, \
         ORT_ENABLE_ALL; tract-onnx {TRACT_VERSION}: {}.  ",
        match &h.slmcc {
            Some(note) => format!(" ({note})"),
            None => format!(", {}", threads(h.threads)),
        },
        h.ort.as_deref().unwrap_or("(not run)"),
        h.threads,
        h.tract.trim_start_matches("tract: "),
    );
    let _ = writeln!(
        out,
        "Median of at least {} runs and {:.1} s after {} warm-up runs; ratio < 1: slmcc is faster; \
         err: max |x - ort| / max |ort| over the logits (slmcc is not timed beyond {:.0e}).\n",
        h.policy.min_runs,
        h.policy.min_time.as_secs_f64(),
        h.policy.warmup,
        h.tolerance,
    );
    let _ = writeln!(
        out,
        "| model | len | slmcc ms | ort ms | tract ms | slmcc/ort | slmcc/tract | slmcc err | tract err |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.model,
            r.len,
            r.slmcc.show(),
            r.ort.show(),
            r.tract.show(),
            fmt_ratio(&r.slmcc, &r.ort),
            fmt_ratio(&r.slmcc, &r.tract),
            fmt_err(r.slmcc_err),
            fmt_err(r.tract_err),
        );
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\nNotes:\n");
        for n in notes {
            let _ = writeln!(out, "- {}", n.replace('\n', " "));
        }
    }
    out
}

fn threads(n: usize) -> String {
    if n == 1 {
        "1 thread".to_string()
    } else {
        format!("{n} threads")
    }
}

/// How many cores other processes kept busy over half a second, from
/// /proc/stat (before the benchmark starts anything).
fn busy_cores() -> Option<f64> {
    fn sample() -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
        Some((v.iter().take(8).sum(), idle))
    }
    let (t0, i0) = sample()?;
    std::thread::sleep(Duration::from_millis(500));
    let (t1, i1) = sample()?;
    let (dt, di) = (t1.checked_sub(t0)?, i1.checked_sub(i0)?);
    if dt == 0 {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some((1.0 - di as f64 / dt as f64) * cores as f64)
}

/// The CPU's model name, from /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Today's date (UTC), `YYYY-MM-DD`.
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn ids_are_seeded_and_in_range() {
        let a = token_ids(7, 100, 512);
        assert_eq!(a, token_ids(7, 100, 512));
        assert_ne!(a, token_ids(8, 100, 512));
        assert!(a.iter().all(|&i| (0..512).contains(&i)));
    }

    #[test]
    fn names_resolve_or_say_how_to_get_the_model() {
        let root = Path::new("/nonexistent");
        let e = resolve_model(root, "llama_h512").unwrap_err().to_string();
        assert!(e.contains("generate.py --large"), "{e}");
        assert!(resolve_model(root, "../x").is_err());
    }
}
