//! The model card: what a package is, written into it by `slmcc compile`
//! (`Manifest::card`, JSON) and printed by `slmcc report PKG --card`
//! (JSON as stored, or Markdown).
//!
//! It records where the model came from (the source's SHA-256, its
//! exporter, IR version and opsets, its metadata and the licence stated
//! there), how it was compiled (compiler version, target, the full pipeline
//! with its options), the quantization of every node that reads a weight
//! and the calibration set's hash, the buckets with their memory plan
//! totals, the placement of every node (NPU or CPU, with the placement's
//! reason for products left on the CPU), and for rk3588 the estimated
//! latency per bucket and decode rate, each marked as an estimate of the
//! documented model. Quality is recorded as not measured: the card says so
//! rather than leave a blank that reads as a pass.
//!
//! The card is built from what the manifest and the module hold, so it
//! cannot disagree with the package; it is covered by the manifest's
//! digest and so by a signature. Its JSON is deterministic (objects with
//! sorted keys, numbers rounded), so the same compile gives the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};
use slmcc_ir::placement::{place, Device};
use slmcc_ir::verify::node_label;
use slmcc_ir::{Graph, Module, Op, OpDef, Region, ValueDef};
use std::path::Path;

use anyhow::Context;
use slmcc::lora::Adapter;
use slmcc::pipeline::{quant_name, Quant};
use slmcc_backends::cpu::CpuOptions;
use slmcc_runtime::package::{hex, sha256, Manifest, TARGET_RK3588};

use super::eval::{perplexity, Measure};
use crate::cli::{BackendArg, CompileArgs};

use super::estimate::{estimate_basis, estimate_model};
use slmcc::onnx::provenance::Provenance;

/// The card format; a reader refuses a card of another.
pub const CARD_FORMAT: &str = "slmcc model card 1";

/// The prompt length of the time-to-first-token estimate and the context
/// of the decode one (`report --prompt-len`'s default), or the largest
/// bucket when that is shorter.
pub const ESTIMATE_PROMPT: usize = 64;

/// Builds the card of a package: `manifest` (without its card) and the
/// planned `module` it was made from; `provenance` when the source was
/// ONNX.
pub fn build(
    manifest: &Manifest,
    module: &Module,
    provenance: Option<&Provenance>,
    adapters: &[Adapter],
    quality: Option<Value>,
) -> Value {
    let versions = manifest.versions.clone().unwrap_or_default();
    let options = manifest.options.clone().unwrap_or_default();
    let rk3588 = versions.target == TARGET_RK3588;
    let graphs: Vec<&Graph> = manifest
        .buckets
        .iter()
        .filter_map(|b| module.graph(&b.graph))
        .collect();
    json!({
        "card": CARD_FORMAT,
        "model": model_section(manifest, provenance, adapters),
        "compiler": {
            "version": versions.compiler,
            "target": versions.target,
            "cpu": options.cpu,
            "isa": versions.isa,
            "kernel_library": versions.kernel_library,
            "runtime_abi": versions.runtime_abi,
            "pipeline": options.pipeline,
        },
        "quantization": {
            "scheme": options.quant,
            "calibration": if options.calibration.is_empty() {
                Value::Null
            } else {
                Value::String(options.calibration.clone())
            },
            "nodes": graphs.first().map_or(Value::Null, |g| weight_readers(module, g)),
        },
        "buckets": graphs.iter().map(|g| bucket_section(module, g)).collect::<Vec<_>>(),
        "placement": graphs.iter().map(|g| placement_section(g, rk3588)).collect::<Vec<_>>(),
        "estimates": if rk3588 { estimates_section(manifest, module) } else {
            json!({
                "estimate": true,
                "none": "no latency model for the host CPU: measure with `slmcc run --profile` \
                         or scripts/bench",
            })
        },
        "quality": quality.unwrap_or_else(|| json!({
            "measured": false,
            "note": "compile was not given --eval; `slmcc eval ppl` measures perplexity \
                     (docs/QUALITY.md)",
        })),
    })
}

