//! The linear layers of an ONNX model, by the PyTorch module they came from:
//! what a LoRA adapter (`slmcc compile --lora`) is matched against.
//!
//! An adapter names modules (`model.layers.0.self_attn.q_proj`), while the
//! exporters name weights after nothing of the kind: the dynamo exporter
//! writes `val_130`, the TorchScript one `onnx::MatMul_738`, and both store
//! the weight transposed. So a linear layer is found by what it is in the
//! graph, and its module by what the exporter wrote about the node:
//!
//! - **A linear layer** is a `MatMul` whose second operand is a rank-2
//!   initializer (the weight as `[in, out]`), or a `Transpose` with
//!   `perm = [1, 0]` of one (`[out, in]`), or a `Gemm` whose `B` is one
//!   (`transB` says which). Anything else (attention's `Q·Kᵀ`, a weight
//!   computed at run time) is not a layer an adapter can change.
//! - **Its module** comes from the node's metadata when the dynamo exporter
//!   wrote it: `pkg.torch.onnx.name_scopes` lists the scopes from the root
//!   down and `pkg.torch.onnx.class_hierarchy` their classes, whose last
//!   entries are the ATen ops (`aten.linear.default`); the module is the
//!   deepest scope that is not an op. Otherwise it comes from the node's
//!   name as the TorchScript exporter (and so Optimum) writes it,
//!   `/model/layers.0/self_attn/q_proj/MatMul`: the path without its last
//!   part, `/` read as `.`. A node with neither has no module.
//!
//! Only the main graph's nodes are read: the dynamo exporter's local
//! functions hold no linear layers of a transformers model.

use onnx_protobuf::{AttributeProto, GraphProto, NodeProto};

/// How a linear layer's weight is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightLayout {
    /// `[in, out]`: `y = x · W` (the exporters' usual, pre-transposed form).
    InOut,
    /// `[out, in]`: PyTorch's `nn.Linear` layout, transposed in the graph.
    OutIn,
}

/// One linear layer of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinearLayer {
    /// The PyTorch module path (`model.layers.0.self_attn.q_proj`).
    pub module: String,
    /// The initializer holding the weight (the IR weight of the same name).
    pub weight: String,
    pub layout: WeightLayout,
    /// The ONNX node, for messages.
    pub node: String,
}

/// The model's linear layers whose module is known, in node order; a layer
/// whose weight several nodes of one module use is listed once.
pub fn linear_layers(graph: &GraphProto) -> Vec<LinearLayer> {
    let rank2: std::collections::HashSet<&str> = graph
        .initializer
        .iter()
        .filter(|t| t.dims.len() == 2)
        .map(|t| t.name.as_str())
        .collect();
    let transposed: std::collections::HashMap<&str, &str> = graph
        .node
        .iter()
        .filter(|n| n.op_type == "Transpose" && n.domain.is_empty() && n.input.len() == 1)
        .filter(|n| attr(n, "perm").is_some_and(|a| a.ints == [1, 0]))
        .filter(|n| rank2.contains(n.input[0].as_str()) && n.output.len() == 1)
        .map(|n| (n.output[0].as_str(), n.input[0].as_str()))
        .collect();
    let mut layers: Vec<LinearLayer> = Vec::new();
    for n in &graph.node {
        if !n.domain.is_empty() && n.domain != "ai.onnx" {
            continue;
        }
        let Some(b) = n.input.get(1).map(String::as_str) else {
            continue;
        };
        let (weight, mut layout) = if rank2.contains(b) {
            (b, WeightLayout::InOut)
        } else if let Some(&w) = transposed.get(b) {
            (w, WeightLayout::OutIn)
        } else {
            continue;
        };
        match n.op_type.as_str() {
            "MatMul" => {}
            "Gemm" => {
                if attr(n, "transA").is_some_and(|a| a.i != 0) {
                    continue;
                }
                if attr(n, "transB").is_some_and(|a| a.i != 0) {
                    layout = match layout {
                        WeightLayout::InOut => WeightLayout::OutIn,
                        WeightLayout::OutIn => WeightLayout::InOut,
                    };
                }
            }
            _ => continue,
        }
        let Some(module) = module_of(n) else {
            continue;
        };
        let layer = LinearLayer {
            module,
            weight: weight.to_string(),
            layout,
            node: node_label(n),
        };
        if !layers
            .iter()
            .any(|l| l.module == layer.module && l.weight == layer.weight)
        {
            layers.push(layer);
        }
    }
    layers
}

fn attr<'a>(n: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    n.attribute.iter().find(|a| a.name == name)
}

fn node_label(n: &NodeProto) -> String {
    match (n.name.is_empty(), n.output.first()) {
        (false, _) | (true, None) => n.name.clone(),
        (true, Some(o)) => o.clone(),
    }
}

