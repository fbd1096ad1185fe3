//! Loading what the user names on the command line into a runnable module,
//! and choosing the backend.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use slmcc::lora;
use slmcc::pipeline::{Pipeline, Quant};
use slmcc::unplanned::{run_graph_jit, run_graph_npu};
use slmcc_backends::cpu::fingerprint::kernel_fingerprint;
use slmcc_backends::cpu::{CpuOptions, KERNEL_LIBRARY};
use slmcc_ir::text::parse_module;
use slmcc_ir::{Graph, Module, Tensor};
use slmcc_runtime::aot::{host_triple, AotKernels};
use slmcc_runtime::exec::KernelSet;
use slmcc_runtime::jit::JitKernels;
use slmcc_runtime::npu::{NpuBackend, NpuKernels, NpuLowered};
use slmcc_runtime::package::encryption::WeightKey;
use slmcc_runtime::package::{signature, Package, TARGET_RK3588};
use slmcc_runtime::{run_graph, Capture, RunError, RunResult};

use crate::cli::{BackendArg, PackageKeys, QuantArgs};

/// Where a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The reference interpreter: each op's reference evaluation.
    Reference,
    /// The Cranelift CPU backend, JIT-compiled for the host: symbols are
    /// bound from the input shapes and every node becomes a kernel; a graph
    /// with an op the backend does not lower yet fails naming that node.
    Cpu,
    /// The RK3588: the W8A8 products the placement puts on the NPU run
    /// their register programs there, the rest on the cpu backend as
    /// above. `npu-sim`: on the register interface's functional model;
    /// `npu`: on the board's NPU (the CPU when there is none).
    Npu(NpuBackend),
}

impl From<BackendArg> for Backend {
    fn from(b: BackendArg) -> Backend {
        match b {
            BackendArg::Reference => Backend::Reference,
            BackendArg::Cpu => Backend::Cpu,
            BackendArg::NpuSim => Backend::Npu(NpuBackend::Model),
            BackendArg::Npu => Backend::Npu(NpuBackend::Board),
        }
    }
}

/// Loads an ONNX model (`.onnx`), textual IR with its weights (`.slm`), or
/// the bucket graphs of a package (`.slmpkg`).
pub fn load_module(path: &Path) -> anyhow::Result<Module> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("onnx") => Ok(slmcc::onnx::import_model(path)?),
        Some("slm") => {
            let src = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let mut m = parse_module(&src)
                .map_err(|e| anyhow!("{}:{}:{}: {}", path.display(), e.line, e.col, e.message))?;
            if let Some(file) = m.weights.file.clone() {
                let wpath = path.parent().unwrap_or(Path::new(".")).join(file);
                m.weights.attach_file(&wpath)?;
            }
            slmcc_ir::verify_module(&m).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            Ok(m)
        }
        // Verified (magic, version, digests, version set), with its bucket
        // graphs, plans and the weights mapped from the package.
        Some("slmpkg") => Ok(slmcc_runtime::package::Package::open(path)?.module()?),
        _ => bail!(
            "{}: expected a .onnx model, a .slm IR file or a .slmpkg package",
            path.display()
        ),
    }
}

/// Loads a model as [`load_module`] does, with LoRA `adapters` merged into
/// its weights ([`slmcc::lora`]; `compile --lora`). Only an ONNX model has
/// the exporter's scopes the adapters are matched by.
pub fn load_merged(path: &Path, adapters: &[lora::Adapter]) -> anyhow::Result<Module> {
    if adapters.is_empty() {
        return load_module(path);
    }
    if path.extension().is_none_or(|e| e != "onnx") {
        bail!(
            "{}: --lora needs an ONNX model (adapters are matched to its linear layers by the \
             exporter's module scopes)",
            path.display()
        );
    }
    let (mut module, layers) = slmcc::onnx::import_model_with_layers(path)?;
    let merged = lora::merge(&mut module, &layers, adapters)?;
    tracing::info!(
        "--lora: {} adapter(s) merged into {} weights ({} parameters)",
        adapters.len(),
        merged.weights,
        merged.parameters
    );
    Ok(module)
}

