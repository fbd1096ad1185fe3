//! onnxruntime's side: `bench/ort_bench.py` run with the project's Python
//! venv on the ids the benchmark wrote; it times `session.run` and leaves
//! its logits beside the ids, which become the reference every other engine
//! is checked against.

use std::path::Path;
use std::process::Command;

use anyhow::{anyhow, bail, Context};
use slmcc_ir::Tensor;

use crate::measure::Policy;

/// onnxruntime's result for one length.
pub struct OrtResult {
    pub median_ms: f64,
    pub runs: usize,
    pub logits: Tensor,
}

/// What a run of the script reports.
pub struct OrtRun {
    pub version: String,
    pub results: Vec<(usize, OrtResult)>,
}

/// Runs `script` with `python` on `model` for `lens` (ids in `dir`).
pub fn run(
    python: &Path,
    script: &Path,
    model: &Path,
    dir: &Path,
    lens: &[usize],
    threads: usize,
    policy: &Policy,
) -> anyhow::Result<OrtRun> {
    let lens_arg: Vec<String> = lens.iter().map(usize::to_string).collect();
    let out = Command::new(python)
        .arg(script)
        .arg("--model")
        .arg(model)
        .arg("--dir")
        .arg(dir)
        .arg("--lens")
        .arg(lens_arg.join(","))
        .arg("--threads")
        .arg(threads.to_string())
        .arg("--warmup")
        .arg(policy.warmup.to_string())
        .arg("--min-runs")
        .arg(policy.min_runs.to_string())
        .arg("--min-time")
        .arg(policy.min_time.as_secs_f64().to_string())
        .arg("--max-runs")
        .arg(policy.max_runs.to_string())
        .output()
        .with_context(|| {
            format!(
                "cannot run {} (create the venv with scripts/bench or scripts/test, or pass --python)",
                python.display()
            )
        })?;
    if !out.status.success() {
        bail!(
            "onnxruntime: {} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("onnxruntime: cannot parse the script's output `{stdout}`"))?;
    let version = json["onnxruntime"].as_str().unwrap_or("?").to_string();
    let mut results = Vec::new();
    let items = json["results"]
        .as_array()
        .ok_or_else(|| anyhow!("onnxruntime: no `results` in `{stdout}`"))?;
    for item in items {
        let len = item["len"]
            .as_u64()
            .ok_or_else(|| anyhow!("onnxruntime: result without `len`: {item}"))?
            as usize;
        let median_ms = item["median_ms"]
            .as_f64()
            .ok_or_else(|| anyhow!("onnxruntime: result without `median_ms`: {item}"))?;
        let runs = item["runs"].as_u64().unwrap_or(0) as usize;
        let path = dir.join(format!("ort_logits_{len}.npy"));
        let logits = slmcc_runtime::npy::read(&path)
            .map_err(|e| anyhow!("onnxruntime: {}: {e}", path.display()))?;
        results.push((
            len,
            OrtResult {
                median_ms,
                runs,
                logits,
            },
        ));
    }
    Ok(OrtRun { version, results })
}

/// Writes `model` with its input fixed to `[1, len]` after onnxruntime's
/// basic graph optimisations (constant folding; standard ONNX ops) to `out`.
pub fn fold(
    python: &Path,
    script: &Path,
    model: &Path,
    len: usize,
    out: &Path,
) -> anyhow::Result<()> {
    let run = Command::new(python)
        .arg(script)
        .arg("--model")
        .arg(model)
        .arg("--fold-len")
        .arg(len.to_string())
        .arg("--fold-out")
        .arg(out)
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !run.status.success() {
        bail!(
            "folding with onnxruntime failed ({}): {}",
            run.status,
            String::from_utf8_lossy(&run.stderr).trim()
        );
    }
    Ok(())
}
