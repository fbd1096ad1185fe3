//! The e-graph language: one node kind per IR op mnemonic, the fused ops
//! included, plus the leaves that carry attributes, constants, graph inputs
//! and weights.
//!
//! An op node's children are its attributes first, in the fixed order of
//! [`schema`] (every attribute present, defaults filled in, `none` for an
//! absent optional one), then its operands: `softmax {axis = -1} %x` is
//! `(softmax -1 %x)`, `reduce_mean {axes = [-1]} %x` is
//! `(reduce_mean (list -1) true %x)`. Equal ops therefore give equal nodes,
//! and [`encode`]/[`decode`] convert both ways without loss. A `constant`
//! holds its typed value in one [`ConstValue`] leaf: `(constant f32[]=2.0)`.
//! Multi-result ops (`split`, `add_rms_norm`, `add_layer_norm`) stand for
//! the tuple of their results; `(get k t)` is result `k`.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use egg::{define_language, FromOp, Id, Language, Symbol};
use slmcc_ir::ops::constant::Constant;
use slmcc_ir::ops::constant_of_shape::ConstantOfShape;
use slmcc_ir::text::parse_module;
use slmcc_ir::{Attr, Attrs, DType, Dim, Known, Op, OpDef};

define_language! {
    /// A node of the tensor e-graph (see the module doc for the encoding).
    pub enum Lang {
        "get" = Get([Id; 2]),
        "list" = List(Box<[Id]>),
        "none" = Absent,

        "constant" = Constant(Box<[Id]>),
        "add" = Add(Box<[Id]>),
        "sub" = Sub(Box<[Id]>),
        "mul" = Mul(Box<[Id]>),
        "div" = Div(Box<[Id]>),
        "pow" = Pow(Box<[Id]>),
        "max" = Max(Box<[Id]>),
        "min" = Min(Box<[Id]>),
        "mod" = Mod(Box<[Id]>),
        "equal" = Equal(Box<[Id]>),
        "less" = Less(Box<[Id]>),
        "less_or_equal" = LessOrEqual(Box<[Id]>),
        "greater" = Greater(Box<[Id]>),
        "greater_or_equal" = GreaterOrEqual(Box<[Id]>),
        "and" = And(Box<[Id]>),
        "or" = Or(Box<[Id]>),
        "xor" = Xor(Box<[Id]>),
        "neg" = Neg(Box<[Id]>),
        "abs" = Abs(Box<[Id]>),
        "sqrt" = Sqrt(Box<[Id]>),
        "reciprocal" = Reciprocal(Box<[Id]>),
        "exp" = Exp(Box<[Id]>),
        "log" = Log(Box<[Id]>),
        "erf" = Erf(Box<[Id]>),
        "tanh" = Tanh(Box<[Id]>),
        "sigmoid" = Sigmoid(Box<[Id]>),
        "cos" = Cos(Box<[Id]>),
        "sin" = Sin(Box<[Id]>),
        "relu" = Relu(Box<[Id]>),
        "floor" = Floor(Box<[Id]>),
        "ceil" = Ceil(Box<[Id]>),
        "sign" = Sign(Box<[Id]>),
        "not" = Not(Box<[Id]>),
        "is_nan" = IsNan(Box<[Id]>),
        "is_inf" = IsInf(Box<[Id]>),
        "cast" = Cast(Box<[Id]>),
        "identity" = Identity(Box<[Id]>),
        "matmul" = MatMul(Box<[Id]>),
        "qmatmul" = QMatMul(Box<[Id]>),
        "qswiglu" = QSwiGlu(Box<[Id]>),
        "reshape" = Reshape(Box<[Id]>),
        "shape" = ShapeOf(Box<[Id]>),
        "concat" = Concat(Box<[Id]>),
        "gather" = Gather(Box<[Id]>),
        "unsqueeze" = Unsqueeze(Box<[Id]>),
        "where" = Where(Box<[Id]>),
        "softmax" = Softmax(Box<[Id]>),
        "layer_norm" = LayerNorm(Box<[Id]>),
        "reduce_sum" = ReduceSum(Box<[Id]>),
        "reduce_mean" = ReduceMean(Box<[Id]>),
        "reduce_max" = ReduceMax(Box<[Id]>),
        "reduce_min" = ReduceMin(Box<[Id]>),
        "reduce_prod" = ReduceProd(Box<[Id]>),
        "transpose" = Transpose(Box<[Id]>),
        "squeeze" = Squeeze(Box<[Id]>),
        "split" = Split(Box<[Id]>),
        "slice" = Slice(Box<[Id]>),
        "expand" = Expand(Box<[Id]>),
        "size" = Size(Box<[Id]>),
        "constant_of_shape" = ConstantOfShape(Box<[Id]>),
        "range" = Range(Box<[Id]>),
        "cum_sum" = CumSum(Box<[Id]>),
        "trilu" = Trilu(Box<[Id]>),
        "gather_nd" = GatherNd(Box<[Id]>),
        "gather_elements" = GatherElements(Box<[Id]>),
        "rms_norm" = RmsNorm(Box<[Id]>),
        "add_rms_norm" = AddRmsNorm(Box<[Id]>),
        "add_layer_norm" = AddLayerNorm(Box<[Id]>),
        "gelu" = Gelu(Box<[Id]>),
        "softcap" = Softcap(Box<[Id]>),
        "swiglu" = SwiGlu(Box<[Id]>),
        "geglu" = GeGlu(Box<[Id]>),
        "attention" = Attention(Box<[Id]>),
        "rope" = Rope(Box<[Id]>),

        Input(InputName),
        Weight(WeightName),
        Tensor(ConstValue),
        Attr(AttrValue),
    }
}

