//! `const-fold`: replace values known at compile time by constants.

use std::sync::Arc;

use slmcc_ir::ops::constant::Constant;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::{EvalCtx, Fact, Known, Module, Op, OpDef, ValueDef};

use crate::facts::propagate;
use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;
use crate::transforms::drop_unused_weights;

/// Options of `const-fold`.
pub const OPTIONS: &[OptionSpec] = &[OptionSpec {
    name: "max-elements",
    kind: OptionKind::COUNT,
    default: "65536",
    help: "largest result (in elements) to materialise as a constant",
}];

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("nodes-folded", "nodes replaced by `constant` nodes"),
    Statistic::new("weights-transposed", "transposes of weights folded into transposed copies of the weights"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "const-fold",
    summary: "replace results known at compile time (incl. symbolic shape values) by constants",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(ConstFold::from_options(o))),
};

/// Evaluates, at compile time, every node whose operands are all known, and
/// turns every node result whose value is known into a `constant`: concrete
/// values (from the reference evaluation of the op) and symbolic ones (shape
/// bookkeeping such as `shape %x` → `constant {value = [1, seq, 128]}`).
/// Results larger than `max-elements` stay computed. The one place weights
/// are read: a `transpose` of a weight (PyTorch's tied LM head,
/// `matmul(x, transpose(embed))`) becomes the weight `@name.T{perm}`,
/// transposed once here instead of at every run, when the weight's data is
/// at hand; a weight no graph reads any more leaves the store.
///
/// Requires: a graph that verifies. Guarantees: the graph computes the same
/// values; folded nodes become `constant` nodes in place, keeping their
/// result names, and the nodes that fed them are left for `dce`. Statistics
/// `nodes-folded`, `weights-transposed`.
pub struct ConstFold {
    max_elements: usize,
}

impl ConstFold {
    pub fn from_options(o: &PassOptions) -> ConstFold {
        ConstFold {
            max_elements: o.count("max-elements"),
        }
    }
}

/// Evaluates the node when every operand is a concrete value.
fn evaluate(
    op: &Op,
    inputs: &[&Fact],
    inferred: Vec<Fact>,
    limit: usize,
) -> Result<Vec<Fact>, String> {
    if inferred.iter().all(|f| f.value.is_some()) || matches!(op, Op::Constant(_)) {
        return Ok(inferred);
    }
    let tensors: Option<Vec<Arc<slmcc_ir::Tensor>>> = inputs
        .iter()
        .map(|f| f.value.as_ref()?.as_tensor(f.ty.dtype))
        .collect();
    let Some(tensors) = tensors else {
        return Ok(inferred);
    };
    let small = inferred.iter().all(|f| {
        f.ty.shape
            .as_fixed()
            .is_some_and(|s| s.iter().product::<usize>() <= limit)
    });
    if !small {
        return Ok(inferred);
    }
    let refs: Vec<&slmcc_ir::Tensor> = tensors.iter().map(|t| &**t).collect();
    let values = op
        .eval(&refs, &EvalCtx::default())
        .map_err(|e| format!("`{}` failed to evaluate: {e}", op.mnemonic()))?;
    Ok(inferred
        .into_iter()
        .zip(values)
        .map(|(f, t)| Fact::with_value(f.ty, Known::Tensor(Arc::new(t))))
        .collect())
}

/// The name of weight `name` transposed by `perm`.
fn transposed_name(name: &str, perm: &[i64]) -> String {
    let p: Vec<String> = perm.iter().map(i64::to_string).collect();
    format!("{name}.T{}", p.join(""))
}

/// Replaces each `transpose` of a weight whose data is at hand by a weight
/// holding the transposed data (see [`ConstFold`]); returns how many.
fn fold_weight_transposes(module: &mut Module) -> Result<u64, PassError> {
    let mut folded = 0;
    for gi in 0..module.graphs.len() {
        let g = &module.graphs[gi];
        let todo: Vec<(usize, String, Vec<i64>)> = g
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let Op::Transpose(t) = &n.op else {
                    return None;
                };
                match &g.value(*n.inputs.first()?).def {
                    ValueDef::Weight(w) if !g.outputs.contains(&n.outputs[0]) => {
                        Some((i, w.clone(), t.perm.clone()))
                    }
                    _ => None,
                }
            })
            .collect();
        let mut dropped = Vec::new();
        for (i, name, perm) in todo {
            let new = transposed_name(&name, &perm);
            if module.weights.get(&new).is_none() {
                let fail = |e: String| crate::pass::failed("const-fold", format!("@{name}: {e}"));
                let Some(t) = module
                    .weights
                    .tensor(&name)
                    .map_err(|e| fail(e.to_string()))?
                else {
                    continue;
                };
                let op = Transpose { perm: perm.clone() };
                let out = op
                    .eval(&[&t], &EvalCtx::default())
                    .map_err(|e| fail(e.to_string()))?;
                module
                    .weights
                    .insert(new.clone(), out.into_iter().next().expect("one result"));
            }
            let g = &mut module.graphs[gi];
            let out = g.nodes[i].outputs[0];
            let ty = g.ty(out).clone();
            let w = g.weight(&new, ty);
            g.replace_all_uses(out, w);
            dropped.push(i);
            folded += 1;
        }
        let g = &mut module.graphs[gi];
        let mut k = 0;
        g.nodes.retain(|_| {
            k += 1;
            !dropped.contains(&(k - 1))
        });
        g.compact();
    }
    if folded > 0 {
        drop_unused_weights(module);
    }
    Ok(folded)
}

fn element_count(f: &Fact) -> Option<usize> {
    Some(f.ty.shape.as_fixed()?.iter().product())
}

impl Pass for ConstFold {
    fn name(&self) -> &'static str {
        "const-fold"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let limit = self.max_elements;
        let mut folded = 0u64;
        for gi in 0..module.graphs.len() {
            let g = &module.graphs[gi];
            let facts = propagate("const-fold", g, module, &mut |n, inputs, inferred| {
                evaluate(&g.nodes[n].op, inputs, inferred, limit)
            })?;
            let g = &mut module.graphs[gi];
            let mut new_nodes = Vec::with_capacity(g.nodes.len());
            for node in std::mem::take(&mut g.nodes) {
                let known: Option<Vec<(slmcc_ir::ValueId, Fact)>> = node
                    .outputs
                    .iter()
                    .map(|v| {
                        let f = facts[v.index()].clone()?;
                        (f.value.is_some() && element_count(&f)? <= limit).then_some((*v, f))
                    })
                    .collect();
                match known {
                    Some(values) if !matches!(node.op, Op::Constant(_)) => {
                        folded += 1;
                        for (v, f) in values {
                            let value = f.value.expect("checked above");
                            new_nodes.push(slmcc_ir::Node {
                                op: Op::Constant(Constant::from_known(f.ty, value)),
                                inputs: Vec::new(),
                                outputs: vec![v],
                            });
                        }
                    }
                    _ => new_nodes.push(node),
                }
            }
            g.nodes = new_nodes;
        }
        stats.add("nodes-folded", folded);
        let transposed = fold_weight_transposes(module)?;
        stats.add("weights-transposed", transposed);
        Ok(folded + transposed > 0)
    }
}
