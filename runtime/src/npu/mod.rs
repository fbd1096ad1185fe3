//! The NPU part of a graph: the kernels of the nodes the `partition` pass
//! places on the NPU, built from the nodes' static shapes and weights, run
//! behind the executor's [`KernelSet`] interface, with every other node on
//! the Cranelift CPU kernels.
//!
//! With `NpuOps::REGISTERS` (`--backend npu-sim`) the W8A8 `qmatmul`s and
//! `qswiglu`s run through the RK3588's own register interface
//! ([`registers`]) on its functional model, bit for bit the reference op;
//! with `NpuOps::DEVICE` (`--backend npu`) on the board's NPU, falling back
//! to the CPU kernels when there is none or a call fails (said once).
//! Everything else stays on the CPU.
//!
//! The older model (`--backend npu-isa-sim`, `NpuOps::ALL`) runs programs
//! of our own ISA (`docs/NPU_ISA.md`) on its simulator, for `qmatmul`,
//! `qswiglu`, `rms_norm`, `add_rms_norm` and `attention`. [`plan_node`]
//! gives such a node's kernel (tile plan, DDR image layout) and program
//! without touching weights (what the compiler stores and `slmcc report
//! --asm` disassembles); [`NpuSimKernels`] also packs the weights into one
//! DDR image per kernel at load. A call writes the node's operands into
//! its image, runs the program on the simulator and reads the results:
//! per kernel kind in [`qmatmul`] (activations quantized on the CPU; bit
//! for bit the reference op), [`norm`] (bit for bit) and [`attention`]
//! (f16 products: within f16 rounding).

mod attention;
mod norm;
mod qmatmul;
mod registers;

pub use registers::{register_product, RegisterProduct};

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use slmcc_backends::npu::kernels::attention::{AttentionLayout, AttentionPlan};
use slmcc_backends::npu::kernels::qmatmul::QMatmulLayout;
use slmcc_backends::npu::kernels::rms_norm::{RmsNormLayout, RmsNormPlan};
use slmcc_backends::npu::tiler::QTilePlan;
use slmcc_backends::npu::{Program, Target};
use slmcc_ir::placement::{constant_tensor, place_with, Device, NpuOps};
use slmcc_ir::verify::node_label;
use slmcc_ir::{Graph, Module, Op, OpDef, ValueDef, ValueId};

use crate::exec::{Kernel, KernelArgs, KernelError, KernelSet};
use crate::npu_device::{open_board, NpuDevice};
use crate::npu_sim::{NpuSim, SimStats};

/// What an NPU node's program was planned from.
#[derive(Clone, Debug)]
pub enum NpuKernel {
    /// `qmatmul` or `qswiglu`.
    QMatmul {
        plan: QTilePlan,
        layout: QMatmulLayout,
    },
    /// `rms_norm` or `add_rms_norm`.
    RmsNorm {
        plan: RmsNormPlan,
        layout: RmsNormLayout,
    },
    Attention {
        plan: AttentionPlan,
        layout: AttentionLayout,
    },
}

impl NpuKernel {
    /// One line on the kernel's shapes and tiling (`slmcc report --asm`).
    pub fn describe(&self) -> String {
        match self {
            NpuKernel::QMatmul { plan, layout } => {
                let p = plan.problem;
                format!(
                    "m={} k={} n={} {:?} group={}, tiles k={} n={}, ddr: consts {:#x} xq {:#x} rows {:#x} out {:#x}",
                    p.m, p.k, p.n, p.wtype, p.group, plan.kt, plan.nt, layout.consts, layout.xq,
                    layout.rows, layout.out
                )
            }
            NpuKernel::RmsNorm { plan, layout } => format!(
                "m={} n={} residual={}, rows per tile {}, cores {}, ddr: params {:#x} x {:#x} y {:#x}",
                plan.m, plan.n, plan.residual, plan.rows_per_tile, plan.cores, layout.params,
                layout.x, layout.y
            ),
            NpuKernel::Attention { plan, layout } => {
                let p = plan.problem;
                format!(
                    "b={} heads={}/{} s={} t={} d={} dv={} causal={} window={} mask={:?}, \
                     query block {}, key tile {}, cores {}, ddr: q {:#x} k {:#x} v {:#x} out {:#x}",
                    p.batch, p.heads, p.kv_heads, p.s, p.t, p.d, p.dv, p.causal, p.window,
                    p.mask, plan.mq, plan.nk, plan.cores, layout.q, layout.k, layout.v, layout.out
                )
            }
        }
    }
}

