//! The fused transformer ops that `eqsat-fuse` (and the importer, for the ONNX
//! ops that name them) introduce in place of their decomposed graphs, the KV
//! cache ops that `kv-cache` builds, and the helpers they share.

pub mod add_layer_norm;
pub mod add_rms_norm;
pub mod attention;
pub mod fused_util;
pub mod gelu;
pub mod glu;
pub mod kv_cache;
pub mod rope;
pub mod softcap;
