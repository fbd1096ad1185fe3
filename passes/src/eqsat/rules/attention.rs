//! Attention: `softmax(q @ kᵀ · scale + mask) @ v` with the scale as a
//! scalar factor (a `div` becomes one in canonicalization) and the mask
//! added on either side or absent, then the exporters' KV-head repeat
//! (`unsqueeze` at axis 2 → `expand` → `reshape`, GQA) folded into
//! `kv_heads`.
//!
//! A scalar factor on `q` or `k` (SDPA's `√scale` on each) moves out of
//! the product. `kᵀ` is `transpose(k, [0, 1, 3, 2])`; an exporter that transposes the
//! head-split projection straight to `[b, h, d, t]` (GPT-2's
//! `perm = [0, 2, 3, 1]`) gets that form from `kt-factor`.

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::Op;

use super::{attr_ints, is_last_axis, is_scalar, splat, try_add, ty, var, Build, EGraph};
use crate::eqsat::runner::Rewrite;

const QK: &str = "(matmul ?q (transpose (list 0 1 3 2) ?k))";

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    let p = |s: String| s.parse::<egg::Pattern<crate::eqsat::Lang>>().unwrap();
    let scaled = format!("(mul {QK} ?scale)");
    let repeat = |x: &str, n: &str| format!("(reshape ?z{n} (expand (unsqueeze (list 2) {x}) ?e{n}) ?t{n})");
    let (rk, rv) = (repeat("?k", "k"), repeat("?v", "v"));
    vec![
        rw!("scaled-q";             "(matmul (mul ?q ?c) (transpose (list 0 1 3 2) ?k))" => {p(format!("(mul {QK} ?c)"))} if is_scalar("?c")),
        rw!("scaled-k";             "(transpose (list 0 1 3 2) (mul ?k ?c))"              => "(mul (transpose (list 0 1 3 2) ?k) ?c)" if is_scalar("?c")),
        rw!("kt-factor";            "(transpose ?p ?x)"                                   => { kt_factor() } if is_kt_perm("?p")),
        rw!("attention";            {p(format!("(matmul (softmax ?ax (add {scaled} ?mask)) ?v)"))} => { attention(true, true) } if is_scalar("?scale")),
        rw!("attention-mask-first"; {p(format!("(matmul (softmax ?ax (add ?mask {scaled})) ?v)"))} => { attention(true, true) } if is_scalar("?scale")),
        rw!("attention-no-mask";    {p(format!("(matmul (softmax ?ax {scaled}) ?v)"))}             => { attention(true, false) } if is_scalar("?scale")),
        rw!("attention-unscaled";   {p(format!("(matmul (softmax ?ax (add {QK} ?mask)) ?v)"))}     => { attention(false, true) }),
        rw!("attention-unscaled-no-mask"; {p(format!("(matmul (softmax ?ax {QK}) ?v)"))}           => { attention(false, false) }),
        rw!("attention-gqa";        {p(format!("(attention ?h ?sc ?ca ?w ?sf ?q {rk} {rv} ?mask)"))} => { gqa(true) }),
        rw!("attention-gqa-no-mask"; {p(format!("(attention ?h ?sc ?ca ?w ?sf ?q {rk} {rv})"))}     => { gqa(false) }),
    ]
}

/// Condition: `?p` sends the last axis of a rank-4 value to position 2
/// (the result is some `[.., d, t]` of a `[.., t, .., d]` value) without
/// being the plain `[0, 1, 3, 2]`.
fn is_kt_perm(p: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let p = var(p);
    move |eg, _, s| matches!(attr_ints(eg, s[p]).as_deref(), Some([a, b, 3, c]) if [*a, *b, *c] != [0, 1, 2])
}

/// `transpose(x, p)` → `transpose(transpose(x, p'), [0, 1, 3, 2])`.
fn kt_factor() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, _: Id, s: &Subst| {
        let p = attr_ints(eg, s[var("?p")])?;
        let inner = try_add(
            eg,
            Op::Transpose(Transpose {
                perm: vec![p[0], p[1], p[3], p[2]],
            }),
            &[s[var("?x")]],
        )?;
        try_add(
            eg,
            Op::Transpose(Transpose {
                perm: vec![0, 1, 3, 2],
            }),
            &[inner],
        )
    })
}

