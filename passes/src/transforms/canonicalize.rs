//! `canonicalize`: algebraic clean-up by equality saturation.

use slmcc_ir::Module;

use crate::eqsat::{optimize, rules, CostModel, CpuCost, Limits};
use crate::options::PassOptions;
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistics};
use crate::registry::PassInfo;

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "canonicalize",
    summary: "algebraic clean-up by equality saturation (identities, chains, constants right)",
    options: crate::eqsat::runner::LIMIT_OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || crate::eqsat::runner::STATISTICS.to_vec(),
    create: |o| Ok(Box::new(Canonicalize::from_options(o))),
};

/// Rewrites each graph with the canonicalization rules
/// ([`crate::eqsat::rules::canonical`]: identities removed, transpose and
/// reshape chains collapsed, `x·(1/y)` ⇄ `x/y`, `x/c` → `x·(1/c)`,
/// `pow(x, 2)` → `x·x`, constants to the right and to rank-0 scalars,
/// scalar factors outermost, mask arithmetic such as `and(x, true)` → `x`)
/// and extracts the cheapest equivalent graph under the CPU cost model.
///
/// Requires: a graph that verifies. Guarantees: the graph computes the same
/// values up to floating-point reassociation; graph outputs keep their
/// names, every value whose e-class holds an original value keeps that
/// value's name; dead nodes are gone. Bounded by `node-limit`, `iter-limit`
/// and `time-limit-ms`; a graph whose e-graph holds `node-limit` e-nodes
/// before any rule runs is left as it is (0 iterations, `stop-node-limit`). Statistics: `egraph-nodes`, `egraph-classes`,
/// `iterations`, `saturation-us` and the stop reason (`stop-saturated`,
/// `stop-node-limit`, `stop-iter-limit`, `stop-time-limit`).
pub struct Canonicalize {
    limits: Limits,
    cost: Box<dyn CostModel>,
}

impl Canonicalize {
    pub fn from_options(o: &PassOptions) -> Canonicalize {
        Canonicalize {
            limits: Limits::from_options(o),
            cost: Box::new(CpuCost::default()),
        }
    }
}

impl Pass for Canonicalize {
    fn name(&self) -> &'static str {
        "canonicalize"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let before = slmcc_ir::text::print_module(module);
        let rules = rules::canonical();
        for gi in 0..module.graphs.len() {
            let g = &module.graphs[gi];
            let (out, report) = optimize(g, module, &rules, self.limits, self.cost.as_ref())
                .map_err(|e| failed("canonicalize", format!("graph @{}: {e}", g.name)))?;
            report.record(stats);
            module.graphs[gi] = out;
        }
        Ok(slmcc_ir::text::print_module(module) != before)
    }
}
