//! The transformer ops of opset 23, which map onto the IR's fused ops:
//! `RMSNormalization` → `rms_norm`, `RotaryEmbedding` → `rope`,
//! `Attention` → `attention` (PyTorch's dynamo exporter writes all three at
//! opset 23).
//!
//! - `RMSNormalization(X, scale)`: normalisation over the axes from `axis`
//!   on (`stash_type` 1); over more than the last one, as `rms_norm` of
//!   those axes flattened into one.
//! - `RotaryEmbedding(X, cos_cache, sin_cache[, position_ids])`: `X` of
//!   rank 4 `[b, heads, s, d]`, or rank 3 `[b, s, heads · d]` with
//!   `num_heads`; caches `[b, s, r/2]`, or `[max_pos, r/2]` read at
//!   `position_ids`. The caches hold half the rotary dim `r`; the `rope`
//!   tables repeat them (`cat(c, c)`, or each value twice when
//!   `interleaved`).
//! - `Attention(Q, K, V[, attn_mask, past_key, past_value])`: rank 4
//!   `[b, heads, s, d]` or rank 3 with `q_num_heads`/`kv_num_heads`; grouped
//!   KV heads; `scale` (default `1/√d`), `softcap`, a bool or additive mask
//!   whose last dim is the key length; past keys and values are
//!   concatenated and the concatenations are the `present_*` outputs.
//!   `is_causal = 1` aligns the causal rule to the past (ONNX's offset is
//!   the past length), which is `attention`'s `causal` when the new keys
//!   are as many as the queries, and otherwise an explicit boolean mask
//!   (`j <= i + past`, combined with `attn_mask`). Not supported:
//!   `nonpad_kv_seqlen`, the
//!   `qk_matmul_output` output, a `softmax_precision` other than float, and
//!   a mask shorter than the keys.

use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::expand::Expand;
use slmcc_ir::ops::gather::Gather;
use slmcc_ir::ops::range::Range;
use slmcc_ir::ops::reshape::Reshape;
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::ops::rope::Rope;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::ops::unsqueeze::Unsqueeze;
use slmcc_ir::ops::where_::Where;
use slmcc_ir::{DType, Dim, ValueId};

use super::OpMap;
use crate::onnx::context::{fail, Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("RMSNormalization", rms_norm);
    reg.insert("RotaryEmbedding", rotary_embedding);
    reg.insert("Attention", attention);
}

/// The ONNX `DataType` code of `float`.
const FLOAT: i64 = 1;

/// `RMSNormalization`; also onnxruntime's `SimplifiedLayerNormalization`
/// (`contrib.rs`), the same op.
pub(super) fn rms_norm(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let (x, scale) = (ctx.input(0)?, ctx.input(1)?);
    let rank = ctx.ty(x).rank() as i64;
    let axis = ctx.int("axis", -1)?;
    if !(-rank..rank).contains(&axis) {
        fail!("attribute `axis` = {axis} is out of range for rank {rank}");
    }
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    let eps = ctx.float("epsilon", 1e-5)?;
    ctx.int_only("stash_type", FLOAT, " (statistics are computed in f32)")?;
    ctx.only_outputs(1, "")?;
    let op = RmsNorm { eps, offset: 0.0 };
    if axis + 1 == rank as usize {
        return Ok(vec![ctx.add1(op, &[x, scale])?]);
    }
    // Normalised over the axes from `axis` on: those flattened into one
    // last axis, the scale broadcast to them and flattened alike.
    let dims = ctx.ty(x).shape.dims().to_vec();
    let inner = dims[axis..].iter().fold(Dim::fixed(1), |p, d| &p * d);
    let mut flat = dims[..axis].to_vec();
    flat.push(inner.clone());
    let x2 = reshape(ctx, x, flat)?;
    let normalized = ctx.const_dims(dims[axis..].to_vec())?;
    let scale = ctx.add1(Expand, &[scale, normalized])?;
    let scale = reshape(ctx, scale, vec![inner])?;
    let y = ctx.add1(op, &[x2, scale])?;
    Ok(vec![reshape(ctx, y, dims)?])
}