impl Lang {
    /// Whether the node is an IR op (not `get`, a list or a leaf).
    pub fn is_op(&self) -> bool {
        !matches!(
            self,
            Lang::Get(_)
                | Lang::List(_)
                | Lang::Absent
                | Lang::Input(_)
                | Lang::Weight(_)
                | Lang::Tensor(_)
                | Lang::Attr(_)
        )
    }

    /// An integer attribute leaf.
    pub fn int(v: i64) -> Lang {
        Lang::Attr(AttrValue(Attr::Int(v)))
    }
}

/// The ops whose node stands for a tuple of results, read with `get`.
pub fn is_multi_result(mnemonic: &str) -> bool {
    matches!(mnemonic, "split" | "add_rms_norm" | "add_layer_norm")
}

/// An attribute's value when the op leaves it out of [`OpDef::attrs`].
#[derive(Clone, Copy, Debug)]
enum Omitted {
    /// Always printed.
    Required,
    /// Optional with no value (`none`).
    Absent,
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(&'static str),
}

impl Omitted {
    fn value(self) -> Option<Attr> {
        match self {
            Omitted::Required | Omitted::Absent => None,
            Omitted::Int(v) => Some(Attr::Int(v)),
            Omitted::Float(v) => Some(Attr::Float(v)),
            Omitted::Bool(v) => Some(Attr::Bool(v)),
            Omitted::Str(v) => Some(Attr::Str(v.to_string())),
        }
    }
}

type Schema = &'static [(&'static str, Omitted)];

