//! Binding the symbols of a graph to numbers: what running a symbolic
//! graph on a backend with static kernels (the cpu backend bakes every
//! shape into its kernels; the NPU plans its tiles) needs first.
//!
//! The symbols are substituted in the graph inputs, in `constant`s holding
//! symbolic dims and in `split` sizes; then `shape-infer` recomputes every
//! type and `const-fold` (with a high element limit) folds what became
//! computable, such as causal masks built from `range`/`cum_sum`, and `dce`
//! drops what that leaves dead. Value names survive, so golden layers are
//! still found by name.

use std::collections::HashMap;

use slmcc_ir::ops::constant::Constant;
use slmcc_ir::ops::{Known, Op};
use slmcc_ir::{Attr, Attrs, Dim, Graph, Module, OpDef, TensorType};

use crate::PassError;

/// The passes run after substitution.
pub const SPECIALIZE_PIPELINE: &str = "shape-infer,const-fold{max-elements=16777216},dce";

/// Substitutes `bindings` in `graph` (inputs, symbolic constants, split sizes).
fn substitute(graph: &mut Graph, subst: &HashMap<String, Dim>) {
    for id in graph.inputs.clone() {
        let v = graph.value_mut(id);
        v.ty.shape = v.ty.shape.substitute(subst);
    }
    for node in &mut graph.nodes {
        match &mut node.op {
            Op::Constant(c) => {
                if let Known::Dims(s) = &c.value {
                    let values = s.values.iter().map(|d| d.substitute(subst)).collect();
                    *c = Constant::from_known(
                        c.ty.clone(),
                        Known::from_dims(s.shape.clone(), values),
                    );
                    if let Known::Tensor(t) = &c.value {
                        // `from_dims` builds i64; keep the declared dtype.
                        let t = t.cast(c.ty.dtype);
                        c.value = Known::Tensor(std::sync::Arc::new(t));
                    }
                }
            }
            Op::Split(s) => {
                for d in &mut s.sizes {
                    *d = d.substitute(subst);
                }
            }
            _ => {}
        }
    }
}

/// A copy of `module` holding only `graph_name`, with `bindings`
/// substituted and the graph re-inferred and folded.
pub fn specialize(
    module: &Module,
    graph_name: &str,
    bindings: &HashMap<String, i64>,
) -> Result<Module, PassError> {
    let graph = module.graph(graph_name).ok_or_else(|| PassError::Failed {
        pass: "specialize".to_string(),
        message: format!("no graph @{graph_name}"),
    })?;
    let mut graph = graph.clone();
    let subst: HashMap<String, Dim> = bindings
        .iter()
        .map(|(k, &v)| (k.clone(), Dim::fixed(v)))
        .collect();
    substitute(&mut graph, &subst);
    let mut out = Module::new(module.name.clone());
    out.weights = module.weights.clone();
    out.graphs.push(graph);
    crate::run_pipeline(&mut out, SPECIALIZE_PIPELINE)?;
    Ok(out)
}

/// Substitutes `subst` in every value type and op attribute of `g` (value
/// types first, so that each op is rebuilt against its new result types).
/// Unlike [`specialize`], nothing is re-inferred or folded: the caller
/// runs `shape-infer` when values became computable. Fails, naming the
/// node, when an op refuses its substituted attributes.
pub fn substitute_everywhere(g: &mut Graph, subst: &HashMap<String, Dim>) -> Result<(), String> {
    let ids: Vec<_> = g.values().map(|(id, _)| id).collect();
    for id in ids {
        let v = g.value_mut(id);
        if mentions(&v.ty, subst) {
            v.ty = TensorType::new(v.ty.dtype, v.ty.shape.substitute(subst));
        }
    }
    for i in 0..g.nodes.len() {
        let op = &g.nodes[i].op;
        let concrete_constant = matches!(op, Op::Constant(c)
            if matches!(c.value, Known::Tensor(_)) && c.ty.shape.as_fixed().is_some());
        if concrete_constant {
            continue;
        }
        let attrs = op.attrs();
        let symbolic = attrs.iter().any(|(_, a)| attr_mentions(a, subst))
            || matches!(op, Op::Constant(c) if mentions(&c.ty, subst));
        if !symbolic {
            continue;
        }
        let types: Vec<TensorType> = g.nodes[i]
            .outputs
            .iter()
            .map(|&v| g.ty(v).clone())
            .collect();
        let attrs = Attrs::from_pairs(
            attrs
                .into_iter()
                .map(|(k, a)| (k.to_string(), subst_attr(a, subst))),
        );
        let mnemonic = op.mnemonic();
        g.nodes[i].op = Op::build(mnemonic, attrs, &types).map_err(|e| {
            let names: Vec<&String> = subst.keys().collect();
            format!(
                "graph @{}, node {}: cannot substitute {names:?} in `{mnemonic}`: {e}",
                g.name,
                slmcc_ir::verify::node_label(g, i)
            )
        })?;
    }
    Ok(())
}

/// `a` with every dim substituted.
fn subst_attr(a: Attr, subst: &HashMap<String, Dim>) -> Attr {
    match a {
        Attr::Dim(d) => Attr::dim(&d.substitute(subst)),
        Attr::List(items) => Attr::List(items.into_iter().map(|i| subst_attr(i, subst)).collect()),
        other => other,
    }
}

/// True when a type mentions one of the substituted symbols.
fn mentions(ty: &TensorType, subst: &HashMap<String, Dim>) -> bool {
    ty.shape.dims().iter().any(|d| dim_mentions(d, subst))
}

fn dim_mentions(d: &Dim, subst: &HashMap<String, Dim>) -> bool {
    d.symbols().iter().any(|s| subst.contains_key(*s))
}

fn attr_mentions(a: &Attr, subst: &HashMap<String, Dim>) -> bool {
    match a {
        Attr::Dim(d) => dim_mentions(d, subst),
        Attr::List(items) => items.iter().any(|i| attr_mentions(i, subst)),
        _ => false,
    }
}
