//! `slmcc golden record`: goldens of an ONNX model from onnxruntime, every
//! value that the fused graph keeps under its ONNX name, so that `golden
//! check` names the first op that diverges.
//!
//! slmcc imports and fuses the model as `golden check` runs it, and lists
//! the fused graph's values; a Python helper (`golden_record.py`, embedded)
//! runs onnxruntime with those values added as outputs and writes each one.
//! Everything is written to a temporary folder beside DIR and renamed into
//! place at the end, so a failed record leaves nothing.

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context};
use serde_json::{json, Value as Json};
use slmcc_ir::Tensor;
use slmcc_runtime::npy;
use slmcc_runtime::package::{hex, sha256_file};

use super::load::{entry_graph, load_module, prepare, read_tensor};
use super::opt::partial_path;
use crate::cli::GoldenRecordArgs;
use crate::exit::CmdResult;

/// The helper that runs onnxruntime.
const HELPER: &str = include_str!("golden_record.py");

/// The case every record writes.
const CASE: &str = "case0";

pub fn record(args: GoldenRecordArgs) -> CmdResult {
    Ok(record_goldens(&args)?)
}

fn record_goldens(args: &GoldenRecordArgs) -> anyhow::Result<()> {
    let model = &args.model;
    if model.extension().is_none_or(|e| e != "onnx") {
        bail!(
            "{}: golden record takes an ONNX model (.onnx)",
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
    let mut module = load_module(model)?;
    prepare(&mut module, model)?;
    let graph = entry_graph(&module)?;
    let graph_inputs: Vec<&str> = graph
        .inputs
        .iter()
        .map(|&v| graph.value(v).name.as_str())
        .collect();
    let inputs = name_inputs(inputs, &graph_inputs, model)?;
    // Every value the fused graph computes, in schedule order, then its
    // outputs: what `golden check` can compare. The cpu and NPU backends
    // run the graph specialised to the inputs' shapes, where more folds
    // away: only the values both keep are recorded.
    let (special, _) = slmcc::unplanned::specialize_to_inputs(&module, graph, &inputs)
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
    let tmp = partial_path(out);
    let written = write_record(args, &tmp, &inputs, &values).and_then(|()| {
        std::fs::rename(&tmp, out).with_context(|| format!("cannot write {}", out.display()))
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
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

/// Names each input (an unnamed one by its position among the graph's
/// inputs) and checks that they are exactly the graph's inputs.
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
                    "input {i} has no name and the model has no input {i}"
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
    if let Some(missing) = graph_inputs
        .iter()
        .find(|g| !named.iter().any(|(n, _)| n == *g))
    {
        bail!("{}: no value given for input `{missing}`", model.display());
    }
    Ok(named)
}

/// Writes the inputs, runs the helper and writes the manifest, all in `dir`.
fn write_record(
    args: &GoldenRecordArgs,
    dir: &Path,
    inputs: &[(String, Tensor)],
    values: &[String],
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
        .arg(&case)
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
        .ok_or_else(|| anyhow!("the onnxruntime helper gave no values"))?;
    if recorded.is_empty() {
        bail!(
            "{}: no float32 value of the fused graph is an ONNX node's output",
            args.model.display()
        );
    }
    let layers: Vec<Json> = recorded
        .iter()
        .map(|v| {
            json!({"layer": v[0], "value": v[0], "file": format!("{CASE}/{}", v[1].as_str().unwrap_or("")), "shape": v[2]})
        })
        .collect();
    let sha = sha256_file(&args.model)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    let manifest = json!({
        "model": model_path(&args.model, &args.output),
        "model_sha256": hex(&sha),
        "source": format!(
            "onnxruntime {}, CPUExecutionProvider, ORT_DISABLE_ALL, 1 thread",
            answer["onnxruntime"].as_str().unwrap_or("?")
        ),
        "relative_error": "max|a - b| / max(max|b|, 1e-6) over the whole tensor, b = golden",
        "tolerances": {"reference": {"max_rel": 1e-5}, "cpu": {"max_rel": 1e-5}},
        "cases": [{"name": CASE, "inputs": input_files, "layers": layers}],
    });
    let text = serde_json::to_string_pretty(&manifest).expect("JSON");
    std::fs::write(dir.join("manifest.json"), text + "\n")
        .with_context(|| format!("cannot write {}", dir.display()))?;
    eprintln!(
        "wrote {}: {} values of {} recorded by onnxruntime {}",
        args.output.display(),
        recorded.len(),
        args.model.display(),
        answer["onnxruntime"].as_str().unwrap_or("?")
    );
    Ok(())
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
