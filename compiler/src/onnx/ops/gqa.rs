//! onnxruntime's `GroupQueryAttention` (`com.microsoft`), the attention of
//! every decoder that onnxruntime-genai's model builder writes, mapped onto
//! `rope` + `concat` + `attention`:
//!
//! ```text
//! GroupQueryAttention(query, key?, value?, past_key, past_value, seqlens_k,
//!                     total_sequence_length, cos_cache?, sin_cache?,
//!                     position_ids?) -> (output, present_key, present_value)
//! ```
//!
//! - `query` is `[b, s, H·d]`, or, without `key` and `value`, the packed
//!   `[b, s, (H + 2·KVH)·d]` (`num_heads` H, `kv_num_heads` KVH), split
//!   into queries, keys and values;
//! - with `do_rotary = 1`, queries and keys are rotated by `rope` with the
//!   tables `cos_cache`/`sin_cache` (`[max_pos, r/2]`) read at
//!   `position_ids`, or else at the positions `past .. past + s - 1`;
//!   `rotary_interleaved` picks the pairing;
//! - the keys and values are appended to `past_key`/`past_value`
//!   (`[b, KVH, past, d]`) along the sequence; the concatenations are the
//!   `present_*` outputs;
//! - the queries attend causally (aligned to the past), with grouped KV
//!   heads, `scale` (0: `1/√d`), `softcap`, and with `local_window_size`
//!   `w` > 0 only to their last `w` keys (`attention`'s `window`); the
//!   output is `[b, s, H·d]`.
//!
//! The past length is the `past_key` input's whole length: slmcc runs a
//! decoder one unpadded sequence at a time, so `seqlens_k` and
//! `total_sequence_length` (which count the same positions from the
//! attention mask) are not read, and the builder's shared past/present
//! buffer (a past as long as the context) is not supported. A `past_key`
//! whose head size is a symbol (the builder's `kv_cache_dim`) gets the
//! head size `d` wherever that symbol occurs. Refused: `smooth_softmax`,
//! `qk_output`, `attention_bias` and `head_sink`.

use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::rope::Rope;
use slmcc_ir::ops::split::Split;
use slmcc_ir::{Dim, ValueId};

use super::transformer::{merge_heads, positions, rope_tables, split_heads};
use crate::onnx::context::{fail, Ctx, R};

pub fn group_query_attention(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(7, 12)?;
    let heads = ctx.int("num_heads", 0)?;
    let kv_heads = ctx.int("kv_num_heads", 0)?;
    let scale = ctx.float("scale", 0.0)?;
    let softcap = ctx.float("softcap", 0.0)?;
    let rotary = ctx.int("do_rotary", 0)? != 0;
    let interleaved = ctx.int("rotary_interleaved", 0)? != 0;
    let local_window = ctx.int("local_window_size", -1)?;
    if local_window == 0 || local_window < -1 {
        fail!("attribute `local_window_size` = {local_window} is not -1 or a positive width");
    }
    ctx.int_only("smooth_softmax", 0, "")?;
    ctx.int_only("qk_output", 0, "")?;
    for (i, what) in [(10, "attention_bias"), (11, "head_sink")] {
        if ctx.opt_input(i).is_some() {
            fail!("input {i} (`{what}`) is not supported");
        }
    }
    ctx.only_outputs(3, "")?;
    if heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 {
        fail!("num_heads = {heads} must be a positive multiple of kv_num_heads = {kv_heads}");
    }
    let query = ctx.input(0)?;
    if ctx.ty(query).rank() != 3 {
        fail!("query must be [batch, seq, hidden], got {}", ctx.ty(query));
    }
    let (q, k, v) = match (ctx.opt_input(1), ctx.opt_input(2)) {
        (Some(k), Some(v)) => (query, k, v),
        (None, None) => unpack(ctx, query, heads, kv_heads)?,
        _ => fail!("key and value must be given together, or both packed into query"),
    };
    let q = split_heads(ctx, q, heads, "query")?;
    let mut k = split_heads(ctx, k, kv_heads, "key")?;
    let v = split_heads(ctx, v, kv_heads, "value")?;
    let Some(d) = ctx.ty(q).shape.dims()[3].as_fixed() else {
        fail!("the head size must be static, got {}", ctx.ty(q));
    };
    let (past_k, past_v) = (ctx.input(3)?, ctx.input(4)?);
    for p in [past_k, past_v] {
        head_size_of_past(ctx, p, d)?;
    }
    let past = ctx.ty(past_k).shape.dims()[2].clone();
    let q = if rotary {
        let (q, rotated_k) = rotate(ctx, q, k, &past, interleaved)?;
        k = rotated_k;
        q
    } else {
        q
    };
    let keys = ctx.add1(Concat { axis: 2 }, &[past_k, k])?;
    let values = ctx.add1(Concat { axis: 2 }, &[past_v, v])?;
    let op = Attention {
        kv_heads,
        scale: if scale == 0.0 {
            1.0 / (d as f32).sqrt()
        } else {
            scale
        },
        causal: true,
        // Each query sees its last `local_window_size` keys (itself included).
        window: local_window.max(0),
        softcap,
    };
    let y = ctx.add1(op, &[q, keys, values])?;
    Ok(vec![merge_heads(ctx, y)?, keys, values])
}

