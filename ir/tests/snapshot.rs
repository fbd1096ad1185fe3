//! Snapshot of the printer's output for a small hand-built module with
//! symbolic dims, weights, a multi-result node, quoted names and attribute
//! values of every kind ops use (integers, floats, bools, dtypes, symbolic
//! dims, lists).

use std::collections::HashMap;

use slmcc_ir::ops::cast::Cast;
use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::gather::Gather;
use slmcc_ir::ops::matmul::MatMul;
use slmcc_ir::ops::reshape::Reshape;
use slmcc_ir::ops::shape_of::ShapeOf;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::text::{parse_module, print_module};
use slmcc_ir::{
    verify_module, Attr, Attrs, DType, Dim, Fact, Graph, Module, Op, OpDef, TensorType, ValueId,
};

/// Builds a graph node by node, inferring each result type.
struct Builder {
    g: Graph,
    facts: HashMap<ValueId, Fact>,
}

impl Builder {
    fn new(name: &str, inputs: &[(&str, TensorType)]) -> Builder {
        let mut b = Builder {
            g: Graph::new(name),
            facts: HashMap::new(),
        };
        for (n, ty) in inputs {
            let id = b.g.add_input(*n, ty.clone()).unwrap();
            b.facts.insert(id, Fact::new(ty.clone()));
        }
        b
    }

    fn input(&self, name: &str) -> ValueId {
        self.g.find(name).unwrap()
    }

    fn weight(&mut self, m: &Module, name: &str) -> ValueId {
        let ty = m.weights.get(name).unwrap().ty.clone();
        let id = self.g.weight(name, ty.clone());
        self.facts.insert(id, Fact::new(ty));
        id
    }

    fn node(&mut self, op: impl Into<Op>, inputs: &[ValueId], names: &[&str]) -> Vec<ValueId> {
        let op = op.into();
        let facts: Vec<&Fact> = inputs.iter().map(|v| &self.facts[v]).collect();
        let out = op.infer(&facts).unwrap();
        let results = names
            .iter()
            .zip(&out)
            .map(|(n, f)| (n.to_string(), f.ty.clone()))
            .collect();
        let ids = self.g.add_node(op, inputs.to_vec(), results).unwrap();
        for (&id, f) in ids.iter().zip(out) {
            self.facts.insert(id, f);
        }
        ids
    }

    fn build(&mut self, mnemonic: &str, attrs: Vec<(&str, Attr)>, ty: TensorType) -> Op {
        let attrs = Attrs::from_pairs(attrs.into_iter().map(|(k, v)| (k.to_string(), v)));
        Op::build(mnemonic, attrs, &[ty]).unwrap()
    }
}

fn seq() -> Dim {
    Dim::sym("seq")
}

fn prefill(m: &Module) -> Graph {
    let ids = TensorType::new(DType::I64, vec![Dim::fixed(1), seq()]);
    let past = TensorType::new(DType::F32, vec![Dim::fixed(1), Dim::sym("past"), 8.into()]);
    let mut b = Builder::new("prefill", &[("ids", ids), ("past kv", past)]);
    let (ids, past) = (b.input("ids"), b.input("past kv"));
    let embed = b.weight(m, "embed_tokens");
    let head = b.weight(m, "lm_head");
    let x = b.node(Gather { axis: 0 }, &[embed, ids], &["x0"])[0];
    b.node(
        ShapeOf {
            start: -2,
            end: None,
        },
        &[x],
        &["s"],
    );
    let target = Attr::List(vec![
        Attr::Int(1),
        Attr::Dim(seq()),
        Attr::Int(2),
        Attr::Int(-1),
    ]);
    let c = b.build(
        "constant",
        vec![("value", target)],
        TensorType::fixed(DType::I64, &[4]),
    );
    let c = b.node(c, &[], &["target"])[0];
    b.node(Reshape { allow_zero: true }, &[x, c], &["heads"]);
    let kv = b.node(Concat { axis: 1 }, &[past, x], &["kv"])[0];
    let sizes = Attr::dims(&[Dim::sym("past"), seq()]);
    let split = b.build(
        "split",
        vec![("axis", Attr::Int(-2)), ("sizes", sizes)],
        TensorType::scalar(DType::F32),
    );
    let halves = b.node(split, &[kv], &["old", "new"]);
    let logits = b.node(MatMul, &[halves[1], head], &["logits"])[0];
    let half = b.node(Cast { to: DType::F16 }, &[logits], &["logits.f16"])[0];
    b.node(Unary::new(UnaryKind::Exp), &[half], &["a/b:0"]);
    let floats = Attr::floats(&[1e-6, -0.5, f64::INFINITY, f64::NAN]);
    let f = b.build(
        "constant",
        vec![("value", floats)],
        TensorType::fixed(DType::F32, &[4]),
    );
    b.node(f, &[], &["eps"]);
    let mask = Attr::List(vec![Attr::Bool(true), Attr::Bool(false)]);
    let mask = b.build(
        "constant",
        vec![("value", mask)],
        TensorType::fixed(DType::Bool, &[2]),
    );
    b.node(mask, &[], &["mask"]);
    b.g.outputs = vec![logits, halves[0]];
    b.g
}

fn decode(m: &Module) -> Graph {
    let ids = TensorType::fixed(DType::I64, &[1, 1]);
    let mut b = Builder::new("decode", &[("ids", ids)]);
    let ids = b.input("ids");
    let embed = b.weight(m, "embed_tokens");
    let x = b.node(Gather { axis: 0 }, &[embed, ids], &["x0"])[0];
    b.g.outputs = vec![x, embed];
    b.g
}

fn tiny() -> Module {
    let mut m = Module::new("tiny");
    m.weights.file = Some("tiny.safetensors".to_string());
    m.weights
        .declare("embed_tokens", TensorType::fixed(DType::F32, &[100, 8]));
    m.weights
        .declare("lm_head", TensorType::fixed(DType::F32, &[8, 100]));
    m.weights
        .declare("layers.0/unused norm", TensorType::fixed(DType::F32, &[8]));
    let graphs = vec![prefill(&m), decode(&m)];
    m.graphs = graphs;
    m
}

#[test]
fn prints_a_small_module() {
    let m = tiny();
    verify_module(&m).unwrap();
    let text = print_module(&m);
    insta::assert_snapshot!(text);
    let parsed = parse_module(&text).unwrap();
    verify_module(&parsed).unwrap();
    assert_eq!(print_module(&parsed), text);
}
