//! The slmcc tensor IR.
//!
//! Owns the dtypes ([`DType`]), symbolic dims and shapes ([`Dim`], [`Shape`],
//! [`TensorType`]), concrete tensors ([`Tensor`]), the closed set of ops
//! ([`ops::Op`], each with inference and reference evaluation), graphs and
//! modules ([`Graph`], [`Module`]), the out-of-line weight store
//! ([`WeightStore`]), the verifier ([`verify`]), the textual form
//! ([`text::print_module`], [`text::parse_module`]), memory plans
//! ([`MemoryPlan`]), what bucket-specialized graphs were made from
//! ([`BucketInfo`]), the module's [`Phase`] and the RK3588 NPU's placement rules ([`placement`]).

pub mod attr;
pub mod bucket;
pub mod dim;
pub mod dtype;
pub mod graph;
pub mod ops;
pub mod phase;
pub mod placement;
pub mod plan;
pub mod shape;
pub mod tensor;
pub mod text;
pub mod verify;
pub mod weights;

pub use attr::{Attr, Attrs};
pub use bucket::BucketInfo;
pub use dim::Dim;
pub use dtype::DType;
pub use graph::{Graph, Module, Node, Producer, Value, ValueDef, ValueId};
pub use ops::{EvalCtx, Fact, Known, Op, OpDef, OpError};
pub use phase::Phase;
pub use plan::{MemoryPlan, PlanError, Region, RegionSizes, TensorPlan};
pub use shape::{Shape, TensorType};
pub use tensor::{Tensor, TensorData};
pub use verify::{verify_graph, verify_input, verify_module, VerifyError};
pub use weights::{WeightError, WeightStore};
