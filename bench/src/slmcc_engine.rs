//! slmcc's side: the model prepared as `slmcc compile --target cpu` and
//! `slmcc run --backend cpu --buckets` prepare it, then one step of
//! [`PlannedBuckets`] timed.
//!
//! The ONNX file is imported, the compiler's own pipeline
//! ([`slmcc::pipeline::plan_pipeline`]: fusion, `bucket-specialize` with one
//! bucket per prefill length, `plan-memory`) runs, verified, and every
//! bucket is loaded once with its kernels (Cranelift JIT; large matmuls
//! call the host GEMM) into its planned arena ([`PlannedBuckets::load_jit`],
//! default [`CpuOptions`]: FMA and the fast vector math, as `slmcc run`). A prefill of `len` tokens is one
//! [`PlannedBuckets::step`] on the bucket of exactly `len`, so nothing is
//! padded; the step copies the ids in and the logits out and allocates
//! nothing.
//!
//! With a [`Profile`], the buckets are loaded a second time with every
//! kernel wrapped in a timer (a [`KernelSet`] around [`JitKernels`]); the
//! times per node then add up per op kind. The wrapper costs two clock
//! reads per kernel, which is why the latency itself is measured without
//! it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use slmcc::pipeline::{BucketSpec, Pipeline};
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::{DType, Graph, Module, OpDef, Tensor};
use slmcc_runtime::bucket::Padding;
use slmcc_runtime::exec::{ExecError, KernelSet};
use slmcc_runtime::jit::JitKernels;
use slmcc_runtime::planned::PlannedBuckets;
use slmcc_runtime::timed::{Recorder, TimedKernels};

/// slmcc's cpu options for the benchmark's thread count (what `slmcc run
/// --threads N` compiles with: kernels that parallelise, the host GEMM,
/// use that many threads, the calling one included). Returns a note for
/// the table header when the request is not honoured as asked.
pub fn cpu_options(threads: usize) -> (CpuOptions, Option<String>) {
    let got = threads.clamp(1, slmcc_backends::cpu::MAX_THREADS);
    let options = CpuOptions {
        threads: got,
        ..CpuOptions::default()
    };
    let note =
        (got != threads).then(|| format!("slmcc runs on {got} threads (asked for {threads})"));
    (options, note)
}

/// A model loaded for the benchmark: one bucket per prefill length.
pub struct SlmccModel {
    planned: PlannedBuckets,
    /// The last dim of the logits (the vocabulary).
    pub vocab: usize,
}

/// The module after the compiler's pipeline, and its base graph's name.
pub struct Prepared {
    module: Module,
    base: String,
}

/// Imports `path` and runs the pipeline that plans it for `lens`.
pub fn prepare(path: &Path, lens: &[usize]) -> anyhow::Result<Prepared> {
    let mut module = slmcc::onnx::import_model(path)
        .with_context(|| format!("slmcc: cannot import {}", path.display()))?;
    let base = match module.graph("main") {
        Some(g) => g.name.clone(),
        None => match &module.graphs[..] {
            [g] => g.name.clone(),
            gs => bail!(
                "{}: {} graphs and none is named `main`",
                path.display(),
                gs.len()
            ),
        },
    };
    let pipeline = Pipeline::fusion()
        .buckets(BucketSpec::Sizes(lens.to_vec()))
        .planned();
    pipeline
        .run(&mut module)
        .with_context(|| format!("slmcc: {}: pipeline `{}`", path.display(), pipeline.text()))?;
    Ok(Prepared { module, base })
}

fn exec_err(e: ExecError) -> anyhow::Error {
    anyhow!("slmcc: {e}")
}

impl SlmccModel {
    /// Loads every bucket of `prepared` with plain JIT kernels.
    pub fn load(prepared: &Prepared, options: &CpuOptions) -> anyhow::Result<SlmccModel> {
        let planned = PlannedBuckets::load_jit(
            &prepared.module,
            &prepared.base,
            Padding::default(),
            &|_| true,
            options,
        )
        .map_err(exec_err)?;
        SlmccModel::new(planned)
    }

