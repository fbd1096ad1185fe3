//! The JIT driver: compiles a graph's kernels for the host into a
//! `JITModule` and hands out callable function pointers.

use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage};
use slmcc_ir::Graph;

use super::compile::{compile_kernels, host_isa, KernelSpec};
use super::hostgemm;
use super::math::host_symbols;
use super::{CpuError, CpuOptions};

/// A kernel as the host calls it: the buffer pointer array in, a status out.
pub type KernelFn = unsafe extern "C" fn(bufs: *const *mut u8) -> i32;

/// A compiled kernel of a [`JitProgram`].
#[derive(Clone, Debug)]
pub struct JitKernel {
    pub spec: KernelSpec,
    pub func: KernelFn,
}

/// The kernels of one graph, in schedule order, with the JIT memory that
/// holds their code (freed on drop).
pub struct JitProgram {
    module: Option<JITModule>,
    pub kernels: Vec<JitKernel>,
}

impl std::fmt::Debug for JitProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitProgram")
            .field("kernels", &self.kernels.len())
            .finish()
    }
}

impl JitProgram {
    /// Compiles every node of `graph` (static shapes) for the host.
    pub fn compile(graph: &Graph, options: &CpuOptions) -> Result<JitProgram, CpuError> {
        // The integer dot-product kernel where the host has a fast path
        // (else the generated kernel is the faster one).
        let options = &CpuOptions {
            host_qgemm: options.host_qgemm && super::hostqgemm::fast(),
            ..*options
        };
        if options.host_gemm || options.host_qgemm {
            // The workers the kernels' host GEMMs may use exist before any
            // kernel runs (kernels do not allocate).
            super::threads::ensure_workers(options.threads);
        }
        let isa = host_isa()?;
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        let symbols = host_symbols()
            .into_iter()
            .chain(hostgemm::host_symbols())
            .chain(super::hostattn::host_symbols())
            .chain(super::hostqgemm::host_symbols());
        for (name, ptr) in symbols {
            builder.symbol(name, ptr);
        }
        let mut module = JITModule::new(builder);
        let specs = match compile_kernels(&mut module, graph, options, "k", Linkage::Local) {
            Ok(s) => s,
            Err(e) => {
                // SAFETY: nothing was finalised, no pointer into the module escaped.
                unsafe { module.free_memory() };
                return Err(e);
            }
        };
        module
            .finalize_definitions()
            .map_err(|e| CpuError::Codegen(format!("finalising: {e}")))?;
        let kernels = specs
            .into_iter()
            .map(|(spec, id)| {
                let ptr = module.get_finalized_function(id);
                // SAFETY: every kernel is defined with the signature
                // `fn(*const *mut u8) -> i32` in the platform's C calling
                // convention (`module.make_signature()`).
                let func = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
                JitKernel { spec, func }
            })
            .collect();
        Ok(JitProgram {
            module: Some(module),
            kernels,
        })
    }
}

impl Drop for JitProgram {
    fn drop(&mut self) {
        if let Some(m) = self.module.take() {
            // SAFETY: the kernels' function pointers live in `self` and die
            // with it; callers cannot hold them past the program (they are
            // only reachable through `&self`).
            unsafe { m.free_memory() };
        }
    }
}
