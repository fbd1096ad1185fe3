//! `cse`: common-subexpression elimination.

use std::collections::{HashMap, HashSet};

use slmcc_ir::{Attr, Module, OpDef, ValueId};

use crate::pass::{Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("nodes-removed", "nodes removed as duplicates of an earlier node"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "cse",
    summary: "merge nodes that apply the same op to the same operands",
    options: &[],
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |_| Ok(Box::new(Cse)),
};

/// Merges nodes that apply the same op, with equal attributes, to the same
/// operands: later duplicates are removed and their results replaced by the
/// first node's. Every op is pure, so this never changes what the graph
/// computes. Constants are merged too (same type, same value). A duplicate
/// whose result is a graph output is kept, so that graph outputs keep their
/// names.
///
/// Requires: nodes in schedule order. Guarantees: no two nodes with the same
/// key remain, but for duplicates that are graph outputs; statistic
/// `nodes-removed`.
pub struct Cse;

/// The identity of a node for CSE: mnemonic, attributes, operands and result types.
fn node_key(g: &slmcc_ir::Graph, n: &slmcc_ir::Node) -> String {
    let attrs: Vec<String> =
        n.op.attrs()
            .into_iter()
            .map(|(k, v): (&str, Attr)| format!("{k}={v}"))
            .collect();
    let types: Vec<String> = n.outputs.iter().map(|v| g.ty(*v).to_string()).collect();
    format!(
        "{} {:?} {{{}}} : {}",
        n.op.mnemonic(),
        n.inputs,
        attrs.join(","),
        types.join(",")
    )
}

impl Pass for Cse {
    fn name(&self) -> &'static str {
        "cse"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut changed = false;
        for g in &mut module.graphs {
            let mut seen: HashMap<String, Vec<ValueId>> = HashMap::new();
            let mut replace: HashMap<ValueId, ValueId> = HashMap::new();
            let mut keep = Vec::with_capacity(g.nodes.len());
            let outputs: HashSet<ValueId> = g.outputs.iter().copied().collect();
            for i in 0..g.nodes.len() {
                // Operands were rewritten before the key is taken, so chains
                // of duplicates collapse in one sweep.
                for v in &mut g.nodes[i].inputs {
                    if let Some(r) = replace.get(v) {
                        *v = *r;
                    }
                }
                let key = node_key(g, &g.nodes[i]);
                let is_output = g.nodes[i].outputs.iter().any(|v| outputs.contains(v));
                match seen.get(&key).filter(|_| !is_output) {
                    Some(first) => {
                        for (dup, orig) in g.nodes[i].outputs.iter().zip(first) {
                            replace.insert(*dup, *orig);
                        }
                        keep.push(false);
                    }
                    None => {
                        seen.entry(key)
                            .or_insert_with(|| g.nodes[i].outputs.clone());
                        keep.push(true);
                    }
                }
            }
            for v in &mut g.outputs {
                if let Some(r) = replace.get(v) {
                    *v = *r;
                }
            }
            let removed = keep.iter().filter(|k| !**k).count();
            if removed > 0 {
                let mut it = keep.iter();
                g.nodes.retain(|_| *it.next().expect("one flag per node"));
                g.compact();
                changed = true;
            }
            stats.add("nodes-removed", removed as u64);
        }
        Ok(changed)
    }
}