    /// Loads every bucket of `prepared` with each kernel timed into `profile`.
    pub fn load_profiled(
        prepared: &Prepared,
        profile: &Profile,
        options: &CpuOptions,
    ) -> anyhow::Result<SlmccModel> {
        let kernels = |g: &Graph| -> Result<Box<dyn KernelSet>, ExecError> {
            let inner = JitKernels::compile(g, options).map_err(|e| ExecError {
                graph: g.name.clone(),
                node: None,
                message: format!("cpu backend: {e}"),
            })?;
            let times = profile.register(g);
            let record: Recorder = Rc::new(move |node, nanos| times.add(node, nanos));
            Ok(Box::new(TimedKernels { inner, record }))
        };
        let planned = PlannedBuckets::load(
            &prepared.module,
            &prepared.base,
            Padding::default(),
            &|_| true,
            &kernels,
        )
        .map_err(exec_err)?;
        SlmccModel::new(planned)
    }

    fn new(planned: PlannedBuckets) -> anyhow::Result<SlmccModel> {
        let ins: Vec<&str> = planned.input_names().collect();
        let outs: Vec<&str> = planned.output_names().collect();
        if ins.len() != 1 || outs.is_empty() {
            bail!(
                "slmcc: expected one input (token ids) and the logits first among the outputs, \
                 got inputs {ins:?} and outputs {outs:?}"
            );
        }
        let shape = planned.input_shape(0, 7);
        if shape != [1, 7] {
            bail!(
                "slmcc: input `{}` is not [1, seq] (at seq = 7: {shape:?})",
                ins[0]
            );
        }
        let out = planned.output_shape(0, 7);
        let vocab = match out[..] {
            [1, 7, v] => v,
            _ => bail!(
                "slmcc: output `{}` is not [1, seq, vocab] (at seq = 7: {out:?})",
                outs[0]
            ),
        };
        Ok(SlmccModel { planned, vocab })
    }

    /// The graph of the bucket that runs `len` tokens (there is one per length).
    pub fn bucket_graph(&self, len: usize) -> anyhow::Result<&str> {
        let b = self
            .planned
            .pick(len)
            .ok_or_else(|| anyhow!("slmcc: no bucket holds {len} tokens"))?;
        Ok(&self.planned.buckets()[b].graph)
    }

    /// Buffers for a prefill of `ids` (the step's input bytes and room for the logits).
    pub fn buffers(&self, ids: &[i64]) -> StepBuffers {
        let input = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        let mut outputs: Vec<Vec<u8>> = Vec::new();
        for i in 0..self.planned.output_names().count() {
            let shape = self.planned.output_shape(i, ids.len());
            outputs.push(vec![0u8; shape.iter().product::<usize>() * 4]);
        }
        StepBuffers {
            len: ids.len(),
            input,
            outputs,
        }
    }

    /// One prefill step: what the benchmark times. Kept out of line so that a
    /// profiler can collect only inside it (`callgrind --toggle-collect`).
    #[inline(never)]
    pub fn run_step(&mut self, buf: &mut StepBuffers) -> anyhow::Result<()> {
        let mut outs: Vec<&mut [u8]> = buf.outputs.iter_mut().map(Vec::as_mut_slice).collect();
        self.planned
            .step(buf.len, &[&buf.input], &mut outs)
            .map_err(exec_err)?;
        Ok(())
    }

    /// The logits of the last step run on `buf`.
    pub fn logits(&self, buf: &StepBuffers) -> anyhow::Result<Tensor> {
        Tensor::from_le_bytes(DType::F32, vec![1, buf.len, self.vocab], &buf.outputs[0])
            .map_err(|e| anyhow!("slmcc: logits: {e}"))
    }
}