/// The attributes of each op in node-child order, with the value an op that
/// leaves one out means. `constant` and `constant_of_shape` carry their value
/// as one [`ConstValue`] leaf instead.
fn schema(mnemonic: &str) -> Schema {
    use Omitted::*;
    match mnemonic {
        "cast" => &[("to", Required)],
        "reshape" => &[("allow_zero", Bool(false))],
        "shape" => &[("start", Int(0)), ("end", Absent)],
        "concat" => &[("axis", Required)],
        "gather" | "gather_elements" => &[("axis", Int(0))],
        "unsqueeze" | "squeeze" => &[("axes", Required)],
        "softmax" => &[("axis", Int(-1))],
        "layer_norm" => &[("axis", Int(-1)), ("eps", Float(1e-5))],
        "reduce_sum" | "reduce_mean" | "reduce_max" | "reduce_min" | "reduce_prod" => {
            &[("axes", Absent), ("keep_dims", Bool(true))]
        }
        "transpose" => &[("perm", Required)],
        "split" => &[("axis", Int(0)), ("sizes", Required)],
        "cum_sum" => &[
            ("axis", Required),
            ("exclusive", Bool(false)),
            ("reverse", Bool(false)),
        ],
        "trilu" => &[("upper", Bool(true))],
        "gather_nd" => &[("batch_dims", Int(0))],
        "rms_norm" | "add_rms_norm" => &[("eps", Float(1e-6)), ("offset", Float(0.0))],
        "add_layer_norm" => &[("eps", Float(1e-5))],
        "gelu" | "geglu" => &[("approximate", Str("none"))],
        "softcap" => &[("cap", Required)],
        "attention" => &[
            ("kv_heads", Required),
            ("scale", Required),
            ("causal", Bool(false)),
            ("window", Int(0)),
            ("softcap", Float(0.0)),
        ],
        "rope" => &[("rotary_dim", Required), ("interleaved", Bool(false))],
        "qmatmul" | "qswiglu" => &[
            ("bits", Required),
            ("group", Required),
            ("layout", Absent),
            ("activations", Absent),
        ],
        "constant" | "constant_of_shape" => &[("value", Required)],
        _ => &[],
    }
}

/// What an attribute child of an op node holds.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrData {
    /// `none`: an optional attribute left out.
    Absent,
    Attr(Attr),
    /// The typed value of a `constant` (or the fill of `constant_of_shape`).
    Const(Arc<Constant>),
}

/// What an attribute node (`none`, a scalar, a `list` or a constant's
/// value) holds, given what its children hold; `None` for other nodes.
pub fn attr_data(node: &Lang, child: impl Fn(Id) -> Option<AttrData>) -> Option<AttrData> {
    match node {
        Lang::Absent => Some(AttrData::Absent),
        Lang::Attr(a) => Some(AttrData::Attr(a.0.clone())),
        Lang::Tensor(c) => Some(AttrData::Const(c.constant().clone())),
        Lang::List(ids) => {
            let items = ids.iter().map(|&c| match child(c)? {
                AttrData::Attr(a) => Some(a),
                _ => None,
            });
            Some(AttrData::Attr(Attr::List(items.collect::<Option<_>>()?)))
        }
        _ => None,
    }
}

/// Adds the nodes for `op` applied to `operands` through `add` (an
/// [`egg::EGraph`] or an [`egg::RecExpr`]) and returns the op node, not yet
/// added. Fails if the op has an attribute the schema does not list.
pub fn encode(op: &Op, operands: &[Id], add: &mut impl FnMut(Lang) -> Id) -> Result<Lang, String> {
    let name = op.mnemonic();
    let mut children = Vec::new();
    match op {
        Op::Constant(c) => children.push(add(Lang::Tensor(ConstValue::new(c.clone())))),
        Op::ConstantOfShape(c) => {
            let fill = Constant::from_tensor(c.value.clone());
            children.push(add(Lang::Tensor(ConstValue::new(fill))));
        }
        _ => {
            let mut given = op.attrs();
            for (attr, default) in schema(name) {
                let value = match given.iter().position(|(n, _)| n == attr) {
                    Some(i) => Some(given.remove(i).1),
                    None => default.value(),
                };
                children.push(match value {
                    Some(v) => add_attr(&v, add),
                    None => add(Lang::Absent),
                });
            }
            if let Some((attr, _)) = given.first() {
                return Err(format!(
                    "`{name}` has attribute `{attr}`, which the e-graph language does not know"
                ));
            }
        }
    }
    children.extend_from_slice(operands);
    Lang::from_op(name, children).map_err(|e| e.to_string())
}