/// Reads the adapters of `compile --lora DIR[:WEIGHT]...`.
pub fn read_adapters(args: &[String]) -> anyhow::Result<Vec<lora::Adapter>> {
    args.iter()
        .map(|arg| {
            let (dir, weight) = lora::parse_lora_arg(arg).map_err(|e| anyhow!("--lora {e}"))?;
            Ok(lora::read_adapter(&dir, weight)?)
        })
        .collect()
}

/// Prepares a module for a backend: fold the shape bookkeeping, fuse the
/// transformer blocks (so golden checks cover the fused ops, on the
/// reference interpreter and in the kernels), clean up
/// ([`slmcc::pipeline::FUSION_PIPELINE`]), verified. Values that survive keep
/// their names, so goldens keyed by ONNX value names still find them.
pub fn prepare(module: &mut Module, path: &Path) -> anyhow::Result<()> {
    prepare_quantized(module, None, None, path)
}

/// [`prepare`], with the weights quantized after fusion, then the `extra`
/// passes (`--extra-passes`).
///
/// Every backend runs the fused graph; the cpu backend also specialises it
/// to the input shapes when it runs ([`execute`]).
pub fn prepare_quantized(
    module: &mut Module,
    quant: Quant,
    extra: Option<&str>,
    path: &Path,
) -> anyhow::Result<()> {
    Pipeline::fusion()
        .quantized(quant)
        .extra_passes(extra)
        .run(module)
        .with_context(|| format!("{}", path.display()))?;
    Ok(())
}

/// Token ids from an integer `.npy` of any shape, in order.
pub fn read_token_ids(path: &Path) -> anyhow::Result<Vec<i64>> {
    let t = slmcc_runtime::npy::read(path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    if !t.dtype().is_int() {
        bail!(
            "{}: token ids must be integers, not {}",
            path.display(),
            t.dtype()
        );
    }
    Ok(t.to_i64_vec())
}

/// The ids of the text file `path`, encoded whole by `tokenizer`.
pub fn encode_text_file(path: &Path, tokenizer: &Path) -> anyhow::Result<Vec<i64>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    super::tokenize::Tokenizer::load(tokenizer)?.encode(&text)
}

/// For the calibrated `--quant-method`s (gptq, smoothquant, awq), and for
/// `--quant-fallback` when `--calib` is given: fuses
/// `module` and adds the calibration statistics of its entry graph's
/// weights from `--calib` ([`slmcc::calibrate`]); nothing for rtn, and an
/// error when a calibrated method has no `--calib`. The `quantize` pass that follows reads them.
/// Token ids from `file`: an integer `.npy`, or any other file as a text
/// encoded with `tokenizer` (which `flag`-tokenizer gives).
pub fn ids_or_text(file: &Path, tokenizer: Option<&Path>, flag: &str) -> anyhow::Result<Vec<i64>> {
    match (file.extension().and_then(|e| e.to_str()), tokenizer) {
        (Some("npy"), _) => read_token_ids(file),
        (_, Some(tok)) => encode_text_file(file, tok),
        (_, None) => bail!(
            "{}: a {flag} text needs {flag}-tokenizer (or give token ids as .npy)",
            file.display()
        ),
    }
}

