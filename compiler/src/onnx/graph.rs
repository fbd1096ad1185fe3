//! The import loop: graph inputs, initializers, nodes in order (inlining
//! local functions), graph outputs.
//!
//! The [`Importer`] keeps the IR graph under construction, the ONNX name
//! bound to each IR value, the initializers not used yet, and a side table
//! of [`Fact`]s (type and known value) per value, which op import functions
//! read through their [`Ctx`] and extend through [`Ctx::add`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use onnx_protobuf::{AttributeProto, FunctionProto, ModelProto, NodeProto, ValueInfoProto};
use slmcc_ir::ops::constant::Constant;
use slmcc_ir::ops::identity::Identity;
use slmcc_ir::{DType, Dim, Fact, Graph, Module, OpDef, Tensor, TensorType, ValueDef, ValueId};

use super::context::Ctx;
use super::ops::Registry;
use super::tensor::{decode_initializer, dtype_from_onnx, ExternalMaps, Initializer};
use super::{ImportError, MAX_FLOAT_CONSTANT, MAX_INT_CONSTANT, MAX_OPSET, MIN_OPSET};

/// The opset imported per domain (the default domain under `""`).
pub(crate) type Opsets = HashMap<String, i64>;

/// Deepest nesting of local-function calls (guards against recursion).
const MAX_INLINE_DEPTH: usize = 32;

/// Words that cannot be dim symbols (dtype names and literal words).
const RESERVED_SYMBOLS: [&str; 14] = [
    "f32", "f16", "bf16", "i64", "i32", "i8", "u8", "i4", "u4", "bool", "true", "false", "inf",
    "nan",
];

/// The default domain's two spellings become `""`.
pub(crate) fn norm_domain(d: &str) -> &str {
    if d == "ai.onnx" {
        ""
    } else {
        d
    }
}

/// Whether an initializer (or `Constant` value) becomes a weight rather than
/// a `constant` node (the rule in the module doc).
pub(crate) fn is_weight(t: &Tensor) -> bool {
    is_weight_shape(t.dtype(), t.shape())
}

/// [`is_weight`] of a tensor of `dtype` and `shape`.
pub(crate) fn is_weight_shape(dtype: DType, shape: &[usize]) -> bool {
    let len: usize = shape.iter().product();
    if dtype.is_float() {
        shape.len() >= 2 || len > MAX_FLOAT_CONSTANT
    } else {
        len > MAX_INT_CONSTANT
    }
}

/// The static type of a concrete tensor.
pub(crate) fn tensor_type(t: &Tensor) -> TensorType {
    TensorType::fixed(
        t.dtype(),
        &t.shape().iter().map(|&d| d as i64).collect::<Vec<_>>(),
    )
}

/// Dim symbols made from `dim_param`s and for missing dims.
#[derive(Default)]
struct Symbols {
    by_param: HashMap<String, String>,
    used: HashSet<String>,
    unknown: usize,
}

impl Symbols {
    /// The symbol for a `dim_param`: the same param always gives the same
    /// symbol, distinct params distinct symbols. A sum of params and
    /// integers (`past_sequence_length + sequence_length`, as Optimum
    /// writes for the present KV length) is that sum of their symbols.
    fn param(&mut self, p: &str) -> Dim {
        let terms: Vec<&str> = p.split('+').map(str::trim).collect();
        if terms.len() > 1 && terms.iter().all(|t| is_param_term(t)) {
            return terms
                .iter()
                .fold(Dim::fixed(0), |sum, t| match t.parse::<i64>() {
                    Ok(v) => &sum + &Dim::fixed(v),
                    Err(_) => &sum + &self.param(t),
                });
        }
        if let Some(s) = self.by_param.get(p) {
            return Dim::sym(s);
        }
        let base = sanitize_symbol(p);
        let mut s = base.clone();
        let mut k = 1;
        while self.used.contains(&s) {
            s = format!("{base}_{k}");
            k += 1;
        }
        self.used.insert(s.clone());
        self.by_param.insert(p.to_string(), s.clone());
        Dim::sym(&s)
    }

