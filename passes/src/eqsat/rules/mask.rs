//! Attention masks: a mask whose meaning is proved becomes attributes. A
//! causal mask becomes `causal = true`, a causal mask with a sliding window
//! of `w` keys also `window = w` (Mistral, Gemma 2's local layers), and a
//! mask that keeps every key (bidirectional attention without padding)
//! goes.
//!
//! The additive form is `where(keep, 0, m)` with `m` at most `-1e30`
//! (`finfo.min` or `-inf`: either way the masked scores' softmax weight is
//! exactly zero, and a causal row always keeps its diagonal), or, for an
//! `f16` mask, `m = -65504` (`finfo(float16).min`, what half-precision
//! exports write: attention adds it in `f32`, and the masked weight
//! `exp(s - 65504 - max)` is zero unless one row's scores span more than
//! 65000); the boolean form is `keep` itself. What `keep` computes over the `[.., s, t]` scores
//! is proved from its [`IndexFn`] piece by piece
//! ([`crate::eqsat::index_fn::classify`]), so the exporters' masks built
//! from `range`, `gather_nd`, `cum_sum`, comparisons and `and` qualify, and
//! any mask that also depends on the input (padding) keeps its operand.
//!
//! [`IndexFn`]: crate::eqsat::index_fn::IndexFn

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::{DType, Dim, Op};

use super::{attr_f64, is_splat, splat, try_add, ty, var, Build, EGraph};
use crate::eqsat::analysis::index_fn;
use crate::eqsat::index_fn::{classify, MaskKind};
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

/// Condition: adding `?v` zeroes a softmax weight: at most `-1e30`, or
/// the lowest finite `f16` for an `f16` mask.
fn masks_out(v: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| {
        let limit = match ty(eg, s[v]).map(|t| t.dtype) {
            Some(DType::F16) => -65504.0,
            _ => -1e30,
        };
        splat(eg, s[v]).is_some_and(|m| m <= limit)
    }
}

/// The attention without its mask operand and with the attributes that
/// say what the boolean `c` provably computes.
fn causal(c: &'static str) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let (q, k, v, c) = (s[var("?q")], s[var("?k")], s[var("?v")], s[var(c)]);
        let mask = ty(eg, c)?;
        if mask.dtype != DType::Bool {
            return None;
        }
        let (qd, kd) = (ty(eg, q)?.shape.dims(), ty(eg, k)?.shape.dims());
        let scores: Vec<Dim> = vec![qd[0].clone(), qd[1].clone(), qd[2].clone(), kd[2].clone()];
        let (causal, window) = match classify(index_fn(eg, c)?, mask.shape.dims(), &scores)? {
            MaskKind::Full => (false, 0),
            MaskKind::Causal { window } => (true, window),
        };
        let op = Attention {
            kv_heads: attr_f64(eg, s[var("?h")])? as i64,
            scale: attr_f64(eg, s[var("?sc")])? as f32,
            causal,
            window,
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
    fn a_half_precision_export_masks_with_the_lowest_f16() {
        const H: &str = "%q: f16[1, 4, seq, 16], %k: f16[1, 4, seq, 16], %v: f16[1, 4, seq, 16]";
        let half = |m: &str| {
            format!(
                "(attention 4 0.25 false 0 0.0 %q %k %v (where {KEEP} (constant f16[]=0.0) (constant f16[]={m})))"
            )
        };
        assert_rewrites(
            &fusion(),
            H,
            &half("-65504.0"),
            "(attention 4 0.25 true 0 0.0 %q %k %v)",
        );
        // A finite penalty that leaves the masked keys a weight is kept.
        assert_rewrites(&fusion(), H, &half("-1000.0"), &half("-1000.0"));
    }

    #[test]
    fn a_padding_mask_stays_an_operand() {
        let e = attention(&format!("(and {KEEP} %pad)"));
        let kept = e.clone();
        assert_rewrites(&fusion(), X, &e, &kept);
    }

    const AR: &str = "(range (constant i64[]=0) (constant i64[]=seq) (constant i64[]=1))";

    /// The TorchScript exporter's form: positions flattened to `[seq, 1]`
    /// and read with `gather` at the key and query indices, reshaped back.
    fn gathered(at_axes: &str, shape: &str) -> String {
        let flat = format!("(reshape false (unsqueeze (list 0) {AR}) (constant i64[2]=[seq,1]))");
        format!(
            "(reshape false (gather 0 {flat} (unsqueeze {at_axes} {AR})) (constant i64[4]={shape}))"
        )
    }

    #[test]
    fn flatten_and_gather_as_torchscript_exports_them_is_causal() {
        let keep = format!(
            "(less_or_equal {} {})",
            gathered("(list 0 1 2)", "[1,1,1,seq]"),
            gathered("(list 0 1 3)", "[1,1,seq,1]")
        );
        assert_rewrites(
            &fusion(),
            X,
            &attention(&keep),
            "(attention 4 0.25 true 0 0.0 %q %k %v)",
        );
    }

    /// Row `idx[i]` of the `[seq, seq]` causal table, as `[1, 1, seq, seq]`.
    fn rows_of_causal_table(idx: &str) -> String {
        let table = format!("(less_or_equal (unsqueeze (list 0) {AR}) (unsqueeze (list 1) {AR}))");
        format!("(unsqueeze (list 0 1) (gather 0 {table} {idx}))")
    }

    #[test]
    fn gathered_rows_keep_their_own_guards() {
        // Row i of the table is causal; row seq-1-i is not, although every
        // row of the table is a causal row somewhere.
        assert_rewrites(
            &fusion(),
            X,
            &attention(&rows_of_causal_table(AR)),
            "(attention 4 0.25 true 0 0.0 %q %k %v)",
        );
        let reversed = format!("(sub (constant i64[]=seq) (add {AR} (constant i64[]=1)))");
        let e = attention(&rows_of_causal_table(&reversed));
        assert_rewrites(&fusion(), X, &e, &e);
    }

    #[test]
    fn a_gather_that_may_wrap_around_proves_nothing() {
        // Index -1 (the last row) at query 0: not provably in range.
        let shifted = format!("(sub {AR} (constant i64[]=1))");
        let e = attention(&rows_of_causal_table(&shifted));
        assert_rewrites(&fusion(), X, &e, &e);
    }

    #[test]
    fn a_sliding_window_becomes_the_window_attribute() {
        // key > query - 4 and key <= query.
        let q = "(unsqueeze (list 0 1 3) (range (constant i64[]=0) (constant i64[]=seq) (constant i64[]=1)))";
        let k = "(unsqueeze (list 0 1 2) (range (constant i64[]=0) (constant i64[]=seq) (constant i64[]=1)))";
        let keep =
            format!("(and (greater {k} (sub {q} (constant i64[]=4))) (less_or_equal {k} {q}))");
        assert_rewrites(
            &fusion(),
            X,
            &attention(&keep),
            "(attention 4 0.25 true 4 0.0 %q %k %v)",
        );
    }

    #[test]
    fn a_mask_that_keeps_everything_goes() {
        let keep = "(expand (constant bool[]=true) (constant i64[4]=[1,1,seq,seq]))";
        assert_rewrites(
            &fusion(),
            X,
            &attention(keep),
            "(attention 4 0.25 false 0 0.0 %q %k %v)",
        );
    }

    #[test]
    fn a_strict_triangle_is_not_causal() {
        let strict = KEEP.replace("less_or_equal", "less");
        assert_rewrites(&fusion(), X, &attention(&strict), &attention(&strict));
    }
}
