//! Running a graph on the Cranelift CPU backend, JIT-compiled for the host.
//!
//! The symbols of the graph (`seq`) are bound from the input shapes, the
//! graph is specialised to those numbers (every shape becomes static,
//! [`slmcc_backends::cpu::specialize`]), compiled to one kernel per node and
//! run by the backend's executor. The result has the reference
//! interpreter's form ([`RunResult`]), so `slmcc run`, `onnx-test` and
//! `golden check` treat both backends alike.
//!
//! [`JitKernels`] hands the same kernels to the executor over a memory plan
//! ([`crate::exec::Executor`]), which runs them inside the planned arena.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use slmcc_backends::cpu::{specialize, CpuError, CpuExecutor, CpuOptions};
use slmcc_ir::{Graph, Module, Tensor};

use slmcc_backends::cpu::emit::{
    status_message, STATUS_CONTEXT_FULL, STATUS_DIVISION_BY_ZERO, STATUS_INDEX_OUT_OF_RANGE,
};
use slmcc_backends::cpu::{JitProgram, KernelFn};

use crate::bind::bind_shape;
use crate::exec::{Kernel, KernelArgs, KernelError, KernelSet};
use crate::interp::{Capture, RunError, RunResult};

/// Binds, specialises, compiles and runs `graph` of `module` on the JIT.
pub fn run_graph_jit(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
    options: &CpuOptions,
) -> Result<RunResult, RunError> {
    run_graph_jit_with(module, graph, inputs, capture, options, &|_, _, _| Ok(()))
}

/// Gives other kernels to some nodes of the specialised graph before it
/// runs ([`CpuExecutor::override_node`]).
pub type ExecutorHook<'a> = dyn Fn(&Module, &Graph, &mut CpuExecutor) -> Result<(), String> + 'a;

/// [`run_graph_jit`], with `hook` called on the executor of the
/// specialised module and graph before the run.
pub fn run_graph_jit_with(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
    options: &CpuOptions,
    hook: &ExecutorHook<'_>,
) -> Result<RunResult, RunError> {
    let err = |message: String| RunError {
        graph: graph.name.clone(),
        node: None,
        message,
    };
    if let Some((name, _)) = inputs
        .iter()
        .find(|(n, _)| !graph.inputs.iter().any(|&i| graph.value(i).name == *n))
    {
        return Err(err(format!("`{name}` is not an input of the graph")));
    }
    let mut symbols = HashMap::new();
    for &id in &graph.inputs {
        let v = graph.value(id);
        let Some((_, t)) = inputs.iter().find(|(n, _)| *n == v.name) else {
            return Err(err(format!("missing input `{}` ({})", v.name, v.ty)));
        };
        bind_shape(&v.name, &v.ty, t.shape(), &mut symbols).map_err(err)?;
    }
    let special = specialize(module, &graph.name, &symbols).map_err(|e| err(e.to_string()))?;
    let g = &special.graphs[0];
    let mut exec = CpuExecutor::new(&special, g, options).map_err(|e| match e {
        CpuError::AtNode { node, source, .. } => RunError {
            graph: graph.name.clone(),
            node: Some(node),
            message: format!("cpu backend: {source}"),
        },
        e => err(format!("cpu backend: {e}")),
    })?;
    hook(&special, g, &mut exec).map_err(err)?;
    let outputs = exec
        .run(inputs)
        .map_err(|e| err(e.to_string()))?
        .into_iter()
        .map(|(n, t)| (n, Arc::new(t)))
        .collect();
    let wanted: Vec<&str> = match capture {
        Capture::Nothing => Vec::new(),
        Capture::All => g.values().map(|(_, v)| v.name.as_str()).collect(),
        Capture::Names(names) => names.iter().map(String::as_str).collect(),
    };
    let captured = wanted
        .into_iter()
        .filter_map(|n| Some((n.to_string(), Arc::new(exec.value_named(n)?))))
        .collect();
    Ok(RunResult {
        outputs,
        captured,
        symbols,
    })
}

/// Most operands and results a kernel of [`JitKernels`] passes without
/// allocating (the pointer array lives on the stack).
const MAX_BUFFERS: usize = 32;

/// The cpu backend's kernels of one graph (static shapes), for the executor
/// over a memory plan. Each kernel keeps the JIT code alive.
pub struct JitKernels {
    program: Rc<JitProgram>,
    by_node: HashMap<usize, KernelFn>,
}

impl JitKernels {
    /// JIT-compiles every node of `graph`.
    pub fn compile(graph: &Graph, options: &CpuOptions) -> Result<JitKernels, CpuError> {
        let program = JitProgram::compile(graph, options)?;
        let by_node = program
            .kernels
            .iter()
            .map(|k| (k.spec.node, k.func))
            .collect();
        Ok(JitKernels {
            program: Rc::new(program),
            by_node,
        })
    }
}

