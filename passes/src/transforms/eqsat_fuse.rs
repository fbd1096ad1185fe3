//! `eqsat-fuse`: fuse transformer building blocks by equality saturation.

use std::collections::HashMap;

use slmcc_ir::verify::node_label;
use slmcc_ir::{Graph, Module, Op, OpDef};

use crate::eqsat::{optimize, rules, CostModel, CpuCost, Limits};
use crate::options::PassOptions;
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "eqsat-fuse",
    summary: "fuse norms, GELU, gated MLPs, RoPE and attention by equality saturation",
    options: crate::eqsat::runner::LIMIT_OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics,
    create: |o| Ok(Box::new(EqsatFuse::from_options(o))),
};

/// Rewrites each graph with the canonicalization rules and the fusion rules
/// ([`crate::eqsat::rules`]: `norm`, `gelu`, `mlp`, `rope`, `attention`,
/// `mask`, `softcap`) and extracts the cheapest equivalent graph under the
/// target's cost model (the CPU model for now), so the decomposed RMSNorm,
/// LayerNorm, residual add + norm, GELU, SwiGLU/GeGLU, rotary embedding,
/// logit soft-capping and attention subgraphs that PyTorch's exporters
/// write (eager or SDPA attention) become `rms_norm`, `layer_norm`,
/// `add_rms_norm`/`add_layer_norm` (both results), `gelu`,
/// `swiglu`/`geglu`, `rope`, `softcap` and `attention` (GQA folded into
/// `kv_heads`; a mask proved causal, sliding-window or full becomes
/// `causal`/`window` or goes; soft-capped scores as `softcap`).
///
/// Requires: a graph that verifies; `const-fold` first, so the constants
/// rules read are visible. Guarantees: the graph computes the same values
/// up to floating-point reassociation and the fused ops' one rounding;
/// graph outputs keep their names, every value whose e-class holds an
/// original value keeps that value's name. Bounded by `node-limit`,
/// `iter-limit` and `time-limit-ms`; a graph whose e-graph holds
/// `node-limit` e-nodes before any rule runs is left as it is.
///
/// Statistics: per fused op how many were formed (`formed-attention`,
/// `formed-rope`, `formed-swiglu`, `formed-qswiglu`, `formed-geglu`, `formed-gelu`,
/// `formed-softcap`,
/// `formed-rms-norm`, `formed-layer-norm`, `formed-add-rms-norm`,
/// `formed-add-layer-norm`); the e-graph (`egraph-nodes`,
/// `egraph-classes`, `iterations`, `saturation-us`, the stop reason
/// `stop-*`); `attention-mask-operands` (attentions that kept a mask
/// operand); and the unfused candidates left, each named with its reason:
/// `unfused-softmax-outside-attention`, `unfused-reduce-mean-outside-norm`,
/// `unfused-sigmoid-outside-swiglu`, `unfused-erf-outside-gelu`,
/// `unfused-tanh-outside-gelu`, `unfused-neg-outside-rope`,
/// `unfused-pow-outside-norm`, `unfused-sqrt-outside-norm`,
/// `unfused-sin-cos-outside-rope` (a `sin`/`cos` that computes no rope's
/// tables), `unfused-add-before-norm` (a norm of a residual add). Each
/// unfused node is also logged as a warning naming it, so a user sees what
/// did not fuse without reading IR.
pub struct EqsatFuse {
    limits: Limits,
    cost: Box<dyn CostModel>,
}

impl EqsatFuse {
    pub fn from_options(o: &PassOptions) -> EqsatFuse {
        EqsatFuse {
            limits: Limits::from_options(o),
            cost: Box::new(CpuCost::default()),
        }
    }
}