/// Returns what identifies the calibration set (the SHA-256 of the ids
/// used, and their windows), or `None` when there was none.
pub fn calibrate(
    module: &mut Module,
    args: &QuantArgs,
    quant: &Quant,
    path: &Path,
    cpu: &CpuOptions,
) -> anyhow::Result<Option<String>> {
    // --quant-fallback ranks the products by the calibration Hessians when
    // --calib gives them, by their weights otherwise.
    let ranks = quant.is_some_and(|q| q.fallback_percent > 0) && args.calib.is_some();
    if !quant.is_some_and(|q| q.calibrated()) && !ranks {
        if args.calib.is_some() {
            tracing::warn!(
                "--calib is read by --quant-method gptq, smoothquant and awq and by --quant-fallback only; ignored"
            );
        }
        return Ok(None);
    }
    let Some(file) = &args.calib else {
        bail!(
            "--quant-method {} needs calibration samples: --calib FILE",
            args.quant_method_name()
        );
    };
    let ids = ids_or_text(file, args.calib_tokenizer.as_deref(), "--calib")?;
    let window = args.calib_window.max(1);
    let windows: Vec<Vec<i64>> = ids
        .chunks_exact(window)
        .take(args.calib_windows)
        .map(<[i64]>::to_vec)
        .collect();
    if windows.is_empty() {
        bail!(
            "{}: {} tokens are fewer than one calibration window of {window}",
            file.display(),
            ids.len()
        );
    }
    Pipeline::fusion()
        .run(module)
        .with_context(|| format!("{}", path.display()))?;
    let graph = entry_graph(module)?.name.clone();
    let start = std::time::Instant::now();
    let s = slmcc::calibrate::add_hessians(module, &graph, &windows, cpu)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    tracing::info!(
        "calibration: {} windows of {window} tokens, Hessians of {} weights, {:.1} s",
        s.windows,
        s.weights,
        start.elapsed().as_secs_f64()
    );
    let bytes: Vec<u8> = windows
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    Ok(Some(format!(
        "sha256 {}, {} windows of {window} tokens",
        slmcc_runtime::package::hex(&slmcc_runtime::package::sha256(&bytes)),
        windows.len()
    )))
}

/// Runs `graph` of `module` on `backend` (prepared by [`prepare`]), the
/// cpu kernels compiled with `cpu`.
pub fn execute(
    backend: Backend,
    cpu: &CpuOptions,
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
) -> Result<RunResult, RunError> {
    match backend {
        Backend::Reference => run_graph(module, graph, inputs, capture),
        Backend::Cpu => run_graph_jit(module, graph, inputs, capture, cpu),
        Backend::Npu(b) => run_graph_npu(module, graph, inputs, capture, cpu, b),
    }
}

/// A model loaded once: its module and, for a package, the package (its
/// version set and stored NPU programs).
pub struct Loaded {
    pub module: Module,
    pub package: Option<Package>,
}

impl Loaded {
    /// Loads what [`load_module`] loads, keeping a package open. With
    /// `keys.trust` (`--trust PUBKEY`), only a package that key signed
    /// loads; with `keys.decrypt` (`--decrypt KEYFILE`), an encrypted
    /// package's weights are decrypted into memory.
    pub fn load(path: &Path, keys: &PackageKeys) -> anyhow::Result<Loaded> {
        let trusted = match &keys.trust {
            Some(key) => Some(signature::read_verifying_key(key).map_err(|e| anyhow!(e))?),
            None => None,
        };
        let weights_key = match &keys.decrypt {
            Some(key) => Some(WeightKey::read(key).map_err(|e| anyhow!(e))?),
            None => None,
        };
        if path.extension().is_some_and(|e| e == "slmpkg") {
            let mut pkg = Package::open(path)?;
            if let Some(key) = &trusted {
                pkg.check_signer(key)?;
            }
            if let Some(key) = &weights_key {
                pkg.decrypt(key)?;
            }
            let module = pkg.module()?;
            check_kernel_fingerprints(&pkg, &module, keys.allow_kernel_change)?;
            return Ok(Loaded {
                module,
                package: Some(pkg),
            });
        }
        for (flag, given) in [
            ("--trust checks a package's signature", trusted.is_some()),
            (
                "--decrypt decrypts a package's weights",
                weights_key.is_some(),
            ),
        ] {
            if given {
                bail!(
                    "{}: {flag}, and this is not a package (.slmpkg)",
                    path.display()
                );
            }
        }
        Ok(Loaded {
            module: load_module(path)?,
            package: None,
        })
    }

    /// The backend: `given` (`--backend`), else a package on its target
    /// (`npu-sim` for rk3588: its NPU's functional model, `cpu` otherwise),
    /// any other model on `otherwise`.
    pub fn backend(&self, given: Option<BackendArg>, otherwise: BackendArg) -> Backend {
        let arg = given.unwrap_or(match &self.package {
            None => otherwise,
            Some(p) if is_rk3588(p) => BackendArg::NpuSim,
            Some(_) => BackendArg::Cpu,
        });
        arg.into()
    }
}

