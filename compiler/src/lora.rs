//! LoRA adapters merged into a model's weights, before any pass runs
//! (`slmcc compile --lora DIR[:WEIGHT]`, repeatable).
//!
//! **Input.** An adapter is a folder as PEFT's `save_pretrained` writes it:
//! `adapter_config.json` and `adapter_model.safetensors` (the pickle
//! `adapter_model.bin` is refused: re-save with `safe_serialization`). The
//! tensors are `base_model.model.<module>.lora_A.weight` (`[r, in]`) and
//! `…lora_B.weight` (`[out, r]`), in f32, f16 or bf16.
//!
//! **What is computed** is what PEFT's `merge_and_unload` leaves: every
//! adapted linear layer's weight `W` (`[out, in]`, PyTorch's layout) becomes
//! `W + w · s · B·A`, with the adapter's weight `w` (1 unless given) and
//! scale `s = lora_alpha / r`, or `lora_alpha / √r` with `use_rslora`; `r`
//! and `lora_alpha` may be overridden per module by `rank_pattern` and
//! `alpha_pattern`. Several adapters add up, in the order given. The sum is
//! computed in f32, and written back in the weight's own dtype.
//!
//! **Matching.** Each module the adapter names must be one linear layer of
//! the model, found by graph structure and the exporter's scope metadata
//! ([`crate::onnx::linears`]): weight names (`val_N`) say nothing, and the
//! weight may be stored `[in, out]` or `[out, in]`; the layer's layout says
//! how `B·A` is added. A module the model lacks, factors whose shapes differ
//! from the layer's, a rank that disagrees with the config, or anything
//! this merge does not implement (DoRA, LoRA on embeddings, trained biases,
//! `modules_to_save`, regular-expression pattern keys, layer replication)
//! is refused, naming the adapter and the module, and nothing is merged.
//!
//! A weight that several layers share (tied embeddings) changes for all of
//! them, as it does in PyTorch when PEFT merges into a shared parameter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use slmcc_ir::weights::WeightStore;
use slmcc_ir::{DType, Module, Tensor};

use crate::onnx::linears::{LinearLayer, WeightLayout};

/// The tensor-name prefix PEFT writes (`PeftModel.base_model.model`).
const PEFT_PREFIX: &str = "base_model.model.";

/// Why an adapter could not be read or merged: the adapter's folder (or
/// file) and the reason, which names the module when one is at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("LoRA adapter {}: {reason}", path.display())]
pub struct LoraError {
    pub path: PathBuf,
    pub reason: String,
}

/// One module's factors, as read.
#[derive(Clone, Debug)]
struct Factors {
    /// `[r, in]`, row-major f32.
    a: Vec<f32>,
    /// `[out, r]`, row-major f32.
    b: Vec<f32>,
    /// The base layer's weight (`[out, in]`) when the adapter carries it:
    /// PEFT saves it for layers it counts as embeddings (an `lm_head`
    /// target), and loads it over the model's weight.
    base: Option<Vec<f32>>,
    rank: usize,
    inputs: usize,
    outputs: usize,
    /// `lora_alpha / r` (or `/ √r`), before the adapter's weight.
    scale: f32,
}

/// A LoRA adapter read from its folder.
#[derive(Clone, Debug)]
pub struct Adapter {
    pub dir: PathBuf,
    /// The weight it is merged with.
    pub weight: f32,
    /// SHA-256 of `adapter_model.safetensors`, hex.
    pub sha256: String,
    /// `r` and `lora_alpha` of the config (before per-module patterns).
    pub rank: usize,
    pub alpha: f64,
    pub rslora: bool,
    modules: BTreeMap<String, Factors>,
}

impl Adapter {
    /// The modules it adapts, sorted.
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.modules.keys().map(String::as_str)
    }
}