    /// A fresh symbol for a missing dim.
    fn fresh(&mut self) -> Dim {
        loop {
            let s = format!("unk{}", self.unknown);
            self.unknown += 1;
            if self.used.insert(s.clone()) {
                return Dim::sym(&s);
            }
        }
    }
}

/// A term of a summed `dim_param`: a non-negative integer, or a name
/// (`[A-Za-z_][A-Za-z0-9_.]*`).
fn is_param_term(t: &str) -> bool {
    t.parse::<u32>().is_ok()
        || t.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// A valid dim symbol `[A-Za-z_][A-Za-z0-9_]*` that is not a reserved word.
pub(crate) fn sanitize_symbol(p: &str) -> String {
    let mut s: String = p
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    if RESERVED_SYMBOLS.contains(&s.as_str()) {
        s.push('_');
    }
    s
}

/// The state of one model's import.
pub(crate) struct Importer<'m> {
    pub(crate) file: PathBuf,
    pub(crate) base_dir: PathBuf,
    pub(crate) module: Module,
    pub(crate) graph: Graph,
    /// ONNX value name to IR value.
    env: HashMap<String, ValueId>,
    /// Initializers not used yet.
    pending: HashMap<String, Initializer>,
    pub(crate) facts: HashMap<ValueId, Fact>,
    /// Every ONNX name (and every fresh name handed out), which fresh names avoid.
    reserved: HashSet<String>,
    functions: HashMap<(String, String, String), &'m FunctionProto>,
    registry: Registry,
    symbols: Symbols,
    inlined: usize,
    /// Weights whose data an import turned into new weights (`MatMulNBits`'
    /// packed bytes): dropped at the end unless something else uses them.
    pub(crate) superseded: Vec<String>,
}

/// Imports a parsed model (see the module doc of [`super`]).
pub(crate) fn import(
    mut model: ModelProto,
    file: &Path,
    base_dir: &Path,
) -> Result<Module, ImportError> {
    // Decoded one by one below, each proto dropped once decoded.
    let initializers = model
        .graph
        .as_mut()
        .map(|g| std::mem::take(&mut g.initializer))
        .unwrap_or_default();
    let model = &model;
    let err = |reason: String| ImportError::new(file, reason);
    let opsets = Rc::new(model_opsets(&model.opset_import).map_err(err)?);
    let Some(g) = model.graph.as_ref() else {
        return Err(err("the model has no graph".to_string()));
    };
    if !g.sparse_initializer.is_empty() {
        return Err(err("sparse initializers are not supported".to_string()));
    }
    let name = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "model".to_string());
    let mut imp = Importer {
        file: file.to_path_buf(),
        base_dir: base_dir.to_path_buf(),
        module: Module::new(name),
        graph: Graph::new("main"),
        env: HashMap::new(),
        pending: HashMap::new(),
        facts: HashMap::new(),
        reserved: HashSet::new(),
        functions: model
            .functions
            .iter()
            .map(|f| ((f.domain.clone(), f.name.clone(), f.overload.clone()), f))
            .collect(),
        registry: Registry::new(),
        symbols: Symbols::default(),
        inlined: 0,
        superseded: Vec::new(),
    };

    imp.reserved.extend(g.input.iter().map(|v| v.name.clone()));
    imp.reserved
        .extend(initializers.iter().map(|t| t.name.clone()));
    imp.reserved
        .extend(g.node.iter().flat_map(|n| n.output.iter().cloned()));

    let mut maps = ExternalMaps::default();
    for t in initializers {
        if t.name.is_empty() {
            return Err(err("an initializer has no name".to_string()));
        }
        let tensor = decode_initializer(&t, base_dir, &mut maps, is_weight_shape)
            .map_err(|e| err(format!("initializer `{}`: {e}", t.name)))?;
        if imp.pending.insert(t.name.clone(), tensor).is_some() {
            return Err(err(format!("initializer `{}` is defined twice", t.name)));
        }
    }
    for vi in &g.input {
        // Inputs that are also initializers (IR version < 4) are initializers.
        if imp.pending.contains_key(&vi.name) {
            continue;
        }
        let ty = imp.value_type(vi).map_err(err)?;
        let id = imp
            .graph
            .add_input(vi.name.clone(), ty.clone())
            .map_err(|e| err(format!("graph input: {e}")))?;
        imp.facts.insert(id, Fact::new(ty));
        imp.env.insert(vi.name.clone(), id);
    }
    for node in &g.node {
        imp.import_node(node, &opsets, 0)?;
    }
    for vi in &g.output {
        let id = imp
            .lookup(&vi.name)
            .map_err(err)?
            .ok_or_else(|| err(format!("graph output `{}` is never defined", vi.name)))?;
        imp.graph.outputs.push(id);
    }
    let mut module = imp.module;
    if !imp.superseded.is_empty() {
        imp.graph.compact();
        for w in &imp.superseded {
            if imp.graph.find_weight(w).is_none() {
                module.weights.remove(w);
            }
        }
    }
    module.graphs.push(imp.graph);
    Ok(module)
}

