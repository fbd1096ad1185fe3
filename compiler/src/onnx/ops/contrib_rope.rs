//! onnxruntime's `RotaryEmbedding` (`com.microsoft`), which its transformer
//! optimizer writes, mapped onto `rope`:
//!
//! ```text
//! RotaryEmbedding(input, position_ids, cos_cache, sin_cache) -> output
//! ```
//!
//! - `input` is `[b, s, hidden]` (split into `num_heads` heads; without
//!   `num_heads`, heads of twice the caches' width) or `[b, heads, s, d]`;
//! - `position_ids` is one offset (shape `[]` or `[1]`: the positions are
//!   `offset .. offset + s - 1`) or `[b, s]`;
//! - `cos_cache`/`sin_cache` are `[max_pos, r/2]`, read at the positions;
//!   `r` is `rotary_embedding_dim`, or the head size;
//! - `interleaved` picks the pairing, as for ONNX's `RotaryEmbedding`.
//!
//! Refused: `is_packed_batching`, and a `scale` other than 1 (onnxruntime's
//! CPU kernel does not read it either).

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::reshape::Reshape;
use slmcc_ir::ops::rope::Rope;
use slmcc_ir::{Dim, ValueId};

use super::transformer::{merge_heads, positions, rope_tables, split_heads};
use crate::onnx::context::{fail, Ctx, R};

pub fn rotary_embedding(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(4, 4)?;
    let interleaved = ctx.int("interleaved", 0)? != 0;
    let num_heads = ctx.int("num_heads", 0)?;
    let rotary = ctx.int("rotary_embedding_dim", 0)?;
    ctx.int_only("is_packed_batching", 0, "")?;
    if ctx.float("scale", 1.0)? != 1.0 {
        fail!("attribute `scale` other than 1 is not supported");
    }
    ctx.only_outputs(1, "")?;
    let (x, pos, cos, sin) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?, ctx.input(3)?);
    let Some(half) = ctx.ty(cos).shape.dims().get(1).and_then(Dim::as_fixed) else {
        fail!(
            "cos_cache must be [max_positions, rotary_dim / 2], got {}",
            ctx.ty(cos)
        );
    };
    let x4 = match ctx.ty(x).rank() {
        4 => x,
        3 => {
            let hidden = ctx.ty(x).shape.dims()[2].as_fixed();
            let heads = match (num_heads, hidden) {
                (h, _) if h > 0 => h,
                (_, Some(hidden)) if rotary == 0 && hidden % (2 * half) == 0 => hidden / (2 * half),
                _ => fail!("a rank-3 input needs `num_heads`"),
            };
            split_heads(ctx, x, heads, "input")?
        }
        r => fail!("input must have rank 3 or 4, got rank {r}"),
    };
    let Some(d) = ctx.ty(x4).shape.dims()[3].as_fixed() else {
        fail!("the head size must be static, got {}", ctx.ty(x4));
    };
    let r = if rotary == 0 { d } else { rotary };
    if r <= 0 || r > d || r != 2 * half {
        fail!("the rotary dim {r} must be even, within the head size {d} and twice the caches' {half}");
    }
    let at = if ctx.ty(pos).shape.dims().iter().all(|d| *d == Dim::fixed(1)) {
        // One offset: the positions after it.
        let s = ctx.ty(x4).shape.dims()[2].clone();
        let offset = ctx.const_dims(vec![])?;
        let offset = ctx.add1(Reshape { allow_zero: false }, &[pos, offset])?;
        let range = positions(ctx, &s)?;
        ctx.add1(Binary::new(BinaryKind::Add), &[range, offset])?
    } else {
        pos
    };
    let (cos, sin) = rope_tables(ctx, cos, sin, Some(at), interleaved)?;
    let rope = Rope {
        rotary_dim: r,
        interleaved,
    };
    let y = ctx.add1(rope, &[x4, cos, sin])?;
    let y = if x4 == x { y } else { merge_heads(ctx, y)? };
    Ok(vec![y])
}
