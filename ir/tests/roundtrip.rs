//! Property tests of the textual IR: random valid modules print, parse back
//! and print identically; the parser never panics on arbitrary, truncated or
//! mutated input.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::sample::{select, Index};
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::cast::Cast;
use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::gather::Gather;
use slmcc_ir::ops::identity::Identity;
use slmcc_ir::ops::matmul::MatMul;
use slmcc_ir::ops::reshape::Reshape;
use slmcc_ir::ops::shape_of::ShapeOf;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::ops::unsqueeze::Unsqueeze;
use slmcc_ir::text::{parse_module, print_module};
use slmcc_ir::{
    verify_module, Attr, Attrs, DType, Dim, Fact, Graph, Module, Op, OpDef, TensorType, ValueId,
};

// ---------------------------------------------------------------------------
// Names, dtypes and dims.

/// Names that print plain.
const PLAIN: &[&str] = &[
    "x",
    "h",
    "0",
    "12",
    "a.b",
    "$tmp",
    "a-b",
    "_",
    "-",
    "x.1$-",
    "embed_tokens",
];

/// Names that must be quoted.
const WEIRD: &[&str] = &[
    "a/b:0",
    "with space",
    "quo\"te",
    "back\\slash",
    "new\nline",
    "tab\t",
    "ünï",
    "",
    "日本",
    "%",
    "@x",
    ";not a comment",
    "e\u{301}",
    "nul\0",
    "{}",
];

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(PLAIN).prop_map(String::from),
        2 => select(WEIRD).prop_map(String::from),
        1 => "[A-Za-z0-9_.$-]{1,6}",
        1 => "(?s).{0,5}",
    ]
}

fn float_dtype() -> impl Strategy<Value = DType> {
    select(vec![DType::F32, DType::F32, DType::F16, DType::BF16])
}

fn any_dtype() -> impl Strategy<Value = DType> {
    select(DType::ALL.to_vec())
}

fn input_dtype() -> impl Strategy<Value = DType> {
    prop_oneof![4 => float_dtype(), 1 => any_dtype()]
}

fn s(n: &str) -> Dim {
    Dim::sym(n)
}

/// Static and symbolic dims for input shapes.
fn input_dim() -> impl Strategy<Value = Dim> {
    select(vec![
        Dim::fixed(1),
        Dim::fixed(2),
        Dim::fixed(3),
        Dim::fixed(4),
        s("seq"),
        s("past"),
        &s("seq") + &s("past"),
        &Dim::fixed(2) * &s("seq"),
    ])
}

/// Symbolic values for integer constants.
fn sym_value(i: usize) -> Dim {
    match i % 4 {
        0 => s("seq"),
        1 => &s("seq") + &s("past"),
        2 => &Dim::fixed(2) * &s("seq"),
        _ => &s("seq") - &Dim::fixed(1),
    }
}

// ---------------------------------------------------------------------------
// Recipes: plain data the strategies generate, turned into modules below.

/// One constant element: which field is used depends on the dtype.
#[derive(Clone, Debug)]
struct Elem {
    int: i64,
    float: f64,
    boolean: bool,
    sym: Option<usize>,
}

#[derive(Clone, Debug)]
enum Step {
    Unary(Index, Index),
    Binary(Index, Index, Index),
    Shape(Index, i64, Option<i64>),
    Cast(Index, DType),
    Identity(Index),
    Constant(DType, Vec<usize>, Vec<Elem>),
    Unsqueeze(Index, Vec<Index>),
    Concat(Index, Vec<Index>, Index),
    Reshape(Index, bool),
    MatMul(Index, usize),
    Gather(Index, Index, Index),
    Split(Index, Index),
}

#[derive(Clone, Debug)]
struct GraphSpec {
    name: String,
    inputs: Vec<(String, DType, Vec<Dim>)>,
    steps: Vec<(String, Step)>,
    outputs: Vec<Index>,
}

