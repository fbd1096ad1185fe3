//! Gated MLPs: SwiGLU `silu(x @ w_gate) · (x @ w_up)` with
//! `silu(g) = g · sigmoid(g)`, GeGLU with a fused `gelu` gate, either
//! product order; with both products `qmatmul`s of one kind (weights that
//! came quantized), the `qswiglu` that is defined as exactly that graph;
//! and Phi-3's fused `gate_up` projection split in two
//! halves (`split` or two `slice`s of one `matmul`; unit steps are
//! canonicalized away, so the dynamo exporter's slices with steps and the
//! TorchScript exporter's without both match).

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::gelu::GeluApprox;
use slmcc_ir::ops::glu::Glu;
use slmcc_ir::{Attr, Dim, Op};

use super::{attr, attr_ints, is_last_axis, known_int, try_add, ty, var, Build, EGraph};
use crate::eqsat::language::AttrData;
use crate::eqsat::runner::Rewrite;

const SILU_G: &str = "(mul (matmul ?x ?wg) (sigmoid (matmul ?x ?wg)))";
/// The gate and up products by quantized weights of the same kind (a
/// model whose weights came quantized: onnxruntime's `MatMulNBits`).
const Q_GATE: &str = "(qmatmul ?b ?g ?l ?a ?x ?qg ?sg)";
const Q_UP: &str = "(qmatmul ?b ?g ?l ?a ?x ?qu ?su)";
const QSWIGLU: &str = "(qswiglu ?b ?g ?l ?a ?x ?qg ?sg ?qu ?su)";
const SPLIT: &str = "(split ?axis ?sizes (matmul ?x ?w))";

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    let p = |s: String| s.parse::<egg::Pattern<crate::eqsat::Lang>>().unwrap();
    let silu_half = |k: usize, of: &str| format!("(mul (get {k} {of}) (sigmoid (get {k} {of})))");
    let slice = |lo: &str, hi: &str| format!("(slice (matmul ?x ?w) {lo} {hi} ?axes)");
    let (gate_slice, up_slice) = (slice("?g0", "?g1"), slice("?u0", "?u1"));
    vec![
        rw!("silu-order";        "(mul (sigmoid ?g) ?g)"                   => "(mul ?g (sigmoid ?g))"),
        rw!("swiglu";            {p(format!("(mul {SILU_G} (matmul ?x ?wu))"))} => { glu(None) }),
        rw!("swiglu-up-first";   {p(format!("(mul (matmul ?x ?wu) {SILU_G})"))} => { glu(None) }),
        rw!("qswiglu";           {p(format!("(mul (mul {Q_GATE} (sigmoid {Q_GATE})) {Q_UP})"))} => {p(QSWIGLU.to_string())}),
        rw!("qswiglu-up-first";  {p(format!("(mul {Q_UP} (mul {Q_GATE} (sigmoid {Q_GATE})))"))} => {p(QSWIGLU.to_string())}),
        rw!("geglu";             "(mul (gelu ?a (matmul ?x ?wg)) (matmul ?x ?wu))" => { glu(Some("?a")) }),
        rw!("geglu-up-first";    "(mul (matmul ?x ?wu) (gelu ?a (matmul ?x ?wg)))" => { glu(Some("?a")) }),
        rw!("swiglu-split";      {p(format!("(mul {} (get 1 {SPLIT}))", silu_half(0, SPLIT)))} => { fused_glu(false) }),
        rw!("swiglu-split-up-first"; {p(format!("(mul (get 1 {SPLIT}) {})", silu_half(0, SPLIT)))} => { fused_glu(false) }),
        rw!("swiglu-slices";     {p(format!("(mul (mul {gate_slice} (sigmoid {gate_slice})) {up_slice})"))} => { fused_glu(true) }),
        rw!("swiglu-slices-up-first"; {p(format!("(mul {up_slice} (mul {gate_slice} (sigmoid {gate_slice})))"))} => { fused_glu(true) }),
    ]
}

/// The `approximate` of a `gelu` gate, as the `geglu` kind.
fn approximate(eg: &EGraph, a: Id) -> Option<GeluApprox> {
    match attr(eg, a)? {
        AttrData::Attr(Attr::Str(s)) if s == "tanh" => Some(GeluApprox::Tanh),
        AttrData::Attr(Attr::Str(s)) if s == "none" => Some(GeluApprox::None),
        _ => None,
    }
}

/// `act(x @ wg) · (x @ wu)` → `swiglu`/`geglu(x, wg, wu)`.
fn glu(gelu: Option<&'static str>) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let op = match gelu {
            None => Glu::swiglu(),
            Some(a) => Glu::geglu(approximate(eg, s[var(a)])?),
        };
        try_add(
            eg,
            Op::Glu(op),
            &[s[var("?x")], s[var("?wg")], s[var("?wu")]],
        )
    })
}

