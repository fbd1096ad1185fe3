//! The Cranelift CPU backend's kernels behind the executor's
//! [`KernelSet`] interface ([`JitKernels`]), and running a graph with
//! static shapes once ([`run_static`]).
//!
//! [`run_static`] loads a graph with any kernel set (the JIT's, the NPU
//! products') on the one executor ([`crate::exec::Executor`]) over a plan
//! in which no two values share bytes ([`MemoryPlan::unshared`]), so every
//! value can be captured after the run; the result has the reference
//! interpreter's form ([`RunResult`]), so `slmcc run`, `onnx-test` and
//! `golden check` treat every backend alike. A symbolic graph is first
//! bound to its input shapes and specialised by the driver
//! (`slmcc::unplanned`); a package's bucket graphs run the same kernels
//! inside their planned arena.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use slmcc_backends::cpu::{CpuError, CpuOptions};
use slmcc_ir::{Graph, MemoryPlan, Module, Tensor};

use slmcc_backends::cpu::{JitProgram, KernelFn};

use crate::exec::{ExecError, Executor, Kernel, KernelSet};
use crate::interp::{Capture, RunError, RunResult};
use crate::native::native_kernel;

/// Runs `graph` of `module` (every shape static) once with `kernels` on
/// the executor over [`MemoryPlan::unshared`]; the inputs must have the
/// graph's dtypes and shapes. Captures as `capture` asks (any value but
/// the weights); `symbols` of the result is empty.
pub fn run_static(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
    kernels: &dyn KernelSet,
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
    let plan = MemoryPlan::unshared(graph).map_err(|e| err(format!("memory plan: {e}")))?;
    let from_exec = |e: ExecError| RunError {
        graph: graph.name.clone(),
        node: e.node,
        message: e.message,
    };
    let mut exec =
        Executor::load_planned(module, &graph.name, &plan, kernels, None).map_err(from_exec)?;
    for i in 0..exec.inputs().len() {
        let slot = &exec.inputs()[i];
        let Some((_, t)) = inputs.iter().find(|(n, _)| *n == slot.name) else {
            return Err(err(format!(
                "missing input `{}` ({}{:?})",
                slot.name, slot.dtype, slot.shape
            )));
        };
        if t.dtype() != slot.dtype || t.shape() != slot.shape.as_slice() {
            return Err(err(format!(
                "input `{}` is {}{:?}, the graph expects {}{:?}",
                slot.name,
                t.dtype(),
                t.shape(),
                slot.dtype,
                slot.shape
            )));
        }
        exec.input_mut(i).copy_from_slice(&t.to_le_bytes());
    }
    exec.run().map_err(from_exec)?;
    let tensor = |name: &str| -> Option<Tensor> {
        let (slot, bytes) = exec.read(name)?;
        Tensor::from_le_bytes(slot.dtype, slot.shape.clone(), bytes).ok()
    };
    let outputs = exec
        .outputs()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = Tensor::from_le_bytes(s.dtype, s.shape.clone(), exec.output(i))
                .map_err(|e| err(format!("output `{}`: {e}", s.name)))?;
            Ok((s.name.clone(), Arc::new(t)))
        })
        .collect::<Result<Vec<_>, RunError>>()?;
    let wanted: Vec<&str> = match capture {
        Capture::Nothing => Vec::new(),
        Capture::All => graph.values().map(|(_, v)| v.name.as_str()).collect(),
        Capture::Names(names) => names.iter().map(String::as_str).collect(),
    };
    let captured = wanted
        .into_iter()
        .filter_map(|n| Some((n.to_string(), Arc::new(tensor(n)?))))
        .collect();
    Ok(RunResult {
        outputs,
        captured,
        symbols: HashMap::new(),
    })
}

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
        // SAFETY: the JIT compiled `f` for this node's static shapes, and
        // the program it lives in is kept alive by the kernel.
        Ok(unsafe { native_kernel(f, self.program.clone()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::run_graph;
    use slmcc_ir::text::parse_module;

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
}