#[derive(Clone, Debug)]
struct ModuleSpec {
    name: String,
    file: Option<String>,
    weights: Vec<(String, DType, Vec<i64>)>,
    graphs: Vec<GraphSpec>,
}

fn elem() -> impl Strategy<Value = Elem> {
    (
        -100i64..100,
        any::<f64>(),
        any::<bool>(),
        prop::option::weighted(0.3, 0usize..4),
    )
        .prop_map(|(int, float, boolean, sym)| Elem {
            int,
            float,
            boolean,
            sym,
        })
}

fn step() -> impl Strategy<Value = Step> {
    let ix = any::<Index>;
    prop_oneof![
        3 => (ix(), ix()).prop_map(|(k, a)| Step::Unary(k, a)),
        3 => (ix(), ix(), ix()).prop_map(|(k, a, b)| Step::Binary(k, a, b)),
        2 => (ix(), -3i64..3, prop::option::of(-3i64..4))
            .prop_map(|(a, st, en)| Step::Shape(a, st, en)),
        2 => (ix(), any_dtype()).prop_map(|(a, d)| Step::Cast(a, d)),
        1 => ix().prop_map(Step::Identity),
        3 => (
            any_dtype(),
            prop::collection::vec(0usize..4, 0..3),
            prop::collection::vec(elem(), 1..6),
        )
            .prop_map(|(d, shape, el)| Step::Constant(d, shape, el)),
        2 => (ix(), prop::collection::vec(ix(), 1..3)).prop_map(|(a, ax)| Step::Unsqueeze(a, ax)),
        2 => (ix(), prop::collection::vec(ix(), 1..3), ix())
            .prop_map(|(a, more, axis)| Step::Concat(a, more, axis)),
        1 => (ix(), any::<bool>()).prop_map(|(a, z)| Step::Reshape(a, z)),
        2 => (ix(), 1usize..4).prop_map(|(a, n)| Step::MatMul(a, n)),
        2 => (ix(), ix(), ix()).prop_map(|(w, i, axis)| Step::Gather(w, i, axis)),
        2 => (ix(), ix()).prop_map(|(a, axis)| Step::Split(a, axis)),
    ]
}

fn graph_spec() -> impl Strategy<Value = GraphSpec> {
    (
        name(),
        prop::collection::vec(
            (
                name(),
                input_dtype(),
                prop::collection::vec(input_dim(), 0..4),
            ),
            1..4,
        ),
        prop::collection::vec((name(), step()), 0..14),
        prop::collection::vec(any::<Index>(), 1..4),
    )
        .prop_map(|(name, inputs, steps, outputs)| GraphSpec {
            name,
            inputs,
            steps,
            outputs,
        })
}

fn module_spec() -> impl Strategy<Value = ModuleSpec> {
    (
        name(),
        prop::option::of(name()),
        prop::collection::vec(
            (name(), float_dtype(), prop::collection::vec(1i64..9, 1..3)),
            0..4,
        ),
        prop::collection::vec(graph_spec(), 1..3),
    )
        .prop_map(|(name, file, weights, graphs)| ModuleSpec {
            name,
            file,
            weights,
            graphs,
        })
}

// ---------------------------------------------------------------------------
// Building a module from a recipe, inferring every result type.

struct Builder<'a> {
    g: Graph,
    facts: HashMap<ValueId, Fact>,
    weights: &'a [(String, TensorType)],
}

