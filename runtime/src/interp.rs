//! The reference interpreter.
//!
//! Runs a graph node by node in schedule order with each op's reference
//! evaluation (`OpDef::eval`), in the declared dtypes. Symbols are bound from
//! the input shapes; every result is checked against its declared type under
//! those bindings, so a disagreement between an op's inference and its
//! evaluation is caught where it happens. Values are dropped after their last
//! use unless captured.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use slmcc_ir::verify::node_label;
use slmcc_ir::{EvalCtx, Graph, Module, OpDef, Tensor, ValueDef};

use crate::bind::{bind_shape, check_shape};

/// Which intermediate values to keep, by name.
#[derive(Clone, Debug, Default)]
pub enum Capture {
    #[default]
    Nothing,
    All,
    Names(HashSet<String>),
}

impl Capture {
    fn wants(&self, name: &str) -> bool {
        match self {
            Capture::Nothing => false,
            Capture::All => true,
            Capture::Names(n) => n.contains(name),
        }
    }
}

/// The outputs of a run (in graph order), captured values, and the symbol bindings.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub outputs: Vec<(String, Arc<Tensor>)>,
    pub captured: HashMap<String, Arc<Tensor>>,
    pub symbols: HashMap<String, i64>,
}

impl RunResult {
    /// The value named `name`: a captured one, else a graph output.
    pub fn value(&self, name: &str) -> Option<&Arc<Tensor>> {
        self.captured
            .get(name)
            .or_else(|| self.outputs.iter().find(|(n, _)| n == name).map(|(_, t)| t))
    }
}

/// A failure to run, naming the graph and, when a node is at fault, the node and op.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("graph @{graph}{}: {message}", node.as_ref().map(|n| format!(", node {n}")).unwrap_or_default())]
pub struct RunError {
    pub graph: String,
    pub node: Option<String>,
    pub message: String,
}