/// The fused ops and their statistic.
const FORMED: &[(&str, Statistic)] = &[
    ("attention", Statistic::new("formed-attention", "`attention` nodes formed")),
    ("rope", Statistic::new("formed-rope", "`rope` nodes formed")),
    ("swiglu", Statistic::new("formed-swiglu", "`swiglu` nodes formed")),
    ("qswiglu", Statistic::new("formed-qswiglu", "`qswiglu` nodes formed")),
    ("geglu", Statistic::new("formed-geglu", "`geglu` nodes formed")),
    ("gelu", Statistic::new("formed-gelu", "`gelu` nodes formed")),
    ("softcap", Statistic::new("formed-softcap", "`softcap` nodes formed")),
    ("rms_norm", Statistic::new("formed-rms-norm", "`rms_norm` nodes formed")),
    ("layer_norm", Statistic::new("formed-layer-norm", "`layer_norm` nodes formed")),
    ("add_rms_norm", Statistic::new("formed-add-rms-norm", "`add_rms_norm` nodes formed")),
    ("add_layer_norm", Statistic::new("formed-add-layer-norm", "`add_layer_norm` nodes formed")),
];

fn count_ops(g: &Graph) -> HashMap<&'static str, u64> {
    let mut n = HashMap::new();
    for node in &g.nodes {
        *n.entry(node.op.mnemonic()).or_insert(0) += 1;
    }
    n
}

/// The candidates left unfused: each statistic's description is the
/// reason logged for each such node.
const SOFTMAX_OUTSIDE_ATTENTION: Statistic = Statistic::new(
    "unfused-softmax-outside-attention",
    "softmax not inside an attention",
);
const REDUCE_MEAN_OUTSIDE_NORM: Statistic = Statistic::new(
    "unfused-reduce-mean-outside-norm",
    "reduce_mean not inside a norm",
);
const POW_OUTSIDE_NORM: Statistic = Statistic::new(
    "unfused-pow-outside-norm",
    "pow not inside a norm or gelu",
);
const SQRT_OUTSIDE_NORM: Statistic = Statistic::new(
    "unfused-sqrt-outside-norm",
    "sqrt not inside a norm",
);
const SIGMOID_OUTSIDE_SWIGLU: Statistic = Statistic::new(
    "unfused-sigmoid-outside-swiglu",
    "sigmoid not inside a swiglu",
);
const ERF_OUTSIDE_GELU: Statistic = Statistic::new(
    "unfused-erf-outside-gelu",
    "erf not inside a gelu",
);
const TANH_OUTSIDE_GELU: Statistic = Statistic::new(
    "unfused-tanh-outside-gelu",
    "tanh not inside a gelu or softcap",
);
const NEG_OUTSIDE_ROPE: Statistic = Statistic::new(
    "unfused-neg-outside-rope",
    "neg not inside a rope",
);
const SIN_COS_OUTSIDE_ROPE: Statistic = Statistic::new(
    "unfused-sin-cos-outside-rope",
    "sin/cos not computing a rope's tables",
);
const ADD_BEFORE_NORM: Statistic = Statistic::new(
    "unfused-add-before-norm",
    "residual add feeding a norm not fused",
);

/// The statistics of the candidates left unfused, in report order.
pub const UNFUSED: &[Statistic] = &[
    SOFTMAX_OUTSIDE_ATTENTION,
    REDUCE_MEAN_OUTSIDE_NORM,
    POW_OUTSIDE_NORM,
    SQRT_OUTSIDE_NORM,
    SIGMOID_OUTSIDE_SWIGLU,
    ERF_OUTSIDE_GELU,
    TANH_OUTSIDE_GELU,
    NEG_OUTSIDE_ROPE,
    SIN_COS_OUTSIDE_ROPE,
    ADD_BEFORE_NORM,
];

/// The values a `rope` reads its tables from, and everything they are
/// computed from (walked back iteratively).
fn rope_tables(g: &Graph, producers: &[Option<slmcc_ir::Producer>]) -> Vec<bool> {
    let mut table = vec![false; g.values().count()];
    let mut stack: Vec<slmcc_ir::ValueId> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Rope(_)))
        .flat_map(|n| n.inputs[1..].iter().copied())
        .collect();
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut table[v.index()], true) {
            continue;
        }
        if let Some(p) = producers[v.index()] {
            stack.extend(g.nodes[p.node].inputs.iter().copied());
        }
    }
    table
}

