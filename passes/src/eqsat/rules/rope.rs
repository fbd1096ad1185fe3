//! Rotary embeddings: HF's `x·cos + rotate_half(x)·sin`, `rotate_half(x)`
//! being `concat(−x[..., h:], x[..., :h])` with `h = d/2` written as two
//! `slice`s (unit steps, canonicalized to none), a `neg` and a `concat`
//! over the last axis; and partial rotary
//! (`concat(rope(x[..., :r]), x[..., r:])`) folded into `rotary_dim = r`.

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::rope::Rope;
use slmcc_ir::Op;

use super::{attr_bool, attr_ints, is_last_axis, known_int, try_add, ty, var, Build, EGraph};
use crate::eqsat::runner::Rewrite;

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    vec![
        rw!("rope";         "(add (mul ?x ?cos) (mul (concat ?ax (neg (slice ?x ?h0 ?h1 ?a1)) (slice ?x ?z0 ?z1 ?a0)) ?sin))"
            => { rope() }),
        rw!("rope-partial"; "(concat ?ax (rope ?r ?i (slice ?x ?z0 ?z1 ?a0) ?cos ?sin) (slice ?x ?p0 ?p1 ?a1))"
            => { partial_rope() }),
    ]
}

fn one(eg: &EGraph, s: &Subst, v: &str) -> Option<i64> {
    known_int(eg, s[var(v)])
}

/// The last-axis slice `[?lo, ?hi)` of `?x` (ends past `d` clamp to
/// `d`), as `(lo, hi)`; the pattern has no steps operand, so the steps are
/// 1 (`slice-unit-steps` drops unit steps).
fn last_axis_slice(
    eg: &EGraph,
    s: &Subst,
    lo: &str,
    hi: &str,
    axis: &str,
    d: i64,
) -> Option<(i64, i64)> {
    let rank = ty(eg, s[var("?x")])?.rank();
    if !is_last_axis(one(eg, s, axis)?, rank) {
        return None;
    }
    let clamp = |v: i64| if v < 0 { (v + d).max(0) } else { v.min(d) };
    Some((clamp(one(eg, s, lo)?), clamp(one(eg, s, hi)?)))
}

/// The static head dim of `?x`.
fn head_dim(eg: &EGraph, s: &Subst) -> Option<i64> {
    ty(eg, s[var("?x")])?.shape.dims().last()?.as_fixed()
}

fn concat_last(eg: &EGraph, s: &Subst) -> bool {
    let rank = ty(eg, s[var("?x")]).map_or(0, |t| t.rank());
    matches!(attr_ints(eg, s[var("?ax")]).as_deref(), Some([a]) if is_last_axis(*a, rank))
}

/// `x·cos + concat(−x[h:], x[:h])·sin` → `rope(x, cos, sin) {rotary_dim = d}`.
fn rope() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, _: Id, s: &Subst| {
        let d = head_dim(eg, s)?;
        let upper = last_axis_slice(eg, s, "?h0", "?h1", "?a1", d)?;
        let lower = last_axis_slice(eg, s, "?z0", "?z1", "?a0", d)?;
        if !concat_last(eg, s) || d % 2 != 0 || upper != (d / 2, d) || lower != (0, d / 2) {
            return None;
        }
        try_add(
            eg,
            Op::Rope(Rope::new(d)),
            &[s[var("?x")], s[var("?cos")], s[var("?sin")]],
        )
    })
}

/// `concat(rope(x[:r]), x[r:])` → `rope(x) {rotary_dim = r}`.
fn partial_rope() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, _: Id, s: &Subst| {
        let d = head_dim(eg, s)?;
        let r = attr_ints(eg, s[var("?r")])?.first().copied()?;
        let interleaved = attr_bool(eg, s[var("?i")])?;
        let rot = last_axis_slice(eg, s, "?z0", "?z1", "?a0", d)?;
        let pass = last_axis_slice(eg, s, "?p0", "?p1", "?a1", d)?;
        if !concat_last(eg, s) || rot != (0, r) || pass != (r, d) {
            return None;
        }
        try_add(
            eg,
            Op::Rope(Rope {
                rotary_dim: r,
                interleaved,
            }),
            &[s[var("?x")], s[var("?cos")], s[var("?sin")]],
        )
    })
}

#[cfg(test)]
mod tests {
    use crate::eqsat::rules::fusion;
    use crate::eqsat::rules::testing::assert_rewrites;

    const X: &str = "%q: f32[1, 4, seq, 16], %cos: f32[1, 1, seq, 16], %sin: f32[1, 1, seq, 16], \
                     %c8: f32[1, 1, seq, 8], %s8: f32[1, 1, seq, 8]";

    fn c(v: i64) -> String {
        format!("(constant i64[1]={v})")
    }

    /// HF's `x·cos + rotate_half(x)·sin` over the first `r` channels of `x`.
    fn rotate(x: &str, r: i64, cos: &str, sin: &str) -> String {
        let h = r / 2;
        format!(
            "(add (mul {x} {cos}) (mul (concat -1 (neg (slice {x} {} {} {} {})) (slice {x} {} {} {} {})) {sin}))",
            c(h), c(i64::MAX), c(3), c(1), c(0), c(h), c(3), c(1)
        )
    }

    #[test]
    fn rotate_half_as_llama_exports_it() {
        assert_rewrites(
            &fusion(),
            X,
            &rotate("%q", 16, "%cos", "%sin"),
            "(rope 16 false %q %cos %sin)",
        );
    }

    #[test]
    fn partial_rotary_folds_into_rotary_dim() {
        let rot = format!("(slice %q {} {} {} {})", c(0), c(8), c(-1), c(1));
        let pass = format!("(slice %q {} {} {} {})", c(8), c(i64::MAX), c(-1), c(1));
        let e = format!("(concat -1 {} {pass})", rotate(&rot, 8, "%c8", "%s8"));
        assert_rewrites(&fusion(), X, &e, "(rope 8 false %q %c8 %s8)");
    }
}
