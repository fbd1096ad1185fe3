//! The NPU part of a graph: the W8A8 products that the placement puts on
//! the NPU, each run from its register program, behind the executor's
//! [`KernelSet`] interface, with every other node on the CPU kernels.
//!
//! The programs and the weights' NPU facts ([`NpuLowered`]) come from a
//! package, where the compiler stored them, or from the backend's
//! lowering of a module in memory (`slmcc run MODEL.onnx --backend
//! npu-sim`). With [`NpuBackend::Model`] (`--backend npu-sim`) each
//! product runs on a functional model of its own, which reads the
//! weights in place. With [`NpuBackend::Board`] (`--backend npu`) they run
//! on the board's NPU, through one device that all of them share. A call
//! that fails is tried once more. When there is no device, or a call
//! fails twice, the products run on their CPU kernels, and that is said
//! once.

pub mod product;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use slmcc_backends::npu::lower::{lower_graph, store_weights, NpuWeight, ProductProgram};
use slmcc_ir::placement::{place, Device};
use slmcc_ir::verify::node_label;
use slmcc_ir::{Graph, Module, TensorData, ValueDef, ValueId};

use crate::exec::{Kernel, KernelArgs, KernelError, KernelSet};
use crate::npu_device::{
    open_board, shared_device, ModelDevice, NpuBuffer, NpuDevice, SharedBytes, PAGE,
};
use crate::package::Package;
pub use product::LoadedProduct;
use product::OperandData;

/// Where the NPU products run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpuBackend {
    /// The functional model of the register interface, one per product.
    Model,
    /// The board's NPU (`rocket`, else `rknpu`), else the CPU kernels.
    Board,
}

/// NPU address where each product's model memory starts.
const MODEL_BASE: u32 = 0x1000_0000;

/// The NPU part of a module: its weights' NPU facts by name, each
/// bucket graph's programs, and the board's device once a graph opens it
/// (shared by all the module's graphs).
#[derive(Clone, Debug, Default)]
pub struct NpuLowered {
    pub weights: HashMap<String, NpuWeight>,
    pub programs: HashMap<String, Vec<ProductProgram>>,
    pub board: BoardSession,
    /// Set once a call on a functional model failed twice: all graphs'
    /// products then run on the CPU (a board's session has its own).
    pub model_failed: Rc<Cell<bool>>,
}

impl NpuLowered {
    /// Lowers a module in memory: stores its NPU weights in the NPU's
    /// layout and lowers every graph (static shapes: bucket graphs).
    pub fn lower(module: &mut Module) -> Result<NpuLowered, String> {
        let weights = store_weights(module).map_err(|e| e.to_string())?;
        let programs = module
            .graphs
            .iter()
            .map(|g| Ok((g.name.clone(), lower_graph(g).map_err(|e| e.to_string())?)))
            .collect::<Result<_, String>>()?;
        Ok(NpuLowered {
            weights: weights.into_iter().map(|w| (w.name.clone(), w)).collect(),
            programs,
            board: BoardSession::default(),
            model_failed: Rc::default(),
        })
    }

    /// What `pkg` stores, each program checked against its graph in
    /// `module` (the package's module).
    pub fn from_package(pkg: &Package, module: &Module) -> Result<NpuLowered, String> {
        let programs = module
            .graphs
            .iter()
            .map(|g| {
                let p = pkg
                    .npu_programs(module, &g.name)
                    .map_err(|e| e.to_string())?;
                Ok((g.name.clone(), p))
            })
            .collect::<Result<_, String>>()?;
        Ok(NpuLowered {
            weights: pkg.npu_weights(),
            programs,
            board: BoardSession::default(),
            model_failed: Rc::default(),
        })
    }
}

/// The bytes of weight `name` in the NPU's layout: the package's mapping
/// when it is mapped, else a copy of the tensor held in memory.
fn weight_bytes(module: &Module, name: &str) -> Result<SharedBytes, String> {
    if let Some((map, range)) = module.weights.mapped(name) {
        return Ok(SharedBytes::Mapped(map.clone(), range));
    }
    let t = module
        .weights
        .tensor(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("weight @{name} has no data"))?;
    match t.data() {
        TensorData::I8(v) => Ok(SharedBytes::Owned(v.iter().map(|&b| b as u8).collect())),
        _ => Err(format!("weight @{name} is not i8")),
    }
}

/// The `f32` values of a module weight operand.
fn f32_weight(module: &Module, g: &Graph, v: ValueId) -> Result<Vec<f32>, String> {
    let ValueDef::Weight(name) = &g.value(v).def else {
        return Err("scales computed at run time".into());
    };
    let t = module
        .weights
        .tensor(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("weight @{name} has no data"))?;
    t.as_f32()
        .map(<[f32]>::to_vec)
        .ok_or_else(|| format!("scales @{name} are not f32"))
}

