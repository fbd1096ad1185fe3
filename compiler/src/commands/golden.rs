//! `slmcc golden check`: run models on their golden inputs and compare every
//! recorded layer against the reference values.
//!
//! A golden folder holds `manifest.json`:
//! `{"model": PATH, "model_sha256": HEX, "tolerances": {BACKEND: {"max_rel": X}},
//! "cases": [{"name", "inputs": {NAME: FILE}, "layers": [{"layer", "value",
//! "file"}]}]}`, with files relative to the folder and the model relative to
//! the folder or, failing that, to the current directory. Inputs are `.npy`
//! or `.pb` (ONNX `TensorProto`) files. A model whose SHA-256 is not
//! `model_sha256` (when given) is refused: the goldens are another model's. The relative error of a layer is
//! `max|a - b| / max(max|b|, 1e-6)`. The first layer over tolerance is named
//! with the IR node that produced it.
//!
//! A manifest whose model is a package (`.slmpkg`) checks the package as
//! compiled: its bucket graphs run on the inputs padded into the smallest
//! bucket that holds them (no pass runs), each value cut back to the real
//! length, with the tolerance of the package's own quantization.
//!
//! With `--quant w8a8|w4a8` the model is quantized after fusion and checked
//! against the same (FP32) goldens with `tolerances.<quant>`: `max_rel` and
//! `min_cosine` (the cosine similarity of each layer with its golden, at
//! least this). These bound the quantization error measured on our test
//! models (see `docs/QUANTIZATION.md`), not the kernels' precision: the
//! kernels themselves are checked bit for bit against the reference.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde_json::Value as Json;
use slmcc_ir::OpDef;
use slmcc_ir::Tensor;
use slmcc_runtime::bucket::{slice, Buckets, Padding};
use slmcc_runtime::compare::diff;
use slmcc_runtime::{npy, Capture};

use slmcc::pipeline::{quant_name, Quant};

use super::load::{
    calibrate, computed_inputs_dropped, entry_graph, execute, prepare_quantized, read_tensor,
    Backend, Loaded,
};
use crate::cli::{BackendArg, GoldenAction, GoldenArgs, GoldenCheckArgs, QuantScheme};
use crate::exit::{CmdResult, Failure};

pub fn run(args: GoldenArgs) -> CmdResult {
    match args.action {
        GoldenAction::Check(a) => check(a),
        GoldenAction::Record(a) => super::golden_record::record(a),
    }
}

struct Layer {
    layer: String,
    value: String,
    file: PathBuf,
}

struct Case {
    name: String,
    inputs: Vec<(String, PathBuf)>,
    layers: Vec<Layer>,
}

struct Manifest {
    dir: PathBuf,
    model: PathBuf,
    max_rel: f64,
    /// Quantized checks only: the smallest cosine similarity allowed.
    min_cosine: Option<f64>,
    cases: Vec<Case>,
}

fn str_field<'a>(j: &'a Json, key: &str, what: &str) -> anyhow::Result<&'a str> {
    j[key]
        .as_str()
        .ok_or_else(|| anyhow!("{what}: missing string `{key}`"))
}

