//! onnxruntime's `MultiHeadAttention` (`com.microsoft`), which its
//! transformer optimizer writes for self- and cross-attention, mapped onto
//! `attention`:
//!
//! ```text
//! MultiHeadAttention(query, key?, value?, bias?, key_padding_mask?,
//!                    attention_bias?, past_key?, past_value?)
//!     -> (output, present_key?, present_value?)
//! ```
//!
//! - `query` is `[b, s, N·h]`; `key` and `value` are `[b, l, N·h]` (split
//!   into `num_heads` heads) or already `[b, N, l, h]`;
//! - `bias` (`[3·N·h]`: query, key and value parts) is added first;
//! - with `past_key`/`past_value` (`[b, N, past, h]`) the new keys and
//!   values are appended to them, and the concatenations are the
//!   `present_*` outputs;
//! - `unidirectional = 1`: causal, aligned to the past (queries and new
//!   keys must be as many); `attention_bias` (`[b or 1, N or 1, s, t]`) is
//!   added to the scores; `scale` (0: `1/√h`).
//!
//! The output is `[b, s, N·h]`. Refused: packed QKV or KV in `query` or
//! `key`, `key_padding_mask` (slmcc runs one unpadded sequence), inputs 8
//! and 9 (`past_sequence_length`, `cache_indirection`: the decoder-masked
//! form for beam search) and the `qk` output.

use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::slice::Slice;
use slmcc_ir::{Dim, ValueId};

use super::transformer::{merge_heads, split_heads};
use crate::onnx::context::{fail, Ctx, R};

pub fn multi_head_attention(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 10)?;
    let heads = ctx.int("num_heads", 0)?;
    let scale = ctx.float("scale", 0.0)?;
    let causal = ctx.int("unidirectional", 0)? != 0;
    // The additive value of masked-out keys: only a key padding mask,
    // refused below, reads it.
    ctx.float("mask_filter_value", -10000.0)?;
    for (i, what) in [
        (4, "key_padding_mask"),
        (8, "past_sequence_length"),
        (9, "cache_indirection"),
    ] {
        if ctx.opt_input(i).is_some() {
            fail!("input {i} (`{what}`) is not supported");
        }
    }
    ctx.only_outputs(3, " (the qk output)")?;
    if heads <= 0 {
        fail!("attribute `num_heads` must be positive, got {heads}");
    }
    let query = ctx.input(0)?;
    let (Some(key), Some(value)) = (ctx.opt_input(1), ctx.opt_input(2)) else {
        fail!("packed QKV in `query` (no key and value) is not supported");
    };
    if ctx.ty(query).rank() != 3 || !matches!(ctx.ty(key).rank(), 3 | 4) {
        fail!(
            "query must be [batch, seq, hidden] and key [batch, seq, hidden] or \
             [batch, heads, seq, head_size], got {} and {}",
            ctx.ty(query),
            ctx.ty(key)
        );
    }
    let (mut q, mut k, mut v) = (query, key, value);
    if let Some(bias) = ctx.opt_input(3) {
        if ctx.ty(k).rank() != 3 {
            fail!("a bias needs key and value of rank 3, got {}", ctx.ty(k));
        }
        let widths: Vec<Dim> = [q, k, v]
            .iter()
            .map(|&x| ctx.ty(x).shape.dims()[2].clone())
            .collect();
        let mut at = Dim::fixed(0);
        for (x, width) in [&mut q, &mut k, &mut v].into_iter().zip(widths) {
            let end = &at + &width;
            let part = bias_part(ctx, bias, &at, &end)?;
            *x = ctx.add1(Binary::new(BinaryKind::Add), &[*x, part])?;
            at = end;
        }
    }
    let q = split_heads(ctx, q, heads, "query")?;
    let (mut k, mut v) = match ctx.ty(k).rank() {
        3 => (
            split_heads(ctx, k, heads, "key")?,
            split_heads(ctx, v, heads, "value")?,
        ),
        _ => (k, v),
    };
    let new_keys = ctx.ty(k).shape.dims()[2].clone();
    match (ctx.opt_input(6), ctx.opt_input(7)) {
        (Some(pk), Some(pv)) => {
            k = ctx.add1(Concat { axis: 2 }, &[pk, k])?;
            v = ctx.add1(Concat { axis: 2 }, &[pv, v])?;
        }
        (None, None) => {}
        _ => fail!("past_key and past_value must be given together"),
    }
    if causal && new_keys != ctx.ty(q).shape.dims()[2] {
        fail!(
            "unidirectional attention with {new_keys} new keys for {} queries is not supported",
            ctx.ty(q).shape.dims()[2]
        );
    }
    let Some(d) = ctx.ty(q).shape.dims()[3].as_fixed() else {
        fail!("the head size must be static, got {}", ctx.ty(q));
    };
    let op = Attention {
        kv_heads: heads,
        scale: if scale == 0.0 {
            1.0 / (d as f32).sqrt()
        } else {
            scale
        },
        causal,
        window: 0,
        softcap: 0.0,
    };
    let mut operands = vec![q, k, v];
    operands.extend(ctx.opt_input(5));
    let y = ctx.add1(op, &operands)?;
    let mut out = vec![merge_heads(ctx, y)?];
    if ctx.output_used(1) || ctx.output_used(2) {
        out.extend([k, v]);
    }
    Ok(out)
}

/// `bias[start .. end]`.
fn bias_part(ctx: &mut Ctx, bias: ValueId, start: &Dim, end: &Dim) -> R<ValueId> {
    let starts = ctx.const_dims(vec![start.clone()])?;
    let ends = ctx.const_dims(vec![end.clone()])?;
    let axes = ctx.const_i64s(&[0])?;
    ctx.add1(Slice, &[bias, starts, ends, axes])
}
