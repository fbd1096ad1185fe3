//! The placement rules of the modelled RK3588 NPU: which nodes of a graph
//! its kernels take, and why the others stay on the CPU.
//!
//! The placement is a pure function of a graph ([`place`]). The
//! `partition` pass reports it, the compiler emits the NPU programs of the
//! nodes it places and the runtime runs them, all from this one function,
//! so the three can never disagree. It lives in the IR crate because both
//! the passes and the runtime (which does not depend on the passes) apply
//! it; the limits are those of `backends::npu`'s kernels
//! (`docs/NPU_ISA.md`).
//!
//! What the NPU takes in this version: `qmatmul` and `qswiglu` (INT8 or
//! INT4 weights, INT8 activations per token) with static weights and at
//! most [`NPU_MAX_ROWS`] rows; `rms_norm` and `add_rms_norm` on f32 rows
//! with static weights (bit-exact on the vector unit); `attention` with
//! heads of at most [`NPU_MAX_HEAD`] and a mask (if any) broadcast over
//! batch and heads (flash attention with f16 products: the one NPU kernel
//! that is not bit-exact with its op). The rules for everything else say
//! why it stays on the CPU: `f32` weights (the LM head the `quantize` pass
//! keeps), ops without an NPU kernel yet (layer norm, RoPE, the gate
//! arithmetic), and the shape and data-movement ops that have no
//! arithmetic to speak of.

use std::sync::Arc;

use crate::ops::qlayout::QLayout;
use crate::ops::qmatmul::QActivations;
use crate::ops::Known;
use crate::{DType, Graph, Op, Tensor, ValueDef, ValueId};

/// Most rows one NPU matmul streams through a weight tile (the ISA's `m`
/// field, `docs/NPU_ISA.md`).
pub const NPU_MAX_ROWS: u64 = 4096;

/// Largest head size (`d`, `dv`) the NPU attention kernel takes.
pub const NPU_MAX_HEAD: usize = 512;

/// Most queries or keys of one NPU attention (its DMA and causal-diagonal
/// fields).
pub const NPU_MAX_SEQ: usize = 1 << 17;

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
    pub fn npu(reason: &'static str) -> Placement {
        Placement {
            device: Device::Npu,
            reason,
        }
    }

    pub fn cpu(reason: &'static str) -> Placement {
        Placement {
            device: Device::Cpu,
            reason,
        }
    }
}

/// Which kinds of ops the NPU may take: all of them for the compiler and
/// the runtime; a caller that compares numerics keeps some on the CPU
/// (the attention kernel is the one NPU kernel that is not bit-exact).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpuOps {
    /// `qmatmul`, `qswiglu`.
    pub matmuls: bool,
    /// `rms_norm`, `add_rms_norm`.
    pub norms: bool,
    pub attention: bool,
    /// The NPU's `qmatmul`s run through the RK3588's own register
    /// interface on its functional model (`docs/NPU.md`) instead of our
    /// modelled ISA. Placement does not read it.
    pub registers: bool,
    /// With `registers`: on the board's NPU through its driver instead of
    /// the functional model, and on the CPU when there is none or a task
    /// fails. Placement does not read it.
    pub device: bool,
}

impl NpuOps {
    pub const ALL: NpuOps = NpuOps {
        matmuls: true,
        norms: true,
        attention: true,
        registers: false,
        device: false,
    };
    /// The bit-exact kernels only (attention on the CPU).
    pub const EXACT: NpuOps = NpuOps {
        attention: false,
        ..NpuOps::ALL
    };
    /// The `qmatmul`s through the register interface; everything else on
    /// the CPU.
    pub const REGISTERS: NpuOps = NpuOps {
        matmuls: true,
        norms: false,
        attention: false,
        registers: true,
        device: false,
    };
    /// [`NpuOps::REGISTERS`] on the board's NPU.
    pub const DEVICE: NpuOps = NpuOps {
        device: true,
        ..NpuOps::REGISTERS
    };
}

