//! The verifier: structural and type checks of a module.
//!
//! Checks, per graph: every value is defined exactly once (graph input, node
//! output or module weight); every operand and graph output is defined before
//! it is used in schedule order (which also rules out cycles); weight
//! references name declared weights of the same type; each node's declared
//! result types equal what its op infers from its operands; no dim is still
//! unknown (`?`). Per module: every bucket record and memory plan names a
//! graph of the module, a bucket's symbolic signature bound to its size is
//! the graph's, and a plan is consistent with its graph
//! ([`plan::check_against`](crate::plan::check_against)). The first problem
//! found is returned.

use std::fmt;

use crate::graph::{Graph, Module, ValueDef, ValueId};
use crate::ops::{Fact, OpDef};

/// A verification failure, located by graph and (when relevant) node.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct VerifyError {
    pub graph: String,
    /// The first result of the offending node, as `%name`, if a node is at fault.
    pub node: Option<String>,
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "graph @{}", self.graph)?;
        if let Some(n) = &self.node {
            write!(f, ", node {n}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Verifies every graph of the module.
pub fn verify_module(module: &Module) -> Result<(), VerifyError> {
    verify_module_with(module, UnknownDims::Refuse)
}

/// Verifies a module as the input of a pass pipeline (`slmcc opt`'s file):
/// as [`verify_module`], except that a result declared with unknown dims
/// (`?`, which `shape-infer` resolves) need only have the dtype and rank
/// its op gives.
pub fn verify_input(module: &Module) -> Result<(), VerifyError> {
    verify_module_with(module, UnknownDims::Allow)
}

/// Whether a result may be declared with unknown dims.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UnknownDims {
    Refuse,
    Allow,
}

fn verify_module_with(module: &Module, unknown: UnknownDims) -> Result<(), VerifyError> {
    for (i, g) in module.graphs.iter().enumerate() {
        if module.graphs[..i].iter().any(|o| o.name == g.name) {
            return Err(VerifyError {
                graph: g.name.clone(),
                node: None,
                message: "graph name is used twice in the module".to_string(),
            });
        }
        verify_graph_with(g, module, unknown)?;
    }
    verify_buckets_and_plans(module)
}

/// Checks `module.buckets` and `module.plans` against the graphs they name.
fn verify_buckets_and_plans(module: &Module) -> Result<(), VerifyError> {
    let err = |graph: &str, message: String| VerifyError {
        graph: graph.to_string(),
        node: None,
        message,
    };
    for (name, b) in &module.buckets {
        let Some(g) = module.graph(name) else {
            return Err(err(
                name,
                "bucket record of a graph that does not exist".into(),
            ));
        };
        let ours: Vec<&crate::TensorType> = g
            .inputs
            .iter()
            .chain(&g.outputs)
            .map(|&v| g.ty(v))
            .collect();
        let theirs: Vec<&crate::TensorType> = b.inputs.iter().chain(&b.outputs).collect();
        let bound_ok = b.inputs.len() == g.inputs.len()
            && b.outputs.len() == g.outputs.len()
            && ours
                .iter()
                .zip(&theirs)
                .all(|(o, t)| **o == b.bind(t, b.size));
        if !bound_ok {
            return Err(err(
                name,
                format!(
                    "the signature is not @{}'s with {} = {}",
                    b.base, b.symbol, b.size
                ),
            ));
        }
    }
    for (name, plan) in &module.plans {
        let Some(g) = module.graph(name) else {
            return Err(err(
                name,
                "memory plan of a graph that does not exist".into(),
            ));
        };
        crate::plan::check_against(plan, g).map_err(|e| err(name, format!("memory plan: {e}")))?;
    }
    Ok(())
}

/// A printable label for node `n`: its first result, or its index.
pub fn node_label(g: &Graph, n: usize) -> String {
    match g.nodes[n].outputs.first() {
        Some(v) => format!("%{}", g.value(*v).name),
        None => format!("#{n}"),
    }
}

/// Verifies one graph against its module's weights.
pub fn verify_graph(g: &Graph, module: &Module) -> Result<(), VerifyError> {
    verify_graph_with(g, module, UnknownDims::Refuse)
}

fn verify_graph_with(g: &Graph, module: &Module, unknown: UnknownDims) -> Result<(), VerifyError> {
    let err = |node: Option<usize>, message: String| VerifyError {
        graph: g.name.clone(),
        node: node.map(|n| node_label(g, n)),
        message,
    };
    let mut facts: Vec<Option<Fact>> = vec![None; g.value_count()];
    let mut defined_by_node = vec![false; g.value_count()];

    for &v in &g.inputs {
        let val = g.value(v);
        if val.def != ValueDef::Input || facts[v.index()].is_some() {
            return Err(err(
                None,
                format!("input %{} is not a unique graph input", val.name),
            ));
        }
        facts[v.index()] = Some(Fact::new(val.ty.clone()));
    }
    for (id, val) in g.values() {
        if let ValueDef::Weight(name) = &val.def {
            match module.weights.get(name) {
                None => return Err(err(None, format!("@{name} is not a declared weight"))),
                Some(w) if w.ty != val.ty => {
                    return Err(err(
                        None,
                        format!("@{name} is used as {} but declared {}", val.ty, w.ty),
                    ))
                }
                Some(_) => facts[id.index()] = Some(Fact::new(val.ty.clone())),
            }
        }
    }

    let name = |v: ValueId| g.value(v).name.clone();
    for (n, node) in g.nodes.iter().enumerate() {
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for &v in &node.inputs {
            if v.index() >= facts.len() {
                return Err(err(
                    Some(n),
                    format!("operand {v:?} is not a value of this graph"),
                ));
            }
            match &facts[v.index()] {
                Some(f) => inputs.push(f),
                None => {
                    return Err(err(
                        Some(n),
                        format!(
                            "operand %{} is used before it is defined (cycle or bad order)",
                            name(v)
                        ),
                    ))
                }
            }
        }
        let inferred = node
            .op
            .infer(&inputs)
            .map_err(|e| err(Some(n), format!("`{}`: {e}", node.op.mnemonic())))?;
        if inferred.len() != node.outputs.len() {
            return Err(err(
                Some(n),
                format!(
                    "`{}` yields {} result(s), node declares {}",
                    node.op.mnemonic(),
                    inferred.len(),
                    node.outputs.len()
                ),
            ));
        }
        for (&v, fact) in node.outputs.iter().zip(inferred) {
            let val = g.value(v);
            if val.def != ValueDef::Node || defined_by_node[v.index()] {
                return Err(err(
                    Some(n),
                    format!("%{} is defined more than once", val.name),
                ));
            }
            defined_by_node[v.index()] = true;
            let agrees = val.ty.dtype == fact.ty.dtype && val.ty.rank() == fact.ty.rank();
            if val.ty.shape.is_unknown() && unknown == UnknownDims::Allow && agrees {
                facts[v.index()] = Some(fact);
                continue;
            }
            if val.ty.shape.is_unknown() {
                return Err(err(
                    Some(n),
                    format!(
                        "%{} has unknown dims {} (run shape-infer)",
                        val.name, val.ty
                    ),
                ));
            }
            if val.ty != fact.ty {
                return Err(err(
                    Some(n),
                    format!(
                        "%{} is declared {} but `{}` gives {}",
                        val.name,
                        val.ty,
                        node.op.mnemonic(),
                        fact.ty
                    ),
                ));
            }
            facts[v.index()] = Some(fact);
        }
    }
    for &v in &g.outputs {
        if facts.get(v.index()).is_none_or(|f| f.is_none()) {
            return Err(err(None, format!("output %{} is never defined", name(v))));
        }
    }
    Ok(())
}
