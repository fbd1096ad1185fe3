//! GELU: the erf form `0.5·x·(1 + erf(x/√2))` and the tanh form
//! `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, after canonicalization
//! (constants right, `x/√2` as `x·(1/√2)`, `x·x·x` as `pow(x, 3)`).
//!
//! The rules recognise `x·(1 + erf(..))` as `2·gelu(x)` wherever the `0.5`
//! is: the scalar rules then fold it into the `2` (to `1`, which goes),
//! whether the exporter wrote it first, last, or after the gated MLP's
//! product with the up projection.

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_PI};

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::gelu::{Gelu, GeluApprox};
use slmcc_ir::Op;

use slmcc_ir::ops::binary::{Binary, BinaryKind};

use super::{add_const, close, is_splat, scalar_tensor, splat, try_add, var, Build, EGraph};
use crate::eqsat::runner::Rewrite;

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    vec![
        rw!("gelu-erf";  "(mul ?x (add (erf (mul ?x ?k)) ?one))"
            => { twice_gelu(GeluApprox::None) }
            if is_splat("?one", 1.0) if near("?k", FRAC_1_SQRT_2)),
        rw!("gelu-tanh"; "(mul ?x (add (tanh (mul (add ?x (mul (pow ?x ?three) ?c)) ?k)) ?one))"
            => { twice_gelu(GeluApprox::Tanh) }
            if is_splat("?one", 1.0) if is_splat("?three", 3.0)
            if near("?c", 0.044715) if near("?k", FRAC_2_PI.sqrt())),
    ]
}

/// Condition: the constant `?v` is `x` to float precision.
fn near(v: &str, x: f64) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| splat(eg, s[v]).is_some_and(|c| close(c, x, 1e-6))
}

/// `x · (1 + erf(..))` → `gelu(x) · 2`.
fn twice_gelu(approximate: GeluApprox) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, id: Id, s: &Subst| {
        let x = s[var("?x")];
        // Elementwise: the constants must not broadcast `x`.
        let t = super::ty(eg, x)?.clone();
        if Some(&t) != super::ty(eg, id) {
            return None;
        }
        let g = try_add(eg, Op::Gelu(Gelu { approximate }), &[x])?;
        let two = add_const(eg, scalar_tensor(t.dtype, 2.0)?);
        try_add(eg, Op::Binary(Binary::new(BinaryKind::Mul)), &[g, two])
    })
}

#[cfg(test)]
mod tests {
    use crate::eqsat::rules::fusion;
    use crate::eqsat::rules::testing::assert_rewrites;

    const X: &str = "%x: f32[1, seq, 128]";

    #[test]
    fn erf_form_as_minilm_exports_it() {
        // x · ((erf(x / √2) + 1) · 0.5), the 0.5 on the left.
        let e = "(mul %x (mul (constant f32[]=0.5) (add (erf (div %x (constant f32[]=1.4142135))) \
                 (constant f32[]=1.0))))";
        assert_rewrites(&fusion(), X, e, "(gelu 'none' %x)");
    }

    #[test]
    fn erf_form_half_first() {
        let e =
            "(mul (mul %x (constant f32[]=0.5)) (add (erf (mul %x (constant f32[]=0.70710677))) \
                 (constant f32[]=1.0)))";
        assert_rewrites(&fusion(), X, e, "(gelu 'none' %x)");
    }

    #[test]
    fn tanh_form_as_gpt2_exports_it() {
        let e = "(mul (mul %x (constant f32[]=0.5)) (add (tanh (mul (add %x (mul (pow %x \
                 (constant f32[]=3.0)) (constant f32[]=0.044715))) (constant f32[]=0.7978846))) \
                 (constant f32[]=1.0)))";
        assert_rewrites(&fusion(), X, e, "(gelu 'tanh' %x)");
    }
}
