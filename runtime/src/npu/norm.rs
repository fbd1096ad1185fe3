//! `rms_norm` and `add_rms_norm` nodes on the NPU: the plan and DDR image
//! from the node's static shapes, the weights (with `eps` and `offset`)
//! packed into the image at load, and a call that writes the rows, runs
//! the program and reads `y` (and the sum `s`): bit for bit the reference
//! ops on f32.

use slmcc_backends::npu::kernels::rms_norm::{
    emit_rms_norm, pack_rms_norm_params, plan_rms_norm, RmsNormLayout, RmsNormPlan,
};
use slmcc_backends::npu::{Program, Target};
use slmcc_ir::{Graph, Module, Op};

use super::{f32s, fixed_shape, read_f32s, run_program, weight_data, write_f32s, NpuKernel};
use crate::exec::KernelError;
use crate::npu_sim::{NpuSim, SimStats};

/// `(eps, offset, residual)` of a norm node.
fn attrs(op: &Op) -> (f32, f32, bool) {
    match op {
        Op::RmsNorm(o) => (o.eps, o.offset, false),
        Op::AddRmsNorm(o) => (o.eps, o.offset, true),
        _ => unreachable!("plan_node dispatches only the RMS norms here"),
    }
}

/// The kernel of an `rms_norm` / `add_rms_norm` node.
pub(super) fn plan(
    g: &Graph,
    node: usize,
    target: &Target,
) -> Result<(NpuKernel, Program), String> {
    let n = &g.nodes[node];
    let (_, _, residual) = attrs(&n.op);
    let x = fixed_shape(g, n.inputs[0], "rows")?;
    let (&hidden, rows) = x.split_last().ok_or("rank-0 rows")?;
    let m = u32::try_from(rows.iter().product::<usize>()).map_err(|_| "too many rows")?;
    let hidden = u32::try_from(hidden).map_err(|_| "hidden size too large")?;
    let plan = plan_rms_norm(m, hidden, residual, target).map_err(|e| e.to_string())?;
    let layout = RmsNormLayout::new(&plan).map_err(|e| e.to_string())?;
    let program = emit_rms_norm(&plan, target, &layout).map_err(|e| e.to_string())?;
    Ok((NpuKernel::RmsNorm { plan, layout }, program))
}

/// A loaded norm node: its DDR image with the parameters packed.
pub(super) struct LoadedNorm {
    plan: RmsNormPlan,
    layout: RmsNormLayout,
    program: Program,
    sim: NpuSim,
}

impl LoadedNorm {
    pub(super) fn load(
        module: &Module,
        g: &Graph,
        node: usize,
        (plan, layout): (RmsNormPlan, RmsNormLayout),
        program: Program,
        target: &Target,
    ) -> Result<LoadedNorm, String> {
        let n = &g.nodes[node];
        let (eps, offset, residual) = attrs(&n.op);
        let w = weight_data(module, g, n.inputs[if residual { 2 } else { 1 }])?;
        let w = w.as_f32().ok_or("norm weights are not f32")?;
        let params = pack_rms_norm_params(eps, offset, w);
        let mut ddr = vec![0u8; layout.total as usize];
        ddr[layout.params as usize..][..params.len()].copy_from_slice(&params);
        Ok(LoadedNorm {
            sim: NpuSim::new(target.clone(), ddr),
            plan,
            layout,
            program,
        })
    }

    /// One call on the node's buffers: operands `x` (and `r`, then the
    /// weight, unused: it is in the image), results `s` then `y` with the
    /// residual, else `y`.
    ///
    /// # Safety
    ///
    /// The buffers must be valid and 4-byte aligned for the node's static
    /// types.
    pub(super) unsafe fn call_raw(
        &mut self,
        ins: &[*const u8],
        outs: &[*mut u8],
    ) -> Result<SimStats, KernelError> {
        let len = self.plan.m as usize * self.plan.n as usize;
        let l = self.layout;
        let ddr = &mut self.sim.ddr;
        // SAFETY (all `f32s`): the caller's contract.
        write_f32s(ddr, l.x, unsafe { f32s(ins[0], len) });
        if let Some(r) = l.r {
            write_f32s(ddr, r, unsafe { f32s(ins[1], len) });
        }
        let stats = run_program(&mut self.sim, &self.program)?;
        let ddr = &self.sim.ddr;
        // SAFETY: the caller's contract.
        unsafe {
            match l.s {
                Some(s) => {
                    read_f32s(ddr, s, outs[0], len);
                    read_f32s(ddr, l.y, outs[1], len);
                }
                None => read_f32s(ddr, l.y, outs[0], len),
            }
        }
        Ok(stats)
    }
}
