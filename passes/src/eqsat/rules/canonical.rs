//! Canonicalization: small algebraic clean-ups that make the exporters'
//! patterns visible to the fusion rules, each one named rule.
//!
//! - identities: `identity`, a `cast`/`reshape`/`expand` that keeps the
//!   type, a `transpose` by the identity permutation, `x·1`, `x+0`, `x-0`,
//!   `x/1`, `and(x, true)`, `or(x, false)`, `not(not(x))`,
//!   `where(c, x, x)`;
//! - chains: two transposes compose, a reshape of a reshape reshapes once;
//! - a `slice` whose steps are all 1 drops its steps operand (the dynamo
//!   exporter writes them, the TorchScript one leaves them out for
//!   `chunk`), so fusion patterns match one form;
//! - `x · reciprocal(y)` ⇄ `x / y`, `x / c` → `x · (1/c)` for a constant
//!   scalar `c`, `pow(x, 2)` → `x · x`;
//! - `x · (x · x)` is `pow(x, 3)` (TorchScript's tanh GELU cubes by
//!   multiplying);
//! - layout-only `reshape → transpose → reshape` chains are one
//!   `transpose` ([`super::layout`]);
//! - constants: a constant operand of `mul`/`add`/`and` goes right; a
//!   constant that only repeats one value becomes a rank-0 scalar when that
//!   does not change the result type; scalar factors move out of a product
//!   (`a · (b · c)` → `(a · b) · c`) and two scalar factors fold into one.

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::Op;

use super::{
    add_const, attr_ints, is_float, is_leaf_data, is_scalar, is_splat, keeps_type, scalar_tensor,
    splat, tensor, try_add, ty, var, Build, EGraph,
};
use crate::eqsat::runner::Rewrite;

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    let mut r = vec![
        rw!("identity";            "(identity ?x)"                        => "?x"),
        rw!("cast-same-type";      "(cast ?t ?x)"                         => "?x" if keeps_type("?x")),
        rw!("reshape-same-type";   "(reshape ?z ?x ?s)"                   => "?x" if keeps_type("?x")),
        rw!("expand-same-type";    "(expand ?x ?s)"                       => "?x" if keeps_type("?x")),
        rw!("transpose-identity";  "(transpose ?p ?x)"                    => "?x" if identity_perm("?p")),
        rw!("mul-one";             "(mul ?x ?c)"                          => "?x" if is_splat("?c", 1.0) if keeps_type("?x")),
        rw!("add-zero";            "(add ?x ?c)"                          => "?x" if is_splat("?c", 0.0) if keeps_type("?x")),
        rw!("sub-zero";            "(sub ?x ?c)"                          => "?x" if is_splat("?c", 0.0) if keeps_type("?x")),
        rw!("div-one";             "(div ?x ?c)"                          => "?x" if is_splat("?c", 1.0) if keeps_type("?x")),
        rw!("and-true";            "(and ?x ?c)"                          => "?x" if is_splat("?c", 1.0) if keeps_type("?x")),
        rw!("not-not";             "(not (not ?x))"                       => "?x"),
        rw!("or-false";            "(or ?x ?c)"                           => "?x" if is_splat("?c", 0.0) if keeps_type("?x")),
        rw!("where-same-branches"; "(where ?c ?x ?x)"                     => "?x" if keeps_type("?x")),
        rw!("transpose-transpose"; "(transpose ?q (transpose ?p ?x))"     => { compose_transposes() }),
        rw!("reshape-reshape";     "(reshape ?z (reshape ?y ?x ?s) ?t)"   => "(reshape ?z ?x ?t)" if no_zero_dims("?t")),
        rw!("slice-unit-steps";    "(slice ?x ?b ?e ?a ?st)"              => "(slice ?x ?b ?e ?a)" if unit_steps("?st")),
        rw!("mul-reciprocal";      "(mul ?x (reciprocal ?y))"             => "(div ?x ?y)"),
        rw!("div-to-reciprocal";   "(div ?x ?y)"                          => "(mul ?x (reciprocal ?y))" if is_float("?y")),
        rw!("div-constant";        "(div ?x ?c)"                          => { mul_by_reciprocal() } if is_scalar("?c")),
        rw!("pow-two";             "(pow ?x ?c)"                          => "(mul ?x ?x)" if is_splat("?c", 2.0) if keeps_type("?x")),
        rw!("mul-constant-right";  "(mul ?c ?x)"                          => "(mul ?x ?c)" if is_leaf_data("?c")),
        rw!("add-constant-right";  "(add ?c ?x)"                          => "(add ?x ?c)" if is_leaf_data("?c")),
        rw!("and-constant-right";  "(and ?c ?x)"                          => "(and ?x ?c)" if is_leaf_data("?c")),
        rw!("scalar-out-of-right"; "(mul ?a (mul ?b ?c))"                 => "(mul (mul ?a ?b) ?c)" if is_scalar("?c") if not_scalar("?a")),
        rw!("scalar-out-of-left";  "(mul (mul ?a ?c) ?b)"                 => "(mul (mul ?a ?b) ?c)" if is_scalar("?c") if not_scalar("?b")),
        rw!("fold-scalar-factors"; "(mul (mul ?a ?b) ?c)"                 => { fold_factors() } if is_scalar("?b") if is_scalar("?c")),
        rw!("cube";                "(mul ?x (mul ?x ?x))"                 => { cube() }),
        rw!("cube-left";           "(mul (mul ?x ?x) ?x)"                 => { cube() }),
    ];
    r.extend(super::layout::rules());
    for (name, kind) in [
        ("splat-to-scalar-mul", BinaryKind::Mul),
        ("splat-to-scalar-add", BinaryKind::Add),
        ("splat-to-scalar-sub", BinaryKind::Sub),
        ("splat-to-scalar-div", BinaryKind::Div),
    ] {
        let lhs: egg::Pattern<_> = format!("({} ?x ?c)", kind.mnemonic()).parse().unwrap();
        r.push(rw!(name; lhs => { splat_to_scalar(kind) } if keeps_type("?x")));
    }
    r
}

