//! `partition`: which nodes the modelled RK3588 NPU runs and which stay on
//! the CPU (the Cranelift kernels), each with the reason.
//!
//! The placement is a pure function of a graph ([`place`]): the pass
//! reports it (statistics, and one `debug` event per node under
//! `RUST_LOG=slmcc_passes=debug`), and the compiler and the runtime call
//! [`place`] on the same graph to emit and to run the NPU kernels, so the
//! three can never disagree. The IR carries no placement of its own.
//!
//! What the NPU takes in this version: `qmatmul` and `qswiglu` (INT8 or
//! INT4 weights, INT8 activations per token) with static weights and at
//! most 4096 rows, through the weight-stationary kernels of
//! `backends::npu`. The rules
//! for everything else say why it stays on the CPU: `f32` weights (the LM
//! head the `quantize` pass keeps), ops without an NPU kernel yet
//! (attention, norms, RoPE, the gate arithmetic), and the shape and
//! data-movement ops that have no arithmetic to speak of.

use slmcc_ir::{Graph, Module, Op, ValueDef};

use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{failed, Pass, PassError, Statistics};

/// Options of `partition`.
pub const OPTIONS: &[OptionSpec] = &[OptionSpec {
    name: "target",
    kind: OptionKind::Str,
    default: "rk3588",
    help: "the NPU whose kernels decide the placement (rk3588)",
}];

/// Most rows one NPU matmul streams through a weight tile (the ISA's `m`
/// field, `docs/NPU_ISA.md`).
pub const NPU_MAX_ROWS: u64 = 4096;

/// Where a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    Npu,
    Cpu,
}

/// A node's device and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub device: Device,
    pub reason: &'static str,
}

impl Placement {
    fn npu(reason: &'static str) -> Placement {
        Placement {
            device: Device::Npu,
            reason,
        }
    }

    fn cpu(reason: &'static str) -> Placement {
        Placement {
            device: Device::Cpu,
            reason,
        }
    }
}

/// The placement of every node of `g`, in node order.
pub fn place(g: &Graph) -> Vec<Placement> {
    (0..g.nodes.len()).map(|i| place_node(g, i)).collect()
}

fn place_node(g: &Graph, i: usize) -> Placement {
    let node = &g.nodes[i];
    match &node.op {
        Op::QMatMul(_) | Op::QSwiGlu(_) => {
            let what = if matches!(node.op, Op::QSwiGlu(_)) {
                "quantized SwiGLU MLP: weight-stationary kernel, gate and up on one panel, SiLU·up on the vector unit"
            } else {
                "quantized matmul: weight-stationary INT8/INT4 kernel"
            };
            let w = g.ty(node.inputs[1]);
            let rows = rows(g, i);
            let packed = node.inputs[1..]
                .iter()
                .all(|&v| matches!(g.value(v).def, ValueDef::Weight(_)));
            if !packed {
                Placement::cpu(
                    "quantized weights computed at run time (the NPU packs weights at load)",
                )
            } else if w.shape.as_fixed().is_none() {
                Placement::cpu("quantized weights of symbolic shape")
            } else if rows.is_some_and(|r| r > NPU_MAX_ROWS) {
                Placement::cpu("more than 4096 rows for one NPU matmul")
            } else {
                Placement::npu(what)
            }
        }
        Op::MatMul(_) => Placement::cpu(
            "f32 matmul (the NPU multiplies INT8/INT4 weights; quantize keeps the LM head f32)",
        ),
        Op::Glu(_) => Placement::cpu("f32 gated MLP (quantize with glus=keep)"),
        Op::Attention(_) => Placement::cpu("no NPU attention kernel in this version"),
        Op::RmsNorm(_) | Op::AddRmsNorm(_) | Op::LayerNorm(_) | Op::AddLayerNorm(_) => {
            Placement::cpu("no NPU norm kernel in this version (f32 statistics)")
        }
        Op::Rope(_) => Placement::cpu("no NPU RoPE kernel in this version"),
        Op::Gather(_) | Op::GatherElements(_) | Op::GatherNd(_) => {
            Placement::cpu("table lookup (embedding): memory-bound, stays on the CPU")
        }
        Op::KvWrite(_) | Op::KvMask(_) => Placement::cpu("KV-cache bookkeeping"),
        Op::Binary(_) | Op::Unary(_) | Op::Gelu(_) | Op::Softmax(_) | Op::Cast(_) => {
            Placement::cpu("f32 element-wise (the NPU's vector unit is INT8)")
        }
        _ => Placement::cpu("shape or data movement (no arithmetic for the NPU)"),
    }
}

