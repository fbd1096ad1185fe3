//! Rewrite rules, one topic per file, and the conditions and appliers they
//! share.
//!
//! Rules are targeted: each names one form an exporter writes (or one
//! clean-up that makes such forms visible), never general commutativity or
//! associativity. Conditions test what the analysis knows (a constant's
//! value, a type), never the absence of a node. Right sides are built as
//! IR ops through [`try_add`], so they type-check or the rule declines.

pub mod attention;
pub mod canonical;
pub mod gelu;
pub mod layout;
pub mod mask;
pub mod mlp;
pub mod norm;
pub mod rope;
pub mod softcap;

use egg::{Applier, Id, PatternAst, Subst, Symbol, Var};
use slmcc_ir::ops::constant::Constant;
use slmcc_ir::{Attr, Fact, Known, Op, Tensor, TensorType};

use super::analysis::FactAnalysis;
pub use super::analysis::{add_get, attr, fact, try_add, EGraph};
use super::language::{AttrData, Lang};
use super::runner::Rewrite;

/// The `canonicalize` rules.
pub fn canonical() -> Vec<Rewrite> {
    canonical::rules()
}

/// The `eqsat-fuse` rules: the canonical ones, then every fusion topic.
pub fn fusion() -> Vec<Rewrite> {
    let mut r = canonical::rules();
    r.extend(norm::rules());
    r.extend(gelu::rules());
    r.extend(mlp::rules());
    r.extend(rope::rules());
    r.extend(attention::rules());
    r.extend(mask::rules());
    r.extend(softcap::rules());
    r
}

/// A pattern variable.
pub fn var(name: &str) -> Var {
    name.parse().expect("pattern variable")
}

/// An applier from a function that builds the replacement of a match; the
/// result is unioned with the matched class. Returning `None` declines.
pub struct Build<F>(pub F);

impl<F> Applier<Lang, FactAnalysis> for Build<F>
where
    F: Fn(&mut EGraph, Id, &Subst) -> Option<Id>,
{
    fn apply_one(
        &self,
        eg: &mut EGraph,
        eclass: Id,
        subst: &Subst,
        _: Option<&PatternAst<Lang>>,
        _: Symbol,
    ) -> Vec<Id> {
        match (self.0)(eg, eclass, subst) {
            Some(id) if eg.union(eclass, id) => vec![id],
            _ => Vec::new(),
        }
    }
}

/// The type of a value class.
pub fn ty(eg: &EGraph, id: Id) -> Option<&TensorType> {
    fact(eg, id).map(|f| &f.ty)
}

/// The concrete value of a class known at compile time.
pub fn tensor(eg: &EGraph, id: Id) -> Option<std::sync::Arc<Tensor>> {
    let f: &Fact = fact(eg, id)?;
    f.value.as_ref()?.as_tensor(f.ty.dtype)
}

/// The one value every element of a known constant has.
pub fn splat(eg: &EGraph, id: Id) -> Option<f64> {
    let t = tensor(eg, id)?;
    let first = t.get_f64(0);
    (1..t.len())
        .all(|i| t.get_f64(i).to_bits() == first.to_bits())
        .then_some(first)
}

/// The elements of a known integer value (symbolic elements are `None`).
pub fn ints(eg: &EGraph, id: Id) -> Option<Vec<Option<i64>>> {
    let f = fact(eg, id)?;
    let d = f.value.as_ref()?.as_dims()?;
    Some(d.values.iter().map(|v| v.as_fixed()).collect())
}

