//! `slmcc golden record`: goldens of an ONNX model from onnxruntime, every
//! value that the fused graph keeps under its ONNX name, so that `golden
//! check` names the first op that diverges.
//!
//! slmcc imports and fuses the model as `golden check` runs it, and lists
//! the fused graph's values; a Python helper (`golden_record.py`, embedded)
//! runs onnxruntime with those values added as outputs and writes each one.
//! With `--self` the values are slmcc's own on a backend (quantized or not)
//! and the tolerance is 0: self-goldens, compared bit for bit; a package's
//! are its bucket graphs' as compiled, run as `golden check` runs them.
//! Everything is written to a temporary folder beside DIR and renamed into
//! place at the end, so a failed record leaves nothing.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value as Json};
use slmcc_ir::Tensor;
use slmcc_runtime::npy;
use slmcc_runtime::package::{hex, sha256_file};

use slmcc_runtime::bucket::{Buckets, Padding};
use slmcc_runtime::Capture;

use super::load::{
    bucket_base, calibrate, computed_inputs_dropped, entry_graph, execute, load_module,
    prepare_quantized, read_tensor, Backend, Loaded,
};
use super::opt::partial_path;
use crate::cli::{GoldenRecordArgs, PackageKeys, QuantScheme};
use crate::exit::CmdResult;
use slmcc_passes::transforms::decoder_inputs;

/// The helper that runs onnxruntime.
const HELPER: &str = include_str!("golden_record.py");

/// The case every record writes.
const CASE: &str = "case0";

pub fn record(args: GoldenRecordArgs) -> CmdResult {
    Ok(record_goldens(&args)?)
}

fn record_goldens(args: &GoldenRecordArgs) -> anyhow::Result<()> {
    let model = &args.model;
    let is_package = model.extension().is_some_and(|e| e == "slmpkg");
    if model.extension().is_none_or(|e| e != "onnx") && !is_package {
        bail!(
            "{}: golden record takes an ONNX model (.onnx), or a package (.slmpkg) with --self",
            model.display()
        );
    }
    let out = &args.output;
    if out.exists() && std::fs::read_dir(out).map_or(true, |mut d| d.next().is_some()) {
        bail!(
            "{}: exists and is not an empty folder (goldens are written to a new one)",
            out.display()
        );
    }
    let inputs = read_inputs(args)?;
    if is_package {
        return record_package(args, inputs);
    }
    let quant = args.quant.get(QuantScheme::None)?;
    if !args.ours && quant.is_some() {
        bail!("--quant records slmcc's own values: give --self (onnxruntime's are FP32)");
    }
    let mut module = load_module(model)?;
    // The model's own inputs: onnxruntime is fed every one of them.
    let original = entry_graph(&module)?;
    let model_inputs: Vec<String> = original
        .inputs
        .iter()
        .map(|&v| original.value(v).name.clone())
        .collect();
    let cpu = args.threads.cpu_options();
    calibrate(&mut module, &args.quant, &quant, model, &cpu)?;
    prepare_quantized(&mut module, quant, None, model)?;
    let graph = entry_graph(&module)?;
    let model_refs: Vec<&str> = model_inputs.iter().map(String::as_str).collect();
    let named = name_inputs(inputs, &model_refs, model)?;
    // A decoder's attention_mask and position_ids, which `decoder-inputs`
    // computes in the graph: checked when given, their values made for
    // onnxruntime when not.
    let inputs = with_computed_inputs(named, &model_inputs, model)?;
    let ours = computed_inputs_dropped(graph, inputs.clone())?;
    for name in graph.inputs.iter().map(|&v| &graph.value(v).name) {
        if !ours.iter().any(|(n, _)| n == name) {
            bail!("{}: no value given for input `{name}`", model.display());
        }
    }
    // Every value the fused graph computes, in schedule order, then its
    // outputs: what `golden check` can compare. The cpu and NPU backends
    // run the graph specialised to the inputs' shapes, where more folds
    // away: only the values both keep are recorded.
    let (special, _) = slmcc::unplanned::specialize_to_inputs(&module, graph, &ours)
        .map_err(|e| anyhow!("{}: {e}", model.display()))?;
    let kept = &special.graphs[0];
    let mut values: Vec<String> = Vec::new();
    for node in &graph.nodes {
        values.extend(
            node.outputs
                .iter()
                .map(|&v| graph.value(v).name.clone())
                .filter(|name| kept.find(name).is_some()),
        );
    }
    for &v in &graph.outputs {
        let name = &graph.value(v).name;
        if !values.contains(name) {
            values.push(name.clone());
        }
    }
    let source = match args.ours {
        true => Source::Slmcc(SelfRun {
            module: &module,
            graph,
            inputs: ours,
            tolerance_key: super::golden::tolerance_key(&quant, args.backend).to_string(),
            label: super::golden::run_label(&quant, args.backend),
        }),
        false => Source::Onnxruntime,
    };
    write_into_place(args, &inputs, &values, source)
}

