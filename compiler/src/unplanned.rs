//! Running a model's symbolic graph on a backend with static kernels,
//! without compiling a package: what `slmcc run`, `onnx-test` and `golden
//! check` do with `--backend cpu`, `npu-sim` and `npu`.
//!
//! The symbols of the graph (`seq`) are bound from the input shapes
//! ([`slmcc_runtime::bind`]), the graph is specialised to those numbers
//! ([`slmcc_passes::specialize`]: every shape becomes static), the backend's
//! kernels are built for the specialised graph, and the runtime runs them
//! once on its executor over an unshared plan
//! ([`slmcc_runtime::jit::run_static`]), so every value can be captured.

use std::collections::HashMap;

use slmcc_backends::cpu::{CpuError, CpuOptions};
use slmcc_ir::{Graph, Module, Tensor};
use slmcc_runtime::bind::bind_shape;
use slmcc_runtime::jit::{run_static, JitKernels};
use slmcc_runtime::npu::{NpuBackend, NpuKernels, NpuLowered};
use slmcc_runtime::{Capture, RunError, RunResult};

/// `graph` of `module` specialised to the shapes of `inputs`, with the
/// symbols bound. (Inputs the graph does not have are left to
/// [`run_static`] to reject.)
pub fn specialize_to_inputs(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
) -> Result<(Module, HashMap<String, i64>), RunError> {
    let err = |message: String| RunError {
        graph: graph.name.clone(),
        node: None,
        message,
    };
    let mut symbols = HashMap::new();
    for &id in &graph.inputs {
        let v = graph.value(id);
        let Some((_, t)) = inputs.iter().find(|(n, _)| *n == v.name) else {
            return Err(err(format!("missing input `{}` ({})", v.name, v.ty)));
        };
        if t.dtype() != v.ty.dtype {
            return Err(err(format!(
                "input `{}` is {}{:?}, the graph expects {}",
                v.name,
                t.dtype(),
                t.shape(),
                v.ty
            )));
        }
        bind_shape(&v.name, &v.ty, t.shape(), &mut symbols).map_err(err)?;
    }
    let special = slmcc_passes::specialize(module, &graph.name, &symbols)
        .map_err(|e| err(format!("binding symbols: {e}")))?;
    Ok((special, symbols))
}

/// The JIT's kernels for `g` (a specialised graph of base graph `base`),
/// a failure naming the node.
fn jit_kernels(base: &str, g: &Graph, options: &CpuOptions) -> Result<JitKernels, RunError> {
    JitKernels::compile(g, options).map_err(|e| match e {
        CpuError::AtNode { node, source, .. } => RunError {
            graph: base.to_string(),
            node: Some(node),
            message: format!("cpu backend: {source}"),
        },
        e => RunError {
            graph: base.to_string(),
            node: None,
            message: format!("cpu backend: {e}"),
        },
    })
}

/// Binds, specialises, compiles and runs `graph` of `module` on the JIT.
pub fn run_graph_jit(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
    options: &CpuOptions,
) -> Result<RunResult, RunError> {
    JitRunner::new(module, graph, inputs, options)?.run(inputs, capture)
}

/// `graph` of `module` specialised to one set of input shapes and
/// compiled once on the JIT, then run as often as wanted on inputs of
/// those shapes ([`run_graph_jit`] without compiling every time: what
/// calibration and `eval ppl` do over many windows of one length).
pub struct JitRunner {
    special: Module,
    kernels: JitKernels,
    symbols: HashMap<String, i64>,
}

impl JitRunner {
    /// Specialises `graph` to the shapes of `inputs` and compiles it.
    pub fn new(
        module: &Module,
        graph: &Graph,
        inputs: &[(String, Tensor)],
        options: &CpuOptions,
    ) -> Result<JitRunner, RunError> {
        let (special, symbols) = specialize_to_inputs(module, graph, inputs)?;
        let kernels = jit_kernels(&graph.name, &special.graphs[0], options)?;
        Ok(JitRunner {
            special,
            kernels,
            symbols,
        })
    }

