//! Every pass, one module each. Each pass struct's doc comment states its
//! contract.

pub mod bucket_specialize;
pub mod canonicalize;
pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod eqsat_fuse;
pub mod kv_cache;
pub mod last_logits;
pub mod pack_weights;
pub mod partition;
pub mod plan_memory;
pub mod quantize;
pub mod shape_infer;
pub mod verify;
