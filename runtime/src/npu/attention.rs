//! `attention` nodes on the NPU: the plan and DDR image from the node's
//! static shapes, and a call that writes `q`, `k`, `v` and the mask, runs
//! the program and reads the result (f16 products, f32 online softmax:
//! `slmcc_backends::npu::kernels::attention`).
//!
//! With a mask operand the call first finds the key columns the mask keeps
//! for some query (a KV cache's mask keeps the filled slots) and runs the
//! program for those keys (from a key tile's start to a multiple of 16),
//! emitted once per range and cached; the full range runs the node's
//! stored program. The skipped keys are masked for every query, so the
//! result is the same.

use std::collections::HashMap;
use std::ops::Range;

use slmcc_backends::npu::kernels::attention::{
    emit_attention, plan_attention, AttentionLayout, AttentionPlan, AttentionProblem, MaskKind,
};
use slmcc_backends::npu::{Program, Target};
use slmcc_ir::placement::npu_attention_mask_rows;
use slmcc_ir::{DType, Graph, Op};

use super::{f32s, fixed_shape, read_f32s, run_program, write_f32s, NpuKernel};
use crate::exec::KernelError;
use crate::npu_sim::{NpuSim, SimStats};

/// The problem of attention node `node` of `g`.
fn problem(g: &Graph, node: usize) -> Result<AttentionProblem, String> {
    let n = &g.nodes[node];
    let Op::Attention(op) = n.op else {
        unreachable!("plan_node dispatches only attention here")
    };
    let q = fixed_shape(g, n.inputs[0], "q")?;
    let k = fixed_shape(g, n.inputs[1], "k")?;
    let v = fixed_shape(g, n.inputs[2], "v")?;
    let u = |x: usize| u32::try_from(x).map_err(|_| "dimension too large".to_string());
    let (mask, mask_rows) = match n.inputs.get(3) {
        None => (MaskKind::None, 1),
        Some(&m) => {
            let rows = npu_attention_mask_rows(g, node)
                .ok_or("mask shape the NPU kernel does not broadcast")?;
            let kind = if g.ty(m).dtype == DType::Bool {
                MaskKind::Keep
            } else {
                MaskKind::Add
            };
            (kind, rows)
        }
    };
    Ok(AttentionProblem {
        batch: u(q[0])?,
        heads: u(q[1])?,
        kv_heads: u(k[1])?,
        s: u(q[2])?,
        t: u(k[2])?,
        d: u(q[3])?,
        dv: u(v[3])?,
        scale: op.scale,
        causal: op.causal,
        window: u(op.window.max(0) as usize)?,
        softcap: op.softcap,
        mask,
        mask_rows: u(mask_rows)?,
    })
}

/// The kernel of an `attention` node over keys `keys` (`None`: all).
pub(super) fn plan(
    g: &Graph,
    node: usize,
    target: &Target,
    keys: Option<usize>,
) -> Result<(NpuKernel, Program), String> {
    let p = problem(g, node)?;
    let plan = plan_attention(&p, target).map_err(|e| e.to_string())?;
    let layout = AttentionLayout::new(&p).map_err(|e| e.to_string())?;
    let keys = keys.map_or(p.t, |k| k.min(p.t as usize) as u32);
    let program = emit_attention(&plan, target, &layout, 0..keys).map_err(|e| e.to_string())?;
    Ok((NpuKernel::Attention { plan, layout }, program))
}

/// The key ranges the runtime runs programs for end at multiples of this.
const KEY_GRANULE: usize = 16;

/// A loaded attention node: its DDR image and the programs by key range.
pub(super) struct LoadedAttention {
    plan: AttentionPlan,
    layout: AttentionLayout,
    target: Target,
    programs: HashMap<(u32, u32), Program>,
    sim: NpuSim,
}

impl LoadedAttention {
    pub(super) fn load(
        (plan, layout): (AttentionPlan, AttentionLayout),
        program: Program,
        target: &Target,
    ) -> LoadedAttention {
        let mut ddr = vec![0u8; layout.total as usize];
        ddr[layout.params as usize..][..16]
            .copy_from_slice(&AttentionLayout::params_record(&plan.problem));
        let full = (0, plan.problem.t);
        LoadedAttention {
            programs: HashMap::from([(full, program)]),
            sim: NpuSim::new(target.clone(), ddr),
            target: target.clone(),
            plan,
            layout,
        }
    }

    /// The key columns the mask in the image keeps for some query, from the
    /// start of its key tile to the next multiple of [`KEY_GRANULE`] (so a
    /// decode step reuses a program for 16 steps).
    fn kept_keys(&self) -> Range<u32> {
        let p = &self.plan.problem;
        let (t, rows) = (p.t as usize, p.mask_rows as usize);
        let Some(at) = self.layout.mask else {
            return 0..p.t;
        };
        let ddr = &self.sim.ddr[at as usize..];
        let kept = |j: usize| {
            (0..rows).any(|i| match p.mask {
                MaskKind::Keep => ddr[i * t + j] != 0,
                _ => {
                    let b = &ddr[4 * (i * t + j)..][..4];
                    f32::from_le_bytes(b.try_into().expect("4 bytes")) != f32::NEG_INFINITY
                }
            })
        };
        let Some(lo) = (0..t).find(|&j| kept(j)) else {
            return 0..0;
        };
        let hi = (lo..t).rev().find(|&j| kept(j)).map_or(lo, |j| j + 1);
        let nk = self.plan.nk as usize;
        (lo / nk * nk) as u32..(hi.div_ceil(KEY_GRANULE) * KEY_GRANULE).min(t) as u32
    }

    /// One call on the node's buffers: operands `q`, `k`, `v` (and the
    /// mask), the result.
    ///
    /// # Safety
    ///
    /// The buffers must be valid and aligned for the node's static types.
    pub(super) unsafe fn call_raw(
        &mut self,
        ins: &[*const u8],
        outs: &[*mut u8],
    ) -> Result<SimStats, KernelError> {
        let p = self.plan.problem;
        let n = |xs: &[u32]| xs.iter().map(|&x| x as usize).product::<usize>();
        let l = self.layout;
        let ddr = &mut self.sim.ddr;
        // SAFETY (all `f32s` and the mask's bytes): the caller's contract.
        unsafe {
            write_f32s(ddr, l.q, f32s(ins[0], n(&[p.batch, p.heads, p.s, p.d])));
            write_f32s(ddr, l.k, f32s(ins[1], n(&[p.batch, p.kv_heads, p.t, p.d])));
            write_f32s(ddr, l.v, f32s(ins[2], n(&[p.batch, p.kv_heads, p.t, p.dv])));
            if let Some(m) = l.mask {
                let cells = n(&[p.mask_rows, p.t]);
                if p.mask == MaskKind::Keep {
                    let src = std::slice::from_raw_parts(ins[3], cells);
                    ddr[m as usize..][..cells].copy_from_slice(src);
                } else {
                    write_f32s(ddr, m, f32s(ins[3], cells));
                }
            }
        }
        let keys = self.kept_keys();
        let key = (keys.start, keys.end);
        if !self.programs.contains_key(&key) {
            let prog = emit_attention(&self.plan, &self.target, &self.layout, keys)
                .map_err(|_| KernelError("npu attention: emitting a key range failed"))?;
            self.programs.insert(key, prog);
        }
        let stats = run_program(&mut self.sim, &self.programs[&key])?;
        // SAFETY: the caller's contract.
        unsafe {
            read_f32s(
                &self.sim.ddr,
                l.out,
                outs[0],
                n(&[p.batch, p.heads, p.s, p.dv]),
            )
        };
        Ok(stats)
    }
}