/// The candidate a remaining node is: its statistic, whose description is
/// the reason.
fn unfused(
    g: &Graph,
    node: &slmcc_ir::Node,
    producers: &[Option<slmcc_ir::Producer>],
    tables: &[bool],
) -> Option<Statistic> {
    use slmcc_ir::ops::binary::BinaryKind;
    use slmcc_ir::ops::reduce::ReduceKind;
    use slmcc_ir::ops::unary::UnaryKind;
    Some(match &node.op {
        Op::Softmax(_) => SOFTMAX_OUTSIDE_ATTENTION,
        Op::Reduce(r) if r.kind == ReduceKind::Mean => REDUCE_MEAN_OUTSIDE_NORM,
        Op::Binary(b) if b.kind == BinaryKind::Pow => {
            POW_OUTSIDE_NORM
        }
        Op::Unary(u) => match u.kind {
            UnaryKind::Sqrt => SQRT_OUTSIDE_NORM,
            UnaryKind::Sigmoid => SIGMOID_OUTSIDE_SWIGLU,
            UnaryKind::Erf => ERF_OUTSIDE_GELU,
            UnaryKind::Tanh => TANH_OUTSIDE_GELU,
            UnaryKind::Neg => NEG_OUTSIDE_ROPE,
            UnaryKind::Sin | UnaryKind::Cos if !tables[node.outputs[0].index()] => SIN_COS_OUTSIDE_ROPE,
            _ => return None,
        },
        Op::RmsNorm(_) | Op::LayerNorm(_) => {
            let p = producers[node.inputs[0].index()]?;
            let add = &g.nodes[p.node];
            let same = add.inputs.len() == 2 && g.ty(add.inputs[0]) == g.ty(add.inputs[1]);
            match &add.op {
                Op::Binary(b) if b.kind == BinaryKind::Add && same => ADD_BEFORE_NORM,
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// Attentions left with an explicit mask operand (not the causal rule).
const ATTENTION_MASK_OPERANDS: Statistic = Statistic::new(
    "attention-mask-operands",
    "fused attentions that read an explicit mask operand",
);

/// The counters `eqsat-fuse` reports: fused ops formed, attention with a
/// mask operand, candidates left unfused, and the e-graph runner's.
pub fn statistics() -> Vec<Statistic> {
    let formed = FORMED.iter().map(|(_, stat)| *stat);
    formed
        .chain([ATTENTION_MASK_OPERANDS])
        .chain(UNFUSED.iter().copied())
        .chain(crate::eqsat::runner::STATISTICS.iter().copied())
        .collect()
}

/// Records the fused ops formed and the candidates left unfused in `after`;
/// each leftover is logged as a warning naming the node.
fn record(before: &Graph, after: &Graph, stats: &mut Statistics) {
    let (b, a) = (count_ops(before), count_ops(after));
    for (op, stat) in FORMED {
        let formed = a
            .get(op)
            .unwrap_or(&0)
            .saturating_sub(*b.get(op).unwrap_or(&0));
        stats.add(stat.name, formed);
    }
    let masks = after
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Attention(_)) && n.inputs.len() == 4)
        .count();
    stats.add(ATTENTION_MASK_OPERANDS.name, masks as u64);
    let producers = after.producers();
    let tables = rope_tables(after, &producers);
    let mut left: HashMap<&'static str, u64> = HashMap::new();
    for (i, node) in after.nodes.iter().enumerate() {
        if let Some(stat) = unfused(after, node, &producers, &tables) {
            *left.entry(stat.name).or_insert(0) += 1;
            tracing::warn!(
                "eqsat-fuse: graph @{}: {}: {}",
                after.name,
                node_label(after, i),
                stat.description
            );
        }
    }
    for stat in UNFUSED {
        stats.add(stat.name, *left.get(stat.name).unwrap_or(&0));
    }
}

impl Pass for EqsatFuse {
    fn name(&self) -> &'static str {
        "eqsat-fuse"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let before = slmcc_ir::text::print_module(module);
        let rules = rules::fusion();
        for gi in 0..module.graphs.len() {
            let g = &module.graphs[gi];
            let (out, report) = optimize(g, module, &rules, self.limits, self.cost.as_ref())
                .map_err(|e| failed("eqsat-fuse", format!("graph @{}: {e}", g.name)))?;
            record(g, &out, stats);
            report.record(stats);
            module.graphs[gi] = out;
        }
        Ok(slmcc_ir::text::print_module(module) != before)
    }
}
