//! Ops that move, select or describe elements without arithmetic: reshaping and
//! transposing, slicing, gathering, concatenation and splitting,
//! `shape`/`size`, and the ops that make values (`constant`,
//! `constant_of_shape`, `range`, `trilu`, `identity`).

pub mod concat;
pub mod constant;
pub mod constant_of_shape;
pub mod expand;
pub mod gather;
pub mod gather_elements;
pub mod gather_nd;
pub mod identity;
pub mod range;
pub mod reshape;
pub mod shape_of;
pub mod size;
pub mod slice;
pub mod split;
pub mod squeeze;
pub mod transpose;
pub mod trilu;
pub mod unsqueeze;
