//! What an op import function sees: the node's attributes (typed getters;
//! every attribute must be read, so one the importer does not know is
//! rejected), its operands and their facts, and a builder that appends IR
//! nodes with inferred result types (folding small known integer logic into
//! constants).

use onnx_protobuf::attribute_proto::AttributeType;
use onnx_protobuf::{AttributeProto, NodeProto};
use slmcc_ir::ops::constant::Constant;
use slmcc_ir::{DType, Dim, Fact, Known, Op, OpDef, Tensor, TensorType, ValueId};

use super::graph::{is_weight, Importer};
use super::tensor::{decode_tensor, dtype_from_onnx};

/// The result of an import step; the error is the reason, which the import
/// loop prefixes with the file and node.
pub type R<T> = Result<T, String>;

/// Returns early with a formatted reason.
macro_rules! fail {
    ($($arg:tt)*) => { return Err(format!($($arg)*)) };
}
pub(crate) use fail;

/// The context of one ONNX node's import.
pub struct Ctx<'a, 'm> {
    imp: &'a mut Importer<'m>,
    node: &'a NodeProto,
    opset: i64,
    inputs: Vec<Option<ValueId>>,
    read: Vec<&'static str>,
    hint: String,
}

impl<'a, 'm> Ctx<'a, 'm> {
    pub(crate) fn new(
        imp: &'a mut Importer<'m>,
        node: &'a NodeProto,
        opset: i64,
        inputs: Vec<Option<ValueId>>,
    ) -> Ctx<'a, 'm> {
        let hint = node
            .output
            .iter()
            .find(|o| !o.is_empty())
            .cloned()
            .unwrap_or_else(|| node.op_type.to_lowercase());
        Ctx {
            imp,
            node,
            opset,
            inputs,
            read: Vec::new(),
            hint,
        }
    }

    /// The node's name for messages: its first named output.
    pub fn label(&self) -> &str {
        &self.hint
    }

    /// The opset of the node's domain.
    pub fn opset(&self) -> i64 {
        self.opset
    }

    pub fn op_type(&self) -> &str {
        &self.node.op_type
    }

    // ----- operands -------------------------------------------------------

    /// Number of operand slots (omitted optional ones included).
    pub fn input_count(&self) -> usize {
        self.inputs.len()
    }

    /// Operand `i`, which must be present.
    pub fn input(&self, i: usize) -> R<ValueId> {
        match self.inputs.get(i) {
            Some(Some(v)) => Ok(*v),
            _ => fail!("input {i} is required"),
        }
    }

    /// Operand `i`, if given.
    pub fn opt_input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    /// Every operand; none may be omitted (variadic ops).
    pub fn all_inputs(&self) -> R<Vec<ValueId>> {
        (0..self.inputs.len()).map(|i| self.input(i)).collect()
    }

    /// Checks the number of operand slots.
    pub fn expect_inputs(&self, min: usize, max: usize) -> R<()> {
        let n = self.inputs.len();
        if n < min || n > max {
            if min == max {
                fail!("expects {min} input(s), got {n}");
            }
            fail!("expects {min} to {max} inputs, got {n}");
        }
        Ok(())
    }

    pub fn fact(&self, v: ValueId) -> &Fact {
        self.imp.fact(v)
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.imp.fact(v).ty
    }

    /// The value of operand `i` as dims (possibly symbolic), flattened;
    /// `what` names it in the error when the value is not known.
    pub fn known_dims(&self, i: usize, what: &str) -> R<Vec<Dim>> {
        let v = self.input(i)?;
        match self.fact(v).value.as_ref().and_then(Known::as_dims) {
            Some(s) => Ok(s.values),
            None => fail!("{what} must be known at compile time"),
        }
    }

    /// The value of operand `i` as static integers (flattened).
    pub fn known_ints(&self, i: usize, what: &str) -> R<Vec<i64>> {
        let dims = self.known_dims(i, what)?;
        match dims.iter().map(Dim::as_fixed).collect::<Option<Vec<_>>>() {
            Some(v) => Ok(v),
            None => fail!("{what} must be known at compile time (it is symbolic: {dims:?})"),
        }
    }

