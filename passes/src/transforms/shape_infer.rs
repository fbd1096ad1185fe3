//! `shape-infer`: recompute result types from the graph inputs.

use slmcc_ir::Module;

use crate::facts::propagate;
use crate::pass::{Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("types-changed", "declared result types replaced by the inferred ones"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "shape-infer",
    summary: "recompute every result type from the graph inputs, resolving `?` dims",
    options: &[],
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |_| Ok(Box::new(ShapeInfer)),
};

/// Recomputes every node result's type (dtype and shape, symbolic dims
/// included) from the graph inputs and weights, through each op's inference,
/// and writes it over the declared type. This resolves `?` dims, propagates a
/// change of an input's shape (e.g. binding `seq` to 128) through the graph,
/// and resolves shape bookkeeping (`shape` → `gather` → `concat` → `reshape`)
/// symbolically.
///
/// Requires: graph inputs with known dims, nodes in schedule order.
/// Guarantees: every declared type equals the inferred one; fails, naming the
/// node, where an op rejects its operands. Statistic `types-changed`.
pub struct ShapeInfer;

impl Pass for ShapeInfer {
    fn name(&self) -> &'static str {
        "shape-infer"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut changed = 0u64;
        for gi in 0..module.graphs.len() {
            let g = &module.graphs[gi];
            if let Some(&bad) = g.inputs.iter().find(|v| g.ty(**v).shape.is_unknown()) {
                return Err(crate::pass::failed(
                    "shape-infer",
                    format!(
                        "graph @{}: input %{} has unknown dims {}",
                        g.name,
                        g.value(bad).name,
                        g.ty(bad)
                    ),
                ));
            }
            let facts = propagate("shape-infer", g, module, &mut |_, _, out| Ok(out))?;
            let g = &mut module.graphs[gi];
            for (i, fact) in facts.into_iter().enumerate() {
                let id = slmcc_ir::ValueId(i as u32);
                if let Some(fact) = fact {
                    let v = g.value_mut(id);
                    if v.ty != fact.ty {
                        v.ty = fact.ty;
                        changed += 1;
                    }
                }
            }
        }
        stats.add("types-changed", changed);
        Ok(changed > 0)
    }
}
