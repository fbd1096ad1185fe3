//! The registry: one list of every pass, with its options and help.
//!
//! Adding a pass means adding one entry to [`PASSES`]. Unknown names are
//! rejected with the list of valid ones.

use slmcc_ir::Phase;

use crate::eqsat;
use crate::eqsat::runner::LIMIT_OPTIONS;
use crate::options::{OptionSpec, PassOptions};
use crate::pass::{Invalidates, Pass, PassError, Requires};
use crate::pipeline::PipelineEntry;
use crate::transforms::{
    bucket_specialize, decoder_inputs, kv_cache, last_logits, pack_weights, partition, plan_memory,
    quantize, widen_half,
};
use crate::transforms::{canonicalize, const_fold, cse, dce, eqsat_fuse, shape_infer, verify};

/// A registered pass: name, one-line summary, declared options and constructor.
pub struct PassInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [OptionSpec],
    /// The phase the module must be in (checked by the pass manager).
    pub requires: Requires,
    /// What a run that changes the module invalidates (dropped by the pass
    /// manager).
    pub invalidates: Invalidates,
    /// The phase the pass leaves the module in, when it guarantees one
    /// (checked by the pass manager).
    pub establishes: Option<Phase>,
    /// Whether each graph's outputs keep their names (checked by the pass
    /// manager: goldens and `run --output-dir` name files by them); false
    /// only for a pass that changes a graph's interface by design.
    pub keeps_outputs: bool,
    /// The counters the pass reports (`--pass-stats`), besides the
    /// manager's `plans-dropped`.
    pub statistics: fn() -> Vec<&'static str>,
    /// Builds the pass; fails when options that parsed one by one do not
    /// go together (the message names the pass).
    pub create: fn(&PassOptions) -> Result<Box<dyn Pass>, String>,
}