fn add_attr(a: &Attr, add: &mut impl FnMut(Lang) -> Id) -> Id {
    match a {
        Attr::List(items) => {
            let ids: Vec<Id> = items.iter().map(|i| add_attr(i, add)).collect();
            add(Lang::List(ids.into()))
        }
        scalar => add(Lang::Attr(AttrValue(scalar.clone()))),
    }
}

/// The IR op an op node stands for and its operand children. `attr` gives
/// what an attribute child holds.
pub fn decode(node: &Lang, attr: impl Fn(Id) -> Option<AttrData>) -> Result<(Op, &[Id]), String> {
    let name = node.to_string();
    let schema = schema(&name);
    let children = node.children();
    if !node.is_op() || children.len() < schema.len() {
        return Err(format!("`{name}` is not an op node"));
    }
    let (attrs, operands) = children.split_at(schema.len());
    let value = |i: usize| attr(attrs[i]).ok_or_else(|| format!("`{name}`: bad attribute"));
    let tensor_value = match name.as_str() {
        "constant" | "constant_of_shape" => Some(value(0)?),
        _ => None,
    };
    let op = match (name.as_str(), tensor_value) {
        ("constant", Some(AttrData::Const(c))) => Op::Constant((*c).clone()),
        ("constant_of_shape", Some(AttrData::Const(c))) => {
            let value = c
                .value
                .as_tensor(c.ty.dtype)
                .ok_or("`constant_of_shape` fill must be concrete")?;
            Op::ConstantOfShape(ConstantOfShape {
                value: (*value).clone(),
            })
        }
        _ => {
            let mut pairs = Vec::new();
            for (i, (n, _)) in schema.iter().enumerate() {
                match value(i)? {
                    AttrData::Absent => {}
                    AttrData::Attr(a) => pairs.push((n.to_string(), a)),
                    AttrData::Const(_) => return Err(format!("`{name}`: bad attribute `{n}`")),
                }
            }
            Op::build(&name, Attrs::from_pairs(pairs), &[]).map_err(|e| e.to_string())?
        }
    };
    Ok((op, operands))
}

/// Parses a dim expression with the IR's own parser.
fn parse_dim(s: &str) -> Option<Dim> {
    let src =
        format!("module @t {{\n graph @g(%x: f32[{s}]) -> (f32[{s}]) {{\n return %x\n }}\n}}");
    let m = parse_module(&src).ok()?;
    let g = &m.graphs[0];
    match g.ty(g.inputs[0]).shape.dims() {
        [d] => Some(d.clone()),
        _ => None,
    }
}

/// A graph input leaf, printed `%name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InputName(pub Symbol);

/// A module weight leaf, printed `@name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WeightName(pub Symbol);

macro_rules! name_leaf {
    ($ty:ident, $sigil:literal) => {
        // Ordered by name, not by interning order, so e-class node order
        // does not depend on what else the process interned.
        impl Ord for $ty {
            fn cmp(&self, other: &Self) -> Ordering {
                self.0.as_str().cmp(other.0.as_str())
            }
        }

        impl PartialOrd for $ty {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}", $sigil, self.0)
            }
        }

        impl FromStr for $ty {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s.strip_prefix($sigil) {
                    Some(name) if !name.is_empty() => Ok($ty(Symbol::from(name))),
                    _ => Err(format!("not a {} name: `{s}`", $sigil)),
                }
            }
        }
    };
}

name_leaf!(InputName, '%');
name_leaf!(WeightName, '@');

/// A scalar attribute value (lists are `list` nodes). Equal when they print
/// the same, so floats compare by value bits and dims by their canonical
/// polynomial.
#[derive(Clone, Debug)]
pub struct AttrValue(pub Attr);