/// Writes the record into a temporary folder beside `--output` and
/// renames it into place; a failure leaves nothing.
fn write_into_place(
    args: &GoldenRecordArgs,
    inputs: &[(String, Tensor)],
    values: &[String],
    source: Source<'_>,
) -> anyhow::Result<()> {
    let out = &args.output;
    let tmp = partial_path(out);
    let written = write_record(args, &tmp, inputs, values, source).and_then(|()| {
        std::fs::rename(&tmp, out).with_context(|| format!("cannot write {}", out.display()))
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
}

/// Self-goldens of a package, as `golden check` runs it: the inputs padded
/// into the smallest bucket that holds them, that bucket graph run as
/// compiled on `--backend`, and every `f32` value it computes recorded
/// whole (padding included: the check pads the same way), under the
/// tolerance key of the package's own quantization.
fn record_package(args: &GoldenRecordArgs, inputs: Vec<(String, Tensor)>) -> anyhow::Result<()> {
    let model = &args.model;
    if !args.ours {
        bail!(
            "{}: onnxruntime runs ONNX models; record a package's own values with --self",
            model.display()
        );
    }
    if args.quant.quant.is_some() {
        bail!(
            "{}: a package is recorded as it was compiled; --quant applies to models",
            model.display()
        );
    }
    let module = Loaded::load(model, &PackageKeys::default())?.module;
    let at = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", model.display());
    let buckets = Buckets::new(&module, &bucket_base(&module, model)?).map_err(|e| at(&e))?;
    let smallest = buckets.pick(0).ok_or_else(|| at(&"no bucket graphs"))?.0;
    let names: Vec<&str> = smallest
        .inputs
        .iter()
        .map(|&v| smallest.value(v).name.as_str())
        .collect();
    let named = name_inputs(inputs, &names, model)?;
    let ours = computed_inputs_dropped(smallest, named.clone())?;
    let (graph, _, padded, _) = buckets
        .padded(&ours, Padding::default())
        .map_err(|e| at(&e))?;
    // What the graph computes: not its constants.
    let mut values: Vec<String> = graph
        .nodes
        .iter()
        .filter(|n| !matches!(n.op, slmcc_ir::Op::Constant(_)))
        .flat_map(|n| n.outputs.iter().map(|&v| graph.value(v).name.clone()))
        .collect();
    for &v in &graph.outputs {
        let name = &graph.value(v).name;
        if !values.contains(name) {
            values.push(name.clone());
        }
    }
    let tolerance_key = super::golden::tolerance_for(model, &None, args.backend)?;
    let source = Source::Slmcc(SelfRun {
        module: &module,
        graph,
        inputs: padded,
        label: format!("package, {}", args.backend.name()),
        tolerance_key,
    });
    write_into_place(args, &named, &values, source)
}

/// The inputs as given: `(name, file, tensor)`, the name empty where a
/// `.pb` in `--inputs` has none.
fn read_inputs(args: &GoldenRecordArgs) -> anyhow::Result<Vec<(String, Tensor)>> {
    if let Some(dir) = &args.inputs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("input_") && n.ends_with(".pb"))
            })
            .collect();
        files.sort_by_key(|p| {
            let n = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            n.trim_start_matches("input_")
                .parse::<usize>()
                .unwrap_or(usize::MAX)
        });
        if files.is_empty() {
            bail!("{}: no input_N.pb files", dir.display());
        }
        return files
            .iter()
            .map(|f| Ok(slmcc::onnx::read_tensor_pb(f)?))
            .collect();
    }
    if args.input.is_empty() {
        bail!("give the inputs: --input NAME=FILE (repeat), or --inputs DIR with input_N.pb");
    }
    args.input
        .iter()
        .map(|spec| {
            let (name, file) = spec
                .split_once('=')
                .ok_or_else(|| anyhow!("--input `{spec}`: expected NAME=FILE"))?;
            Ok((name.to_string(), read_tensor(Path::new(file))?))
        })
        .collect()
}