/// A `reshape` of `x` to `dims` (0 copies the input's dim).
fn reshape(ctx: &mut Ctx, x: ValueId, dims: Vec<Dim>) -> R<ValueId> {
    let shape = ctx.const_dims(dims)?;
    ctx.add1(Reshape { allow_zero: false }, &[x, shape])
}

fn transpose(ctx: &mut Ctx, x: ValueId, perm: &[i64]) -> R<ValueId> {
    ctx.add1(
        Transpose {
            perm: perm.to_vec(),
        },
        &[x],
    )
}

/// `[b, s, heads · d]` → `[b, heads, s, d]`.
pub(super) fn split_heads(ctx: &mut Ctx, x: ValueId, heads: i64, what: &str) -> R<ValueId> {
    let dims = ctx.ty(x).shape.dims().to_vec();
    let Some(d) = dims[2].div_exact(&Dim::fixed(heads)) else {
        fail!("{what} {} does not split into {heads} heads", ctx.ty(x));
    };
    let split = reshape(
        ctx,
        x,
        vec![dims[0].clone(), dims[1].clone(), Dim::fixed(heads), d],
    )?;
    transpose(ctx, split, &[0, 2, 1, 3])
}

/// `[b, heads, s, d]` → `[b, s, heads · d]`.
pub(super) fn merge_heads(ctx: &mut Ctx, x: ValueId) -> R<ValueId> {
    let dims = ctx.ty(x).shape.dims().to_vec();
    let t = transpose(ctx, x, &[0, 2, 1, 3])?;
    reshape(
        ctx,
        t,
        vec![dims[0].clone(), dims[2].clone(), &dims[1] * &dims[3]],
    )
}

/// ONNX's causal rule as a boolean `[queries, keys]` mask: query `i`
/// sees key `j` when `j <= i + past`.
fn causal_keep(ctx: &mut Ctx, queries: &Dim, keys: &Dim, past: &Dim) -> R<ValueId> {
    let rows = positions(ctx, queries)?;
    let offset = ctx.scalar_dims(past.clone())?;
    let rows = ctx.add1(Binary::new(BinaryKind::Add), &[rows, offset])?;
    let rows = ctx.add1(Unsqueeze { axes: vec![1] }, &[rows])?;
    let cols = positions(ctx, keys)?;
    ctx.add1(Binary::new(BinaryKind::LessOrEqual), &[cols, rows])
}

/// `range(0, len, 1)`: the positions of `len` tokens.
pub(super) fn positions(ctx: &mut Ctx, len: &Dim) -> R<ValueId> {
    let (start, limit, delta) = (
        ctx.scalar_dims(Dim::fixed(0))?,
        ctx.scalar_dims(len.clone())?,
        ctx.scalar_dims(Dim::fixed(1))?,
    );
    ctx.add1(Range, &[start, limit, delta])
}

/// The `[.., r]` cos and sin tables `rope` reads, from `[.., r/2]` caches
/// (read at the rows `at`, when given).
pub(super) fn rope_tables(
    ctx: &mut Ctx,
    cos: ValueId,
    sin: ValueId,
    at: Option<ValueId>,
    interleaved: bool,
) -> R<(ValueId, ValueId)> {
    let (cos, sin) = match at {
        Some(rows) => (
            ctx.add1(Gather { axis: 0 }, &[cos, rows])?,
            ctx.add1(Gather { axis: 0 }, &[sin, rows])?,
        ),
        None => (cos, sin),
    };
    Ok((
        full_table(ctx, cos, interleaved)?,
        full_table(ctx, sin, interleaved)?,
    ))
}

/// A `[.., r/2]` cache as the `[.., r]` table `rope` reads.
fn full_table(ctx: &mut Ctx, c: ValueId, interleaved: bool) -> R<ValueId> {
    if !interleaved {
        return ctx.add1(Concat { axis: -1 }, &[c, c]);
    }
    let dims = ctx.ty(c).shape.dims().to_vec();
    let rank = dims.len() as i64;
    let u = ctx.add1(Unsqueeze { axes: vec![rank] }, &[c])?;
    let pairs = ctx.add1(Concat { axis: -1 }, &[u, u])?;
    let mut to = dims.clone();
    let last = to.len() - 1;
    to[last] = &to[last] * &Dim::fixed(2);
    reshape(ctx, pairs, to)
}