/// What one step reads and writes.
pub struct StepBuffers {
    len: usize,
    input: Vec<u8>,
    outputs: Vec<Vec<u8>>,
}

/// Time per node of each bucket graph, filled by timed kernels.
#[derive(Default)]
pub struct Profile {
    graphs: RefCell<BTreeMap<String, Rc<GraphTimes>>>,
}

/// One graph's nodes and the time and calls each kernel has accumulated.
pub struct GraphTimes {
    /// Per node: op mnemonic, the node's label (`%name`), its first result's type.
    nodes: Vec<(&'static str, String, String)>,
    nanos: Vec<Cell<u64>>,
    calls: Vec<Cell<u64>>,
}

impl GraphTimes {
    /// Adds one call of `node` that took `nanos`.
    fn add(&self, node: usize, nanos: u64) {
        if let (Some(slot), Some(calls)) = (self.nanos.get(node), self.calls.get(node)) {
            slot.set(slot.get() + nanos);
            calls.set(calls.get() + 1);
        }
    }
}

/// A profile of one step, per op kind and per node.
pub struct Breakdown {
    /// `(op, nodes, time per step)`, slowest first.
    pub by_op: Vec<(&'static str, usize, Duration)>,
    /// `(node label, op, result type, time per step)`, slowest first.
    pub by_node: Vec<(String, &'static str, String, Duration)>,
    /// The kernels' time per step, all together.
    pub kernels: Duration,
}

impl Profile {
    fn register(&self, g: &Graph) -> Rc<GraphTimes> {
        let nodes = g
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let ty = node
                    .outputs
                    .first()
                    .map(|&v| g.ty(v).to_string())
                    .unwrap_or_default();
                (node.op.mnemonic(), slmcc_ir::verify::node_label(g, n), ty)
            })
            .collect::<Vec<_>>();
        let n = nodes.len();
        let times = Rc::new(GraphTimes {
            nodes,
            nanos: (0..n).map(|_| Cell::new(0)).collect(),
            calls: (0..n).map(|_| Cell::new(0)).collect(),
        });
        self.graphs
            .borrow_mut()
            .insert(g.name.clone(), times.clone());
        times
    }

    /// Clears the times of `graph`.
    pub fn reset(&self, graph: &str) {
        if let Some(t) = self.graphs.borrow().get(graph) {
            t.nanos.iter().chain(&t.calls).for_each(|c| c.set(0));
        }
    }

    /// The times of `graph` per step, over `steps` steps since the last reset.
    pub fn breakdown(&self, graph: &str, steps: usize) -> anyhow::Result<Breakdown> {
        let graphs = self.graphs.borrow();
        let t = graphs
            .get(graph)
            .ok_or_else(|| anyhow!("profile: no graph @{graph}"))?;
        let steps = steps.max(1) as u64;
        let per_step = |nanos: u64| Duration::from_nanos(nanos / steps);
        let mut by_op: BTreeMap<&'static str, (usize, u64)> = BTreeMap::new();
        let mut by_node = Vec::new();
        let mut total = 0u64;
        for (i, (op, label, ty)) in t.nodes.iter().enumerate() {
            if t.calls[i].get() == 0 {
                continue; // constants have no kernel
            }
            let nanos = t.nanos[i].get();
            total += nanos;
            let e = by_op.entry(op).or_default();
            e.0 += 1;
            e.1 += nanos;
            by_node.push((label.clone(), *op, ty.clone(), per_step(nanos)));
        }
        let mut by_op: Vec<_> = by_op
            .into_iter()
            .map(|(op, (n, nanos))| (op, n, per_step(nanos)))
            .collect();
        by_op.sort_by_key(|o| std::cmp::Reverse(o.2));
        by_node.sort_by_key(|n| std::cmp::Reverse(n.3));
        Ok(Breakdown {
            by_op,
            by_node,
            kernels: per_step(total),
        })
    }
}