/// Names each input (an unnamed one by its position among the model's
/// inputs) and checks that each is an input of the model.
fn name_inputs(
    inputs: Vec<(String, Tensor)>,
    graph_inputs: &[&str],
    model: &Path,
) -> anyhow::Result<Vec<(String, Tensor)>> {
    let named: Vec<(String, Tensor)> = inputs
        .into_iter()
        .enumerate()
        .map(
            |(i, (name, t))| match (name.is_empty(), graph_inputs.get(i)) {
                (false, _) => Ok((name, t)),
                (true, Some(n)) => Ok((n.to_string(), t)),
                (true, None) => Err(anyhow!(
                    "{}: input {i} has no name and the model has no input {i}",
                    model.display()
                )),
            },
        )
        .collect::<anyhow::Result<_>>()?;
    for (name, _) in &named {
        if !graph_inputs.contains(&name.as_str()) {
            bail!(
                "{}: `{name}` is not an input of the model (its inputs: {})",
                model.display(),
                graph_inputs.join(", ")
            );
        }
    }
    Ok(named)
}

/// `inputs` with the values a batch-1 decoder's graph computes for its
/// missing `attention_mask` and `position_ids` added (onnxruntime needs
/// them); fails naming any other input left out.
fn with_computed_inputs(
    mut inputs: Vec<(String, Tensor)>,
    model_inputs: &[String],
    model: &Path,
) -> anyhow::Result<Vec<(String, Tensor)>> {
    let seq = inputs
        .iter()
        .find(|(n, _)| n == decoder_inputs::TOKEN_INPUT)
        .and_then(|(_, t)| t.shape().get(1).copied());
    let past = inputs
        .iter()
        .find(|(n, t)| n.starts_with(decoder_inputs::PAST_PREFIX) && t.shape().len() == 4)
        .map_or(0, |(_, t)| t.shape()[2]);
    for name in model_inputs {
        if inputs.iter().any(|(n, _)| n == name) {
            continue;
        }
        match seq.and_then(|seq| decoder_inputs::default_value(name, seq, past)) {
            Some(t) => inputs.push((name.clone(), t)),
            None => bail!("{}: no value given for input `{name}`", model.display()),
        }
    }
    Ok(inputs)
}

/// Where the values come from.
enum Source<'a> {
    /// onnxruntime, through the Python helper.
    Onnxruntime,
    /// slmcc itself on `--backend`.
    Slmcc(SelfRun<'a>),
}

/// What `--self` runs: `graph` of the fused (and quantized) module, or a
/// package's bucket graph, on `inputs` as given.
struct SelfRun<'a> {
    module: &'a slmcc_ir::Module,
    graph: &'a slmcc_ir::Graph,
    inputs: Vec<(String, Tensor)>,
    /// The manifest's `tolerances` key that `golden check` reads.
    tolerance_key: String,
    /// What ran, for the manifest's `source`.
    label: String,
}

/// What a source recorded: each value's name, file (in the case folder)
/// and shape, what computed them, and the tolerances to check them with.
struct Recorded {
    values: Vec<(String, String, Vec<usize>)>,
    source: String,
    tolerances: Json,
}