/// The opsets a model or function imports; the default domain must be
/// within [`MIN_OPSET`]..=[`MAX_OPSET`].
fn model_opsets(imports: &[onnx_protobuf::OperatorSetIdProto]) -> Result<Opsets, String> {
    let mut opsets = Opsets::new();
    for o in imports {
        opsets.insert(norm_domain(&o.domain).to_string(), o.version);
    }
    match opsets.get("") {
        None => Err("the model does not import the default ONNX domain".to_string()),
        Some(&v) => check_default_opset(v).map(|()| opsets),
    }
}

fn check_default_opset(v: i64) -> Result<(), String> {
    if (MIN_OPSET..=MAX_OPSET).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "default-domain opset {v} is not supported (supported: {MIN_OPSET} to {MAX_OPSET})"
        ))
    }
}

/// How a node is named in messages: `` `name` (Op, opset N) ``.
fn node_label(node: &NodeProto, opset: Option<i64>) -> String {
    let name = if !node.name.is_empty() {
        node.name.as_str()
    } else {
        node.output
            .iter()
            .find(|o| !o.is_empty())
            .map_or("", String::as_str)
    };
    match opset {
        Some(v) => format!("`{name}` ({}, opset {v})", node.op_type),
        None => format!("`{name}` ({})", node.op_type),
    }
}

impl<'m> Importer<'m> {
    /// The IR type of a graph input.
    fn value_type(&mut self, vi: &ValueInfoProto) -> Result<TensorType, String> {
        let name = &vi.name;
        let Some(onnx_protobuf::type_proto::Value::TensorType(tt)) =
            vi.type_.as_ref().and_then(|t| t.value.as_ref())
        else {
            return Err(format!("graph input `{name}` is not a tensor"));
        };
        let dtype =
            dtype_from_onnx(tt.elem_type).map_err(|e| format!("graph input `{name}`: {e}"))?;
        let Some(shape) = tt.shape.as_ref() else {
            return Err(format!("graph input `{name}` has no shape (unknown rank)"));
        };
        use onnx_protobuf::tensor_shape_proto::dimension::Value as D;
        let dims = shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(D::DimValue(v)) if *v >= 0 => Ok(Dim::fixed(*v)),
                Some(D::DimValue(v)) => Err(format!("graph input `{name}` has a dim of {v}")),
                Some(D::DimParam(p)) if !p.is_empty() => Ok(self.symbols.param(p)),
                _ => Ok(self.symbols.fresh()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TensorType::new(dtype, dims))
    }