/// The fused op with every query head reading its own KV head (GQA is
/// folded in afterwards).
fn attention(scaled: bool, masked: bool) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let q = s[var("?q")];
        let rank = ty(eg, q)?.rank();
        if !matches!(attr_ints(eg, s[var("?ax")]).as_deref(), Some([a]) if is_last_axis(*a, rank)) {
            return None;
        }
        let scale = if scaled {
            splat(eg, s[var("?scale")])? as f32
        } else {
            1.0
        };
        let heads = ty(eg, s[var("?k")])?.shape.dims().get(1)?.as_fixed()?;
        let mut operands = vec![q, s[var("?k")], s[var("?v")]];
        if masked {
            operands.push(s[var("?mask")]);
        }
        try_add(eg, Op::Attention(Attention::new(heads, scale)), &operands)
    })
}

/// The number of copies `unsqueeze(x, 2) → expand(shape)` makes of each
/// head of `x = [b, h, t, d]`: `shape` must be `[b, h, n, t, d]`.
fn repeats(eg: &EGraph, x: Id, shape: Id) -> Option<i64> {
    let dims = ty(eg, x)?.shape.dims();
    let to = super::fact(eg, shape)?.value.as_ref()?.as_dims()?.values;
    let same = to.len() == 5
        && to[0] == dims[0]
        && to[1] == dims[1]
        && to[3] == dims[2]
        && to[4] == dims[3];
    same.then(|| to[2].as_fixed()).flatten()
}

/// `attention(q, repeat(k, n), repeat(v, n))` → `attention(q, k, v) {kv_heads = h / n}`.
fn gqa(masked: bool) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let (q, k, v) = (s[var("?q")], s[var("?k")], s[var("?v")]);
        let n = repeats(eg, k, s[var("?ek")])?;
        if repeats(eg, v, s[var("?ev")])? != n || n < 1 {
            return None;
        }
        let attr = |name: &str| super::attr_f64(eg, s[var(name)]);
        let kv_heads = ty(eg, k)?.shape.dims().get(1)?.as_fixed()?;
        let op = Attention {
            kv_heads,
            scale: attr("?sc")? as f32,
            causal: super::attr_bool(eg, s[var("?ca")])?,
            window: attr("?w")? as i64,
            softcap: attr("?sf")? as f32,
        };
        let mut operands = vec![q, k, v];
        if masked {
            operands.push(s[var("?mask")]);
        }
        try_add(eg, Op::Attention(op), &operands)
    })
}

#[cfg(test)]
mod tests {
    use crate::eqsat::rules::fusion;
    use crate::eqsat::rules::testing::assert_rewrites;

    const X: &str = "%q: f32[1, 4, seq, 16], %k: f32[1, 2, seq, 16], %v: f32[1, 2, seq, 16], \
                     %k4: f32[1, 4, seq, 16], %v4: f32[1, 4, seq, 16], %m: f32[1, 1, seq, seq], \
                     %kh: f32[1, seq, 4, 16]";

    fn repeat(x: &str) -> String {
        format!(
            "(reshape true (expand (unsqueeze (list 2) {x}) (constant i64[5]=[1,2,2,seq,16])) \
             (constant i64[4]=[1,4,-1,16]))"
        )
    }

    #[test]
    fn llama_gqa_attention_with_a_mask() {
        let e = format!(
            "(matmul (softmax -1 (add (mul (matmul %q (transpose (list 0 1 3 2) {})) (constant f32[]=0.25)) %m)) {})",
            repeat("%k"),
            repeat("%v")
        );
        assert_rewrites(
            &fusion(),
            X,
            &e,
            "(attention 2 0.25 false 0 0.0 %q %k %v %m)",
        );
    }

    #[test]
    fn scale_as_a_division_and_no_mask() {
        let e = "(matmul (softmax -1 (div (matmul %q (transpose (list 0 1 3 2) %k4)) (constant f32[]=4.0))) %v4)";
        assert_rewrites(&fusion(), X, e, "(attention 4 0.25 false 0 0.0 %q %k4 %v4)");
    }

    #[test]
    fn gpt2_transposes_keys_in_one_step() {
        let e = "(matmul (softmax -1 (add (mul (matmul %q (transpose (list 0 2 3 1) %kh)) (constant f32[]=0.25)) %m)) %v4)";
        assert_rewrites(
            &fusion(),
            X,
            e,
            "(attention 4 0.25 false 0 0.0 %q (transpose (list 0 2 1 3) %kh) %v4 %m)",
        );
    }
}
