//! The e-class analysis: what the IR knows about each class (dtype, shape
//! and, when known, the value), computed by the ops' own inference.
//!
//! An op node is converted back to its IR [`Op`] and [`OpDef::infer`] runs
//! on its operands' facts, so the e-graph and the IR cannot disagree on
//! types. Merging two classes asserts that they agree on dtype and shape: a
//! rule that unions values of different types is a bug. Rules add nodes
//! through [`try_add`], which runs inference first and declines the rewrite
//! when the op rejects its operands.

use std::collections::HashMap;
use std::sync::Arc;

use egg::{Analysis, DidMerge, Id, Symbol};
use slmcc_ir::{Fact, Op, OpDef, TensorType};

use super::index_fn::{self, IndexFn};
use super::language::{attr_data, decode, encode, is_multi_result, AttrData, Lang};

/// The e-graph of tensor programs.
pub type EGraph = egg::EGraph<Lang, FactAnalysis>;

/// What an e-class holds.
#[derive(Clone, Debug)]
pub enum Data {
    /// An attribute (scalar, list, `none`) or a constant's typed value.
    Attr(AttrData),
    /// A tensor value, and for integer and boolean values built from
    /// indices (masks), the value as a function of its indices.
    Value(Fact, Option<Arc<IndexFn>>),
    /// The results of a multi-result op, read with `get`.
    Tuple(Arc<[Fact]>),
}

impl Data {
    pub fn fact(&self) -> Option<&Fact> {
        match self {
            Data::Value(f, _) => Some(f),
            _ => None,
        }
    }
}

/// The analysis: the types of the leaves, keyed by name.
#[derive(Clone, Debug, Default)]
pub struct FactAnalysis {
    pub inputs: HashMap<Symbol, TensorType>,
    pub weights: HashMap<Symbol, TensorType>,
}

/// The fact of a value class (`None` for attributes and tuples).
pub fn fact(eg: &EGraph, id: Id) -> Option<&Fact> {
    eg[id].data.fact()
}

/// The index function of a value class, when known.
pub fn index_fn(eg: &EGraph, id: Id) -> Option<&IndexFn> {
    match &eg[id].data {
        Data::Value(_, f) => f.as_deref(),
        _ => None,
    }
}

/// The attribute an attribute class holds.
pub fn attr(eg: &EGraph, id: Id) -> Option<AttrData> {
    match &eg[id].data {
        Data::Attr(a) => Some(a.clone()),
        _ => None,
    }
}

/// Infers the data of an op node from its operands' facts (and index
/// functions, when `index` gives them).
fn infer(op: &Op, operands: &[&Fact], index: &[Option<&IndexFn>]) -> Result<Data, String> {
    let mut out = op.infer(operands).map_err(|e| e.to_string())?;
    if is_multi_result(op.mnemonic()) {
        Ok(Data::Tuple(out.into()))
    } else if out.len() == 1 {
        let out = out.remove(0);
        let ins: Vec<(&Fact, Option<&IndexFn>)> = operands
            .iter()
            .enumerate()
            .map(|(i, f)| (*f, index.get(i).copied().flatten()))
            .collect();
        let f = index_fn::infer(op, &ins, &out).map(Arc::new);
        Ok(Data::Value(out, f))
    } else {
        Err(format!("`{}` yields {} results", op.mnemonic(), out.len()))
    }
}

/// Adds `op` applied to `operands` if its inference accepts them, and
/// returns its class; `None` (nothing added) when it does not.
pub fn try_add(eg: &mut EGraph, op: Op, operands: &[Id]) -> Option<Id> {
    let facts: Option<Vec<&Fact>> = operands.iter().map(|&i| fact(eg, i)).collect();
    infer(&op, &facts?, &[]).ok()?;
    let node = encode(&op, operands, &mut |n| eg.add(n)).ok()?;
    Some(eg.add(node))
}

/// Adds result `k` of the multi-result class `tuple`.
pub fn add_get(eg: &mut EGraph, k: usize, tuple: Id) -> Id {
    let k = eg.add(Lang::int(k as i64));
    eg.add(Lang::Get([k, tuple]))
}

impl Analysis<Lang> for FactAnalysis {
    type Data = Data;

    fn make(eg: &mut EGraph, node: &Lang, _: Id) -> Data {
        let leaf = |table: &HashMap<Symbol, TensorType>, name: Symbol| {
            let ty = table.get(&name).unwrap_or_else(|| {
                panic!("eqsat: leaf `{name}` has no declared type");
            });
            Data::Value(Fact::new(ty.clone()), None)
        };
        match node {
            Lang::Input(n) => return leaf(&eg.analysis.inputs, n.0),
            Lang::Weight(n) => return leaf(&eg.analysis.weights, n.0),
            Lang::Get([k, t]) => {
                let k = match attr(eg, *k) {
                    Some(AttrData::Attr(slmcc_ir::Attr::Int(k))) => k as usize,
                    other => panic!("eqsat: `get` index {other:?}"),
                };
                return match &eg[*t].data {
                    Data::Tuple(facts) if k < facts.len() => Data::Value(facts[k].clone(), None),
                    other => panic!("eqsat: `get {k}` of {other:?}"),
                };
            }
            _ => {}
        }
        if let Some(a) = attr_data(node, |c| attr(eg, c)) {
            return Data::Attr(a);
        }
        let data = decode(node, |c| attr(eg, c)).and_then(|(op, operands)| {
            let facts: Option<Vec<&Fact>> = operands.iter().map(|&i| fact(eg, i)).collect();
            let index: Vec<Option<&IndexFn>> = operands.iter().map(|&i| index_fn(eg, i)).collect();
            infer(
                &op,
                &facts.ok_or("an operand is not a tensor value")?,
                &index,
            )
        });
        data.unwrap_or_else(|e| panic!("eqsat: node `{node}` does not type-check: {e}"))
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> DidMerge {
        match (a, b) {
            (Data::Value(x, xf), Data::Value(y, yf)) => {
                assert_eq!(x.ty, y.ty, "eqsat: merged values of different types");
                let mut changed = DidMerge(false, false);
                match (&x.value, y.value) {
                    (None, Some(v)) => {
                        x.value = Some(v);
                        changed.0 = true;
                    }
                    (Some(_), None) => changed.1 = true,
                    _ => {}
                }
                match (&xf, yf) {
                    (None, Some(f)) => {
                        *xf = Some(f);
                        changed.0 = true;
                    }
                    (Some(_), None) => changed.1 = true,
                    _ => {}
                }
                changed
            }
            (Data::Tuple(x), Data::Tuple(y)) => {
                let tys = |t: &[Fact]| t.iter().map(|f| f.ty.clone()).collect::<Vec<_>>();
                assert_eq!(tys(x), tys(&y), "eqsat: merged tuples of different types");
                DidMerge(false, false)
            }
            (Data::Attr(x), Data::Attr(y)) => {
                assert_eq!(*x, y, "eqsat: merged different attributes");
                DidMerge(false, false)
            }
            (x, y) => panic!("eqsat: merged {x:?} with {y:?}"),
        }
    }
}