impl KernelSet for JitKernels {
    fn kernel(&self, _graph: &Graph, node: usize) -> Result<Kernel, String> {
        let f = *self
            .by_node
            .get(&node)
            .ok_or_else(|| format!("node {node} was not compiled"))?;
        let program = self.program.clone();
        Ok(Box::new(move |args: &KernelArgs<'_>| {
            let _alive = &program;
            let n = args.inputs.len() + args.outputs.len();
            if n > MAX_BUFFERS {
                return Err(KernelError(
                    "more operands than the cpu kernel adapter passes",
                ));
            }
            let mut ptrs = [std::ptr::null_mut::<u8>(); MAX_BUFFERS];
            for (p, t) in ptrs.iter_mut().zip(args.inputs.iter().chain(args.outputs)) {
                *p = t.ptr;
            }
            // SAFETY: the kernel was compiled for this node's static shapes;
            // the executor passes one valid pointer per operand and result
            // (in-place results alias their operand exactly, which the
            // element-wise and copy kernels allow: each element is read
            // before it is written); `program` keeps the code alive.
            match unsafe { f(ptrs.as_ptr()) } as i64 {
                0 => Ok(()),
                STATUS_INDEX_OUT_OF_RANGE => Err(KernelError("index out of range")),
                STATUS_CONTEXT_FULL => Err(KernelError(status_message(STATUS_CONTEXT_FULL))),
                STATUS_DIVISION_BY_ZERO => {
                    Err(KernelError(status_message(STATUS_DIVISION_BY_ZERO)))
                }
                _ => Err(KernelError("cpu kernel failed")),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::run_graph;
    use slmcc_ir::text::parse_module;

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
            for ((gn, gt), (wn, wt)) in got.outputs.iter().zip(&want.outputs) {
                assert_eq!(gn, wn);
                assert_eq!(gt, wt, "{gn} at seq {seq}");
            }
            assert_eq!(got.captured["a"], want.captured["a"]);
        }
    }

    #[test]
    fn runs_inside_the_planned_arena() {
        use crate::exec::Executor;
        use slmcc_passes::{PassManager, RunOptions};
        let src = r#"
module @m {
  graph @main(%x: f32[3, 8], %w: f32[8, 5]) -> (f32[3, 5]) {
    %a = matmul %x, %w : f32[3, 5]
    %b = exp %a : f32[3, 5]
    %c = mul %b, %b : f32[3, 5]
    %t = transpose %c {perm = [1, 0]} : f32[5, 3]
    %s = softmax %t {axis = 0} : f32[5, 3]
    %r = transpose %s {perm = [1, 0]} : f32[3, 5]
    return %r
  }
}
"#;
        let mut m = parse_module(src).unwrap();
        PassManager::parse("plan-memory", RunOptions::default())
            .unwrap()
            .run(&mut m, &mut std::io::sink())
            .unwrap();
        let g = m.graph("main").unwrap();
        let kernels = JitKernels::compile(g, &CpuOptions::exact()).unwrap();
        let mut exec = Executor::load(&m, "main", &kernels).unwrap();
        drop(kernels); // the kernels keep the code alive
        let x = Tensor::from_f32(vec![3, 8], (0..24).map(|i| (i % 5) as f32 * 0.1).collect());
        let w = Tensor::from_f32(vec![8, 5], (0..40).map(|i| (i % 3) as f32 * 0.2).collect());
        let inputs = vec![("x".to_string(), x), ("w".to_string(), w)];
        let want = run_graph(&m, g, &inputs, &Capture::Nothing).unwrap();
        for _ in 0..2 {
            for (i, (name, t)) in inputs.iter().enumerate() {
                assert_eq!(&exec.inputs()[i].name, name);
                exec.input_mut(i).copy_from_slice(&t.to_le_bytes());
            }
            exec.run().unwrap();
            let got =
                Tensor::from_le_bytes(slmcc_ir::DType::F32, vec![3, 5], exec.output(0)).unwrap();
            assert_eq!(&got, &*want.outputs[0].1);
        }
    }

    #[test]
    fn reports_bad_inputs() {
        let m = parse_module(
            "module @m {\n  graph @main(%x: f32[seq]) -> (f32[seq]) {\n    %y = exp %x : f32[seq]\n    return %y\n  }\n}\n",
        )
        .unwrap();
        let bad = vec![("x".to_string(), Tensor::from_i64(vec![2], vec![1, 2]))];
        let e = run_graph_jit(
            &m,
            &m.graphs[0],
            &bad,
            &Capture::Nothing,
            &CpuOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("input `x`"), "{e}");
        let e = run_graph_jit(
            &m,
            &m.graphs[0],
            &[],
            &Capture::Nothing,
            &CpuOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("missing input `x`"), "{e}");
    }
}