    /// The concrete value of operand `i`, if known.
    pub fn known_tensor(&self, i: usize) -> Option<std::sync::Arc<Tensor>> {
        let f = self.fact(self.opt_input(i)?);
        f.value.as_ref()?.as_tensor(f.ty.dtype)
    }

    /// Input `i`'s data when it is known at import: a constant's value or
    /// an initializer's (a module weight's) data; `None` for a run-time
    /// value.
    pub fn input_data(&self, i: usize) -> R<Option<std::sync::Arc<Tensor>>> {
        if let Some(t) = self.known_tensor(i) {
            return Ok(Some(t));
        }
        let Some(v) = self.opt_input(i) else {
            return Ok(None);
        };
        match &self.imp.graph.value(v).def {
            slmcc_ir::ValueDef::Weight(name) => self
                .imp
                .module
                .weights
                .tensor(name)
                .map_err(|e| e.to_string()),
            _ => Ok(None),
        }
    }

    /// Marks input `i`, when it is a module weight, as replaced by weights
    /// this import made from its data: it is dropped at the end of the
    /// import unless something else still reads it.
    pub fn supersede(&mut self, i: usize) {
        if let Some(v) = self.opt_input(i) {
            if let slmcc_ir::ValueDef::Weight(name) = &self.imp.graph.value(v).def {
                let name = name.clone();
                self.imp.superseded.push(name);
            }
        }
    }

    /// A new module weight holding `t`, named after the node's first output
    /// and `suffix`.
    pub fn new_weight(&mut self, suffix: &str, t: Tensor) -> ValueId {
        let name = self.imp.fresh_name(&format!("{}.{suffix}", self.hint));
        self.imp.add_weight(&name, t)
    }

    // ----- results --------------------------------------------------------

    /// Number of ONNX outputs the node declares.
    pub fn output_count(&self) -> usize {
        self.node.output.len()
    }

    /// Whether ONNX output `i` is declared with a name (so may be used).
    pub fn output_used(&self, i: usize) -> bool {
        self.node.output.get(i).is_some_and(|o| !o.is_empty())
    }

    /// Fails if any output from `n` on is used (optional outputs the
    /// importer does not produce).
    pub fn only_outputs(&self, n: usize, why: &str) -> R<()> {
        match (n..self.output_count()).find(|&i| self.output_used(i)) {
            Some(i) => fail!(
                "output {i} (`{}`) is not supported{why}",
                self.node.output[i]
            ),
            None => Ok(()),
        }
    }

    // ----- attributes -----------------------------------------------------

    fn attr(&mut self, name: &'static str) -> Option<&'a AttributeProto> {
        self.read.push(name);
        self.node.attribute.iter().find(|a| a.name == name)
    }

    fn kind(a: &AttributeProto) -> AttributeType {
        a.type_.enum_value_or_default()
    }

    fn wrong_kind<T>(a: &AttributeProto, expected: &str) -> R<T> {
        fail!(
            "attribute `{}` must be {expected}, found {:?}",
            a.name,
            Self::kind(a)
        )
    }

    pub fn opt_int(&mut self, name: &'static str) -> R<Option<i64>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == AttributeType::INT => Ok(Some(a.i)),
            Some(a) => Self::wrong_kind(a, "an int"),
        }
    }

