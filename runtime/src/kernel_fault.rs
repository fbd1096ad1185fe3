//! Mutations of one kernel's result (cargo feature `fault-injection`, for
//! tests; a build without it never reads the plan): what the golden
//! checks must catch.
//!
//! `SLMCC_KERNEL_FAULT=KIND:OP[#K]` changes the result of the first (or
//! the `K`-th, from 0) node of each graph whose op is `OP` (its mnemonic:
//! `rms_norm`, `attention`, …), on every backend that runs planned graphs
//! (`cpu`, `npu-sim`, `npu`, packages):
//! - `ulp`: its first `f32` element moves up by one unit in the last place;
//! - `swap-rows`: its first two rows (along the last axis) trade places.

use slmcc_ir::{DType, Graph, OpDef};

use crate::exec::{Kernel, KernelError};

/// The environment variable holding the plan.
pub const KERNEL_FAULT_ENV: &str = "SLMCC_KERNEL_FAULT";

/// How a result is changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutation {
    Ulp,
    SwapRows,
}

/// The plan in the environment, when the build injects faults.
fn plan() -> Result<Option<(Mutation, String, usize)>, String> {
    if !cfg!(feature = "fault-injection") {
        return Ok(None);
    }
    let text = match std::env::var(KERNEL_FAULT_ENV) {
        Ok(text) if !text.is_empty() => text,
        _ => return Ok(None),
    };
    let bad = || format!("{KERNEL_FAULT_ENV}={text}: expected ulp:OP[#K] or swap-rows:OP[#K]");
    let (kind, op) = text.split_once(':').ok_or_else(bad)?;
    let (op, k) = match op.split_once('#') {
        Some((op, k)) => (op, k.parse().map_err(|_| bad())?),
        None => (op, 0),
    };
    let kind = match kind {
        "ulp" => Mutation::Ulp,
        "swap-rows" => Mutation::SwapRows,
        _ => return Err(bad()),
    };
    Ok(Some((kind, op.to_string(), k)))
}

/// `kernel`, the kernel of node `node` of `g`, with the plan's mutation
/// after it when the plan names this node.
pub fn wrap(g: &Graph, node: usize, kernel: Kernel) -> Result<Kernel, String> {
    let Some((mutation, op, k)) = plan()? else {
        return Ok(kernel);
    };
    let mut same_op = (0..g.nodes.len()).filter(|&i| g.nodes[i].op.mnemonic() == op);
    if same_op.nth(k) != Some(node) || g.ty(g.nodes[node].outputs[0]).dtype != DType::F32 {
        return Ok(kernel);
    }
    tracing::warn!(
        "{KERNEL_FAULT_ENV}: mutating the result of node {node} of @{}",
        g.name
    );
    Ok(Box::new(move |args| {
        kernel(args)?;
        let out = &args.outputs[0];
        let n = out.elements();
        // SAFETY: the executor passes the node's output as an f32 buffer
        // of `elements()` values (the dtype was checked above).
        let y = unsafe { std::slice::from_raw_parts_mut(out.ptr as *mut f32, n) };
        match mutation {
            Mutation::Ulp => {
                let v = y.first_mut().ok_or(KernelError("an empty result"))?;
                *v = f32::from_bits(v.to_bits() + 1);
            }
            Mutation::SwapRows => {
                let row = out.shape.last().copied().unwrap_or(1).max(1);
                if n < 2 * row {
                    return Err(KernelError("swap-rows: fewer than two rows"));
                }
                let (a, b) = y.split_at_mut(row);
                a.swap_with_slice(&mut b[..row]);
            }
        }
        Ok(())
    }))
}
