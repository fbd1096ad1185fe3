//! Helpers for the frontend's unit tests: ONNX models built in Rust with
//! the protobuf types, imported, verified, and evaluated with the ops'
//! reference evaluation.

use std::collections::HashMap;
use std::path::Path;

use onnx_protobuf::attribute_proto::AttributeType;
use onnx_protobuf::tensor_proto::DataType;
use onnx_protobuf::tensor_shape_proto::{dimension, Dimension};
use onnx_protobuf::type_proto::{self, Value};
use onnx_protobuf::{
    AttributeProto, FunctionProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use slmcc_ir::text::print_module;
use slmcc_ir::{verify_module, EvalCtx, Module, OpDef, Tensor, ValueDef};

use super::{import_model_proto, ImportError};

/// A node with the given attributes.
pub fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    let mut n = NodeProto::new();
    n.op_type = op.to_string();
    n.name = format!("{}_{}", op.to_lowercase(), outputs.first().unwrap_or(&""));
    n.input = inputs.iter().map(|s| s.to_string()).collect();
    n.output = outputs.iter().map(|s| s.to_string()).collect();
    n.attribute = attrs;
    n
}

fn attr(name: &str, kind: AttributeType) -> AttributeProto {
    let mut a = AttributeProto::new();
    a.name = name.to_string();
    a.type_ = kind.into();
    a
}

pub fn a_int(name: &str, v: i64) -> AttributeProto {
    let mut a = attr(name, AttributeType::INT);
    a.i = v;
    a
}

pub fn a_ints(name: &str, v: &[i64]) -> AttributeProto {
    let mut a = attr(name, AttributeType::INTS);
    a.ints = v.to_vec();
    a
}

pub fn a_float(name: &str, v: f32) -> AttributeProto {
    let mut a = attr(name, AttributeType::FLOAT);
    a.f = v;
    a
}

pub fn a_string(name: &str, v: &str) -> AttributeProto {
    let mut a = attr(name, AttributeType::STRING);
    a.s = v.as_bytes().to_vec();
    a
}

pub fn a_tensor(name: &str, t: TensorProto) -> AttributeProto {
    let mut a = attr(name, AttributeType::TENSOR);
    a.t = Some(t).into();
    a
}

/// An attribute of a function body that refers to the caller's `to`.
pub fn a_ref(name: &str, kind: AttributeType, to: &str) -> AttributeProto {
    let mut a = attr(name, kind);
    a.ref_attr_name = to.to_string();
    a
}

/// A tensor value info; dims are numbers, symbol names, or `""` (missing).
pub fn tensor_info(name: &str, dt: DataType, dims: &[&str]) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for d in dims {
        let mut dim = Dimension::new();
        dim.value = match d.parse::<i64>() {
            Ok(v) => Some(dimension::Value::DimValue(v)),
            Err(_) if d.is_empty() => None,
            Err(_) => Some(dimension::Value::DimParam(d.to_string())),
        };
        shape.dim.push(dim);
    }
    let mut tt = type_proto::Tensor::new();
    tt.elem_type = dt as i32;
    tt.shape = Some(shape).into();
    let mut ty = TypeProto::new();
    ty.value = Some(Value::TensorType(tt));
    let mut vi = ValueInfoProto::new();
    vi.name = name.to_string();
    vi.type_ = Some(ty).into();
    vi
}

/// An `f32` graph input.
pub fn input(name: &str, dims: &[&str]) -> ValueInfoProto {
    tensor_info(name, DataType::FLOAT, dims)
}

pub fn f32_tensor(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = name.to_string();
    t.data_type = DataType::FLOAT as i32;
    t.dims = dims.to_vec();
    t.raw_data = data.iter().flat_map(|x| x.to_le_bytes()).collect();
    t
}

pub fn i64_tensor(name: &str, dims: &[i64], data: &[i64]) -> TensorProto {
    let mut t = TensorProto::new();
    t.name = name.to_string();
    t.data_type = DataType::INT64 as i32;
    t.dims = dims.to_vec();
    t.int64_data = data.to_vec();
    t
}

