//! Ahead-of-time compilation: a graph's kernels as a relocatable object
//! file for another target — `aarch64-unknown-linux-gnu` (the RK3588's A76
//! cores) is what ships to the board.
//!
//! Each kernel is an exported function `{prefix}_{node}_{mnemonic}` with the
//! kernel ABI of [`super`]; constants are read-only data of the object; the
//! math helpers are undefined symbols (`slmcc_expf`, ...) that the runtime
//! linking the object provides ([`super::math`] defines them); the host
//! GEMM ([`super::hostgemm`]) is never called, whatever the options say:
//! matrix products use the generated GEMM. The object is
//! position independent. `slmcc compile --cpu aarch64` puts one per bucket
//! in the package; loading it on the board is the runtime's part, still to
//! come.

use cranelift_codegen::isa;
use cranelift_module::{default_libcall_names, Linkage};
use cranelift_object::{ObjectBuilder, ObjectModule};
use slmcc_ir::Graph;

use super::compile::{compile_kernels, flags, KernelSpec};
use super::{CpuError, CpuOptions};

/// The target the board runs.
pub const AARCH64_LINUX: &str = "aarch64-unknown-linux-gnu";

/// An object file and the kernels it defines, in schedule order.
#[derive(Clone, Debug)]
pub struct AotObject {
    pub bytes: Vec<u8>,
    pub kernels: Vec<KernelSpec>,
}

/// Compiles every node of `graph` (static shapes) for `triple` into an
/// object file whose kernel symbols start with `prefix`.
pub fn compile_object(
    graph: &Graph,
    triple: &str,
    prefix: &str,
    options: &CpuOptions,
) -> Result<AotObject, CpuError> {
    let parsed: target_lexicon::Triple = triple
        .parse()
        .map_err(|e| CpuError::Codegen(format!("target `{triple}`: {e}")))?;
    let isa = isa::lookup(parsed)
        .map_err(|e| CpuError::Codegen(format!("target `{triple}`: {e}")))?
        .finish(flags(true))
        .map_err(|e| CpuError::Codegen(format!("target `{triple}`: {e}")))?;
    let builder = ObjectBuilder::new(isa, prefix.as_bytes().to_vec(), default_libcall_names())
        .map_err(|e| CpuError::Codegen(format!("object for `{triple}`: {e}")))?;
    let mut module = ObjectModule::new(builder);
    // The host GEMM is a function of this process, not of the target: an
    // object keeps the generated GEMM. `slmcc_qgemm` is the loading
    // runtime's, on as many threads as it sets (`threads` 0).
    let options = CpuOptions {
        host_gemm: false,
        threads: 0,
        ..*options
    };
    let kernels = compile_kernels(&mut module, graph, &options, prefix, Linkage::Export)?
        .into_iter()
        .map(|(spec, _)| spec)
        .collect();
    let bytes = module
        .finish()
        .emit()
        .map_err(|e| CpuError::Codegen(format!("writing the object: {e}")))?;
    Ok(AotObject { bytes, kernels })
}