/// Writes the inputs, records the values and writes the manifest, all in
/// `dir`.
fn write_record(
    args: &GoldenRecordArgs,
    dir: &Path,
    inputs: &[(String, Tensor)],
    values: &[String],
    source: Source<'_>,
) -> anyhow::Result<()> {
    let case = dir.join(CASE);
    std::fs::create_dir_all(&case).with_context(|| format!("cannot create {}", case.display()))?;
    let mut input_files = serde_json::Map::new();
    let mut feeds = serde_json::Map::new();
    for (i, (name, t)) in inputs.iter().enumerate() {
        let file = format!("input_{i}.npy");
        npy::write(&case.join(&file), t).map_err(|e| anyhow!(e))?;
        input_files.insert(name.clone(), json!(format!("{CASE}/{file}")));
        feeds.insert(name.clone(), json!(case.join(&file)));
    }
    let recorded = match source {
        Source::Onnxruntime => {
            let mut recorded = from_onnxruntime(args, dir, &case, feeds, values)?;
            for &scheme in &args.quant_tolerances {
                let (key, tolerance) = quantized_tolerance(args, scheme, inputs, &case, &recorded)?;
                recorded.tolerances[key] = tolerance;
            }
            recorded
        }
        Source::Slmcc(run) => from_slmcc(args, &run, &case, values)?,
    };
    if recorded.values.is_empty() {
        bail!(
            "{}: no float32 value of the fused graph to record",
            args.model.display()
        );
    }
    let layers: Vec<Json> = recorded
        .values
        .iter()
        .map(|(name, file, shape)| {
            json!({"layer": name, "value": name, "file": format!("{CASE}/{file}"), "shape": shape})
        })
        .collect();
    let sha = sha256_file(&args.model)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    let manifest = json!({
        "model": model_path(&args.model, &args.output),
        "model_sha256": hex(&sha),
        "source": recorded.source,
        "relative_error": "max|a - b| / max(max|b|, 1e-6) over the whole tensor, b = golden",
        "tolerances": recorded.tolerances,
        "cases": [{"name": CASE, "inputs": input_files, "layers": layers}],
    });
    let text = serde_json::to_string_pretty(&manifest).expect("JSON");
    std::fs::write(dir.join("manifest.json"), text + "\n")
        .with_context(|| format!("cannot write {}", dir.display()))?;
    eprintln!(
        "wrote {}: {} values of {} recorded by {}",
        args.output.display(),
        recorded.values.len(),
        args.model.display(),
        recorded.source
    );
    Ok(())
}

/// slmcc's own values on `--backend`: every one of `values` that the run's
/// graph computes in `f32`, with tolerance 0 under its key, which `golden
/// check` looks up for the same `--backend` and `--quant` (a package: its
/// own).
fn from_slmcc(
    args: &GoldenRecordArgs,
    run: &SelfRun<'_>,
    case: &Path,
    values: &[String],
) -> anyhow::Result<Recorded> {
    let capture = Capture::Names(values.iter().cloned().collect());
    let cpu = args.threads.cpu_options();
    let result = execute(
        Backend::from(args.backend),
        &cpu,
        run.module,
        run.graph,
        &run.inputs,
        &capture,
    )
    .map_err(|e| anyhow!("{}: {e}", args.model.display()))?;
    let mut recorded = Vec::new();
    for name in values {
        let tensor = result.value(name);
        let Some(t) = tensor.filter(|t| t.dtype() == slmcc_ir::DType::F32) else {
            continue;
        };
        let file = format!("v{:04}.npy", recorded.len());
        npy::write(&case.join(&file), t).map_err(|e| anyhow!(e))?;
        recorded.push((name.clone(), file, t.shape().to_vec()));
    }
    Ok(Recorded {
        values: recorded,
        source: format!(
            "slmcc {} ({}): self-goldens, compared bit for bit",
            env!("CARGO_PKG_VERSION"),
            run.label
        ),
        tolerances: json!({ &run.tolerance_key: {"max_rel": 0.0} }),
    })
}

/// The tolerance of `scheme` (`--quant-tolerances`): slmcc's values with
/// the model quantized so, on cpu, against the FP32 values just recorded
/// in `case`; the worst value's `max_rel` x1.5 and `1 - cosine` x2, the
/// margins `testdata/models/goldens.py` uses. Returns the manifest key
/// `golden check --quant` reads, and the tolerance.
fn quantized_tolerance(
    args: &GoldenRecordArgs,
    scheme: QuantScheme,
    inputs: &[(String, Tensor)],
    case: &Path,
    fp32: &Recorded,
) -> anyhow::Result<(String, Json)> {
    let model = &args.model;
    let quant_args = crate::cli::QuantArgs {
        quant: Some(scheme),
        ..args.quant.clone()
    };
    let quant = quant_args.get(QuantScheme::None)?;
    let mut module = load_module(model)?;
    let cpu = args.threads.cpu_options();
    calibrate(&mut module, &quant_args, &quant, model, &cpu)?;
    prepare_quantized(&mut module, quant, None, model)?;
    let graph = entry_graph(&module)?;
    let feeds = computed_inputs_dropped(graph, inputs.to_vec())?;
    let names = fp32.values.iter().map(|(n, _, _)| n.clone()).collect();
    let result = execute(
        Backend::Cpu,
        &cpu,
        &module,
        graph,
        &feeds,
        &Capture::Names(names),
    )
    .map_err(|e| anyhow!("{}: {e}", model.display()))?;
    let key = super::golden::tolerance_key(&quant, crate::cli::BackendArg::Cpu).to_string();
    let (mut worst_rel, mut worst_cosine) = (0f64, 1f64);
    for (name, file, _) in &fp32.values {
        let got = result.value(name);
        // A value quantization folds away (a weight's product) has no
        // counterpart: `golden check --quant` names it if it looks for it.
        let Some(got) = got else { continue };
        let want = npy::read(&case.join(file)).map_err(|e| anyhow!(e))?;
        let d = slmcc_runtime::compare::diff(got, &want)
            .map_err(|e| anyhow!("{}: `{name}` with {key}: {e}", model.display()))?;
        worst_rel = worst_rel.max(d.max_rel);
        worst_cosine = worst_cosine.min(d.cosine);
    }
    let tolerance = json!({
        "max_rel": round_up(worst_rel * 1.5),
        "min_cosine": 1.0 - round_up((1.0 - worst_cosine) * 2.0),
    });
    eprintln!(
        "{key}: worst value max_rel {worst_rel:.3e}, cosine {worst_cosine:.6}; tolerance {tolerance}"
    );
    Ok((key, tolerance))
}

