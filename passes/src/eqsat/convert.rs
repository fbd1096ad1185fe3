//! Conversion between IR graphs and e-graphs.
//!
//! [`to_egraph`] puts a whole graph into one e-graph, so values the graph
//! shares (and the results of multi-result ops) stay shared;
//! [`super::extract`] chooses what to keep, as one [`RecExpr`] holding
//! every graph output; [`to_graph`] turns that back into a graph, giving
//! each value the name of an original value of its class (graph outputs
//! first) and fresh names to the rest.

use std::collections::{HashMap, HashSet};

use egg::{Id, RecExpr, Symbol};
use slmcc_ir::ops::identity::Identity;
use slmcc_ir::verify::node_label;
use slmcc_ir::{Fact, Graph, Module, OpDef, TensorType, ValueDef, ValueId};

use super::analysis::{add_get, try_add, EGraph, FactAnalysis};
use super::extract::Extracted;
use super::language::{attr_data, decode, encode, is_multi_result, InputName, Lang, WeightName};

/// A graph in an e-graph.
pub struct Encoded {
    pub egraph: EGraph,
    /// The class of every value of the graph, by [`ValueId`] index.
    pub classes: Vec<Option<Id>>,
}

/// Puts every node of `g` into a new e-graph. Fails, naming the node, if an
/// op rejects its operands or has an attribute the language does not know.
pub fn to_egraph(g: &Graph, module: &Module) -> Result<Encoded, String> {
    let mut analysis = FactAnalysis::default();
    for (_, v) in g.values() {
        match &v.def {
            ValueDef::Input => {
                analysis.inputs.insert(Symbol::from(&v.name), v.ty.clone());
            }
            ValueDef::Weight(name) => {
                let ty = module.weights.get(name).map_or(&v.ty, |w| &w.ty);
                analysis.weights.insert(Symbol::from(name), ty.clone());
            }
            ValueDef::Node => {}
        }
    }
    let mut eg = EGraph::new(analysis);
    let mut classes: Vec<Option<Id>> = vec![None; g.value_count()];
    for (id, v) in g.values() {
        classes[id.index()] = match &v.def {
            ValueDef::Input => Some(eg.add(Lang::Input(InputName(Symbol::from(&v.name))))),
            ValueDef::Weight(w) => Some(eg.add(Lang::Weight(WeightName(Symbol::from(w))))),
            ValueDef::Node => None,
        };
    }
    for (n, node) in g.nodes.iter().enumerate() {
        let at = || format!("node {}", node_label(g, n));
        let operands: Vec<Id> = node
            .inputs
            .iter()
            .map(|v| {
                classes[v.index()]
                    .ok_or_else(|| format!("{}: operand used before its definition", at()))
            })
            .collect::<Result<_, _>>()?;
        // Checks the attributes the language knows, then adds with inference.
        encode(&node.op, &operands, &mut |l| eg.add(l)).map_err(|e| format!("{}: {e}", at()))?;
        let id = try_add(&mut eg, node.op.clone(), &operands)
            .ok_or_else(|| format!("{}: `{}` rejects its operands", at(), node.op.mnemonic()))?;
        if is_multi_result(node.op.mnemonic()) {
            for (k, out) in node.outputs.iter().enumerate() {
                classes[out.index()] = Some(add_get(&mut eg, k, id));
            }
        } else {
            classes[node.outputs[0].index()] = Some(id);
        }
    }
    eg.rebuild();
    Ok(Encoded {
        egraph: eg,
        classes,
    })
}

