//! A simple executor of a JIT-compiled graph: one buffer per value,
//! allocated once, kernels run in schedule order.
//!
//! Weights are copied into their buffers and `constant` kernels run once
//! when the executor is built; [`CpuExecutor::run`] then only copies the
//! inputs in and calls the other kernels, with pointer arrays prepared in
//! advance, so a step allocates nothing but the output tensors it returns.
//! (The same kernels run inside the memory planner's arena through
//! `slmcc_runtime::jit::JitKernels`; only the pointers differ.)

use std::collections::HashMap;

use slmcc_ir::{DType, Graph, Module, Tensor, ValueDef, ValueId};

use super::compile::static_shape;
use super::emit::{
    status_message, STATUS_CONTEXT_FULL, STATUS_DIVISION_BY_ZERO, STATUS_INDEX_OUT_OF_RANGE,
};
use super::jit::JitProgram;
use super::{CpuError, CpuOptions};

/// A 16-byte aligned byte buffer.
struct Buffer {
    words: Vec<u128>,
    bytes: usize,
}

impl Buffer {
    fn new(bytes: usize) -> Buffer {
        Buffer {
            words: vec![0; bytes.div_ceil(16).max(1)],
            bytes,
        }
    }

    fn ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr().cast()
    }

    fn as_bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `bytes` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.bytes) }
    }

    fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.bytes) }
    }
}

/// Code that runs one node in place of its compiled kernel, given the
/// kernel's buffer pointers (operands then results, as the kernel ABI).
pub type NodeOverride = Box<dyn FnMut(&[*mut u8]) -> Result<(), &'static str>>;

/// A graph compiled for the host, with its buffers.
pub struct CpuExecutor {
    program: JitProgram,
    graph_name: String,
    /// Per value: dtype, static shape, buffer (`None` for values nothing
    /// defines or reads).
    values: Vec<Option<(DType, Vec<usize>)>>,
    buffers: Vec<Buffer>,
    names: Vec<String>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    /// Per non-constant kernel: its index and its buffer pointers.
    steps: Vec<(usize, Vec<*mut u8>)>,
    labels: Vec<String>,
    /// Per node index: code that runs instead of its kernel.
    overrides: HashMap<usize, NodeOverride>,
}

impl std::fmt::Debug for CpuExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuExecutor")
            .field("graph", &self.graph_name)
            .field("kernels", &self.program.kernels.len())
            .finish()
    }
}

fn run_error(graph: &str, node: Option<&str>, message: String) -> CpuError {
    CpuError::Run(match node {
        Some(n) => format!("graph @{graph}, node {n}: {message}"),
        None => format!("graph @{graph}: {message}"),
    })
}

impl CpuExecutor {
    /// Compiles `graph` (static shapes) of `module` and prepares its buffers.
    pub fn new(module: &Module, graph: &Graph, options: &CpuOptions) -> Result<Self, CpuError> {
        let program = JitProgram::compile(graph, options)?;
        let mut values = vec![None; graph.value_count()];
        let mut buffers = Vec::with_capacity(graph.value_count());
        let mut names = Vec::with_capacity(graph.value_count());
        for (id, v) in graph.values() {
            let shape = static_shape(graph, id)?;
            let n: usize = shape.iter().product();
            // Sub-byte values are packed two per byte (`Tensor::to_le_bytes`);
            // the lowerings reject them except where they read them packed
            // (the `i4` weights of `qmatmul`).
            buffers.push(Buffer::new(v.ty.dtype.bytes_for(n)));
            values[id.index()] = Some((v.ty.dtype, shape));
            names.push(v.name.clone());
        }
        for (id, v) in graph.values() {
            if let ValueDef::Weight(name) = &v.def {
                let t = module
                    .weights
                    .tensor(name)
                    .map_err(|e| CpuError::Run(e.to_string()))?
                    .ok_or_else(|| {
                        run_error(
                            &graph.name,
                            None,
                            format!("weight @{name} has no data (weights file not loaded)"),
                        )
                    })?;
                buffers[id.index()]
                    .as_bytes_mut()
                    .copy_from_slice(&t.to_le_bytes());
            }
        }
        let labels = program
            .kernels
            .iter()
            .map(|k| {
                let node = &graph.nodes[k.spec.node];
                format!(
                    "{} (`{}`)",
                    slmcc_ir::verify::node_label(graph, k.spec.node),
                    slmcc_ir::OpDef::mnemonic(&node.op)
                )
            })
            .collect();
        let mut exec = CpuExecutor {
            program,
            graph_name: graph.name.clone(),
            values,
            buffers,
            names,
            inputs: graph.inputs.clone(),
            outputs: graph.outputs.clone(),
            steps: Vec::new(),
            labels,
            overrides: HashMap::new(),
        };
        let mut constants = Vec::new();
        for (k, kernel) in exec.program.kernels.iter().enumerate() {
            let ptrs: Vec<*mut u8> = kernel
                .spec
                .buffers
                .iter()
                .map(|v| exec.buffers[v.index()].ptr())
                .collect();
            if kernel.spec.is_constant {
                constants.push((k, ptrs));
            } else {
                exec.steps.push((k, ptrs));
            }
        }
        for (k, ptrs) in &constants {
            exec.call(*k, ptrs)?;
        }
        Ok(exec)
    }