/// Condition: `?v` is not a scalar constant (two scalar factors fold into
/// one instead of moving past each other, which would scale a value by
/// ever new constants).
fn not_scalar(v: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let scalar = is_scalar(v);
    move |eg, id, s| !scalar(eg, id, s)
}

/// Condition: the permutation `?p` leaves every axis in place.
fn identity_perm(p: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let p = var(p);
    move |eg, _, s| {
        attr_ints(eg, s[p]).is_some_and(|p| p.iter().enumerate().all(|(i, &a)| a == i as i64))
    }
}

/// Condition: the slice steps `?st` are known and all 1.
fn unit_steps(st: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let st = var(st);
    move |eg, _, s| super::ints(eg, s[st]).is_some_and(|v| v.iter().all(|d| *d == Some(1)))
}

/// Condition: the reshape target `?t` is known and has no 0 (whose meaning
/// depends on the reshaped value's shape).
fn no_zero_dims(t: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let t = var(t);
    move |eg, _, s| super::ints(eg, s[t]).is_some_and(|v| v.iter().all(|d| *d != Some(0)))
}

/// `transpose(transpose(x, p), q)` → `transpose(x, [p[q[i]]])`.
fn compose_transposes() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    let (p, q, x) = (var("?p"), var("?q"), var("?x"));
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let (p, q) = (attr_ints(eg, s[p])?, attr_ints(eg, s[q])?);
        let perm = q
            .iter()
            .map(|&i| p.get(usize::try_from(i).ok()?).copied())
            .collect::<Option<Vec<_>>>()?;
        try_add(eg, Op::Transpose(Transpose { perm }), &[s[x]])
    })
}

/// `x / c` → `x · (1/c)` for a scalar constant `c`.
fn mul_by_reciprocal() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    let (x, c) = (var("?x"), var("?c"));
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let v = splat(eg, s[c])?;
        let dtype = ty(eg, s[c])?.dtype;
        if v == 0.0 || !dtype.is_float() {
            return None;
        }
        let inv = add_const(eg, scalar_tensor(dtype, 1.0 / v)?);
        try_add(eg, Op::Binary(Binary::new(BinaryKind::Mul)), &[s[x], inv])
    })
}

/// `(a · b) · c` → `a · (b·c)` for scalar constants `b`, `c`.
fn fold_factors() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    let (a, b, c) = (var("?a"), var("?b"), var("?c"));
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let (vb, vc) = (tensor(eg, s[b])?, tensor(eg, s[c])?);
        let dtype = ty(eg, s[b])?.dtype;
        if ty(eg, s[c])?.dtype != dtype || !dtype.is_float() {
            return None;
        }
        // The product computed as the graph would, in the constants' dtype.
        let prod = slmcc_ir::OpDef::eval(
            &Binary::new(BinaryKind::Mul),
            &[&vb, &vc],
            &Default::default(),
        )
        .ok()?;
        let bc = add_const(eg, prod.into_iter().next()?);
        try_add(eg, Op::Binary(Binary::new(BinaryKind::Mul)), &[s[a], bc])
    })
}

