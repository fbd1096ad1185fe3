//! `slmcc compile`: a model into a deployable package (`.slmpkg`).
//!
//! Import, run the target's pipeline (fusion, quantization with `--quant`,
//! bucket specialisation, memory planning; for `--target rk3588` also the
//! `partition` pass), for rk3588 store the NPU products' weights in the
//! NPU's layout and lower those products to register programs
//! (`slmcc_backends::npu::lower`), check that every node of every bucket
//! lowers on the cpu backend (compiling it: JIT for the host, an aarch64
//! object for the board; the NPU products too, for the CPU fallback),
//! then write the package ([`slmcc_runtime::package`]) through a temporary
//! file renamed into place. Nothing in the package depends on
//! when or where it was built: the same model and options give the same
//! bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use prost::Message;
use serde_json::json;
use slmcc_backends::cpu::aot::{compile_object, AARCH64_LINUX};
use slmcc_backends::cpu::fingerprint::kernel_fingerprint;
use slmcc_backends::cpu::{CpuOptions, JitProgram, KERNEL_LIBRARY};
use slmcc_backends::npu::lower::{lower_graph, store_weights};
use slmcc_ir::{Module, OpDef, Region};
use slmcc_passes::{parse_pipeline, PassRecord};
use slmcc_runtime::package::{
    self, BucketEntry, KernelObject, KernelSymbol, Manifest, TargetOptions, VersionSet,
    ISA_HOST_JIT, RUNTIME_ABI, TARGET_CPU, TARGET_RK3588,
};

use super::load::load_merged;
// The fused ops counted per bucket in `--report`.
use super::report::DEFAULT_BUCKETS;
use crate::cli::{CompileArgs, CpuArg, Target};
use crate::exit::CmdResult;
use slmcc::fusion::FUSED_OPS;

use slmcc::pipeline::{quant_name, BucketSpec, PackTarget, Pipeline, Quant};

/// `--passes` completed so that every graph ends up a planned bucket:
/// `buckets` (a `bucket-specialize` entry) appended unless the pipeline
/// runs it, `plan-memory` unless it ends with it.
pub fn complete_pipeline(
    passes: &str,
    buckets: &str,
    explicit_buckets: bool,
) -> anyhow::Result<String> {
    let entries = parse_pipeline(passes)?;
    let mut out: Vec<String> = Vec::new();
    if !passes.trim().is_empty() {
        out.push(passes.trim().to_string());
    }
    if entries.iter().any(|e| e.name == "bucket-specialize") {
        if explicit_buckets {
            bail!(
                "--buckets and --bucket-profile cannot be combined with a --passes pipeline \
                 that runs bucket-specialize (give its options there)"
            );
        }
    } else {
        out.push(buckets.to_string());
    }
    if entries.last().is_none_or(|e| e.name != "plan-memory") {
        out.push("plan-memory".to_string());
    }
    Ok(out.join(","))
}

/// Where the kernels are for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cpu {
    /// The host: the runtime JIT-compiles the kernels at load.
    Host,
    /// The board's A76 cores: an aarch64 object per bucket.
    Aarch64,
}

/// What `--target`, `--quant` and `--cpu` ask for.
struct Choice {
    /// `--cpu`, or its default for the target.
    cpu_name: &'static str,
    /// `--target rk3588`: the NPU takes what the partition places on it.
    npu: bool,
    quant: Quant,
    cpu: Cpu,
}

fn check_target(args: &CompileArgs) -> anyhow::Result<Choice> {
    let quant = args.quant.get(args.target.default_quant())?;
    let (cpu_name, cpu) = match args.cpu.unwrap_or(args.target.default_cpu()) {
        CpuArg::Host => ("host", Cpu::Host),
        CpuArg::Aarch64 => ("aarch64", Cpu::Aarch64),
    };
    if args.passes.is_some() && quant.is_some() {
        bail!("--quant with --passes: put the quantize{{...}} entry in the pipeline instead");
    }
    Ok(Choice {
        cpu_name,
        npu: args.target == Target::Rk3588,
        quant,
        cpu,
    })
}

