//! The printer: [`Module`] to canonical text.
//!
//! Layout: the module header, the weight declarations (2-space indent, in
//! [`WeightStore::iter`](crate::WeightStore::iter) order), then each graph
//! (2-space indent, nodes at 4), then the bucket records (one line each) and
//! the memory plans (entries at 4), both in graph-name order, with one blank
//! line after the weight block, between graphs, before the bucket block and
//! before each plan. Nothing is column-aligned, so a change to one line
//! never re-flows its neighbours. Only the nodes in `graph.nodes` are
//! printed; values nothing defines or uses are not.

use std::fmt::Write;

use super::lex::is_name_char;
use crate::bucket::BucketInfo;
use crate::graph::{Graph, Module, Node, ValueDef, ValueId};
use crate::ops::OpDef;
use crate::plan::{MemoryPlan, Region};

/// `sigil` + `name`, quoted (with Rust escapes) unless the name is plain.
pub(super) fn name(sigil: char, name: &str) -> String {
    if !name.is_empty() && name.chars().all(is_name_char) {
        format!("{sigil}{name}")
    } else {
        format!("{sigil}{name:?}")
    }
}

/// Prints a module in the textual form.
pub(super) fn module(m: &Module) -> String {
    let mut out = format!("module {}", name('@', &m.name));
    if let Some(file) = &m.weights.file {
        let _ = write!(out, " weights {file:?}");
    }
    out.push_str(" {\n");
    for (w, decl) in m.weights.iter() {
        let _ = writeln!(out, "  weight {} : {}", name('@', w), decl.ty);
    }
    for (i, g) in m.graphs.iter().enumerate() {
        if i > 0 || !m.weights.is_empty() {
            out.push('\n');
        }
        graph(&mut out, g);
    }
    // One blank line between items; the bucket records form one block.
    let mut any = !m.weights.is_empty() || !m.graphs.is_empty();
    if !m.buckets.is_empty() && any {
        out.push('\n');
    }
    for (g, b) in &m.buckets {
        bucket(&mut out, g, b);
        any = true;
    }
    for (g, p) in &m.plans {
        if any {
            out.push('\n');
        }
        plan(&mut out, g, p);
        any = true;
    }
    out.push_str("}\n");
    out
}

/// `bucket @g = @base {seq = 64} : (T, ...) -> (T, ...)`.
fn bucket(out: &mut String, g: &str, b: &BucketInfo) {
    let types = |ts: &[crate::TensorType]| join(ts.iter().map(|t| t.to_string()));
    let _ = writeln!(
        out,
        "  bucket {} = {} {{{} = {}}} : ({}) -> ({})",
        name('@', g),
        name('@', &b.base),
        b.symbol,
        b.size,
        types(&b.inputs),
        types(&b.outputs)
    );
}

/// `plan @g {region sizes, lower_bound} { entries }`.
fn plan(out: &mut String, g: &str, p: &MemoryPlan) {
    let sizes = join(
        Region::ALL
            .iter()
            .map(|&r| format!("{} = {}", r.name(), p.regions.get(r))),
    );
    let _ = writeln!(
        out,
        "  plan {} {{{sizes}, lower_bound = {}}} {{",
        name('@', g),
        p.lower_bound
    );
    for t in &p.tensors {
        let sigil = if t.region == Region::Weights {
            '@'
        } else {
            '%'
        };
        let _ = write!(
            out,
            "    {} : {} {{offset = {}, size = {}",
            name(sigil, &t.name),
            t.region.name(),
            t.offset,
            t.size
        );
        if let Some((a, b)) = t.live {
            let _ = write!(out, ", live = [{a}, {b}]");
        }
        out.push('}');
        if let Some(src) = &t.in_place {
            let _ = write!(out, " in_place {}", name('%', src));
        }
        out.push('\n');
    }
    out.push_str("  }\n");
}

/// An operand reference: `@weight` or `%value`.
fn operand(g: &Graph, v: ValueId) -> String {
    let val = g.value(v);
    match &val.def {
        ValueDef::Weight(w) => name('@', w),
        ValueDef::Input | ValueDef::Node => name('%', &val.name),
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

fn graph(out: &mut String, g: &Graph) {
    let inputs = join(
        g.inputs
            .iter()
            .map(|&v| format!("{}: {}", name('%', &g.value(v).name), g.ty(v))),
    );
    let results = join(g.outputs.iter().map(|&v| g.ty(v).to_string()));
    let _ = writeln!(
        out,
        "  graph {}({inputs}) -> ({results}) {{",
        name('@', &g.name)
    );
    for n in &g.nodes {
        node(out, g, n);
    }
    let returned = join(g.outputs.iter().map(|&v| operand(g, v)));
    if returned.is_empty() {
        out.push_str("    return\n");
    } else {
        let _ = writeln!(out, "    return {returned}");
    }
    out.push_str("  }\n");
}

fn node(out: &mut String, g: &Graph, n: &Node) {
    let results = join(n.outputs.iter().map(|&v| name('%', &g.value(v).name)));
    let _ = write!(out, "    {results} = {}", n.op.mnemonic());
    if !n.inputs.is_empty() {
        let _ = write!(out, " {}", join(n.inputs.iter().map(|&v| operand(g, v))));
    }
    let attrs = n.op.attrs();
    if !attrs.is_empty() {
        let attrs = join(attrs.iter().map(|(k, v)| format!("{k} = {v}")));
        let _ = write!(out, " {{{attrs}}}");
    }
    let types = join(n.outputs.iter().map(|&v| g.ty(v).to_string()));
    let _ = writeln!(out, " : {types}");
}
