//! Normalisation: RMSNorm and LayerNorm as exporters decompose them, and a
//! residual add feeding a norm as `add_rms_norm` / `add_layer_norm`.
//!
//! RMSNorm after canonicalization is `(x / sqrt(mean(x·x, -1) + eps)) · w`
//! (the exporter writes `Pow 2 → ReduceMean → Add → Sqrt → Reciprocal →
//! Mul x → Mul w`); Gemma's `(1 + w)` becomes `offset = 1`. LayerNorm is
//! `((x − mean(x)) / sqrt(mean(d·d) + eps)) · w + b`. A norm of `x + r`
//! (same types) becomes the two-result op, whose result 0 is unioned with
//! the sum and result 1 with the norm.

use egg::{rewrite as rw, Applier, Id, PatternAst, Subst, Symbol};
use slmcc_ir::ops::add_layer_norm::AddLayerNorm;
use slmcc_ir::ops::add_rms_norm::AddRmsNorm;
use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::Op;

use super::{
    add_get, attr_f64, attr_ints, is_last_axis, is_scalar, splat, try_add, ty, var, Build, EGraph,
};
use crate::eqsat::analysis::FactAnalysis;
use crate::eqsat::language::Lang;
use crate::eqsat::runner::Rewrite;

const MEAN_SQ: &str = "(reduce_mean ?axes true (mul ?x ?x))";

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    let rms = format!("(div ?x (sqrt (add {MEAN_SQ} ?eps)))");
    let ln_d = "(sub ?x (reduce_mean ?axes2 true ?x))";
    let ln = format!("(add (mul (div {ln_d} (sqrt (add (reduce_mean ?axes true (mul {ln_d} {ln_d})) ?eps))) ?w) ?b)");
    let p = |s: String| s.parse::<egg::Pattern<Lang>>().unwrap();
    vec![
        rw!("rms-norm";          {p(format!("(mul {rms} ?w)"))} => { rms_norm() } if is_scalar("?eps")),
        rw!("rms-norm-w-left";   {p(format!("(mul ?w {rms})"))} => { rms_norm() } if is_scalar("?eps")),
        rw!("rms-norm-offset";   "(rms_norm ?eps ?o ?x (add ?w ?c))" => { rms_norm_offset() } if is_scalar("?c")),
        rw!("layer-norm";        {p(ln)}                        => { layer_norm() } if is_scalar("?eps")),
        rw!("add-rms-norm";      "(rms_norm ?eps ?o (add ?x ?r) ?w)"       => { AddNorm::Rms }),
        rw!("add-layer-norm";    "(layer_norm ?axis ?eps (add ?x ?r) ?w ?b)" => { AddNorm::Layer }),
        rw!("add-layer-norm-no-bias"; "(layer_norm ?axis ?eps (add ?x ?r) ?w)" => { AddNorm::Layer }),
    ]
}

/// The reduction is over the last axis of `?x`.
fn mean_over_last(eg: &EGraph, s: &Subst, axes: &str) -> bool {
    let rank = ty(eg, s[var("?x")]).map_or(0, |t| t.rank());
    matches!(attr_ints(eg, s[var(axes)]).as_deref(), Some([a]) if is_last_axis(*a, rank))
}

fn eps(eg: &EGraph, s: &Subst) -> Option<f32> {
    Some(splat(eg, s[var("?eps")])? as f32)
}

fn rms_norm() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, _: Id, s: &Subst| {
        if !mean_over_last(eg, s, "?axes") {
            return None;
        }
        let op = RmsNorm {
            eps: eps(eg, s)?,
            offset: 0.0,
        };
        try_add(eg, Op::RmsNorm(op), &[s[var("?x")], s[var("?w")]])
    })
}

/// `rms_norm(x, w + c)` → `rms_norm(x, w) {offset = c}` (Gemma's `1 + w`).
fn rms_norm_offset() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, _: Id, s: &Subst| {
        let offset = attr_f64(eg, s[var("?o")])? + splat(eg, s[var("?c")])?;
        let op = RmsNorm {
            eps: attr_f64(eg, s[var("?eps")])? as f32,
            offset: offset as f32,
        };
        try_add(eg, Op::RmsNorm(op), &[s[var("?x")], s[var("?w")]])
    })
}

fn layer_norm() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, _: Id, s: &Subst| {
        if !mean_over_last(eg, s, "?axes") || !mean_over_last(eg, s, "?axes2") {
            return None;
        }
        let op = LayerNorm {
            axis: -1,
            eps: eps(eg, s)?,
        };
        try_add(
            eg,
            Op::LayerNorm(op),
            &[s[var("?x")], s[var("?w")], s[var("?b")]],
        )
    })
}