impl Builder<'_> {
    fn fact(&self, v: ValueId) -> &Fact {
        &self.facts[&v]
    }

    /// All values defined so far, in definition order.
    fn defined(&self) -> Vec<ValueId> {
        let mut v: Vec<ValueId> = self.facts.keys().copied().collect();
        v.sort();
        v
    }

    fn pick(&self, ix: &Index, pred: impl Fn(&Fact) -> bool) -> Option<ValueId> {
        let c: Vec<ValueId> = self
            .defined()
            .into_iter()
            .filter(|&v| pred(self.fact(v)))
            .collect();
        (!c.is_empty()).then(|| c[ix.index(c.len())])
    }

    /// Adds a node if its op infers on `inputs`; returns its first result.
    fn add(&mut self, op: impl Into<Op>, inputs: Vec<ValueId>, hint: &str) -> Option<ValueId> {
        let op = op.into();
        let facts: Vec<&Fact> = inputs.iter().map(|&v| self.fact(v)).collect();
        let out = op.infer(&facts).ok()?;
        let mut results: Vec<(String, TensorType)> = Vec::new();
        for f in &out {
            let mut n = self.g.fresh_name(hint);
            while results.iter().any(|(r, _)| *r == n) {
                n = self.g.fresh_name(&format!("{n}_"));
            }
            results.push((n, f.ty.clone()));
        }
        let ids = self.g.add_node(op, inputs, results).expect("fresh names");
        for (&id, f) in ids.iter().zip(out) {
            self.facts.insert(id, f);
        }
        ids.first().copied()
    }

    fn weight(&mut self, ix: &Index) -> Option<ValueId> {
        let cands: Vec<&(String, TensorType)> =
            self.weights.iter().filter(|(_, t)| t.rank() >= 1).collect();
        let (w, ty) = cands.get(ix.index(cands.len().max(1)))?;
        let id = self.g.weight(w, ty.clone());
        self.facts.insert(id, Fact::new(ty.clone()));
        Some(id)
    }

    fn constant(&mut self, ty: TensorType, value: Attr, hint: &str) -> Option<ValueId> {
        let attrs = Attrs::from_pairs([("value".to_string(), value)]);
        let op = Op::build("constant", attrs, std::slice::from_ref(&ty)).expect("valid constant");
        self.add(op, Vec::new(), hint)
    }

    fn step(&mut self, hint: &str, step: &Step) -> Option<ValueId> {
        match step {
            Step::Unary(k, a) => {
                let kinds = [
                    UnaryKind::Exp,
                    UnaryKind::Neg,
                    UnaryKind::Sqrt,
                    UnaryKind::Tanh,
                ];
                let a = self.pick(a, |f| f.ty.dtype.is_float())?;
                self.add(Unary::new(kinds[k.index(kinds.len())]), vec![a], hint)
            }
            Step::Binary(k, a, b) => self.binary(hint, k, a, b),
            Step::Shape(a, start, end) => {
                let a = self.pick(a, |_| true)?;
                let op = ShapeOf {
                    start: *start,
                    end: *end,
                };
                self.add(op, vec![a], hint)
            }
            Step::Cast(a, to) => {
                let a = self.pick(a, |_| true)?;
                self.add(Cast { to: *to }, vec![a], hint)
            }
            Step::Identity(a) => {
                let a = self.pick(a, |_| true)?;
                self.add(Identity, vec![a], hint)
            }
            Step::Constant(dtype, shape, elems) => self.random_constant(hint, *dtype, shape, elems),
            Step::Unsqueeze(a, axes) => self.unsqueeze(hint, a, axes),
            Step::Concat(a, more, axis) => self.concat(hint, a, more, axis),
            Step::Reshape(a, allow_zero) => self.flatten(hint, a, *allow_zero),
            Step::MatMul(a, n) => self.matmul(hint, a, *n),
            Step::Gather(w, i, axis) => {
                let i = self.pick(i, |f| matches!(f.ty.dtype, DType::I64 | DType::I32))?;
                let w = self.weight(w)?;
                let r = self.g.ty(w).rank();
                let axis = axis.index(2 * r) as i64 - r as i64;
                self.add(Gather { axis }, vec![w, i], hint)
            }
            Step::Split(a, axis) => self.split(hint, a, axis),
        }
    }

    /// `split` into two pieces (halves when the dim is even), a multi-result node.
    fn split(&mut self, hint: &str, a: &Index, axis: &Index) -> Option<ValueId> {
        let a = self.pick(a, |f| f.ty.rank() >= 1)?;
        let dims = self.g.ty(a).shape.dims().to_vec();
        let axis = axis.index(dims.len());
        let d = &dims[axis];
        let sizes = match d.div_exact(&Dim::fixed(2)) {
            Some(h) => vec![h.clone(), h],
            None => vec![d - &Dim::fixed(1), Dim::fixed(1)],
        };
        let attrs = Attrs::from_pairs([
            ("axis".to_string(), Attr::Int(axis as i64)),
            ("sizes".to_string(), Attr::dims(&sizes)),
        ]);
        let op = Op::build("split", attrs, &[]).ok()?;
        self.add(op, vec![a], hint)
    }

    fn binary(&mut self, hint: &str, k: &Index, a: &Index, b: &Index) -> Option<ValueId> {
        let a = self.pick(a, |f| f.ty.dtype.is_float() || f.ty.dtype.is_int())?;
        let ty = self.fact(a).ty.clone();
        let b = self.pick(b, |f| f.ty == ty)?;
        // `mul` only on floats: symbolic integer products grow without bound.
        let kinds: &[BinaryKind] = if ty.dtype.is_float() {
            &[BinaryKind::Add, BinaryKind::Sub, BinaryKind::Mul]
        } else {
            &[BinaryKind::Add, BinaryKind::Sub]
        };
        let kind = kinds[k.index(kinds.len())];
        self.add(Binary::new(kind), vec![a, b], hint)
    }

    fn random_constant(
        &mut self,
        hint: &str,
        dtype: DType,
        shape: &[usize],
        elems: &[Elem],
    ) -> Option<ValueId> {
        let n: usize = shape.iter().product();
        let item = |e: &Elem| match dtype {
            DType::Bool => Attr::Bool(e.boolean),
            d if d.is_float() => Attr::Float(e.float),
            _ => match e.sym {
                Some(i) => Attr::Dim(sym_value(i)),
                None => Attr::Int(e.int),
            },
        };
        let items: Vec<Attr> = (0..n).map(|i| item(&elems[i % elems.len()])).collect();
        let value = if shape.is_empty() {
            item(&elems[0])
        } else {
            Attr::List(items)
        };
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        self.constant(TensorType::fixed(dtype, &dims), value, hint)
    }

    fn unsqueeze(&mut self, hint: &str, a: &Index, axes: &[Index]) -> Option<ValueId> {
        let a = self.pick(a, |_| true)?;
        let rank = self.g.ty(a).rank() + axes.len();
        let mut free: Vec<i64> = (0..rank as i64).collect();
        let mut chosen = Vec::new();
        for (i, ix) in axes.iter().enumerate() {
            let p = free.remove(ix.index(free.len()));
            chosen.push(if i % 2 == 1 { p - rank as i64 } else { p });
        }
        self.add(Unsqueeze { axes: chosen }, vec![a], hint)
    }

    fn concat(&mut self, hint: &str, a: &Index, more: &[Index], axis: &Index) -> Option<ValueId> {
        let a = self.pick(a, |f| f.ty.rank() >= 1)?;
        let ty = self.fact(a).ty.clone();
        let mut inputs = vec![a];
        for ix in more {
            inputs.push(self.pick(ix, |f| f.ty == ty)?);
        }
        let r = ty.rank();
        let axis = axis.index(2 * r) as i64 - r as i64;
        self.add(Concat { axis }, inputs, hint)
    }

    /// `reshape %a, [-1]` through a constant target.
    fn flatten(&mut self, hint: &str, a: &Index, allow_zero: bool) -> Option<ValueId> {
        let a = self.pick(a, |_| true)?;
        let target = TensorType::fixed(DType::I64, &[1]);
        let t = self.constant(target, Attr::ints(&[-1]), "shape")?;
        self.add(Reshape { allow_zero }, vec![a, t], hint)
    }

    /// `matmul` with a fitting operand: an existing value if one fits,
    /// otherwise a fresh constant `[k, n]`.
    fn matmul(&mut self, hint: &str, a: &Index, n: usize) -> Option<ValueId> {
        let a = self.pick(a, |f| f.ty.dtype.is_float() && f.ty.rank() >= 1)?;
        let fa = self.fact(a).clone();
        let fits = self.defined().into_iter().find(|&b| {
            let fb = self.fact(b);
            MatMul.infer(&[&fa, fb]).is_ok()
        });
        let b = match fits {
            Some(b) => b,
            None => {
                let k = fa.ty.shape.dims().last()?.as_fixed()?;
                let ty = TensorType::fixed(fa.ty.dtype, &[k, n as i64]);
                self.constant(ty, Attr::Float(0.5), "w")?
            }
        };
        self.add(MatMul, vec![a, b], hint)
    }
}

