//! Decode benchmark: the latency of one token-by-token step of slmcc's cpu
//! decoder against onnxruntime running the same model exported with past
//! key values, and both against the memory-bandwidth roofline.
//!
//! Run it with `scripts/bench-decode` (which makes sure the venv and the
//! generated models exist), or directly:
//!
//! ```text
//! cargo run --release --example decode_bench -p slmcc -- \
//!     --models llama_h512,qwen2,llama --threads 2 --steps 64
//! ```
//!
//! Per model:
//!
//! - **slmcc cpu**: the ONNX model without past (`testdata/models/M.onnx`
//!   or `testdata/generated/M.onnx`) prepared as `slmcc generate` prepares
//!   it — the fusion pipeline, `kv-cache{max-context=...}`,
//!   `bucket-specialize` to the prefill buckets plus bucket 1 and
//!   `plan-memory` — and loaded into a [`Decoder::planned`] with JIT kernels
//!   (default [`CpuOptions`]). Only `decoder.step(&[token])` is timed.
//! - **onnxruntime**: `bench/ort_decode.py` on `testdata/generated/M_past.onnx`
//!   (the same weights exported with past key values), which feeds each
//!   step's `present` back as the next past and prints JSON that this
//!   program reads.
//! - **DDR roofline**: the weight bytes one decode step must read (see
//!   `WeightBytes`) over the read bandwidth of a buffer of at least 1 GiB
//!   measured at the start and at the end of the same run, the better
//!   (`Bandwidth`): the shortest
//!   step DRAM allows. Weights that fit in the last-level cache (the tiny
//!   models), or partly fit, read faster; the **re-read bound** divides by
//!   the bandwidth of reading a buffer of the weights' size again and
//!   again, as decode does (`reread_bandwidth`).
//!
//! Both engines prefill the same prompt (`--prompt-len` ids from a fixed
//! generator), then decode greedily; one untimed pass (prefill and
//! `--warmup` steps) precedes the timed one, which restarts at position 0,
//! prefills again and times `--steps` steps at positions `prompt-len ..
//! prompt-len + steps - 1`. `--rounds` alternate the two engines and pool
//! their steps (the machine may be shared and noisy: medians and ratios
//! are what to read). The greedy tokens of the two engines are compared
//! ("tokens agree"). With `--profile`, the decode graph is loaded a second
//! time with every kernel timed, and the time per op kind and the slowest
//! nodes of one step are printed.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::{DType, Graph, Module, Op, OpDef, ValueDef};
use slmcc_passes::transforms::bucket_specialize::parse_buckets;
use slmcc_runtime::decode::{bucket_graphs, DecodeError, Decoder};
use slmcc_runtime::exec::KernelSet;
use slmcc_runtime::jit::JitKernels;
use slmcc_runtime::timed::{Recorder, TimedKernels};

use slmcc::pipeline::{BucketSpec, PackTarget, Pipeline, QuantizeOptions};
use slmcc_passes::transforms::kv_cache::KvCacheOptions;

#[derive(Parser, Debug)]
#[command(
    about = "Decode step latency: slmcc cpu vs onnxruntime (past key values) vs the DDR roofline"
)]
struct Args {
    /// Models by name: M.onnx is looked up in testdata/models/ then
    /// testdata/generated/, M_past.onnx in testdata/generated/.
    #[arg(long, value_delimiter = ',', default_value = "llama_h512,qwen2,llama")]
    models: Vec<String>,
    /// Threads for slmcc's kernels (`CpuOptions::threads`), for
    /// onnxruntime's intra-op pool, and for the multi-threaded bandwidth test.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Timed one-token steps per engine and model.
    #[arg(long, default_value_t = 64)]
    steps: usize,
    /// Rounds: each runs slmcc's timed pass, then onnxruntime's (a fresh
    /// process); the statistics pool the steps of every round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Untimed steps of the warm-up pass.
    #[arg(long, default_value_t = 8)]
    warmup: usize,
    /// Prompt length: the timed steps run at positions prompt-len.. .
    #[arg(long, default_value_t = 32)]
    prompt_len: usize,
    /// slmcc's KV cache slots per layer (`slmcc generate --max-context`).
    #[arg(long, default_value_t = 1024)]
    max_context: i64,
    /// slmcc's prefill buckets (`slmcc generate --buckets`); bucket 1 is added.
    #[arg(long, default_value = "16,64")]
    buckets: String,
    /// The Python with onnxruntime (the venv scripts/test creates).
    #[arg(long, default_value = "target/pyenv/bin/python")]
    python: PathBuf,
    /// The Python that runs onnxruntime's 4-bit quantizer (it needs
    /// `onnx_ir` and `ml_dtypes` beside onnxruntime: scripts/bench-decode
    /// passes the generator venv's).
    #[arg(long, default_value = "target/pyenv/bin/python")]
    q4_python: PathBuf,
    /// The onnxruntime side.
    #[arg(long, default_value = "bench/ort_decode.py")]
    ort_script: PathBuf,
    /// Skip onnxruntime.
    #[arg(long)]
    no_ort: bool,
    /// Size of the bandwidth test's buffer, in MiB (at least 1024 for a
    /// meaningful DDR figure).
    #[arg(long, default_value_t = 1024)]
    bandwidth_mib: usize,
    /// Also time every kernel of the decode graph and print a breakdown.
    #[arg(long)]
    profile: bool,
    /// slmcc's weight schemes, each a decoder of its own: `none` (f32),
    /// `w8a8`, `w4a8`, weight-only `w8`, `w4` (`slmcc compile --quant`;
    /// INT4 groups of `--quant-group`).
    #[arg(long, value_delimiter = ',', default_value = "none,w8a8,w4a8,w8,w4")]
    quant: Vec<String>,
    /// The INT4 group of slmcc's `w4a8` and `w4`.
    #[arg(long, default_value_t = 32)]
    quant_group: usize,
    /// Keep slmcc's LM head in f32 (`slmcc compile`'s default); without
    /// it the head is quantized too, as onnxruntime's 4-bit model has it.
    #[arg(long)]
    keep_lm_head: bool,
    /// Skip onnxruntime's 4-bit model (`MatMulNBits`, made by
    /// `bench/ort_quantize_q4.py` with blocks of `--quant-group`).
    #[arg(long)]
    no_ort_q4: bool,
    /// The repository root (where testdata/ is).
    #[arg(long, default_value = ".")]
    root: PathBuf,
}

