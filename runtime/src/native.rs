//! Calling a kernel of the cpu backend's ABI (`int32_t k(uint8_t *const
//! *bufs)`, see `slmcc_backends::cpu`) from the executor, whether the JIT
//! made it ([`crate::jit::JitKernels`]) or it was loaded from a package's
//! object ([`crate::aot::AotKernels`]).

use std::rc::Rc;

use slmcc_backends::cpu::emit::{
    status_message, STATUS_CONTEXT_FULL, STATUS_DIVISION_BY_ZERO, STATUS_INDEX_OUT_OF_RANGE,
};
use slmcc_backends::cpu::KernelFn;

use crate::exec::{Kernel, KernelArgs, KernelError};

/// Most operands and results a kernel is passed without allocating (the
/// pointer array lives on the stack).
const MAX_BUFFERS: usize = 32;

/// The executor's kernel for `f`: operand and result pointers in the
/// node's order, the status mapped to an error; `alive` (the code `f`
/// lives in) is kept as long as the kernel.
///
/// # Safety
///
/// `f` must be a kernel of the cpu backend's ABI compiled for the static
/// shapes of the node the executor calls it for, and stay valid while
/// `alive` lives.
pub unsafe fn native_kernel<T: ?Sized + 'static>(f: KernelFn, alive: Rc<T>) -> Kernel {
    Box::new(move |args: &KernelArgs<'_>| {
        let _alive = &alive;
        let n = args.inputs.len() + args.outputs.len();
        if n > MAX_BUFFERS {
            return Err(KernelError(
                "more operands than the cpu kernel adapter passes",
            ));
        }
        let mut ptrs = [std::ptr::null_mut::<u8>(); MAX_BUFFERS];
        for (p, t) in ptrs.iter_mut().zip(args.inputs.iter().chain(args.outputs)) {
            *p = t.ptr;
        }
        // SAFETY: by the function's contract `f` was compiled for this
        // node's static shapes; the executor passes one valid pointer per
        // operand and result (in-place results alias their operand
        // exactly, which the element-wise and copy kernels allow: each
        // element is read before it is written); `alive` keeps the code.
        match unsafe { f(ptrs.as_ptr()) } as i64 {
            0 => Ok(()),
            STATUS_INDEX_OUT_OF_RANGE => Err(KernelError("index out of range")),
            STATUS_CONTEXT_FULL => Err(KernelError(status_message(STATUS_CONTEXT_FULL))),
            STATUS_DIVISION_BY_ZERO => Err(KernelError(status_message(STATUS_DIVISION_BY_ZERO))),
            _ => Err(KernelError("cpu kernel failed")),
        }
    })
}