/// The integers of a list (or integer) attribute.
pub fn attr_ints(eg: &EGraph, id: Id) -> Option<Vec<i64>> {
    match attr(eg, id)? {
        AttrData::Attr(Attr::Int(v)) => Some(vec![v]),
        AttrData::Attr(Attr::List(items)) => items
            .iter()
            .map(|a| match a {
                Attr::Int(v) => Some(*v),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// A boolean attribute.
pub fn attr_bool(eg: &EGraph, id: Id) -> Option<bool> {
    match attr(eg, id)? {
        AttrData::Attr(Attr::Bool(b)) => Some(b),
        _ => None,
    }
}

/// The one integer of a known `[1]` or scalar value.
pub fn known_int(eg: &EGraph, id: Id) -> Option<i64> {
    match ints(eg, id)?.as_slice() {
        [Some(v)] => Some(*v),
        _ => None,
    }
}

/// A float or integer attribute.
pub fn attr_f64(eg: &EGraph, id: Id) -> Option<f64> {
    match attr(eg, id)? {
        AttrData::Attr(Attr::Float(v)) => Some(v),
        AttrData::Attr(Attr::Int(v)) => Some(v as f64),
        _ => None,
    }
}

/// Whether `axis` (possibly negative) is the last axis of a rank-`rank` value.
pub fn is_last_axis(axis: i64, rank: usize) -> bool {
    axis == -1 || axis == rank as i64 - 1
}

/// Adds a constant.
pub fn add_const(eg: &mut EGraph, t: Tensor) -> Id {
    try_add(eg, Op::Constant(Constant::from_tensor(t)), &[]).expect("constants type-check")
}

/// A scalar constant of `dtype` holding `v`.
pub fn scalar_tensor(dtype: slmcc_ir::DType, v: f64) -> Option<Tensor> {
    Tensor::from_f64(dtype, vec![], &[v]).ok()
}

/// Whether two floats agree to `rel` relative error.
pub fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(a.abs())
}

/// Condition: every element of the constant `?v` equals `x`.
pub fn is_splat(v: &str, x: f64) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| splat(eg, s[v]) == Some(x)
}

/// Condition: the constant `?v` is one scalar (rank 0).
pub fn is_scalar(v: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| splat(eg, s[v]).is_some() && ty(eg, s[v]).is_some_and(|t| t.rank() == 0)
}

/// Condition: `?v` is known at compile time or is a weight.
pub fn is_leaf_data(v: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| {
        let id = s[v];
        fact(eg, id).is_some_and(|f| matches!(f.value, Some(Known::Tensor(_))))
            || eg[id].nodes.iter().any(|n| matches!(n, Lang::Weight(_)))
    }
}

/// Condition: `?v` has the type of the matched class (the op neither
/// broadcast nor converted it).
pub fn keeps_type(v: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, id, s| ty(eg, s[v]).is_some() && ty(eg, s[v]) == ty(eg, id)
}

/// Condition: `v` is a tensor of a float dtype (rules such as `x / y` →
/// `x · reciprocal(y)` hold only there).
pub fn is_float(v: &str) -> impl Fn(&mut EGraph, Id, &Subst) -> bool {
    let v = var(v);
    move |eg, _, s| ty(eg, s[v]).is_some_and(|t| t.dtype.is_float())
}

#[cfg(test)]
pub(crate) mod testing {
    //! Checking a rule set on small expressions.

    use egg::RecExpr;
    use slmcc_ir::text::parse_module;
    use slmcc_ir::ValueDef;

    use super::*;
    use crate::eqsat::cost::CpuCost;
    use crate::eqsat::extract::extract;
    use crate::eqsat::runner::{saturate, Limits};

    /// An e-graph whose leaves are declared as in a graph signature:
    /// `"%x: f32[1, seq, 64], @w: f32[64]"`.
    pub fn egraph(decls: &str) -> EGraph {
        let mut inputs = Vec::new();
        let mut weights = String::new();
        for item in split_decls(decls) {
            match item.strip_prefix('@') {
                Some(w) => {
                    let (name, t) = w.split_once(':').expect("`@name: type`");
                    weights.push_str(&format!("  weight @{name} :{t}\n"));
                }
                None => inputs.push(item),
            }
        }
        let src = format!(
            "module @t {{\n{weights}  graph @g({}) -> () {{\n    return\n  }}\n}}\n",
            inputs.join(", ")
        );
        let m = parse_module(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let mut a = FactAnalysis::default();
        for (_, v) in m.graphs[0].values() {
            if v.def == ValueDef::Input {
                a.inputs.insert(egg::Symbol::from(&v.name), v.ty.clone());
            }
        }
        for (name, w) in m.weights.iter() {
            a.weights.insert(egg::Symbol::from(name), w.ty.clone());
        }
        EGraph::new(a)
    }

    /// Splits `a: f32[1, 2], b: f32[2]` at the commas between declarations.
    fn split_decls(decls: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut depth = 0;
        let mut cur = String::new();
        for c in decls.chars() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(cur.trim().to_string());
                    cur.clear();
                    continue;
                }
                _ => {}
            }
            cur.push(c);
        }
        if !cur.trim().is_empty() {
            out.push(cur.trim().to_string());
        }
        out
    }

    /// Runs `rules` on `a` and checks that `b` is in the same e-class.
    pub fn assert_equivalent(rules: &[Rewrite], decls: &str, a: &str, b: &str) {
        let mut eg = egraph(decls);
        let a_expr: RecExpr<Lang> = a.parse().unwrap();
        let b_expr: RecExpr<Lang> = b.parse().unwrap();
        let ia = eg.add_expr(&a_expr);
        eg.rebuild();
        let (mut eg, _) = saturate(eg, rules, limits());
        let ib = eg.add_expr(&b_expr);
        eg.rebuild();
        assert_eq!(eg.find(ia), eg.find(ib), "{a} is not equivalent to {b}");
    }

    fn limits() -> Limits {
        Limits {
            nodes: 100_000,
            iterations: 30,
            time: std::time::Duration::from_secs(10),
        }
    }

    /// Runs `rules` on `before` (leaves declared by `decls`) and checks that
    /// the cheapest equivalent under the CPU model is `after`.
    pub fn assert_rewrites(rules: &[Rewrite], decls: &str, before: &str, after: &str) {
        let mut eg = egraph(decls);
        let expr: RecExpr<Lang> = before.parse().unwrap();
        let root = eg.add_expr(&expr);
        eg.rebuild();
        let (eg, _) = saturate(eg, rules, limits());
        let got = extract(&eg, &[root], &CpuCost::default());
        let want: RecExpr<Lang> = after.parse().unwrap();
        assert_eq!(got.expr.to_string(), want.to_string(), "rewriting {before}");
    }
}
