//! `slmcc run`: run a model on input tensors and write or summarise its outputs.

use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use slmcc::pipeline::{BucketSpec, PackTarget, Pipeline, Quant};
use slmcc_ir::{Graph, Module, Tensor};
use slmcc_passes::transforms::bucket_specialize::parse_buckets;
use slmcc_runtime::bucket::{Buckets, Padding};
use slmcc_runtime::exec::{ExecError, KernelSet};
use slmcc_runtime::package::Package;
use slmcc_runtime::planned::PlannedBuckets;
use slmcc_runtime::{npy, Capture, RunResult};

use super::load::{
    bucket_base, calibrate, computed_inputs_dropped, cpu_kernels, entry_graph, execute,
    npu_kernels, npu_lowered, prepare_quantized, read_tensor, Backend, Loaded,
};
use super::profile::{Phases, Profile};
use crate::cli::{BackendArg, QuantScheme, RunArgs};
use crate::exit::CmdResult;

pub fn run(args: RunArgs) -> CmdResult {
    args.threads.pin()?;
    let is_package = args.model.extension().is_some_and(|e| e == "slmpkg");
    let mut inputs: Vec<(String, Tensor)> = Vec::new();
    for spec in &args.input {
        let Some((name, file)) = spec.split_once('=') else {
            return Err(anyhow!("--input `{spec}`: expected NAME=FILE").into());
        };
        inputs.push((name.to_string(), read_tensor(Path::new(file))?));
    }
    check_unique(&inputs)?;
    let loaded = Loaded::load(&args.model, &args.keys)?;
    let backend = loaded.backend(args.backend, BackendArg::Reference);
    let Loaded {
        mut module,
        package,
    } = loaded;
    let quant = args.quant.get(QuantScheme::None)?;
    if is_package && args.quant.quant.is_some() {
        return Err(anyhow!(
            "{}: a package is quantized when it is compiled; --quant applies to models",
            args.model.display()
        )
        .into());
    }
    if is_package && args.extra_passes.is_some() {
        return Err(anyhow!(
            "{}: a package's passes ran when it was compiled; --extra-passes applies to models",
            args.model.display()
        )
        .into());
    }
    if !is_package {
        let cpu = args.threads.cpu_options();
        calibrate(&mut module, &args.quant, &quant, &args.model, &cpu)?;
    }
    let profile = args.profile.then(Profile::new);
    let started = Instant::now();
    let result = if args.buckets.is_some() || !module.buckets.is_empty() {
        run_bucketed(
            &mut module,
            package.as_ref(),
            backend,
            quant,
            &args,
            &inputs,
            profile.as_ref(),
        )?
    } else if profile.is_some() {
        return Err(anyhow!(
            "{}: --profile times the planned executor: give a package or --buckets",
            args.model.display()
        )
        .into());
    } else {
        prepare_quantized(
            &mut module,
            quant,
            args.extra_passes.as_deref(),
            &args.model,
        )?;
        let graph = entry_graph(&module)?;
        let inputs = computed_inputs_dropped(graph, inputs)
            .map_err(|e| anyhow!("{}: {e}", args.model.display()))?;
        execute(
            backend,
            &args.threads.cpu_options(),
            &module,
            graph,
            &inputs,
            &Capture::Nothing,
        )
        .map_err(|e| anyhow!("{}: {e}", args.model.display()))?
    };
    if let Some(p) = &profile {
        p.print(&Phases::Run {
            wall: started.elapsed(),
        });
    }
    match &args.output_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for (name, t) in &result.outputs {
                let path = dir.join(format!("{}.npy", file_stem(name)));
                let bytes = npy::to_bytes(t).map_err(|e| anyhow!("output `{name}`: {e}"))?;
                super::opt::write_atomically(&path, &bytes)?;
                println!(
                    "{name}: {} {:?} -> {}",
                    t.dtype(),
                    t.shape(),
                    path.display()
                );
            }
        }
        None => {
            for (name, t) in &result.outputs {
                println!("{}", summary(name, t));
            }
        }
    }
    Ok(())
}