/// The buckets the command line asks for, and whether it asked at all.
fn bucket_spec(args: &CompileArgs) -> anyhow::Result<(BucketSpec, bool)> {
    match (&args.buckets, &args.bucket_profile) {
        (Some(b), None) => {
            let sizes = slmcc_passes::transforms::bucket_specialize::parse_buckets(b)
                .map_err(|e| anyhow!("--buckets: {e}"))?;
            Ok((BucketSpec::Sizes(sizes), true))
        }
        (None, Some(profile)) => Ok((
            BucketSpec::Profile {
                file: profile.clone(),
                max: args.max_buckets.unwrap_or(3),
            },
            true,
        )),
        (None, None) => {
            let sizes = slmcc_passes::transforms::bucket_specialize::parse_buckets(DEFAULT_BUCKETS)
                .map_err(|e| anyhow!("{e}"))?;
            Ok((BucketSpec::Sizes(sizes), false))
        }
        (Some(_), Some(_)) => bail!("give --buckets or --bucket-profile, not both"),
    }
}

/// The first `past_key_values.*` input of a graph of the module.
fn past_input(module: &slmcc_ir::Module) -> Option<String> {
    module.graphs.iter().find_map(|g| {
        g.inputs
            .iter()
            .map(|&i| &g.value(i).name)
            .find(|n| n.starts_with(slmcc_passes::transforms::decoder_inputs::PAST_PREFIX))
            .cloned()
    })
}

/// The pipeline the command line asks for (see `COMPILE_AFTER_HELP`).
fn pipeline(args: &CompileArgs, choice: &Choice) -> anyhow::Result<String> {
    let (buckets, explicit) = bucket_spec(args)?;
    let pipeline = match (&args.passes, args.kv_cache) {
        (None, kv) => {
            let mut p = Pipeline::fusion().quantized(choice.quant);
            if kv {
                if matches!(buckets, BucketSpec::Profile { .. }) {
                    bail!("--kv-cache takes --buckets, not --bucket-profile");
                }
                let (options, last_logits) = args.kv.options()?;
                p = p.kv_cache(options, last_logits);
            }
            p = p.buckets(buckets).planned();
            if choice.npu {
                p = p.packed(PackTarget::Rk3588).partitioned();
            } else {
                p = p.packed(PackTarget::Cpu);
            }
            return Ok(p.text());
        }
        (Some(_), true) => bail!(
            "--kv-cache builds its own pipeline; with --passes, run kv-cache{{...}} in it instead"
        ),
        (Some(p), false) => complete_pipeline(p, &buckets.entry(), explicit)?,
    };
    Ok(match choice.npu {
        true => format!("{pipeline},partition{{target=rk3588}}"),
        false => pipeline,
    })
}

/// The default output: the model's file stem with `.slmpkg`, here.
fn default_output(model: &Path) -> PathBuf {
    let stem = model
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string());
    PathBuf::from(format!("{stem}.slmpkg"))
}

/// A C symbol prefix for a graph's kernels.
fn symbol_prefix(graph: &str) -> String {
    let clean: String = graph
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("slmcc_{clean}")
}