fn opset(domain: &str, version: i64) -> OperatorSetIdProto {
    let mut o = OperatorSetIdProto::new();
    o.domain = domain.to_string();
    o.version = version;
    o
}

/// A model importing the default domain at `version`.
pub fn model(
    version: i64,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
    initializers: Vec<TensorProto>,
    nodes: Vec<NodeProto>,
) -> ModelProto {
    let mut m = ModelProto::new();
    m.ir_version = 8;
    m.opset_import.push(opset("", version));
    let g = m.graph.mut_or_insert_default();
    g.name = "g".to_string();
    g.input = inputs;
    g.output = outputs
        .iter()
        .map(|o| {
            let mut vi = ValueInfoProto::new();
            vi.name = o.to_string();
            vi
        })
        .collect();
    g.initializer = initializers;
    g.node = nodes;
    m
}

/// A local function `domain.name(inputs) -> outputs` with a body.
pub fn function(
    domain: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attributes: &[&str],
    body: Vec<NodeProto>,
) -> FunctionProto {
    let mut f = FunctionProto::new();
    f.domain = domain.to_string();
    f.name = name.to_string();
    f.input = inputs.iter().map(|s| s.to_string()).collect();
    f.output = outputs.iter().map(|s| s.to_string()).collect();
    f.attribute = attributes.iter().map(|s| s.to_string()).collect();
    f.node = body;
    f.opset_import.push(opset("", 18));
    f
}

/// Adds a domain import to a model.
pub fn import_domain(m: &mut ModelProto, domain: &str, version: i64) {
    m.opset_import.push(opset(domain, version));
}

/// Imports a model named `test.onnx`; a successful import must verify.
pub fn try_import(m: &ModelProto) -> Result<Module, ImportError> {
    let module = import_model_proto(m.clone(), Path::new("test.onnx"))?;
    if let Err(e) = verify_module(&module) {
        panic!(
            "imported module does not verify: {e}\n{}",
            print_module(&module)
        );
    }
    Ok(module)
}

/// The printed IR of an import that must succeed.
pub fn import_text(m: &ModelProto) -> String {
    match try_import(m) {
        Ok(module) => print_module(&module),
        Err(e) => panic!("import failed: {e}"),
    }
}

/// The error message of an import that must fail.
pub fn import_err(m: &ModelProto) -> String {
    match try_import(m) {
        Ok(module) => panic!("import succeeded:\n{}", print_module(&module)),
        Err(e) => e.to_string(),
    }
}

/// Evaluates the imported graph on `inputs` (static shapes) with each op's
/// reference evaluation.
pub fn run(module: &Module, inputs: &[Tensor]) -> Vec<Tensor> {
    let g = &module.graphs[0];
    let mut vals: HashMap<usize, Tensor> = HashMap::new();
    for (&v, t) in g.inputs.iter().zip(inputs) {
        vals.insert(v.index(), t.clone());
    }
    for (id, v) in g.values() {
        if let ValueDef::Weight(w) = &v.def {
            let t = module.weights.tensor(w).unwrap().unwrap();
            vals.insert(id.index(), (*t).clone());
        }
    }
    for n in &g.nodes {
        let args: Vec<&Tensor> = n.inputs.iter().map(|v| &vals[&v.index()]).collect();
        let out = n.op.eval(&args, &EvalCtx::default()).unwrap();
        for (v, t) in n.outputs.iter().zip(out) {
            vals.insert(v.index(), t);
        }
    }
    g.outputs.iter().map(|v| vals[&v.index()].clone()).collect()
}

/// Imports and runs a model with one output.
pub fn run1(m: &ModelProto, inputs: &[Tensor]) -> Tensor {
    let module = try_import(m).unwrap_or_else(|e| panic!("import failed: {e}"));
    run(&module, inputs).remove(0)
}

/// Asserts two float vectors agree within `tol`.
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= tol, "{got:?} vs {want:?}");
    }
}