/// Rows of a matmul-like node's first operand (all axes but the last), when
/// static.
fn rows(g: &Graph, i: usize) -> Option<u64> {
    let dims = g.ty(g.nodes[i].inputs[0]).shape.as_fixed()?;
    Some(
        dims[..dims.len().saturating_sub(1)]
            .iter()
            .product::<usize>() as u64,
    )
}

/// Multiply-accumulates of a matmul-like node with static shapes
/// (`rows · K · N`, summed over both products of a `qswiglu`), else 0.
pub fn macs(g: &Graph, i: usize) -> u64 {
    let node = &g.nodes[i];
    if !matches!(node.op, Op::QMatMul(_) | Op::MatMul(_) | Op::QSwiGlu(_)) || node.inputs.len() < 2
    {
        return 0;
    }
    let (Some(rows), Some(w)) = (rows(g, i), g.ty(node.inputs[1]).shape.as_fixed()) else {
        return 0;
    };
    // `qswiglu` by two weights (gate, up: 5 operands) does both products.
    let weights = if node.inputs.len() == 5 { 2 } else { 1 };
    match w[..] {
        [k, n] => weights * rows * (k * n) as u64,
        _ => 0,
    }
}

/// Reports the placement (see the module docs).
///
/// Requires: a verified module. Guarantees: the module is not changed;
/// statistics `npu-nodes`, `cpu-nodes`, `npu-macs`, `cpu-macs` (matmul
/// multiply-accumulates with static shapes, summed over graphs).
pub struct Partition {
    target: String,
}

impl Partition {
    pub fn from_options(o: &PassOptions) -> Partition {
        Partition {
            target: o.str("target").to_string(),
        }
    }
}

impl Pass for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        if self.target != "rk3588" {
            return Err(failed(
                "partition",
                format!("target `{}` is not supported (valid: rk3588)", self.target),
            ));
        }
        for g in &module.graphs {
            for (i, p) in place(g).iter().enumerate() {
                let (nodes, mac) = match p.device {
                    Device::Npu => ("npu-nodes", "npu-macs"),
                    Device::Cpu => ("cpu-nodes", "cpu-macs"),
                };
                stats.add(nodes, 1);
                stats.add(mac, macs(g, i));
                tracing::debug!(
                    graph = %g.name,
                    node = %slmcc_ir::verify::node_label(g, i),
                    device = ?p.device,
                    reason = p.reason,
                    "partition"
                );
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;

    const SRC: &str = "module @m {
  weight @wq : i8[4, 3]
  weight @ws : f32[1, 3]
  weight @head : f32[3, 5]

  graph @main(%x: f32[2, 4]) -> (f32[2, 5]) {
    %h = qmatmul %x, @wq, @ws {bits = 8, group = 4} : f32[2, 3]
    %r = sigmoid %h : f32[2, 3]
    %y = matmul %r, @head : f32[2, 5]
    return %y
  }
}
";

    #[test]
    fn quantized_matmuls_go_to_the_npu_the_rest_says_why_not() {
        let mut m = parse_module(SRC).unwrap();
        let g = &m.graphs[0];
        let p = place(g);
        assert_eq!(p[0].device, Device::Npu);
        assert_eq!(p[1].device, Device::Cpu);
        assert!(p[1].reason.contains("element-wise"));
        assert_eq!(p[2].device, Device::Cpu);
        assert!(p[2].reason.contains("LM head"));
        assert_eq!(macs(g, 0), 2 * 4 * 3);
        assert_eq!(macs(g, 2), 2 * 3 * 5);
        let mut stats = Statistics::default();
        let mut pass = Partition {
            target: "rk3588".into(),
        };
        assert!(!pass.run(&mut m, &mut stats).unwrap());
        assert_eq!(stats.get("npu-nodes"), 1);
        assert_eq!(stats.get("cpu-nodes"), 2);
        assert_eq!(stats.get("npu-macs"), 24);
        assert_eq!(stats.get("cpu-macs"), 30);
        pass.target = "hexagon".into();
        let e = pass.run(&mut m, &mut stats).unwrap_err().to_string();
        assert!(e.contains("valid: rk3588"), "{e}");
    }

    #[test]
    fn weights_computed_at_run_time_stay_on_the_cpu() {
        let m = parse_module(
            "module @m {
  graph @main(%x: f32[2, 4], %q: i8[4, 3], %s: f32[1, 3]) -> (f32[2, 3]) {
    %h = qmatmul %x, %q, %s {bits = 8, group = 4} : f32[2, 3]
    return %h
  }
}
",
        )
        .unwrap();
        let p = place(&m.graphs[0]);
        assert_eq!(p[0].device, Device::Cpu);
        assert!(p[0].reason.contains("run time"), "{}", p[0].reason);
    }
}