/// One NPU node's kernel, without its data.
#[derive(Clone, Debug)]
pub struct NpuNode {
    /// The node's index in its graph.
    pub node: usize,
    pub kernel: NpuKernel,
    pub program: Program,
}

/// The kernel of node `node` of `g` (static shapes: a bucket graph) for
/// `target`.
pub fn plan_node(g: &Graph, node: usize, target: &Target) -> Result<NpuNode, String> {
    plan_node_keys(g, node, target, None)
}

/// [`plan_node`], with an attention node's program over only the first
/// `keys` keys when given (what a decode step with that many cache slots
/// filled runs: the estimate's).
pub fn plan_node_keys(
    g: &Graph,
    node: usize,
    target: &Target,
    keys: Option<usize>,
) -> Result<NpuNode, String> {
    let n = &g.nodes[node];
    let planned = match n.op {
        Op::QMatMul(_) | Op::QSwiGlu(_) => qmatmul::plan(g, node, target),
        Op::RmsNorm(_) | Op::AddRmsNorm(_) => norm::plan(g, node, target),
        Op::Attention(_) => attention::plan(g, node, target, keys),
        _ => Err(format!("no NPU kernel for `{}`", n.op.mnemonic())),
    };
    let (kernel, program) = planned.map_err(|e| format!("node {}: {e}", node_label(g, node)))?;
    Ok(NpuNode {
        node,
        kernel,
        program,
    })
}

/// The kernels of every node of `g` that [`place`] puts on the NPU.
pub fn plan_graph(g: &Graph, target: &Target) -> Result<Vec<NpuNode>, String> {
    plan_graph_with(g, target, NpuOps::ALL)
}

/// [`plan_graph`] with only the op kinds `ops` allows on the NPU
/// ([`place_with`]).
pub fn plan_graph_with(g: &Graph, target: &Target, ops: NpuOps) -> Result<Vec<NpuNode>, String> {
    place_with(g, ops)
        .iter()
        .enumerate()
        .filter(|(_, p)| p.device == Device::Npu)
        .map(|(i, _)| plan_node(g, i, target))
        .collect()
}

/// The static shape of value `v`, or an error naming `what`.
fn fixed_shape(g: &Graph, v: ValueId, what: &str) -> Result<Vec<usize>, String> {
    g.ty(v)
        .shape
        .as_fixed()
        .ok_or_else(|| format!("{what} of symbolic shape"))
}

/// A weight operand's data, by its value: a module weight or a constant.
fn weight_data(
    module: &Module,
    g: &Graph,
    v: ValueId,
) -> Result<std::sync::Arc<slmcc_ir::Tensor>, String> {
    let ValueDef::Weight(name) = &g.value(v).def else {
        if let Some(t) = constant_tensor(g, v) {
            return Ok(t);
        }
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

/// A quantized product node's weights (operands after the activations,
/// in `q`, `scale` pairs): each as int8 values, f32 scales and its column
/// count.
type QWeights = Vec<(Vec<i8>, Vec<f32>, usize)>;

fn quantized_weights(module: &Module, g: &Graph, node: usize) -> Result<QWeights, String> {
    g.nodes[node].inputs[1..]
        .chunks(2)
        .map(|pair| {
            let q = weight_data(module, g, pair[0])?;
            let scale = weight_data(module, g, pair[1])?;
            let cols = q.shape().get(1).copied().ok_or("a weight of rank < 2")?;
            let values = q.to_i64_vec().into_iter().map(|v| v as i8).collect();
            let scale = scale.as_f32().ok_or("scales are not f32")?.to_vec();
            Ok((values, scale, cols))
        })
        .collect()
}

/// `len` f32 values at `p`.
///
/// # Safety
///
/// `p` must be valid for reads of `len` f32 values and 4-byte aligned.
unsafe fn f32s<'a>(p: *const u8, len: usize) -> &'a [f32] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p as *const f32, len) }
}