    pub fn int(&mut self, name: &'static str, default: i64) -> R<i64> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    pub fn opt_float(&mut self, name: &'static str) -> R<Option<f32>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == AttributeType::FLOAT => Ok(Some(a.f)),
            Some(a) => Self::wrong_kind(a, "a float"),
        }
    }

    pub fn float(&mut self, name: &'static str, default: f32) -> R<f32> {
        Ok(self.opt_float(name)?.unwrap_or(default))
    }

    pub fn opt_ints(&mut self, name: &'static str) -> R<Option<Vec<i64>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == AttributeType::INTS => Ok(Some(a.ints.clone())),
            Some(a) => Self::wrong_kind(a, "a list of ints"),
        }
    }

    pub fn opt_floats(&mut self, name: &'static str) -> R<Option<Vec<f32>>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == AttributeType::FLOATS => Ok(Some(a.floats.clone())),
            Some(a) => Self::wrong_kind(a, "a list of floats"),
        }
    }

    pub fn opt_string(&mut self, name: &'static str) -> R<Option<String>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == AttributeType::STRING => {
                Ok(Some(String::from_utf8_lossy(&a.s).into_owned()))
            }
            Some(a) => Self::wrong_kind(a, "a string"),
        }
    }

    /// A tensor attribute, decoded (external data resolved beside the model).
    pub fn opt_tensor(&mut self, name: &'static str) -> R<Option<Tensor>> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if Self::kind(a) == AttributeType::TENSOR => {
                let Some(t) = a.t.as_ref() else {
                    fail!("attribute `{name}` has no tensor");
                };
                decode_tensor(t, &self.imp.base_dir)
                    .map(Some)
                    .map_err(|e| format!("attribute `{name}`: {e}"))
            }
            Some(a) => Self::wrong_kind(a, "a tensor"),
        }
    }

    /// A dtype attribute (an ONNX `DataType` code, as `Cast.to`).
    pub fn dtype(&mut self, name: &'static str) -> R<DType> {
        match self.opt_int(name)? {
            Some(code) => dtype_from_onnx(code as i32).map_err(|e| format!("`{name}`: {e}")),
            None => fail!("attribute `{name}` is required"),
        }
    }

    /// Whether the node sets attribute `name` at all (marks it read).
    pub fn has_attr(&mut self, name: &'static str) -> bool {
        self.attr(name).is_some()
    }

    /// Reads an int attribute the importer supports only at its default.
    pub fn int_only(&mut self, name: &'static str, default: i64, why: &str) -> R<()> {
        match self.opt_int(name)? {
            Some(v) if v != default => {
                fail!("attribute `{name}` = {v} is not supported{why}")
            }
            _ => Ok(()),
        }
    }

    /// Marks attributes as read that do not affect inference (such as
    /// `Dropout.seed`).
    pub fn ignore_attrs(&mut self, names: &[&'static str]) {
        self.read.extend_from_slice(names);
    }

    /// Fails on any attribute the import function did not read.
    pub(crate) fn finish(&self) -> R<()> {
        match self
            .node
            .attribute
            .iter()
            .find(|a| !self.read.iter().any(|r| *r == a.name))
        {
            Some(a) => fail!("attribute `{}` is not supported", a.name),
            None => Ok(()),
        }
    }

    // ----- building -------------------------------------------------------

    /// Appends a node; its result types (and known values) come from the
    /// op's inference on the operands' facts. A node whose operands are all
    /// small known integer or boolean values is written as the `constant`
    /// it evaluates to instead (`fold_small_value`). Results get fresh
    /// names; the ones returned to the import loop are renamed to the ONNX
    /// outputs.
    pub fn add(&mut self, op: impl Into<Op>, inputs: &[ValueId]) -> R<Vec<ValueId>> {
        let mut op: Op = op.into();
        let facts: Vec<&Fact> = inputs.iter().map(|&v| self.imp.fact(v)).collect();
        let mut out = op
            .infer(&facts)
            .map_err(|e| format!("`{}`: {e}", op.mnemonic()))?;
        let mut inputs = inputs;
        if let Some(value) = fold_small_value(&op, &facts, &out) {
            op = Constant::from_tensor(value).into();
            inputs = &[];
            out = op.infer(&[]).map_err(|e| format!("`constant`: {e}"))?;
        }
        let hint = format!("{}_{}", self.hint, op.mnemonic());
        let results = out
            .iter()
            .map(|f| (self.imp.fresh_name(&hint), f.ty.clone()))
            .collect();
        let ids = self
            .imp
            .graph
            .add_node(op, inputs.to_vec(), results)
            .map_err(|e| e.to_string())?;
        for (&id, f) in ids.iter().zip(out) {
            self.imp.facts.insert(id, f);
        }
        Ok(ids)
    }

    /// [`Ctx::add`] for a single-result op.
    pub fn add1(&mut self, op: impl Into<Op>, inputs: &[ValueId]) -> R<ValueId> {
        let op: Op = op.into();
        let name = op.mnemonic();
        let ids = self.add(op, inputs)?;
        match ids[..] {
            [id] => Ok(id),
            _ => fail!("`{name}` gives {} results, expected one", ids.len()),
        }
    }

    /// A `constant` node holding `t`.
    pub fn constant(&mut self, t: Tensor) -> R<ValueId> {
        self.add1(Constant::from_tensor(t), &[])
    }

    /// A 1-D `i64` constant.
    pub fn const_i64s(&mut self, v: &[i64]) -> R<ValueId> {
        self.constant(Tensor::from_i64(vec![v.len()], v.to_vec()))
    }

    /// A 1-D `i64` constant of (possibly symbolic) dims.
    pub fn const_dims(&mut self, v: Vec<Dim>) -> R<ValueId> {
        let n = v.len();
        let ty = TensorType::fixed(DType::I64, &[n as i64]);
        self.add1(Constant::from_known(ty, Known::from_dims(vec![n], v)), &[])
    }

    /// A scalar `i64` constant of a (possibly symbolic) dim.
    pub fn scalar_dims(&mut self, d: Dim) -> R<ValueId> {
        let ty = TensorType::scalar(DType::I64);
        self.add1(
            Constant::from_known(ty, Known::from_dims(vec![], vec![d])),
            &[],
        )
    }

    /// Binds the dim symbol `symbol` to `dim` in everything imported so far
    /// (graph inputs, results and their facts), for an input dim that an
    /// op's semantics fixes: `GroupQueryAttention`'s past head size, which
    /// onnxruntime-genai's builder declares as the symbol `kv_cache_dim`.
    pub fn bind_symbol(&mut self, symbol: &str, dim: Dim) -> R<()> {
        let subst = std::collections::HashMap::from([(symbol.to_string(), dim)]);
        slmcc_passes::specialize::substitute_everywhere(&mut self.imp.graph, &subst)?;
        let graph = &self.imp.graph;
        for (id, fact) in self.imp.facts.iter_mut() {
            fact.ty = graph.ty(*id).clone();
            if let Some(Known::Dims(s)) = &fact.value {
                let values = s.values.iter().map(|v| v.substitute(&subst)).collect();
                fact.value = Some(Known::from_dims(s.shape.clone(), values));
            }
        }
        Ok(())
    }

    /// A scalar constant of `dtype` holding `v` (converted as by `Cast`).
    pub fn scalar(&mut self, dtype: DType, v: f64) -> R<ValueId> {
        let t = Tensor::from_f64(dtype, Vec::new(), &[v]).map_err(|e| e.to_string())?;
        self.constant(t)
    }

    /// A value for a tensor given by the node itself (a `Constant`'s value):
    /// a weight named after the node's first output when large (the
    /// initializer rule), else a `constant` node.
    pub fn tensor_value(&mut self, t: Tensor) -> R<ValueId> {
        if is_weight(&t) {
            let name = self.hint.clone();
            if self.imp.module.weights.get(&name).is_some() {
                fail!("weight `{name}` is defined twice");
            }
            return Ok(self.imp.add_weight(&name, t));
        }
        self.constant(t)
    }
}

