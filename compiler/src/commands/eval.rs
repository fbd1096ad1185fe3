//! `slmcc eval ppl`: the perplexity of a causal language model on a text
//! or on token ids, optionally quantized first (the quality number a
//! deployment is decided on; `docs/QUALITY.md`).
//!
//! The ids are cut into consecutive windows of `--window` tokens (the last
//! partial one dropped). Each window runs as one `input_ids` input, and
//! every token after its first is scored by the log-softmax of the logits
//! at the position before it, in f64. Perplexity is exp of the mean
//! negative log-likelihood. The protocol is the one the trained test
//! decoder's recipe (`testdata/models/trained/train.py`) uses with torch
//! and onnxruntime, so the numbers compare.
//!
//! With `--kv-dtype`, the fused (and quantized) graph gets a static KV
//! cache of that type and `--window` slots (the `kv-cache` pass), and each
//! window runs as one step from position 0 over an empty cache: attention
//! then reads every key and value from the cache, as stored, so the score
//! includes what the cache's rounding costs.

use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use slmcc::pipeline::quant_name;
use slmcc::unplanned::JitRunner;
use slmcc_ir::Tensor;
use slmcc_runtime::Capture;

use super::load::{
    calibrate, encode_text_file, entry_graph, execute, load_merged, prepare_quantized,
    read_token_ids, Backend,
};
use crate::cli::{BackendArg, EvalAction, EvalArgs, EvalPplArgs, KvDtype, QuantArgs, QuantScheme};
use crate::exit::CmdResult;
use slmcc::pipeline::Quant;
use slmcc_backends::cpu::CpuOptions;
use slmcc_passes::transforms::kv_cache::POSITION_INPUT;

pub fn run(args: EvalArgs) -> CmdResult {
    match args.action {
        EvalAction::Ppl(a) => ppl(a),
    }
}

/// The token ids to measure on.
fn token_ids(a: &EvalPplArgs) -> anyhow::Result<Vec<i64>> {
    match (&a.text, &a.tokenizer, &a.ids) {
        (Some(text), Some(tok), _) => encode_text_file(text, tok),
        (_, _, Some(ids)) => read_token_ids(ids),
        _ => bail!("give --text with --tokenizer, or --ids"),
    }
}

/// Mean negative log-likelihood of `window[t + 1]` under `logits[t]`
/// (`[window, vocab]`), summed over the window, and the count scored.
fn window_nll(logits: &[f32], vocab: usize, window: &[i64]) -> anyhow::Result<(f64, usize)> {
    let mut nll = 0.0f64;
    for (t, &next) in window.iter().enumerate().skip(1) {
        let row = &logits[(t - 1) * vocab..t * vocab];
        let max = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
        let sum: f64 = row.iter().map(|&v| (f64::from(v) - max).exp()).sum();
        let at = usize::try_from(next)
            .ok()
            .filter(|&i| i < vocab)
            .ok_or_else(|| anyhow!("token id {next} is outside the vocabulary of {vocab}"))?;
        nll -= f64::from(row[at]) - max - sum.ln();
    }
    Ok((nll, window.len() - 1))
}

fn ppl(a: EvalPplArgs) -> CmdResult {
    let mut ids = token_ids(&a)?;
    if let Some(n) = a.max_tokens {
        ids.truncate(n);
    }
    let quant = a.quant.get(QuantScheme::None)?;
    let p = perplexity(&Measure {
        model: &a.model,
        ids: &ids,
        window: a.window as usize,
        quant_args: &a.quant,
        quant,
        backend: a.backend,
        cpu: &a.threads.cpu_options(),
        kv_dtype: a.kv_dtype,
        lora: &[],
    })?;
    println!(
        "perplexity {:.4} ({} tokens scored in {} windows of {}; \
         {} tokens left over; {}, {}; {:.1} s)",
        p.perplexity,
        p.scored,
        p.windows,
        a.window,
        ids.len() - p.windows * a.window as usize,
        a.backend.name(),
        match &quant {
            None => "fp32",
            q => quant_name(q),
        },
        p.seconds
    );
    Ok(())
}

/// What [`perplexity`] measures: `model` (ONNX or `.slm`) quantized with
/// `quant` (`quant_args` for its calibration), on `ids` cut into windows
/// of `window`, on `backend`.
pub struct Measure<'a> {
    pub model: &'a std::path::Path,
    pub ids: &'a [i64],
    pub window: usize,
    pub quant_args: &'a QuantArgs,
    pub quant: Quant,
    pub backend: BackendArg,
    pub cpu: &'a CpuOptions,
    pub kv_dtype: Option<KvDtype>,
    /// LoRA adapters merged into the model first (`compile --lora`).
    pub lora: &'a [slmcc::lora::Adapter],
}

/// A perplexity measurement.
pub struct Perplexity {
    pub perplexity: f64,
    /// Tokens scored, in `windows` windows.
    pub scored: usize,
    pub windows: usize,
    pub seconds: f64,
}

