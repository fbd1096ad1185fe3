//! Indexing: `Gather`, `GatherND`, `GatherElements` (the IR ops of the same
//! semantics, attributes carried over).

use slmcc_ir::ops::gather::Gather;
use slmcc_ir::ops::gather_elements::GatherElements;
use slmcc_ir::ops::gather_nd::GatherNd;
use slmcc_ir::ValueId;

use super::{one, OpMap};
use crate::onnx::context::{Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("Gather", gather);
    reg.insert("GatherND", gather_nd);
    reg.insert("GatherElements", gather_elements);
}

fn gather(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let axis = ctx.int("axis", 0)?;
    let (d, i) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add1(Gather { axis }, &[d, i])?)
}

fn gather_nd(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let batch_dims = ctx.int("batch_dims", 0)?;
    let (d, i) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add1(GatherNd { batch_dims }, &[d, i])?)
}

fn gather_elements(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let axis = ctx.int("axis", 0)?;
    let (d, i) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add1(GatherElements { axis }, &[d, i])?)
}