/// Parses `DIR[:WEIGHT]` (the `--lora` argument): a suffix after the last
/// `:` that reads as a number is the weight, else the whole text is the
/// folder (so `--lora ./a:b` names the folder `a:b`).
pub fn parse_lora_arg(arg: &str) -> Result<(PathBuf, f32), String> {
    if let Some((dir, w)) = arg.rsplit_once(':') {
        if let Ok(weight) = w.parse::<f32>() {
            if !weight.is_finite() {
                return Err(format!("`{arg}`: the weight {w} is not a finite number"));
            }
            if dir.is_empty() {
                return Err(format!("`{arg}`: no adapter folder before `:`"));
            }
            return Ok((PathBuf::from(dir), weight));
        }
    }
    Ok((PathBuf::from(arg), 1.0))
}

/// Reads the adapter in `dir` (see the module doc), merged later with
/// `weight`.
pub fn read_adapter(dir: &Path, weight: f32) -> Result<Adapter, LoraError> {
    let fail = |path: &Path, reason: String| LoraError {
        path: path.to_path_buf(),
        reason,
    };
    if !dir.is_dir() {
        return Err(fail(dir, "is not a folder (a PEFT adapter folder holds adapter_config.json and adapter_model.safetensors)".into()));
    }
    let config_path = dir.join("adapter_config.json");
    let text = std::fs::read_to_string(&config_path)
        .map_err(|e| fail(&config_path, format!("cannot read: {e}")))?;
    let config: Value =
        serde_json::from_str(&text).map_err(|e| fail(&config_path, format!("not JSON: {e}")))?;
    let config = Config::parse(&config).map_err(|r| fail(&config_path, r))?;

    let tensors_path = dir.join("adapter_model.safetensors");
    if !tensors_path.exists() && dir.join("adapter_model.bin").exists() {
        return Err(fail(
            dir,
            "holds adapter_model.bin (a pickle, which is not read); save the adapter with \
             `save_pretrained(..., safe_serialization=True)`"
                .into(),
        ));
    }
    let sha256 = slmcc_runtime::package::sha256_file(&tensors_path)
        .map_err(|e| fail(&tensors_path, format!("cannot read: {e}")))?;
    let store = WeightStore::open(&tensors_path).map_err(|e| fail(&tensors_path, e.to_string()))?;
    let modules = read_factors(&store, &config).map_err(|r| fail(&tensors_path, r))?;
    if modules.is_empty() {
        return Err(fail(&tensors_path, "holds no LoRA factors".into()));
    }
    Ok(Adapter {
        dir: dir.to_path_buf(),
        weight,
        sha256: slmcc_runtime::package::hex(&sha256),
        rank: config.rank,
        alpha: config.alpha,
        rslora: config.rslora,
        modules,
    })
}

/// What `adapter_config.json` says that the merge uses.
struct Config {
    rank: usize,
    alpha: f64,
    rslora: bool,
    rank_pattern: Vec<(String, usize)>,
    alpha_pattern: Vec<(String, f64)>,
}