    /// The IR value an ONNX name is bound to, creating an initializer's
    /// weight or constant on first use; `None` if nothing defines it yet.
    pub(crate) fn lookup(&mut self, name: &str) -> Result<Option<ValueId>, String> {
        if let Some(&v) = self.env.get(name) {
            return Ok(Some(v));
        }
        let t = match self.pending.remove(name) {
            None => return Ok(None),
            Some(Initializer::Decoded(t)) => t,
            Some(Initializer::Mapped { ty, map, range }) => {
                self.module
                    .weights
                    .insert_mapped(name, ty.clone(), map, range);
                let id = self.graph.weight(name, ty.clone());
                self.facts.insert(id, Fact::new(ty));
                self.env.insert(name.to_string(), id);
                return Ok(Some(id));
            }
        };
        let id = if is_weight(&t) {
            self.add_weight(name, t)
        } else {
            let op = Constant::from_tensor(t);
            let fact = op.infer(&[]).map_err(|e| e.to_string())?.remove(0);
            let ids = self
                .graph
                .add_node(op, vec![], vec![(name.to_string(), fact.ty.clone())])
                .map_err(|e| e.to_string())?;
            self.facts.insert(ids[0], fact);
            ids[0]
        };
        self.env.insert(name.to_string(), id);
        Ok(Some(id))
    }

    /// Adds a module weight held in memory and the value referring to it.
    pub(crate) fn add_weight(&mut self, name: &str, t: Tensor) -> ValueId {
        let ty = tensor_type(&t);
        self.module.weights.insert(name, t);
        let id = self.graph.weight(name, ty.clone());
        // Weights carry no known value: the verifier sees them the same way.
        self.facts.insert(id, Fact::new(ty));
        id
    }

    /// A value name not used by the graph nor by any ONNX name.
    pub(crate) fn fresh_name(&mut self, hint: &str) -> String {
        let mut name = hint.to_string();
        let mut k = 1;
        while name.is_empty() || self.reserved.contains(&name) || self.graph.find(&name).is_some() {
            name = format!("{hint}_{k}");
            k += 1;
        }
        self.reserved.insert(name.clone());
        name
    }

    fn import_node(
        &mut self,
        node: &NodeProto,
        opsets: &Rc<Opsets>,
        depth: usize,
    ) -> Result<(), ImportError> {
        let key = (
            node.domain.clone(),
            node.op_type.clone(),
            node.overload.clone(),
        );
        if let Some(&f) = self.functions.get(&key) {
            return self.inline_function(node, f, opsets, depth);
        }
        let domain = norm_domain(&node.domain);
        let opset = opsets.get(domain).copied();
        let (file, label) = (self.file.clone(), node_label(node, opset));
        let err = |reason: String| ImportError {
            file: file.clone(),
            node: Some(label.clone()),
            reason,
        };
        let Some(opset) = opset else {
            return Err(err(format!(
                "domain `{domain}` is not imported by the model"
            )));
        };
        let Some(import) = self.registry.get(domain, &node.op_type) else {
            let reason = if domain.is_empty() {
                format!("op `{}` is not supported", node.op_type)
            } else {
                format!(
                    "op `{}` of domain `{domain}` is not supported",
                    node.op_type
                )
            };
            return Err(err(reason));
        };
        let mut inputs = Vec::with_capacity(node.input.len());
        for name in &node.input {
            if name.is_empty() {
                inputs.push(None);
                continue;
            }
            match self.lookup(name).map_err(&err)? {
                Some(v) => inputs.push(Some(v)),
                None => {
                    return Err(err(format!(
                    "uses `{name}` before it is defined (graph not topologically sorted or has a cycle)"
                )))
                }
            }
        }
        let first_new = self.graph.value_count();
        let mut ctx = Ctx::new(self, node, opset, inputs);
        let outs = import(&mut ctx)
            .and_then(|outs| ctx.finish().map(|()| outs))
            .map_err(&err)?;
        self.bind_outputs(node, &outs, first_new).map_err(err)
    }

