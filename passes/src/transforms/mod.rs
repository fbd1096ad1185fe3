//! Every pass, one module each. Each pass struct's doc comment states its
//! contract.

/// Declares each pass's module and lists its `INFO` in [`PASSES`], in
/// the order given: registering a pass is one name in the list below.
macro_rules! passes {
    ($($module:ident),* $(,)?) => {
        $(pub mod $module;)*

        /// Every pass slmcc knows, in the order they usually run.
        pub static PASSES: &[&crate::registry::PassInfo] = &[$(&$module::INFO),*];
    };
}

passes![
    verify,
    decoder_inputs,
    shape_infer,
    const_fold,
    dce,
    cse,
    drop_identity,
    // Equality saturation (egg): rules to saturation under hard limits,
    // then extraction with the target's cost model. Graph outputs and
    // every value whose e-class holds an original value keep their names.
    canonicalize,
    eqsat_fuse,
    quantize,
    partition,
    kv_cache,
    last_logits,
    widen_half,
    bucket_specialize,
    pack_weights,
    plan_memory,
];

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