/// Every pass slmcc knows, in the order they usually run.
pub static PASSES: &[PassInfo] = &[
    PassInfo {
        name: "verify",
        summary: "check SSA form, types and weight references; change nothing",
        options: &[],
        requires: Requires::Any,
        invalidates: Invalidates::Nothing,
        establishes: None,
        keeps_outputs: true,
        statistics: || Vec::new(),
        create: |_| Ok(Box::new(verify::Verify)),
    },
    PassInfo {
        name: "decoder-inputs",
        summary: "a decoder at batch 1: batch bound, attention_mask and position_ids computed, `seq` named",
        options: decoder_inputs::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["batch-bound", "symbols-renamed", "inputs-defaulted"],
        create: |o| Ok(Box::new(decoder_inputs::DecoderInputs::from_options(o))),
    },
    PassInfo {
        name: "shape-infer",
        summary: "recompute every result type from the graph inputs, resolving `?` dims",
        options: &[],
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["types-changed"],
        create: |_| Ok(Box::new(shape_infer::ShapeInfer)),
    },
    PassInfo {
        name: "const-fold",
        summary: "replace results known at compile time (incl. symbolic shape values) by constants",
        options: const_fold::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["nodes-folded", "weights-transposed"],
        create: |o| Ok(Box::new(const_fold::ConstFold::from_options(o))),
    },
    PassInfo {
        name: "dce",
        summary: "remove nodes whose results are never used",
        options: &[],
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["nodes-removed"],
        create: |_| Ok(Box::new(dce::Dce)),
    },
    PassInfo {
        name: "cse",
        summary: "merge nodes that apply the same op to the same operands",
        options: &[],
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["nodes-removed"],
        create: |_| Ok(Box::new(cse::Cse)),
    },
    // Equality saturation (egg): rules to saturation under hard limits,
    // then extraction with the target's cost model. Graph outputs and every
    // value whose e-class holds an original value keep their names.
    PassInfo {
        name: "canonicalize",
        summary: "algebraic clean-up by equality saturation (identities, chains, constants right)",
        options: LIMIT_OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || eqsat::runner::STATISTICS.to_vec(),
        create: |o| Ok(Box::new(canonicalize::Canonicalize::from_options(o))),
    },
    PassInfo {
        name: "eqsat-fuse",
        summary: "fuse norms, GELU, gated MLPs, RoPE and attention by equality saturation",
        options: LIMIT_OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: eqsat_fuse::statistics,
        create: |o| Ok(Box::new(eqsat_fuse::EqsatFuse::from_options(o))),
    },
    PassInfo {
        name: "quantize",
        summary: "linear layers to qmatmul: int8/int4 weights (round-to-nearest or GPTQ, after SmoothQuant or AWQ scales), int8 activations per token",
        options: quantize::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || {
            vec![
                "weight-bytes-before",
                "sites-smoothed",
                "sites-not-smoothed",
                "matmuls-quantized",
                "matmuls-kept",
                "glus-fused",
                "glus-split",
                "glus-kept",
                "groups-narrowed",
                "products-at-higher-precision",
                "fallback-bytes",
                "weight-bytes-after",
            ]
        },
        create: |o| Ok(Box::new(quantize::Quantize::from_options(o))),
    },
    PassInfo {
        name: "partition",
        summary: "report which nodes the NPU runs and which stay on the CPU, and why (changes nothing)",
        options: partition::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Nothing,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["npu-nodes", "cpu-nodes", "npu-macs", "cpu-macs"],
        create: |o| Ok(Box::new(partition::Partition::from_options(o))),
    },
    PassInfo {
        name: "kv-cache",
        summary: "a step over a static KV cache: cache inputs/outputs, kv_write + kv_mask, positions from %cache_pos",
        options: kv_cache::OPTIONS,
        requires: Requires::Symbolic,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: false,
        statistics: || vec!["graphs-cached", "layers-cached", "positions-shifted"],
        create: |o| Ok(Box::new(kv_cache::KvCache::from_options(o)?)),
    },
    PassInfo {
        name: "last-logits",
        summary: "a KV-cache step multiplies one row (%logits_row) by the LM head, not every position",
        options: last_logits::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["graphs-rewritten", "graphs-skipped"],
        create: |o| Ok(Box::new(last_logits::LastLogits::from_options(o))),
    },
    PassInfo {
        name: "widen-half",
        summary: "f16/bf16 matmuls, norms, attention and fused ops computed in f32 between casts (bit-exact)",
        options: widen_half::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || widen_half::STATISTICS.to_vec(),
        create: |o| Ok(Box::new(widen_half::WidenHalf::from_options(o))),
    },
    PassInfo {
        name: "bucket-specialize",
        summary: "one graph per sequence-length bucket (`@main` -> `@main_128`, ...), seq bound and folded",
        options: bucket_specialize::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["graphs-specialized", "graphs-created", "nodes-folded", "nodes-removed"],
        create: |o| Ok(Box::new(bucket_specialize::BucketSpecialize::from_options(o))),
    },
    PassInfo {
        name: "pack-weights",
        summary: "quantized weights of CPU products stored as the CPU kernels read them (layout strips16)",
        options: pack_weights::OPTIONS,
        requires: Requires::Any,
        invalidates: Invalidates::Plans,
        establishes: None,
        keeps_outputs: true,
        statistics: || vec!["weights-packed", "nodes-packed", "nodes-kept"],
        create: |o| Ok(Box::new(pack_weights::PackWeights::from_options(o))),
    },
    PassInfo {
        name: "plan-memory",
        summary: "static 64-byte aligned offsets for every tensor: arena (greedy by size, in place), weights, constants",
        options: plan_memory::OPTIONS,
        requires: Requires::Static,
        invalidates: Invalidates::Nothing,
        establishes: Some(Phase::Planned),
        keeps_outputs: true,
        statistics: || vec!["graphs-planned", "arena-bytes", "lower-bound-bytes", "in-place"],
        create: |o| Ok(Box::new(plan_memory::PlanMemory::from_options(o))),
    },
];

/// The names of every registered pass.
pub fn pass_names() -> Vec<&'static str> {
    PASSES.iter().map(|p| p.name).collect()
}

/// Builds the pass an entry names, checking its options.
pub fn create_pass(entry: &PipelineEntry) -> Result<Box<dyn Pass>, PassError> {
    create_entry(entry).map(|(_, pass)| pass)
}