    /// Binds the node's ONNX output names to the values its import returned:
    /// a value the expansion created is renamed; one that existed before
    /// (an operand passed through) gets an `identity` node of that name.
    fn bind_outputs(
        &mut self,
        node: &NodeProto,
        outs: &[ValueId],
        first_new: usize,
    ) -> Result<(), String> {
        let mut renamed = HashSet::new();
        for (i, name) in node.output.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            let Some(&v) = outs.get(i) else {
                return Err(format!("output {i} (`{name}`) is not supported"));
            };
            if self.env.contains_key(name) || self.pending.contains_key(name) {
                return Err(format!("output `{name}` is defined twice"));
            }
            let new = v.index() >= first_new;
            let id = match &self.graph.value(v).def {
                ValueDef::Node if new && renamed.insert(v) => {
                    self.graph
                        .rename(v, name.clone())
                        .map_err(|e| e.to_string())?;
                    v
                }
                ValueDef::Weight(_) if new => v,
                _ => {
                    let fact = self.facts[&v].clone();
                    let ids = self
                        .graph
                        .add_node(Identity, vec![v], vec![(name.clone(), fact.ty.clone())])
                        .map_err(|e| e.to_string())?;
                    self.facts.insert(ids[0], fact);
                    ids[0]
                }
            };
            self.env.insert(name.clone(), id);
        }
        Ok(())
    }

    /// Imports the body of local function `f` in place of the call `call`:
    /// formal inputs and outputs become the call's names, other names get a
    /// unique prefix, attribute references take the call's attributes (or
    /// the function's defaults).
    fn inline_function(
        &mut self,
        call: &NodeProto,
        f: &FunctionProto,
        outer: &Rc<Opsets>,
        depth: usize,
    ) -> Result<(), ImportError> {
        let (file, label) = (self.file.clone(), node_label(call, None));
        let err = |reason: String| ImportError {
            file: file.clone(),
            node: Some(label.clone()),
            reason,
        };
        if depth >= MAX_INLINE_DEPTH {
            return Err(err(format!(
                "local functions nest more than {MAX_INLINE_DEPTH} deep (recursive function?)"
            )));
        }
        let mut opsets = (**outer).clone();
        for o in &f.opset_import {
            opsets.insert(norm_domain(&o.domain).to_string(), o.version);
        }
        if let Some(&v) = opsets.get("") {
            check_default_opset(v).map_err(|e| err(format!("function `{}`: {e}", f.name)))?;
        }
        let opsets = Rc::new(opsets);

        self.inlined += 1;
        let call_name = if call.name.is_empty() {
            format!("{}{}", f.name, self.inlined)
        } else {
            call.name.clone()
        };
        let mut names: HashMap<String, String> = HashMap::new();
        for (i, formal) in f.input.iter().enumerate() {
            let actual = call.input.get(i).cloned().unwrap_or_default();
            names.insert(formal.clone(), actual);
        }
        for (i, formal) in f.output.iter().enumerate() {
            match call.output.get(i).filter(|o| !o.is_empty()) {
                Some(actual) => names.insert(formal.clone(), actual.clone()),
                None => {
                    let fresh = self.fresh_name(&format!("{call_name}/{formal}"));
                    names.insert(formal.clone(), fresh)
                }
            };
        }
        for (j, body) in f.node.iter().enumerate() {
            let mut n = body.clone();
            for name in n.input.iter_mut().chain(n.output.iter_mut()) {
                if name.is_empty() {
                    continue;
                }
                let mapped = match names.get(name.as_str()) {
                    Some(m) => m.clone(),
                    None => {
                        let fresh = self.fresh_name(&format!("{call_name}/{name}"));
                        names.insert(name.clone(), fresh.clone());
                        fresh
                    }
                };
                *name = mapped;
            }
            n.attribute = resolve_attributes(&body.attribute, call, f);
            n.name = if body.name.is_empty() {
                format!("{call_name}/{}_{j}", body.op_type)
            } else {
                format!("{call_name}/{}", body.name)
            };
            self.import_node(&n, &opsets, depth + 1)?;
        }
        Ok(())
    }

    pub(crate) fn fact(&self, v: ValueId) -> &Fact {
        &self.facts[&v]
    }
}