/// `compile --eval`: the perplexity on `ids` (read from `file`) of `model`
/// quantized with the package's options (`quant`, and `args.quant` for
/// its calibration), and of the float model when `quant` quantizes: `slmcc
/// eval ppl`'s protocol on the cpu backend, over the whole logits (the
/// package's bucket graphs keep only the last token's).
pub fn measure_quality(
    model: &Path,
    file: &Path,
    ids: &[i64],
    args: &CompileArgs,
    quant: Quant,
    lora: &[Adapter],
) -> anyhow::Result<Value> {
    let window = args.eval_window as usize;
    let cpu = CpuOptions::default();
    let mut results = Vec::new();
    let runs: &[(Quant, &str)] = match quant {
        Some(_) => &[
            (quant, "quantized as this package"),
            (None, "float (unquantized weights)"),
        ],
        None => &[(None, "as this package (unquantized)")],
    };
    for &(q, what) in runs {
        let p = perplexity(&Measure {
            model,
            ids,
            window,
            quant_args: &args.quant,
            quant: q,
            backend: BackendArg::Cpu,
            cpu: &cpu,
            kv_dtype: None,
            lora,
        })
        .with_context(|| format!("--eval {}", file.display()))?;
        tracing::info!(
            "--eval: perplexity {:.4} {what} ({:.1} s)",
            p.perplexity,
            p.seconds
        );
        results.push(json!({
            "model": what,
            "quant": match &q { None => "none", q => quant_name(q) },
            "perplexity": (p.perplexity * 1e4).round() / 1e4,
            "tokens_scored": p.scored,
            "windows": p.windows,
        }));
    }
    let bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(json!({
        "measured": true,
        "metric": "perplexity",
        "protocol": format!(
            "slmcc eval ppl: windows of {window} tokens, each token after a window's first \
             scored by the logits before it; cpu backend (docs/QUALITY.md)"
        ),
        "data": {
            "file": file.file_name().map(|f| f.to_string_lossy().into_owned()),
            "ids_sha256": hex(&sha256(&bytes)),
            "tokens": ids.len(),
        },
        "results": results,
    }))
}

fn model_section(
    manifest: &Manifest,
    provenance: Option<&Provenance>,
    adapters: &[Adapter],
) -> Value {
    let mut model = json!({
        "source": manifest.source,
        "sha256": hex(&manifest.source_sha256),
        "format": if provenance.is_some() { "onnx" } else { "slmcc textual IR" },
        "lora": adapters.iter().map(lora_entry).collect::<Vec<_>>(),
    });
    let Some(p) = provenance else {
        model["licence"] = Value::Null;
        return model;
    };
    let producer = format!("{} {}", p.producer_name, p.producer_version);
    model["producer"] = json!(producer.trim());
    model["ir_version"] = json!(p.ir_version);
    model["opsets"] = p
        .opsets
        .iter()
        .map(|(d, v)| json!({ "domain": d, "version": v }))
        .collect();
    model["domain"] = json!(p.domain);
    model["model_version"] = json!(p.model_version);
    model["doc_string"] = json!(clip(&p.doc_string, 4096));
    model["metadata"] = p
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), json!(clip(v, 4096))))
        .collect::<serde_json::Map<_, _>>()
        .into();
    model["licence"] = match p.licence() {
        Some((key, value)) => {
            json!({ "value": clip(value, 4096), "from": format!("metadata_props[{key}]") })
        }
        None => Value::Null,
    };
    model
}

/// An adapter merged by `compile --lora`, as the card records it.
fn lora_entry(a: &Adapter) -> Value {
    json!({
        "adapter": a.dir.file_name().map(|f| f.to_string_lossy().into_owned()),
        "safetensors_sha256": a.sha256,
        "weight": a.weight,
        "r": a.rank,
        "lora_alpha": a.alpha,
        "use_rslora": a.rslora,
        "modules": a.modules().count(),
    })
}

