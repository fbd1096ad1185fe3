//! The op import functions, registered by ONNX op name per domain.
//!
//! Each family of ops has a small file with a `register` function that
//! inserts its import functions into the map of its domain
//! ([`register_all_ops`]). An import function reads the node through its
//! [`Ctx`] and returns one IR value per ONNX output it produces (in order);
//! an ONNX output that is used but not produced is an error.

use std::collections::HashMap;

use slmcc_ir::ValueId;

use super::context::{Ctx, R};

pub mod activation;
pub mod cast;
pub mod constant;
pub mod contrib;
pub mod contrib_rope;
pub mod elementwise;
pub mod gather;
pub mod gqa;
pub mod logic;
pub mod matmul;
pub mod mha;
pub mod misc;
pub mod norm;
pub mod reduce;
pub mod shape;
pub mod transformer;

/// Imports one ONNX node.
pub type ImportFn = for<'a, 'm> fn(&mut Ctx<'a, 'm>) -> R<Vec<ValueId>>;

/// Import functions by op name, for one domain.
pub type OpMap = HashMap<&'static str, ImportFn>;

/// Import functions per domain (the default domain is `""`).
pub struct Registry {
    domains: HashMap<&'static str, OpMap>,
}

impl Registry {
    /// The registry with every supported op.
    pub fn new() -> Registry {
        let mut domains = HashMap::new();
        let mut default = OpMap::new();
        register_all_ops(&mut default);
        contrib::register_default(&mut default);
        domains.insert("", default);
        let mut microsoft = OpMap::new();
        contrib::register(&mut microsoft);
        domains.insert(contrib::DOMAIN, microsoft);
        Registry { domains }
    }

    pub fn get(&self, domain: &str, op: &str) -> Option<ImportFn> {
        self.domains.get(domain)?.get(op).copied()
    }

    /// The ops of a domain, sorted (for documentation and tests).
    pub fn ops(&self, domain: &str) -> Vec<&'static str> {
        let mut v: Vec<_> = self
            .domains
            .get(domain)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }
}

impl Default for Registry {
    fn default() -> Registry {
        Registry::new()
    }
}

/// Registers the ops of the default ONNX domain.
pub fn register_all_ops(reg: &mut OpMap) {
    activation::register(reg);
    cast::register(reg);
    constant::register(reg);
    elementwise::register(reg);
    gather::register(reg);
    logic::register(reg);
    matmul::register(reg);
    misc::register(reg);
    norm::register(reg);
    reduce::register(reg);
    shape::register(reg);
    transformer::register(reg);
}

/// One result.
pub(crate) fn one(v: ValueId) -> R<Vec<ValueId>> {
    Ok(vec![v])
}