/// The value of a small integer or boolean single result whose operands are all known
/// concretely, by evaluating the op, when its inference did not propagate
/// it: shape logic such as the `Equal`/`Not`/`And`/`Where` on head counts
/// in ONNX's own function bodies (opset 23's `Attention` expanded), whose
/// values later ops (`Expand`'s target) need. The importer then writes a
/// `constant` in the op's place, so later passes know the value too.
fn fold_small_value(op: &Op, facts: &[&Fact], out: &[Fact]) -> Option<Tensor> {
    const MAX_ELEMENTS: usize = 1024;
    let small = |f: &Fact| {
        f.ty.shape
            .as_fixed()
            .is_some_and(|d| d.iter().product::<usize>() <= MAX_ELEMENTS)
    };
    let [result] = out else { return None };
    let shape_logic = result.ty.dtype.is_int() || result.ty.dtype == DType::Bool;
    if !shape_logic
        || result.value.is_some()
        || facts.is_empty()
        || !small(result)
        || !facts.iter().all(|f| small(f))
    {
        return None;
    }
    let values = facts
        .iter()
        .map(|f| f.value.as_ref()?.as_tensor(f.ty.dtype))
        .collect::<Option<Vec<_>>>()?;
    let refs: Vec<&Tensor> = values.iter().map(|t| t.as_ref()).collect();
    let mut results = op.eval(&refs, &slmcc_ir::EvalCtx::default()).ok()?;
    let t = results.pop()?;
    (t.dtype() == result.ty.dtype && results.is_empty()).then_some(t)
}