/// `s` cut to at most `max` bytes at a character boundary, marked when cut.
fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// Every node of `g` that reads a module weight, with the scheme its
/// weights are stored and multiplied in.
fn weight_readers(module: &Module, g: &Graph) -> Value {
    let mut rows = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let weights: Vec<&str> = n
            .inputs
            .iter()
            .filter_map(|&v| match &g.value(v).def {
                ValueDef::Weight(name) => Some(name.as_str()),
                _ => None,
            })
            .collect();
        if weights.is_empty() {
            continue;
        }
        let scheme = match &n.op {
            Op::QMatMul(q) => quant_scheme(q.bits, q.group, q.activations),
            Op::QSwiGlu(q) => quant_scheme(q.bits, q.group, q.activations),
            _ => {
                let dtypes: Vec<String> = weights
                    .iter()
                    .filter_map(|w| module.weights.get(w))
                    .map(|w| w.ty.dtype.to_string())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                format!("{} (not quantized)", dtypes.join("/"))
            }
        };
        rows.push(json!({
            "node": node_label(g, i),
            "op": n.op.mnemonic(),
            "weights": weights,
            "scheme": scheme,
        }));
    }
    rows.into()
}

fn quant_scheme(bits: u8, group: i64, activations: slmcc_ir::ops::qmatmul::QActivations) -> String {
    let grouping = if group == 0 {
        "per output channel".to_string()
    } else {
        format!("groups of {group}")
    };
    let acts = match activations {
        slmcc_ir::ops::qmatmul::QActivations::Int8 => "int8 activations per token",
        slmcc_ir::ops::qmatmul::QActivations::F32 => "f32 activations (weight-only)",
    };
    format!("int{bits} weights, {grouping}; {acts}")
}

fn bucket_section(module: &Module, g: &Graph) -> Value {
    let size = module.buckets.get(&g.name).map_or(0, |b| b.size);
    let mut memory = serde_json::Map::new();
    if let Some(plan) = module.plans.get(&g.name) {
        for r in Region::ALL {
            memory.insert(r.name().to_string(), json!(plan.regions.get(r)));
        }
        memory.insert("total".to_string(), json!(plan.regions.total()));
    }
    let decode = g.nodes.iter().any(|n| matches!(n.op, Op::KvWrite(_)));
    json!({
        "graph": g.name,
        "tokens": size,
        "kind": if decode && size == 1 { "decode" } else { "prefill" },
        "nodes": g.nodes.len(),
        "memory_bytes": memory,
    })
}

fn placement_section(g: &Graph, rk3588: bool) -> Value {
    let mut ops: BTreeMap<&str, [usize; 2]> = BTreeMap::new();
    let mut npu_nodes = Vec::new();
    let mut cpu_products = Vec::new();
    let placed = if rk3588 { place(g) } else { Vec::new() };
    for (i, n) in g.nodes.iter().enumerate() {
        let on_npu = placed.get(i).is_some_and(|p| p.device == Device::Npu);
        ops.entry(n.op.mnemonic()).or_default()[usize::from(!on_npu)] += 1;
        if on_npu {
            npu_nodes.push(node_label(g, i));
        } else if rk3588 && matches!(n.op, Op::QMatMul(_) | Op::QSwiGlu(_) | Op::MatMul(_)) {
            cpu_products.push(json!({
                "node": node_label(g, i),
                "op": n.op.mnemonic(),
                "reason": placed.get(i).map_or("", |p| p.reason.as_str()),
            }));
        }
    }
    let ops: serde_json::Map<String, Value> = ops
        .into_iter()
        .map(|(op, [npu, cpu])| (op.to_string(), json!({ "npu": npu, "cpu": cpu })))
        .collect();
    json!({
        "graph": g.name,
        "rule": if rk3588 { "ir/src/placement.rs (docs/NPU.md)" } else { "--target cpu: every node on the CPU" },
        "ops": ops,
        "npu_nodes": npu_nodes,
        "cpu_products": cpu_products,
    })
}

/// Milliseconds, rounded to 0.1 µs so the card's bytes do not depend on
/// the last bits of a sum.
fn ms(seconds: f64) -> f64 {
    (seconds * 1e7).round() / 1e4
}