/// Builds the graph an extracted expression computes: inputs as in
/// `template`, outputs from `roots` in order, result `k` of each node named
/// by `names[(node, k)]` or a fresh name built from its op's mnemonic that
/// no value of `template` had. A
/// root whose node does not carry its output's name (an input, a weight, a
/// value two outputs share) gets an `identity` under that name.
pub fn to_graph(
    expr: &RecExpr<Lang>,
    roots: &[Id],
    names: &HashMap<(Id, usize), String>,
    output_names: &[String],
    template: &Graph,
    module: &Module,
) -> Result<Graph, String> {
    let mut g = Graph::new(template.name.clone());
    for &v in &template.inputs {
        let val = template.value(v);
        g.add_input(val.name.clone(), val.ty.clone())
            .map_err(|e| e.to_string())?;
    }
    let mut reserved: HashSet<&str> = names.values().map(String::as_str).collect();
    reserved.extend(output_names.iter().map(String::as_str));
    // A new node never takes the name of a value of the input graph that
    // extraction dropped: that name means another value (the exporter's,
    // which goldens record by name).
    reserved.extend(template.values().map(|(_, v)| v.name.as_str()));
    let fresh = |g: &mut Graph, hint: &str| {
        let mut name = g.fresh_name(hint);
        while reserved.contains(name.as_str()) {
            name = g.fresh_name(&format!("{hint}_"));
        }
        name
    };
    let mut values: Vec<Vec<ValueId>> = Vec::with_capacity(expr.len());
    let mut facts: HashMap<ValueId, Fact> = HashMap::new();
    let mut attrs = HashMap::new();
    for (id, node) in expr.items() {
        let vals = match node {
            Lang::Input(n) => {
                let v = g
                    .find(n.0.as_str())
                    .ok_or_else(|| format!("unknown input {n}"))?;
                facts.insert(v, Fact::new(g.ty(v).clone()));
                vec![v]
            }
            Lang::Weight(n) => {
                let ty = weight_type(n.0.as_str(), template, module)?;
                let v = g.weight(n.0.as_str(), ty.clone());
                facts.insert(v, Fact::new(ty));
                vec![v]
            }
            Lang::Get([k, t]) => {
                let k = get_index(expr, *k).ok_or("bad `get` index")?;
                vec![values[usize::from(*t)][k]]
            }
            n if n.is_op() => {
                let (op, operands) = decode(n, |c| attrs.get(&c).cloned())?;
                let ins: Vec<ValueId> = operands
                    .iter()
                    .map(|&o| values[usize::from(o)][0])
                    .collect();
                let in_facts: Vec<&Fact> = ins.iter().map(|v| &facts[v]).collect();
                let out = op
                    .infer(&in_facts)
                    .map_err(|e| format!("`{}`: {e}", op.mnemonic()))?;
                let mut results = Vec::new();
                for (k, f) in out.iter().enumerate() {
                    let name = match names.get(&(id, k)).cloned() {
                        Some(n) if g.find(&n).is_none() => n,
                        _ => fresh(&mut g, op.mnemonic()),
                    };
                    results.push((name, f.ty.clone()));
                }
                let vs = g.add_node(op, ins, results).map_err(|e| e.to_string())?;
                for (v, f) in vs.iter().zip(out) {
                    facts.insert(*v, f);
                }
                vs
            }
            n => {
                let a = attr_data(n, |c| attrs.get(&c).cloned())
                    .ok_or_else(|| format!("unexpected node `{n}`"))?;
                attrs.insert(id, a);
                Vec::new()
            }
        };
        values.push(vals);
    }
    for (&root, name) in roots.iter().zip(output_names) {
        let v = values[usize::from(root)][0];
        let out = if g.value(v).name == *name && !g.outputs.contains(&v) {
            v
        } else {
            let ty: TensorType = g.ty(v).clone();
            g.add_node(Identity, vec![v], vec![(name.clone(), ty)])
                .map_err(|e| e.to_string())?[0]
        };
        g.outputs.push(out);
    }
    Ok(g)
}

/// The index a `get` reads.
pub fn get_index(expr: &RecExpr<Lang>, k: Id) -> Option<usize> {
    match &expr[k] {
        Lang::Attr(a) => match a.0 {
            slmcc_ir::Attr::Int(k) => usize::try_from(k).ok(),
            _ => None,
        },
        _ => None,
    }
}

/// Where each named class's value is in the extracted expression, as
/// (node, result): a class computed by its own node is result 0 of it, one
/// read with `get k` from a chosen multi-result node is result `k` of that
/// node (even when nothing else reads it). The first name of a place wins.
pub fn result_names(
    eg: &EGraph,
    ex: &Extracted,
    names: Vec<(Id, String)>,
) -> HashMap<(Id, usize), String> {
    let mut out = HashMap::new();
    for (class, name) in names {
        let c = eg.find(class);
        let place = match ex.of_class.get(&c) {
            Some(&e) => match &ex.expr[e] {
                Lang::Get([k, t]) => get_index(&ex.expr, *k).map(|k| (*t, k)),
                _ => Some((e, 0)),
            },
            None => eg[c].nodes.iter().find_map(|n| match n {
                Lang::Get([k, t]) => {
                    let t = *ex.of_class.get(&eg.find(*t))?;
                    let k = match super::analysis::attr(eg, *k)? {
                        super::language::AttrData::Attr(slmcc_ir::Attr::Int(k)) => k as usize,
                        _ => return None,
                    };
                    Some((t, k))
                }
                _ => None,
            }),
        };
        if let Some(p) = place {
            out.entry(p).or_insert(name);
        }
    }
    out
}

fn weight_type(name: &str, template: &Graph, module: &Module) -> Result<TensorType, String> {
    if let Some(w) = module.weights.get(name) {
        return Ok(w.ty.clone());
    }
    template
        .find_weight(name)
        .map(|v| template.ty(v).clone())
        .ok_or_else(|| format!("unknown weight @{name}"))
}

/// The class and name of every original value that names a class, in
/// order of preference: graph outputs first, then node results in schedule
/// order (inputs and weights keep theirs as leaves).
pub fn class_names(g: &Graph, enc: &Encoded) -> Vec<(Id, String)> {
    let mut names = Vec::new();
    let mut claim = |v: ValueId| {
        if let Some(c) = enc.classes[v.index()] {
            names.push((c, g.value(v).name.clone()));
        }
    };
    for &v in &g.outputs {
        if g.value(v).def == ValueDef::Node {
            claim(v);
        }
    }
    for node in &g.nodes {
        for &v in &node.outputs {
            claim(v);
        }
    }
    names
}
