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
//! on the board's NPU, through one device that all of them share. When
//! there is no device, or a call fails, the products run on their CPU
//! kernels, and that is said once.

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
use crate::npu_device::{open_board, ModelDevice, NpuDevice, SharedBytes, PAGE};
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

/// The NPU part of a module: its weights' NPU facts by name and each
/// bucket graph's programs.
#[derive(Clone, Debug, Default)]
pub struct NpuLowered {
    pub weights: HashMap<String, NpuWeight>,
    pub programs: HashMap<String, Vec<ProductProgram>>,
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
        })
    }
}

/// The bytes of weight `name` in the NPU's layout: the package's mapping
/// when it is mapped, else a copy of the tensor held in memory.
fn weight_bytes(module: &Module, name: &str, len: usize) -> Result<SharedBytes, String> {
    if let Some((map, at)) = module.weights.mapped(name) {
        let end = at.checked_add(len).filter(|&e| e <= map.len());
        return end
            .map(|end| SharedBytes::Mapped(map.clone(), at..end))
            .ok_or_else(|| format!("weight @{name} lies outside its mapping"));
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
    let inputs = &g.nodes[program.node as usize].inputs;
    program
        .weights
        .iter()
        .enumerate()
        .map(|(o, name)| {
            let w = stored
                .get(name)
                .ok_or_else(|| format!("weight @{name} has no NPU column sums"))?;
            let data = OperandData {
                weights: weight_bytes(module, name, program.weight_bytes() as usize)?,
                scale: f32_weight(module, g, inputs[2 + 2 * o])?,
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

/// Loads `program` (checked against its node of `g`, a graph of
/// `module`) with its weights on `dev`: what [`NpuKernels::new`] does per
/// product.
pub fn load_product(
    module: &Module,
    g: &Graph,
    program: &ProductProgram,
    stored: &HashMap<String, NpuWeight>,
    dev: Rc<RefCell<dyn NpuDevice>>,
) -> Result<LoadedProduct, String> {
    let data = operands(module, g, program, stored)?;
    LoadedProduct::load(program.clone(), data, dev)
        .map_err(|e| format!("loading its NPU program: {e}"))
}

/// Whether the missing NPU device was reported (once per process).
static NO_DEVICE_SAID: AtomicBool = AtomicBool::new(false);

/// A graph's kernels for the executor: the NPU products on their device,
/// the rest on the CPU kernels given (the JIT's, or a package's object).
pub struct NpuKernels {
    cpu: Box<dyn KernelSet>,
    npu: HashMap<usize, Rc<RefCell<LoadedProduct>>>,
    /// On a board's device: set once an NPU call failed, after which the
    /// products run their CPU kernels.
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
        let shared: Option<Rc<RefCell<dyn NpuDevice>>> = match backend {
            NpuBackend::Model => None,
            NpuBackend::Board => match open_board() {
                Ok(d) => Some(d),
                Err(e) => {
                    // Every bucket graph loads its own kernels: said once.
                    if !NO_DEVICE_SAID.swap(true, Ordering::Relaxed) {
                        tracing::warn!("{e}; the quantized products run on the CPU");
                    }
                    return Ok(kernels);
                }
            },
        };
        for program in programs {
            let i = program.node as usize;
            let dev: Rc<RefCell<dyn NpuDevice>> = match &shared {
                Some(d) => d.clone(),
                None => Rc::new(RefCell::new(ModelDevice::new(
                    MODEL_BASE,
                    program_bytes(program),
                ))),
            };
            let loaded = load_product(module, graph, program, &lowered.weights, dev)
                .map_err(|e| format!("node {}: {e}", node_label(graph, i)))?;
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
        if backend == NpuBackend::Board {
            kernels.npu_failed = Some(Rc::new(Cell::new(false)));
        }
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
            let done = l.call(x, y).map_err(|e| {
                tracing::debug!("NPU task failed: {e}");
                KernelError("an NPU task failed (SLMCC_LOG=debug says why)")
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