fn rotary_embedding(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 4)?;
    let interleaved = ctx.int("interleaved", 0)? != 0;
    let num_heads = ctx.int("num_heads", 0)?;
    let rotary = ctx.int("rotary_embedding_dim", 0)?;
    ctx.only_outputs(1, "")?;
    let x = ctx.input(0)?;
    let (mut cos, mut sin) = (ctx.input(1)?, ctx.input(2)?);
    let x4 = match ctx.ty(x).rank() {
        4 => x,
        3 if num_heads > 0 => split_heads(ctx, x, num_heads, "input")?,
        3 => fail!("a rank-3 input needs `num_heads`"),
        r => fail!("input must have rank 3 or 4, got rank {r}"),
    };
    let Some(d) = ctx.ty(x4).shape.dims()[3].as_fixed() else {
        fail!("the head size must be static, got {}", ctx.ty(x4));
    };
    let r = if rotary == 0 { d } else { rotary };
    if r <= 0 || r > d || r % 2 != 0 {
        fail!("rotary_embedding_dim = {r} must be even and within the head size {d}");
    }
    if let Some(pos) = ctx.opt_input(3) {
        cos = ctx.add1(Gather { axis: 0 }, &[cos, pos])?;
        sin = ctx.add1(Gather { axis: 0 }, &[sin, pos])?;
    }
    if ctx.ty(cos).rank() != 3 {
        fail!(
            "the cos/sin caches must be [batch, seq, {}] (or [max_pos, {}] with position_ids), got {}",
            r / 2,
            r / 2,
            ctx.ty(cos)
        );
    }
    let (cos, sin) = rope_tables(ctx, cos, sin, None, interleaved)?;
    let rope = Rope {
        rotary_dim: r,
        interleaved,
    };
    let y = ctx.add1(rope, &[x4, cos, sin])?;
    let y = if x4 == x { y } else { merge_heads(ctx, y)? };
    Ok(vec![y])
}

