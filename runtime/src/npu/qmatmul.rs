//! `qmatmul` and `qswiglu` nodes on the NPU: their tile plan and DDR image
//! from the node's static shapes, the weights packed into the image at
//! load, and a call that quantizes the activation rows on the CPU
//! ([`quantize_rows`], the op's steps 1–4), runs the program and reads the
//! f32 result: bit for bit the reference op.

use slmcc_backends::npu::isa::WeightType;
use slmcc_backends::npu::kernels::qmatmul::{
    emit_qmatmul, pack_qmatmul, quantize_rows, QMatmulLayout, RowParams,
};
use slmcc_backends::npu::kernels::qswiglu::{emit_qswiglu, pack_qswiglu};
use slmcc_backends::npu::tiler::{
    plan_qmatmul, plan_qswiglu, QMatmulProblem, QTilePlan, TileError,
};
use slmcc_backends::npu::{Program, Target};
use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::ops::qmatmul::QActivations;
use slmcc_ir::{Graph, Module, Op, OpDef};

use super::{fixed_shape, quantized_weights, run_program, NpuKernel};
use crate::exec::KernelError;
use crate::npu_sim::{NpuSim, SimStats};

type PlanFn = fn(&QMatmulProblem, &Target) -> Result<QTilePlan, TileError>;
type EmitFn = fn(
    &QTilePlan,
    &Target,
    &QMatmulLayout,
) -> Result<Program, slmcc_backends::npu::kernels::KernelError>;

/// The kernel of a `qmatmul` or `qswiglu` node. A `qswiglu` by one fused
/// `[K, 2·N]` gate_up weight gets the two-weight kernel of `N` columns
/// (its weight is split when packed).
pub(super) fn plan(
    g: &Graph,
    node: usize,
    target: &Target,
) -> Result<(NpuKernel, Program), String> {
    let n = &g.nodes[node];
    let (mm, swiglu) = match n.op {
        Op::QMatMul(op) => (op, false),
        Op::QSwiGlu(op) => (op.qmatmul(), true),
        _ => unreachable!("plan_node dispatches only qmatmul and qswiglu here"),
    };
    if mm.activations != QActivations::Int8 || mm.layout != QLayout::RowMajor {
        // Placement keeps these on the CPU; a graph placed by hand may not.
        return Err("weight-only products and weights packed for the CPU run on the CPU".into());
    }
    let (bits, group) = (mm.bits, mm.group);
    let x = fixed_shape(g, n.inputs[0], "activations")?;
    let w = fixed_shape(g, n.inputs[1], "weight")?;
    let (&k, rows) = x.split_last().ok_or("rank-0 activations")?;
    let m: usize = rows.iter().product();
    let narrow = |v: usize, what: &str| u32::try_from(v).map_err(|_| format!("{what} too large"));
    let cols = match (swiglu, n.inputs.len()) {
        (true, 3) => w[1] / 2,
        _ => w[1],
    };
    let problem = QMatmulProblem {
        m: narrow(m, "rows")?,
        k: narrow(k, "K")?,
        n: narrow(cols, "N")?,
        wtype: if bits == 4 {
            WeightType::I4
        } else {
            WeightType::I8
        },
        group: narrow(group as usize, "group")?,
    };
    let (plan_kernel, emit_kernel) = if swiglu {
        (plan_qswiglu as PlanFn, emit_qswiglu as EmitFn)
    } else {
        (plan_qmatmul as PlanFn, emit_qmatmul as EmitFn)
    };
    let plan = plan_kernel(&problem, target).map_err(|e| e.to_string())?;
    let layout = QMatmulLayout::new(&plan, 0).map_err(|e| e.to_string())?;
    let program = emit_kernel(&plan, target, &layout).map_err(|e| e.to_string())?;
    Ok((NpuKernel::QMatmul { plan, layout }, program))
}

/// A loaded `qmatmul` / `qswiglu` node: its DDR image with the weights
/// packed, and the buffers a call fills.
pub(super) struct LoadedQ {
    plan: QTilePlan,
    layout: QMatmulLayout,
    program: Program,
    k: usize,
    xq: Vec<i8>,
    rows: Vec<RowParams>,
    sim: NpuSim,
}

impl LoadedQ {
    pub(super) fn load(
        module: &Module,
        g: &Graph,
        node: usize,
        (plan, layout): (QTilePlan, QMatmulLayout),
        program: Program,
        target: &Target,
    ) -> Result<LoadedQ, String> {
        let n = &g.nodes[node];
        let weights = quantized_weights(module, g, node)?;
        let consts = match (n.op.mnemonic(), &weights[..]) {
            ("qswiglu", [(gq, gs, _), (uq, us, _)]) => pack_qswiglu(&plan, gq, gs, uq, us),
            ("qswiglu", [(q, s, _)]) => {
                // The fused gate_up weight: gate is the first half of the columns.
                let half = plan.problem.n as usize;
                let (gq, uq) = split_columns(q, half);
                let (gs, us) = split_columns(s, half);
                pack_qswiglu(&plan, &gq, &gs, &uq, &us)
            }
            (_, [(q, s, _)]) => pack_qmatmul(&plan, q, s),
            _ => return Err(format!("{} weight operands", weights.len())),
        }
        .map_err(|e| e.to_string())?;
        let mut ddr = vec![0u8; layout.total as usize];
        ddr[layout.consts as usize..][..consts.len()].copy_from_slice(&consts);
        let p = plan.problem;
        let (m, k) = (p.m as usize, p.k as usize);
        Ok(LoadedQ {
            k,
            xq: vec![0; plan.m_pad as usize * k],
            rows: vec![RowParams::default(); m],
            sim: NpuSim::new(target.clone(), ddr),
            plan,
            layout,
            program,
        })
    }

    /// One call: quantize `x`'s rows, run the program, read `y`.
    pub(super) fn call(&mut self, x: &[f32], y: &mut [f32]) -> Result<SimStats, KernelError> {
        quantize_rows(x, self.k, &mut self.xq, &mut self.rows);
        self.layout
            .write_inputs(&mut self.sim.ddr, &self.xq, &self.rows);
        let stats = run_program(&mut self.sim, &self.program)?;
        self.layout.read_output(&self.sim.ddr, y);
        Ok(stats)
    }

    /// [`LoadedQ::call`] on the node's buffers (operands, then results).
    ///
    /// # Safety
    ///
    /// `ins[0]` and `outs[0]` must be valid, 4-byte aligned, non-overlapping
    /// buffers of the node's static types.
    pub(super) unsafe fn call_raw(
        &mut self,
        ins: &[*const u8],
        outs: &[*mut u8],
    ) -> Result<SimStats, KernelError> {
        let p = self.plan.problem;
        let (nx, ny) = (p.m as usize * self.k, p.m as usize * p.n as usize);
        // SAFETY: the caller's contract.
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts(ins[0] as *const f32, nx),
                std::slice::from_raw_parts_mut(outs[0] as *mut f32, ny),
            )
        };
        self.call(x, y)
    }
}

/// The left and right `half` columns of a row-major `[rows, 2·half]` matrix.
fn split_columns<T: Copy>(m: &[T], half: usize) -> (Vec<T>, Vec<T>) {
    let (mut l, mut r) = (
        Vec::with_capacity(m.len() / 2),
        Vec::with_capacity(m.len() / 2),
    );
    for row in m.chunks_exact(2 * half) {
        l.extend_from_slice(&row[..half]);
        r.extend_from_slice(&row[half..]);
    }
    (l, r)
}