/// Writes `v` little-endian at DDR offset `at`.
fn write_f32s(ddr: &mut [u8], at: u32, v: &[f32]) {
    for (b, x) in ddr[at as usize..][..4 * v.len()].chunks_exact_mut(4).zip(v) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// Reads `len` f32 values at DDR offset `at` into `p`.
///
/// # Safety
///
/// `p` must be valid for writes of `len` f32 values and 4-byte aligned.
unsafe fn read_f32s(ddr: &[u8], at: u32, p: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    let out = unsafe { std::slice::from_raw_parts_mut(p as *mut f32, len) };
    for (o, b) in out
        .iter_mut()
        .zip(ddr[at as usize..][..4 * len].chunks_exact(4))
    {
        *o = f32::from_le_bytes(b.try_into().expect("4 bytes"));
    }
}

/// Runs a node's `program` on its simulator.
fn run_program(sim: &mut NpuSim, program: &Program) -> Result<SimStats, KernelError> {
    sim.run(program)
        .map_err(|_| KernelError("npu simulator failed (see `slmcc report --asm`)"))
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
enum LoadedNode {
    Q(qmatmul::LoadedQ),
    Registers(Box<registers::RegistersQ>),
    Norm(norm::LoadedNorm),
    Attention(attention::LoadedAttention),
}

fn load_node(
    module: &Module,
    g: &Graph,
    node: NpuNode,
    target: &Target,
) -> Result<LoadedNode, String> {
    let i = node.node;
    Ok(match node.kernel {
        NpuKernel::QMatmul { plan, layout } => LoadedNode::Q(qmatmul::LoadedQ::load(
            module,
            g,
            i,
            (plan, layout),
            node.program,
            target,
        )?),
        NpuKernel::RmsNorm { plan, layout } => LoadedNode::Norm(norm::LoadedNorm::load(
            module,
            g,
            i,
            (plan, layout),
            node.program,
            target,
        )?),
        NpuKernel::Attention { plan, layout } => LoadedNode::Attention(
            attention::LoadedAttention::load((plan, layout), node.program, target),
        ),
    })
}

impl LoadedNode {
    /// One call on node `node`'s buffers (operands, then results), counted
    /// in `records`.
    ///
    /// # Safety
    ///
    /// The buffers must be valid and 4-byte aligned for the node's static
    /// types; results may alias operands (every operand is copied into
    /// the DDR image before any result is written).
    unsafe fn call_raw(
        &mut self,
        node: usize,
        ins: &[*const u8],
        outs: &[*mut u8],
        records: &NpuRecords,
    ) -> Result<(), KernelError> {
        // SAFETY: the caller's contract.
        let stats = unsafe {
            match self {
                LoadedNode::Q(l) => l.call_raw(ins, outs),
                LoadedNode::Registers(l) => l.call_raw(ins, outs),
                LoadedNode::Norm(l) => l.call_raw(ins, outs),
                LoadedNode::Attention(l) => l.call_raw(ins, outs),
            }
        }?;
        let mut r = records.borrow_mut();
        let rec = r.entry(node).or_default();
        rec.calls += 1;
        rec.last = stats;
        Ok(())
    }
}

/// Whether the missing NPU device was reported (once per process).
static NO_DEVICE_SAID: AtomicBool = AtomicBool::new(false);

/// A graph's kernels for the executor: the NPU nodes on the simulator, the
/// rest on the CPU kernels given (the JIT's, or a package's object).
pub struct NpuSimKernels {
    cpu: Box<dyn KernelSet>,
    npu: HashMap<usize, Rc<RefCell<LoadedNode>>>,
    records: NpuRecords,
    /// On a board's device: set once an NPU call failed, after which the
    /// NPU nodes run their CPU kernels.
    npu_failed: Option<Rc<Cell<bool>>>,
}

impl NpuSimKernels {
    /// Loads the NPU nodes of `graph` (a bucket graph of `module`; the
    /// kinds `ops` allows) with their weights; the other nodes run on
    /// `cpu`, the graph's CPU kernels.
    /// With `stored` (a package's programs,
    /// [`crate::package::Package::npu_programs`]) every NPU node runs the
    /// program stored for it, which must exist; otherwise the programs are
    /// emitted now. With `ops.registers` the `qmatmul`s that the register
    /// interface takes run there, and the stored programs are not used.
    pub fn new(
        module: &Module,
        graph: &Graph,
        target: &Target,
        cpu: Box<dyn KernelSet>,
        stored: Option<&HashMap<usize, Program>>,
        ops: NpuOps,
    ) -> Result<NpuSimKernels, String> {
        let mut npu = HashMap::new();
        if ops.registers {
            return Self::on_registers(module, graph, cpu, ops);
        }
        let nodes = plan_graph_with(graph, target, ops)?;
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
            cpu,
            npu,
            records: NpuRecords::default(),
            npu_failed: None,
        })
    }

    /// The `qmatmul`/`qswiglu` nodes the register interface takes, on the
    /// functional model (one device each) or, with `ops.device`, on the
    /// board's NPU (one shared device); the rest on `cpu`. Without a
    /// device everything runs on `cpu`, and that is said once.
    fn on_registers(
        module: &Module,
        graph: &Graph,
        cpu: Box<dyn KernelSet>,
        ops: NpuOps,
    ) -> Result<NpuSimKernels, String> {
        let mut kernels = NpuSimKernels {
            cpu,
            npu: HashMap::new(),
            records: NpuRecords::default(),
            npu_failed: None,
        };
        let shared: Option<Rc<RefCell<dyn NpuDevice>>> = if ops.device {
            match open_board() {
                Ok(d) => Some(d),
                Err(e) => {
                    // Every bucket graph loads its own kernels: said once.
                    if !NO_DEVICE_SAID.swap(true, Ordering::Relaxed) {
                        tracing::warn!("{e}; the quantized products run on the CPU");
                    }
                    return Ok(kernels);
                }
            }
        } else {
            None
        };
        for (i, _) in place_with(graph, ops)
            .iter()
            .enumerate()
            .filter(|(_, p)| p.device == Device::Npu)
        {
            match registers::RegistersQ::load(module, graph, i, shared.as_ref()) {
                Ok(l) => {
                    let node = LoadedNode::Registers(Box::new(l));
                    kernels.npu.insert(i, Rc::new(RefCell::new(node)));
                }
                Err(e) => tracing::info!("node {} stays on the CPU: {e}", node_label(graph, i)),
            }
        }
        let on = if ops.device {
            "the board's NPU"
        } else {
            "the RK3588 register-interface model"
        };
        tracing::info!("{} qmatmul/qswiglu node(s) on {on}", kernels.npu.len());
        if ops.device {
            kernels.npu_failed = Some(Rc::new(Cell::new(false)));
        }
        Ok(kernels)
    }

    /// The simulator's counts per NPU node, updated by every call.
    pub fn records(&self) -> NpuRecords {
        self.records.clone()
    }
}

