//! `const-fold`: replace values known at compile time by constants.

use std::sync::Arc;

use slmcc_ir::ops::constant::Constant;
use slmcc_ir::{EvalCtx, Fact, Known, Module, Op, OpDef};

use crate::facts::propagate;
use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{Pass, PassError, Statistics};

/// Options of `const-fold`.
pub const OPTIONS: &[OptionSpec] = &[OptionSpec {
    name: "max-elements",
    kind: OptionKind::Int,
    default: "65536",
    help: "largest result (in elements) to materialise as a constant",
}];

/// Evaluates, at compile time, every node whose operands are all known, and
/// turns every node result whose value is known into a `constant`: concrete
/// values (from the reference evaluation of the op) and symbolic ones (shape
/// bookkeeping such as `shape %x` → `constant {value = [1, seq, 128]}`).
/// Weights are not read; results larger than `max-elements` stay computed.
///
/// Requires: a graph that verifies. Guarantees: the graph computes the same
/// values; folded nodes become `constant` nodes in place, keeping their
/// result names, and the nodes that fed them are left for `dce`. Statistic
/// `nodes-folded`.
pub struct ConstFold {
    max_elements: usize,
}

impl ConstFold {
    pub fn from_options(o: &PassOptions) -> ConstFold {
        ConstFold {
            max_elements: o.int("max-elements").max(0) as usize,
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
        Ok(folded > 0)
    }
}