/// A function body node's attributes with references (`ref_attr_name`)
/// replaced by the call's attribute of that name, or the function's default;
/// a reference to an attribute given by neither is dropped (left unset).
fn resolve_attributes(
    attrs: &[AttributeProto],
    call: &NodeProto,
    f: &FunctionProto,
) -> Vec<AttributeProto> {
    attrs
        .iter()
        .filter_map(|a| {
            if a.ref_attr_name.is_empty() {
                return Some(a.clone());
            }
            let source = call
                .attribute
                .iter()
                .find(|c| c.name == a.ref_attr_name)
                .or_else(|| f.attribute_proto.iter().find(|d| d.name == a.ref_attr_name))?;
            let mut v = source.clone();
            v.name = a.name.clone();
            Some(v)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::testutil::*;
    use onnx_protobuf::attribute_proto::AttributeType;

    #[test]
    fn a_summed_dim_param_matches_the_sum_the_graph_computes() {
        // Optimum's attention mask covers the past and the new tokens.
        let m = model(
            17,
            vec![
                input("past", &["1", "past_sequence_length"]),
                input("x", &["1", "sequence_length"]),
                input("mask", &["1", "past_sequence_length + sequence_length"]),
            ],
            &["y"],
            vec![],
            vec![
                node("Concat", &["past", "x"], &["all"], vec![a_int("axis", 1)]),
                node("Add", &["all", "mask"], &["y"], vec![]),
            ],
        );
        let text = import_text(&m);
        assert!(
            text.contains("%y = add %all, %mask : f32[1, past_sequence_length+sequence_length]"),
            "{text}"
        );
    }

    #[test]
    fn symbols_are_sanitized_and_distinct() {
        assert_eq!(sanitize_symbol("batch_size"), "batch_size");
        assert_eq!(sanitize_symbol("seq len+1"), "seq_len_1");
        assert_eq!(sanitize_symbol("2d"), "_2d");
        assert_eq!(sanitize_symbol("f32"), "f32_");
        assert_eq!(sanitize_symbol("inf"), "inf_");
        assert_eq!(sanitize_symbol(""), "_");
        assert_eq!(sanitize_symbol("?"), "_");
        let mut s = Symbols::default();
        assert_eq!(s.param("a b").to_string(), "a_b");
        assert_eq!(s.param("a_b").to_string(), "a_b_1");
        // Sums of params and integers are sums of their symbols.
        let sum = s.param("past_sequence_length + sequence_length");
        let want = &s.param("past_sequence_length") + &s.param("sequence_length");
        assert_eq!(sum, want);
        assert_eq!(s.param("seq+1"), &s.param("seq") + &Dim::fixed(1));
        // Not a sum of terms: one opaque symbol.
        let odd = s.param("a + ");
        assert_eq!(odd.symbols().len(), 1);
        assert_ne!(odd, s.param("a"));
        assert_eq!(s.param("a b").to_string(), "a_b");
        assert_eq!(s.param("unk0").to_string(), "unk0");
        assert_eq!(s.fresh().to_string(), "unk1");
    }

    #[test]
    fn initializer_rule() {
        assert!(!is_weight(&Tensor::from_f32(vec![64], vec![0.0; 64])));
        assert!(is_weight(&Tensor::from_f32(vec![65], vec![0.0; 65])));
        assert!(is_weight(&Tensor::from_f32(vec![1, 2], vec![0.0; 2])));
        assert!(!is_weight(&Tensor::scalar_f32(1.0)));
        assert!(!is_weight(&Tensor::from_i64(vec![4, 8], vec![0; 32])));
        assert!(is_weight(&Tensor::from_i64(vec![2048], vec![0; 2048])));
    }

    #[test]
    fn inputs_initializers_nodes_outputs() {
        let m = model(
            17,
            vec![input("x", &["1", "seq", "4"])],
            &["y"],
            vec![
                f32_tensor("w", &[4, 4], &[0.5; 16]),
                f32_tensor("b", &[4], &[1.0, 2.0, 3.0, 4.0]),
                f32_tensor("unused", &[8, 8], &[0.0; 64]),
            ],
            vec![
                node("MatMul", &["x", "w"], &["m"], vec![]),
                node("Add", &["m", "b"], &["y"], vec![]),
            ],
        );
        let text = import_text(&m);
        let want = "module @test {
  weight @w : f32[4, 4]

  graph @main(%x: f32[1, seq, 4]) -> (f32[1, seq, 4]) {
    %m = matmul %x, @w : f32[1, seq, 4]
    %b = constant {value = [1.0, 2.0, 3.0, 4.0]} : f32[4]
    %y = add %m, %b : f32[1, seq, 4]
    return %y
  }
}
";
        assert_eq!(text, want);
    }

    #[test]
    fn dims_from_params_and_missing_dims() {
        let m = model(
            17,
            vec![
                input("x", &["batch size", "", "f32"]),
                input("z", &["batch size", "3"]),
            ],
            &["x", "z"],
            vec![],
            vec![],
        );
        let text = import_text(&m);
        assert!(
            text.contains("graph @main(%x: f32[batch_size, unk0, f32_], %z: f32[batch_size, 3])"),
            "{text}"
        );
        assert!(text.contains("return %x, %z"), "{text}");
    }

    #[test]
    fn nodes_out_of_order_are_reported_as_a_cycle() {
        let m = model(
            17,
            vec![input("x", &["2"])],
            &["b"],
            vec![],
            vec![
                node("Add", &["x", "b"], &["a"], vec![]),
                node("Relu", &["a"], &["b"], vec![]),
            ],
        );
        assert_eq!(
            import_err(&m),
            "test.onnx: node `add_a` (Add, opset 17): uses `b` before it is defined \
             (graph not topologically sorted or has a cycle)"
        );
    }

    #[test]
    fn unknown_ops_and_attributes_name_the_node() {
        let mut n = node("Frobnicate", &["x"], &["y"], vec![]);
        n.name.clear();
        let m = model(19, vec![input("x", &["2"])], &["y"], vec![], vec![n]);
        assert_eq!(
            import_err(&m),
            "test.onnx: node `y` (Frobnicate, opset 19): op `Frobnicate` is not supported"
        );
        let relu = node("Relu", &["x"], &["y"], vec![a_float("alpha", 0.1)]);
        let m = model(17, vec![input("x", &["2"])], &["y"], vec![], vec![relu]);
        assert_eq!(
            import_err(&m),
            "test.onnx: node `relu_y` (Relu, opset 17): attribute `alpha` is not supported"
        );
        let mut n = node("Relu", &["x"], &["y"], vec![]);
        n.domain = "com.example".to_string();
        let m = model(17, vec![input("x", &["2"])], &["y"], vec![], vec![n]);
        assert!(import_err(&m).contains("domain `com.example` is not imported"));
    }

    #[test]
    fn opsets_outside_13_to_24_are_rejected() {
        for v in [7, 12, 25] {
            let m = model(v, vec![input("x", &["2"])], &["x"], vec![], vec![]);
            assert_eq!(
                import_err(&m),
                format!(
                    "test.onnx: default-domain opset {v} is not supported (supported: 13 to 24)"
                )
            );
        }
        let mut m = model(13, vec![input("x", &["2"])], &["x"], vec![], vec![]);
        m.opset_import[0].domain = "ai.onnx".to_string();
        assert!(try_import(&m).is_ok());
    }

    #[test]
    fn outputs_must_be_defined_once() {
        let m = model(17, vec![input("x", &["2"])], &["z"], vec![], vec![]);
        assert_eq!(
            import_err(&m),
            "test.onnx: graph output `z` is never defined"
        );
        let m = model(
            17,
            vec![input("x", &["2"])],
            &["y"],
            vec![],
            vec![
                node("Relu", &["x"], &["y"], vec![]),
                node("Neg", &["x"], &["y"], vec![]),
            ],
        );
        assert!(import_err(&m).ends_with("output `y` is defined twice"));
    }

    #[test]
    fn passed_through_values_get_an_identity() {
        let m = model(
            17,
            vec![input("x", &["2"])],
            &["y", "w"],
            vec![f32_tensor("w", &[2, 2], &[1.0; 4])],
            vec![node("Identity", &["x"], &["y"], vec![])],
        );
        let text = import_text(&m);
        assert!(text.contains("%y = identity %x : f32[2]"), "{text}");
        assert!(text.contains("return %y, @w"), "{text}");
    }

    #[test]
    fn intermediate_names_avoid_onnx_names() {
        // Gemm expands to several nodes named after its output `y`; the
        // ONNX name `y_matmul` used later must stay free.
        let m = model(
            17,
            vec![input("a", &["2", "2"]), input("b", &["2", "2"])],
            &["y_matmul"],
            vec![],
            vec![
                node("Gemm", &["a", "b"], &["y"], vec![a_float("alpha", 2.0)]),
                node("Relu", &["y"], &["y_matmul"], vec![]),
            ],
        );
        let text = import_text(&m);
        assert!(text.contains("%y_matmul_1 = matmul %a, %b"), "{text}");
        assert!(text.contains("%y_matmul = relu %y"), "{text}");
    }

    #[test]
    fn local_functions_are_inlined() {
        // pkg.Scale(X) -> Y = X * alpha, alpha an attribute of the call.
        let body = vec![
            node(
                "Constant",
                &[],
                &["c"],
                vec![a_ref("value_float", AttributeType::FLOAT, "alpha")],
            ),
            node("Mul", &["X", "c"], &["Y"], vec![]),
        ];
        let f = function("pkg", "Scale", &["X"], &["Y"], &["alpha"], body);
        let mut call1 = node("Scale", &["x"], &["t"], vec![a_float("alpha", 2.0)]);
        call1.domain = "pkg".to_string();
        let mut call2 = node("Scale", &["t"], &["y"], vec![a_float("alpha", 3.0)]);
        call2.domain = "pkg".to_string();
        let mut m = model(
            18,
            vec![input("x", &["2"])],
            &["y"],
            vec![],
            vec![call1, call2],
        );
        import_domain(&mut m, "pkg", 1);
        m.functions.push(f);
        let text = import_text(&m);
        assert!(
            text.contains("%\"scale_t/c\" = constant {value = 2.0} : f32[]"),
            "{text}"
        );
        assert!(text.contains("%t = mul %x, %\"scale_t/c\""), "{text}");
        let y = run1(&m, &[Tensor::from_f32(vec![2], vec![1.0, -2.0])]);
        assert_eq!(y.as_f32().unwrap(), &[6.0, -12.0]);
    }

    #[test]
    fn large_constants_become_weights() {
        let big = f32_tensor("", &[3, 2], &[1.0; 6]);
        let m = model(
            17,
            vec![input("x", &["2", "3"])],
            &["y"],
            vec![],
            vec![
                node("Constant", &[], &["k"], vec![a_tensor("value", big)]),
                node("MatMul", &["x", "k"], &["y"], vec![]),
            ],
        );
        let text = import_text(&m);
        assert!(text.contains("weight @k : f32[3, 2]"), "{text}");
        assert!(text.contains("%y = matmul %x, @k : f32[2, 2]"), "{text}");
    }
}