/// Runs `graph` of `module` on named inputs.
pub fn run_graph(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
) -> Result<RunResult, RunError> {
    let err = |node: Option<usize>, message: String| RunError {
        graph: graph.name.clone(),
        node: node.map(|n| {
            format!(
                "{} (`{}`)",
                node_label(graph, n),
                graph.nodes[n].op.mnemonic()
            )
        }),
        message,
    };
    let mut env: Vec<Option<Arc<Tensor>>> = vec![None; graph.value_count()];
    let mut symbols = HashMap::new();

    if let Some((name, _)) = inputs
        .iter()
        .find(|(n, _)| !graph.inputs.iter().any(|&i| graph.value(i).name == *n))
    {
        return Err(err(None, format!("`{name}` is not an input of the graph")));
    }
    for &id in &graph.inputs {
        let v = graph.value(id);
        let Some((_, t)) = inputs.iter().find(|(n, _)| *n == v.name) else {
            return Err(err(None, format!("missing input `{}` ({})", v.name, v.ty)));
        };
        if t.dtype() != v.ty.dtype {
            return Err(err(
                None,
                format!(
                    "input `{}` is {}, the graph expects {}",
                    v.name,
                    t.dtype(),
                    v.ty
                ),
            ));
        }
        bind_shape(&v.name, &v.ty, t.shape(), &mut symbols).map_err(|m| err(None, m))?;
        env[id.index()] = Some(Arc::new(t.clone()));
    }
    for &id in &graph.inputs {
        let v = graph.value(id);
        let t = env[id.index()].as_ref().expect("bound above");
        check_shape(&v.ty, t.shape(), &symbols)
            .map_err(|m| err(None, format!("input `{}`: {m}", v.name)))?;
    }
    for (id, v) in graph.values() {
        if let ValueDef::Weight(name) = &v.def {
            let t = module
                .weights
                .tensor(name)
                .map_err(|e| err(None, e.to_string()))?
                .ok_or_else(|| {
                    err(
                        None,
                        format!("weight @{name} has no data (weights file not loaded)"),
                    )
                })?;
            env[id.index()] = Some(t);
        }
    }

    let last_use = last_uses(graph);
    let budget = crate::budget::budget();
    let ctx = EvalCtx {
        symbols: symbols.clone(),
    };
    let mut captured = HashMap::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        let args = node
            .inputs
            .iter()
            .map(|v| {
                env[v.index()].clone().ok_or_else(|| {
                    err(
                        Some(n),
                        format!("operand %{} has no value", graph.value(*v).name),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Results whose shapes are known now are checked against the
        // memory budget before the op allocates them.
        for &v in &node.outputs {
            let val = graph.value(v);
            let Some(dims) = val.ty.shape.eval(&symbols) else {
                continue;
            };
            let bytes = slmcc_ir::plan::tensor_bytes(val.ty.dtype, &dims).unwrap_or(u64::MAX);
            let what = format!("%{} ({})", val.name, val.ty);
            crate::budget::check(&what, bytes, budget).map_err(|m| err(Some(n), m))?;
        }
        let refs: Vec<&Tensor> = args.iter().map(|a| &**a).collect();
        let results = node
            .op
            .eval(&refs, &ctx)
            .map_err(|e| err(Some(n), e.to_string()))?;
        if results.len() != node.outputs.len() {
            return Err(err(
                Some(n),
                format!(
                    "evaluation gave {} results for {} declared",
                    results.len(),
                    node.outputs.len()
                ),
            ));
        }
        for (&v, t) in node.outputs.iter().zip(results) {
            let val = graph.value(v);
            if t.dtype() != val.ty.dtype {
                return Err(err(
                    Some(n),
                    format!("%{} is {}, declared {}", val.name, t.dtype(), val.ty),
                ));
            }
            check_shape(&val.ty, t.shape(), &symbols)
                .map_err(|m| err(Some(n), format!("%{}: {m}", val.name)))?;
            let t = Arc::new(t);
            if capture.wants(&val.name) {
                captured.insert(val.name.clone(), t.clone());
            }
            env[v.index()] = Some(t);
        }
        for &v in &node.inputs {
            if last_use[v.index()] == Some(n) {
                env[v.index()] = None;
            }
        }
    }
    let outputs = graph
        .outputs
        .iter()
        .map(|&v| {
            let t = env[v.index()].clone().ok_or_else(|| {
                err(
                    None,
                    format!("output %{} has no value", graph.value(v).name),
                )
            })?;
            Ok((graph.value(v).name.clone(), t))
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    Ok(RunResult {
        outputs,
        captured,
        symbols,
    })
}

/// For each value, the last node that reads it; graph outputs are never dropped.
fn last_uses(graph: &Graph) -> Vec<Option<usize>> {
    let mut last = vec![None; graph.value_count()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for v in &node.inputs {
            last[v.index()] = Some(n);
        }
    }
    for v in &graph.outputs {
        last[v.index()] = None;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;

    const SRC: &str = r#"
module @m {
  graph @main(%x: f32[1, seq], %y: f32[seq]) -> (f32[1, seq], i64[2]) {
    %a = add %x, %y : f32[1, seq]
    %b = exp %a : f32[1, seq]
    %s = shape %b : i64[2]
    return %b, %s
  }
}
"#;

    #[test]
    fn runs_with_symbols_bound_from_inputs() {
        let m = parse_module(SRC).unwrap();
        let inputs = vec![
            (
                "x".to_string(),
                Tensor::from_f32(vec![1, 3], vec![0.0, 1.0, 2.0]),
            ),
            (
                "y".to_string(),
                Tensor::from_f32(vec![3], vec![0.0, 0.0, -2.0]),
            ),
        ];
        let r = run_graph(
            &m,
            &m.graphs[0],
            &inputs,
            &Capture::Names(["a".to_string()].into()),
        )
        .unwrap();
        assert_eq!(r.symbols["seq"], 3);
        assert_eq!(r.outputs[0].1.as_f32().unwrap(), &[1.0, 1.0f32.exp(), 1.0]);
        assert_eq!(r.outputs[1].1.as_i64().unwrap(), &[1, 3]);
        assert_eq!(r.captured["a"].as_f32().unwrap(), &[0.0, 1.0, 0.0]);
    }

    #[test]
    fn rejects_inconsistent_inputs() {
        let m = parse_module(SRC).unwrap();
        let inputs = vec![
            ("x".to_string(), Tensor::from_f32(vec![1, 3], vec![0.0; 3])),
            ("y".to_string(), Tensor::from_f32(vec![4], vec![0.0; 4])),
        ];
        let e = run_graph(&m, &m.graphs[0], &inputs, &Capture::Nothing).unwrap_err();
        assert!(e.to_string().contains("another input gave seq = 3"), "{e}");
        let e = run_graph(&m, &m.graphs[0], &inputs[..1], &Capture::Nothing).unwrap_err();
        assert_eq!(e.to_string(), "graph @main: missing input `y` (f32[seq])");
    }
}