/// `x · (x · x)` → `pow(x, 3)`, the form the GELU rule reads.
fn cube() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    let x = var("?x");
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let dtype = ty(eg, s[x])?.dtype;
        if !dtype.is_float() {
            return None;
        }
        let three = add_const(eg, scalar_tensor(dtype, 3.0)?);
        try_add(eg, Op::Binary(Binary::new(BinaryKind::Pow)), &[s[x], three])
    })
}

/// `op(x, c)` with `c` repeating one value → `op(x, scalar)`.
fn splat_to_scalar(kind: BinaryKind) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    let (x, c) = (var("?x"), var("?c"));
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let t = ty(eg, s[c])?;
        if t.rank() == 0 {
            return None;
        }
        let dtype = t.dtype;
        let v = splat(eg, s[c])?;
        let scalar = add_const(eg, slmcc_ir::Tensor::from_f64(dtype, vec![], &[v]).ok()?);
        try_add(eg, Op::Binary(Binary::new(kind)), &[s[x], scalar])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eqsat::rules::testing::{assert_equivalent, assert_rewrites};

    const X: &str = "%x: f32[1, seq, 64], %v: f32[1, seq, 1]";

    #[test]
    fn identities_disappear() {
        let r = rules();
        assert_rewrites(&r, X, "(identity %x)", "%x");
        assert_rewrites(&r, X, "(mul %x (constant f32[]=1.0))", "%x");
        assert_rewrites(&r, X, "(cast f32 %x)", "%x");
        assert_rewrites(&r, X, "(transpose (list 0 1 2) %x)", "%x");
        assert_rewrites(&r, X, "(not (not (cast bool %x)))", "(cast bool %x)");
        assert_rewrites(&r, X, "(where (cast bool %v) %x %x)", "%x");
        assert_rewrites(
            &r,
            X,
            "(or (cast bool %x) (constant bool[]=false))",
            "(cast bool %x)",
        );
    }

    #[test]
    fn unit_slice_steps_are_dropped() {
        let r = rules();
        let c = |v: i64| format!("(constant i64[1]={v})");
        let (b, e, a) = (c(0), c(8), c(-1));
        assert_rewrites(
            &r,
            X,
            &format!("(slice %x {b} {e} {a} {})", c(1)),
            &format!("(slice %x {b} {e} {a})"),
        );
        let strided = format!("(slice %x {b} {e} {a} {})", c(2));
        assert_rewrites(&r, X, &strided, &strided);
    }

    #[test]
    fn transposes_compose() {
        let r = rules();
        assert_rewrites(
            &r,
            "%x: f32[1, seq, 4, 16]",
            "(transpose (list 0 1 3 2) (transpose (list 0 2 1 3) %x))",
            "(transpose (list 0 2 3 1) %x)",
        );
    }

    #[test]
    fn reciprocal_and_powers() {
        let r = rules();
        assert_equivalent(
            &r,
            X,
            "(mul %x (reciprocal (sqrt %v)))",
            "(div %x (sqrt %v))",
        );
        assert_equivalent(&r, X, "(pow %x (constant f32[]=2.0))", "(mul %x %x)");
        assert_equivalent(
            &r,
            X,
            "(div %x (constant f32[]=4.0))",
            "(mul %x (constant f32[]=0.25))",
        );
    }

    #[test]
    fn constants_go_right_and_become_scalars() {
        let r = rules();
        assert_equivalent(
            &r,
            X,
            "(mul (constant f32[1]=0.5) %x)",
            "(mul %x (constant f32[]=0.5))",
        );
        assert_equivalent(
            &r,
            X,
            "(mul %x (mul %v (constant f32[]=0.5)))",
            "(mul (mul %x %v) (constant f32[]=0.5))",
        );
        assert_rewrites(
            &r,
            X,
            "(mul (mul %x (constant f32[]=0.5)) (constant f32[]=4.0))",
            "(mul %x (constant f32[]=2.0))",
        );
    }
}