impl Config {
    fn parse(v: &Value) -> Result<Config, String> {
        let field = |k: &str| v.get(k).filter(|x| !x.is_null());
        if let Some(t) = field("peft_type") {
            if t.as_str() != Some("LORA") {
                return Err(format!("peft_type is {t}, not \"LORA\""));
            }
        }
        let truthy = |k: &str| field(k).is_some_and(|x| x.as_bool() == Some(true));
        if truthy("use_dora") {
            return Err("use_dora: DoRA adapters are not supported".into());
        }
        if truthy("lora_bias") {
            return Err("lora_bias: adapters with trained biases are not supported".into());
        }
        if let Some(b) = field("bias").filter(|b| b.as_str() != Some("none")) {
            return Err(format!(
                "bias {b}: adapters with trained biases are not supported"
            ));
        }
        // Options that make the adapted model something a merged weight
        // cannot express (or that this merge does not implement).
        for key in [
            "layer_replication",
            "alora_invocation_tokens",
            "trainable_token_indices",
            "target_parameters",
        ] {
            if field(key).is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty())) {
                return Err(format!("{key}: not supported by the merge"));
            }
        }
        for key in ["use_qalora", "use_bdlora"] {
            if truthy(key) {
                return Err(format!("{key}: not supported by the merge"));
            }
        }
        if let Some(m) = field("modules_to_save") {
            if m.as_array().is_some_and(|a| !a.is_empty()) {
                return Err(format!(
                    "modules_to_save {m}: adapters that replace whole modules are not supported"
                ));
            }
        }
        let rank = field("r")
            .and_then(Value::as_u64)
            .filter(|&r| r > 0)
            .ok_or("`r` (the rank) is missing or not a positive integer")?
            as usize;
        let alpha = field("lora_alpha")
            .and_then(Value::as_f64)
            .ok_or("`lora_alpha` is missing or not a number")?;
        let pattern = |k: &str| -> Result<Vec<(String, f64)>, String> {
            let Some(obj) = field(k) else {
                return Ok(Vec::new());
            };
            let obj = obj.as_object().ok_or(format!("`{k}` is not an object"))?;
            obj.iter()
                .map(|(key, val)| {
                    if key.contains([
                        '*', '+', '?', '(', ')', '[', ']', '{', '}', '|', '^', '$', '\\',
                    ]) {
                        return Err(format!(
                            "`{k}` key `{key}` is a regular expression; only module names and \
                             their dotted suffixes are supported"
                        ));
                    }
                    let n = val
                        .as_f64()
                        .ok_or(format!("`{k}` value for `{key}` is not a number"))?;
                    Ok((key.clone(), n))
                })
                .collect()
        };
        let rank_pattern = pattern("rank_pattern")?
            .into_iter()
            .map(|(k, r)| match r >= 1.0 && r.fract() == 0.0 {
                true => Ok((k, r as usize)),
                false => Err(format!(
                    "`rank_pattern` value for `{k}` is not a positive integer"
                )),
            })
            .collect::<Result<_, String>>()?;
        Ok(Config {
            rank,
            alpha,
            rslora: truthy("use_rslora"),
            rank_pattern,
            alpha_pattern: pattern("alpha_pattern")?,
        })
    }

    /// `(r, lora_alpha)` for a module: the pattern key that is the module's
    /// name or a dotted suffix of it, else the defaults (PEFT's
    /// `get_pattern_key`, for keys that are not regular expressions). PEFT
    /// takes the first matching key in the file's order; keys that match
    /// one module with different values are refused rather than guessed.
    fn for_module(&self, module: &str) -> Result<(usize, f64), String> {
        fn pick<T: Copy + PartialEq + std::fmt::Display>(
            pattern: &[(String, T)],
            module: &str,
            what: &str,
        ) -> Result<Option<T>, String> {
            let hits: Vec<&(String, T)> = pattern
                .iter()
                .filter(|(k, _)| module == k || module.ends_with(&format!(".{k}")))
                .collect();
            match hits[..] {
                [] => Ok(None),
                [(_, v), ref rest @ ..] if rest.iter().all(|(_, w)| w == v) => Ok(Some(*v)),
                _ => {
                    Err(format!(
                    "module `{module}`: several `{what}` keys match it with different values ({})",
                    hits.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
                ))
                }
            }
        }
        let rank = pick(&self.rank_pattern, module, "rank_pattern")?;
        let alpha = pick(&self.alpha_pattern, module, "alpha_pattern")?;
        Ok((rank.unwrap_or(self.rank), alpha.unwrap_or(self.alpha)))
    }
}

/// One module's tensors as read: `[shape, values]` of each kind.
#[derive(Default)]
struct ModuleTensors {
    a: Option<(Vec<usize>, Vec<f32>)>,
    b: Option<(Vec<usize>, Vec<f32>)>,
    base: Option<(Vec<usize>, Vec<f32>)>,
}