/// `x` rounded up to two significant digits (a tolerance reads better so).
fn round_up(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let scale = 10f64.powi(x.log10().floor() as i32 - 1);
    (x / scale).ceil() * scale
}

/// onnxruntime's values, through the Python helper.
fn from_onnxruntime(
    args: &GoldenRecordArgs,
    dir: &Path,
    case: &Path,
    feeds: serde_json::Map<String, Json>,
    values: &[String],
) -> anyhow::Result<Recorded> {
    let request = dir.join("request.json");
    std::fs::write(
        &request,
        json!({"inputs": feeds, "values": values}).to_string(),
    )
    .with_context(|| format!("cannot write {}", request.display()))?;
    let python = args
        .python
        .clone()
        .or_else(|| std::env::var_os("SLMCC_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    tracing::info!("running onnxruntime through {}", python.display());
    let o = Command::new(&python)
        .arg("-c")
        .arg(HELPER)
        .arg(&args.model)
        .arg(case)
        .arg(&request)
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    std::fs::remove_file(&request).ok();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let answer: Json = serde_json::from_str(stdout.lines().last().unwrap_or("")).map_err(|_| {
        anyhow!(
            "{}: the onnxruntime helper failed: {}",
            python.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        )
    })?;
    if let Some(e) = answer["error"].as_str() {
        bail!("{}: {e}", args.model.display());
    }
    let recorded = answer["values"]
        .as_array()
        .ok_or_else(|| anyhow!("the onnxruntime helper gave no values"))?
        .iter()
        .map(|v| {
            let shape = v[2].as_array().map_or_else(Vec::new, |d| {
                d.iter()
                    .filter_map(|x| x.as_u64())
                    .map(|x| x as usize)
                    .collect()
            });
            (
                v[0].as_str().unwrap_or_default().to_string(),
                v[1].as_str().unwrap_or_default().to_string(),
                shape,
            )
        })
        .collect();
    Ok(Recorded {
        values: recorded,
        source: format!(
            "onnxruntime {}, CPUExecutionProvider, ORT_DISABLE_ALL, 1 thread",
            answer["onnxruntime"].as_str().unwrap_or("?")
        ),
        tolerances: json!({"reference": {"max_rel": 1e-5}, "cpu": {"max_rel": 1e-5}}),
    })
}

/// The model's path as the manifest names it: relative to the goldens'
/// folder, so that the two move together, or absolute when they share no
/// root.
fn model_path(model: &Path, out: &Path) -> String {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (model, out) = (absolute(model), absolute(out));
    fn normal(p: &Path) -> Vec<Component<'_>> {
        p.components().filter(|c| *c != Component::CurDir).collect()
    }
    let (m, o) = (normal(&model), normal(&out));
    let common = m.iter().zip(&o).take_while(|(a, b)| a == b).count();
    if common == 0 || o[common..].contains(&Component::ParentDir) {
        return model.display().to_string();
    }
    let mut rel = PathBuf::new();
    for _ in common..o.len() {
        rel.push("..");
    }
    for c in &m[common..] {
        rel.push(c.as_os_str());
    }
    rel.display().to_string()
}