fn attention(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 7)?;
    if ctx.opt_input(6).is_some() {
        fail!("input 6 (`nonpad_kv_seqlen`) is not supported");
    }
    let causal = ctx.int("is_causal", 0)? != 0;
    let q_heads = ctx.int("q_num_heads", 0)?;
    let kv_heads = ctx.int("kv_num_heads", 0)?;
    ctx.int_only("qk_matmul_output_mode", 0, "")?;
    let scale = ctx.opt_float("scale")?;
    let softcap = ctx.float("softcap", 0.0)?;
    ctx.int_only(
        "softmax_precision",
        FLOAT,
        " (the softmax is computed in f32)",
    )?;
    ctx.only_outputs(3, " (qk_matmul_output)")?;
    let (q, k, v) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    let rank3 = ctx.ty(q).rank() == 3;
    let (q, mut k, mut v) = if rank3 {
        if q_heads <= 0 || kv_heads <= 0 {
            fail!("rank-3 inputs need `q_num_heads` and `kv_num_heads`");
        }
        (
            split_heads(ctx, q, q_heads, "Q")?,
            split_heads(ctx, k, kv_heads, "K")?,
            split_heads(ctx, v, kv_heads, "V")?,
        )
    } else {
        (q, k, v)
    };
    let (new_k, s) = (
        ctx.ty(k).shape.dims().get(2).cloned(),
        ctx.ty(q).shape.dims().get(2).cloned(),
    );
    match (ctx.opt_input(4), ctx.opt_input(5)) {
        (Some(pk), Some(pv)) => {
            k = ctx.add1(Concat { axis: 2 }, &[pk, k])?;
            v = ctx.add1(Concat { axis: 2 }, &[pv, v])?;
        }
        (None, None) => {}
        _ => fail!("past_key and past_value must be given together"),
    }
    // `attention`'s own causal rule is aligned to the last query; ONNX's
    // to the past: with more or fewer new keys than queries, the rule
    // becomes an explicit mask.
    let explicit_causal = causal && new_k != s;
    let kv = match ctx.ty(k).shape.dims().get(1).and_then(Dim::as_fixed) {
        Some(h) => h,
        None => fail!("K must have a static number of heads, got {}", ctx.ty(k)),
    };
    let d = ctx.ty(q).shape.dims().get(3).and_then(Dim::as_fixed);
    let scale = match (scale, d) {
        (Some(s), _) => s,
        (None, Some(d)) if d > 0 => 1.0 / (d as f32).sqrt(),
        (None, _) => fail!(
            "the default scale needs a static head size, got {}",
            ctx.ty(q)
        ),
    };
    let op = Attention {
        kv_heads: kv,
        scale,
        causal: causal && !explicit_causal,
        window: 0,
        softcap,
    };
    let mut operands = vec![q, k, v];
    let mut mask = ctx.opt_input(3);
    if explicit_causal {
        let past = match ctx.opt_input(4) {
            Some(pk) => ctx.ty(pk).shape.dims()[2].clone(),
            None => Dim::fixed(0),
        };
        let queries = ctx.ty(q).shape.dims()[2].clone();
        let keys = ctx.ty(k).shape.dims()[2].clone();
        let keep = causal_keep(ctx, &queries, &keys, &past)?;
        mask = Some(match mask {
            None => keep,
            Some(m) if ctx.ty(m).dtype == DType::Bool => {
                ctx.add1(Binary::new(BinaryKind::And), &[m, keep])?
            }
            Some(m) => {
                let masked = ctx.scalar(ctx.ty(m).dtype, f64::NEG_INFINITY)?;
                ctx.add1(Where, &[keep, m, masked])?
            }
        });
    }
    if let Some(m) = mask {
        let (keys, last) = (
            ctx.ty(k).shape.dims()[2].clone(),
            ctx.ty(m).shape.dims().last().cloned(),
        );
        if last.as_ref() != Some(&keys) {
            fail!(
                "attn_mask {} must cover all {keys} keys (a shorter mask is not supported)",
                ctx.ty(m)
            );
        }
        operands.push(m);
    }
    let y = ctx.add1(op, &operands)?;
    let y = if rank3 { merge_heads(ctx, y)? } else { y };
    // The present keys and values are `[b, kv_heads, t, d]` for either rank.
    let mut out = vec![y];
    if ctx.output_used(1) || ctx.output_used(2) {
        out.extend([k, v]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::onnx::testutil::*;
    use slmcc_ir::Tensor;

    #[test]
    fn rms_normalization_over_the_trailing_axes() {
        let m = model(
            23,
            vec![input("x", &["1", "4"])],
            &["y"],
            vec![f32_tensor("g", &[4], &[1.0, 2.0, 1.0, 1.0])],
            vec![node(
                "RMSNormalization",
                &["x", "g"],
                &["y"],
                vec![a_float("epsilon", 0.0)],
            )],
        );
        let x = Tensor::from_f32(vec![1, 4], vec![1.0, 1.0, -1.0, -1.0]);
        assert_close(
            run1(&m, &[x]).as_f32().unwrap(),
            &[1.0, 2.0, -1.0, -1.0],
            1e-6,
        );
        // axis 0 of [2, 2]: one statistic over all four values, the scale
        // [2] broadcast over the last axis.
        let all = model(
            23,
            vec![input("x", &["2", "2"])],
            &["y"],
            vec![f32_tensor("g", &[2], &[1.0, 2.0])],
            vec![node(
                "RMSNormalization",
                &["x", "g"],
                &["y"],
                vec![a_int("axis", 0), a_float("epsilon", 0.0)],
            )],
        );
        let x = Tensor::from_f32(vec![2, 2], vec![2.0, 2.0, -2.0, -2.0]);
        assert_close(
            run1(&all, &[x]).as_f32().unwrap(),
            &[1.0, 2.0, -1.0, -2.0],
            1e-6,
        );
        let bad = model(
            23,
            vec![input("x", &["2", "4"])],
            &["y"],
            vec![f32_tensor("g", &[4], &[1.0; 4])],
            vec![node(
                "RMSNormalization",
                &["x", "g"],
                &["y"],
                vec![a_int("axis", 2)],
            )],
        );
        assert!(import_err(&bad).contains("`axis` = 2 is out of range for rank 2"));
    }
}