impl AttrValue {
    fn key(&self) -> (u8, String) {
        let kind = match &self.0 {
            Attr::Int(_) => 0,
            Attr::Float(_) => 1,
            Attr::Bool(_) => 2,
            Attr::Str(_) => 3,
            Attr::DType(_) => 4,
            Attr::Dim(_) => 5,
            Attr::List(_) => 6,
        };
        (kind, self.0.to_string())
    }
}

impl PartialEq for AttrValue {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for AttrValue {}

impl Hash for AttrValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

impl Ord for AttrValue {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for AttrValue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            // S-expressions drop double quotes; single ones survive.
            Attr::Str(s) => write!(f, "'{s}'"),
            a => fmt::Display::fmt(a, f),
        }
    }
}

impl FromStr for AttrValue {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let looks_float = s.contains(['.', 'e', 'E']) || s.ends_with("inf") || s == "nan";
        let attr = if let Ok(v) = s.parse::<i64>() {
            Attr::Int(v)
        } else if let (true, Ok(v)) = (looks_float, s.parse::<f64>()) {
            Attr::Float(v)
        } else if let Ok(b) = s.parse::<bool>() {
            Attr::Bool(b)
        } else if let Some(q) = s.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
            Attr::Str(q.to_string())
        } else if let Ok(d) = s.parse::<DType>() {
            Attr::DType(d)
        } else if let Some(d) = parse_dim(s).filter(|_| !s.starts_with(['%', '@'])) {
            Attr::dim(&d)
        } else {
            return Err(format!("not an attribute value: `{s}`"));
        };
        Ok(AttrValue(attr))
    }
}

/// The typed value of a `constant`, printed `dtype[shape]=value` with the
/// value as the IR prints it (`f32[]=2.0`, `i64[2]=[1,seq]`); large
/// constants print abbreviated and do not parse back.
#[derive(Clone, Debug)]
pub struct ConstValue(Arc<(u64, String, Arc<Constant>)>);

/// Constants up to this many elements print in full.
const PRINT_ELEMENTS: usize = 16;

impl ConstValue {
    pub fn new(c: Constant) -> ConstValue {
        let value = c.attrs().remove(0).1;
        let key = format!("{}={}", c.ty, value).replace(' ', "");
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        ConstValue(Arc::new((h.finish(), key, Arc::new(c))))
    }

    pub fn constant(&self) -> &Arc<Constant> {
        &self.0 .2
    }
}

impl PartialEq for ConstValue {
    fn eq(&self, other: &Self) -> bool {
        self.0 .0 == other.0 .0 && self.0 .1 == other.0 .1
    }
}

impl Eq for ConstValue {}

impl Hash for ConstValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0 .0.hash(state)
    }
}

impl Ord for ConstValue {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.0 .0, &self.0 .1).cmp(&(other.0 .0, &other.0 .1))
    }
}

impl PartialOrd for ConstValue {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ConstValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.constant();
        let n = match &c.value {
            Known::Tensor(t) => t.len(),
            Known::Dims(s) => s.values.len(),
        };
        if n <= PRINT_ELEMENTS {
            f.write_str(&self.0 .1)
        } else {
            let ty = c.ty.to_string().replace(' ', "");
            write!(f, "{ty}=<{:016x}>", self.0 .0)
        }
    }
}