/// The operands' data of `program` (node `program.node` of `g`).
fn operands(
    module: &Module,
    g: &Graph,
    program: &ProductProgram,
    stored: &HashMap<String, NpuWeight>,
) -> Result<Vec<OperandData>, String> {
    let inputs = &g
        .nodes
        .get(program.node as usize)
        .ok_or_else(|| format!("no node {} in @{}", program.node, g.name))?
        .inputs;
    program
        .weights
        .iter()
        .enumerate()
        .map(|(o, name)| {
            let w = stored
                .get(name)
                .ok_or_else(|| format!("weight @{name} has no NPU column sums"))?;
            let data = OperandData {
                weights: weight_bytes(module, name)?,
                scale: match inputs.get(2 + 2 * o) {
                    Some(&v) => f32_weight(module, g, v)?,
                    None => return Err(format!("node {}: no scales for @{name}", program.node)),
                },
                column_sums: w.column_sums.clone(),
            };
            data.check(program, w)?;
            Ok(data)
        })
        .collect()
}

/// NPU memory a product's program needs besides its weights, each buffer
/// rounded to pages: what its functional model is given.
pub fn program_bytes(program: &ProductProgram) -> usize {
    let lists: u64 = program.tasks.iter().map(|t| t.regcmd.len() as u64).sum();
    [program.features_bytes, program.outputs_bytes, lists]
        .iter()
        .map(|&b| (b as usize).next_multiple_of(PAGE))
        .sum()
}

/// A device and the weights imported into it, by name: products that
/// share a device (a board's, across bucket graphs) share their weights'
/// buffers, so each weight is imported (on a driver: copied) once.
pub struct NpuSession {
    dev: Rc<RefCell<dyn NpuDevice>>,
    imported: HashMap<String, NpuBuffer>,
    /// Set once a call on this device failed, after which its products
    /// run their CPU kernels.
    failed: Rc<Cell<bool>>,
}

impl NpuSession {
    pub fn new(dev: Rc<RefCell<dyn NpuDevice>>) -> NpuSession {
        NpuSession {
            dev,
            imported: HashMap::new(),
            failed: Rc::new(Cell::new(false)),
        }
    }

    /// Weights imported so far.
    pub fn imported(&self) -> usize {
        self.imported.len()
    }
}

/// A session that bucket graphs share.
type Shared = Rc<RefCell<NpuSession>>;

/// The board's session, opened by the first bucket graph that asks and
/// shared by the others (`Some(None)` inside: no device opened).
#[derive(Clone, Default)]
pub struct BoardSession(Rc<RefCell<Option<Option<Shared>>>>);

impl std::fmt::Debug for BoardSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.0.borrow() {
            None => "not opened",
            Some(None) => "no device",
            Some(Some(_)) => "open",
        };
        write!(f, "BoardSession({state})")
    }
}

impl BoardSession {
    /// The board's session, opening the device on first use; `None` when
    /// none opens (said once per process).
    fn get(&self) -> Option<Shared> {
        let mut state = self.0.borrow_mut();
        state
            .get_or_insert_with(|| match open_board() {
                Ok(d) => Some(Rc::new(RefCell::new(NpuSession::new(d)))),
                Err(e) => {
                    if !NO_DEVICE_SAID.swap(true, Ordering::Relaxed) {
                        tracing::warn!("{e}; the quantized products run on the CPU");
                    }
                    None
                }
            })
            .clone()
    }
}

/// Loads `program` with its weights on `session`'s device: what
/// [`NpuKernels::new`] does per product. `program` must have passed
/// [`ProductProgram::check`] against its node of `g` (a graph of
/// `module`), as every program of an [`NpuLowered`] has: a package's when
/// it was read, a lowering's by construction. Weights the session has
/// imported already are reused.
pub fn load_product(
    module: &Module,
    g: &Graph,
    program: &ProductProgram,
    stored: &HashMap<String, NpuWeight>,
    session: &mut NpuSession,
) -> Result<LoadedProduct, String> {
    let data = operands(module, g, program, stored)?;
    let mut buffers = Vec::with_capacity(data.len());
    for (name, d) in program.weights.iter().zip(&data) {
        let buffer = match session.imported.get(name) {
            Some(b) => *b,
            None => {
                let b = session
                    .dev
                    .borrow_mut()
                    .import(d.weights.clone())
                    .map_err(|e| format!("importing weight @{name}: {e}"))?;
                session.imported.insert(name.clone(), b);
                b
            }
        };
        buffers.push(buffer);
    }
    LoadedProduct::load(program.clone(), data, &buffers, session.dev.clone())
        .map_err(|e| format!("loading its NPU program: {e}"))
}

/// Whether the missing NPU device was reported (once per process).
static NO_DEVICE_SAID: AtomicBool = AtomicBool::new(false);

/// A graph's kernels for the executor: the NPU products on their device,
/// the rest on the CPU kernels given (the JIT's, or a package's object).
pub struct NpuKernels {
    cpu: Box<dyn KernelSet>,
    npu: HashMap<usize, Rc<RefCell<LoadedProduct>>>,
    /// Set once an NPU call failed twice, after which the products run
    /// their CPU kernels (shared with the board's session, whose other
    /// graphs then fall back too).
    npu_failed: Option<Rc<Cell<bool>>>,
}