/// Measures the perplexity of `m.model` (see the module doc).
pub fn perplexity(m: &Measure) -> anyhow::Result<Perplexity> {
    let (ids, window) = (m.ids, m.window);
    let windows = ids.len() / window;
    if windows == 0 {
        bail!("{} tokens are fewer than one window of {window}", ids.len());
    }
    let mut module = load_merged(m.model, m.lora)?;
    if module.buckets.values().next().is_some() {
        bail!(
            "{}: a package or bucketed module keeps only the last token's logits; \
             evaluate the model it was compiled from, with the same --quant",
            m.model.display()
        );
    }
    let cpu = *m.cpu;
    calibrate(&mut module, m.quant_args, &m.quant, m.model, &cpu)?;
    prepare_quantized(&mut module, m.quant, None, m.model)?;
    if let Some(dt) = m.kv_dtype {
        let dtype = match dt {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
            KvDtype::I8 => "i8",
        };
        slmcc_passes::run_pipeline(
            &mut module,
            &format!("kv-cache{{max-context={window},dtype={dtype}}}"),
        )
        .with_context(|| format!("{}", m.model.display()))?;
    }
    let graph = entry_graph(&module)?;
    // Besides `input_ids`, only the cache's inputs: position 0, empty caches.
    let mut state = Vec::new();
    for &v in &graph.inputs {
        let value = graph.value(v);
        let (name, ty) = (value.name.as_str(), &value.ty);
        match name {
            "input_ids" => {}
            POSITION_INPUT if m.kv_dtype.is_some() => {
                state.push((name.to_string(), Tensor::scalar_i64(0)))
            }
            _ if m.kv_dtype.is_some() && name.starts_with("past.") => {
                let shape = ty.shape.as_fixed().ok_or_else(|| {
                    anyhow!("{}: cache %{name} is not static: {ty}", m.model.display())
                })?;
                state.push((name.to_string(), Tensor::zeros(ty.dtype, shape.to_vec())));
            }
            _ => bail!(
                "{}: eval ppl feeds `input_ids` (and a cache's inputs with --kv-dtype); the model also takes %{name}",
                m.model.display()
            ),
        }
    }
    let backend = Backend::from(m.backend);
    let start = Instant::now();
    let (mut nll, mut scored) = (0.0f64, 0usize);
    // On cpu every window has one shape: compiled once.
    let mut runner: Option<JitRunner> = None;
    for (i, w) in ids.chunks_exact(window).enumerate() {
        let mut inputs = vec![(
            "input_ids".to_string(),
            Tensor::from_i64(vec![1, window], w.to_vec()),
        )];
        inputs.extend(state.iter().cloned());
        let at = |e: &dyn std::fmt::Display| anyhow!("{}: window {i}: {e}", m.model.display());
        let result = match backend {
            Backend::Cpu => {
                if runner.is_none() {
                    runner =
                        Some(JitRunner::new(&module, graph, &inputs, &cpu).map_err(|e| at(&e))?);
                }
                let r = runner.as_ref().expect("built above");
                r.run(&inputs, &Capture::Nothing)
            }
            _ => execute(backend, &cpu, &module, graph, &inputs, &Capture::Nothing),
        }
        .map_err(|e| at(&e))?;
        let (name, logits) = result
            .outputs
            .first()
            .ok_or_else(|| anyhow!("{}: the model has no output", m.model.display()))?;
        let shape = logits.shape();
        let vocab = match shape {
            [1, s, v] if *s == window => *v,
            _ => bail!(
                "{}: output `{name}` has shape {shape:?}, not [1, {window}, vocab] logits",
                m.model.display()
            ),
        };
        let (n, c) = window_nll(&logits.to_f32_vec(), vocab, w)
            .with_context(|| format!("{}: window {i}", m.model.display()))?;
        nll += n;
        scored += c;
        if (i + 1) % 25 == 0 {
            tracing::info!("{}/{windows} windows", i + 1);
        }
    }
    Ok(Perplexity {
        perplexity: (nll / scored as f64).exp(),
        scored,
        windows,
        seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uniform logits score every token at ln(vocab); a certain prediction
    /// at 0.
    #[test]
    fn nll_of_uniform_and_certain_predictions() {
        let (n, c) = window_nll(&[0.0; 12], 4, &[1, 2, 3]).unwrap();
        assert_eq!(c, 2);
        assert!((n - 2.0 * 4f64.ln()).abs() < 1e-12, "{n}");
        let sure = [
            0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 0.0, 100.0, 0.0, 0.0, 0.0, 0.0,
        ];
        let (n, _) = window_nll(&sure, 4, &[0, 2, 3]).unwrap();
        assert!(n < 1e-30, "{n}");
        assert!(window_nll(&[0.0; 8], 4, &[0, 9]).is_err());
    }
}
