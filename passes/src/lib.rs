//! The slmcc pass infrastructure and passes.
//!
//! A pass is a plain struct implementing [`Pass`]; [`registry::PASSES`] is
//! the one list of every pass with its options; [`pipeline::parse_pipeline`]
//! reads pipeline strings such as `shape-infer,const-fold{max-elements=64},dce`;
//! [`runner::PassManager`] runs them with verification, IR dumps, timing,
//! statistics and a bisect limit, and enforces what each registry entry
//! declares about the module's [`slmcc_ir::Phase`] (the phase it requires,
//! what it invalidates). Each pass lives in its own module under
//! [`transforms`]; the memory planner behind `plan-memory` is [`memory`];
//! [`specialize`] binds a graph's symbols to numbers (before a backend
//! with static kernels runs it).

pub mod eqsat;
pub mod facts;
pub mod memory;
pub mod options;
pub mod pass;
pub mod pipeline;
pub mod registry;
pub mod runner;
pub mod specialize;
pub mod transforms;

pub use options::{OptionKind, OptionSpec, PassOptions};
pub use pass::{Invalidates, Pass, PassError, Requires, Statistic, Statistics};
pub use pipeline::{parse_pipeline, PipelineEntry};
pub use registry::{create_pass, PassInfo, PASSES};
pub use runner::{run_pipeline, PassManager, PassRecord, PrintAfter, RunOptions};
pub use specialize::specialize;