/// The halves of `x @ w` along its last axis → `swiglu(x, w)`, read from a
/// `split` into two equal sizes or from `[0, n)` and `[n, 2n)` unit-step
/// slices.
fn fused_glu(slices: bool) -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(move |eg: &mut EGraph, _: Id, s: &Subst| {
        let (x, w) = (s[var("?x")], s[var("?w")]);
        let rank = ty(eg, x)?.rank();
        let cols = ty(eg, w)?.shape.dims().get(1)?.clone();
        let half = cols.div_exact(&Dim::fixed(2))?;
        let ok = if slices {
            let one = |v: &str| known_int(eg, s[var(v)]);
            let axis_last = one("?axes").is_some_and(|a| is_last_axis(a, rank));
            let n = half.as_fixed();
            axis_last
                && one("?g0") == Some(0)
                && n.is_some()
                && one("?g1") == n
                && one("?u0") == n
                && one("?u1").is_some_and(|e| Some(e) >= cols.as_fixed())
        } else {
            let axis_last = matches!(attr_ints(eg, s[var("?axis")]).as_deref(), Some([a]) if is_last_axis(*a, rank));
            let sizes = match attr(eg, s[var("?sizes")])? {
                AttrData::Attr(Attr::List(v)) => v,
                _ => return None,
            };
            axis_last && sizes == vec![Attr::dim(&half), Attr::dim(&half)]
        };
        if !ok {
            return None;
        }
        try_add(eg, Op::Glu(Glu::swiglu()), &[x, w])
    })
}

#[cfg(test)]
mod tests {
    use crate::eqsat::rules::fusion;
    use crate::eqsat::rules::testing::assert_rewrites;

    const X: &str = "%x: f32[1, seq, 64], @wg: f32[64, 176], @wu: f32[64, 176], @w: f32[64, 352]";

    #[test]
    fn swiglu_as_llama_exports_it() {
        let e = "(mul (mul (matmul %x @wg) (sigmoid (matmul %x @wg))) (matmul %x @wu))";
        assert_rewrites(&fusion(), X, e, "(swiglu %x @wg @wu)");
    }

    #[test]
    fn swiglu_up_first_and_sigmoid_first() {
        let e = "(mul (matmul %x @wu) (mul (sigmoid (matmul %x @wg)) (matmul %x @wg)))";
        assert_rewrites(&fusion(), X, e, "(swiglu %x @wg @wu)");
    }

    /// Weights that came quantized (`MatMulNBits`): `qswiglu`, whose
    /// definition is this graph, when both products are of one kind.
    #[test]
    fn qswiglu_of_two_qmatmuls_of_one_kind() {
        let decls = "%x: f32[1, seq, 64], @qg: i4[64, 176], @sg: f32[2, 176], \
                     @qu: i4[64, 176], @su: f32[2, 176], @s8: f32[4, 176]";
        let q = |w: &str, s: &str, group: i64| format!("(qmatmul 4 {group} none 'f32' %x {w} {s})");
        let gate = q("@qg", "@sg", 32);
        let e = format!(
            "(mul (mul {gate} (sigmoid {gate})) {})",
            q("@qu", "@su", 32)
        );
        assert_rewrites(
            &fusion(),
            decls,
            &e,
            "(qswiglu 4 32 none 'f32' %x @qg @sg @qu @su)",
        );
        // Products of different groups stay apart.
        let e = format!(
            "(mul (mul {gate} (sigmoid {gate})) {})",
            q("@qu", "@s8", 16)
        );
        assert_rewrites(&fusion(), decls, &e, &e);
    }

    #[test]
    fn phi3_fused_gate_up_split() {
        let s = "(split 2 (list 176 176) (matmul %x @w))";
        let e = format!("(mul (get 1 {s}) (mul (get 0 {s}) (sigmoid (get 0 {s}))))");
        assert_rewrites(&fusion(), X, &e, "(swiglu %x @w)");
    }

    #[test]
    fn fused_gate_up_slices() {
        let c = |v: i64| format!("(constant i64[1]={v})");
        let sl = |lo: i64, hi: i64| {
            format!(
                "(slice (matmul %x @w) {} {} {} {})",
                c(lo),
                c(hi),
                c(-1),
                c(1)
            )
        };
        let (g, u) = (sl(0, 176), sl(176, 352));
        let e = format!("(mul (mul {g} (sigmoid {g})) {u})");
        assert_rewrites(&fusion(), X, &e, "(swiglu %x @w)");
    }

    #[test]
    fn fused_gate_up_slices_without_steps_up_first() {
        // TorchScript's `chunk(2, -1)`: slices with no steps operand, and
        // Phi-3's `up_states * act(gate)`.
        let c = |v: i64| format!("(constant i64[1]={v})");
        let sl = |lo: i64, hi: i64| format!("(slice (matmul %x @w) {} {} {})", c(lo), c(hi), c(-1));
        let (g, u) = (sl(0, 176), sl(176, 352));
        let e = format!("(mul {u} (mul {g} (sigmoid {g})))");
        assert_rewrites(&fusion(), X, &e, "(swiglu %x @w)");
    }

    #[test]
    fn geglu_from_a_fused_gelu() {
        let e = "(mul (gelu 'tanh' (matmul %x @wg)) (matmul %x @wu))";
        assert_rewrites(&fusion(), X, e, "(geglu 'tanh' %x @wg @wu)");
    }
}
