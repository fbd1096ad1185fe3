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
use slmcc_ir::{Dim, Graph, Module};

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