/// The placement of every node of `g`, in node order.
pub fn place(g: &Graph) -> Vec<Placement> {
    place_with(g, NpuOps::ALL)
}

/// [`place`] with only the op kinds `ops` allows on the NPU.
pub fn place_with(g: &Graph, ops: NpuOps) -> Vec<Placement> {
    (0..g.nodes.len())
        .map(|i| {
            let p = place_node(g, i);
            let allowed = match g.nodes[i].op {
                Op::QMatMul(_) | Op::QSwiGlu(_) => ops.matmuls,
                Op::RmsNorm(_) | Op::AddRmsNorm(_) => ops.norms,
                Op::Attention(_) => ops.attention,
                _ => true,
            };
            if allowed || p.device == Device::Cpu {
                p
            } else {
                Placement::cpu("kept on the CPU by the caller")
            }
        })
        .collect()
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
            let (layout, activations) = match &node.op {
                Op::QMatMul(op) => (op.layout, op.activations),
                Op::QSwiGlu(op) => (op.layout, op.activations),
                _ => unreachable!("matched above"),
            };
            if activations == QActivations::F32 {
                Placement::cpu(
                    "weight-only quantization: f32 activations (the NPU multiplies INT8 ones)",
                )
            } else if layout != QLayout::RowMajor {
                Placement::cpu("weights stored for the CPU's dot products (pack-weights)")
            } else if !packed {
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
        Op::Attention(_) => place_attention(g, i),
        Op::RmsNorm(_) | Op::AddRmsNorm(_) => place_rms_norm(g, i),
        Op::LayerNorm(_) | Op::AddLayerNorm(_) => {
            Placement::cpu("no NPU layer-norm kernel in this version")
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

fn place_rms_norm(g: &Graph, i: usize) -> Placement {
    let node = &g.nodes[i];
    let x = g.ty(node.inputs[0]);
    let w = *node.inputs.last().expect("norms have a weight");
    if x.dtype != DType::F32 {
        Placement::cpu("norm of non-f32 rows (the NPU kernel is f32)")
    } else if !matches!(g.value(w).def, ValueDef::Weight(_)) && constant_tensor(g, w).is_none() {
        Placement::cpu("norm weights computed at run time (the NPU packs them at load)")
    } else if x
        .shape
        .as_fixed()
        .is_none_or(|s| s.last().is_none_or(|&n| n > 16384))
    {
        Placement::cpu("norm rows of symbolic shape or wider than 16384")
    } else {
        Placement::npu("RMS norm on the vector unit (f32, bit-exact), weights loaded once per core")
    }
}

fn place_attention(g: &Graph, i: usize) -> Placement {
    let node = &g.nodes[i];
    let shapes: Option<Vec<Vec<usize>>> = node.inputs[..3]
        .iter()
        .map(|&v| g.ty(v).shape.as_fixed())
        .collect();
    let Some(shapes) = shapes else {
        return Placement::cpu("attention of symbolic shape");
    };
    let (q, k, v) = (&shapes[0], &shapes[1], &shapes[2]);
    if g.ty(node.inputs[0]).dtype != DType::F32 {
        Placement::cpu("attention on non-f32 tensors")
    } else if q[3] > NPU_MAX_HEAD || v[3] > NPU_MAX_HEAD {
        Placement::cpu("attention heads larger than 512")
    } else if q[2] > NPU_MAX_SEQ || k[2] > NPU_MAX_SEQ {
        Placement::cpu("attention over more than 2^17 queries or keys")
    } else if node.inputs.len() > 3 && npu_attention_mask_rows(g, i).is_none() {
        Placement::cpu("attention mask not broadcast over batch and heads, or not bool/f32")
    } else {
        Placement::npu("flash attention: f16 products, f32 online softmax, scores stay in CBUF")
    }
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

/// The rows of attention node `i`'s mask as the NPU kernel reads it: 1
/// (one row for every query) or the query count, when the mask is `bool`
/// or `f32` of static shape `[..1, ms, t]` (every dimension before the
/// last two 1). `None` otherwise, or without a mask.
pub fn npu_attention_mask_rows(g: &Graph, i: usize) -> Option<usize> {
    let node = &g.nodes[i];
    let m = g.ty(*node.inputs.get(3)?);
    let q = g.ty(node.inputs[0]).shape.as_fixed()?;
    let t = g.ty(node.inputs[1]).shape.as_fixed()?[2];
    let dims = m.shape.as_fixed()?;
    if !matches!(m.dtype, DType::Bool | DType::F32) {
        return None;
    }
    let rows = match dims.len() {
        0 => return None,
        1 => 1,
        n => dims[n - 2],
    };
    let leading_ones = dims.len() < 3 || dims[..dims.len() - 2].iter().all(|&d| d == 1);
    (leading_ones && dims[dims.len() - 1] == t && (rows == 1 || rows == q[2])).then_some(rows)
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse_module;

    const SRC: &str = super::tests_src::SRC;

    #[test]
    fn quantized_matmuls_go_to_the_npu_the_rest_says_why_not() {
        let m = parse_module(SRC).unwrap();
        let g = &m.graphs[0];
        let p = place(g);
        assert_eq!(p[0].device, Device::Npu);
        assert_eq!(p[1].device, Device::Cpu);
        assert!(p[1].reason.contains("element-wise"));
        assert_eq!(p[2].device, Device::Cpu);
        assert!(p[2].reason.contains("LM head"));
        assert_eq!(macs(g, 0), 2 * 4 * 3);
        assert_eq!(macs(g, 2), 2 * 3 * 5);
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

    #[test]
    fn norms_and_attention_go_to_the_npu_unless_they_cannot() {
        let m = parse_module(
            "module @m {
  weight @w : f32[16]

  graph @main(%x: f32[1, 4, 16], %r: f32[1, 4, 16], %q: f32[1, 4, 4, 8], %k: f32[1, 2, 6, 8], %keep: bool[1, 1, 4, 6], %heads: bool[1, 4, 4, 6]) -> (f32[1, 4, 16], f32[1, 4, 16], f32[1, 4, 4, 8], f32[1, 4, 4, 8], f32[1, 4, 4, 8], f32[1, 4, 4, 8]) {
    %s, %y = add_rms_norm %x, %r, @w {eps = 1e-6} : f32[1, 4, 16], f32[1, 4, 16]
    %c = constant {value = 1.0} : f32[16]
    %z = rms_norm %x, %c {eps = 1e-6} : f32[1, 4, 16]
    %a = attention %q, %k, %k, %keep {kv_heads = 2, scale = 0.25} : f32[1, 4, 4, 8]
    %b = attention %q, %k, %k, %heads {kv_heads = 2, scale = 0.25} : f32[1, 4, 4, 8]
    %d = attention %q, %k, %k {kv_heads = 2, scale = 0.25, causal = true, softcap = 30.0} : f32[1, 4, 4, 8]
    %e = attention %q, %k, %k {kv_heads = 2, scale = 0.25, causal = true} : f32[1, 4, 4, 8]
    return %s, %z, %a, %b, %d, %e
  }
}
",
        )
        .unwrap();
        let g = &m.graphs[0];
        let p = place(g);
        let devices: Vec<Device> = p.iter().map(|p| p.device).collect();
        use Device::{Cpu, Npu};
        assert_eq!(devices, [Npu, Cpu, Npu, Npu, Cpu, Npu, Npu], "{p:?}");
        assert!(p[4].reason.contains("broadcast over batch and heads"));
        assert_eq!(npu_attention_mask_rows(g, 3), Some(4));
        assert_eq!(npu_attention_mask_rows(g, 4), None);
        let exact = place_with(g, NpuOps::EXACT);
        assert_eq!(exact[5].device, Cpu);
        assert_eq!(exact[6].device, Cpu);
        assert!(exact[6].reason.contains("kept on the CPU"));
        assert_eq!(exact[0].device, Npu);
    }
}