/// Refuses `pkg` when this binary would compile other cpu kernels for one
/// of its bucket graphs than the compiler did (the fingerprints differ,
/// `slmcc_backends::cpu::fingerprint`), unless `allow`
/// (`--allow-kernel-change`): then it warns. Buckets that carry kernels
/// for this machine are not compiled here, and packages made before
/// fingerprints are not checked.
fn check_kernel_fingerprints(pkg: &Package, module: &Module, allow: bool) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    let hex = |b: &[u8]| slmcc_runtime::package::hex(&b[..b.len().min(6)]);
    for b in &pkg.manifest.buckets {
        let carried = b
            .kernels
            .as_ref()
            .is_some_and(|k| Some(k.triple.as_str()) == host_triple());
        let Some(g) = module.graph(&b.graph) else {
            continue;
        };
        if b.kernel_fingerprint.is_empty() || carried {
            continue;
        }
        let at =
            |e: &dyn std::fmt::Display| anyhow!("{}: bucket @{}: {e}", pkg.path.display(), b.graph);
        let here = kernel_fingerprint(g).map_err(|e| at(&e))?;
        if here[..] == b.kernel_fingerprint[..] {
            continue;
        }
        let compiled_by = pkg
            .manifest
            .versions
            .as_ref()
            .map_or_else(String::new, |v| {
                format!(" ({}, {})", v.compiler, v.kernel_library)
            });
        let message = format!(
            "this slmcc ({KERNEL_LIBRARY}) compiles other cpu kernels for it than the compiler \
             did{compiled_by}: kernel fingerprint {}… here, {}… in the package, so its numbers \
             may differ from the ones it was checked with",
            hex(&here),
            hex(&b.kernel_fingerprint)
        );
        if !allow {
            return Err(at(&format!(
                "{message}; recompile it with this slmcc, or pass --allow-kernel-change to run it anyway"
            )));
        }
        tracing::warn!(
            "{}: bucket @{}: {message}; running it anyway (--allow-kernel-change)",
            pkg.path.display(),
            b.graph
        );
    }
    tracing::info!(
        ms = start.elapsed().as_secs_f64() * 1e3,
        "kernel fingerprints checked"
    );
    Ok(())
}

/// Whether `pkg` was compiled with `--target rk3588`.
pub fn is_rk3588(pkg: &Package) -> bool {
    pkg.manifest
        .versions
        .as_ref()
        .is_some_and(|v| v.target == TARGET_RK3588)
}

/// The NPU part of `module` (bucket graphs) for the NPU backends: the
/// programs `pkg` stores, checked, else the module lowered now (its NPU
/// products' weights stored in the NPU's layout first).
pub fn npu_lowered(module: &mut Module, pkg: Option<&Package>) -> anyhow::Result<NpuLowered> {
    match pkg {
        Some(p) => NpuLowered::from_package(p, module).map_err(|e| anyhow!(e)),
        None => NpuLowered::lower(module).map_err(|e| anyhow!(e)),
    }
}

/// The kernels of bucket graph `g` on an NPU backend: its NPU products
/// from `lowered`, the other nodes on [`cpu_kernels`].
pub fn npu_kernels(
    module: &Module,
    g: &Graph,
    lowered: &NpuLowered,
    pkg: Option<&Package>,
    options: &CpuOptions,
    backend: NpuBackend,
) -> Result<NpuKernels, String> {
    let cpu = cpu_kernels(g, pkg, options)?;
    NpuKernels::new(module, g, lowered, cpu, backend)
}