fn build_graph(spec: &GraphSpec, weights: &[(String, TensorType)]) -> Graph {
    let mut b = Builder {
        g: Graph::new(spec.name.clone()),
        facts: HashMap::new(),
        weights,
    };
    for (n, dtype, dims) in &spec.inputs {
        let name = b.g.fresh_name(n);
        let ty = TensorType::new(*dtype, dims.clone());
        let id = b.g.add_input(name, ty.clone()).expect("fresh name");
        b.facts.insert(id, Fact::new(ty));
    }
    for (hint, step) in &spec.steps {
        b.step(hint, step);
    }
    let defined = b.defined();
    b.g.outputs = spec
        .outputs
        .iter()
        .map(|ix| defined[ix.index(defined.len())])
        .collect();
    b.g
}

fn build_module(spec: &ModuleSpec) -> Module {
    let mut m = Module::new(spec.name.clone());
    m.weights.file = spec.file.clone();
    for (n, dtype, dims) in &spec.weights {
        m.weights
            .declare(n.clone(), TensorType::fixed(*dtype, dims));
    }
    let weights: Vec<(String, TensorType)> = m
        .weights
        .iter()
        .map(|(n, w)| (n.to_string(), w.ty.clone()))
        .collect();
    for gs in &spec.graphs {
        let mut g = build_graph(gs, &weights);
        if m.graph(&g.name).is_some() {
            g.name = format!("{}{}", g.name, m.graphs.len());
        }
        m.graphs.push(g);
    }
    m
}