/// The benchmark-size models of `generate.py --large NAME` (written to
/// testdata/generated/, not committed); the others are the tiny test models.
const LARGE_MODELS: [&str; 2] = ["llama_h512", "llama_1b"];

/// Highest position + 1 each test model's export supports
/// (`max_position_embeddings`, see testdata/models/export_with_past.py).
fn max_positions(model: &str) -> usize {
    if LARGE_MODELS.contains(&model) {
        512
    } else {
        128
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    if args.threads == 0 || args.steps == 0 || args.prompt_len == 0 || args.rounds == 0 {
        bail!("--threads, --steps, --rounds and --prompt-len must be at least 1");
    }
    if args.max_context < 1 {
        bail!("--max-context must be at least 1");
    }
    let date = utc_date();
    eprintln!(
        "measuring memory bandwidth ({} MiB buffer)...",
        args.bandwidth_mib
    );
    let first = Bandwidth::measure(args.bandwidth_mib, args.threads)?;

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mut profiles = Vec::new();
    for name in &args.models {
        eprintln!("{name}: preparing...");
        match bench_model(args, name) {
            Ok((row, note, profile)) => {
                rows.push(row);
                notes.extend(note);
                profiles.extend(profile);
            }
            Err(e) => notes.push(format!("{name}: skipped: {e:#}")),
        }
    }
    // Measured again at the end: the better of the two is the roofline (a
    // slow spell of a shared machine would otherwise lower it).
    eprintln!("measuring memory bandwidth again...");
    let bw = first.best(&Bandwidth::measure(args.bandwidth_mib, args.threads)?);
    for r in &mut rows {
        r.bandwidth = bw.roofline();
        // A buffer smaller than the DDR test's never reads slower but in
        // a slow spell of the machine.
        r.reread = r.reread.max(r.bandwidth);
    }

    println!(
        "decode benchmark, {date}, {} thread(s), prompt {} tokens, {} timed steps per round \
         (positions {}..{}{}) after {} warm-up steps, {} round(s) alternating the engines; slmcc \
         max-context {}",
        args.threads,
        args.prompt_len,
        args.steps,
        args.prompt_len,
        args.prompt_len + args.steps - 1,
        if notes.iter().any(|n| n.contains("timed steps, not")) {
            "; fewer where a note says so"
        } else {
            ""
        },
        args.warmup,
        args.rounds,
        args.max_context
    );
    println!(
        "memory bandwidth (read, best of 5 at the start and 5 at the end over {} MiB): \
         {:.1} GB/s on 1 thread, {:.1} GB/s on {} thread(s); copy {:.1} GB/s (read + write \
         bytes); roofline uses {:.1} GB/s",
        args.bandwidth_mib,
        bw.read_1 / 1e9,
        bw.read_n / 1e9,
        args.threads,
        bw.copy_n / 1e9,
        bw.roofline() / 1e9
    );
    let ort_version = rows.iter().find_map(|r| r.ort_version.clone());
    println!(
        "slmcc: Decoder::planned as `slmcc generate` builds it, only decoder.step(&[token]) timed; \
         onnxruntime {}: intra_op_num_threads {}, ORT_ENABLE_ALL, each step's present fed back \
         as past (it allocates the grown cache anew every step), only session.run timed",
        ort_version.as_deref().unwrap_or("(not run)"),
        args.threads,
    );
    println!(
        "slmcc w8a8/w4a8: `--quant` weights (INT4 groups of {g}; the LM head {head}), activations \
         INT8 per token; w8/w4: the same weights, f32 activations; onnxruntime 4-bit: MatMulNBits by its own MatMulNBitsQuantizer \
         (symmetric, blocks of {g}; bench/ort_quantize_q4.py). \"of DDR roofline\": the engine's \
         own weight bytes per step (onnxruntime 4-bit: estimated as half a byte per weight plus a \
         scale per block) over the DRAM read bandwidth; \"time / ORT\": median step time over \
         onnxruntime's (below 1: faster)",
        g = args.quant_group,
        head = if args.keep_lm_head {
            "kept f32"
        } else {
            "quantized too, as in onnxruntime's"
        }
    );
    println!();
    print_table(&rows);
    for n in &notes {
        println!("note: {n}");
    }
    for p in &profiles {
        println!();
        print!("{p}");
    }
    Ok(())
}

/// One model's results.
struct Row {
    model: String,
    /// The f32 model's weights (the roofline's bytes).
    weights: WeightBytes,
    kv: KvBytes,
    /// The bandwidth of DRAM reads (bytes/s), once measured.
    bandwidth: f64,
    /// The bandwidth of re-reading a buffer of the f32 weights' size.
    reread: f64,
    /// slmcc per weight scheme, then onnxruntime f32 and 4-bit.
    engines: Vec<Engine>,
    ort_version: Option<String>,
}

/// One engine's steps on one model.
struct Engine {
    label: String,
    /// Weight bytes one step reads.
    per_step: u64,
    stats: Result<Stats, String>,
    /// Its greedy tokens against the reference engine's (slmcc f32 for
    /// slmcc's schemes and onnxruntime f32; onnxruntime f32 for its 4-bit).
    agree: String,
    /// onnxruntime f32 or 4-bit (the ratios' denominators).
    ort: Option<OrtKind>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OrtKind {
    F32,
    Q4,
}

fn bench_model(args: &Args, name: &str) -> anyhow::Result<(Row, Option<String>, Option<String>)> {
    let root = &args.root;
    let plain = [
        root.join("testdata/models").join(format!("{name}.onnx")),
        root.join("testdata/generated").join(format!("{name}.onnx")),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .ok_or_else(|| {
        anyhow!(
            "no {name}.onnx in testdata/models/ or testdata/generated/ (llama_h512, \
             llama_1b: `python testdata/models/generate.py --large NAME`, or \
             scripts/bench-decode)"
        )
    })?;
    let past = root
        .join("testdata/generated")
        .join(format!("{name}_past.onnx"));

    let limit = max_positions(name);
    let mut note = None;
    let mut steps = args.steps;
    let longest = args.prompt_len + args.steps.max(args.warmup) + 1;
    if longest > limit {
        let room = limit.saturating_sub(args.prompt_len + 1);
        if room == 0 || args.warmup > room {
            bail!(
                "prompt {} + warm-up {} leave no room within its {limit} positions",
                args.prompt_len,
                args.warmup
            );
        }
        steps = room;
        note = Some(format!(
            "{name}: {steps} timed steps, not {}: the export holds {limit} positions",
            args.steps
        ));
    }
    let context = args.max_context as usize;
    if longest.min(limit) > context {
        bail!("--max-context {context} is shorter than prompt + steps ({longest})");
    }

    let mut variants = Vec::new();
    let imported = slmcc::onnx::import_model(&plain)
        .with_context(|| format!("slmcc: cannot import {}", plain.display()))?;
    // The f32 model's weights: the roofline's, and onnxruntime f32's.
    let f32_weights = WeightBytes::of(&imported)
        .with_context(|| format!("{}: counting the weights", plain.display()))?;
    for q in &args.quant {
        let quant = quant_options(q, args.quant_group)?.map(|o| QuantizeOptions {
            keep_lm_head: args.keep_lm_head,
            ..o
        });
        let (module, weights) = prepare(imported.clone(), &plain, args, quant)?;
        let decoder = planned_decoder(&module, args.threads, None)
            .map_err(|e| anyhow!("{}: {e}", plain.display()))?;
        variants.push((format!("slmcc cpu {q}"), module, weights, decoder));
    }
    let Some((_, module, _, first)) = variants.first() else {
        bail!("--quant names no scheme");
    };
    let vocab = first.vocab();
    let kv = KvBytes::of(module, args.prompt_len + steps / 2)?;
    let prompt = prompt_ids(args.prompt_len, vocab);
    // Measured before and after the rounds, the better kept.
    let reread_before = reread_bandwidth(f32_weights.per_step, args.threads);

    let export = if LARGE_MODELS.contains(&name) {
        format!("export_with_past.py --large {name}")
    } else {
        "export_with_past.py".to_string()
    };
    let mut peers: Vec<(OrtKind, Result<PathBuf, String>)> = Vec::new();
    if args.no_ort {
        peers.push((OrtKind::F32, Err("skipped (--no-ort)".to_string())));
    } else if !past.is_file() {
        peers.push((
            OrtKind::F32,
            Err(format!(
                "no {} (made by testdata/models/{export}; scripts/bench-decode runs it)",
                past.display()
            )),
        ));
    } else {
        peers.push((OrtKind::F32, Ok(past.clone())));
        if !args.no_ort_q4 {
            peers.push((OrtKind::Q4, ort_q4_model(args, &past, name)));
        }
    }
    let mut slmcc_ms = vec![Vec::new(); variants.len()];
    let mut slmcc_tokens = vec![Vec::new(); variants.len()];
    let mut ort_ms = vec![Vec::new(); peers.len()];
    let mut ort_tokens = vec![Vec::new(); peers.len()];
    let mut ort_version = None;
    // Rounds alternate the engines, so that the machine's slow spells fall
    // on all; the statistics pool every round's steps.
    for round in 1..=args.rounds {
        for (i, (label, _, _, decoder)) in variants.iter_mut().enumerate() {
            eprintln!(
                "{name}: round {round}/{}: {label}, {steps} steps...",
                args.rounds
            );
            greedy(decoder, &prompt, args.warmup, false)?;
            let (times, tokens) = greedy(decoder, &prompt, steps, true)?;
            slmcc_ms[i].extend(times);
            slmcc_tokens[i] = tokens;
        }
        for (i, (kind, model)) in peers.iter_mut().enumerate() {
            let Ok(path) = model else { continue };
            eprintln!(
                "{name}: round {round}/{}: onnxruntime {}, {steps} steps...",
                args.rounds,
                kind.label()
            );
            match run_ort(args, path, &prompt, steps) {
                Ok(run) => {
                    ort_ms[i].extend(run.times);
                    ort_version = Some(run.version);
                    ort_tokens[i] = run.tokens;
                }
                Err(e) => *model = Err(format!("{e:#}")),
            }
        }
    }
    let mut engines = Vec::new();
    let reference = &slmcc_tokens[0];
    for (i, (label, _, weights, _)) in variants.iter().enumerate() {
        let agree = if i == 0 {
            match peers.first() {
                Some((_, Ok(_))) => {
                    format!("{} (vs ORT f32)", agreement(reference, &ort_tokens[0]))
                }
                _ => "n/a".to_string(),
            }
        } else {
            format!("{} (vs f32)", agreement(&slmcc_tokens[i], reference))
        };
        engines.push(Engine {
            label: label.clone(),
            per_step: weights.per_step,
            stats: Ok(Stats::of(&slmcc_ms[i])),
            agree,
            ort: None,
        });
    }
    for (i, (kind, model)) in peers.iter().enumerate() {
        let agree = match (kind, model) {
            (OrtKind::Q4, Ok(_)) => {
                format!("{} (vs ORT f32)", agreement(&ort_tokens[i], &ort_tokens[0]))
            }
            _ => String::new(),
        };
        engines.push(Engine {
            label: format!("onnxruntime {}", kind.label()),
            per_step: match kind {
                OrtKind::F32 => f32_weights.per_step,
                OrtKind::Q4 => q4_bytes(&f32_weights),
            },
            stats: model
                .as_ref()
                .map(|_| Stats::of(&ort_ms[i]))
                .map_err(Clone::clone),
            agree,
            ort: Some(*kind),
        });
    }

    let profile = if args.profile {
        eprintln!("{name}: profiling the decode graph...");
        let (_, module, _, _) = &variants[0];
        let Ok(untimed) = &engines[0].stats else {
            unreachable!("slmcc's stats are always measured")
        };
        Some(profile(
            module,
            args.threads,
            name,
            &prompt,
            steps,
            untimed,
        )?)
    } else {
        None
    };
    drop(variants);
    let reread = reread_before.max(reread_bandwidth(f32_weights.per_step, args.threads));
    let row = Row {
        model: name.to_string(),
        weights: f32_weights,
        kv,
        bandwidth: f64::NAN, // once measured at the end
        reread,
        engines,
        ort_version,
    };
    Ok((row, note, profile))
}

impl OrtKind {
    fn label(self) -> &'static str {
        match self {
            OrtKind::F32 => "f32",
            OrtKind::Q4 => "4-bit",
        }
    }
}

/// The `quantize` options of scheme `q` (`none`, `w8a8`, `w4a8`, `w8`, `w4`).
fn quant_options(q: &str, group: usize) -> anyhow::Result<slmcc::pipeline::Quant> {
    Ok(match q {
        "none" => None,
        "w8a8" => Some(QuantizeOptions::int8()),
        "w4a8" => Some(QuantizeOptions::int4(group)),
        "w8" => Some(QuantizeOptions::int8().weight_only()),
        "w4" => Some(QuantizeOptions::int4(group).weight_only()),
        _ => bail!("--quant: unknown scheme `{q}` (none, w8a8, w4a8, w8, w4)"),
    })
}

/// The bytes of the f32 weights stored as onnxruntime's 4-bit blocks: the
/// matrices at half a byte per weight plus an f32 scale per 32 (an
/// estimate for the table: the norms and biases it keeps are small).
fn q4_bytes(w: &WeightBytes) -> u64 {
    w.per_step / 8 + w.per_step / 32
}

/// onnxruntime's 4-bit model of `past` (made once by
/// `bench/ort_quantize_q4.py`, kept in `target/bench/`).
fn ort_q4_model(args: &Args, past: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = args.root.join("target/bench");
    let out = dir.join(format!("{name}_past_q4_b{}.onnx", args.quant_group));
    let fresh = |p: &Path| -> Option<SystemTime> { p.metadata().ok()?.modified().ok() };
    if let (Some(a), Some(b)) = (fresh(&out), fresh(past)) {
        if a >= b {
            return Ok(out);
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    eprintln!(
        "{name}: quantizing {} with onnxruntime's MatMulNBitsQuantizer...",
        past.display()
    );
    let python = args.root.join(&args.q4_python);
    let script = args.root.join("bench/ort_quantize_q4.py");
    let o = Command::new(&python)
        .arg(&script)
        .arg("--model")
        .arg(past)
        .arg("--out")
        .arg(&out)
        .args(["--block-size", &args.quant_group.to_string()])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !o.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(out)
}

/// Runs on `module` (imported from `path`) the pipeline `slmcc generate`
/// runs for the cpu backend with weights `quant`, and counts the weight
/// bytes a step then reads.
fn prepare(
    mut module: Module,
    path: &Path,
    args: &Args,
    quant: slmcc::pipeline::Quant,
) -> anyhow::Result<(Module, WeightBytes)> {
    let sizes = parse_buckets(&args.buckets).map_err(|e| anyhow!("--buckets: {e}"))?;
    let kv = KvCacheOptions {
        max_context: args.max_context,
        ..KvCacheOptions::default()
    };
    let pipeline = Pipeline::fusion()
        .quantized(quant)
        .kv_cache(kv, false)
        .buckets(BucketSpec::Sizes(sizes))
        .packed(PackTarget::Cpu)
        .planned();
    pipeline
        .run(&mut module)
        .with_context(|| format!("{}: pipeline `{}`", path.display(), pipeline.text()))?;
    let weights = WeightBytes::of(&module)
        .with_context(|| format!("{}: counting the weights", path.display()))?;
    Ok((module, weights))
}

/// The planned cpu decoder over every bucket graph (as `slmcc generate`
/// makes it); with `timer`, each kernel of the decode graph is timed.
fn planned_decoder(
    module: &Module,
    threads: usize,
    timer: Option<&Rc<NodeTimes>>,
) -> Result<Decoder, DecodeError> {
    let graphs = bucket_graphs(module)?;
    let options = CpuOptions {
        threads,
        ..CpuOptions::default()
    };
    let decode_graph = graphs.iter().find(|(_, s)| *s == 1).map(|(g, _)| g.clone());
    let kernels = |g: &Graph| -> Result<Box<dyn KernelSet>, DecodeError> {
        let k = JitKernels::compile(g, &options)
            .map_err(|e| DecodeError::Graph(format!("graph @{}: cpu backend: {e}", g.name)))?;
        match timer {
            Some(t) if decode_graph.as_deref() == Some(g.name.as_str()) => {
                let times = t.clone();
                let record: Recorder = Rc::new(move |node, nanos| {
                    if let Some(s) = times.samples.get(node) {
                        s.borrow_mut().push(nanos);
                    }
                });
                Ok(Box::new(TimedKernels { inner: k, record }))
            }
            _ => Ok(Box::new(k)),
        }
    };
    Decoder::planned(module, &graphs, &kernels)
}

/// Prefills `prompt` from position 0, then runs `steps` greedy one-token
/// steps; returns each step's time (if `timed`) and the greedy tokens (after
/// the prompt, then after each step).
fn greedy(
    decoder: &mut Decoder,
    prompt: &[i64],
    steps: usize,
    timed: bool,
) -> anyhow::Result<(Vec<f64>, Vec<i64>)> {
    decoder.reset();
    let mut token = argmax(decoder.step(prompt).context("slmcc: prefill")?);
    let mut tokens = vec![token];
    let mut times = Vec::with_capacity(steps);
    for i in 0..steps {
        let t = Instant::now();
        let logits = decoder
            .step(&[token])
            .with_context(|| format!("slmcc: decode step {i}"))?;
        let elapsed = t.elapsed();
        token = argmax(logits);
        if timed {
            times.push(elapsed.as_secs_f64() * 1e3);
        }
        tokens.push(token);
    }
    Ok((times, tokens))
}

fn argmax(logits: &[f32]) -> i64 {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best as i64
}

/// `n` token ids below `vocab`, the same every run (SplitMix64 from 0).
fn prompt_ids(n: usize, vocab: usize) -> Vec<i64> {
    let mut s: u64 = 0;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z % vocab as u64) as i64
        })
        .collect()
}

/// What one run of `bench/ort_decode.py` reported.
struct OrtRun {
    /// Per timed step, ms.
    times: Vec<f64>,
    /// The greedy token after the prompt, then after each timed step.
    tokens: Vec<i64>,
    version: String,
}

/// Runs `bench/ort_decode.py` and reads its JSON.
fn run_ort(args: &Args, past: &Path, prompt: &[i64], steps: usize) -> anyhow::Result<OrtRun> {
    let python = args.root.join(&args.python);
    let script = args.root.join(&args.ort_script);
    if !python.is_file() {
        bail!(
            "no {} (scripts/test or scripts/bench-decode creates the venv)",
            python.display()
        );
    }
    if !script.is_file() {
        bail!("no {}", script.display());
    }
    let ids: Vec<String> = prompt.iter().map(i64::to_string).collect();
    let out = Command::new(&python)
        .arg(&script)
        .arg("--model")
        .arg(past)
        .args(["--prompt-ids", &ids.join(",")])
        .args(["--steps", &steps.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .args(["--threads", &args.threads.to_string()])
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{}: its output is not JSON", script.display()))?;
    let list = |key: &str| {
        v[key]
            .as_array()
            .ok_or_else(|| anyhow!("{}: no `{key}` list in its JSON", script.display()))
    };
    let bad =
        |key: &str, x: &serde_json::Value| anyhow!("{}: `{key}`: bad entry {x}", script.display());
    let times = list("step_ms")?
        .iter()
        .map(|x| x.as_f64().ok_or_else(|| bad("step_ms", x)))
        .collect::<anyhow::Result<Vec<f64>>>()?;
    let tokens = list("tokens")?
        .iter()
        .map(|x| x.as_i64().ok_or_else(|| bad("tokens", x)))
        .collect::<anyhow::Result<Vec<i64>>>()?;
    let version = v["onnxruntime"].as_str().unwrap_or("?").to_string();
    if times.len() != steps {
        bail!(
            "{}: {} step times, expected {steps}",
            script.display(),
            times.len()
        );
    }
    Ok(OrtRun {
        times,
        tokens,
        version,
    })
}

/// "yes (n/n)", or where the greedy tokens first differ.
fn agreement(a: &[i64], b: &[i64]) -> String {
    let n = a.len().min(b.len());
    match (0..n).find(|&i| a[i] != b[i]) {
        None if a.len() == b.len() => format!("yes ({n}/{n})"),
        None => format!("lengths differ ({} vs {})", a.len(), b.len()),
        Some(i) => format!(
            "no: {}/{n}, first differs at token {i} ({} vs {})",
            (0..n).filter(|&j| a[j] == b[j]).count(),
            a[i],
            b[i]
        ),
    }
}

/// Median and 90th percentile of step times, in ms.
#[derive(Clone, Copy)]
struct Stats {
    median: f64,
    p90: f64,
}

impl Stats {
    fn of(times: &[f64]) -> Stats {
        let mut t = times.to_vec();
        t.sort_by(f64::total_cmp);
        let n = t.len();
        if n == 0 {
            return Stats {
                median: f64::NAN,
                p90: f64::NAN,
            };
        }
        let median = if n % 2 == 1 {
            t[n / 2]
        } else {
            (t[n / 2 - 1] + t[n / 2]) / 2.0
        };
        // Nearest rank.
        let p90 = t[((n as f64 * 0.9).ceil() as usize).clamp(1, n) - 1];
        Stats { median, p90 }
    }
}

/// The weight bytes one decode step reads, counted on the imported module
/// (before fusion and folding, which only move small weights into the
/// constants region): every floating-point initializer in full (the
/// projection and MLP matrices, the LM head, the norms' scales, small tables
/// such as RoPE's inverse frequencies), except a table used only as the data
/// of `gather` (the token embedding), of which one row per token is read.
struct WeightBytes {
    per_step: u64,
    /// All weight bytes of the module (what the file holds).
    total: u64,
    /// The bytes of the gathered tables (embeddings) left out.
    gathered: u64,
}

impl WeightBytes {
    fn of(module: &Module) -> anyhow::Result<WeightBytes> {
        // Per weight: read in full by some node, or only gathered.
        let mut full: BTreeMap<&str, bool> = BTreeMap::new();
        for g in &module.graphs {
            for node in &g.nodes {
                for (i, &v) in node.inputs.iter().enumerate() {
                    if let ValueDef::Weight(name) = &g.value(v).def {
                        let gathered = matches!(node.op, Op::Gather(_)) && i == 0;
                        *full.entry(name.as_str()).or_default() |= !gathered;
                    }
                }
            }
        }
        let (mut per_step, mut total, mut gathered) = (0u64, 0u64, 0u64);
        for (name, w) in module.weights.iter() {
            let dims =
                w.ty.shape
                    .as_fixed()
                    .ok_or_else(|| anyhow!("weight {name} has no static shape"))?;
            let bytes = w.ty.dtype.bytes_for(dims.iter().product()) as u64;
            total += bytes;
            // Float weights and quantized ones (not index tables).
            if !(w.ty.dtype.is_float() || matches!(w.ty.dtype, DType::I8 | DType::I4)) {
                continue;
            }
            match full.get(name) {
                Some(true) => per_step += bytes,
                Some(false) => {
                    gathered += bytes;
                    let rows = dims.first().copied().unwrap_or(1).max(1) as u64;
                    per_step += bytes / rows;
                }
                None => {}
            }
        }
        Ok(WeightBytes {
            per_step,
            total,
            gathered,
        })
    }
}

/// The KV cache: what attention needs to read at a position, and what
/// slmcc preallocates.
struct KvBytes {
    /// K and V bytes of every layer for `pos` positions.
    needed: u64,
    /// The whole preallocated cache of the decode graph.
    allocated: u64,
    pos: usize,
}

impl KvBytes {
    fn of(module: &Module, pos: usize) -> anyhow::Result<KvBytes> {
        let g = module
            .buckets
            .iter()
            .find(|(_, b)| b.size == 1)
            .and_then(|(name, _)| module.graph(name))
            .ok_or_else(|| anyhow!("no decode graph (bucket 1)"))?;
        let (mut needed, mut allocated) = (0u64, 0u64);
        for &v in &g.inputs {
            let val = g.value(v);
            if !val.name.starts_with("past.") {
                continue;
            }
            let dims = val
                .ty
                .shape
                .as_fixed()
                .ok_or_else(|| anyhow!("cache %{} is not static", val.name))?;
            let bytes = val.ty.dtype.bytes_for(dims.iter().product()) as u64;
            allocated += bytes;
            let slots = dims.get(2).copied().unwrap_or(1).max(1) as u64;
            needed += bytes / slots * pos.min(slots as usize) as u64;
        }
        Ok(KvBytes {
            needed,
            allocated,
            pos,
        })
    }
}

/// Read (and copy) bandwidth of this machine, measured on one large buffer.
struct Bandwidth {
    /// Bytes per second, reading, one thread.
    read_1: f64,
    /// Reading, on the benchmark's threads.
    read_n: f64,
    /// Copying half the buffer into the other half (read + written bytes).
    copy_n: f64,
}

impl Bandwidth {
    fn measure(mib: usize, threads: usize) -> anyhow::Result<Bandwidth> {
        if mib < 64 {
            bail!("--bandwidth-mib {mib}: use at least 64 (1024 or more for DDR)");
        }
        let words = mib * (1 << 20) / 8;
        // Written once (every page touched) before anything is timed.
        let mut buf: Vec<u64> = (0..words as u64).collect();
        let best = |f: &mut dyn FnMut() -> Duration, bytes: usize| {
            (0..5)
                .map(|_| bytes as f64 / f().as_secs_f64())
                .fold(0.0, f64::max)
        };
        let bytes = words * 8;
        let read_1 = best(&mut || read_all(&buf, 1, 1), bytes);
        let read_n = if threads > 1 {
            best(&mut || read_all(&buf, threads, 1), bytes)
        } else {
            read_1
        };
        let copy_n = best(&mut || copy_half(&mut buf, threads), bytes);
        Ok(Bandwidth {
            read_1,
            read_n,
            copy_n,
        })
    }

    /// The better of two measurements, figure by figure.
    fn best(&self, other: &Bandwidth) -> Bandwidth {
        Bandwidth {
            read_1: self.read_1.max(other.read_1),
            read_n: self.read_n.max(other.read_n),
            copy_n: self.copy_n.max(other.copy_n),
        }
    }

    /// The bandwidth the roofline divides by: the best read rate measured
    /// (the benchmark's threads, or one thread if that was faster).
    fn roofline(&self) -> f64 {
        self.read_1.max(self.read_n)
    }
}

/// The read bandwidth (bytes/s) over a buffer of `bytes`, read again and
/// again as decode steps read the weights: best of 5 timings (each of at
/// least 256 MiB) after one pass, on one thread or `threads`, whichever is
/// faster. Working sets that fit in (or partly in) the last-level cache
/// read faster than DDR.
fn reread_bandwidth(bytes: u64, threads: usize) -> f64 {
    let words = (bytes as usize / 8).max(1024);
    let buf: Vec<u64> = (0..words as u64).collect();
    // Enough passes per timing (≥ 256 MiB read) that starting threads is noise.
    let passes = ((256usize << 20) / (words * 8)).max(1);
    let mut best = 0.0f64;
    for t in [1, threads] {
        read_all(&buf, t, 1);
        for _ in 0..5 {
            let d = read_all(&buf, t, passes);
            best = best.max((words * 8 * passes) as f64 / d.as_secs_f64());
        }
    }
    best
}

/// Sums `buf` `passes` times on `threads` threads (each a contiguous
/// part); the time taken.
fn read_all(buf: &[u64], threads: usize, passes: usize) -> Duration {
    fn sum(part: &[u64]) -> u64 {
        let mut acc = [0u64; 8];
        let mut chunks = part.chunks_exact(8);
        for c in &mut chunks {
            for (a, x) in acc.iter_mut().zip(c) {
                *a = a.wrapping_add(*x);
            }
        }
        let tail: u64 = chunks.remainder().iter().fold(0, |a, x| a.wrapping_add(*x));
        acc.iter().fold(tail, |a, x| a.wrapping_add(*x))
    }
    let per = buf.len().div_ceil(threads);
    let t = Instant::now();
    let total = std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks(per)
            .map(|p| {
                s.spawn(move || {
                    (0..passes).fold(0u64, |a, _| a.wrapping_add(sum(std::hint::black_box(p))))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(0))
            .fold(0u64, u64::wrapping_add)
    });
    let elapsed = t.elapsed();
    std::hint::black_box(total);
    elapsed
}

/// Copies the first half of `buf` into the second on `threads` threads.
fn copy_half(buf: &mut [u64], threads: usize) -> Duration {
    let half = buf.len() / 2;
    let (src, dst) = buf.split_at_mut(half);
    let per = half.div_ceil(threads);
    let t = Instant::now();
    std::thread::scope(|s| {
        for (d, sp) in dst[..half].chunks_mut(per).zip(src.chunks(per)) {
            s.spawn(move || d.copy_from_slice(sp));
        }
    });
    let elapsed = t.elapsed();
    std::hint::black_box(&buf[buf.len() - 1]);
    elapsed
}

/// Every call's time of each kernel of the decode graph (ns), per node.
struct NodeTimes {
    samples: Vec<RefCell<Vec<u64>>>,
}

impl NodeTimes {
    fn new(nodes: usize, steps: usize) -> NodeTimes {
        NodeTimes {
            samples: (0..nodes)
                .map(|_| RefCell::new(Vec::with_capacity(steps + 16)))
                .collect(),
        }
    }

    fn clear(&self) {
        self.samples.iter().for_each(|s| s.borrow_mut().clear());
    }
}

/// Times each kernel of the decode graph over `steps` steps (after the
/// prompt) and describes one step: per node the median of its calls
/// (robust to the machine's noise), added up per op kind, the slowest
/// nodes, and what the kernels leave of the untimed step's median (the
/// executor's own work: dispatch, ids in, logits out).
fn profile(
    module: &Module,
    threads: usize,
    name: &str,
    prompt: &[i64],
    steps: usize,
    untimed: &Stats,
) -> anyhow::Result<String> {
    let g = module
        .buckets
        .iter()
        .find(|(_, b)| b.size == 1)
        .and_then(|(n, _)| module.graph(n))
        .ok_or_else(|| anyhow!("no decode graph (bucket 1)"))?;
    let times = Rc::new(NodeTimes::new(g.nodes.len(), steps));
    let mut decoder =
        planned_decoder(module, threads, Some(&times)).map_err(|e| anyhow!("{name}: {e}"))?;
    greedy(&mut decoder, prompt, steps.min(8), false)?;
    times.clear();
    let (step_ms, _) = greedy(&mut decoder, prompt, steps, true)?;
    // Per step: the kernels' time, and what the step spent outside them.
    let mut kernel_us = vec![0.0; steps];
    for node in &times.samples {
        for (k, &n) in kernel_us.iter_mut().zip(node.borrow().iter()) {
            *k += n as f64 / 1e3;
        }
    }
    let outside_us: Vec<f64> = step_ms
        .iter()
        .zip(&kernel_us)
        .map(|(s, k)| s * 1e3 - k)
        .collect();
    let mut by_op: BTreeMap<&'static str, (usize, f64)> = BTreeMap::new();
    let mut by_node = Vec::new();
    let mut kernels = 0.0;
    for (i, node) in g.nodes.iter().enumerate() {
        let samples = times.samples[i].borrow();
        if samples.is_empty() {
            continue; // `constant`s have no kernel
        }
        let us: Vec<f64> = samples.iter().map(|&n| n as f64 / 1e3).collect();
        let median = Stats::of(&us).median;
        kernels += median;
        let e = by_op.entry(node.op.mnemonic()).or_default();
        e.0 += 1;
        e.1 += median;
        let ty = node
            .outputs
            .first()
            .map(|&v| g.ty(v).to_string())
            .unwrap_or_default();
        let label = slmcc_ir::verify::node_label(g, i);
        by_node.push((label, node.op.mnemonic(), ty, median));
    }
    let launched = by_node.len();
    let mut by_op: Vec<_> = by_op.into_iter().collect();
    by_op.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    by_node.sort_by(|a, b| b.3.total_cmp(&a.3));

    let profiled = Stats::of(&step_ms).median * 1e3;
    let mut s = format!(
        "profile of {name}'s decode graph @{} ({launched} kernels, {steps} steps; the timer adds \
         two clock reads per kernel):\n",
        g.name
    );
    s += &format!(
        "  per step (medians): {profiled:.1} µs timed ({:.1} µs untimed), of which kernels \
         {:.1} µs and {:.1} µs outside them (executor dispatch, ids in, logits out)\n",
        untimed.median * 1e3,
        Stats::of(&kernel_us).median,
        Stats::of(&outside_us).median,
    );
    s += &format!(
        "  the kernels' medians add up to {kernels:.1} µs (less sensitive to the machine's \
         noise than the per-step totals); per op kind:\n"
    );
    s += "  op               nodes   µs/step   share\n";
    for (op, (count, us)) in &by_op {
        s += &format!(
            "  {op:<16} {count:>5} {us:>9.1} {:>6.1}%\n",
            100.0 * us / kernels.max(1e-9)
        );
    }
    s += "  slowest nodes:\n";
    for (label, op, ty, us) in by_node.iter().take(10) {
        s += &format!("    {us:>8.1} µs  {op:<12} {label} : {ty}\n");
    }
    Ok(s)
}

fn print_table(rows: &[Row]) {
    let header = [
        "model",
        "engine",
        "median ms",
        "p90 ms",
        "tokens/s",
        "of DDR roofline",
        "time / ORT f32",
        "time / ORT 4-bit",
        "tokens agree",
    ];
    let mut lines: Vec<[String; 9]> = Vec::new();
    for r in rows {
        let median = |kind| {
            r.engines
                .iter()
                .find(|e| e.ort == Some(kind))
                .and_then(|e| e.stats.as_ref().ok())
                .map(|s| s.median)
        };
        let (ort_f32, ort_q4) = (median(OrtKind::F32), median(OrtKind::Q4));
        let ratio = |m: f64, of: Option<f64>| of.map_or("-".into(), |o| format!("{:.2}x", m / o));
        for (i, e) in r.engines.iter().enumerate() {
            let model = if i == 0 {
                r.model.clone()
            } else {
                String::new()
            };
            let line = match &e.stats {
                Ok(s) => {
                    let roofline_ms = e.per_step as f64 / r.bandwidth * 1e3;
                    [
                        model,
                        e.label.clone(),
                        format!("{:.3}", s.median),
                        format!("{:.3}", s.p90),
                        format!("{:.1}", 1e3 / s.median),
                        format!("{:.0}%", 100.0 * roofline_ms / s.median),
                        ratio(s.median, ort_f32),
                        ratio(s.median, ort_q4),
                        e.agree.clone(),
                    ]
                }
                Err(why) => [
                    model,
                    e.label.clone(),
                    format!("n/a: {why}"),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ],
            };
            lines.push(line);
        }
        let roofline_ms = r.weights.per_step as f64 / r.bandwidth * 1e3;
        let reread_ms = r.weights.per_step as f64 / r.reread * 1e3;
        for (label, ms) in [
            ("DDR roofline (f32)", roofline_ms),
            ("re-read bound (f32)", reread_ms),
        ] {
            lines.push([
                String::new(),
                label.into(),
                format!("{ms:.3}"),
                String::new(),
                format!("{:.1}", 1e3 / ms),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
    }
    // The n/a message may be long: it does not set its column's width.
    let mut width = header.map(str::len);
    for l in &lines {
        for (w, c) in width.iter_mut().zip(l) {
            if !c.starts_with("n/a: ") {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let row = |cells: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(width).enumerate() {
            if i > 0 {
                s += " | ";
            }
            if (2..=7).contains(&i) && !c.starts_with("n/a: ") {
                s += &format!("{c:>w$}");
            } else {
                s += &format!("{c:<w$}");
            }
        }
        s.trim_end().to_string()
    };
    println!("{}", row(&header.map(String::from)));
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", row(&rule));
    for l in &lines {
        println!("{}", row(l));
    }
    println!();
    let l3 = l3_bytes();
    for r in rows {
        let w = &r.weights;
        let cached = match l3 {
            Some(l3) if w.per_step <= l3 => format!(
                "; the weights fit in the {} MiB L3 cache, so the DDR roofline does not bind",
                l3 >> 20
            ),
            _ => String::new(),
        };
        println!(
            "{}: weight bytes per step {:.2} MB (of {:.2} MB: every float weight in full, the \
             embedding table's {:.2} MB as one row); KV cache at position {}: {:.2} MB needed, \
             {:.2} MB preallocated by slmcc (neither in the roofline){cached}",
            r.model,
            w.per_step as f64 / 1e6,
            w.total as f64 / 1e6,
            w.gathered as f64 / 1e6,
            r.kv.pos,
            r.kv.needed as f64 / 1e6,
            r.kv.allocated as f64 / 1e6,
        );
    }
}

/// The size of the last-level (L3) cache, from Linux's sysfs, if known.
fn l3_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size").ok()?;
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "K" => n << 10,
        "M" => n << 20,
        "" => n,
        _ => return None,
    })
}

/// Today's date (UTC), `YYYY-MM-DD`.
fn utc_date() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
