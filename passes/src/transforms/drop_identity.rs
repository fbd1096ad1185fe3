//! `drop-identity`: remove `identity` nodes. The worked example of
//! `docs/ADDING_A_PASS.md`, which quotes this file.

use std::collections::{HashMap, HashSet};

use slmcc_ir::{Module, Op, ValueId};

use crate::pass::{Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[Statistic::new(
    "identities-removed",
    "`identity` nodes removed",
)];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "drop-identity",
    summary: "remove `identity` nodes, but those whose result is a graph output",
    options: &[],
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |_| Ok(Box::new(DropIdentity)),
};

/// Makes every use of an `identity` node's result read the node's operand
/// instead, and removes the node, unless its result is a graph output
/// (graph outputs keep their names). One sweep per graph, so chains of
/// identities go at once.
///
/// Requires: nodes in schedule order. Guarantees: every graph computes
/// what it computed; the only `identity` nodes left are those whose
/// result is a graph output.
pub struct DropIdentity;

impl Pass for DropIdentity {
    fn name(&self) -> &'static str {
        "drop-identity"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut removed = 0;
        for g in &mut module.graphs {
            let outputs: HashSet<ValueId> = g.outputs.iter().copied().collect();
            // What a removed identity's result is read as. Nodes are in
            // schedule order, so a node's operands are resolved before it.
            let mut source: HashMap<ValueId, ValueId> = HashMap::new();
            let before = g.nodes.len();
            g.nodes.retain_mut(|node| {
                for v in node.inputs.iter_mut() {
                    if let Some(&s) = source.get(v) {
                        *v = s;
                    }
                }
                let result = node.outputs[0];
                let drop = matches!(node.op, Op::Identity(_)) && !outputs.contains(&result);
                if drop {
                    source.insert(result, node.inputs[0]);
                }
                !drop
            });
            if g.nodes.len() < before {
                removed += (before - g.nodes.len()) as u64;
                g.compact();
            }
        }
        stats.add("identities-removed", removed);
        Ok(removed > 0)
    }
}