/// Splits the packed `[b, s, (H + 2·KVH)·d]` into queries, keys, values.
fn unpack(
    ctx: &mut Ctx,
    packed: ValueId,
    heads: i64,
    kv_heads: i64,
) -> R<(ValueId, ValueId, ValueId)> {
    let width = ctx.ty(packed).shape.dims()[2].clone();
    let Some(d) = width.div_exact(&Dim::fixed(heads + 2 * kv_heads)) else {
        fail!(
            "packed query {} does not hold {heads} query and 2 × {kv_heads} key/value heads",
            ctx.ty(packed)
        );
    };
    let sizes = vec![
        &Dim::fixed(heads) * &d,
        &Dim::fixed(kv_heads) * &d,
        &Dim::fixed(kv_heads) * &d,
    ];
    match ctx.add(Split { axis: 2, sizes }, &[packed])?[..] {
        [q, k, v] => Ok((q, k, v)),
        _ => fail!("`split` of the packed query gave the wrong number of parts"),
    }
}

/// Checks that a past is `[b, KVH, past, d]`; binds a symbolic head size.
fn head_size_of_past(ctx: &mut Ctx, past: ValueId, d: i64) -> R<()> {
    let ty = ctx.ty(past).clone();
    if ty.rank() != 4 {
        fail!("past keys and values must be [batch, kv_heads, past, head_size], got {ty}");
    }
    let last = &ty.shape.dims()[3];
    if let [s] = last.symbols()[..] {
        if *last == Dim::sym(s) {
            let s = s.to_string();
            return ctx.bind_symbol(&s, Dim::fixed(d));
        }
    }
    if last.as_fixed() != Some(d) {
        fail!("past {ty} does not have the head size {d}");
    }
    Ok(())
}

/// `rope` of the queries and keys at `position_ids` (input 9) or at
/// `past .. past + s - 1`.
fn rotate(
    ctx: &mut Ctx,
    q: ValueId,
    k: ValueId,
    past: &Dim,
    interleaved: bool,
) -> R<(ValueId, ValueId)> {
    let (Some(cos), Some(sin)) = (ctx.opt_input(7), ctx.opt_input(8)) else {
        fail!("do_rotary = 1 needs cos_cache and sin_cache (inputs 7 and 8)");
    };
    let Some(half) = ctx.ty(cos).shape.dims().get(1).and_then(Dim::as_fixed) else {
        fail!(
            "cos_cache must be [max_positions, rotary_dim / 2], got {}",
            ctx.ty(cos)
        );
    };
    let at = match ctx.opt_input(9) {
        Some(p) => p,
        None => {
            let s = ctx.ty(q).shape.dims()[2].clone();
            let range = positions(ctx, &s)?;
            if *past == Dim::fixed(0) {
                range
            } else {
                let offset = ctx.scalar_dims(past.clone())?;
                ctx.add1(Binary::new(BinaryKind::Add), &[range, offset])?
            }
        }
    };
    let (cos, sin) = rope_tables(ctx, cos, sin, Some(at), interleaved)?;
    let rope = Rope {
        rotary_dim: 2 * half,
        interleaved,
    };
    Ok((
        ctx.add1(rope, &[q, cos, sin])?,
        ctx.add1(rope, &[k, cos, sin])?,
    ))
}