impl NpuKernels {
    /// Loads the NPU products of `graph` (a bucket graph of `module`)
    /// from `lowered` on `backend`; the other nodes run on `cpu`, the
    /// graph's CPU kernels. Every product the placement puts on the NPU
    /// must have its program.
    pub fn new(
        module: &Module,
        graph: &Graph,
        lowered: &NpuLowered,
        cpu: Box<dyn KernelSet>,
        backend: NpuBackend,
    ) -> Result<NpuKernels, String> {
        let mut kernels = NpuKernels {
            cpu,
            npu: HashMap::new(),
            npu_failed: None,
        };
        let programs = lowered
            .programs
            .get(&graph.name)
            .map_or(&[][..], Vec::as_slice);
        let placed = place(graph);
        for (i, p) in placed.iter().enumerate() {
            let has = programs.iter().any(|p| p.node as usize == i);
            if p.device == Device::Npu && !has {
                return Err(format!(
                    "node {}: no NPU program for it (recompile the package with this slmcc)",
                    node_label(graph, i)
                ));
            }
        }
        let board = match backend {
            NpuBackend::Model => None,
            NpuBackend::Board => match lowered.board.get() {
                Some(session) => Some(session),
                None => return Ok(kernels),
            },
        };
        for program in programs {
            let i = program.node as usize;
            let at = |e: String| match i < graph.nodes.len() {
                true => format!("node {}: {e}", node_label(graph, i)),
                false => format!("NPU program of node {i}: {e}"),
            };
            let loaded = match &board {
                Some(session) => load_product(
                    module,
                    graph,
                    program,
                    &lowered.weights,
                    &mut session.borrow_mut(),
                ),
                None => {
                    let dev = ModelDevice::new(MODEL_BASE, program_bytes(program));
                    let mut session =
                        NpuSession::new(shared_device(dev).map_err(|e| at(e.to_string()))?);
                    load_product(module, graph, program, &lowered.weights, &mut session)
                }
            }
            .map_err(at)?;
            kernels.npu.insert(i, Rc::new(RefCell::new(loaded)));
        }
        let on = match backend {
            NpuBackend::Model => "the RK3588 register-interface model",
            NpuBackend::Board => "the board's NPU",
        };
        tracing::info!(
            "@{}: {} qmatmul/qswiglu node(s) on {on}",
            graph.name,
            kernels.npu.len()
        );
        kernels.npu_failed = Some(match board {
            Some(session) => session.borrow().failed.clone(),
            None => lowered.model_failed.clone(),
        });
        Ok(kernels)
    }

    /// The nodes that run on the NPU.
    pub fn npu_nodes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.npu.keys().copied().collect();
        v.sort_unstable();
        v
    }
}

impl KernelSet for NpuKernels {
    fn kernel(&self, graph: &Graph, node: usize) -> Result<Kernel, String> {
        let Some(loaded) = self.npu.get(&node) else {
            return self.cpu.kernel(graph, node);
        };
        let loaded = loaded.clone();
        let n = &graph.nodes[node];
        let planned = |vs: &[ValueId]| -> Vec<Option<usize>> {
            vs.iter()
                .map(|&v| graph.ty(v).shape.as_fixed().map(|s| s.iter().product()))
                .collect()
        };
        let (want_in, want_out) = (planned(&n.inputs[..1]), planned(&n.outputs));
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
            if got(&args.inputs[..1]) != want_in || got(args.outputs) != want_out {
                return Err(KernelError(
                    "npu kernel called with other shapes than planned",
                ));
            }
            let mut l = loaded.borrow_mut();
            let (x_len, y_len) = (want_in[0].unwrap_or(0), l.result_len());
            let (xp, yp) = (args.inputs[0].ptr as usize, args.outputs[0].ptr as usize);
            if xp < yp + 4 * y_len && yp < xp + 4 * x_len {
                return Err(KernelError(
                    "npu kernel called with its result over its operand",
                ));
            }
            // SAFETY: the executor passes valid, 64-byte aligned buffers of
            // the node's static shapes (checked above), which do not overlap
            // (checked just now).
            let (x, y) = unsafe {
                let x = std::slice::from_raw_parts(xp as *const f32, x_len);
                let y = std::slice::from_raw_parts_mut(yp as *mut f32, y_len);
                (x, y)
            };
            // A failed call is tried once more (a transient fault), then
            // the products fall back to their CPU kernels.
            let done = l
                .call(x, y)
                .or_else(|e| {
                    tracing::debug!("NPU call failed: {e}; trying once more");
                    l.call(x, y)
                })
                .map_err(|e| {
                    tracing::debug!("NPU call failed again: {e}");
                    KernelError("an NPU call failed twice (SLMCC_LOG=debug says why)")
                });
            match (done, &fallback) {
                (Err(e), Some((cpu, failed))) => {
                    if !failed.replace(true) {
                        tracing::warn!(
                            "{}; the quantized products run on the CPU from now on",
                            e.0
                        );
                    }
                    drop(l);
                    cpu(args)
                }
                (done, _) => done,
            }
        }))
    }
}
