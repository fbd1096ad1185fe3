//! Every pass, one module each. Each pass struct's doc comment states its
//! contract.

pub mod bucket_specialize;
pub mod canonicalize;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod decoder_inputs;
pub mod eqsat_fuse;
pub mod kv_cache;
pub mod last_logits;
pub mod pack_weights;
pub mod partition;
pub mod plan_memory;
pub mod quantize;
pub mod shape_infer;
pub mod verify;
pub mod widen_half;

use std::collections::HashSet;

use slmcc_ir::{Module, ValueDef, WeightStore};

/// `base`, or `base1`, `base2`, ... : the first weight name the store does
/// not hold yet.
pub(crate) fn fresh_weight_name(store: &WeightStore, base: &str) -> String {
    if store.get(base).is_none() {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}{i}"))
        .find(|n| store.get(n).is_none())
        .expect("an unused name")
}

/// Removes the module weights that no graph references any more (after a
/// pass replaced them by transformed copies).
pub(crate) fn drop_unused_weights(module: &mut Module) {
    let used: HashSet<String> = module
        .graphs
        .iter()
        .flat_map(|g| {
            g.values().filter_map(|(_, v)| match &v.def {
                ValueDef::Weight(w) => Some(w.clone()),
                _ => None,
            })
        })
        .collect();
    let unused: Vec<String> = module
        .weights
        .iter()
        .map(|(n, _)| n.to_string())
        .filter(|n| !used.contains(n))
        .collect();
    for n in unused {
        module.weights.remove(&n);
    }
}

/// Evaluation of a whole graph for the passes' unit tests.
#[cfg(test)]
pub(crate) mod test_eval {
    use std::collections::HashMap;

    use slmcc_ir::{EvalCtx, Module, OpDef, Tensor, ValueDef, ValueId};

    /// Evaluates `@main` of `m` node by node (the reference semantics).
    pub fn run_main(m: &Module, inputs: &[(&str, Tensor)]) -> Vec<Tensor> {
        let g = &m.graphs[0];
        let mut env: HashMap<ValueId, Tensor> = HashMap::new();
        for (id, v) in g.values() {
            if let ValueDef::Weight(name) = &v.def {
                env.insert(id, (*m.weights.tensor(name).unwrap().unwrap()).clone());
            }
        }
        for (&id, (_, t)) in g.inputs.iter().zip(inputs) {
            env.insert(id, t.clone());
        }
        for node in &g.nodes {
            let ins: Vec<&Tensor> = node.inputs.iter().map(|i| &env[i]).collect();
            let outs = node.op.eval(&ins, &EvalCtx::default()).unwrap();
            env.extend(node.outputs.iter().copied().zip(outs));
        }
        g.outputs.iter().map(|o| env[o].clone()).collect()
    }
}
