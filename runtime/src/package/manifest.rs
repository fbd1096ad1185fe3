//! The package manifest: protobuf messages, encoded with `prost`.
//!
//! The messages are declared here by hand (`#[derive(prost::Message)]`),
//! with no `.proto` file or build script; the tags below are the schema,
//! with the NPU's messages, which the NPU lowering declares beside the
//! code that makes them (`slmcc_backends::npu::lower`).
//! Fields are only ever added under new tags, so an older manifest decodes
//! in a newer runtime (missing fields take their defaults). Nothing here is
//! a map, so the encoding is deterministic: fields in tag order, repeated
//! fields in the order the compiler wrote them.

use slmcc_backends::npu::lower::{NpuWeight, ProductProgram};

/// Everything a package says about itself except the weights' bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Manifest {
    /// What built the package and for what it was built.
    #[prost(message, optional, tag = "1")]
    pub versions: Option<VersionSet>,
    /// The options the package was compiled with.
    #[prost(message, optional, tag = "2")]
    pub options: Option<TargetOptions>,
    /// The module's name (`@llama`).
    #[prost(string, tag = "3")]
    pub module: String,
    /// The symbolic graph the buckets were made from (`main`): what a
    /// runtime dispatches over.
    #[prost(string, tag = "4")]
    pub entry: String,
    /// One entry per bucket graph, smallest bucket first.
    #[prost(message, repeated, tag = "5")]
    pub buckets: Vec<BucketEntry>,
    /// The file name of the model the package was compiled from.
    #[prost(string, tag = "6")]
    pub source: String,
    /// The SHA-256 of that model file.
    #[prost(bytes = "vec", tag = "7")]
    pub source_sha256: Vec<u8>,
    /// The weights' integrity table (written by [`super::encode_to`]).
    #[prost(message, optional, tag = "8")]
    pub weight_sections: Option<WeightSections>,
    /// `--target rk3588`: the weights stored in the NPU's layout, in name
    /// order, with what the NPU's products need of them besides their
    /// bytes (a message of the NPU lowering's).
    #[prost(message, repeated, tag = "9")]
    pub npu_weights: Vec<NpuWeight>,
    /// The model card (JSON; `slmcc report PKG --card`): the source's
    /// provenance, the pipeline, the quantization per node, the buckets'
    /// memory, the placement and the estimates. Empty when none was
    /// written.
    #[prost(string, tag = "10")]
    pub card: String,
    /// `compile --encrypt`: how the weights are encrypted
    /// ([`super::encryption`]); `npu_weights` is then empty, sealed in it.
    #[prost(message, optional, tag = "11")]
    pub encryption: Option<super::encryption::Encryption>,
}

/// A list of NPU weights as one message (what an encrypted package seals).
#[derive(Clone, PartialEq, prost::Message)]
pub struct NpuWeights {
    #[prost(message, repeated, tag = "1")]
    pub weights: Vec<NpuWeight>,
}

/// The weights blob cut into sections of `section_bytes` (the last one
/// shorter), each with its SHA-256, in order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WeightSections {
    /// Every section's length but the last one's.
    #[prost(uint64, tag = "1")]
    pub section_bytes: u64,
    /// Each section's SHA-256.
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub sha256: Vec<Vec<u8>>,
}

/// The version set: a runtime refuses a package whose runtime ABI is not
/// its own; the other fields say what produced the package.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionSet {
    /// `slmcc 0.1.0`.
    #[prost(string, tag = "1")]
    pub compiler: String,
    /// The target: `cpu` or `rk3588`.
    #[prost(string, tag = "2")]
    pub target: String,
    /// The kernel library the kernels (or the runtime's JIT) implement
    /// ([`slmcc_backends::cpu::KERNEL_LIBRARY`]).
    #[prost(string, tag = "3")]
    pub kernel_library: String,
    /// The ISA of the carried kernels: a target triple
    /// (`aarch64-unknown-linux-gnu`), or `host-jit` when the package
    /// carries none and the runtime compiles them from the IR at load.
    #[prost(string, tag = "4")]
    pub isa: String,
    /// The runtime ABI: what the runtime must implement to run the package
    /// (this manifest's meaning, the kernel calling convention, the
    /// executor's regions). See [`super::RUNTIME_ABI`].
    #[prost(uint32, tag = "5")]
    pub runtime_abi: u32,
}

/// The options of `slmcc compile` that shaped the package.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TargetOptions {
    /// `--cpu`: `host` or `aarch64`.
    #[prost(string, tag = "1")]
    pub cpu: String,
    /// `--quant`: `none`.
    #[prost(string, tag = "2")]
    pub quant: String,
    /// The pass pipeline that ran, as a pipeline string.
    #[prost(string, tag = "3")]
    pub pipeline: String,
    /// The bucket sizes, ascending.
    #[prost(uint64, repeated, tag = "4")]
    pub buckets: Vec<u64>,
    /// Whether matmul-like kernels use fused multiply-add.
    #[prost(bool, tag = "5")]
    pub fma: bool,
    /// The calibration set of a calibrated quantization (`--calib`): the
    /// SHA-256 of the token ids used (little-endian i64) and their windows,
    /// `sha256 <hex>, 128 windows of 128 tokens`; empty without one.
    #[prost(string, tag = "6")]
    pub calibration: String,
}

/// One bucket graph.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketEntry {
    /// The graph's name (`main_128`).
    #[prost(string, tag = "1")]
    pub graph: String,
    /// The symbol the bucket binds (`seq`).
    #[prost(string, tag = "2")]
    pub symbol: String,
    /// The value bound to it.
    #[prost(uint64, tag = "3")]
    pub size: u64,
    /// The graph as textual IR: a module holding the weight declarations,
    /// this graph, its bucket record and its memory plan (`plan @...`), as
    /// `slmcc opt` prints it.
    #[prost(string, tag = "4")]
    pub ir: String,
    /// Ahead-of-time kernels for the board, if compiled (`--cpu aarch64`).
    #[prost(message, optional, tag = "5")]
    pub kernels: Option<KernelObject>,
    /// `--target rk3588`: the register program of every product the
    /// placement puts on the NPU, in node order (a message of the NPU
    /// lowering's, `slmcc_backends::npu::lower`, whose tags belong to this
    /// schema too). Tag 6 held the programs of an older, modelled ISA and
    /// is not used again.
    #[prost(message, repeated, tag = "7")]
    pub npu: Vec<ProductProgram>,
    /// The fingerprint of the host kernels the compiler lowered this graph
    /// to (`slmcc_backends::cpu::fingerprint`): a runtime that would
    /// JIT-compile other kernels for it refuses the package unless told
    /// to run it anyway. Empty in packages made before fingerprints.
    #[prost(bytes = "vec", tag = "8")]
    pub kernel_fingerprint: Vec<u8>,
}

/// A relocatable object file with one kernel per node of a bucket graph.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KernelObject {
    /// The target triple (`aarch64-unknown-linux-gnu`).
    #[prost(string, tag = "1")]
    pub triple: String,
    /// The ELF object's bytes.
    #[prost(bytes = "vec", tag = "2")]
    pub object: Vec<u8>,
    /// The kernels it defines, in schedule order.
    #[prost(message, repeated, tag = "3")]
    pub symbols: Vec<KernelSymbol>,
}

/// The kernel of one node.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KernelSymbol {
    /// The node's index in the graph's schedule.
    #[prost(uint32, tag = "1")]
    pub node: u32,
    /// The exported function (`slmcc_main_128_3_matmul`).
    #[prost(string, tag = "2")]
    pub symbol: String,
}