/// The PyTorch module a node was exported from (see the module doc).
fn module_of(n: &NodeProto) -> Option<String> {
    let meta = |key: &str| {
        n.metadata_props
            .iter()
            .find(|p| p.key == key)
            .map(|p| python_str_list(&p.value))
    };
    if let (Some(scopes), Some(classes)) = (
        meta("pkg.torch.onnx.name_scopes"),
        meta("pkg.torch.onnx.class_hierarchy"),
    ) {
        if scopes.len() == classes.len() {
            return scopes
                .iter()
                .zip(&classes)
                .rev()
                .find(|(_, class)| !class.starts_with("aten.") && !class.starts_with("prims."))
                .map(|(scope, _)| scope.clone())
                .filter(|s| !s.is_empty());
        }
    }
    let path = n.name.strip_prefix('/')?;
    let (module, _op) = path.rsplit_once('/')?;
    (!module.is_empty()).then(|| module.replace('/', "."))
}

/// The strings of a Python list literal of plain strings (`['', 'model']`,
/// as the exporter writes its metadata); quotes are `'` or `"`, and a
/// backslash escapes the next character.
fn python_str_list(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            continue;
        }
        let mut s = String::new();
        while let Some(d) = chars.next() {
            match d {
                '\\' => s.extend(chars.next()),
                d if d == c => break,
                d => s.push(d),
            }
        }
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_protobuf::{StringStringEntryProto, TensorProto};

    fn init(name: &str, dims: &[i64]) -> TensorProto {
        let mut t = TensorProto::new();
        t.name = name.into();
        t.dims = dims.to_vec();
        t
    }

    fn node(op: &str, name: &str, inputs: &[&str], output: &str) -> NodeProto {
        let mut n = NodeProto::new();
        n.op_type = op.into();
        n.name = name.into();
        n.input = inputs.iter().map(|s| s.to_string()).collect();
        n.output = vec![output.into()];
        n
    }

    fn int_attr(name: &str, i: i64, ints: &[i64]) -> AttributeProto {
        let mut a = AttributeProto::new();
        a.name = name.into();
        a.i = i;
        a.ints = ints.to_vec();
        a
    }

    fn meta(n: &mut NodeProto, key: &str, value: &str) {
        let mut p = StringStringEntryProto::new();
        p.key = key.into();
        p.value = value.into();
        n.metadata_props.push(p);
    }

    #[test]
    fn reads_python_string_lists() {
        assert_eq!(
            python_str_list(r#"['', 'model', "a'b", 'c\'d']"#),
            vec!["", "model", "a'b", "c'd"]
        );
        assert!(python_str_list("[]").is_empty());
    }

    #[test]
    fn finds_layers_of_both_exporters_in_both_layouts() {
        let mut g = GraphProto::new();
        g.initializer = vec![
            init("onnx::MatMul_1", &[4, 8]),
            init("val_2", &[8, 4]),
            init("w3", &[6, 4]),
            init("bias", &[8]),
        ];
        // TorchScript: named by scope, weight pre-transposed.
        g.node.push(node(
            "MatMul",
            "/model/layers.0/q_proj/MatMul",
            &["x", "onnx::MatMul_1"],
            "q",
        ));
        // Dynamo: metadata, weight behind a Transpose.
        let mut t = node("Transpose", "t", &["val_2"], "val_2_t");
        t.attribute.push(int_attr("perm", 0, &[1, 0]));
        g.node.push(t);
        let mut m = node("MatMul", "node_MatMul_7", &["q", "val_2_t"], "o");
        meta(
            &mut m,
            "pkg.torch.onnx.name_scopes",
            "['', 'model', 'model.layers.0.o_proj', 'linear']",
        );
        meta(
            &mut m,
            "pkg.torch.onnx.class_hierarchy",
            "['M', 'Model', 'torch.nn.modules.linear.Linear', 'aten.linear.default']",
        );
        g.node.push(m);
        // Gemm with transB = 1: the weight is [out, in].
        let mut gemm = node("Gemm", "/lm_head/Gemm", &["o", "w3", "bias"], "y");
        gemm.attribute.push(int_attr("transB", 1, &[]));
        g.node.push(gemm);
        // Not layers: an activation operand, a bias, a nameless node.
        g.node
            .push(node("MatMul", "/attn/MatMul", &["q", "o"], "s"));
        g.node
            .push(node("MatMul", "", &["x", "onnx::MatMul_1"], "z"));
        let layers = linear_layers(&g);
        let got: Vec<_> = layers
            .iter()
            .map(|l| (l.module.as_str(), l.weight.as_str(), l.layout))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "model.layers.0.q_proj",
                    "onnx::MatMul_1",
                    WeightLayout::InOut
                ),
                ("model.layers.0.o_proj", "val_2", WeightLayout::OutIn),
                ("lm_head", "w3", WeightLayout::OutIn),
            ]
        );
    }
}