pub fn run(args: CompileArgs) -> CmdResult {
    let choice = check_target(&args)?;
    let cpu = choice.cpu;
    let pipeline = pipeline(&args, &choice)?;
    let model = &args.model;
    let out = args.output.clone().unwrap_or_else(|| default_output(model));
    let at = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", model.display());

    if model.extension().is_some_and(|e| e == "slmpkg") {
        return Err(at(&"expected a model (.onnx, or .slm IR), not a package").into());
    }
    if out.extension().is_none_or(|e| e != "slmpkg") {
        return Err(anyhow!(
            "{}: a package's name ends in .slmpkg (run, report and golden know a package by it)",
            out.display()
        )
        .into());
    }
    // A bad key fails before the compile, not after it.
    let signing_key = match &args.sign {
        Some(path) => Some(package::signature::read_signing_key(path).map_err(|e| anyhow!(e))?),
        None => None,
    };
    let weights_key = match &args.encrypt {
        Some(path) => Some(package::encryption::WeightKey::read(path).map_err(|e| anyhow!(e))?),
        None => None,
    };
    let adapters = super::load::read_adapters(&args.lora)?;
    let eval_ids = match &args.eval {
        Some(file) => {
            let mut ids = super::load::ids_or_text(file, args.eval_tokenizer.as_deref(), "--eval")?;
            ids.truncate(args.eval_max_tokens.unwrap_or(usize::MAX));
            Some((file, ids))
        }
        None => None,
    };
    let source_sha256 =
        package::sha256_file(model).with_context(|| format!("cannot read {}", model.display()))?;
    let t0 = Instant::now();
    let mut module = load_merged(model, &adapters)?;
    let import_ms = ms(t0);
    if !args.kv_cache && args.passes.is_none() {
        if let Some(past) = past_input(&module) {
            return Err(at(&format!(
                "the model takes the past keys and values (%{past}, as Optimum's and \
                 onnxruntime-genai's decoders do): compile it with --kv-cache, which keeps \
                 them in the package's static KV cache"
            ))
            .into());
        }
    }
    let calibration = super::load::calibrate(
        &mut module,
        &args.quant,
        &choice.quant,
        model,
        &slmcc_backends::cpu::CpuOptions::default(),
    )?;
    let records = slmcc_passes::run_pipeline(&mut module, &pipeline)
        .with_context(|| format!("{}", model.display()))?;

    // The NPU's part: its products' weights in the NPU's layout (before
    // the CPU kernels and the IR are written: both read that layout).
    let t_layout = Instant::now();
    let npu_weights = match choice.npu {
        true => store_weights(&mut module).map_err(|e| at(&e))?,
        false => Vec::new(),
    };
    let npu_layout_ms = ms(t_layout);

    // Every graph must be a planned bucket of one base graph.
    let mut graphs: Vec<(&str, u64)> = Vec::new();
    for g in &module.graphs {
        let Some(info) = module.buckets.get(&g.name) else {
            return Err(at(&format!(
                "graph @{} was not specialised to buckets (its inputs have no `seq` axis, or \
                 the pipeline does not run bucket-specialize)",
                g.name
            ))
            .into());
        };
        graphs.push((&g.name, info.size as u64));
    }
    let mut bases: Vec<&str> = module.buckets.values().map(|b| b.base.as_str()).collect();
    bases.sort_unstable();
    bases.dedup();
    let entry = match bases[..] {
        [b] => b.to_string(),
        [] => return Err(at(&"the module has no graphs").into()),
        _ => {
            return Err(at(&format!(
                "bucket graphs of {} base graphs ({}); a package holds one",
                bases.len(),
                bases.join(", ")
            ))
            .into())
        }
    };
    graphs.sort_by_key(|&(_, size)| size);

    let cpu_options = CpuOptions::default();
    let mut buckets: Vec<BucketEntry> = Vec::new();
    let mut codegen_ms = Vec::new();
    for &(name, _) in &graphs {
        let g = module.graph(name).expect("listed above");
        let mut entry = package::bucket_entry(&module, name).map_err(|e| at(&e))?;
        let t = Instant::now();
        let cannot = |e: &dyn std::fmt::Display| {
            anyhow!(
                "{}: cannot compile for --target {} --cpu {}: {e}",
                model.display(),
                args.target,
                choice.cpu_name
            )
        };
        match cpu {
            Cpu::Host => {
                JitProgram::compile(g, &cpu_options).map_err(|e| cannot(&e))?;
            }
            Cpu::Aarch64 => {
                let obj = compile_object(g, AARCH64_LINUX, &symbol_prefix(name), &cpu_options)
                    .map_err(|e| cannot(&e))?;
                entry.kernels = Some(KernelObject {
                    triple: AARCH64_LINUX.to_string(),
                    object: obj.bytes,
                    symbols: obj
                        .kernels
                        .iter()
                        .map(|k| KernelSymbol {
                            node: k.node as u32,
                            symbol: k.symbol.clone(),
                        })
                        .collect(),
                });
            }
        }
        entry.kernel_fingerprint = kernel_fingerprint(g).map_err(|e| cannot(&e))?.to_vec();
        if choice.npu {
            entry.npu = lower_graph(g).map_err(|e| at(&e))?;
            if entry.npu.is_empty() {
                tracing::warn!(
                    "graph @{name}: no node runs on the NPU (it takes W8A8 matmuls and MLPs \
                     whose N and group are multiples of 32; here --quant {})",
                    quant_name(&choice.quant)
                );
            }
        }
        codegen_ms.push(ms(t));
        buckets.push(entry);
    }

    let mut manifest = Manifest {
        versions: Some(VersionSet {
            compiler: format!("slmcc {}", env!("CARGO_PKG_VERSION")),
            target: if choice.npu {
                TARGET_RK3588
            } else {
                TARGET_CPU
            }
            .to_string(),
            kernel_library: KERNEL_LIBRARY.to_string(),
            isa: match cpu {
                Cpu::Host => ISA_HOST_JIT.to_string(),
                Cpu::Aarch64 => AARCH64_LINUX.to_string(),
            },
            runtime_abi: RUNTIME_ABI,
        }),
        options: Some(TargetOptions {
            cpu: choice.cpu_name.to_string(),
            quant: quant_name(&choice.quant).to_string(),
            pipeline: pipeline.clone(),
            buckets: graphs.iter().map(|&(_, s)| s).collect(),
            fma: cpu_options.fma,
            calibration: calibration.unwrap_or_default(),
        }),
        module: module.name.clone(),
        entry,
        buckets,
        source: model
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        source_sha256: source_sha256.to_vec(),
        // Filled in by `package::seal` below.
        weight_sections: None,
        npu_weights,
        card: String::new(),
        encryption: None,
    };
    let provenance = match model.extension().is_some_and(|e| e == "onnx") {
        true => Some(slmcc::onnx::provenance::read_provenance(model)?),
        false => None,
    };
    let quality = match &eval_ids {
        Some((file, ids)) => Some(super::card::measure_quality(
            model,
            file,
            ids,
            &args,
            choice.quant,
            &adapters,
        )?),
        None => None,
    };
    let card = super::card::build(&manifest, &module, provenance.as_ref(), &adapters, quality);
    manifest.card = serde_json::to_string_pretty(&card).expect("JSON values") + "\n";
    let t_write = Instant::now();
    let written = super::opt::with_partial_file(&out, |file, tmp| {
        package::stream::write_streamed(
            file,
            manifest,
            &module.weights,
            weights_key.as_ref(),
            signing_key.as_ref(),
        )
        .map_err(|e| anyhow!("cannot write {}: {e}", tmp.display()))
    })?;
    let write_ms = ms(t_write);
    let (manifest, file_bytes) = (written.manifest, written.file_bytes);
    let sizes: Vec<String> = graphs.iter().map(|(_, s)| s.to_string()).collect();
    println!(
        "wrote {}: target {} (cpu {}, quant {}), buckets {}; {} bytes (manifest {}, weights {}){}",
        out.display(),
        args.target,
        choice.cpu_name,
        quant_name(&choice.quant),
        sizes.join(", "),
        file_bytes,
        manifest.encoded_len(),
        written.weights_bytes,
        signing_key.as_ref().map_or(String::new(), |k| format!(
            "; signed by {}",
            package::signature::key_id(&k.verifying_key())
        )) + &weights_key.as_ref().map_or(String::new(), |k| format!(
            "; weights encrypted with {}",
            package::encryption::key_id_text(&k.id())
        ))
    );
    if let Some(path) = &args.report {
        let report = json_report(
            &module,
            &graphs,
            &codegen_ms,
            &records,
            (import_ms, npu_layout_ms, write_ms),
            &manifest,
            (&out, file_bytes, written.weights_bytes),
        );
        let text = serde_json::to_string_pretty(&report).expect("JSON values") + "\n";
        super::opt::write_atomically(path, text.as_bytes())?;
    }
    Ok(())
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// The `--report` JSON.
fn json_report(
    module: &Module,
    graphs: &[(&str, u64)],
    codegen_ms: &[f64],
    records: &[PassRecord],
    (import_ms, npu_layout_ms, write_ms): (f64, f64, f64),
    manifest: &Manifest,
    (out, file_bytes, weights_bytes): (&Path, usize, usize),
) -> serde_json::Value {
    let buckets: Vec<serde_json::Value> = graphs
        .iter()
        .zip(codegen_ms)
        .map(|(&(name, size), &codegen)| {
            let g = module.graph(name).expect("listed");
            let plan = &module.plans[name];
            let mut fused: BTreeMap<&str, usize> = FUSED_OPS.iter().map(|&m| (m, 0)).collect();
            for n in &g.nodes {
                if let Some(c) = fused.get_mut(n.op.mnemonic()) {
                    *c += 1;
                }
            }
            let regions: serde_json::Map<String, serde_json::Value> = Region::ALL
                .iter()
                .map(|&r| (r.name().to_string(), json!(plan.regions.get(r))))
                .collect();
            let kernels = manifest
                .buckets
                .iter()
                .find(|b| b.graph == name)
                .and_then(|b| b.kernels.as_ref())
                .map(|k| json!({"triple": k.triple, "object_bytes": k.object.len(), "kernels": k.symbols.len()}));
            json!({
                "graph": name,
                "size": size,
                "nodes": g.nodes.len(),
                "fused_ops": fused,
                "arena_bytes": plan.regions.arena,
                "lower_bound_bytes": plan.lower_bound,
                "arena_ratio": plan.ratio(),
                "regions": regions,
                "peak_total_bytes": plan.regions.total(),
                "codegen_ms": codegen,
                "aot_kernels": kernels,
            })
        })
        .collect();
    let passes: Vec<serde_json::Value> = records
        .iter()
        .map(|r| {
            let stats: BTreeMap<&str, u64> = r.stats.iter().collect();
            json!({
                "name": r.name,
                "ms": r.duration.as_secs_f64() * 1e3,
                "changed": r.changed,
                "stats": stats,
            })
        })
        .collect();
    let v = manifest.versions.clone().unwrap_or_default();
    let o = manifest.options.clone().unwrap_or_default();
    json!({
        "package": out.display().to_string(),
        "module": module.name,
        "npu_layout_ms": npu_layout_ms,
        "write_ms": write_ms,
        "entry": manifest.entry,
        "versions": {
            "compiler": v.compiler,
            "target": v.target,
            "kernel_library": v.kernel_library,
            "isa": v.isa,
            "runtime_abi": v.runtime_abi,
        },
        "options": {
            "cpu": o.cpu,
            "quant": o.quant,
            "pipeline": o.pipeline,
            "buckets": o.buckets,
            "fma": o.fma,
        },
        "bytes": {
            "file": file_bytes,
            "manifest": manifest.encoded_len(),
            "weights": weights_bytes,
        },
        "import_ms": import_ms,
        "pass_ms": records.iter().map(|r| r.duration.as_secs_f64() * 1e3).sum::<f64>(),
        "buckets": buckets,
        "passes": passes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_pipelines() {
        let b64 = "bucket-specialize{buckets=64}";
        assert_eq!(
            complete_pipeline("shape-infer,dce", b64, false).unwrap(),
            "shape-infer,dce,bucket-specialize{buckets=64},plan-memory"
        );
        assert_eq!(
            complete_pipeline("", b64, false).unwrap(),
            "bucket-specialize{buckets=64},plan-memory"
        );
        assert_eq!(
            complete_pipeline("dce,bucket-specialize{buckets=8},plan-memory", "x", false).unwrap(),
            "dce,bucket-specialize{buckets=8},plan-memory"
        );
        assert!(complete_pipeline("bucket-specialize", b64, true).is_err());
    }
}
