//! Equality saturation over the tensor IR with [`egg`].
//!
//! A graph goes into one e-graph ([`convert::to_egraph`]) whose language
//! mirrors the IR ops ([`language`]) and whose analysis carries the IR's
//! facts ([`analysis`]); rewrite rules ([`rules`]) run under hard limits
//! ([`runner`]); the target's cost model ([`cost`]) picks the cheapest
//! equivalent graph ([`extract`]), which comes back as IR ([`convert::to_graph`]).
//! [`optimize`] is that round trip, used by `canonicalize` and `eqsat-fuse`.

pub mod analysis;
pub mod convert;
pub mod cost;
pub mod extract;
pub mod index_fn;
pub mod language;
pub mod rules;
pub mod runner;

use slmcc_ir::{Graph, Module};

pub use analysis::{EGraph, FactAnalysis};
pub use cost::{CostModel, CpuCost};
pub use language::Lang;
pub use runner::{Limits, Rewrite, RunReport, Stop};

/// Rewrites `g` with `rules` under `limits` and extracts the cheapest
/// equivalent graph under `model`. Graph outputs keep their names; every
/// value whose e-class holds an original value keeps that value's name.
///
/// A graph whose e-graph holds `limits.nodes` e-nodes before any rule runs
/// is returned unchanged (stop reason [`Stop::NodeLimit`], no iterations),
/// with a warning: no rule could run on it, and extraction's memory grows
/// with the square of the classes (its module doc).
pub fn optimize(
    g: &Graph,
    module: &Module,
    rules: &[Rewrite],
    limits: Limits,
    model: &dyn CostModel,
) -> Result<(Graph, RunReport), String> {
    let enc = convert::to_egraph(g, module)?;
    let nodes = enc.egraph.total_number_of_nodes();
    if nodes >= limits.nodes {
        tracing::warn!(
            "graph @{}: {nodes} e-nodes before any rewrite reach the node limit {}; \
             left as it is (raise `node-limit` to rewrite it)",
            g.name,
            limits.nodes
        );
        let report = RunReport {
            iterations: 0,
            nodes,
            classes: enc.egraph.number_of_classes(),
            time: std::time::Duration::ZERO,
            stop: Stop::NodeLimit,
        };
        return Ok((g.clone(), report));
    }
    let names = convert::class_names(g, &enc);
    let roots: Vec<egg::Id> = g
        .outputs
        .iter()
        .map(|v| enc.classes[v.index()].expect("outputs are defined"))
        .collect();
    let (egraph, report) = runner::saturate(enc.egraph, rules, limits);
    let extracted = extract::extract(&egraph, &roots, model);
    let expr_names = convert::result_names(&egraph, &extracted, names);
    let output_names: Vec<String> = g.outputs.iter().map(|&v| g.value(v).name.clone()).collect();
    let out = convert::to_graph(
        &extracted.expr,
        &extracted.roots,
        &expr_names,
        &output_names,
        g,
        module,
    )?;
    Ok((out, report))
}
