//! What fusion made of a model: the fused ops in the fused graph, the
//! attention variants (heads, scale, causal, window, soft-cap, mask
//! operand), and the candidates `eqsat-fuse` left unfused.
//! `slmcc report MODEL --fusion` prints it; the family test builds the
//! table in `docs/FAMILIES.md` from it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use slmcc_ir::{Graph, Module, Op, OpDef};
use slmcc_passes::transforms::eqsat_fuse::UNFUSED;

use crate::pipeline::FUSION_PIPELINE;

/// The fused ops a summary counts, in report order.
pub const FUSED_OPS: &[&str] = &[
    "attention",
    "rope",
    "swiglu",
    "geglu",
    "gelu",
    "rms_norm",
    "add_rms_norm",
    "layer_norm",
    "add_layer_norm",
    "softcap",
];

/// The fusion of one graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FusionSummary {
    /// Fused op mnemonic → how many the fused graph holds.
    pub fused: BTreeMap<&'static str, usize>,
    /// Each `attention`'s attributes as printed (`{kv_heads = 2, ...}`),
    /// and `+ mask` when it kept a mask operand, in graph order.
    pub attention: Vec<String>,
    /// `unfused-*` statistic (without the prefix) → count, non-zero only.
    pub leftover: BTreeMap<String, u64>,
}

impl FusionSummary {
    /// How many `op` nodes the fused graph holds.
    pub fn count(&self, op: &str) -> usize {
        self.fused.get(op).copied().unwrap_or(0)
    }

    /// The attention variants and how many of each, e.g.
    /// `(2, "{kv_heads = 2, scale = 0.25, causal = true}")`.
    pub fn attention_kinds(&self) -> Vec<(usize, String)> {
        let mut kinds: Vec<(usize, String)> = Vec::new();
        for a in &self.attention {
            match kinds.iter_mut().find(|(_, k)| k == a) {
                Some((n, _)) => *n += 1,
                None => kinds.push((1, a.clone())),
            }
        }
        kinds
    }

    /// The fused ops as `attention 2, rope 4, ...` (present ones only).
    pub fn fused_list(&self) -> String {
        let items: Vec<String> = FUSED_OPS
            .iter()
            .filter(|op| self.count(op) > 0)
            .map(|op| format!("{op} {}", self.count(op)))
            .collect();
        items.join(", ")
    }

    /// The leftovers as `softmax-outside-attention 2, ...`, or `none`.
    pub fn leftover_list(&self) -> String {
        if self.leftover.is_empty() {
            return "none".to_string();
        }
        let items: Vec<String> = self
            .leftover
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        items.join(", ")
    }

    /// The human-readable report `slmcc report --fusion` prints.
    pub fn text(&self, what: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "fusion of {what} ({FUSION_PIPELINE})");
        let _ = writeln!(s, "  fused      {}", self.fused_list());
        for (n, kind) in self.attention_kinds() {
            let _ = writeln!(s, "  attention  {n} x {kind}");
        }
        let _ = writeln!(s, "  leftover   {}", self.leftover_list());
        s
    }
}

/// Summarises `g` after fusion, given the statistics of `eqsat-fuse`.
pub fn summarize(g: &Graph, stats: &slmcc_passes::pass::Statistics) -> FusionSummary {
    let mut out = FusionSummary::default();
    for node in &g.nodes {
        let m = node.op.mnemonic();
        if let Some(op) = FUSED_OPS.iter().find(|o| **o == m) {
            *out.fused.entry(op).or_insert(0) += 1;
        }
        if let Op::Attention(a) = &node.op {
            let attrs: Vec<String> = a
                .attrs()
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            let mask = if node.inputs.len() > 3 { " + mask" } else { "" };
            out.attention
                .push(format!("{{{}}}{mask}", attrs.join(", ")));
        }
    }
    for stat in UNFUSED {
        let n = stats.get(stat.name);
        if n > 0 {
            let name = stat.name.trim_start_matches("unfused-").to_string();
            out.leftover.insert(name, n);
        }
    }
    out
}

/// Runs the fusion pipeline on `module` (verifying after each pass) and
/// summarises its `main` graph.
pub fn fuse_and_summarize(module: &mut Module) -> Result<FusionSummary, String> {
    let records = slmcc_passes::run_pipeline(module, FUSION_PIPELINE).map_err(|e| e.to_string())?;
    let stats = records
        .into_iter()
        .find(|r| r.name == "eqsat-fuse")
        .map(|r| r.stats)
        .unwrap_or_default();
    let g = module
        .graphs
        .first()
        .ok_or_else(|| "the module has no graph".to_string())?;
    Ok(summarize(g, &stats))
}