/// The factors of every module in `store`, checked against each other and
/// the config.
fn read_factors(store: &WeightStore, config: &Config) -> Result<BTreeMap<String, Factors>, String> {
    let mut by_module: BTreeMap<String, ModuleTensors> = BTreeMap::new();
    for (name, _) in store.iter() {
        let Some(rest) = name.strip_prefix(PEFT_PREFIX) else {
            return Err(format!(
                "tensor `{name}` is not named as PEFT names LoRA factors (`{PEFT_PREFIX}<module>.lora_A.weight`)"
            ));
        };
        let kinds = [".lora_A.weight", ".lora_B.weight", ".base_layer.weight"];
        let Some((module, kind)) = kinds
            .iter()
            .enumerate()
            .find_map(|(i, k)| rest.strip_suffix(k).map(|m| (m, i)))
        else {
            let what = if rest.contains(".lora_embedding_") {
                "a LoRA on an embedding, which is not supported"
            } else if rest.contains(".lora_magnitude_vector") {
                "a DoRA magnitude, which is not supported"
            } else if rest.ends_with(".bias") {
                "a trained bias, which is not supported"
            } else {
                "not a LoRA factor (modules_to_save is not supported)"
            };
            return Err(format!("tensor `{name}` is {what}"));
        };
        let t = store
            .tensor(name)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("tensor `{name}` has no data"))?;
        if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) || t.rank() != 2 {
            return Err(format!(
                "tensor `{name}` is {} {:?}; LoRA factors are 2-D float tensors",
                t.dtype(),
                t.shape()
            ));
        }
        let entry = by_module.entry(module.to_string()).or_default();
        let slot = match kind {
            0 => &mut entry.a,
            1 => &mut entry.b,
            _ => &mut entry.base,
        };
        *slot = Some((t.shape().to_vec(), t.to_f32_vec()));
    }
    let mut out = BTreeMap::new();
    for (module, tensors) in by_module {
        let (Some((a_shape, a)), Some((b_shape, b))) = (tensors.a, tensors.b) else {
            return Err(format!("module `{module}` lacks lora_A or lora_B"));
        };
        let (rank, inputs, outputs) = (a_shape[0], a_shape[1], b_shape[0]);
        if b_shape[1] != rank {
            return Err(format!(
                "module `{module}`: lora_A is {a_shape:?} and lora_B {b_shape:?}; their ranks differ"
            ));
        }
        let base = match tensors.base {
            Some((shape, _)) if shape != [outputs, inputs] => {
                return Err(format!(
                    "module `{module}`: base_layer.weight is {shape:?}, the factors map {inputs} \
                     inputs to {outputs} outputs"
                ))
            }
            base => base.map(|(_, v)| v),
        };
        let (r, alpha) = config.for_module(&module)?;
        if r != rank {
            return Err(format!(
                "module `{module}`: the factors have rank {rank}, the config says r = {r}"
            ));
        }
        let scale = match config.rslora {
            true => alpha / (rank as f64).sqrt(),
            false => alpha / rank as f64,
        };
        out.insert(
            module,
            Factors {
                a,
                b,
                base,
                rank,
                inputs,
                outputs,
                scale: scale as f32,
            },
        );
    }
    Ok(out)
}

/// What a merge changed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MergeSummary {
    /// Weights changed (a weight several adapters touch counts once).
    pub weights: usize,
    /// Their elements.
    pub parameters: usize,
}