fn estimates_section(manifest: &Manifest, module: &Module) -> Value {
    let programs = |graph: &str| {
        manifest
            .buckets
            .iter()
            .find(|b| b.graph == graph)
            .map_or(&[][..], |b| b.npu.as_slice())
    };
    let largest = manifest
        .buckets
        .iter()
        .map(|b| b.size as usize)
        .max()
        .unwrap_or(1);
    let est = estimate_model(module, programs, ESTIMATE_PROMPT.min(largest));
    let buckets: Vec<Value> = est
        .buckets
        .iter()
        .map(|b| {
            json!({
                "graph": b.graph.name,
                "tokens": b.size,
                "latency_ms": ms(b.estimate.seconds()),
                "npu_ms": ms(b.estimate.seconds_on(Device::Npu)),
                "cpu_ms": ms(b.estimate.seconds_on(Device::Cpu)),
            })
        })
        .collect();
    json!({
        "estimate": true,
        "basis": estimate_basis(),
        "buckets": buckets,
        "time_to_first_token_ms": est.first_token.map(|(bucket, s)| json!({
            "prompt_tokens": est.prompt, "bucket": bucket, "ms": ms(s),
        })),
        "decode": est.per_token.map(|s| json!({
            "context": est.prompt + 1,
            "ms_per_token": ms(s),
            "tokens_per_s": (10.0 / s).round() / 10.0,
        })),
    })
}

