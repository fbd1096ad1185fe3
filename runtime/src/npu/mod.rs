//! The NPU part of a graph: the kernels of the nodes the `partition` pass
//! places on the NPU (`qmatmul`, `qswiglu`), built from the nodes' static
//! shapes and weights, and run on the simulator behind the executor's
//! [`KernelSet`] interface, with every other node on the Cranelift CPU
//! kernels (`--backend npu-sim`).
//!
//! [`plan_node`] gives a node's tile plan, DDR image layout and program
//! without touching weights (what the compiler stores, `slmcc report`
//! times and disassembles); [`NpuSimKernels`] also packs the weights into
//! one DDR image per kernel at load. A call then quantizes the activation
//! rows on the CPU ([`quantize_rows`], the op's steps 1–4), writes them and
//! their row records into the image, runs the program on the simulator and
//! reads the f32 result: bit for bit the reference `qmatmul` / `qswiglu`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use slmcc_backends::cpu::{CpuError, CpuExecutor, CpuOptions};
use slmcc_backends::npu::isa::WeightType;
use slmcc_backends::npu::kernels::qmatmul::{
    emit_qmatmul, pack_qmatmul, quantize_rows, QMatmulLayout, RowParams,
};
use slmcc_backends::npu::kernels::qswiglu::{emit_qswiglu, pack_qswiglu};
use slmcc_backends::npu::tiler::{
    plan_qmatmul, plan_qswiglu, QMatmulProblem, QTilePlan, TileError,
};
use slmcc_backends::npu::{Program, Target};
use slmcc_ir::verify::node_label;
use slmcc_ir::{Graph, Module, Op, OpDef, Tensor, ValueDef};
use slmcc_passes::transforms::partition::{place, Device};

use crate::exec::{Kernel, KernelArgs, KernelError, KernelSet};
use crate::interp::{Capture, RunError, RunResult};
use crate::jit::{run_graph_jit_with, JitKernels};
use crate::npu_sim::{NpuSim, SimStats};

/// One NPU node's kernel, without its data.
#[derive(Clone, Debug)]
pub struct NpuNode {
    /// The node's index in its graph.
    pub node: usize,
    pub plan: QTilePlan,
    /// The kernel's DDR image, from address 0.
    pub layout: QMatmulLayout,
    pub program: Program,
}

type PlanFn = fn(&QMatmulProblem, &Target) -> Result<QTilePlan, TileError>;
type EmitFn = fn(
    &QTilePlan,
    &Target,
    &QMatmulLayout,
) -> Result<Program, slmcc_backends::npu::kernels::KernelError>;

/// The kernel of `qmatmul` or `qswiglu` node `node` of `g` (static
/// shapes: a bucket graph) for `target`. A `qswiglu` by one fused
/// `[K, 2·N]` gate_up weight gets the two-weight kernel of `N` columns (its
/// weight is split when packed).
pub fn plan_node(g: &Graph, node: usize, target: &Target) -> Result<NpuNode, String> {
    let n = &g.nodes[node];
    let (bits, group, swiglu) = match n.op {
        Op::QMatMul(op) => (op.bits, op.group, false),
        Op::QSwiGlu(op) => (op.bits, op.group, true),
        _ => {
            return Err(format!(
                "node {}: no NPU kernel for `{}`",
                node_label(g, node),
                n.op.mnemonic()
            ))
        }
    };
    let at = |e: &dyn std::fmt::Display| format!("node {}: {e}", node_label(g, node));
    let x = g
        .ty(n.inputs[0])
        .shape
        .as_fixed()
        .ok_or_else(|| at(&"activations of symbolic shape"))?;
    let w = g
        .ty(n.inputs[1])
        .shape
        .as_fixed()
        .ok_or_else(|| at(&"weight of symbolic shape"))?;
    let (&k, rows) = x.split_last().ok_or_else(|| at(&"rank-0 activations"))?;
    let m: usize = rows.iter().product();
    let narrow =
        |v: usize, what: &str| u32::try_from(v).map_err(|_| at(&format!("{what} too large")));
    let cols = match (swiglu, n.inputs.len()) {
        (true, 3) => w[1] / 2,
        _ => w[1],
    };
    let problem = QMatmulProblem {
        m: narrow(m, "rows")?,
        k: narrow(k, "K")?,
        n: narrow(cols, "N")?,
        wtype: if bits == 4 {
            WeightType::I4
        } else {
            WeightType::I8
        },
        group: narrow(group as usize, "group")?,
    };
    let (plan_kernel, emit_kernel) = if swiglu {
        (plan_qswiglu as PlanFn, emit_qswiglu as EmitFn)
    } else {
        (plan_qmatmul as PlanFn, emit_qmatmul as EmitFn)
    };
    let plan = plan_kernel(&problem, target).map_err(|e| at(&e))?;
    let layout = QMatmulLayout::new(&plan, 0).map_err(|e| at(&e))?;
    let program = emit_kernel(&plan, target, &layout).map_err(|e| at(&e))?;
    Ok(NpuNode {
        node,
        plan,
        layout,
        program,
    })
}

