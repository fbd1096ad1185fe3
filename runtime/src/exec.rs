//! The executor over a memory plan: one allocation per region at load, none
//! per step.
//!
//! [`Executor::load`] takes a planned graph (`plan-memory` has run), allocates
//! each region of its [`MemoryPlan`] once (64-byte aligned, zeroed), copies
//! the weights and the `constant` results into their read-only regions, asks
//! a [`KernelSet`] for one [`Kernel`] per remaining node, and fixes every
//! operand and result of every node to its place in the regions
//! ([`TensorRef`]). [`Executor::run`] then only calls the kernels in schedule
//! order with those pointers: the loop itself allocates nothing. Inputs are
//! written into their arena slots ([`Executor::input_mut`]) and outputs read
//! from theirs ([`Executor::output`]), also without allocating.
//!
//! Kernels are backend business (the Cranelift CPU backend, the NPU's
//! programs, [`crate::npu`]); this module fixes only the calling convention. The weights
//! region is used in place when the module's weights are mapped in exactly
//! the plan's layout (a package's weights blob, [`crate::package`], is
//! written that way): no copy, no allocation, the kernels read the mapped
//! file (its pages are read-only, as the weights region is). Otherwise it
//! is allocated and filled at load by copying from the weight store.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;

use memmap2::Mmap;

use slmcc_ir::plan::TensorPlan;
use slmcc_ir::verify::node_label;
use slmcc_ir::{DType, Graph, MemoryPlan, Module, Op, Region, RegionSizes, ValueDef};

/// Where one operand or result lives during a step.
///
/// Kernels get raw pointers because an in-place result aliases its operand.
/// The executor guarantees, for the duration of a call: `ptr` is valid for
/// `bytes` bytes and 64-byte aligned; the results do not overlap each other
/// or any operand, except a result computed in place, whose `ptr` and
/// `bytes` are exactly its operand's; kernels write only to results and
/// scratch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRef {
    pub ptr: *mut u8,
    pub bytes: usize,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl TensorRef {
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }
}

/// What a kernel sees for one step.
pub struct KernelArgs<'a> {
    pub inputs: &'a [TensorRef],
    pub outputs: &'a [TensorRef],
    /// The scratch region, shared by all steps (`scratch_bytes` long).
    pub scratch: *mut u8,
    pub scratch_bytes: usize,
}

/// A kernel's failure; a static message, so that failing does not allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelError(pub &'static str);

/// The code of one node, chosen at load.
pub type Kernel = Box<dyn Fn(&KernelArgs<'_>) -> Result<(), KernelError>>;

/// A backend's kernels: one per node, chosen (and possibly specialised to
/// the node's static shapes) at load. `constant` nodes never ask: their
/// values are in the constants region.
pub trait KernelSet {
    fn kernel(&self, graph: &Graph, node: usize) -> Result<Kernel, String>;
}

impl<K: KernelSet + ?Sized> KernelSet for Box<K> {
    fn kernel(&self, graph: &Graph, node: usize) -> Result<Kernel, String> {
        (**self).kernel(graph, node)
    }
}

/// A failure to load or run, naming the graph and, when a node is at fault,
/// the node.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("graph @{graph}{}: {message}", node.as_ref().map(|n| format!(", node {n}")).unwrap_or_default())]
pub struct ExecError {
    pub graph: String,
    pub node: Option<String>,
    pub message: String,
}

/// One region's memory: allocated zeroed and 64-byte aligned at load, freed
/// on drop, or (the weights) bytes of a read-only mapping kept alive here.
/// Every access goes through the one raw pointer.
struct RegionBuf {
    ptr: NonNull<u8>,
    len: usize,
    mapped: Option<Arc<Mmap>>,
}

impl RegionBuf {
    fn new(len: usize) -> Result<RegionBuf, String> {
        if len == 0 {
            // Aligned and never dereferenced: no tensor has bytes here.
            return Ok(RegionBuf {
                ptr: NonNull::<[u8; 64]>::dangling().cast(),
                len,
                mapped: None,
            });
        }
        let layout = Layout::from_size_align(len, 64).map_err(|e| e.to_string())?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| format!("cannot allocate {len} bytes"))?;
        Ok(RegionBuf {
            ptr,
            len,
            mapped: None,
        })
    }

    /// `len` bytes of `map` from `start` (checked to lie inside it and to be
    /// 64-byte aligned), used in place.
    fn mapped(map: Arc<Mmap>, start: usize, len: usize) -> Option<RegionBuf> {
        let end = start.checked_add(len)?;
        if end > map.len() || len == 0 {
            return None;
        }
        // The mapping outlives the pointer: `mapped` keeps it. Kernels
        // never write the weights region.
        let ptr = NonNull::new(map[start..].as_ptr().cast_mut())?;
        (ptr.as_ptr() as usize)
            .is_multiple_of(64)
            .then_some(RegionBuf {
                ptr,
                len,
                mapped: Some(map),
            })
    }

    fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.len);
        // SAFETY: offsets come from a checked plan, inside the region.
        unsafe { self.ptr.as_ptr().add(offset) }
    }
}