/// Merges `adapters` into `module`'s weights, whose linear layers are
/// `layers` (see the module doc). Every adapter is checked against the
/// model before any weight changes.
pub fn merge(
    module: &mut Module,
    layers: &[LinearLayer],
    adapters: &[Adapter],
) -> Result<MergeSummary, LoraError> {
    let mut plan: BTreeMap<&str, Planned> = BTreeMap::new();
    for adapter in adapters {
        let fail = |reason: String| LoraError {
            path: adapter.dir.clone(),
            reason,
        };
        for (name, f) in &adapter.modules {
            let layer = find_layer(layers, name).map_err(fail)?;
            let weight = module.weights.get(&layer.weight).ok_or_else(|| {
                fail(format!(
                    "module `{name}`: its weight `{}` (node {}) is not a weight of the imported model",
                    layer.weight, layer.node
                ))
            })?;
            let dims = weight.ty.shape.as_fixed().unwrap_or_default();
            let expect = match layer.layout {
                WeightLayout::OutIn => [f.outputs, f.inputs],
                WeightLayout::InOut => [f.inputs, f.outputs],
            };
            if dims != expect {
                return Err(fail(format!(
                    "module `{name}`: the adapter maps {} inputs to {} outputs (lora_A [{}, {}], \
                     lora_B [{}, {}]), but the model's weight `{}` (node {}) is {dims:?}",
                    f.inputs,
                    f.outputs,
                    f.rank,
                    f.inputs,
                    f.outputs,
                    f.rank,
                    layer.weight,
                    layer.node
                )));
            }
            if !matches!(weight.ty.dtype, DType::F32 | DType::F16 | DType::BF16) {
                return Err(fail(format!(
                    "module `{name}`: the model's weight `{}` is {}; a LoRA merges into float weights",
                    layer.weight, weight.ty.dtype
                )));
            }
            let planned = plan.entry(layer.weight.as_str()).or_insert(Planned {
                adapter: &adapter.dir,
                layout: layer.layout,
                base: None,
                deltas: Vec::new(),
            });
            if planned.layout != layer.layout {
                return Err(fail(format!(
                    "module `{name}`: its weight `{}` is used by other layers in another layout",
                    layer.weight
                )));
            }
            // Loading an adapter that carries the base weight replaces it,
            // so the last one given wins (as with PEFT's `load_adapter`).
            planned.base = f.base.as_deref().or(planned.base);
            planned.deltas.push((f, f.scale * adapter.weight));
        }
    }
    let mut summary = MergeSummary::default();
    for (name, planned) in plan {
        let fail = |reason: String| LoraError {
            path: planned.adapter.to_path_buf(),
            reason: format!("the model's weight `{name}`: {reason}"),
        };
        let old = module
            .weights
            .tensor(name)
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| fail("has no data".to_string()))?;
        let mut w = old.to_f32_vec();
        if let Some(base) = planned.base {
            let [out, inp] = [planned.deltas[0].0.outputs, planned.deltas[0].0.inputs];
            match planned.layout {
                WeightLayout::OutIn => w.copy_from_slice(base),
                WeightLayout::InOut => {
                    for (o, row) in base.chunks_exact(inp).enumerate() {
                        for (i, &v) in row.iter().enumerate() {
                            w[i * out + o] = v;
                        }
                    }
                }
            }
        }
        for (f, scale) in planned.deltas {
            add_product(&mut w, planned.layout, f, scale);
        }
        let merged = Tensor::from_f32(old.shape().to_vec(), w).cast(old.dtype());
        summary.weights += 1;
        summary.parameters += merged.len();
        drop(old);
        module.weights.insert(name, merged);
    }
    Ok(summary)
}

/// What is done to one weight: its layout, the base weight an adapter
/// replaces it with (`[out, in]`), and the products added to it.
struct Planned<'a> {
    /// The first adapter that changes it (for messages).
    adapter: &'a Path,
    layout: WeightLayout,
    base: Option<&'a [f32]>,
    deltas: Vec<(&'a Factors, f32)>,
}

