//! What a bucket-specialized graph was made from.
//!
//! `bucket-specialize` turns a graph with a symbolic sequence length into
//! one graph per bucket (`@main` → `@main_128`, `@main_256`, ...) with the
//! symbol bound. Each new graph's [`BucketInfo`] (in
//! [`Module::buckets`](crate::Module), by graph name) keeps the symbolic
//! signature it was made from, so a runtime knows which axes of which inputs
//! and outputs follow the sequence length: it pads those axes of the inputs
//! up to the bucket and slices the outputs back to the real length.

use std::collections::HashMap;

use crate::dim::Dim;
use crate::shape::TensorType;

/// A graph made from `base` by binding `symbol` to `size`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketInfo {
    /// The name of the symbolic graph it was made from.
    pub base: String,
    /// The bound symbol (`seq`).
    pub symbol: String,
    /// The value bound to it: the bucket.
    pub size: i64,
    /// The base graph's input types, symbolic.
    pub inputs: Vec<TensorType>,
    /// The base graph's output types, symbolic.
    pub outputs: Vec<TensorType>,
}

impl BucketInfo {
    /// `ty` with the symbol bound to `value`.
    pub fn bind(&self, ty: &TensorType, value: i64) -> TensorType {
        let subst: HashMap<String, Dim> = [(self.symbol.clone(), Dim::fixed(value))].into();
        TensorType::new(ty.dtype, ty.shape.substitute(&subst))
    }

    /// The axes of `ty` whose dim is exactly the symbol: those a runtime pads
    /// and slices.
    pub fn symbol_axes(&self, ty: &TensorType) -> Vec<usize> {
        let s = Dim::sym(&self.symbol);
        (0..ty.rank()).filter(|&i| ty.shape.0[i] == s).collect()
    }
}
