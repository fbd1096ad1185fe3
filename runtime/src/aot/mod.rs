//! The kernels of a package's ahead-of-time object, loaded into this
//! process: no compiler runs at load.
//!
//! `slmcc compile --cpu aarch64` stores per bucket an ELF relocatable
//! object (`slmcc_backends::cpu::aot`) with one exported kernel per node.
//! On a machine of the object's architecture [`AotKernels::load`] maps it
//! ([`loaded::LoadedObject`]: sections placed, relocations applied,
//! [`reloc`]; code made executable and the instruction cache flushed,
//! [`icache`]), resolves the helpers it imports (the math functions of
//! `slmcc_backends::cpu::math` and the quantized products of
//! `slmcc_backends::cpu::hostqgemm`) and gives the executor one kernel per
//! node, as [`crate::jit::JitKernels`] does for JIT code.

pub mod icache;
pub mod loaded;
pub mod reloc;

use std::collections::HashMap;
use std::rc::Rc;

use slmcc_backends::cpu::hostqgemm;
use slmcc_backends::cpu::math::host_symbols;
use slmcc_backends::cpu::KernelFn;
use slmcc_ir::Graph;

use crate::exec::{Kernel, KernelSet};
use crate::native::native_kernel;
pub use loaded::{host_architecture, LoadedObject};

/// The target triple of objects this process can load, if any.
pub fn host_triple() -> Option<&'static str> {
    match (std::env::consts::ARCH, std::env::consts::OS) {
        ("aarch64", "linux") => Some("aarch64-unknown-linux-gnu"),
        ("x86_64", "linux") => Some("x86_64-unknown-linux-gnu"),
        _ => None,
    }
}

/// The kernels of one graph, from a loaded object.
pub struct AotKernels {
    object: Rc<LoadedObject>,
    by_node: HashMap<usize, KernelFn>,
}

impl AotKernels {
    /// Loads `object` and finds the kernel of each `(node, symbol)`.
    pub fn load(object: &[u8], kernels: &[(usize, String)]) -> Result<AotKernels, String> {
        let helpers: HashMap<&str, u64> = host_symbols()
            .into_iter()
            .chain(hostqgemm::host_symbols())
            .map(|(name, ptr)| (name, ptr as u64))
            .collect();
        let loaded = LoadedObject::load(object, &|name| helpers.get(name).copied())?;
        let mut by_node = HashMap::new();
        for (node, symbol) in kernels {
            let ptr = loaded
                .symbol(symbol)
                .ok_or_else(|| format!("the object defines no kernel `{symbol}`"))?;
            // SAFETY: the compiler exported `symbol` as a kernel of the cpu
            // backend's ABI; the pointer is into the object's code pages.
            let f: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
            by_node.insert(*node, f);
        }
        Ok(AotKernels {
            object: Rc::new(loaded),
            by_node,
        })
    }
}

impl KernelSet for AotKernels {
    fn kernel(&self, _graph: &Graph, node: usize) -> Result<Kernel, String> {
        let f = *self
            .by_node
            .get(&node)
            .ok_or_else(|| format!("the object has no kernel for node {node}"))?;
        // SAFETY: the object was compiled from this graph with its static
        // shapes (the package's digests tie them); `object` keeps the code.
        Ok(unsafe { native_kernel(f, self.object.clone()) })
    }
}
