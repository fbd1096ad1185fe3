//! `qswiglu`: the gated MLP by quantized weights (see
//! `slmcc_ir::ops::qswiglu` for the semantics), on the `qmatmul` kernel's
//! code ([`super::qmatmul`]): every row of `x` is quantized once, then per
//! strip of 16 output columns (or per column in the tail) the gate sums and
//! the up sums are computed exactly as `qmatmul` computes each, and the
//! epilogue `(g · sigmoid(g)) · u` (two rounded products, no FMA) writes
//! the result. With the fused `[K, 2·N]` weight the gate reads columns
//! `0 .. N` and the up columns `N .. 2·N` of the same buffers.
//!
//! With [`KernelBuilder::host_qgemm`] the whole op is one call of the
//! runtime's `slmcc_qgemm` (`crate::cpu::hostqgemm`), bit-exact, its
//! sigmoid the reference's.
//!
//! Otherwise the sums are bit-exact with the reference; the sigmoid is
//! [`KernelBuilder::sigmoid`]: the reference's function (the
//! `slmcc_sigmoidf` helper) with `CpuOptions::exact()`, which makes the
//! kernel bit-exact, and the inline vector sigmoid under `fast_math` (the
//! default), within ~1e-6 relative, as `swiglu` and `sigmoid` lower it.

use cranelift_codegen::ir::InstBuilder;
use slmcc_ir::ops::qmatmul::QActivations;
use slmcc_ir::ops::qswiglu::QSwiGlu;
use slmcc_ir::DType;

use super::qmatmul::{call_qgemm, check_operands, host_qgemm, products, Dims, QCols};
use super::{unsupported, NodeSig};
use crate::cpu::emit::KernelBuilder;
use crate::cpu::CpuError;

/// Emits the kernel of `qswiglu` `op`.
pub fn qswiglu(kb: &mut KernelBuilder, op: &QSwiGlu, sig: &NodeSig) -> Result<(), CpuError> {
    let name = "qswiglu";
    let mm = op.qmatmul();
    let inconsistent = || unsupported(name, "with inconsistent shapes");
    if sig.outputs.len() != 1 {
        return Err(unsupported(name, "with other than 1 result"));
    }
    let ins = &sig.inputs;
    let (d, ws) = match ins.len() {
        3 => {
            let (rows, k, n2) = check_operands(name, &mm, &ins[0], &ins[1], &ins[2])?;
            if n2 % 2 == 1 {
                return Err(inconsistent());
            }
            let n = n2 / 2;
            let (q, scale) = (kb.buf(1), kb.buf(2));
            let half = |col0| QCols {
                q,
                scale,
                stride: n2,
                col0,
            };
            ((rows, k, n), vec![half(0), half(n)])
        }
        5 => {
            let (rows, k, n) = check_operands(name, &mm, &ins[0], &ins[1], &ins[2])?;
            if check_operands(name, &mm, &ins[0], &ins[3], &ins[4])? != (rows, k, n) {
                return Err(inconsistent());
            }
            let cols = |q, scale| QCols {
                q,
                scale,
                stride: n,
                col0: 0,
            };
            let ws = vec![cols(kb.buf(1), kb.buf(2)), cols(kb.buf(3), kb.buf(4))];
            ((rows, k, n), ws)
        }
        _ => return Err(unsupported(name, "with other than 3 or 5 operands")),
    };
    let (rows, k, n) = d;
    let y = &sig.outputs[0];
    if y.dtype != DType::F32 || y.shape.iter().product::<usize>() != rows * n {
        return Err(inconsistent());
    }
    let d = Dims {
        rows,
        k,
        n,
        group: mm.group as usize,
        int4: mm.weight_dtype() == DType::I4,
        layout: mm.layout,
        weight_only: mm.activations == QActivations::F32,
    };
    let (x, out) = (kb.buf(0), kb.buf(ins.len()));
    if host_qgemm(kb, &d)? {
        return call_qgemm(kb, &d, x, &ws, out);
    }
    products(kb, &d, x, &ws, out, &mut |kb, s, w| {
        let (g, u) = (s[0], s[1]);
        let sg = kb.sigmoid(g, w)?;
        let a = kb.b.ins().fmul(g, sg);
        Ok(kb.b.ins().fmul(a, u))
    })
}
