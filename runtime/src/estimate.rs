//! The estimated time of a bucket graph on the modelled RK3588 board: an
//! estimate of our models, never a measurement.
//!
//! The NPU takes what the RK3588's register interface runs
//! (`docs/NPU.md`): the W8A8 `qmatmul` and `qswiglu` nodes that the
//! placement puts there, each with its register program
//! ([`ProductProgram`]). Their integer products are timed by the tile
//! model of the register interface ([`TilePlan::estimate`] of the
//! program's plan, once per weight operand: per task a
//! setup, the CBUF fill and drain at the DDR bandwidth, the MACs at the
//! core's rate; the slowest core sets the time). The CPU's part of such a
//! node is added to it: quantizing the activations into feature cubes,
//! adding up the K blocks' partial sums, the scales, and a `qswiglu`'s
//! SiLU·up. Every other node, 4-bit products included, runs on the CPU,
//! timed by a roofline of the board's Cortex-A76 cores ([`BoardCpu`]):
//! the larger of their arithmetic at a fixed fraction of the cores' peak
//! and their bytes at the CPU's DDR bandwidth, plus a fixed overhead per
//! kernel. Nodes run one after the other (the CPU and the NPU do not
//! overlap).

use std::collections::HashMap;

use slmcc_backends::npu::lower::ProductProgram;
use slmcc_backends::npu::regcmd::tiling::TilePlan;
use slmcc_backends::npu::Target;
use slmcc_ir::placement::{macs, Device};
use slmcc_ir::{Graph, Op, OpDef};

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
    /// The node's whole time (an NPU node's CPU part included).
    pub seconds: f64,
    /// NPU nodes: the time of the NPU's tasks alone, and their count.
    pub npu_seconds: f64,
    pub tasks: u64,
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
        // An empty f64 sum is -0.0; `+ 0.0` makes it the 0 a report prints.
        self.nodes
            .iter()
            .filter(|n| n.device == device)
            .map(|n| n.seconds)
            .sum::<f64>()
            + 0.0
    }

    /// Seconds of the whole graph.
    pub fn seconds(&self) -> f64 {
        self.nodes.iter().map(|n| n.seconds).sum()
    }

    /// NPU MAC utilisation over the NPU tasks' time.
    pub fn npu_utilisation(&self, t: &Target) -> f64 {
        let npu = || self.nodes.iter().filter(|n| n.device == Device::Npu);
        let seconds: f64 = npu().map(|n| n.npu_seconds).sum();
        let macs: u64 = npu().map(|n| n.macs).sum();
        npu_utilisation(t, macs, seconds)
    }

    /// Nodes grouped by device, op and shapes, in first-seen order: the
    /// first node with the group's times, tasks, DDR bytes and MACs
    /// summed, and the count.
    pub fn grouped(&self) -> Vec<(NodeEstimate, usize)> {
        let mut order: Vec<(NodeEstimate, usize)> = Vec::new();
        let mut at: HashMap<(Device, &str, &str), usize> = HashMap::new();
        for n in &self.nodes {
            match at.get(&(n.device, n.op, n.shape.as_str())) {
                Some(&i) => {
                    let (g, count) = &mut order[i];
                    g.seconds += n.seconds;
                    g.npu_seconds += n.npu_seconds;
                    g.tasks += n.tasks;
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

/// The fraction of the NPU's peak (all cores' MACs per cycle) that `macs`
/// in `seconds` reach.
pub fn npu_utilisation(t: &Target, macs: u64, seconds: f64) -> f64 {
    let peak = f64::from(t.cores) * f64::from(t.macs_per_cycle) * t.clock_hz as f64;
    if seconds > 0.0 {
        macs as f64 / (seconds * peak)
    } else {
        0.0
    }
}

/// The estimate of a product on the register interface: its NPU tasks,
/// and the CPU's work around them (see the module docs), as
/// `(plan, operands, NPU estimate seconds, CPU FLOPs, CPU bytes)`.
fn register_work(p: &ProductProgram, target: &Target) -> (TilePlan, u64, f64, f64, f64) {
    let plan = p.plan();
    let operands = p.weights.len() as u64;
    let npu = operands as f64 * plan.estimate(target).seconds;
    let (m, k) = (f64::from(p.rows), f64::from(p.k));
    let cols = operands as f64 * f64::from(p.n);
    let (blocks, groups) = (f64::from(plan.k_blocks()), f64::from(p.k / p.group));
    // Quantizing: about 4 FLOPs per element (min/max, scale, round), the
    // f32 read and the INT8 feature cube written.
    let mut flops = 4.0 * m * k;
    let mut bytes = 5.0 * m * k;
    // The K blocks' int32 partials read and added; per group the zero
    // point's correction and the scale (column sums and scales read); f32
    // out.
    flops += m * cols * (blocks + 3.0 * groups);
    bytes += 4.0 * m * cols * blocks + 8.0 * groups * cols + 4.0 * m * cols;
    if p.swiglu {
        // (g · sigmoid(g)) · u: about 8 FLOPs per output.
        flops += 4.0 * m * cols;
    }
    (plan, operands, npu, flops, bytes)
}

/// The estimate of `g` (a bucket graph: static shapes), whose NPU
/// products have the register programs `programs`.
pub fn estimate_graph(
    g: &Graph,
    programs: &[ProductProgram],
    target: &Target,
    cpu: &BoardCpu,
    o: &EstimateOptions,
) -> GraphEstimate {
    let mut nodes = Vec::with_capacity(g.nodes.len());
    for (i, node) in g.nodes.iter().enumerate() {
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
        match programs.iter().find(|p| p.node as usize == i) {
            Some(p) => {
                let (plan, operands, npu, flops, bytes) = register_work(p, target);
                nodes.push(NodeEstimate {
                    node: i,
                    op,
                    device: Device::Npu,
                    shape,
                    seconds: npu + cpu.seconds(flops, bytes),
                    npu_seconds: npu,
                    tasks: p.tasks.len() as u64,
                    ddr_bytes: operands * plan.ddr_bytes() + bytes as u64,
                    macs: macs(g, i),
                });
            }
            None => {
                let (flops, bytes) = cpu_work(g, i, o);
                nodes.push(NodeEstimate {
                    node: i,
                    op,
                    device: Device::Cpu,
                    shape,
                    seconds: cpu.seconds(flops, bytes),
                    npu_seconds: 0.0,
                    tasks: 0,
                    ddr_bytes: bytes as u64,
                    macs: macs(g, i),
                });
            }
        }
    }
    GraphEstimate {
        graph: g.name.clone(),
        nodes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_backends::npu::lower::{lower_graph, store_weights};
    use slmcc_ir::text::parse_module;
    use slmcc_ir::{DType, Tensor};

    const SRC: &str = "module @m {
  weight @w8 : i8[64, 64]
  weight @s8 : f32[1, 64]
  weight @w4 : i4[64, 32]
  weight @s4 : f32[4, 32]

  graph @main(%x: f32[1, 5, 64]) -> (f32[1, 5, 32]) {
    %h = qmatmul %x, @w8, @s8 {bits = 8, group = 64} : f32[1, 5, 64]
    %r = sigmoid %h : f32[1, 5, 64]
    %y = qmatmul %r, @w4, @s4 {bits = 4, group = 16} : f32[1, 5, 32]
    return %y
  }
}
";

    /// The W8A8 product is timed as the register interface's tasks plus
    /// its CPU part; the 4-bit one and the element-wise op on the CPU.
    #[test]
    fn w8a8_products_on_the_register_interface_the_rest_on_the_cpu() {
        let mut m = parse_module(SRC).unwrap();
        let q = Tensor::from_i64(vec![64, 64], (0..4096).map(|i| i % 200 - 100).collect());
        m.weights.insert("w8", q.cast(DType::I8));
        store_weights(&mut m).unwrap();
        let programs = lower_graph(&m.graphs[0]).unwrap();
        let (t, cpu) = (Target::rk3588(), BoardCpu::rk3588());
        let o = EstimateOptions { context: 5 };
        let e = estimate_graph(&m.graphs[0], &programs, &t, &cpu, &o);
        let devices: Vec<Device> = e.nodes.iter().map(|n| n.device).collect();
        assert_eq!(devices, [Device::Npu, Device::Cpu, Device::Cpu]);
        let plan = programs[0].plan();
        let npu = &e.nodes[0];
        assert_eq!(npu.tasks, plan.task_count());
        assert_eq!(npu.npu_seconds, plan.estimate(&t).seconds);
        assert!(npu.seconds > npu.npu_seconds, "the CPU part is added");
        assert_eq!(npu.macs, 5 * 64 * 64);
        assert_eq!(e.nodes[2].tasks, 0);
        let util = e.npu_utilisation(&t);
        assert!(util > 0.0 && util < 1.0, "{util}");
    }
}