/// Runs on sequence-length buckets: specialises the model to `--buckets`
/// (and, on `cpu`, plans its memory), or takes the buckets a `.slm` was
/// specialised to ahead of time; then pads the inputs into the smallest
/// bucket that holds them, runs it, and slices the outputs back. On `cpu`
/// that bucket's executor is loaded once with its kernels (JIT) and runs
/// inside its planned arena; on `reference` the interpreter runs the
/// padded bucket graph.
fn run_bucketed(
    module: &mut Module,
    pkg: Option<&Package>,
    backend: Backend,
    quant: Quant,
    args: &RunArgs,
    inputs: &[(String, Tensor)],
    profile: Option<&Rc<Profile>>,
) -> anyhow::Result<RunResult> {
    let path = &args.model;
    let at = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", path.display());
    let mut pipeline = None;
    let base = match &args.buckets {
        Some(list) => {
            if !module.buckets.is_empty() {
                bail!(
                    "{}: the module is already specialised to buckets; --buckets applies only to unspecialised models",
                    path.display()
                );
            }
            let sizes = parse_buckets(list).map_err(|e| anyhow!("--buckets: {e}"))?;
            let bucketed = Pipeline::fusion()
                .quantized(quant)
                .extra_passes(args.extra_passes.as_deref())
                .buckets(BucketSpec::Sizes(sizes));
            pipeline = Some(match backend {
                Backend::Reference => bucketed.text(),
                Backend::Cpu => bucketed.packed(PackTarget::Cpu).planned().text(),
                Backend::Npu(_) => bucketed.packed(PackTarget::Rk3588).planned().text(),
            });
            entry_graph(module)?.name.clone()
        }
        None => bucket_base(module, path)?,
    };
    if pipeline.is_none()
        && backend != Backend::Reference
        && module.buckets.keys().any(|g| !module.plans.contains_key(g))
    {
        pipeline = Some("plan-memory".to_string());
    }
    if let Some(pipeline) = pipeline {
        slmcc_passes::run_pipeline(module, &pipeline)
            .with_context(|| format!("{}", path.display()))?;
    }
    if !module.buckets.values().any(|b| b.base == base) {
        bail!(
            "{}: graph @{base} has no input with a `seq` axis to specialise for --buckets",
            path.display()
        );
    }
    let buckets = Buckets::new(module, &base).map_err(|e| at(&e))?;
    let (smallest, _) = buckets.pick(0).expect("at least one bucket");
    let inputs = &computed_inputs_dropped(smallest, inputs.to_vec()).map_err(|e| at(&e))?;
    if let Some((name, _)) = inputs.iter().find(|(n, _)| {
        !smallest
            .inputs
            .iter()
            .any(|&i| smallest.value(i).name == *n)
    }) {
        bail!(
            "{}: graph @{base}: `{name}` is not an input of the graph",
            path.display()
        );
    }
    let len = buckets.length(inputs).map_err(|e| at(&e))?;
    let padding = Padding::default();
    let run = match backend {
        Backend::Reference if profile.is_some() => {
            bail!("--profile times kernels: it needs --backend cpu or npu-sim")
        }
        Backend::Reference => buckets.run(inputs, padding).map_err(|e| at(&e))?,
        Backend::Cpu | Backend::Npu(_) => {
            let Some((_, info)) = buckets.pick(len) else {
                bail!(
                    "{}: graph @{base}: input has seq = {len}, which exceeds the largest bucket ({})",
                    path.display(),
                    buckets.sizes().last().copied().unwrap_or(0)
                );
            };
            let size = info.size as usize;
            let options = args.threads.cpu_options();
            let lowered = match backend {
                Backend::Npu(_) => Some(npu_lowered(module, pkg).map_err(|e| at(&e))?),
                _ => None,
            };
            let module = &*module;
            let kernels = |g: &Graph| -> Result<Box<dyn KernelSet>, ExecError> {
                let fail = |message: String| ExecError {
                    graph: g.name.clone(),
                    node: None,
                    message,
                };
                let kernels: Box<dyn KernelSet> = match (backend, &lowered) {
                    (Backend::Npu(b), Some(lowered)) => {
                        Box::new(npu_kernels(module, g, lowered, pkg, &options, b).map_err(fail)?)
                    }
                    _ => cpu_kernels(g, pkg, &options).map_err(fail)?,
                };
                Ok(match profile {
                    Some(p) => p.wrap(g, kernels),
                    None => kernels,
                })
            };
            let mut planned =
                PlannedBuckets::load(module, &base, padding, &|s| s == size, &kernels)
                    .map_err(|e| at(&e))?;
            planned.run(inputs).map_err(|e| at(&e))?
        }
    };
    tracing::info!(
        "ran {} tokens in the {} bucket of @{base}",
        run.length,
        run.bucket
    );
    Ok(run.result)
}

/// A file name for a value name: anything but `[A-Za-z0-9_.-]` becomes `_`.
pub fn file_stem(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// One line about a tensor: dtype, shape, range and its first values.
fn summary(name: &str, t: &Tensor) -> String {
    let n = t.len();
    let head: Vec<String> = (0..n.min(6))
        .map(|i| format!("{:.6}", t.get_f64(i)))
        .collect();
    let (lo, hi) = (0..n).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), i| {
        let v = t.get_f64(i);
        (lo.min(v), hi.max(v))
    });
    format!(
        "{name}: {} {:?} min {lo:.6} max {hi:.6} [{}{}]",
        t.dtype(),
        t.shape(),
        head.join(", "),
        if n > 6 { ", ..." } else { "" }
    )
}

/// Fails unless every input is named once.
fn check_unique(inputs: &[(String, Tensor)]) -> anyhow::Result<()> {
    for (i, (n, _)) in inputs.iter().enumerate() {
        if inputs[..i].iter().any(|(m, _)| m == n) {
            bail!("input `{n}` is given twice");
        }
    }
    Ok(())
}
