//! Graph size reaches neither the stack nor the square of the nodes: a
//! chain of 100,000 `Add` nodes imports, prints, parses, compiles and runs
//! through the CLI (a debug build, whose frames are larger than release's,
//! on the main thread's stack). The 1,000,000-node chain takes minutes, so
//! it is `scripts/stress-chain`, with its numbers in `docs/LIMITS.md`.

mod common;

use std::path::Path;

use common::{slmcc, stderr, stdout};
use onnx_protobuf::tensor_proto::DataType;
use onnx_protobuf::tensor_shape_proto::{dimension, Dimension};
use onnx_protobuf::type_proto::{self, Value};
use onnx_protobuf::{
    Message, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use slmcc_ir::Tensor;

/// An f32 `[1, seq]` value.
fn row(name: &str) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for d in [
        dimension::Value::DimValue(1),
        dimension::Value::DimParam("seq".into()),
    ] {
        let mut dim = Dimension::new();
        dim.value = Some(d);
        shape.dim.push(dim);
    }
    let mut tensor = type_proto::Tensor::new();
    tensor.elem_type = DataType::FLOAT as i32;
    tensor.shape = Some(shape).into();
    let mut ty = TypeProto::new();
    ty.value = Some(Value::TensorType(tensor));
    let mut vi = ValueInfoProto::new();
    vi.name = name.to_string();
    vi.type_ = Some(ty).into();
    vi
}

/// `y = x + x + … + x`: `nodes` `Add`s, each adding `x` to the one before,
/// so `y = (nodes + 1) · x`.
fn chain(nodes: usize) -> ModelProto {
    let mut m = ModelProto::new();
    m.ir_version = 8;
    let mut opset = OperatorSetIdProto::new();
    opset.version = 17;
    m.opset_import.push(opset);
    let g = m.graph.mut_or_insert_default();
    g.name = "chain".to_string();
    g.input.push(row("x"));
    g.output.push(row("y"));
    let mut prev = "x".to_string();
    for i in 0..nodes {
        let out = if i + 1 == nodes {
            "y".to_string()
        } else {
            format!("t{i}")
        };
        let mut n = NodeProto::new();
        n.op_type = "Add".to_string();
        n.input = vec![prev, "x".to_string()];
        n.output = vec![out.clone()];
        g.node.push(n);
        prev = out;
    }
    m
}

fn ok(args: &[&str]) -> String {
    let o = slmcc(args);
    assert!(o.status.success(), "slmcc {args:?}: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn a_chain_of_100000_nodes_compiles_and_runs() {
    const NODES: usize = 100_000;
    let dir = std::env::temp_dir().join(format!("slmcc-chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    std::fs::write(
        dir.join("chain.onnx"),
        chain(NODES).write_to_bytes().unwrap(),
    )
    .unwrap();
    slmcc_runtime::npy::write(
        Path::new(&path("x.npy")),
        &Tensor::from_f32(vec![1, 4], vec![1.0, -2.0, 0.5, 0.0]),
    )
    .unwrap();
    let want = [1.0f32, -2.0, 0.5, 0.0].map(|x| x * (NODES + 1) as f32);

    // The textual IR: printed, parsed back and verified.
    ok(&["import", &path("chain.onnx"), "-o", &path("chain.slm")]);
    ok(&[
        "opt",
        &path("chain.slm"),
        "--passes",
        "shape-infer,dce",
        "-o",
        &path("opt.slm"),
    ]);

    // Every pass of the default pipeline (the e-graph ones included: the
    // chain is under their node limit), the memory plan and codegen.
    ok(&[
        "compile",
        &path("chain.onnx"),
        "--target",
        "cpu",
        "--buckets",
        "4",
        "-o",
        &path("chain.slmpkg"),
    ]);
    ok(&[
        "run",
        &path("chain.slmpkg"),
        "--input",
        &format!("x={}", path("x.npy")),
        "--output-dir",
        &path("out"),
    ]);
    let y = slmcc_runtime::npy::read(&dir.join("out/y.npy")).unwrap();
    assert_eq!(y.shape(), [1, 4]);
    assert_eq!(y.as_f32().unwrap(), want);
    let _ = std::fs::remove_dir_all(&dir);
}
