//! `last-logits`: a KV-cache step computes the LM head for one row.
//!
//! A prefill bucket of 64 tokens needs the logits of its last real token
//! only (the next token's distribution; the other rows are never read),
//! yet the exported graph multiplies every row by the LM head, the
//! largest matrix of a small model (Qwen2-1.5B: 1536 × 151936). This pass
//! gathers the row first, so the head multiplies one row per step.

use slmcc_ir::ops::gather::Gather;
use slmcc_ir::{DType, Dim, Graph, Module, Op, Shape, TensorType, ValueId};

use crate::options::{OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;
use crate::transforms::kv_cache::POSITION_INPUT;

/// Options of `last-logits` (none).
pub const OPTIONS: &[OptionSpec] = &[];

/// The input naming the row whose logits a step computes.
pub const ROW_INPUT: &str = "logits_row";

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("graphs-rewritten", "step graphs whose LM head now multiplies one row"),
    Statistic::new("graphs-skipped", "step graphs whose first output is not such a product (left as they are)"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "last-logits",
    summary: "a KV-cache step multiplies one row (%logits_row) by the LM head, not every position",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(LastLogits::from_options(o))),
};

/// For every graph that is a KV-cache step (it has the input
/// `%cache_pos`, as the `kv-cache` pass adds) whose first output is the
/// result of a `matmul` or `qmatmul` of a rank-3 `[b, seq, hidden]`
/// operand (the LM head):
///
/// - adds the input `%logits_row : i64[1]`, the row (`0 <= row < seq`)
///   whose logits the step computes — the last real token of a prefill
///   chunk, 0 for a decode step;
/// - gathers that row (`gather` on axis 1: `[b, 1, hidden]`) and makes the
///   LM head multiply it, so the first output becomes `[b, 1, vocab]`.
///
/// Requires: a verified module after `kv-cache`. Guarantees: other graphs
/// are unchanged; a step graph whose first output is not such a product
/// (soft-capped logits, say) is left as it is and counted in
/// `graphs-skipped`; statistic `graphs-rewritten`. Runs before
/// `quantize` or after it (a `qmatmul` head works the same).
pub struct LastLogits;

impl LastLogits {
    pub fn from_options(_: &PassOptions) -> LastLogits {
        LastLogits
    }
}

impl Pass for LastLogits {
    fn name(&self) -> &'static str {
        "last-logits"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut changed = false;
        for g in &mut module.graphs {
            let is_step = g.inputs.iter().any(|&i| g.value(i).name == POSITION_INPUT);
            if !is_step {
                continue;
            }
            let Some(head) = lm_head(g) else {
                stats.add("graphs-skipped", 1);
                continue;
            };
            rewrite(g, head)?;
            stats.add("graphs-rewritten", 1);
            changed = true;
        }
        Ok(changed)
    }
}

/// The node computing the first output, when it is a `matmul` or
/// `qmatmul` of a rank-3 operand.
fn lm_head(g: &Graph) -> Option<usize> {
    let logits = *g.outputs.first()?;
    let i = g.nodes.iter().position(|n| n.outputs.contains(&logits))?;
    let node = &g.nodes[i];
    let rank3 = g.ty(node.inputs[0]).shape.dims().len() == 3;
    (matches!(node.op, Op::MatMul(_) | Op::QMatMul(_)) && rank3).then_some(i)
}

fn rewrite(g: &mut Graph, head: usize) -> Result<(), PassError> {
    let graph = g.name.clone();
    let err = |e: &dyn std::fmt::Display| failed("last-logits", format!("graph @{graph}: {e}"));
    let row_ty = TensorType::new(DType::I64, Shape(vec![Dim::from(1)]));
    let row = g.add_input(ROW_INPUT, row_ty).map_err(|e| err(&e))?;
    let hidden: ValueId = g.nodes[head].inputs[0];
    let mut dims = g.ty(hidden).shape.dims().to_vec();
    dims[1] = Dim::from(1);
    let ty = TensorType::new(g.ty(hidden).dtype, Shape(dims));
    let name = g.fresh_name(&format!("{}_last", g.value(hidden).name));
    let picked = g
        .add_node(Gather { axis: 1 }, vec![hidden, row], vec![(name, ty)])
        .map_err(|e| err(&e))?[0];
    // The gather goes right before the head, which now reads it.
    let gather = g.nodes.pop().expect("just added");
    g.nodes.insert(head, gather);
    g.nodes[head + 1].inputs[0] = picked;
    let logits = g.nodes[head + 1].outputs[0];
    let mut dims = g.ty(logits).shape.dims().to_vec();
    dims[1] = Dim::from(1);
    g.value_mut(logits).ty.shape = Shape(dims);
    Ok(())
}