/// The CPU kernels of bucket graph `g`: the kernels of `pkg`'s object for
/// this graph when it carries one for this machine (loaded, no compiler
/// runs: the board's path), else the JIT's, compiled with `options`.
pub fn cpu_kernels(
    g: &Graph,
    pkg: Option<&Package>,
    options: &CpuOptions,
) -> Result<Box<dyn KernelSet>, String> {
    let object = pkg.and_then(|p| {
        let b = p.manifest.buckets.iter().find(|b| b.graph == g.name)?;
        let k = b.kernels.as_ref()?;
        (Some(k.triple.as_str()) == host_triple()).then_some(k)
    });
    if let Some(k) = object {
        let symbols: Vec<(usize, String)> = k
            .symbols
            .iter()
            .map(|s| (s.node as usize, s.symbol.clone()))
            .collect();
        let loaded = AotKernels::load(&k.object, &symbols)
            .map_err(|e| format!("the package's {} kernels: {e}", k.triple))?;
        // The object's quantized products run on `--threads` threads.
        slmcc_backends::cpu::threads::set_object_threads(options.threads);
        tracing::info!(
            "quantized products: {:?}",
            slmcc_backends::cpu::hostqgemm::detect()
        );
        tracing::info!(
            graph = %g.name,
            kernels = symbols.len(),
            "loaded the package's {} kernels (no compilation)",
            k.triple
        );
        return Ok(Box::new(loaded));
    }
    let jit = JitKernels::compile(g, options).map_err(|e| format!("cpu backend: {e}"))?;
    Ok(Box::new(jit))
}

/// The graph to run: `main` if there is one, else the only graph.
pub fn entry_graph(module: &Module) -> anyhow::Result<&Graph> {
    if let Some(g) = module.graph("main") {
        return Ok(g);
    }
    match &module.graphs[..] {
        [g] => Ok(g),
        _ => bail!(
            "module has {} graphs and none is named `main`",
            module.graphs.len()
        ),
    }
}

/// Reads a tensor file: `.npy`, or `.pb` (a serialized ONNX TensorProto).
pub fn read_tensor(path: &Path) -> anyhow::Result<Tensor> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => slmcc_runtime::npy::read(path).map_err(|e| anyhow!(e)),
        Some("pb") => Ok(slmcc::onnx::read_tensor_pb(path)?.1),
        _ => bail!("{}: expected a .npy or .pb tensor file", path.display()),
    }
}

/// The base graph of a module's buckets: the only one, or `main`.
pub fn bucket_base(module: &Module, path: &Path) -> anyhow::Result<String> {
    let mut bases: Vec<&str> = module.buckets.values().map(|b| b.base.as_str()).collect();
    bases.sort_unstable();
    bases.dedup();
    match bases[..] {
        [b] => Ok(b.to_string()),
        _ if bases.contains(&"main") => Ok("main".to_string()),
        _ => bail!(
            "{}: the module has bucket graphs of {} base graphs and none is `main`",
            path.display(),
            bases.len()
        ),
    }
}

/// `inputs` without those that `decoder-inputs` computes inside the graph
/// (a decoder's `attention_mask` and `position_ids` at batch 1), once each
/// is checked to hold what the graph computes there. A mask with padding,
/// or positions that do not follow the past, are refused: the compiled
/// graph would silently compute something else.
pub fn computed_inputs_dropped(
    graph: &Graph,
    inputs: Vec<(String, Tensor)>,
) -> anyhow::Result<Vec<(String, Tensor)>> {
    let is_input = |n: &str| graph.inputs.iter().any(|&i| graph.value(i).name == n);
    let past = inputs
        .iter()
        .find(|(n, t)| {
            n.starts_with(slmcc_passes::transforms::decoder_inputs::PAST_PREFIX)
                && t.shape().len() == 4
        })
        .map_or(0, |(_, t)| t.shape()[2] as i64);
    let mut kept = Vec::with_capacity(inputs.len());
    for (name, t) in inputs {
        if is_input(&name) {
            kept.push((name, t));
            continue;
        }
        match slmcc_passes::transforms::decoder_inputs::default_value_matches(&name, &t, past) {
            Some(true) => tracing::info!(
                "input `{name}` holds what graph @{} computes for it at batch 1",
                graph.name
            ),
            Some(false) => bail!(
                "graph @{}: `{name}` differs from what the graph computes at batch 1 \
                 (a mask of ones; positions from the past length {past}): slmcc runs \
                 decoders one unpadded sequence at a time; leave `{name}` out",
                graph.name
            ),
            None => kept.push((name, t)),
        }
    }
    Ok(kept)
}
