//! `plan-memory`: static offsets for every tensor of every graph.

use slmcc_ir::Module;

use crate::memory::{plan_graph, PlanOptions};
use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;
use slmcc_ir::Phase;

/// Options of `plan-memory`.
pub const OPTIONS: &[OptionSpec] = &[OptionSpec {
    name: "in-place",
    kind: OptionKind::Bool,
    default: "true",
    help: "let element-wise and reshaping ops write over an operand that dies there",
}];

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("graphs-planned", "graphs given a memory plan"),
    Statistic::new("arena-bytes", "arena bytes of the plans, summed over graphs"),
    Statistic::new("lower-bound-bytes", "the largest bytes live at once, summed over graphs (the arena cannot be smaller)"),
    Statistic::new("in-place", "results placed over an operand they overwrite"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "plan-memory",
    summary: "static 64-byte aligned offsets for every tensor: arena (greedy by size, in place), weights, constants",
    options: OPTIONS,
    requires: Requires::Static,
    invalidates: Invalidates::Nothing,
    establishes: Some(Phase::Planned),
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(PlanMemory::from_options(o))),
};

/// Computes a [`MemoryPlan`](slmcc_ir::MemoryPlan) for every graph and
/// stores it in `module.plans` under the graph's name (replacing any older
/// plan, and dropping plans of graphs that no longer exist). Lifetimes come from the schedule; graph inputs and outputs live in
/// the arena (the executor writes inputs there before the first step and
/// reads outputs from there after the last); weights go to the weights
/// region (one layout for the module), `constant` results to the constants
/// region; arena offsets are assigned greedily by size, 64-byte aligned, with
/// element-wise and reshaping results reusing a dying operand of the same
/// byte size when `in-place` is on. The graph itself is not changed.
///
/// Requires: every dim static (run `bucket-specialize` first; the error
/// names the first value with a symbolic dim). Guarantees: each plan passes
/// `MemoryPlan::check` and matches its graph (the verifier re-checks).
/// Statistics: `graphs-planned`, `arena-bytes` and `lower-bound-bytes`
/// (sums over graphs), `in-place` (results reusing an operand).
pub struct PlanMemory {
    options: PlanOptions,
}

impl PlanMemory {
    pub fn from_options(o: &PassOptions) -> PlanMemory {
        PlanMemory {
            options: PlanOptions {
                in_place: o.bool("in-place"),
                ..PlanOptions::default()
            },
        }
    }
}

impl Pass for PlanMemory {
    fn name(&self) -> &'static str {
        "plan-memory"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut changed = false;
        let mut plans = Vec::with_capacity(module.graphs.len());
        for g in &module.graphs {
            let plan = plan_graph(g, module, &self.options).map_err(|e| failed(self.name(), e))?;
            stats.add("graphs-planned", 1);
            stats.add("arena-bytes", plan.regions.arena);
            stats.add("lower-bound-bytes", plan.lower_bound);
            let reused = plan.tensors.iter().filter(|t| t.in_place.is_some()).count();
            stats.add("in-place", reused as u64);
            changed |= module.plans.get(&g.name) != Some(&plan);
            plans.push((g.name.clone(), plan));
        }
        let before = module.plans.len();
        module
            .plans
            .retain(|name, _| plans.iter().any(|(g, _)| g == name));
        changed |= module.plans.len() != before;
        module.plans.extend(plans);
        Ok(changed)
    }
}
