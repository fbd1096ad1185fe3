//! The placement rules of the RK3588 NPU as slmcc drives it: which nodes
//! of a graph run as register-command tasks on the NPU, and why the others
//! stay on the CPU.
//!
//! The placement is a pure function of a graph ([`place`]). The
//! `partition` pass reports it, the NPU lowering
//! (`slmcc_backends::npu::lower`) stores the weights and emits the tasks
//! of the nodes it places, and the runtime runs those tasks, all from
//! this one function, so the three can never disagree. It lives in the IR
//! crate because both the passes and the backends apply it.
//!
//! What the NPU takes in this version (`docs/NPU.md`): W8A8 `qmatmul` and
//! `qswiglu` nodes, int8 weights by int8 activations, as 1×1 convolutions
//! whose integer sums the CPU then corrects and scales. Their weights must
//! be module weights of static shape, in the row-major or the NPU's own
//! `rk3588` layout, read by nothing but quantized products (so that the
//! lowering can store them in the NPU's layout), with `N` and the group a
//! multiple of 32 (the NPU's kernel and channel blocks: the layout is a
//! permutation, with no room for padding). Everything else stays on the
//! CPU, and the rules say why: 4-bit weights (no int4 MAC on the RK3588),
//! weight-only products and `f32` matmuls (the LM head the `quantize`
//! pass keeps), norms, attention, RoPE and the element-wise ops (no
//! register programming of the DPU's stages has been shown to work in
//! public), and the shape and data-movement ops.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ops::qlayout::{QLayout, NPU_CHANNEL_BLOCK, NPU_KERNEL_BLOCK};
use crate::ops::qmatmul::QActivations;
use crate::ops::Known;
use crate::ops::OpDef;
use crate::{Graph, Op, Tensor, ValueDef, ValueId};

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
    pub reason: String,
}

impl Placement {
    pub fn npu(reason: impl Into<String>) -> Placement {
        Placement {
            device: Device::Npu,
            reason: reason.into(),
        }
    }

    pub fn cpu(reason: impl Into<String>) -> Placement {
        Placement {
            device: Device::Cpu,
            reason: reason.into(),
        }
    }
}

/// The placement of every node of `g`, in node order.
pub fn place(g: &Graph) -> Vec<Placement> {
    // Module weights read by a node other than a quantized product, and
    // the first such reader's op.
    let mut other_readers: HashMap<&str, &'static str> = HashMap::new();
    for n in &g.nodes {
        if matches!(n.op, Op::QMatMul(_) | Op::QSwiGlu(_)) {
            continue;
        }
        for &v in &n.inputs {
            if let ValueDef::Weight(w) = &g.value(v).def {
                other_readers.entry(w.as_str()).or_insert(n.op.mnemonic());
            }
        }
    }
    (0..g.nodes.len())
        .map(|i| place_node(g, i, &other_readers))
        .collect()
}

fn place_node(g: &Graph, i: usize, other_readers: &HashMap<&str, &'static str>) -> Placement {
    let node = &g.nodes[i];
    match &node.op {
        Op::QMatMul(_) | Op::QSwiGlu(_) => match npu_product(g, i, other_readers) {
            Ok(()) if matches!(node.op, Op::QSwiGlu(_)) => Placement::npu(
                "W8A8 SwiGLU MLP: gate and up products as register-command tasks; SiLU·up, \
                 zero points and scales on the CPU",
            ),
            Ok(()) => Placement::npu(
                "W8A8 matmul: register-command tasks (int8 1×1 convolutions); zero points and \
                 scales on the CPU",
            ),
            Err(why) => Placement::cpu(why),
        },
        Op::MatMul(_) => Placement::cpu(
            "f32 matmul (the NPU takes W8A8 products; quantize keeps the LM head f32)",
        ),
        Op::Glu(_) => Placement::cpu("f32 gated MLP (quantize with glus=keep)"),
        Op::Attention(_) => Placement::cpu(
            "attention: no register programming for it yet (the CPU's kernel reads the KV cache)",
        ),
        Op::RmsNorm(_) | Op::AddRmsNorm(_) | Op::LayerNorm(_) | Op::AddLayerNorm(_) => {
            Placement::cpu("norm: no register programming of the DPU's stages for it yet")
        }
        Op::Rope(_) => Placement::cpu("no NPU RoPE in this version"),
        Op::Gather(_) | Op::GatherElements(_) | Op::GatherNd(_) => {
            Placement::cpu("table lookup (embedding): memory-bound, stays on the CPU")
        }
        Op::KvWrite(_) | Op::KvMask(_) => Placement::cpu("KV-cache bookkeeping"),
        Op::Binary(_) | Op::Unary(_) | Op::Gelu(_) | Op::Softmax(_) | Op::Cast(_) => {
            Placement::cpu("f32 element-wise (no DPU element-wise programming yet)")
        }
        _ => Placement::cpu("shape or data movement (no arithmetic for the NPU)"),
    }
}