/// `norm(x + r)` → both results of the fused add+norm: result 1 joins the
/// norm's class, result 0 the sum's.
enum AddNorm {
    Rms,
    Layer,
}

impl AddNorm {
    /// The fused op for a match, if its attributes allow it.
    fn op(&self, eg: &EGraph, s: &Subst) -> Option<Op> {
        let eps = attr_f64(eg, s[var("?eps")])? as f32;
        match self {
            AddNorm::Rms => {
                let offset = attr_f64(eg, s[var("?o")])? as f32;
                Some(Op::AddRmsNorm(AddRmsNorm { eps, offset }))
            }
            AddNorm::Layer => {
                let rank = ty(eg, s[var("?x")])?.rank();
                let axis = *attr_ints(eg, s[var("?axis")])?.first()?;
                is_last_axis(axis, rank).then_some(Op::AddLayerNorm(AddLayerNorm { eps }))
            }
        }
    }
}

impl Applier<Lang, FactAnalysis> for AddNorm {
    fn apply_one(
        &self,
        eg: &mut EGraph,
        eclass: Id,
        s: &Subst,
        _: Option<&PatternAst<Lang>>,
        _: Symbol,
    ) -> Vec<Id> {
        let (x, r) = (s[var("?x")], s[var("?r")]);
        let mut operands = vec![x, r, s[var("?w")]];
        operands.extend(s.get(var("?b")));
        let Some(sum) = eg.lookup(Lang::Add(vec![x, r].into())) else {
            return Vec::new();
        };
        let Some(fused) = self.op(eg, s).and_then(|op| try_add(eg, op, &operands)) else {
            return Vec::new();
        };
        let (s0, s1) = (add_get(eg, 0, fused), add_get(eg, 1, fused));
        let mut changed = Vec::new();
        if eg.union(sum, s0) {
            changed.push(s0);
        }
        if eg.union(eclass, s1) {
            changed.push(s1);
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eqsat::rules::testing::assert_rewrites;
    use crate::eqsat::rules::{canonical, fusion};

    const X: &str = "%x: f32[1, seq, 64], %r: f32[1, seq, 64], @w: f32[64], @b: f32[64]";
    // The exporter's RMSNorm of `%s`.
    fn exported_rms(s: &str) -> String {
        format!(
            "(mul @w (mul {s} (reciprocal (sqrt (add (reduce_mean (list -1) true \
             (pow {s} (constant f32[]=2.0))) (constant f32[]=1e-6))))))"
        )
    }

    #[test]
    fn rms_norm_from_the_exporters_decomposition() {
        assert_rewrites(
            &fusion(),
            X,
            &exported_rms("%x"),
            "(rms_norm 1e-6 0.0 %x @w)",
        );
    }

    #[test]
    fn gemma_one_plus_w_is_an_offset() {
        let mut r = canonical::rules();
        r.extend(rules());
        let gemma = exported_rms("%x").replace("(mul @w", "(mul (add @w (constant f32[]=1.0))");
        assert_rewrites(&r, X, &gemma, "(rms_norm 1e-6 1.0 %x @w)");
    }

    #[test]
    fn residual_add_and_norm_fuse_with_both_results() {
        // The sum and its norm, both needed: `(list s y)` stands for two uses.
        let both = format!("(concat -1 (add %x %r) {})", exported_rms("(add %x %r)"));
        assert_rewrites(
            &fusion(),
            X,
            &both,
            "(concat -1 (get 0 (add_rms_norm 1e-6 0.0 %x %r @w)) (get 1 (add_rms_norm 1e-6 0.0 %x %r @w)))",
        );
    }

    #[test]
    fn layer_norm_after_an_add() {
        assert_rewrites(
            &fusion(),
            X,
            "(layer_norm -1 1e-5 (add %x %r) @w @b)",
            "(get 1 (add_layer_norm 1e-5 %x %r @w @b))",
        );
    }

    #[test]
    fn layer_norm_from_its_decomposition() {
        let d = "(sub %x (reduce_mean (list -1) true %x))";
        let ln = format!(
            "(add (mul (div {d} (sqrt (add (reduce_mean (list -1) true (pow {d} (constant f32[]=2.0))) \
             (constant f32[]=1e-5)))) @w) @b)"
        );
        assert_rewrites(&fusion(), X, &ln, "(layer_norm -1 1e-5 %x @w @b)");
    }
}
