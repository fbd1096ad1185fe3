//! `dce`: dead-code elimination.

use slmcc_ir::Module;

use crate::pass::{Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("nodes-removed", "nodes removed because no output needs their results"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "dce",
    summary: "remove nodes whose results are never used",
    options: &[],
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |_| Ok(Box::new(Dce)),
};

/// Removes every node none of whose results reaches a graph output, then
/// drops the values only they used (unused weight references included).
/// Graph inputs stay, used or not: they are the graph's signature.
///
/// Requires: nodes in schedule order. Guarantees: the outputs are computed by
/// the same nodes as before; statistic `nodes-removed`.
pub struct Dce;

impl Pass for Dce {
    fn name(&self) -> &'static str {
        "dce"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut changed = false;
        for g in &mut module.graphs {
            let mut live = vec![false; g.value_count()];
            for v in &g.outputs {
                live[v.index()] = true;
            }
            let mut keep = vec![false; g.nodes.len()];
            for (i, node) in g.nodes.iter().enumerate().rev() {
                if node.outputs.iter().any(|v| live[v.index()]) {
                    keep[i] = true;
                    for v in &node.inputs {
                        live[v.index()] = true;
                    }
                }
            }
            let removed = keep.iter().filter(|k| !**k).count();
            if removed > 0 {
                let mut it = keep.iter();
                g.nodes.retain(|_| *it.next().expect("one flag per node"));
                changed = true;
            }
            let before = g.value_count();
            g.compact();
            changed |= g.value_count() != before;
            stats.add("nodes-removed", removed as u64);
        }
        Ok(changed)
    }
}