/// The card as Markdown, from its JSON (as stored: a card written by
/// another version prints what it holds).
pub fn markdown(card: &Value) -> Result<String, String> {
    if card["card"] != CARD_FORMAT {
        return Err(format!(
            "a model card of format {}, this slmcc prints {CARD_FORMAT}",
            card["card"]
        ));
    }
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "—".to_string(),
        v => v.to_string(),
    };
    let m = &card["model"];
    let c = &card["compiler"];
    let q = &card["quantization"];
    let mut out = String::new();
    let _ = writeln!(out, "# Model card: {}\n", s(&m["source"]));
    let _ = writeln!(out, "## Model\n");
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| source | `{}` ({}) |",
        s(&m["source"]),
        s(&m["format"])
    );
    let _ = writeln!(out, "| SHA-256 | `{}` |", s(&m["sha256"]));
    if m.get("producer").is_some() {
        let _ = writeln!(out, "| exporter | {} |", s(&m["producer"]));
        let opsets: Vec<String> = m["opsets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| format!("{} {}", s(&o["domain"]), s(&o["version"])))
            .collect();
        let _ = writeln!(
            out,
            "| ONNX IR, opsets | {}; {} |",
            s(&m["ir_version"]),
            opsets.join(", ")
        );
    }
    let licence = match &m["licence"] {
        Value::Null => "not stated in the model's metadata".to_string(),
        l => format!("{} (from {})", s(&l["value"]), s(&l["from"])),
    };
    let _ = writeln!(out, "| licence | {licence} |");
    for a in m["lora"].as_array().into_iter().flatten() {
        let _ =
            writeln!(
            out,
            "| LoRA merged | `{}` × {}: r {}, alpha {}{}, {} modules, safetensors SHA-256 `{}` |",
            s(&a["adapter"]),
            s(&a["weight"]),
            s(&a["r"]),
            s(&a["lora_alpha"]),
            if a["use_rslora"] == true { " (rsLoRA)" } else { "" },
            s(&a["modules"]),
            s(&a["safetensors_sha256"])
        );
    }
    for (k, v) in m["metadata"].as_object().into_iter().flatten() {
        let _ = writeln!(out, "| metadata `{k}` | {} |", s(v));
    }
    let _ = writeln!(out, "\n## Compiler\n");
    let _ = writeln!(out, "| | |\n|---|---|");
    for key in [
        "version",
        "target",
        "cpu",
        "isa",
        "kernel_library",
        "runtime_abi",
    ] {
        let _ = writeln!(out, "| {key} | {} |", s(&c[key]));
    }
    let _ = writeln!(out, "| pipeline | `{}` |", s(&c["pipeline"]));

    let _ = writeln!(out, "\n## Quantization\n");
    let _ = writeln!(
        out,
        "Scheme `{}`; calibration set: {}.\n",
        s(&q["scheme"]),
        match &q["calibration"] {
            Value::Null => "none".to_string(),
            v => s(v),
        }
    );
    let mut by_scheme: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in q["nodes"].as_array().into_iter().flatten() {
        by_scheme.entry(s(&n["scheme"])).or_default().push(format!(
            "{} ({})",
            s(&n["node"]),
            s(&n["op"])
        ));
    }
    let _ = writeln!(out, "| scheme | nodes | which |\n|---|---|---|");
    for (scheme, nodes) in &by_scheme {
        let shown: Vec<&str> = nodes.iter().take(4).map(String::as_str).collect();
        let more = if nodes.len() > 4 {
            format!(", … {} more", nodes.len() - 4)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {scheme} | {} | {}{more} |",
            nodes.len(),
            shown.join(", ")
        );
    }

    let _ = writeln!(out, "\n## Buckets and memory (bytes)\n");
    let regions: Vec<&str> = Region::ALL.iter().map(|r| r.name()).collect();
    let _ = writeln!(
        out,
        "| graph | tokens | kind | nodes | {} | total |",
        regions.join(" | ")
    );
    let _ = writeln!(out, "|---|---|---|---|{}---|", "---|".repeat(regions.len()));
    for b in card["buckets"].as_array().into_iter().flatten() {
        let mem: Vec<String> = regions.iter().map(|r| s(&b["memory_bytes"][*r])).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            s(&b["graph"]),
            s(&b["tokens"]),
            s(&b["kind"]),
            s(&b["nodes"]),
            mem.join(" | "),
            s(&b["memory_bytes"]["total"])
        );
    }

    let _ = writeln!(out, "\n## Placement\n");
    for p in card["placement"].as_array().into_iter().flatten() {
        let counts: Vec<String> = p["ops"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(op, c)| match c["npu"].as_u64() {
                Some(0) | None => format!("{op} {}", s(&c["cpu"])),
                Some(npu) => format!("{op} {} (npu {npu})", npu + c["cpu"].as_u64().unwrap_or(0)),
            })
            .collect();
        let npu = p["npu_nodes"].as_array().map_or(0, Vec::len);
        let _ = writeln!(
            out,
            "- `@{}`: {npu} nodes on the NPU ({}); ops: {}",
            s(&p["graph"]),
            s(&p["rule"]),
            counts.join(", ")
        );
        for c in p["cpu_products"].as_array().into_iter().flatten().take(8) {
            let _ = writeln!(
                out,
                "  - {} ({}) on the CPU: {}",
                s(&c["node"]),
                s(&c["op"]),
                s(&c["reason"])
            );
        }
    }

    let e = &card["estimates"];
    let _ = writeln!(out, "\n## Estimates (not measurements)\n");
    if let Some(none) = e.get("none") {
        let _ = writeln!(out, "{}", s(none));
    } else {
        let _ = writeln!(out, "Basis: {}.\n", s(&e["basis"]));
        let _ = writeln!(
            out,
            "| graph | tokens | latency ms (estimate) | NPU ms | CPU ms |\n|---|---|---|---|---|"
        );
        for b in e["buckets"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                s(&b["graph"]),
                s(&b["tokens"]),
                s(&b["latency_ms"]),
                s(&b["npu_ms"]),
                s(&b["cpu_ms"])
            );
        }
        let t = &e["time_to_first_token_ms"];
        if !t.is_null() {
            let _ = writeln!(
                out,
                "\nTime to first token, {}-token prompt (bucket {}): {} ms (estimate).",
                s(&t["prompt_tokens"]),
                s(&t["bucket"]),
                s(&t["ms"])
            );
        }
        let d = &e["decode"];
        if !d.is_null() {
            let _ = writeln!(
                out,
                "\nDecode at context {}: {} ms per token, {} tokens/s (estimate).",
                s(&d["context"]),
                s(&d["ms_per_token"]),
                s(&d["tokens_per_s"])
            );
        }
    }
    let _ = writeln!(out, "\n## Quality\n");
    let quality = &card["quality"];
    match quality["measured"].as_bool() {
        Some(true) => {
            let d = &quality["data"];
            let _ = writeln!(
                out,
                "{} on `{}` ({} tokens, ids sha256 `{}`); {}.\n",
                s(&quality["metric"]),
                s(&d["file"]),
                s(&d["tokens"]),
                s(&d["ids_sha256"]),
                s(&quality["protocol"])
            );
            let _ = writeln!(
                out,
                "| model | quant | {} | tokens scored |\n|---|---|---|---|",
                s(&quality["metric"])
            );
            for r in quality["results"].as_array().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    s(&r["model"]),
                    s(&r["quant"]),
                    s(&r["perplexity"]),
                    s(&r["tokens_scored"])
                );
            }
        }
        _ => {
            let _ = writeln!(out, "Not measured: {}.", s(&quality["note"]));
        }
    }
    Ok(out)
}