    /// Runs `f` in place of node `node`'s kernel from now on (another
    /// backend's kernel for that node: the NPU simulator's). `f` gets the
    /// node's buffers, valid for the node's static types.
    pub fn override_node(&mut self, node: usize, f: NodeOverride) {
        self.overrides.insert(node, f);
    }

    fn call(&mut self, k: usize, ptrs: &[*mut u8]) -> Result<(), CpuError> {
        let kernel = &self.program.kernels[k];
        if let Some(f) = self.overrides.get_mut(&kernel.spec.node) {
            return f(ptrs)
                .map_err(|m| run_error(&self.graph_name, Some(&self.labels[k]), m.to_string()));
        }
        // SAFETY: the kernel was compiled for exactly these buffers: one
        // pointer per operand and result, each buffer sized for the value's
        // static type; the program (and so the code) lives in `self`.
        let status = unsafe { (kernel.func)(ptrs.as_ptr()) };
        match status as i64 {
            0 => Ok(()),
            STATUS_INDEX_OUT_OF_RANGE => Err(run_error(
                &self.graph_name,
                Some(&self.labels[k]),
                "index out of range".into(),
            )),
            STATUS_CONTEXT_FULL => Err(run_error(
                &self.graph_name,
                Some(&self.labels[k]),
                status_message(STATUS_CONTEXT_FULL).into(),
            )),
            STATUS_DIVISION_BY_ZERO => Err(run_error(
                &self.graph_name,
                Some(&self.labels[k]),
                status_message(STATUS_DIVISION_BY_ZERO).into(),
            )),
            s => Err(run_error(
                &self.graph_name,
                Some(&self.labels[k]),
                format!("kernel failed with status {s}"),
            )),
        }
    }

    /// Runs the graph on named inputs (dtypes and shapes must match the
    /// compiled ones exactly); returns the outputs in graph order.
    pub fn run(&mut self, inputs: &[(String, Tensor)]) -> Result<Vec<(String, Tensor)>, CpuError> {
        let by_name: HashMap<&str, &Tensor> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
        if let Some((n, _)) = inputs
            .iter()
            .find(|(n, _)| !self.inputs.iter().any(|&i| self.names[i.index()] == *n))
        {
            return Err(run_error(
                &self.graph_name,
                None,
                format!("`{n}` is not an input of the graph"),
            ));
        }
        for &id in &self.inputs.clone() {
            let name = &self.names[id.index()];
            let (dtype, shape) = self.values[id.index()].clone().expect("every value typed");
            let Some(t) = by_name.get(name.as_str()) else {
                return Err(run_error(
                    &self.graph_name,
                    None,
                    format!("missing input `{name}` ({dtype}{shape:?})"),
                ));
            };
            if t.dtype() != dtype || t.shape() != shape.as_slice() {
                return Err(run_error(
                    &self.graph_name,
                    None,
                    format!(
                        "input `{name}` is {}{:?}, the compiled graph expects {dtype}{shape:?}",
                        t.dtype(),
                        t.shape()
                    ),
                ));
            }
            self.buffers[id.index()]
                .as_bytes_mut()
                .copy_from_slice(&t.to_le_bytes());
        }
        for i in 0..self.steps.len() {
            let (k, ptrs) = std::mem::take(&mut self.steps[i]);
            let r = self.call(k, &ptrs);
            self.steps[i] = (k, ptrs);
            r?;
        }
        Ok(self
            .outputs
            .iter()
            .map(|&v| (self.names[v.index()].clone(), self.value(v)))
            .collect())
    }

    /// The current content of a value's buffer (after [`CpuExecutor::run`]:
    /// its value in that run).
    pub fn value(&self, v: ValueId) -> Tensor {
        let (dtype, shape) = self.values[v.index()].clone().expect("every value typed");
        Tensor::from_le_bytes(dtype, shape, self.buffers[v.index()].as_bytes())
            .expect("buffer sized for its type")
    }

    /// The value named `name`, if the graph has one.
    pub fn value_named(&self, name: &str) -> Option<Tensor> {
        let i = self.names.iter().position(|n| n == name)?;
        Some(self.value(ValueId(i as u32)))
    }
}