/// Builds the pass an entry names, with its registry entry.
pub fn create_entry(
    entry: &PipelineEntry,
) -> Result<(&'static PassInfo, Box<dyn Pass>), PassError> {
    let Some(info) = PASSES.iter().find(|p| p.name == entry.name) else {
        return Err(PassError::Pipeline(format!(
            "unknown pass `{}` (valid passes: {})",
            entry.name,
            pass_names().join(", ")
        )));
    };
    let options = PassOptions::resolve(info.name, info.options, &entry.options)?;
    let pass = (info.create)(&options).map_err(PassError::Pipeline)?;
    Ok((info, pass))
}

/// An option's default as help and docs print it.
fn default_text(o: &OptionSpec) -> &'static str {
    if o.default.is_empty() {
        "none"
    } else {
        o.default
    }
}

/// What a pass's registry entry declares about phases, in words:
/// `requires any phase; invalidates memory plans`.
fn phase_text(p: &PassInfo) -> String {
    let mut out = format!(
        "requires {}; when it changes the module, invalidates {}",
        p.requires.describe(),
        p.invalidates.describe()
    );
    if let Some(phase) = p.establishes {
        out.push_str(&format!("; leaves the module {phase}"));
    }
    if !p.keeps_outputs {
        out.push_str("; may change graph outputs");
    }
    out
}

/// A help text listing every pass with its phase declarations, options
/// and statistics (`slmcc passes`, `slmcc opt --help`); columns are as
/// wide as the longest name.
pub fn describe_passes() -> String {
    let width = PASSES.iter().map(|p| p.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for p in PASSES {
        out.push_str(&format!("  {:<width$}  {}\n", p.name, p.summary));
        out.push_str(&format!("  {:<width$}  ({})\n", "", phase_text(p)));
        for o in p.options {
            out.push_str(&format!(
                "      {}={}  {} (default {})\n",
                o.name,
                o.kind.describe(),
                o.help,
                default_text(o)
            ));
        }
        let stats = (p.statistics)();
        if !stats.is_empty() {
            out.push_str(&format!("      statistics: {}\n", stats.join(", ")));
        }
    }
    out
}

/// The registry as a Markdown table (`slmcc passes --markdown`), which the
/// pass table of `docs/ARCHITECTURE.md` is (a test compares them).
pub fn markdown_table() -> String {
    let code = |s: &str| format!("`{}`", s.replace('|', "\\|"));
    let mut out = String::from(
        "| pass | contract | phases | options (default) | statistics |\n|---|---|---|---|---|\n",
    );
    for p in PASSES {
        let options: Vec<String> = p
            .options
            .iter()
            .map(|o| {
                format!(
                    "{}: {} ({})",
                    code(&format!("{}={}", o.name, o.kind.describe())),
                    o.help.replace('|', "\\|"),
                    code(default_text(o))
                )
            })
            .collect();
        let stats: Vec<String> = (p.statistics)().iter().map(|s| code(s)).collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            code(p.name),
            p.summary.replace('|', "\\|"),
            phase_text(p),
            if options.is_empty() {
                "—".to_string()
            } else {
                options.join("<br>")
            },
            if stats.is_empty() {
                "—".to_string()
            } else {
                stats.join(", ")
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::parse_pipeline;

    #[test]
    fn every_pass_is_created_under_its_own_name() {
        for p in PASSES {
            let entry = PipelineEntry {
                name: p.name.to_string(),
                options: Vec::new(),
            };
            assert_eq!(create_pass(&entry).unwrap().name(), p.name);
        }
    }

    #[test]
    fn unknown_pass_lists_valid_names() {
        let entry = &parse_pipeline("frobnicate").unwrap()[0];
        let e = create_pass(entry).err().unwrap().to_string();
        assert!(
            e.starts_with(
                "unknown pass `frobnicate` (valid passes: verify, decoder-inputs, shape-infer"
            ),
            "{e}"
        );
    }

    #[test]
    fn names_are_kebab_case_and_unique() {
        let names = pass_names();
        for (i, n) in names.iter().enumerate() {
            assert!(n.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{n}");
            assert!(!names[..i].contains(n), "{n} twice");
        }
    }
}