impl FromStr for ConstValue {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (ty, value) = s
            .split_once("]=")
            .ok_or_else(|| format!("not a constant: `{s}`"))?;
        let ty = ty.replace(',', ", ");
        let value = value.replace(',', ", ");
        let src = format!(
            "module @t {{\n graph @g() -> ({ty}]) {{\n %c = constant {{value = {value}}} : {ty}]\n return %c\n }}\n}}"
        );
        let m = parse_module(&src).map_err(|e| format!("bad constant `{s}`: {e}"))?;
        match &m.graphs[0].nodes[0].op {
            Op::Constant(c) => Ok(ConstValue::new(c.clone())),
            _ => Err(format!("not a constant: `{s}`")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egg::RecExpr;
    use slmcc_ir::ops::attention::Attention;
    use slmcc_ir::ops::gelu::{Gelu, GeluApprox};
    use slmcc_ir::ops::reduce::{Reduce, ReduceKind};
    use slmcc_ir::ops::rms_norm::RmsNorm;
    use slmcc_ir::ops::shape_of::ShapeOf;
    use slmcc_ir::ops::split::Split;
    use slmcc_ir::Tensor;

    fn round_trip(op: Op) {
        let mut expr: RecExpr<Lang> = RecExpr::default();
        let x = expr.add(Lang::Input(InputName(Symbol::from("x"))));
        let node = encode(&op, &[x], &mut |n| expr.add(n)).unwrap();
        let id = expr.add(node);
        let data = |i: Id| expr_attr(&expr, i);
        let (back, operands) = decode(&expr[id], data).unwrap();
        assert_eq!(back, op, "{expr}");
        assert_eq!(operands, &[x]);
        // The printed form parses back to the same expression.
        let text = expr.to_string();
        let parsed: RecExpr<Lang> = text.parse().unwrap();
        assert_eq!(parsed.to_string(), text);
    }

    fn expr_attr(expr: &RecExpr<Lang>, i: Id) -> Option<AttrData> {
        attr_data(&expr[i], |c| expr_attr(expr, c))
    }

    #[test]
    fn every_mnemonic_has_a_node() {
        for m in Op::mnemonics() {
            assert!(Lang::from_op(m, vec![]).is_ok(), "{m}");
        }
    }

    #[test]
    fn ops_round_trip_with_defaults_filled_in() {
        round_trip(Op::Softmax(slmcc_ir::ops::softmax::Softmax { axis: -1 }));
        round_trip(Op::Reduce(Reduce::new(
            ReduceKind::Mean,
            Some(vec![-1]),
            true,
        )));
        round_trip(Op::Reduce(Reduce::new(ReduceKind::Sum, None, false)));
        round_trip(Op::ShapeOf(ShapeOf {
            start: 1,
            end: Some(2),
        }));
        round_trip(Op::ShapeOf(ShapeOf {
            start: 0,
            end: None,
        }));
        round_trip(Op::Split(Split {
            axis: -1,
            sizes: vec![Dim::sym("seq"), Dim::fixed(3)],
        }));
        round_trip(Op::RmsNorm(RmsNorm {
            eps: 1e-5,
            offset: 1.0,
        }));
        round_trip(Op::Gelu(Gelu {
            approximate: GeluApprox::Tanh,
        }));
        round_trip(Op::Gelu(Gelu::default()));
        let mut a = Attention::new(2, 0.125);
        a.causal = true;
        round_trip(Op::Attention(a));
        round_trip(Op::Constant(Constant::from_tensor(Tensor::scalar_f32(2.0))));
        round_trip(Op::ConstantOfShape(ConstantOfShape {
            value: Tensor::scalar_i64(-1),
        }));
    }

    #[test]
    fn leaves_print_and_parse() {
        // S-expressions quote `%`.
        let e: RecExpr<Lang> = "(mul %x (constant f32[]=0.25))".parse().unwrap();
        assert_eq!(e.to_string(), "(mul \"%x\" (constant f32[]=0.25))");
        let e: RecExpr<Lang> = "(reshape false @w (constant i64[2]=[1,seq]))"
            .parse()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "(reshape false @w (constant i64[2]=[1,seq]))"
        );
        let a: AttrValue = "seq+1".parse().unwrap();
        assert_eq!(a.0, Attr::Dim(&Dim::sym("seq") + &Dim::fixed(1)));
        assert_eq!("1e-6".parse::<AttrValue>().unwrap().0, Attr::Float(1e-6));
        assert_eq!("-1".parse::<AttrValue>().unwrap().0, Attr::Int(-1));
        assert_eq!(
            "'tanh'".parse::<AttrValue>().unwrap().0,
            Attr::Str("tanh".into())
        );
    }
}
