//! `slmcc onnx-test`: run ONNX backend-test folders and report each test.
//!
//! A test folder holds `model.onnx` and `test_data_set_N/input_K.pb`,
//! `output_K.pb`. Outputs are compared as the ONNX backend test runner does:
//! `allclose` with `rtol = 1e-3`, `atol = 1e-7`, NaN equal to NaN, integers
//! and booleans exactly. Prints one line per test and ends with
//! `N passed, M failed`; exits 1 if any test failed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::Tensor;
use slmcc_runtime::compare::allclose;
use slmcc_runtime::Capture;

use super::load::{entry_graph, execute, prepare, Backend};
use crate::cli::OnnxTestArgs;
use crate::exit::{CmdResult, Failure};

const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

pub fn run(args: OnnxTestArgs) -> CmdResult {
    let backend = Backend::from(args.backend);
    for d in &args.dirs {
        if !d.is_dir() {
            return Err(anyhow!("{}: not a folder", d.display()).into());
        }
    }
    let tests = match &args.manifest {
        Some(m) => from_manifest(m, &args.dirs)?,
        None => discover(&args.dirs)?,
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    let mut report = Vec::new();
    for (name, dir) in &tests {
        let outcome = match dir {
            None => Err("listed in the manifest but not found".to_string()),
            Some(dir) => run_isolated(dir, backend, &args.threads.cpu_options()),
        };
        match &outcome {
            Ok(()) => {
                passed += 1;
                println!("ok   {name}");
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {name}: {e}");
            }
        }
        report.push(serde_json::json!({
            "name": name,
            "status": if outcome.is_ok() { "pass" } else { "fail" },
            "message": outcome.err(),
        }));
    }
    println!("{passed} passed, {failed} failed");
    if let Some(path) = &args.json {
        let doc = serde_json::json!({"passed": passed, "failed": failed, "tests": report});
        let text = serde_json::to_string_pretty(&doc).expect("JSON of strings and numbers");
        super::opt::write_atomically(path, text.as_bytes())?;
    }
    if failed > 0 {
        return Err(Failure::CheckFailed(anyhow!(
            "{failed} of {} ONNX tests failed",
            tests.len()
        )));
    }
    Ok(())
}

/// Every test folder under the given folders (a folder with `model.onnx` is
/// itself a test), sorted by name.
fn discover(dirs: &[PathBuf]) -> anyhow::Result<Vec<(String, Option<PathBuf>)>> {
    let mut out = Vec::new();
    for d in dirs {
        if d.join("model.onnx").is_file() {
            out.push((test_name(d), Some(d.clone())));
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(d)
            .with_context(|| format!("cannot read {}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("model.onnx").is_file())
            .collect();
        found.sort();
        out.extend(found.into_iter().map(|p| (test_name(&p), Some(p))));
    }
    if out.is_empty() {
        bail!("no ONNX test folders (with model.onnx) under the given folders");
    }
    Ok(out)
}

fn test_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// The tests a manifest lists, each looked up in the given folders.
fn from_manifest(
    manifest: &Path,
    dirs: &[PathBuf],
) -> anyhow::Result<Vec<(String, Option<PathBuf>)>> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let names: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    if names.is_empty() {
        bail!("{}: lists no tests", manifest.display());
    }
    Ok(names
        .into_iter()
        .map(|n| {
            let dir = dirs
                .iter()
                .map(|d| d.join(n))
                .find(|p| p.join("model.onnx").is_file());
            (n.to_string(), dir)
        })
        .collect())
}

/// Runs one test; a panic inside is reported as the test's failure rather
/// than ending the whole run.
fn run_isolated(dir: &Path, backend: Backend, cpu: &CpuOptions) -> Result<(), String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(|| run_one(dir, backend, cpu)));
    std::panic::set_hook(hook);
    match r {
        Ok(r) => r.map_err(|e| format!("{e:#}")),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("internal error (panic): {msg}"))
        }
    }
}

fn run_one(dir: &Path, backend: Backend, cpu: &CpuOptions) -> anyhow::Result<()> {
    let model_path = dir.join("model.onnx");
    let mut module = slmcc::onnx::import_model(&model_path).map_err(|e| anyhow!("import: {e}"))?;
    prepare(&mut module, &model_path)?;
    let graph = entry_graph(&module)?;
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() && test_name(p).starts_with("test_data_set_"))
        .collect();
    sets.sort();
    if sets.is_empty() {
        bail!("no test_data_set_N folders");
    }
    for set in sets {
        let inputs = read_numbered(&set, "input")?;
        let expected = read_numbered(&set, "output")?;
        let mut named = Vec::new();
        for (k, (pb_name, t)) in inputs.into_iter().enumerate() {
            let by_name = graph.inputs.iter().any(|&v| graph.value(v).name == pb_name);
            let name = if by_name {
                pb_name
            } else {
                let v = graph
                    .inputs
                    .get(k)
                    .ok_or_else(|| anyhow!("input_{k}.pb has no matching graph input"))?;
                graph.value(*v).name.clone()
            };
            named.push((name, t));
        }
        let result = execute(backend, cpu, &module, graph, &named, &Capture::Nothing)
            .map_err(|e| anyhow!("{e}"))?;
        if result.outputs.len() != expected.len() {
            bail!(
                "{} outputs, the test expects {}",
                result.outputs.len(),
                expected.len()
            );
        }
        for (k, ((name, got), (_, want))) in result.outputs.iter().zip(&expected).enumerate() {
            allclose(got, want, RTOL, ATOL)
                .map_err(|e| anyhow!("{}: output {k} (`{name}`): {e}", test_name(&set)))?;
        }
    }
    Ok(())
}

/// `PREFIX_0.pb`, `PREFIX_1.pb`, ... in order, with the names they carry.
fn read_numbered(set: &Path, prefix: &str) -> anyhow::Result<Vec<(String, Tensor)>> {
    let mut out = Vec::new();
    for k in 0.. {
        let p = set.join(format!("{prefix}_{k}.pb"));
        if !p.is_file() {
            break;
        }
        out.push(slmcc::onnx::read_tensor_pb(&p)?);
    }
    Ok(out)
}