    /// One run on `inputs`, which must have the shapes it was built for.
    pub fn run(
        &self,
        inputs: &[(String, Tensor)],
        capture: &Capture,
    ) -> Result<RunResult, RunError> {
        let g = &self.special.graphs[0];
        let mut result = run_static(&self.special, g, inputs, capture, &self.kernels)?;
        result.symbols = self.symbols.clone();
        Ok(result)
    }
}

/// Binds, specialises and runs `graph` of `module` with the NPU products
/// lowered to their register programs (their weights stored in the NPU's
/// layout first) and run on `backend`, and the rest on the JIT (what
/// `run MODEL --backend npu-sim` and `golden check --backend npu-sim` of
/// a model use).
pub fn run_graph_npu(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
    options: &CpuOptions,
    backend: NpuBackend,
) -> Result<RunResult, RunError> {
    let fail = |message: String| RunError {
        graph: graph.name.clone(),
        node: None,
        message,
    };
    let (mut special, symbols) = specialize_to_inputs(module, graph, inputs)?;
    let lowered = NpuLowered::lower(&mut special).map_err(fail)?;
    let g = &special.graphs[0];
    let cpu = jit_kernels(&graph.name, g, options)?;
    let kernels = NpuKernels::new(&special, g, &lowered, Box::new(cpu), backend).map_err(fail)?;
    let mut result = run_static(&special, g, inputs, capture, &kernels)?;
    result.symbols = symbols;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;
    use slmcc_runtime::run_graph;

    #[test]
    fn binds_seq_and_matches_the_interpreter() {
        let src = r#"
module @m {
  graph @main(%x: f32[1, seq, 8], %w: f32[8, 4]) -> (f32[1, seq, 4], i64[3]) {
    %a = matmul %x, %w : f32[1, seq, 4]
    %b = softmax %a {axis = -1} : f32[1, seq, 4]
    %s = shape %b : i64[3]
    return %b, %s
  }
}
"#;
        let m = parse_module(src).unwrap();
        for seq in [1usize, 3, 6] {
            let n = seq * 8;
            let x = Tensor::from_f32(vec![1, seq, 8], (0..n).map(|i| i as f32 * 0.1).collect());
            let w = Tensor::from_f32(vec![8, 4], (0..32).map(|i| (i % 7) as f32 - 3.0).collect());
            let inputs = vec![("x".to_string(), x), ("w".to_string(), w)];
            let opts = CpuOptions::exact();
            let capture = Capture::Names(["a".to_string()].into());
            let got = run_graph_jit(&m, &m.graphs[0], &inputs, &capture, &opts).unwrap();
            let want = run_graph(&m, &m.graphs[0], &inputs, &capture).unwrap();
            assert_eq!(got.symbols["seq"], seq as i64);
            assert_eq!(got.outputs.len(), want.outputs.len());
            for ((gn, gt), (wn, wt)) in got.outputs.iter().zip(&want.outputs) {
                assert_eq!(gn, wn);
                assert_eq!(gt, wt, "{gn} at seq {seq}");
            }
            assert_eq!(got.captured["a"], want.captured["a"]);
        }
    }

    #[test]
    fn reports_bad_inputs() {
        let m = parse_module(
            "module @m {\n  graph @main(%x: f32[seq]) -> (f32[seq]) {\n    %y = exp %x : f32[seq]\n    return %y\n  }\n}\n",
        )
        .unwrap();
        let g = &m.graphs[0];
        let opts = CpuOptions::default();
        let run = |inputs: &[(String, Tensor)]| {
            run_graph_jit(&m, g, inputs, &Capture::Nothing, &opts).unwrap_err()
        };
        let e = run(&[("x".to_string(), Tensor::from_i64(vec![2], vec![1, 2]))]);
        assert!(e.to_string().contains("input `x` is i64"), "{e}");
        let e = run(&[]);
        assert!(e.to_string().contains("missing input `x`"), "{e}");
        let x = Tensor::from_f32(vec![2], vec![1.0, 2.0]);
        let e = run(&[("x".to_string(), x.clone()), ("z".to_string(), x)]);
        assert!(e.to_string().contains("`z` is not an input"), "{e}");
    }
}
