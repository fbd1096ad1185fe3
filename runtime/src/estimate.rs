//! The estimated time of a bucket graph on the modelled RK3588 board: an
//! estimate of our models, never a measurement.
//!
//! NPU nodes (the `partition` pass's placement) are timed by the
//! simulator's timing model ([`NpuSim::time`]: the program's cycles, DDR
//! bytes and MACs exactly as a full simulation counts them, without
//! computing data), plus the per-token activation quantization that runs on
//! the CPU before each of them. CPU nodes are timed by a roofline of the
//! board's Cortex-A76 cores ([`BoardCpu`]): the larger of their arithmetic
//! at a fixed fraction of the cores' peak and their bytes at the CPU's DDR
//! bandwidth, plus a fixed overhead per kernel. Nodes run one after the
//! other (the CPU and the NPU do not overlap). The constants are documented
//! in `docs/NPU_ISA.md` ("Estimates").

use std::collections::HashMap;

use slmcc_backends::npu::Target;
use slmcc_ir::placement::{macs, place, Device};
use slmcc_ir::{Graph, Op, OpDef};

use crate::npu::plan_node_keys;
use crate::npu_sim::{npu_utilisation, NpuSim};

/// The board's CPU side, as the estimate models it.
#[derive(Clone, Debug, PartialEq)]
pub struct BoardCpu {
    /// Cores the kernels use (the A76 cluster).
    pub cores: u32,
    pub clock_hz: f64,
    /// f32 FLOPs per cycle per core at peak: two 128-bit FMA pipes.
    pub flops_per_cycle: f64,
    /// The fraction of peak the kernels reach on arithmetic-bound work.
    pub efficiency: f64,
    /// DDR bandwidth the CPU reaches, bytes per second.
    pub ddr_bytes_per_sec: f64,
    /// Fixed cost of one kernel call, seconds.
    pub kernel_overhead_sec: f64,
}

impl BoardCpu {
    /// RK3588: 4 × Cortex-A76 at 2.4 GHz, 16 f32 FLOPs/cycle, half of
    /// peak reached, 20 GB/s of the LPDDR4x's 25 GB/s, 2 µs per kernel.
    pub fn rk3588() -> BoardCpu {
        BoardCpu {
            cores: 4,
            clock_hz: 2.4e9,
            flops_per_cycle: 16.0,
            efficiency: 0.5,
            ddr_bytes_per_sec: 20e9,
            kernel_overhead_sec: 2e-6,
        }
    }

    /// Seconds for `flops` of arithmetic over `bytes` of memory traffic.
    pub fn seconds(&self, flops: f64, bytes: f64) -> f64 {
        let peak = f64::from(self.cores) * self.clock_hz * self.flops_per_cycle * self.efficiency;
        (flops / peak).max(bytes / self.ddr_bytes_per_sec) + self.kernel_overhead_sec
    }
}

/// The estimate of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeEstimate {
    pub node: usize,
    pub op: &'static str,
    pub device: Device,
    /// Operand and result shapes, for grouping (`1x64x1536 · 1536x8960`).
    pub shape: String,
    pub seconds: f64,
    /// NPU: the simulator's cycles.
    pub cycles: u64,
    pub ddr_bytes: u64,
    /// Multiply-accumulates (matmul-like nodes).
    pub macs: u64,
}

/// The estimate of one bucket graph.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphEstimate {
    pub graph: String,
    pub nodes: Vec<NodeEstimate>,
}

impl GraphEstimate {
    /// Seconds on `device`.
    pub fn seconds_on(&self, device: Device) -> f64 {
        self.nodes
            .iter()
            .filter(|n| n.device == device)
            .map(|n| n.seconds)
            .sum()
    }

    /// Seconds of the whole graph.
    pub fn seconds(&self) -> f64 {
        self.nodes.iter().map(|n| n.seconds).sum()
    }

    /// NPU MAC utilisation over the NPU nodes' cycles.
    pub fn npu_utilisation(&self, t: &Target) -> f64 {
        let npu = || self.nodes.iter().filter(|n| n.device == Device::Npu);
        let cycles: u64 = npu().map(|n| n.cycles).sum();
        let macs: u64 = npu().map(|n| n.macs).sum();
        npu_utilisation(t, macs, cycles)
    }

    /// Nodes grouped by device, op and shapes, in first-seen order:
    /// `(first node, count, summed seconds, cycles, DDR bytes, MACs)`.
    pub fn grouped(&self) -> Vec<(NodeEstimate, usize)> {
        let mut order: Vec<(NodeEstimate, usize)> = Vec::new();
        let mut at: HashMap<(Device, &str, &str), usize> = HashMap::new();
        for n in &self.nodes {
            match at.get(&(n.device, n.op, n.shape.as_str())) {
                Some(&i) => {
                    let (g, count) = &mut order[i];
                    g.seconds += n.seconds;
                    g.cycles += n.cycles;
                    g.ddr_bytes += n.ddr_bytes;
                    g.macs += n.macs;
                    *count += 1;
                }
                None => {
                    at.insert((n.device, n.op, n.shape.as_str()), order.len());
                    order.push((n.clone(), 1));
                }
            }
        }
        order
    }
}

/// What the estimate assumes about the run.
#[derive(Clone, Debug, PartialEq)]
pub struct EstimateOptions {
    /// Keys an attention over a KV cache visits (the filled part: the CPU
    /// kernel skips the empty slots), e.g. the prompt length.
    pub context: usize,
}

fn shape_of(g: &Graph, v: slmcc_ir::ValueId) -> Vec<usize> {
    g.ty(v).shape.as_fixed().unwrap_or_default()
}