/// The kernels of every node of `g` that [`place`] puts on the NPU.
pub fn plan_graph(g: &Graph, target: &Target) -> Result<Vec<NpuNode>, String> {
    place(g)
        .iter()
        .enumerate()
        .filter(|(_, p)| p.device == Device::Npu)
        .map(|(i, _)| plan_node(g, i, target))
        .collect()
}

/// What the simulator counted for one NPU node over the calls so far.
#[derive(Clone, Debug, Default)]
pub struct NodeRecord {
    pub calls: u64,
    /// The last call's counts.
    pub last: SimStats,
}

/// Counts per NPU node of a loaded graph, shared with its kernels.
pub type NpuRecords = Rc<RefCell<HashMap<usize, NodeRecord>>>;

/// One NPU node loaded: its DDR image (constants packed at load) and the
/// buffers a call fills, reused by every call.
struct LoadedNode {
    node: NpuNode,
    k: usize,
    xq: Vec<i8>,
    rows: Vec<RowParams>,
    sim: NpuSim,
}

/// A graph's kernels for the executor: the NPU nodes on the simulator, the
/// rest on the JIT.
pub struct NpuSimKernels {
    jit: JitKernels,
    npu: HashMap<usize, Rc<RefCell<LoadedNode>>>,
    records: NpuRecords,
}

impl NpuSimKernels {
    /// Compiles the CPU nodes of `graph` (a bucket graph of `module`) and
    /// loads its NPU nodes with their weights. With `stored` (a package's
    /// programs, [`crate::package::Package::npu_programs`]) every NPU node
    /// runs the program stored for it, which must exist; otherwise the
    /// programs are emitted now.
    pub fn new(
        module: &Module,
        graph: &Graph,
        target: &Target,
        options: &CpuOptions,
        stored: Option<&HashMap<usize, Program>>,
    ) -> Result<NpuSimKernels, String> {
        let nodes = plan_graph(graph, target)?;
        let jit = JitKernels::compile(graph, options).map_err(|e: CpuError| e.to_string())?;
        let mut npu = HashMap::new();
        for mut node in nodes {
            let i = node.node;
            if let Some(stored) = stored {
                node.program = stored.get(&i).cloned().ok_or_else(|| {
                    format!(
                        "node {}: the package has no NPU program for it",
                        node_label(graph, i)
                    )
                })?;
            }
            let loaded = load_node(module, graph, node, target)
                .map_err(|e| format!("node {}: {e}", node_label(graph, i)))?;
            npu.insert(i, Rc::new(RefCell::new(loaded)));
        }
        Ok(NpuSimKernels {
            jit,
            npu,
            records: NpuRecords::default(),
        })
    }

    /// The simulator's counts per NPU node, updated by every call.
    pub fn records(&self) -> NpuRecords {
        self.records.clone()
    }
}

/// A weight operand's data, by its value.
fn weight_data(
    module: &Module,
    g: &Graph,
    v: slmcc_ir::ValueId,
) -> Result<std::sync::Arc<slmcc_ir::Tensor>, String> {
    let ValueDef::Weight(name) = &g.value(v).def else {
        return Err(
            "a weight operand computed at run time (the NPU kernel packs weights at load)".into(),
        );
    };
    module
        .weights
        .tensor(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("weight @{name} has no data"))
}

