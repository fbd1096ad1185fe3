//! `qmatmul` and `qswiglu` nodes through the RK3588's own register
//! interface (`--backend npu-sim`): each W8A8 node's weights tiled and
//! written once to its own functional-model device
//! ([`crate::npu_qmatmul`]), and every call run as register-command tasks
//! there, bit for bit the reference op. A `qswiglu` is one product by its
//! gate and up columns side by side, then `(g · sigmoid(g)) · u` on the
//! CPU (a column of the product depends only on its own weights). A node
//! the interface cannot take yet stays on the CPU, with the reason logged.

use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::ops::qmatmul::QActivations;
use slmcc_ir::ops::qswiglu::QSwiGlu;
use slmcc_ir::{Graph, Module, Op, OpDef};

use super::{fixed_shape, quantized_weights};
use crate::exec::KernelError;
use std::cell::RefCell;
use std::rc::Rc;

use crate::npu_device::{ModelDevice, NpuDevice, PAGE};
use crate::npu_qmatmul::{Loaded, NpuQMatMul};
use crate::npu_sim::SimStats;

/// NPU address where each node's model memory starts.
const MODEL_BASE: u32 = 0x1000_0000;

/// The integer product a `qmatmul` or `qswiglu` node gives the register
/// interface, from its static types alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterProduct {
    /// Rows of the activations.
    pub m: usize,
    pub k: usize,
    /// The columns of all its weights side by side (a `qswiglu`'s gate and
    /// up projections together).
    pub cols: usize,
    pub group: usize,
    pub swiglu: bool,
}

/// The product node `node` of `g` runs as on the register interface, or
/// why the interface cannot take it: only W8A8 products with row-major
/// weights (4-bit weights stay on the CPU: `docs/NPU.md`, "W4A8 on this
/// target").
pub fn register_product(g: &Graph, node: usize) -> Result<RegisterProduct, String> {
    let n = &g.nodes[node];
    let (op, swiglu) = match n.op {
        Op::QMatMul(op) => (op, false),
        Op::QSwiGlu(op) => (op.qmatmul(), true),
        _ => {
            return Err(format!(
                "`{}` has no register-interface kernel yet",
                n.op.mnemonic()
            ))
        }
    };
    if op.bits != 8 || op.activations != QActivations::Int8 || op.layout != QLayout::RowMajor {
        return Err("only W8A8 products with row-major weights run there".into());
    }
    let x = fixed_shape(g, n.inputs[0], "activations")?;
    let (&k, rows) = x.split_last().ok_or("rank-0 activations")?;
    let mut cols = 0;
    for pair in n.inputs[1..].chunks(2) {
        let w = fixed_shape(g, pair[0], "weights")?;
        cols += match w[..] {
            [wk, wn] if wk == k => wn,
            _ => return Err(format!("weights of shape {w:?} for K = {k}")),
        };
    }
    let group = usize::try_from(op.group).map_err(|_| format!("group {}", op.group))?;
    Ok(RegisterProduct {
        m: rows.iter().product(),
        k,
        cols,
        group,
        swiglu,
    })
}

/// A `qmatmul` or `qswiglu` node loaded on its model device.
pub(super) struct RegistersQ {
    op: NpuQMatMul,
    dev: Rc<RefCell<dyn NpuDevice>>,
    loaded: Loaded,
    m: usize,
    k: usize,
    /// Result columns.
    n: usize,
    /// A `qswiglu`: the product's first `n` columns are the gate, the
    /// last `n` the up projection.
    swiglu: bool,
}

impl RegistersQ {
    /// Loads node `node` of `g` on `shared` (the board's device), or on a
    /// functional model of its own; or says why the register interface
    /// cannot take it.
    pub(super) fn load(
        module: &Module,
        g: &Graph,
        node: usize,
        shared: Option<&Rc<RefCell<dyn NpuDevice>>>,
    ) -> Result<RegistersQ, String> {
        let p = register_product(g, node)?;
        // Every weight's columns side by side: a `qswiglu`'s gate then up
        // (or its fused gate_up weight as it is), one product for all.
        let parts = quantized_weights(module, g, node)?;
        let q = side_by_side(parts.iter().map(|p| (&p.0[..], p.2)));
        let scale = side_by_side(parts.iter().map(|p| (&p.1[..], p.2)));
        let (m, k, cols, swiglu) = (p.m, p.k, p.cols, p.swiglu);
        let npu =
            NpuQMatMul::new(&q, &scale, (m, k, cols), p.group, 3).map_err(|e| e.to_string())?;
        let dev: Rc<RefCell<dyn NpuDevice>> = match shared {
            Some(d) => d.clone(),
            None => Rc::new(RefCell::new(ModelDevice::new(
                MODEL_BASE,
                npu.device_bytes(PAGE),
            ))),
        };
        let loaded = npu
            .load(&mut *dev.borrow_mut())
            .map_err(|e| e.to_string())?;
        Ok(RegistersQ {
            op: npu,
            dev,
            loaded,
            m,
            k,
            n: if swiglu { cols / 2 } else { cols },
            swiglu,
        })
    }

    /// One call on the node's buffers (operands, then results).
    ///
    /// # Safety
    ///
    /// `ins[0]` and `outs[0]` must be valid, 4-byte aligned buffers of the
    /// node's static types.
    pub(super) unsafe fn call_raw(
        &mut self,
        ins: &[*const u8],
        outs: &[*mut u8],
    ) -> Result<SimStats, KernelError> {
        // SAFETY: the caller's contract.
        let x = unsafe { std::slice::from_raw_parts(ins[0] as *const f32, self.m * self.k) };
        let y = self
            .op
            .run(&mut *self.dev.borrow_mut(), &self.loaded, x, self.m)
            .map_err(|e| {
                tracing::debug!("NPU task failed: {e}");
                KernelError("an NPU task failed (SLMCC_LOG=debug says why)")
            })?;
        // SAFETY: the caller's contract; the result does not alias `y`.
        let out = unsafe { std::slice::from_raw_parts_mut(outs[0] as *mut f32, self.m * self.n) };
        if self.swiglu {
            let n = self.n;
            for (o, row) in out.chunks_exact_mut(n).zip(y.chunks_exact(2 * n)) {
                for (j, o) in o.iter_mut().enumerate() {
                    *o = QSwiGlu::gate(row[j], row[n + j]);
                }
            }
        } else {
            out.copy_from_slice(&y);
        }
        Ok(SimStats::default())
    }
}

/// Row-major matrices of the same row count, each given with its column
/// count, as one matrix with their columns side by side.
fn side_by_side<'a, T: Copy + 'a>(parts: impl Iterator<Item = (&'a [T], usize)> + Clone) -> Vec<T> {
    let rows = parts.clone().next().map_or(0, |(m, c)| m.len() / c.max(1));
    let mut out = Vec::new();
    for r in 0..rows {
        for (m, c) in parts.clone() {
            out.extend_from_slice(&m[r * c..(r + 1) * c]);
        }
    }
    out
}
