//! Attention masks: a mask that provably is the causal one becomes
//! `causal = true`.
//!
//! The additive form is `where(keep, 0, m)` with `m` at most `-1e30`
//! (`finfo.min` or `-inf`: either way the masked scores' softmax weight is
//! exactly zero, and a causal row always keeps its diagonal); the boolean
//! form is `keep` itself. `keep` must provably be `key <= query + (t - s)`
//! over the `[.., s, t]` scores: its [`IndexFn`] is checked piece by piece
//! (see [`crate::eqsat::index_fn`]), so the exporters' mask built from
//! `range`, `gather_nd`, `cum_sum`, comparisons and `and` qualifies, and
//! any mask that also depends on the input (padding) keeps its operand.
//!
//! [`IndexFn`]: crate::eqsat::index_fn::IndexFn

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::{DType, Dim, Op};

use super::{attr_f64, is_splat, splat, try_add, ty, var, Build, EGraph};
use crate::eqsat::analysis::index_fn;
use crate::eqsat::index_fn::is_causal;
use crate::eqsat::runner::Rewrite;

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    vec![
        rw!("causal-additive-mask"; "(attention ?h ?sc false 0 ?sf ?q ?k ?v (where ?c ?keep ?drop))"
            => { causal("?c") } if is_splat("?keep", 0.0) if masks_out("?drop")),
        rw!("causal-keep-mask";     "(attention ?h ?sc false 0 ?sf ?q ?k ?v ?c)"
            => { causal("?c") }),
    ]
}

/// Condition: adding `?v` zeroes a softmax weight.
fn masks_out(v: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| splat(eg, s[v]).is_some_and(|m| m <= -1e30)
}

/// The attention without its mask operand and with `causal = true`, when
/// the boolean `c` provably is the causal mask.
fn causal(c: &'static str) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let (q, k, v, c) = (s[var("?q")], s[var("?k")], s[var("?v")], s[var(c)]);
        let mask = ty(eg, c)?;
        if mask.dtype != DType::Bool {
            return None;
        }
        let (qd, kd) = (ty(eg, q)?.shape.dims(), ty(eg, k)?.shape.dims());
        let scores: Vec<Dim> = vec![qd[0].clone(), qd[1].clone(), qd[2].clone(), kd[2].clone()];
        if !is_causal(index_fn(eg, c)?, mask.shape.dims(), &scores) {
            return None;
        }
        let op = Attention {
            kv_heads: attr_f64(eg, s[var("?h")])? as i64,
            scale: attr_f64(eg, s[var("?sc")])? as f32,
            causal: true,
            window: 0,
            softcap: attr_f64(eg, s[var("?sf")])? as f32,
        };
        try_add(eg, Op::Attention(op), &[q, k, v])
    })
}

#[cfg(test)]
mod tests {
    use crate::eqsat::rules::fusion;
    use crate::eqsat::rules::testing::assert_rewrites;

    const X: &str = "%q: f32[1, 4, seq, 16], %k: f32[1, 4, seq, 16], %v: f32[1, 4, seq, 16], %pad: bool[1, 1, 1, seq]";

    /// `j <= i` over `[1, 1, seq, seq]` from `range`, as exporters build it.
    const KEEP: &str = "(less_or_equal (unsqueeze (list 0 1 2) (range (constant i64[]=0) (constant i64[]=seq) \
                        (constant i64[]=1))) (unsqueeze (list 0 1 3) (range (constant i64[]=0) (constant i64[]=seq) \
                        (constant i64[]=1))))";

    fn attention(mask: &str) -> String {
        format!(
            "(attention 4 0.25 false 0 0.0 %q %k %v (where {mask} (constant f32[]=0.0) (constant f32[]=-3.4028235e38)))"
        )
    }

    #[test]
    fn range_comparison_is_causal() {
        assert_rewrites(
            &fusion(),
            X,
            &attention(KEEP),
            "(attention 4 0.25 true 0 0.0 %q %k %v)",
        );
    }

    #[test]
    fn a_padding_mask_stays_an_operand() {
        let e = attention(&format!("(and {KEEP} %pad)"));
        let kept = e.clone();
        assert_rewrites(&fusion(), X, &e, &kept);
    }

    #[test]
    fn a_strict_triangle_is_not_causal() {
        let strict = KEEP.replace("less_or_equal", "less");
        assert_rewrites(&fusion(), X, &attention(&strict), &attention(&strict));
    }
}