fn load_node(
    module: &Module,
    g: &Graph,
    node: NpuNode,
    target: &Target,
) -> Result<LoadedNode, String> {
    let n = &g.nodes[node.node];
    let mut weights = Vec::new();
    for pair in n.inputs[1..].chunks(2) {
        let q = weight_data(module, g, pair[0])?;
        let scale = weight_data(module, g, pair[1])?;
        let q: Vec<i8> = q.to_i64_vec().into_iter().map(|v| v as i8).collect();
        let scale = scale.as_f32().ok_or("scales are not f32")?.to_vec();
        weights.push((q, scale));
    }
    let consts = match (n.op.mnemonic(), &weights[..]) {
        ("qswiglu", [(gq, gs), (uq, us)]) => pack_qswiglu(&node.plan, gq, gs, uq, us),
        ("qswiglu", [(q, s)]) => {
            // The fused gate_up weight: gate is the first half of the columns.
            let half = node.plan.problem.n as usize;
            let (gq, uq) = split_columns(q, half);
            let (gs, us) = split_columns(s, half);
            pack_qswiglu(&node.plan, &gq, &gs, &uq, &us)
        }
        (_, [(q, s)]) => pack_qmatmul(&node.plan, q, s),
        _ => return Err(format!("{} weight operands", weights.len())),
    }
    .map_err(|e| e.to_string())?;
    let mut ddr = vec![0u8; node.layout.total as usize];
    ddr[node.layout.consts as usize..][..consts.len()].copy_from_slice(&consts);
    let p = node.plan.problem;
    let (m, k) = (p.m as usize, p.k as usize);
    Ok(LoadedNode {
        k,
        xq: vec![0; node.plan.m_pad as usize * k],
        rows: vec![RowParams::default(); m],
        sim: NpuSim::new(target.clone(), ddr),
        node,
    })
}

/// The left and right `half` columns of a row-major `[rows, 2·half]` matrix.
fn split_columns<T: Copy>(m: &[T], half: usize) -> (Vec<T>, Vec<T>) {
    let (mut l, mut r) = (
        Vec::with_capacity(m.len() / 2),
        Vec::with_capacity(m.len() / 2),
    );
    for row in m.chunks_exact(2 * half) {
        l.extend_from_slice(&row[..half]);
        r.extend_from_slice(&row[half..]);
    }
    (l, r)
}

impl LoadedNode {
    /// Rows × `K` activations in, rows × `N` results out.
    fn sizes(&self) -> (usize, usize) {
        let p = self.node.plan.problem;
        (p.m as usize * self.k, p.m as usize * p.n as usize)
    }

    /// One call: quantize `x`'s rows, run the program, read `y`.
    fn call(&mut self, x: &[f32], y: &mut [f32]) -> Result<SimStats, KernelError> {
        quantize_rows(x, self.k, &mut self.xq, &mut self.rows);
        self.node
            .layout
            .write_inputs(&mut self.sim.ddr, &self.xq, &self.rows);
        let stats = self
            .sim
            .run(&self.node.program)
            .map_err(|_| KernelError("npu simulator failed (see `slmcc report --asm`)"))?;
        self.node.layout.read_output(&self.sim.ddr, y);
        Ok(stats)
    }

    /// [`LoadedNode::call`] on raw buffers of `nx` and `ny` f32 values,
    /// counted in `records`.
    ///
    /// # Safety
    ///
    /// `x` and `y` must be valid, 4-byte aligned, non-overlapping buffers
    /// of the node's planned sizes.
    unsafe fn call_raw(
        &mut self,
        x: *const u8,
        y: *mut u8,
        records: &NpuRecords,
    ) -> Result<(), KernelError> {
        let (nx, ny) = self.sizes();
        // SAFETY: the caller's contract.
        let (xs, ys) = unsafe {
            (
                std::slice::from_raw_parts(x as *const f32, nx),
                std::slice::from_raw_parts_mut(y as *mut f32, ny),
            )
        };
        let stats = self.call(xs, ys)?;
        let mut r = records.borrow_mut();
        let rec = r.entry(self.node.node).or_default();
        rec.calls += 1;
        rec.last = stats;
        Ok(())
    }
}

impl KernelSet for NpuSimKernels {
    fn kernel(&self, graph: &Graph, node: usize) -> Result<Kernel, String> {
        let Some(loaded) = self.npu.get(&node) else {
            return self.jit.kernel(graph, node);
        };
        let loaded = loaded.clone();
        let records = self.records.clone();
        Ok(Box::new(move |args: &KernelArgs<'_>| {
            let mut l = loaded.borrow_mut();
            let (x, y) = (&args.inputs[0], &args.outputs[0]);
            if (x.elements(), y.elements()) != l.sizes() {
                return Err(KernelError(
                    "npu kernel called with other shapes than planned",
                ));
            }
            // SAFETY: the executor passes valid, 64-byte aligned buffers of
            // the node's static shapes (checked above); `qmatmul`'s result
            // never aliases its operand.
            unsafe { l.call_raw(x.ptr, y.ptr, &records) }
        }))
    }
}