impl Drop for RegionBuf {
    fn drop(&mut self) {
        if self.len > 0 && self.mapped.is_none() {
            let layout = Layout::from_size_align(self.len, 64).expect("made at load");
            // SAFETY: allocated in `new` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// The module's weights mapping as graph `g`'s weights region, when every
/// weight `g` uses is mapped (one mapping) at exactly its planned offset
/// from one 64-byte aligned start, and the region fits in the mapping.
/// `by_name` is `plan`'s [`MemoryPlan::by_name`].
fn mapped_weights(
    module: &Module,
    g: &Graph,
    plan: &MemoryPlan,
    by_name: &HashMap<(bool, &str), &TensorPlan>,
) -> Option<RegionBuf> {
    let len = plan.regions.get(Region::Weights) as usize;
    let mut found: Option<(&Arc<Mmap>, usize)> = None;
    for (_, v) in g.values() {
        let ValueDef::Weight(name) = &v.def else {
            continue;
        };
        let Some(t) = by_name.get(&(true, v.name.as_str())) else {
            continue;
        };
        let (map, at) = module.weights.mapped(name)?;
        let start = at.start.checked_sub(t.offset as usize)?;
        match found {
            None => found = Some((map, start)),
            Some((m, s)) if Arc::ptr_eq(m, map) && s == start => {}
            Some(_) => return None,
        }
    }
    let (map, start) = found?;
    RegionBuf::mapped(map.clone(), start, len)
}

/// A graph input or output and its slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub name: String,
    pub region: Region,
    pub offset: usize,
    pub bytes: usize,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

struct Step {
    node: usize,
    kernel: Kernel,
    inputs: Vec<TensorRef>,
    outputs: Vec<TensorRef>,
}

/// A planned graph loaded for execution.
pub struct Executor {
    graph: String,
    labels: Vec<String>,
    /// Indexed by [`region_index`]; the weights and KV cache regions may be
    /// shared with other executors ([`Executor::load_sharing`]).
    regions: Vec<Rc<RegionBuf>>,
    sizes: RegionSizes,
    steps: Vec<Step>,
    inputs: Vec<Slot>,
    outputs: Vec<Slot>,
    /// Every planned value but the weights, by name (what
    /// [`Executor::read`] finds).
    values: HashMap<String, Slot>,
}

fn region_index(r: Region) -> usize {
    Region::ALL
        .iter()
        .position(|&x| x == r)
        .expect("every region")
}

impl Executor {
    /// Loads graph `graph` of `module` with its plan (see the module doc).
    pub fn load(
        module: &Module,
        graph: &str,
        kernels: &dyn KernelSet,
    ) -> Result<Executor, ExecError> {
        Executor::load_sharing(module, graph, kernels, None)
    }

    /// [`Executor::load`], but sharing the weights and KV cache regions of
    /// `shared`, an executor of another graph of the same module (another
    /// bucket): one copy of the weights (this graph's are written into it
    /// again, the same bytes at the same offsets), and a step of either sees
    /// the cache the other wrote. Fails unless both plans give those
    /// regions the same sizes (the planner lays them out per module).
    pub fn load_sharing(
        module: &Module,
        graph: &str,
        kernels: &dyn KernelSet,
        shared: Option<&Executor>,
    ) -> Result<Executor, ExecError> {
        let plan: &MemoryPlan = module.plans.get(graph).ok_or_else(|| ExecError {
            graph: graph.to_string(),
            node: None,
            message: "no memory plan (run plan-memory)".to_string(),
        })?;
        Executor::load_planned(module, graph, plan, kernels, shared)
    }

    /// [`Executor::load_sharing`] with the plan given instead of the
    /// module's (an unplanned run: [`MemoryPlan::unshared`]).
    pub fn load_planned(
        module: &Module,
        graph: &str,
        plan: &MemoryPlan,
        kernels: &dyn KernelSet,
        shared: Option<&Executor>,
    ) -> Result<Executor, ExecError> {
        let err = |node: Option<String>, message: String| ExecError {
            graph: graph.to_string(),
            node,
            message,
        };
        let g = module
            .graph(graph)
            .ok_or_else(|| err(None, "no such graph".to_string()))?;
        slmcc_ir::plan::check_against(plan, g)
            .map_err(|e| err(None, format!("memory plan: {e}")))?;
        crate::budget::check_plan(plan, crate::budget::budget()).map_err(|m| err(None, m))?;
        let by_name = plan.by_name();
        const SHARED: [Region; 2] = [Region::Weights, Region::KvCache];
        let regions = Region::ALL
            .iter()
            .map(|&r| match shared {
                // A mapped weights region is shared only when this graph's
                // weights lie in it at their planned offsets too; else
                // this graph gets a copy of its own.
                Some(other)
                    if r == Region::Weights
                        && other.weights_in_place()
                        && g.values().any(|(_, v)| matches!(v.def, ValueDef::Weight(_)))
                        && mapped_weights(module, g, plan, &by_name)
                            .is_none_or(|m| m.ptr != other.regions[region_index(r)].ptr) =>
                {
                    RegionBuf::new(plan.regions.get(r) as usize).map(Rc::new)
                }
                Some(other) if SHARED.contains(&r) => {
                    let buf = &other.regions[region_index(r)];
                    if buf.len != plan.regions.get(r) as usize {
                        return Err(format!(
                            "its {r} region ({} bytes) differs from @{}'s ({} bytes), which it shares",
                            plan.regions.get(r),
                            other.graph,
                            buf.len
                        ));
                    }
                    Ok(buf.clone())
                }
                _ if r == Region::Weights => Ok(Rc::new(
                    mapped_weights(module, g, plan, &by_name)
                        .map_or_else(|| RegionBuf::new(plan.regions.get(r) as usize), Ok)?,
                )),
                _ => RegionBuf::new(plan.regions.get(r) as usize).map(Rc::new),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| err(None, m))?;
        let weights_in_place = regions[region_index(Region::Weights)].mapped.is_some();

        // Where each value lives.
        let mut place: Vec<Option<(Region, usize)>> = vec![None; g.value_count()];
        for (id, v) in g.values() {
            let weight = matches!(v.def, ValueDef::Weight(_));
            if let Some(t) = by_name.get(&(weight, v.name.as_str())) {
                place[id.index()] = Some((t.region, t.offset as usize));
            }
        }
        let tensor_ref = |v: slmcc_ir::ValueId| -> TensorRef {
            let (r, off) = place[v.index()].expect("every used value is planned");
            let ty = g.ty(v);
            TensorRef {
                ptr: regions[region_index(r)].at(off),
                bytes: slmcc_ir::plan::value_bytes(ty).expect("planned types are static") as usize,
                dtype: ty.dtype,
                shape: ty.shape.as_fixed().expect("planned types are static"),
            }
        };
        let write = |r: &TensorRef, bytes: &[u8]| {
            assert_eq!(bytes.len(), r.bytes, "a value's bytes match its type");
            // SAFETY: `r` points at `r.bytes` bytes of a region we own.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), r.ptr, r.bytes) };
        };

        for (id, v) in g.values() {
            if weights_in_place {
                break;
            }
            if let (ValueDef::Weight(name), Some(_)) = (&v.def, place[id.index()]) {
                let t = module
                    .weights
                    .tensor(name)
                    .map_err(|e| err(None, e.to_string()))?
                    .ok_or_else(|| err(None, format!("weight @{name} has no data")))?;
                write(&tensor_ref(id), &t.to_le_bytes());
            }
        }
        let mut steps = Vec::with_capacity(g.nodes.len());
        for (n, node) in g.nodes.iter().enumerate() {
            if let Op::Constant(c) = &node.op {
                let t = c.value.as_tensor(c.ty.dtype).ok_or_else(|| {
                    err(
                        Some(node_label(g, n)),
                        "constant is still symbolic".to_string(),
                    )
                })?;
                write(&tensor_ref(node.outputs[0]), &t.to_le_bytes());
                continue;
            }
            let kernel = kernels
                .kernel(g, n)
                .and_then(|k| crate::kernel_fault::wrap(g, n, k))
                .map_err(|m| err(Some(node_label(g, n)), m))?;
            steps.push(Step {
                node: n,
                kernel,
                inputs: node.inputs.iter().map(|&v| tensor_ref(v)).collect(),
                outputs: node.outputs.iter().map(|&v| tensor_ref(v)).collect(),
            });
        }
        let slot = |v: slmcc_ir::ValueId| {
            let (region, offset) = place[v.index()].expect("planned");
            let r = tensor_ref(v);
            Slot {
                name: g.value(v).name.clone(),
                region,
                offset,
                bytes: r.bytes,
                dtype: r.dtype,
                shape: r.shape,
            }
        };
        let inputs = g.inputs.iter().map(|&v| slot(v)).collect();
        let outputs = g.outputs.iter().map(|&v| slot(v)).collect();
        let values = g
            .values()
            .filter(|(id, v)| !matches!(v.def, ValueDef::Weight(_)) && place[id.index()].is_some())
            .map(|(id, v)| (v.name.clone(), slot(id)))
            .collect();
        Ok(Executor {
            graph: graph.to_string(),
            labels: (0..g.nodes.len()).map(|n| node_label(g, n)).collect(),
            regions,
            sizes: plan.regions,
            steps,
            inputs,
            outputs,
            values,
        })
    }

    /// The bytes held per region (allocated once at load).
    /// Whether the weights region is the module's weights mapping used in
    /// place (no copy at load).
    pub fn weights_in_place(&self) -> bool {
        self.regions[region_index(Region::Weights)].mapped.is_some()
    }

    pub fn region_sizes(&self) -> RegionSizes {
        self.sizes
    }

    pub fn inputs(&self) -> &[Slot] {
        &self.inputs
    }

    pub fn outputs(&self) -> &[Slot] {
        &self.outputs
    }

    /// The arena bytes of input `i`, to write before every [`Executor::run`]
    /// (the plan reuses an input's bytes once its last reader has run).
    pub fn input_mut(&mut self, i: usize) -> &mut [u8] {
        let s = &self.inputs[i];
        let p = self.regions[region_index(s.region)].at(s.offset);
        // SAFETY: the slot lies inside the region; `&mut self` makes this the
        // only access while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(p, s.bytes) }
    }

    /// The bytes of output `i`, valid after [`Executor::run`].
    pub fn output(&self, i: usize) -> &[u8] {
        self.bytes(&self.outputs[i])
    }

    fn bytes(&self, s: &Slot) -> &[u8] {
        let p = self.regions[region_index(s.region)].at(s.offset);
        // SAFETY: the slot lies inside the region; `&self` rules out writes.
        unsafe { std::slice::from_raw_parts(p, s.bytes) }
    }

    /// The value named `name` as its bytes hold it now, with its slot (after
    /// [`Executor::run`] with an unshared plan: its value in that run; with
    /// a planned arena, the bytes may have been reused since).
    pub fn read(&self, name: &str) -> Option<(&Slot, &[u8])> {
        let s = self.values.get(name)?;
        Some((s, self.bytes(s)))
    }

    /// Runs every step. Allocates nothing unless a kernel fails (the error
    /// names the node).
    pub fn run(&mut self) -> Result<(), ExecError> {
        let scratch = &self.regions[region_index(Region::Scratch)];
        for step in &self.steps {
            let args = KernelArgs {
                inputs: &step.inputs,
                outputs: &step.outputs,
                scratch: scratch.at(0),
                scratch_bytes: scratch.len,
            };
            if let Err(KernelError(message)) = (step.kernel)(&args) {
                return Err(ExecError {
                    graph: self.graph.clone(),
                    node: Some(self.labels[step.node].clone()),
                    message: message.to_string(),
                });
            }
        }
        Ok(())
    }
}
