//! Lowering of one IR node to the body of its kernel.
//!
//! [`lower_node`] dispatches on the op; each family lives in its own module.
//! A lowering sees the node's operands and results with static shapes
//! ([`NodeSig`]), and the values of operands that are compile-time
//! constants (`slice` bounds, `reshape` targets). It checks what it supports
//! before emitting anything and answers [`CpuError::Unsupported`] otherwise.
//! Every op of the IR has a lowering; what remains unsupported are forms
//! of them: 4-bit dtypes (except the packed `i4` weights `qmatmul` and `qswiglu`
//! read),
//! and dtypes other than `f32` in the reductions, `matmul` and the fused
//! ops (see `docs/ARCHITECTURE.md`).

mod attention;
mod dtype;
mod elementwise;
mod gather;
mod integer;
pub mod kv_cache;
mod matmul;
mod movement;
mod qmatmul;
mod qswiglu;
mod reduce;
mod rope;
mod row;

use slmcc_ir::{DType, Op, OpDef, Tensor};

use super::emit::KernelBuilder;
use super::CpuError;

/// An operand or result of a node, with its static shape.
#[derive(Clone, Debug)]
pub struct Operand<'a> {
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// The value, when it is a compile-time constant.
    pub value: Option<&'a Tensor>,
}

impl Operand<'_> {
    /// Bytes per element (byte-sized dtypes).
    pub fn elem_bytes(&self) -> i64 {
        (self.dtype.bits() / 8) as i64
    }
}

/// The operands and results of a node, in buffer order.
#[derive(Clone, Debug)]
pub struct NodeSig<'a> {
    pub inputs: Vec<Operand<'a>>,
    pub outputs: Vec<Operand<'a>>,
}

/// The error for an op (or a form of it) the backend does not lower.
pub fn unsupported(op: &str, detail: impl Into<String>) -> CpuError {
    CpuError::Unsupported {
        op: op.to_string(),
        detail: detail.into(),
    }
}

/// Emits the kernel body of `op` into `kb`.
pub fn lower_node(kb: &mut KernelBuilder, op: &Op, sig: &NodeSig) -> Result<(), CpuError> {
    match op {
        Op::Constant(c) => movement::constant(kb, c, sig),
        Op::Unary(u) => elementwise::unary(kb, u.kind, sig),
        Op::Binary(b) => elementwise::binary(kb, b.kind, sig),
        Op::Cast(c) => elementwise::cast(kb, c.to, sig),
        Op::Where(_) => elementwise::where_(kb, sig),
        Op::Gelu(g) => elementwise::gelu(kb, g.approximate, sig),
        Op::Softcap(c) => elementwise::softcap(kb, c.cap, sig),
        Op::MatMul(_) => matmul::matmul(kb, sig),
        Op::QMatMul(q) => qmatmul::qmatmul(kb, q, sig),
        Op::QSwiGlu(q) => qswiglu::qswiglu(kb, q, sig),
        Op::Glu(g) => matmul::glu(kb, g, sig),
        Op::Softmax(s) => reduce::softmax(kb, s.axis, sig),
        Op::Reduce(r) => reduce::reduce(kb, r, sig),
        Op::LayerNorm(l) => reduce::layer_norm(kb, l, sig),
        Op::RmsNorm(r) => reduce::rms_norm(kb, r, sig),
        Op::AddRmsNorm(r) => reduce::add_rms_norm(kb, r, sig),
        Op::AddLayerNorm(l) => reduce::add_layer_norm(kb, l, sig),
        Op::CumSum(c) => reduce::cum_sum(kb, c, sig),
        Op::Reshape(_) | Op::Squeeze(_) | Op::Unsqueeze(_) | Op::Identity(_) => {
            movement::same_layout(kb, op.mnemonic(), sig)
        }
        Op::Transpose(t) => movement::transpose(kb, &t.perm, sig),
        Op::Expand(_) => movement::expand(kb, sig),
        Op::Slice(_) => movement::slice(kb, sig),
        Op::Concat(c) => movement::concat(kb, c.axis, sig),
        Op::Split(s) => movement::split(kb, s.axis, sig),
        Op::Gather(g) => gather::gather(kb, g.axis, sig),
        Op::GatherNd(g) => gather::gather_nd(kb, op, g.batch_dims, sig),
        Op::GatherElements(g) => gather::gather_elements(kb, op, g.axis, sig),
        Op::Attention(a) => attention::attention(kb, a, sig),
        Op::Rope(r) => rope::rope(kb, r, sig),
        Op::Trilu(t) => movement::trilu(kb, t.upper, sig),
        Op::Range(_) => movement::range(kb, sig),
        Op::ShapeOf(_) | Op::Size(_) | Op::ConstantOfShape(_) => movement::shape_value(kb, op, sig),
        Op::KvWrite(k) => kv_cache::kv_write(kb, &k.layout, sig),
        Op::KvMask(k) => kv_cache::kv_mask(kb, &k.layout, sig),
    }
}
