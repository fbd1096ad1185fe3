//! `slmcc generate`: prefill a prompt, then decode token by token over the
//! static KV cache ([`slmcc_runtime::decode`]), streaming the tokens.
//!
//! An ONNX model is prepared here: the fusion pipeline, `kv-cache` with the
//! command's cache options, and on `cpu` `bucket-specialize` to the prefill
//! buckets plus bucket 1 (the decode graph) and `plan-memory`. A package
//! compiled with `--kv-cache` already holds those bucket graphs.

use std::io::Write as _;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::{Module, Tensor};
use slmcc_passes::transforms::bucket_specialize::parse_buckets;
use slmcc_runtime::decode::{bucket_graphs, DecodeError, Decoder};
use slmcc_runtime::exec::KernelSet;
use slmcc_runtime::npu::{NpuBackend, NpuLowered};
use slmcc_runtime::npy;
use slmcc_runtime::sample::{Sampler, Sampling};

use super::load::{cpu_kernels, npu_kernels, npu_lowered, Backend, Loaded};
use super::profile::{Phases, Profile};
use super::tokenize::Tokenizer;
use crate::cli::{BackendArg, GenerateArgs, QuantScheme};
use crate::exit::CmdResult;
use slmcc::pipeline::{BucketSpec, PackTarget, Pipeline};
use slmcc_runtime::package::Package;

pub fn run(args: GenerateArgs) -> CmdResult {
    args.threads.pin()?;
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    };
    sampling.check().map_err(|e| anyhow!("{e}"))?;
    let tokenizer = match &args.tokenizer {
        Some(p) => Some(Tokenizer::load(p)?),
        None => None,
    };
    let prompt = prompt_ids(&args, tokenizer.as_ref())?;
    let profile = args.profile.then(Profile::new);
    let mut decoder = load_decoder(&args, profile.as_ref())?;
    if let Some(&bad) = prompt
        .iter()
        .find(|&&id| id < 0 || id >= decoder.vocab() as i64)
    {
        return Err(anyhow!(
            "prompt token {bad} is outside the vocabulary (0..{})",
            decoder.vocab()
        )
        .into());
    }
    let timing = generate(&args, &mut decoder, &prompt, sampling, tokenizer.as_ref())?;
    if let (Some(p), Some((first, total, generated))) = (profile, timing) {
        p.print(&Phases::Generate {
            prompt: prompt.len(),
            prefill: first,
            decoded: generated.saturating_sub(1),
            decode: total.saturating_sub(first),
        });
    }
    Ok(())
}