impl KernelSet for NpuSimKernels {
    fn kernel(&self, graph: &Graph, node: usize) -> Result<Kernel, String> {
        let Some(loaded) = self.npu.get(&node) else {
            return self.cpu.kernel(graph, node);
        };
        let loaded = loaded.clone();
        let records = self.records.clone();
        let n = &graph.nodes[node];
        let planned = |vs: &[ValueId]| -> Vec<Option<usize>> {
            vs.iter()
                .map(|&v| graph.ty(v).shape.as_fixed().map(|s| s.iter().product()))
                .collect()
        };
        let (want_in, want_out) = (planned(&n.inputs), planned(&n.outputs));
        let fallback = match &self.npu_failed {
            Some(failed) => Some((self.cpu.kernel(graph, node)?, failed.clone())),
            None => None,
        };
        Ok(Box::new(move |args: &KernelArgs<'_>| {
            if let Some((cpu, failed)) = &fallback {
                if failed.get() {
                    return cpu(args);
                }
            }
            let got = |ts: &[crate::exec::TensorRef]| -> Vec<Option<usize>> {
                ts.iter().map(|t| Some(t.elements())).collect()
            };
            if got(args.inputs) != want_in || got(args.outputs) != want_out {
                return Err(KernelError(
                    "npu kernel called with other shapes than planned",
                ));
            }
            let ins: Vec<*const u8> = args.inputs.iter().map(|t| t.ptr as *const u8).collect();
            let outs: Vec<*mut u8> = args.outputs.iter().map(|t| t.ptr).collect();
            // SAFETY: the executor passes valid, 64-byte aligned buffers of
            // the node's static shapes (checked above).
            let done = unsafe { loaded.borrow_mut().call_raw(node, &ins, &outs, &records) };
            match (done, &fallback) {
                (Err(e), Some((cpu, failed))) => {
                    if !failed.replace(true) {
                        tracing::warn!(
                            "{}; the quantized products run on the CPU from now on",
                            e.0
                        );
                    }
                    cpu(args)
                }
                (done, _) => done,
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;
    use slmcc_ir::{EvalCtx, Tensor};

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
        let Ok(LoadedNode::Q(mut loaded)) = load_node(&m, g, node, &target) else {
            panic!("a qmatmul node loads as one");
        };
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
    fn an_f32_matmul_has_no_npu_kernel() {
        let mut m = module();
        m.graphs[0].nodes[0].op = Op::MatMul(slmcc_ir::ops::matmul::MatMul);
        let e = plan_node(&m.graphs[0], 0, &Target::rk3588()).unwrap_err();
        assert!(e.contains("no NPU kernel for `matmul`"), "{e}");
        assert!(plan_graph(&m.graphs[0], &Target::rk3588())
            .unwrap()
            .is_empty());
    }
}
