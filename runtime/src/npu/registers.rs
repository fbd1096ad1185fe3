//! `qmatmul` nodes through the RK3588's own register interface
//! (`--backend npu-model`): each W8A8 node's weights tiled and written
//! once to its own functional-model device ([`crate::npu_qmatmul`]), and
//! every call run as register-command tasks there, bit for bit the
//! reference op. A node the interface cannot take yet stays on the CPU,
//! with the reason logged.

use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::ops::qmatmul::QActivations;
use slmcc_ir::{Graph, Module, Op, OpDef};

use super::{fixed_shape, weight_data};
use crate::exec::KernelError;
use crate::npu_device::{ModelDevice, PAGE};
use crate::npu_qmatmul::{Loaded, NpuQMatMul};
use crate::npu_sim::SimStats;

/// NPU address where each node's model memory starts.
const MODEL_BASE: u32 = 0x1000_0000;

/// A `qmatmul` node loaded on its model device.
pub(super) struct RegistersQ {
    op: NpuQMatMul,
    dev: ModelDevice,
    loaded: Loaded,
    m: usize,
    k: usize,
    n: usize,
}

impl RegistersQ {
    /// Loads node `node` of `g`, or says why the register interface cannot
    /// take it.
    pub(super) fn load(module: &Module, g: &Graph, node: usize) -> Result<RegistersQ, String> {
        let n = &g.nodes[node];
        let Op::QMatMul(op) = n.op else {
            return Err(format!(
                "`{}` has no register-interface kernel yet",
                n.op.mnemonic()
            ));
        };
        if op.bits != 8 || op.activations != QActivations::Int8 || op.layout != QLayout::RowMajor {
            return Err("only W8A8 qmatmuls with row-major weights run there".into());
        }
        let x = fixed_shape(g, n.inputs[0], "activations")?;
        let (&k, rows) = x.split_last().ok_or("rank-0 activations")?;
        let m: usize = rows.iter().product();
        let q = weight_data(module, g, n.inputs[1])?;
        let scale = weight_data(module, g, n.inputs[2])?;
        let cols = q.shape().get(1).copied().ok_or("a weight of rank < 2")?;
        let q: Vec<i8> = q.to_i64_vec().into_iter().map(|v| v as i8).collect();
        let scale = scale.as_f32().ok_or("scales are not f32")?.to_vec();
        let npu = NpuQMatMul::new(&q, &scale, (m, k, cols), op.group as usize, 3)
            .map_err(|e| e.to_string())?;
        let bytes = npu.device_bytes(PAGE);
        let mut dev = ModelDevice::new(MODEL_BASE, bytes);
        let loaded = npu.load(&mut dev).map_err(|e| e.to_string())?;
        Ok(RegistersQ {
            op: npu,
            dev,
            loaded,
            m,
            k,
            n: cols,
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
            .run(&mut self.dev, &self.loaded, x, self.m)
            .map_err(|_| KernelError("the NPU model refused a task (see `slmcc npu plan`)"))?;
        // SAFETY: the caller's contract; the result does not alias `y`.
        let out = unsafe { std::slice::from_raw_parts_mut(outs[0] as *mut f32, self.m * self.n) };
        out.copy_from_slice(&y);
        Ok(SimStats::default())
    }
}