/// Whether quantized product node `i` of `g` runs on the NPU, or why not
/// (see the module doc); `other_readers` maps each weight that another
/// kind of node reads to that node's op.
fn npu_product(
    g: &Graph,
    i: usize,
    other_readers: &HashMap<&str, &'static str>,
) -> Result<(), String> {
    let node = &g.nodes[i];
    let (bits, group, layout, activations) = match &node.op {
        Op::QMatMul(op) => (op.bits, op.group, op.layout, op.activations),
        Op::QSwiGlu(op) => (op.bits, op.group, op.layout, op.activations),
        _ => return Err("not a quantized product".into()),
    };
    if activations == QActivations::F32 {
        return Err(
            "weight-only quantization: f32 activations (the NPU multiplies int8 ones)".into(),
        );
    }
    if bits != 8 {
        return Err(
            "4-bit weights stay on the CPU (no int4 MAC on the RK3588: docs/NPU.md)".into(),
        );
    }
    if !matches!(layout, QLayout::RowMajor | QLayout::Rk3588 { .. }) {
        return Err("weights stored for the CPU's dot products (pack-weights)".into());
    }
    if g.ty(node.inputs[0]).shape.as_fixed().is_none() {
        return Err("activations of symbolic shape".into());
    }
    if group % NPU_CHANNEL_BLOCK as i64 != 0 {
        return Err(format!(
            "the group {group} is not a multiple of the NPU's {NPU_CHANNEL_BLOCK}-channel block"
        ));
    }
    for &q in node.inputs[1..].iter().step_by(2) {
        let ValueDef::Weight(name) = &g.value(q).def else {
            return Err("quantized weights computed at run time".into());
        };
        let Some(&[_, n]) = g.ty(q).shape.as_fixed().as_deref() else {
            return Err("quantized weights of symbolic shape".into());
        };
        if n % NPU_KERNEL_BLOCK != 0 {
            return Err(format!(
                "N = {n} is not a multiple of the NPU's {NPU_KERNEL_BLOCK}-kernel block"
            ));
        }
        if let Some(op) = other_readers.get(name.as_str()) {
            return Err(format!(
                "weight @{name} is also read by a `{op}` (the NPU's layout is for products only)"
            ));
        }
    }
    Ok(())
}

/// The data of `v` when a `constant` node defines it as a concrete tensor.
pub fn constant_tensor(g: &Graph, v: ValueId) -> Option<Arc<Tensor>> {
    g.nodes.iter().find_map(|n| match &n.op {
        Op::Constant(c) if n.outputs.contains(&v) => match &c.value {
            Known::Tensor(t) => Some(t.clone()),
            Known::Dims(_) => None,
        },
        _ => None,
    })
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

/// A module the placement and `partition` tests share: a quantized
/// matmul, an element-wise op and the f32 LM head.
#[doc(hidden)]
pub mod tests_src {
    pub const SRC: &str = "module @m {
  weight @wq : i8[32, 32]
  weight @ws : f32[1, 32]
  weight @head : f32[32, 5]

  graph @main(%x: f32[2, 32]) -> (f32[2, 5]) {
    %h = qmatmul %x, @wq, @ws {bits = 8, group = 32} : f32[2, 32]
    %r = sigmoid %h : f32[2, 32]
    %y = matmul %r, @head : f32[2, 5]
    return %y
  }
}
";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_module;

    const SRC: &str = super::tests_src::SRC;

    #[test]
    fn w8a8_matmuls_go_to_the_npu_the_rest_says_why_not() {
        let m = parse_module(SRC).unwrap();
        let g = &m.graphs[0];
        let p = place(g);
        assert_eq!(p[0].device, Device::Npu);
        assert_eq!(p[1].device, Device::Cpu);
        assert!(p[1].reason.contains("element-wise"));
        assert_eq!(p[2].device, Device::Cpu);
        assert!(p[2].reason.contains("LM head"));
        assert_eq!(macs(g, 0), 2 * 32 * 32);
        assert_eq!(macs(g, 2), 2 * 32 * 5);
    }

    #[test]
    fn products_the_npu_cannot_take_say_why() {
        let m = parse_module(
            "module @m {
  weight @a : i8[32, 48]
  weight @as : f32[1, 48]
  weight @b : i4[64, 32]
  weight @bs : f32[2, 32]
  weight @c : i8[48, 32]
  weight @cs : f32[1, 32]
  weight @d : i8[32, 32]
  weight @ds : f32[1, 32]
  weight @e : i8[32, 32]
  weight @es : f32[1, 32]

  graph @main(%x: f32[2, 32], %x48: f32[2, 48], %q: i8[32, 32], %s: f32[1, 32]) -> (f32[2, 48], f32[2, 32], f32[2, 32], f32[2, 32], f32[2, 32], f32[32, 32], f32[2, 32], f32[2, 32]) {
    %a = qmatmul %x, @a, @as {bits = 8, group = 32} : f32[2, 48]
    %b = qmatmul %x, @b, @bs {bits = 4, group = 32} : f32[2, 32]
    %c = qmatmul %x48, @c, @cs {bits = 8, group = 48} : f32[2, 32]
    %r = qmatmul %x, %q, %s {bits = 8, group = 32} : f32[2, 32]
    %d = qmatmul %x, @d, @ds {bits = 8, group = 32} : f32[2, 32]
    %t = cast @d {to = f32} : f32[32, 32]
    %e = qmatmul %x, @e, @es {bits = 8, group = 32, activations = \"f32\"} : f32[2, 32]
    %f = qmatmul %x, @e, @es {bits = 8, group = 32, layout = \"rk3588-k32\"} : f32[2, 32]
    return %a, %b, %c, %r, %d, %t, %e, %f
  }
}
",
        )
        .unwrap();
        let p = place(&m.graphs[0]);
        let why = |i: usize| {
            assert_eq!(p[i].device, Device::Cpu, "node {i}");
            p[i].reason.clone()
        };
        assert!(why(0).contains("N = 48"), "{}", why(0));
        assert!(why(1).contains("4-bit"));
        assert!(why(2).contains("group 48"));
        assert!(why(3).contains("run time"));
        assert!(why(4).contains("@d is also read by a `cast`"), "{}", why(4));
        assert!(why(6).contains("weight-only"));
        // Weights already in the NPU's layout, shared with a CPU product.
        assert_eq!(p[7].device, Device::Npu);
    }
}
