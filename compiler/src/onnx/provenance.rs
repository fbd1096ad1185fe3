//! What an ONNX file says about where it came from: the exporter
//! (`producer_name`, `producer_version`), the IR version, the opsets, the
//! model's domain, version and doc string, and its metadata
//! (`metadata_props`, where a licence is recorded when there is one).
//! The model card of a package records it (`slmcc report PKG --card`).
//!
//! Read with a message that declares only those fields of `ModelProto`
//! (`onnx.proto`: tags 1–6, 8 and 14): the graph (tag 7) and everything
//! else is skipped over without being decoded, so reading a model's
//! provenance costs one walk over its top-level fields.

use std::path::Path;

use prost::Message;

use super::ImportError;

/// A model's provenance (see the module doc).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Provenance {
    pub ir_version: i64,
    pub producer_name: String,
    pub producer_version: String,
    pub domain: String,
    pub model_version: i64,
    pub doc_string: String,
    /// `(domain, version)`; the default domain as `ai.onnx`.
    pub opsets: Vec<(String, i64)>,
    /// `metadata_props`, in file order.
    pub metadata: Vec<(String, String)>,
}

impl Provenance {
    /// The licence the metadata states (a key `license` or `licence`, in
    /// any case), with the key it was found under.
    pub fn licence(&self) -> Option<(&str, &str)> {
        self.metadata
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("license") || k.eq_ignore_ascii_case("licence"))
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct ModelHeader {
    #[prost(int64, tag = "1")]
    ir_version: i64,
    #[prost(string, tag = "2")]
    producer_name: String,
    #[prost(string, tag = "3")]
    producer_version: String,
    #[prost(string, tag = "4")]
    domain: String,
    #[prost(int64, tag = "5")]
    model_version: i64,
    #[prost(string, tag = "6")]
    doc_string: String,
    #[prost(message, repeated, tag = "8")]
    opset_import: Vec<OpsetId>,
    #[prost(message, repeated, tag = "14")]
    metadata_props: Vec<StringPair>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct OpsetId {
    #[prost(string, tag = "1")]
    domain: String,
    #[prost(int64, tag = "2")]
    version: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StringPair {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(string, tag = "2")]
    value: String,
}

/// The provenance of the ONNX model file at `path`.
pub fn read_provenance(path: &Path) -> Result<Provenance, ImportError> {
    let fail = |e: String| ImportError::new(path, e);
    let file = std::fs::File::open(path).map_err(|e| fail(format!("cannot read the file: {e}")))?;
    // SAFETY: read-only, as in `import_model`.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| fail(format!("cannot read the file: {e}")))?;
    super::wire::check_group_nesting(&map, super::wire::Kind::Model)
        .map_err(|e| fail(format!("not a valid ONNX model: {e}")))?;
    let h =
        ModelHeader::decode(&map[..]).map_err(|e| fail(format!("not a valid ONNX model: {e}")))?;
    Ok(Provenance {
        ir_version: h.ir_version,
        producer_name: h.producer_name,
        producer_version: h.producer_version,
        domain: h.domain,
        model_version: h.model_version,
        doc_string: h.doc_string,
        opsets: h
            .opset_import
            .into_iter()
            .map(|o| {
                let domain = if o.domain.is_empty() {
                    "ai.onnx".to_string()
                } else {
                    o.domain
                };
                (domain, o.version)
            })
            .collect(),
        metadata: h
            .metadata_props
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_protobuf::{ModelProto, OperatorSetIdProto, StringStringEntryProto};
    use protobuf::Message as _;

    #[test]
    fn reads_the_exporter_opsets_and_licence_and_skips_the_graph() {
        let mut m = ModelProto::new();
        m.ir_version = 8;
        m.producer_name = "pytorch".into();
        m.producer_version = "2.5.1".into();
        let mut o = OperatorSetIdProto::new();
        o.version = 18;
        m.opset_import.push(o);
        let mut o = OperatorSetIdProto::new();
        o.domain = "com.microsoft".into();
        o.version = 1;
        m.opset_import.push(o);
        let mut p = StringStringEntryProto::new();
        p.key = "License".into();
        p.value = "apache-2.0".into();
        m.metadata_props.push(p);
        let mut g = onnx_protobuf::GraphProto::new();
        g.name = "main".into();
        m.graph = protobuf::MessageField::some(g);
        let path =
            std::env::temp_dir().join(format!("slmcc-provenance-{}.onnx", std::process::id()));
        std::fs::write(&path, m.write_to_bytes().unwrap()).unwrap();
        let p = read_provenance(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(p.ir_version, 8);
        assert_eq!(
            (p.producer_name.as_str(), p.producer_version.as_str()),
            ("pytorch", "2.5.1")
        );
        assert_eq!(
            p.opsets,
            vec![
                ("ai.onnx".to_string(), 18),
                ("com.microsoft".to_string(), 1)
            ]
        );
        assert_eq!(p.licence(), Some(("License", "apache-2.0")));
    }
}
