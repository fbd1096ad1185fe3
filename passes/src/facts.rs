//! Fact propagation: what is known about every value of a graph, computed
//! from the graph inputs and weights through each op's inference.
//!
//! Shared by `shape-infer` (which writes the inferred types back) and
//! `const-fold` (which also evaluates ops whose operands are concrete).

use slmcc_ir::verify::node_label;
use slmcc_ir::{Fact, Graph, Module, OpDef, ValueDef};

use crate::pass::{failed, PassError};

/// Called for each node with its operand facts and what inference gave;
/// returns the facts to record for its results.
pub type NodeHook<'a> = dyn FnMut(usize, &[&Fact], Vec<Fact>) -> Result<Vec<Fact>, String> + 'a;

/// Computes a fact for every value reachable from the graph inputs. Types
/// come from inference, not from the declared types. Fails, naming the node,
/// if an operand is undefined or an op rejects its operands.
pub fn propagate(
    pass: &str,
    g: &Graph,
    module: &Module,
    hook: &mut NodeHook<'_>,
) -> Result<Vec<Option<Fact>>, PassError> {
    let mut facts: Vec<Option<Fact>> = vec![None; g.value_count()];
    for (id, v) in g.values() {
        match &v.def {
            ValueDef::Input => facts[id.index()] = Some(Fact::new(v.ty.clone())),
            ValueDef::Weight(name) => {
                let ty = module.weights.get(name).map_or(&v.ty, |w| &w.ty);
                facts[id.index()] = Some(Fact::new(ty.clone()));
            }
            ValueDef::Node => {}
        }
    }
    for (n, node) in g.nodes.iter().enumerate() {
        let at = || format!("graph @{}, node {}", g.name, node_label(g, n));
        let inputs = node
            .inputs
            .iter()
            .map(|v| {
                facts[v.index()].as_ref().ok_or_else(|| {
                    failed(
                        pass,
                        format!(
                            "{}: operand %{} is not defined before use",
                            at(),
                            g.value(*v).name
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let inferred = node
            .op
            .infer(&inputs)
            .map_err(|e| failed(pass, format!("{}: `{}`: {e}", at(), node.op.mnemonic())))?;
        let out = hook(n, &inputs, inferred).map_err(|e| failed(pass, format!("{}: {e}", at())))?;
        if out.len() != node.outputs.len() {
            return Err(failed(
                pass,
                format!(
                    "{}: `{}` yields {} result(s), node declares {}",
                    at(),
                    node.op.mnemonic(),
                    out.len(),
                    node.outputs.len()
                ),
            ));
        }
        for (v, f) in node.outputs.iter().zip(out) {
            facts[v.index()] = Some(f);
        }
    }
    Ok(facts)
}