fn bytes_of(g: &Graph, v: slmcc_ir::ValueId) -> u64 {
    let n: usize = shape_of(g, v).iter().product();
    g.ty(v).dtype.bytes_for(n) as u64
}

fn shape_text(g: &Graph, i: usize) -> String {
    let node = &g.nodes[i];
    let dims = |v| {
        shape_of(g, v)
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join("x")
    };
    let ins: Vec<String> = node.inputs.iter().map(|&v| dims(v)).collect();
    format!("{} -> {}", ins.join(", "), dims(node.outputs[0]))
}

/// FLOPs and DDR bytes of a CPU node (see the module docs).
fn cpu_work(g: &Graph, i: usize, o: &EstimateOptions) -> (f64, f64) {
    let node = &g.nodes[i];
    let out: f64 = node
        .outputs
        .iter()
        .map(|&v| shape_of(g, v).iter().product::<usize>() as f64)
        .sum();
    let mut bytes: f64 = node
        .inputs
        .iter()
        .chain(&node.outputs)
        .map(|&v| bytes_of(g, v) as f64)
        .sum();
    let flops = match &node.op {
        Op::MatMul(_) | Op::QMatMul(_) | Op::QSwiGlu(_) => 2.0 * macs(g, i) as f64,
        Op::Glu(_) => {
            let (w, x) = (shape_of(g, node.inputs[1]), shape_of(g, node.inputs[0]));
            let rows = x.iter().rev().skip(1).product::<usize>() as f64;
            2.0 * rows
                * w.iter().product::<usize>() as f64
                * if node.inputs.len() > 2 { 2.0 } else { 1.0 }
        }
        Op::Attention(_) => {
            let (q, k, v) = (
                shape_of(g, node.inputs[0]),
                shape_of(g, node.inputs[1]),
                shape_of(g, node.inputs[2]),
            );
            let (t, d) = (k[k.len() - 2], q[q.len() - 1]);
            let keys = if node.inputs.len() > 3 {
                t.min(o.context)
            } else {
                t
            };
            let dv = v[v.len() - 1];
            // Only the visited keys' cache rows are read.
            let kv = (bytes_of(g, node.inputs[1]) + bytes_of(g, node.inputs[2])) as f64;
            bytes -= kv * (1.0 - keys as f64 / t.max(1) as f64);
            let queries: f64 = q[..q.len() - 1].iter().product::<usize>() as f64;
            2.0 * queries * keys as f64 * (d + dv) as f64
        }
        // Reads only the rows it picks.
        Op::Gather(_) | Op::GatherElements(_) | Op::GatherNd(_) => {
            let out_bytes: u64 = node.outputs.iter().map(|&v| bytes_of(g, v)).sum();
            bytes = (2 * out_bytes + bytes_of(g, node.inputs[1])) as f64;
            0.0
        }
        // Reads the cache's shape, not its data.
        Op::KvMask(_) => {
            bytes = node.outputs.iter().map(|&v| bytes_of(g, v) as f64).sum();
            out
        }
        // Writes only the step's rows into the cache (in place).
        Op::KvWrite(_) => {
            bytes = 2.0 * bytes_of(g, node.inputs[1]) as f64;
            0.0
        }
        _ => 8.0 * out,
    };
    (flops, bytes)
}

/// The estimate of `g` (a bucket graph: static shapes).
pub fn estimate_graph(
    g: &Graph,
    target: &Target,
    cpu: &BoardCpu,
    o: &EstimateOptions,
) -> Result<GraphEstimate, String> {
    let placement = place(g);
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for (i, p) in placement.iter().enumerate() {
        let node = &g.nodes[i];
        let op = node.op.mnemonic();
        let shape = shape_text(g, i);
        // Constants are in the package; views of a buffer copy nothing
        // once planned in place.
        let free = matches!(
            node.op,
            Op::Constant(_) | Op::Reshape(_) | Op::Squeeze(_) | Op::Unsqueeze(_) | Op::Identity(_)
        );
        if free {
            continue;
        }
        match p.device {
            Device::Npu => {
                // Attention over a cache reads the filled slots only (the
                // runtime runs the program for the key tiles its mask keeps).
                let keys = (matches!(node.op, Op::Attention(_)) && node.inputs.len() > 3)
                    .then_some(o.context);
                let k = plan_node_keys(g, i, target, keys)?;
                let stats = NpuSim::time(target, &k.program).map_err(|e| e.to_string())?;
                let npu = stats.cycles as f64 / target.clock_hz as f64;
                // A quantized matmul's activations are quantized on the CPU
                // first: f32 in, INT8 and the row records out. About 4 FLOPs
                // per element (min/max, scale, round), and the f32 read plus
                // the INT8 write: 1.25 × the f32 bytes.
                let quantize = if matches!(node.op, Op::QMatMul(_) | Op::QSwiGlu(_)) {
                    let x = bytes_of(g, node.inputs[0]) as f64;
                    cpu.seconds(x, x * 1.25)
                } else {
                    0.0
                };
                nodes.push(NodeEstimate {
                    node: i,
                    op,
                    device: Device::Npu,
                    shape,
                    seconds: npu + quantize,
                    cycles: stats.cycles,
                    ddr_bytes: stats.ddr_bytes_read + stats.ddr_bytes_written,
                    macs: stats.macs,
                });
            }
            Device::Cpu => {
                let (flops, bytes) = cpu_work(g, i, o);
                nodes.push(NodeEstimate {
                    node: i,
                    op,
                    device: Device::Cpu,
                    shape,
                    seconds: cpu.seconds(flops, bytes),
                    cycles: 0,
                    ddr_bytes: bytes as u64,
                    macs: macs(g, i),
                });
            }
        }
    }
    Ok(GraphEstimate {
        graph: g.name.clone(),
        nodes,
    })
}