/// The prompt's ids, from `--prompt-ids` or `--prompt` with the tokenizer.
fn prompt_ids(args: &GenerateArgs, tokenizer: Option<&Tokenizer>) -> anyhow::Result<Vec<i64>> {
    let ids = match (&args.prompt_ids, &args.prompt, tokenizer) {
        (Some(list), _, _) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<i64>()
                    .map_err(|_| anyhow!("--prompt-ids: `{s}` is not a token id"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        (None, Some(text), Some(t)) => t.encode(text)?,
        _ => bail!("give the prompt: --prompt-ids 1,2,3, or --prompt TEXT --tokenizer FILE"),
    };
    if ids.is_empty() {
        bail!("the prompt is empty");
    }
    Ok(ids)
}

/// Loads the model and makes its decoder on `backend` (by default `cpu`,
/// or a package's target).
fn load_decoder(args: &GenerateArgs, profile: Option<&Rc<Profile>>) -> anyhow::Result<Decoder> {
    let path = &args.model;
    let at = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", path.display());
    let loaded = Loaded::load(path, &args.keys)?;
    let backend = loaded.backend(args.backend, BackendArg::Cpu);
    let Loaded {
        mut module,
        package,
    } = loaded;
    if package.is_none() {
        let quant = args.quant.get(QuantScheme::None)?;
        super::load::calibrate(
            &mut module,
            &args.quant,
            &quant,
            path,
            &args.threads.cpu_options(),
        )?;
        let sizes = parse_buckets(&args.buckets).map_err(|e| anyhow!("--buckets: {e}"))?;
        let (mut kv, last_logits) = args.kv.options()?;
        // The reference engine has no buckets, but steps as long as the
        // largest one, as the planned engine does.
        kv.max_chunk = sizes.iter().copied().max().unwrap_or(1) as i64;
        let cached = Pipeline::fusion()
            .quantized(quant)
            .extra_passes(args.extra_passes.as_deref())
            .kv_cache(kv, last_logits);
        let pipeline = match backend {
            Backend::Cpu => cached
                .buckets(BucketSpec::Sizes(sizes))
                .packed(PackTarget::Cpu)
                .planned(),
            Backend::Npu(_) => cached
                .buckets(BucketSpec::Sizes(sizes))
                .packed(PackTarget::Rk3588)
                .planned(),
            Backend::Reference => cached,
        };
        pipeline
            .run(&mut module)
            .with_context(|| format!("{}", path.display()))?;
    } else if backend == Backend::Reference {
        bail!(
            "{}: a package runs on cpu or npu-sim, not reference",
            path.display()
        );
    } else if args.quant.quant.is_some() {
        bail!(
            "{}: a package is quantized when it is compiled; --quant applies to models",
            path.display()
        );
    } else if args.extra_passes.is_some() {
        bail!(
            "{}: a package's passes ran when it was compiled; --extra-passes applies to models",
            path.display()
        );
    }
    let cpu = args.threads.cpu_options();
    match backend {
        Backend::Reference if profile.is_some() => {
            bail!("--profile times kernels: it needs --backend cpu or npu-sim")
        }
        Backend::Reference => Decoder::reference(module, "main").map_err(|e| at(&e)),
        Backend::Cpu => {
            planned_decoder(&module, &cpu, package.as_ref(), None, profile).map_err(|e| at(&e))
        }
        Backend::Npu(b) => {
            let lowered = npu_lowered(&mut module, package.as_ref())?;
            let npu = Some((&lowered, b));
            planned_decoder(&module, &cpu, package.as_ref(), npu, profile).map_err(|e| at(&e))
        }
    }
}

/// The planned decoder over every bucket graph of `module`: cpu kernels
/// (a package's objects for this machine when it has them), or with `npu`
/// the NPU products from their programs on that backend; every kernel
/// timed into `profile` if given.
fn planned_decoder(
    module: &Module,
    options: &CpuOptions,
    package: Option<&Package>,
    npu: Option<(&NpuLowered, NpuBackend)>,
    profile: Option<&Rc<Profile>>,
) -> Result<Decoder, DecodeError> {
    let graphs = bucket_graphs(module)?;
    let kernels = |g: &slmcc_ir::Graph| -> Result<Box<dyn KernelSet>, DecodeError> {
        let fail =
            |e: &dyn std::fmt::Display| DecodeError::Graph(format!("graph @{}: {e}", g.name));
        let kernels: Box<dyn KernelSet> = match npu {
            Some((lowered, b)) => Box::new(
                npu_kernels(module, g, lowered, package, options, b).map_err(|e| fail(&e))?,
            ),
            None => cpu_kernels(g, package, options).map_err(|e| fail(&e))?,
        };
        Ok(match profile {
            Some(p) => p.wrap(g, kernels),
            None => kernels,
        })
    };
    Decoder::planned(module, &graphs, &kernels)
}

/// Prefills `prompt`, then decodes up to `--max-new-tokens`, streaming;
/// returns the time to the first token, the whole time and the tokens
/// generated (none when none was asked for).
fn generate(
    args: &GenerateArgs,
    decoder: &mut Decoder,
    prompt: &[i64],
    sampling: Sampling,
    tokenizer: Option<&Tokenizer>,
) -> anyhow::Result<Option<(Duration, Duration, usize)>> {
    let path = &args.model;
    let at = |e: DecodeError| anyhow!("{}: {e}", path.display());
    let vocab = decoder.vocab();
    let mut sampler = Sampler::new(sampling, vocab);
    let mut logits_log: Vec<f32> = Vec::new();
    let mut out = std::io::stdout().lock();
    let mut generated: Vec<i64> = Vec::with_capacity(args.max_new_tokens);
    let mut printed = Printed::default();
    let start = Instant::now();
    let mut first_token = None;
    if args.max_new_tokens > 0 {
        let mut logits = decoder.step(prompt).map_err(at)?;
        loop {
            if args.logits_out.is_some() {
                logits_log.extend_from_slice(logits);
            }
            let token = sampler.next(logits) as i64;
            generated.push(token);
            first_token.get_or_insert_with(|| start.elapsed());
            if !args.quiet {
                stream(&mut out, token, &generated, tokenizer, &mut printed)?;
            }
            if generated.len() == args.max_new_tokens || args.stop_tokens.contains(&token) {
                break;
            }
            logits = decoder.step(&[token]).map_err(at)?;
        }
    }
    let total = start.elapsed();
    if args.quiet {
        let ids: Vec<String> = generated.iter().map(|t| t.to_string()).collect();
        writeln!(out, "{}", ids.join(" "))?;
    } else {
        if let Some(t) = tokenizer {
            // Bytes still waiting for the rest of a character.
            let text = t.decode(&generated[printed.start.min(generated.len())..])?;
            if let Some(rest) = text.get(printed.printed..) {
                write!(out, "{rest}")?;
            }
        }
        writeln!(out)?;
    }
    out.flush()?;
    if let Some(file) = &args.logits_out {
        let t = Tensor::from_f32(vec![generated.len(), vocab], logits_log);
        let bytes = npy::to_bytes(&t).map_err(|e| anyhow!("{}: {e}", file.display()))?;
        super::opt::write_atomically(file, &bytes)?;
    }
    if !args.quiet {
        report(prompt.len(), generated.len(), first_token, total);
    }
    Ok(first_token.map(|f| (f, total, generated.len())))
}

/// What of the generated text is on stdout: the text decoded from
/// `generated[start..]` was printed up to byte `printed`.
#[derive(Default)]
struct Printed {
    start: usize,
    printed: usize,
}

/// Writes one new token: its id, or the text it adds with a tokenizer.
/// Only a short window of tokens is decoded each time (the last printed
/// token stays in it, for decoders that depend on the token before, such
/// as a leading space); a token that ends inside a character waits for the
/// next.
fn stream(
    out: &mut impl std::io::Write,
    token: i64,
    generated: &[i64],
    tokenizer: Option<&Tokenizer>,
    state: &mut Printed,
) -> anyhow::Result<()> {
    match tokenizer {
        None => write!(out, "{token} ")?,
        Some(t) => {
            let text = t.decode(&generated[state.start..])?;
            if text.ends_with('\u{FFFD}') {
                return Ok(());
            }
            if let Some(new) = text.get(state.printed..) {
                write!(out, "{new}")?;
            }
            state.start = generated.len() - 1;
            state.printed = t.decode(&generated[state.start..])?.len();
        }
    }
    out.flush()?;
    Ok(())
}

/// Timing on stderr: time to first token (the prefill) and the decode rate.
fn report(prompt: usize, generated: usize, first: Option<Duration>, total: Duration) {
    let Some(first) = first else { return };
    let decode = total.saturating_sub(first).as_secs_f64();
    let rate = if generated > 1 && decode > 0.0 {
        format!("{:.1} tokens/s", (generated - 1) as f64 / decode)
    } else {
        "n/a".to_string()
    };
    eprintln!(
        "prompt {prompt} tokens, generated {generated}; time to first token {:.2} ms; decode {rate}",
        first.as_secs_f64() * 1e3
    );
}