/// `tolerance` is the key of `tolerances` to check with: the backend's
/// name, or the quantization's.
/// Reads a golden folder's manifest; `tolerance` gives the key of its
/// `tolerances` to read, from the model it names.
fn read_manifest(
    arg: &Path,
    tolerance: impl Fn(&Path) -> anyhow::Result<String>,
) -> anyhow::Result<Manifest> {
    let path = if arg.is_dir() {
        arg.join("manifest.json")
    } else {
        arg.to_path_buf()
    };
    let dir = path.parent().unwrap_or(Path::new(".")).to_path_buf();
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let j: Json = serde_json::from_str(&text)
        .with_context(|| format!("{}: not valid JSON", path.display()))?;
    let ctx = path.display().to_string();
    let model_rel = str_field(&j, "model", &ctx)?;
    let model = [dir.join(model_rel), PathBuf::from(model_rel)]
        .into_iter()
        .find(|p| p.exists())
        .ok_or_else(|| anyhow!("{ctx}: model `{model_rel}` not found"))?;
    if let Some(want) = j["model_sha256"].as_str() {
        let got = slmcc_runtime::package::sha256_file(&model)
            .map(|h| slmcc_runtime::package::hex(&h))
            .with_context(|| format!("cannot read {}", model.display()))?;
        if got != want {
            bail!(
                "{ctx}: {} has SHA-256 {got}, but the goldens were recorded from {want} (`model_sha256`): record them again for this model",
                model.display()
            );
        }
    }
    let tolerance = tolerance(&model)?;
    let t = &j["tolerances"][tolerance.as_str()];
    let max_rel = t["max_rel"]
        .as_f64()
        .ok_or_else(|| anyhow!("{ctx}: no tolerance `tolerances.{tolerance}.max_rel`"))?;
    let min_cosine = t["min_cosine"].as_f64();
    let cases = j["cases"]
        .as_array()
        .ok_or_else(|| anyhow!("{ctx}: missing `cases`"))?
        .iter()
        .map(|c| {
            let name = str_field(c, "name", &ctx)?.to_string();
            let inputs = c["inputs"]
                .as_object()
                .ok_or_else(|| anyhow!("{ctx}: case `{name}` has no `inputs`"))?
                .iter()
                .map(|(k, v)| {
                    Ok((
                        k.clone(),
                        dir.join(v.as_str().ok_or_else(|| anyhow!("{ctx}: input `{k}`"))?),
                    ))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let layers = c["layers"]
                .as_array()
                .ok_or_else(|| anyhow!("{ctx}: case `{name}` has no `layers`"))?
                .iter()
                .map(|l| {
                    Ok(Layer {
                        layer: str_field(l, "layer", &ctx)?.to_string(),
                        value: str_field(l, "value", &ctx)?.to_string(),
                        file: dir.join(str_field(l, "file", &ctx)?),
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok(Case {
                name,
                inputs,
                layers,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let m = Manifest {
        dir,
        model,
        max_rel,
        min_cosine,
        cases,
    };
    unique_cases(&m).map_err(|e| anyhow!("{ctx}: {e}"))?;
    Ok(m)
}

/// The first divergence found, for the closing line.
struct Divergence {
    at: String,
    message: String,
}

fn check(args: GoldenCheckArgs) -> CmdResult {
    let backend = Backend::from(args.backend);
    let quant = args.quant.get(QuantScheme::None)?;
    let label = run_label(&quant, args.backend);
    let mut first: Option<Divergence> = None;
    let mut layers_checked = 0usize;
    // The --json report: one entry per layer checked.
    let mut report: Vec<Json> = Vec::new();
    for arg in &args.goldens {
        let m = read_manifest(arg, |model| tolerance_for(model, &quant, args.backend))?;
        let mut module = Loaded::load(&m.model, &args.keys)?.module;
        let is_package = m.model.extension().is_some_and(|e| e == "slmpkg");
        if is_package {
            if args.quant.quant.is_some() || args.extra_passes.is_some() {
                return Err(anyhow!(
                    "{}: a package is checked as it was compiled; --quant and --extra-passes apply to models",
                    m.model.display()
                )
                .into());
            }
        } else {
            let cpu = args.threads.cpu_options();
            calibrate(&mut module, &args.quant, &quant, &m.model, &cpu)?;
            prepare_quantized(&mut module, quant, args.extra_passes.as_deref(), &m.model)?;
        }
        // A package's bucket graphs run as compiled, on inputs padded into
        // the smallest bucket that holds them.
        let buckets = match is_package && !module.buckets.is_empty() {
            true => Some(
                Buckets::new(&module, &super::load::bucket_base(&module, &m.model)?)
                    .map_err(|e| anyhow!("{}: {e}", m.model.display()))?,
            ),
            false => None,
        };
        for case in &m.cases {
            let cosine = m
                .min_cosine
                .map(|c| format!(", min_cosine {c}"))
                .unwrap_or_default();
            println!(
                "{} {} ({label}, tolerance max_rel {:e}{cosine})",
                m.dir.display(),
                case.name,
                m.max_rel
            );
            let inputs = case
                .inputs
                .iter()
                .map(|(n, f)| Ok((n.clone(), read_tensor(f)?)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let names: HashSet<String> = case.layers.iter().map(|l| l.value.clone()).collect();
            let cpu = args.threads.cpu_options();
            let (graph, inputs, cut) = match &buckets {
                Some(b) => {
                    let smallest = b.pick(0).expect("a bucket").0;
                    let inputs = computed_inputs_dropped(smallest, inputs)?;
                    let (g, info, padded, len) = b
                        .padded(&inputs, Padding::default())
                        .map_err(|e| anyhow!("{}: {e}", m.model.display()))?;
                    (g, padded, Some((info.size as usize, len)))
                }
                None => {
                    let graph = entry_graph(&module)?;
                    (graph, computed_inputs_dropped(graph, inputs)?, None)
                }
            };
            let producers = graph.producers();
            let result = execute(
                backend,
                &cpu,
                &module,
                graph,
                &inputs,
                &Capture::Names(names),
            )
            .map_err(|e| anyhow!("{}: {e}", m.model.display()))?;
            println!(
                "  {:<28} {:>12} {:>12} {:>10}",
                "layer", "max_abs", "max_rel", "cosine"
            );
            for l in &case.layers {
                let got = result.value(&l.value).ok_or_else(|| {
                    anyhow!(
                        "{}: case {}, layer `{}`: value `{}` is not computed by the graph",
                        m.dir.display(),
                        case.name,
                        l.layer,
                        l.value
                    )
                })?;
                let want = npy::read(&l.file).map_err(|e| anyhow!(e))?;
                let got = match cut {
                    Some((bucket, len)) => cut_to_length(got, want.shape(), bucket, len),
                    None => got.as_ref().clone(),
                };
                let d = diff(&got, &want).map_err(|e| anyhow!("layer `{}`: {e}", l.layer))?;
                let cosine_ok = m.min_cosine.is_none_or(|c| d.cosine >= c);
                let ok = d.max_rel <= m.max_rel && cosine_ok && d.mismatched_specials == 0;
                layers_checked += 1;
                report.push(serde_json::json!({
                    "goldens": m.dir.display().to_string(),
                    "case": case.name,
                    "layer": l.layer,
                    "value": l.value,
                    "max_abs": d.max_abs,
                    "max_rel": d.max_rel,
                    "cosine": d.cosine,
                    "max_rel_tolerance": m.max_rel,
                    "min_cosine": m.min_cosine,
                    "ok": ok,
                }));
                println!(
                    "  {:<28} {:>12.3e} {:>12.3e} {:>10.6}  {}",
                    l.layer,
                    d.max_abs,
                    d.max_rel,
                    d.cosine,
                    if ok { "ok" } else { "OVER" }
                );
                if !ok && first.is_none() {
                    let node = graph
                        .find(&l.value)
                        .and_then(|v| producers[v.index()])
                        .map(|p| {
                            let n = &graph.nodes[p.node];
                            format!(", produced by `{}` node %{}", n.op.mnemonic(), l.value)
                        })
                        .unwrap_or_default();
                    first = Some(Divergence {
                        at: format!("{} {} layer `{}`", m.dir.display(), case.name, l.layer),
                        message: format!(
                            "value `{}`{node}: max_rel {:.3e} (tolerance {:e}), cosine {:.6}{} (max_abs {:.3e} at element {}{})",
                            l.value,
                            d.max_rel,
                            m.max_rel,
                            d.cosine,
                            m.min_cosine.map(|c| format!(" (at least {c})")).unwrap_or_default(),
                            d.max_abs,
                            d.worst_index,
                            if d.mismatched_specials > 0 {
                                format!(", {} NaN/inf mismatches", d.mismatched_specials)
                            } else {
                                String::new()
                            }
                        ),
                    });
                }
            }
        }
    }
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "backend": args.backend.name(),
            "quant": quant_name(&quant),
            "ok": first.is_none(),
            "first_divergence": first.as_ref().map(|d| format!("{}: {}", d.at, d.message)),
            "layers": report,
        });
        let text = serde_json::to_string_pretty(&doc).expect("JSON") + "\n";
        super::opt::write_atomically(path, text.as_bytes())?;
    }
    match first {
        None => {
            println!("all {layers_checked} layers within tolerance");
            Ok(())
        }
        Some(d) => {
            println!("first divergence: {}: {}", d.at, d.message);
            Err(Failure::CheckFailed(anyhow!(
                "golden check failed at {}",
                d.at
            )))
        }
    }
}

/// The tolerance key a check of `model` reads: for a package, the
/// quantization it was compiled with (`w8a8`, ...) or, unquantized, the
/// backend's; for a model, what `--quant` and `--backend` ask for.
pub(super) fn tolerance_for(
    model: &Path,
    quant: &Quant,
    backend: BackendArg,
) -> anyhow::Result<String> {
    if model.extension().is_none_or(|e| e != "slmpkg") {
        return Ok(tolerance_key(quant, backend).to_string());
    }
    let pkg = slmcc_runtime::package::Package::open(model)?;
    let compiled = pkg
        .manifest
        .options
        .as_ref()
        .map(|o| o.quant.clone())
        .unwrap_or_default();
    Ok(match compiled.as_str() {
        "" | "none" => tolerance_key(&None, backend).to_string(),
        q => q.to_string(),
    })
}

/// A value of a padded bucket cut back to the golden's `shape`: each axis
/// that the bucket lengthened (`bucket` where the golden has `len`) keeps
/// its first `len` positions. Any other difference is left for the
/// comparison to report.
fn cut_to_length(t: &Tensor, shape: &[usize], bucket: usize, len: usize) -> Tensor {
    let axes: Vec<usize> = (0..shape.len())
        .filter(|&a| t.shape().get(a) != Some(&shape[a]))
        .collect();
    let lengthened = t.shape().len() == shape.len()
        && axes
            .iter()
            .all(|&a| t.shape()[a] == bucket && shape[a] == len);
    match lengthened && !axes.is_empty() {
        true => slice(t, &axes, len),
        false => t.clone(),
    }
}

/// The key of a manifest's `tolerances` that a check on `backend` with
/// `quant` reads: the quantization's name, else the backend's. Unquantized,
/// the register-interface backends run every node on the CPU kernels (they
/// take only W8A8 products): cpu's.
pub(super) fn tolerance_key(quant: &Quant, backend: BackendArg) -> &'static str {
    match (quant, backend) {
        (None, BackendArg::NpuSim | BackendArg::Npu) => BackendArg::Cpu.name(),
        (None, b) => b.name(),
        (q, _) => quant_name(q),
    }
}

/// `cpu`, or `npu-sim, w8a8`: what ran, for messages.
pub(super) fn run_label(quant: &Quant, backend: BackendArg) -> String {
    match quant {
        None => backend.name().to_string(),
        q => format!("{}, {}", backend.name(), quant_name(q)),
    }
}

/// Fails when a manifest names a case twice (keeps reports unambiguous).
fn unique_cases(m: &Manifest) -> anyhow::Result<()> {
    let mut seen = HashSet::new();
    for c in &m.cases {
        if !seen.insert(&c.name) {
            bail!("case `{}` appears twice", c.name);
        }
    }
    Ok(())
}