/// The one layer of `module`, or why there is none.
fn find_layer<'a>(layers: &'a [LinearLayer], module: &str) -> Result<&'a LinearLayer, String> {
    let found: Vec<&LinearLayer> = layers.iter().filter(|l| l.module == module).collect();
    match found[..] {
        [one] => Ok(one),
        [] => {
            let some: Vec<&str> = layers.iter().take(4).map(|l| l.module.as_str()).collect();
            Err(format!(
                "module `{module}` is not a linear layer of the model (it has {} linear layers{}{})",
                layers.len(),
                if some.is_empty() { "" } else { ", such as " },
                some.join(", ")
            ))
        }
        _ => Err(format!(
            "module `{module}` uses {} different weights ({}); the merge is ambiguous",
            found.len(),
            found
                .iter()
                .map(|l| l.weight.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// `W += scale · B·A`, with `W` stored in `layout` (one `gemm` call: the
/// layout is only a choice of strides).
fn add_product(w: &mut [f32], layout: WeightLayout, f: &Factors, scale: f32) {
    let (m, n, k) = (f.outputs, f.inputs, f.rank);
    assert_eq!(
        w.len(),
        m * n,
        "the weight was checked to be [out, in] or [in, out]"
    );
    // Element (o, i) of the [out, in] product lives at o·in + i (OutIn) or
    // i·out + o (InOut).
    let (dst_rs, dst_cs) = match layout {
        WeightLayout::OutIn => (n as isize, 1),
        WeightLayout::InOut => (1, m as isize),
    };
    // SAFETY: `w` holds m×n values addressed by the strides above; `b` is
    // [m, k] and `a` [k, n], row-major, as read (their lengths were
    // checked against these shapes by `Tensor`).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            w.as_mut_ptr(),
            dst_cs,
            dst_rs,
            true,
            f.b.as_ptr(),
            1,
            k as isize,
            f.a.as_ptr(),
            1,
            n as isize,
            1.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_args_split_off_a_numeric_weight_only() {
        assert_eq!(parse_lora_arg("a/b").unwrap(), (PathBuf::from("a/b"), 1.0));
        assert_eq!(
            parse_lora_arg("a/b:0.5").unwrap(),
            (PathBuf::from("a/b"), 0.5)
        );
        assert_eq!(parse_lora_arg("a:b").unwrap(), (PathBuf::from("a:b"), 1.0));
        assert_eq!(parse_lora_arg("x:-1").unwrap(), (PathBuf::from("x"), -1.0));
        assert!(parse_lora_arg("x:NaN").is_err());
        assert!(parse_lora_arg(":2").is_err());
    }

    fn config(json: &str) -> Result<Config, String> {
        Config::parse(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn patterns_match_names_and_dotted_suffixes() {
        let c = config(
            r#"{"r": 8, "lora_alpha": 16, "rank_pattern": {"down_proj": 2},
                "alpha_pattern": {"layers.0.mlp.up_proj": 4}}"#,
        )
        .unwrap();
        assert_eq!(
            c.for_module("model.layers.3.mlp.down_proj").unwrap(),
            (2, 16.0)
        );
        assert_eq!(
            c.for_module("model.layers.0.mlp.up_proj").unwrap(),
            (8, 4.0)
        );
        assert_eq!(
            c.for_module("model.layers.10.mlp.up_proj").unwrap(),
            (8, 16.0)
        );
        // `mydown_proj` is not the module `down_proj`.
        assert_eq!(c.for_module("model.mydown_proj").unwrap(), (8, 16.0));
        let two = config(r#"{"r": 8, "lora_alpha": 16, "rank_pattern": {"proj": 2, "0.proj": 4}}"#)
            .unwrap();
        assert!(two.for_module("layers.0.proj").is_err());
        assert!(config(r#"{"lora_alpha": 16}"#).is_err());
        assert!(config(r#"{"r": 8, "lora_alpha": 16, "bias": "all"}"#).is_err());
        assert!(config(r#"{"r": 8, "lora_alpha": 16, "peft_type": "IA3"}"#).is_err());
        assert!(config(r#"{"r": 8, "lora_alpha": 16, "modules_to_save": null}"#).is_ok());
    }

    /// `W + s·B·A` computed naively, in `[out, in]` layout.
    fn naive(w_out_in: &[f32], f: &Factors, s: f32) -> Vec<f32> {
        let mut w = w_out_in.to_vec();
        for o in 0..f.outputs {
            for i in 0..f.inputs {
                let d: f32 = (0..f.rank)
                    .map(|k| f.b[o * f.rank + k] * f.a[k * f.inputs + i])
                    .sum();
                w[o * f.inputs + i] += s * d;
            }
        }
        w
    }

    #[test]
    fn the_product_lands_in_either_layout() {
        let (outputs, inputs, rank) = (5, 3, 2);
        let f = Factors {
            a: (0..rank * inputs).map(|v| v as f32 * 0.5 - 1.0).collect(),
            b: (0..outputs * rank)
                .map(|v| (v as f32 - 4.0) * 0.25)
                .collect(),
            base: None,
            rank,
            inputs,
            outputs,
            scale: 1.0,
        };
        let w: Vec<f32> = (0..outputs * inputs).map(|v| v as f32).collect();
        let want = naive(&w, &f, 0.75);
        let mut got = w.clone();
        add_product(&mut got, WeightLayout::OutIn, &f, 0.75);
        assert_eq!(got, want);
        // The same weight stored [in, out].
        let mut t: Vec<f32> = (0..inputs * outputs)
            .map(|j| w[(j % outputs) * inputs + j / outputs])
            .collect();
        add_product(&mut t, WeightLayout::InOut, &f, 0.75);
        for o in 0..outputs {
            for i in 0..inputs {
                assert_eq!(t[i * outputs + o], want[o * inputs + i], "({o}, {i})");
            }
        }
    }
}