fn valid_module() -> impl Strategy<Value = Module> {
    module_spec().prop_map(|s| build_module(&s))
}

// ---------------------------------------------------------------------------
// Properties.

/// Grammar fragments for token soup.
const VOCAB: &[&str] = &[
    "module", "graph", "weight", "weights", "return", "@m", "@w", "%x", "%y", "%\"q\"", "(", ")",
    "[", "]", "{", "}", ",", ":", "=", "->", "-", "+", "*", "?", "f32", "i64", "bool", "seq", "1",
    "0", "1.5", "-inf", "nan", "true", "\"s\"", "add", "constant", "shape", "value", "axis",
    "; c\n", "\n",
];

fn mutate(text: &str, edits: &[(Index, Index, u8)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for (at, what, kind) in edits {
        let pos = at.index(chars.len() + 1);
        match kind % 3 {
            0 if pos < chars.len() => {
                let end = (pos + 1 + what.index(8)).min(chars.len());
                chars.drain(pos..end);
            }
            1 => {
                let ins = VOCAB[what.index(VOCAB.len())];
                chars.splice(pos..pos, ins.chars());
            }
            _ if pos < chars.len() => {
                chars[pos] = ['"', '\\', '%', '@', '}', '[', '-', '9', 'x', ' '][what.index(10)];
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn print_parse_print_is_identity(m in valid_module()) {
        if let Err(e) = verify_module(&m) {
            panic!("generator built an invalid module: {e}\n{}", print_module(&m));
        }
        let text = print_module(&m);
        let parsed = match parse_module(&text) {
            Ok(p) => p,
            Err(e) => panic!("{e}\n{text}"),
        };
        prop_assert!(verify_module(&parsed).is_ok());
        prop_assert_eq!(print_module(&parsed), text);
    }

    #[test]
    fn truncations_fail_cleanly(m in valid_module(), cut in any::<Index>()) {
        let text = print_module(&m);
        let end = text.rfind('}').expect("closing brace");
        let cut = cut.index(end + 1);
        prop_assume!(text.is_char_boundary(cut));
        prop_assert!(parse_module(&text[..cut]).is_err());
    }

    #[test]
    fn mutations_never_panic(
        m in valid_module(),
        edits in prop::collection::vec((any::<Index>(), any::<Index>(), any::<u8>()), 1..4),
    ) {
        let text = mutate(&print_module(&m), &edits);
        if let Ok(parsed) = parse_module(&text) {
            let again = print_module(&parsed);
            let reparsed = parse_module(&again);
            prop_assert!(reparsed.is_ok(), "{:?}\n{}", reparsed.err(), again);
            prop_assert_eq!(print_module(&reparsed.unwrap()), again);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_never_panic(src in any::<String>()) {
        let _ = parse_module(&src);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_module(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn token_soup_never_panics(words in prop::collection::vec(select(VOCAB), 0..60)) {
        let src = words.join(" ");
        let _ = parse_module(&src);
        let _ = parse_module(&format!("module @m {{ graph @g(%x: f32[2]) -> () {{ {src}"));
    }
}

/// Attribute names the ops read.
const ATTR_NAMES: &[&str] = &[
    "allow_zero",
    "axes",
    "axis",
    "end",
    "eps",
    "exclusive",
    "keep_dims",
    "perm",
    "reverse",
    "sizes",
    "start",
    "to",
    "upper",
    "value",
];

fn attr_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        (-3i64..5).prop_map(|v| v.to_string()),
        select(vec![
            "1.5", "-0.0", "1e-6", "inf", "-inf", "nan", "true", "false", "f32", "i64", "bool",
            "seq", "2*seq", "past+seq", "seq-1", "?", "\"s\"", "[]",
        ])
        .prop_map(String::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(|v| format!("[{}]", v.join(", ")))
    })
}

fn type_text() -> impl Strategy<Value = String> {
    let dim = select(vec!["0", "1", "3", "seq", "?", "-1", "1000000000000"]);
    (any_dtype(), prop::collection::vec(dim, 0..4))
        .prop_map(|(d, dims)| format!("{d}[{}]", dims.join(", ")))
}

/// A random node line: any op, random attributes, operands and result types.
fn node_text() -> impl Strategy<Value = String> {
    (
        select(Op::mnemonics()),
        prop::collection::vec(select(vec!["%x", "%i", "@w"]), 0..3),
        prop::collection::vec((select(ATTR_NAMES), attr_text()), 0..3),
        prop::collection::vec(type_text(), 1..3),
    )
        .prop_map(|(op, operands, attrs, types)| {
            let results: Vec<String> = (0..types.len()).map(|i| format!("%r{i}")).collect();
            let attrs: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!(
                "{} = {op} {} {{{}}} : {}",
                results.join(", "),
                operands.join(", "),
                attrs.join(", "),
                types.join(", ")
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn random_nodes_never_panic(node in node_text()) {
        let src = format!(
            "module @m {{\n  weight @w : f32[4, 2]\n  graph @g(%x: f32[2, seq], %i: i64[3]) -> () {{\n    {node}\n    return\n  }}\n}}\n"
        );
        if let Ok(m) = parse_module(&src) {
            let text = print_module(&m);
            let again = parse_module(&text);
            prop_assert!(again.is_ok(), "{:?}\n{}", again.err(), text);
            prop_assert_eq!(print_module(&again.unwrap()), text);
        }
    }
}
