//! Logit soft-capping: `cap · tanh(x / cap)` (Gemma 2's final logits)
//! as `softcap`, after canonicalization (`x / cap` as `x · (1/cap)`).
//! Attention scores are soft-capped inside `attention` instead (see
//! [`super::attention`]).

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::softcap::Softcap;
use slmcc_ir::Op;

use super::{close, is_scalar, keeps_type, splat, try_add, var, Build, EGraph};
use crate::eqsat::runner::Rewrite;

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    vec![
        rw!("softcap"; "(mul (tanh (mul ?x ?inv)) ?cap)" => { softcap() }
            if is_scalar("?inv") if is_scalar("?cap") if keeps_type("?x")),
    ]
}

/// `tanh(x · inv) · cap` with `inv · cap = 1` → `softcap(x) {cap}`.
fn softcap() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, _: Id, s: &Subst| {
        let (inv, cap) = (splat(eg, s[var("?inv")])?, splat(eg, s[var("?cap")])?);
        if !(cap > 0.0 && close(inv * cap, 1.0, 1e-6)) {
            return None;
        }
        let op = Softcap { cap: cap as f32 };
        try_add(eg, Op::Softcap(op), &[s[var("?x")]])
    })
}

#[cfg(test)]
mod tests {
    use crate::eqsat::rules::fusion;
    use crate::eqsat::rules::testing::assert_rewrites;

    const X: &str = "%x: f32[1, seq, 512]";

    #[test]
    fn gemma2_final_logits() {
        let e = "(mul (tanh (div %x (constant f32[]=30.0))) (constant f32[]=30.0))";
        assert_rewrites(&fusion(), X, e, "(softcap 30.0 %x)");
    }

    #[test]
    fn a_scaled_tanh_is_not_a_softcap() {
        let e = "(mul (tanh (mul %x (constant f32[]=0.5))) (constant f32[]=3.0))";
        assert_rewrites(&fusion(), X, e, e);
    }
}
