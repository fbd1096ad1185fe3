//! The ONNX frontend: an ONNX model file to a [`Module`] with one graph,
//! `main`.
//!
//! - **Model** ([`import_model`]): the file is parsed as a `ModelProto`. The
//!   default domain (`""` or `ai.onnx`) must be imported at an opset from
//!   [`MIN_OPSET`] to [`MAX_OPSET`]; other domains are only reachable through
//!   the model's local functions (`ModelProto.functions`, as the dynamo
//!   exporter writes them), which are inlined at their call sites.
//! - **Graph inputs** keep their ONNX names and order. Dims come from
//!   `dim_value`, or `dim_param` made into a symbol (non-identifier
//!   characters become `_`, reserved words such as `f32` or `inf` get a `_`
//!   appended, distinct params never share a symbol), or a fresh symbol
//!   `unk0`, `unk1`, ... when the dim is missing.
//! - **Initializers** (the rule): a float tensor (`f32`, `f16`, `bf16`) of
//!   rank >= 2 or with more than [`MAX_FLOAT_CONSTANT`] elements becomes a
//!   module weight named after the initializer (held in memory,
//!   `module.weights.insert`, referenced as `@name`; a float weight whose
//!   data is in an external file is mapped from that file instead, not
//!   read); so does an integer or
//!   bool tensor with more than [`MAX_INT_CONSTANT`] elements (quantized
//!   matrices, large tables). Everything else — small float vectors and
//!   scalars, and the integer tensors of the shape bookkeeping — becomes a
//!   `constant` node named after the initializer, so that inference knows
//!   its value and the bookkeeping folds. Both are created where first used;
//!   initializers nothing uses are dropped. `Constant` nodes follow the same
//!   rule (a large one becomes a weight named after its output).
//! - **Nodes** are imported in file order, which ONNX requires to be
//!   topological; a node using a value not defined yet is an error (that is
//!   how cycles are reported). Each op has an import function in [`ops`],
//!   registered by name per domain; it reads the attributes (an attribute it
//!   does not know is an error), may require operand values at compile time,
//!   and builds IR nodes whose result types come from the ops' inference. The
//!   last IR node an ONNX node expands to carries the ONNX output name;
//!   intermediate ones get fresh names derived from it.
//! - **Graph outputs** are the ONNX graph outputs, in order.
//!
//! Errors ([`ImportError`]) name the file and, when a node is at fault, the
//! node, its op and opset.

pub mod context;
mod graph;
pub mod linears;
pub mod ops;
pub mod provenance;
pub mod tensor;
pub mod wire;

#[cfg(test)]
mod testutil;

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use onnx_protobuf::{Message, ModelProto, TensorProto};
use slmcc_ir::{Module, Tensor};

/// Lowest supported opset of the default domain.
pub const MIN_OPSET: i64 = 13;
/// Highest supported opset of the default domain.
pub const MAX_OPSET: i64 = 24;
/// Float initializers up to this many elements (rank 0 or 1) become constants.
pub const MAX_FLOAT_CONSTANT: usize = 64;
/// Integer and bool initializers up to this many elements become constants.
pub const MAX_INT_CONSTANT: usize = 1024;

/// Why an import failed.
///
/// Displays as `{file}: node {node}: {reason}` when a node is at fault, where
/// `node` reads `` `name` (OpType, opset N) `` (the node's name, or its first
/// output when it has none), else as `{file}: {reason}`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ImportError {
    pub file: PathBuf,
    pub node: Option<String>,
    pub reason: String,
}

impl ImportError {
    pub(crate) fn new(file: &Path, reason: impl Into<String>) -> ImportError {
        ImportError {
            file: file.to_path_buf(),
            node: None,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(n) = &self.node {
            write!(f, "node {n}: ")?;
        }
        f.write_str(&self.reason)
    }
}

/// Imports an ONNX model file into a [`Module`] with one graph named `main`;
/// initializers become weights held in memory or, when small or integer,
/// `constant` nodes (see the module doc for the rule). External data is
/// resolved relative to the model's folder.
pub fn import_model(path: &Path) -> Result<Module, ImportError> {
    import_model_proto(parse_model(path)?, path)
}

/// [`import_model`], and the model's linear layers by PyTorch module
/// ([`linears`]), which a LoRA adapter is merged into.
pub fn import_model_with_layers(
    path: &Path,
) -> Result<(Module, Vec<linears::LinearLayer>), ImportError> {
    let model = parse_model(path)?;
    let layers = linears::linear_layers(&model.graph);
    Ok((import_model_proto(model, path)?, layers))
}

/// Reads and parses an ONNX model file (its wire format checked first).
fn parse_model(path: &Path) -> Result<ModelProto, ImportError> {
    let file = fs::File::open(path)
        .map_err(|e| ImportError::new(path, format!("cannot read the file: {e}")))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(ImportError::new(
            path,
            "is a folder, not an ONNX model file",
        ));
    }
    // Parsed from a read-only mapping, so the file's bytes are not held
    // twice; its wire format is checked first (`wire`).
    // SAFETY: read-only; a model file changed by another process while it
    // is imported is outside what we defend against (as for packages).
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| ImportError::new(path, format!("cannot read the file: {e}")))?;
    wire::check_group_nesting(&map, wire::Kind::Model)
        .map_err(|e| ImportError::new(path, format!("not a valid ONNX model: {e}")))?;
    let model = ModelProto::parse_from_bytes(&map)
        .map_err(|e| ImportError::new(path, format!("not a valid ONNX model: {e}")))?;
    drop(map);
    Ok(model)
}

/// Imports a parsed model; `path` names it in messages and its folder holds
/// the external data. The model is consumed so that each initializer's
/// bytes are freed as soon as they are decoded.
pub fn import_model_proto(model: ModelProto, path: &Path) -> Result<Module, ImportError> {
    graph::import(model, path, &model_dir(path))
}

/// Reads a serialized `TensorProto` (an ONNX test's `input_0.pb`): its name
/// (may be empty) and value. External data is resolved beside the file.
pub fn read_tensor_pb(path: &Path) -> Result<(String, Tensor), ImportError> {
    let bytes =
        fs::read(path).map_err(|e| ImportError::new(path, format!("cannot read the file: {e}")))?;
    wire::check_group_nesting(&bytes, wire::Kind::Tensor)
        .map_err(|e| ImportError::new(path, format!("not a valid TensorProto: {e}")))?;
    let proto = TensorProto::parse_from_bytes(&bytes)
        .map_err(|e| ImportError::new(path, format!("not a valid TensorProto: {e}")))?;
    let tensor = tensor::decode_tensor(&proto, &model_dir(path)).map_err(|e| {
        let what = if proto.name.is_empty() {
            "tensor".to_string()
        } else {
            format!("tensor `{}`", proto.name)
        };
        ImportError::new(path, format!("{what}: {e}"))
    })?;
    Ok((proto.name, tensor))
}

/// The folder a model's relative paths are resolved against.
fn model_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}
