//! Attention: `softmax(q @ kᵀ · scale + mask) @ v` with the scale as a
//! scalar factor (a `div` becomes one in canonicalization, and scalar
//! factors move out of a `matmul`'s operands and out of a `transpose`, so
//! SDPA's `√scale` on `q` and on `kᵀ` become one factor), soft-capped scores `cap · tanh(s · q @ kᵀ)` (Gemma 2), the
//! mask added on either side or absent, and PyTorch's NaN guard
//! `where(is_nan(p), 0, p)` after the softmax; then the exporters'
//! KV-head repeat (`unsqueeze` at axis 2 → `expand` → `reshape`, GQA and
//! MQA) folded into `kv_heads`.
//!
//! `kᵀ` is `transpose(k, [0, 1, 3, 2])`; an exporter that transposes the
//! head-split projection straight to `[b, h, d, t]` (GPT-2's
//! `perm = [0, 2, 3, 1]`) gets that form from `kt-factor`, and SDPA's
//! `reshape → transpose → reshape` of the keys from the layout rule.

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::Op;

use super::{attr_ints, is_last_axis, is_scalar, splat, try_add, ty, var, Build, EGraph};
use crate::eqsat::runner::Rewrite;

const QK: &str = "(matmul ?q (transpose (list 0 1 3 2) ?k))";

/// How the scores are scaled before the mask: `(pattern, scaled, softcapped)`.
/// Soft-capping is `cap · tanh(s1 · qkᵀ)`, i.e. `scale = s1 · cap`.
const SCORES: &[(&str, bool, bool)] = &[
    (QK, false, false),
    ("(mul {QK} ?scale)", true, false),
    ("(mul (tanh (mul {QK} ?s1)) ?cap)", false, true),
];

/// The attention patterns: every scaling of the scores, the mask added on
/// either side or absent, and the probabilities read as they are or
/// through the NaN guard `where(is_nan(p), 0, p)` that PyTorch's SDPA
/// writes (the fused op gives a fully masked row zeros, as the guard does).
fn attention_rules() -> Vec<Rewrite> {
    let mut out = Vec::new();
    for (si, (scores, scaled, capped)) in SCORES.iter().enumerate() {
        let scores = scores.replace("{QK}", QK);
        for (mi, masked) in [None, Some(false), Some(true)].into_iter().enumerate() {
            let m = match masked {
                None => scores.clone(),
                Some(false) => format!("(add {scores} ?mask)"),
                Some(true) => format!("(add ?mask {scores})"),
            };
            let p = format!("(softmax ?ax {m})");
            for guarded in [false, true] {
                let probs = if guarded {
                    format!("(where (is_nan {p}) ?zero {p})")
                } else {
                    p.clone()
                };
                let lhs: egg::Pattern<crate::eqsat::Lang> = format!("(matmul {probs} ?v)")
                    .parse()
                    .expect("attention pattern");
                let name = format!("attention-{si}{mi}{}", u8::from(guarded));
                let form = Form {
                    scaled: *scaled,
                    capped: *capped,
                    masked: masked.is_some(),
                    guarded,
                };
                out.push(egg::Rewrite::new(name, lhs, attention(form)).expect("attention rule"));
            }
        }
    }
    out
}

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    let p = |s: String| s.parse::<egg::Pattern<crate::eqsat::Lang>>().unwrap();
    let repeat = |x: &str, n: &str| format!("(reshape ?z{n} (expand (unsqueeze (list 2) {x}) ?e{n}) ?t{n})");
    let (rk, rv) = (repeat("?k", "k"), repeat("?v", "v"));
    let mut r = vec![
        rw!("scalar-out-of-matmul-left";  "(matmul (mul ?a ?c) ?b)"    => "(mul (matmul ?a ?b) ?c)" if is_scalar("?c")),
        rw!("scalar-out-of-matmul-right"; "(matmul ?a (mul ?b ?c))"    => "(mul (matmul ?a ?b) ?c)" if is_scalar("?c")),
        rw!("scalar-out-of-transpose";    "(transpose ?p (mul ?x ?c))" => "(mul (transpose ?p ?x) ?c)" if is_scalar("?c")),
        rw!("kt-factor";            "(transpose ?p ?x)"                                   => { kt_factor() } if is_kt_perm("?p")),
        rw!("attention-gqa";        {p(format!("(attention ?h ?sc ?ca ?w ?sf ?q {rk} {rv} ?mask)"))} => { gqa(true) }),
        rw!("attention-gqa-no-mask"; {p(format!("(attention ?h ?sc ?ca ?w ?sf ?q {rk} {rv})"))}     => { gqa(false) }),
    ];
    r.extend(attention_rules());
    r
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

/// Which parts of [`attention_rules`]' pattern a match has.
#[derive(Clone, Copy)]
struct Form {
    scaled: bool,
    capped: bool,
    masked: bool,
    guarded: bool,
}

/// The fused op with every query head reading its own KV head (GQA is
/// folded in afterwards).
fn attention(form: Form) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let q = s[var("?q")];
        let rank = ty(eg, q)?.rank();
        if !matches!(attr_ints(eg, s[var("?ax")]).as_deref(), Some([a]) if is_last_axis(*a, rank)) {
            return None;
        }
        if form.guarded && splat(eg, s[var("?zero")])? != 0.0 {
            return None;
        }
        let (scale, softcap) = if form.capped {
            let (s1, cap) = (splat(eg, s[var("?s1")])?, splat(eg, s[var("?cap")])?);
            if !(cap > 0.0
                && is_scalar_class(eg, s[var("?s1")])
                && is_scalar_class(eg, s[var("?cap")]))
            {
                return None;
            }
            ((s1 * cap) as f32, cap as f32)
        } else if form.scaled {
            if !is_scalar_class(eg, s[var("?scale")]) {
                return None;
            }
            (splat(eg, s[var("?scale")])? as f32, 0.0)
        } else {
            (1.0, 0.0)
        };
        let heads = ty(eg, s[var("?k")])?.shape.dims().get(1)?.as_fixed()?;
        let mut operands = vec![q, s[var("?k")], s[var("?v")]];
        if form.masked {
            operands.push(s[var("?mask")]);
        }
        let op = Attention {
            softcap,
            ..Attention::new(heads, scale)
        };
        try_add(eg, Op::Attention(op), &operands)
    })
}

/// Whether a class is a rank-0 constant.
fn is_scalar_class(eg: &EGraph, id: Id) -> bool {
    splat(eg, id).is_some() && ty(eg, id).is_some_and(|t| t.rank() == 0)
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
