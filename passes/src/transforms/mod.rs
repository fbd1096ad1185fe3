//! Every pass, one module each. Each pass struct's doc comment states its
//! contract.

pub mod const_fold;
pub mod cse;
pub mod dce;
pub mod shape_infer;
pub mod verify;