/// Binds, specialises and runs `graph` of `module` with the NPU nodes on
/// the simulator and the rest on the JIT (one buffer per value, so every
/// value can be captured: what `golden check --backend npu-sim` uses).
/// Returns the run and the simulator's counts per NPU node.
pub fn run_graph_npu_sim(
    module: &Module,
    graph: &Graph,
    inputs: &[(String, Tensor)],
    capture: &Capture,
    target: &Target,
    options: &CpuOptions,
) -> Result<(RunResult, NpuRecords), RunError> {
    let records = NpuRecords::default();
    let hook = |special: &Module, g: &Graph, exec: &mut CpuExecutor| -> Result<(), String> {
        for node in plan_graph(g, target)? {
            let i = node.node;
            let mut loaded = load_node(special, g, node, target)
                .map_err(|e| format!("node {}: {e}", node_label(g, i)))?;
            let records = records.clone();
            // The kernel ABI's buffers: the operands, then the result.
            let result = g.nodes[i].inputs.len();
            exec.override_node(
                i,
                Box::new(move |ptrs: &[*mut u8]| {
                    // SAFETY: the cpu executor passes the node's buffers
                    // (operands x and the weights, then the result), each
                    // sized and 16-byte aligned for its static type.
                    unsafe { loaded.call_raw(ptrs[0], ptrs[result], &records) }.map_err(|e| e.0)
                }),
            );
        }
        Ok(())
    };
    let result = run_graph_jit_with(module, graph, inputs, capture, options, &hook)?;
    Ok((result, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;
    use slmcc_ir::EvalCtx;

    const SRC: &str = "module @m {
  weight @q : i4[64, 40]
  weight @s : f32[4, 40]

  graph @main(%x: f32[1, 9, 64]) -> (f32[1, 9, 40]) {
    %y = qmatmul %x, @q, @s {bits = 4, group = 16} : f32[1, 9, 40]
    return %y
  }
}
";

    fn module() -> Module {
        let mut m = parse_module(SRC).unwrap();
        let q: Vec<f64> = (0..64 * 40)
            .map(|i| ((i * 7919) % 16) as f64 - 8.0)
            .collect();
        let s: Vec<f32> = (0..4 * 40).map(|i| 0.01 + (i % 13) as f32 * 1e-3).collect();
        m.weights.insert(
            "q",
            Tensor::from_f64(slmcc_ir::DType::I4, vec![64, 40], &q).unwrap(),
        );
        m.weights.insert("s", Tensor::from_f32(vec![4, 40], s));
        m
    }

    #[test]
    fn a_node_runs_like_the_reference_and_times_like_a_full_run() {
        let m = module();
        let g = &m.graphs[0];
        let target = Target::rk3588();
        let node = plan_node(g, 0, &target).unwrap();
        let timed = NpuSim::time(&target, &node.program).unwrap();
        let mut loaded = load_node(&m, g, node, &target).unwrap();
        let x: Vec<f32> = (0..9 * 64)
            .map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.5)
            .collect();
        let mut y = vec![0f32; 9 * 40];
        let full = loaded.call(&x, &mut y).unwrap();
        assert_eq!(
            timed, full,
            "the timing model alone counts what a run counts"
        );
        assert!(full.macs >= 9 * 64 * 40);
        let xt = Tensor::from_f32(vec![1, 9, 64], x);
        let q = m.weights.tensor("q").unwrap().unwrap();
        let s = m.weights.tensor("s").unwrap().unwrap();
        let want = g.nodes[0]
            .op
            .eval(&[&xt, &q, &s], &EvalCtx::default())
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&y), bits(want[0].as_f32().unwrap()));
    }

    #[test]
    fn only_qmatmul_has_an_npu_kernel() {
        let mut m = module();
        m.graphs[0].nodes[0].op = Op::MatMul(slmcc_ir::ops::matmul::MatMul);
        let e = plan_node(&m.graphs[0], 0, &Target::rk3588()).unwrap_err();
        assert!(e.contains("no NPU kernel for `matmul`"), "{e}");
        assert!(plan_graph(&m.graphs[0], &Target::rk3588())
            .unwrap()
            .is_empty());
    }
}
