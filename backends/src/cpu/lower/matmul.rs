//! `matmul` (`f32`, NumPy batching and 1-D promotion) and the fused gated
//! MLPs `swiglu`/`geglu`, on one register-tiled GEMM emitter.
//!
//! The GEMM computes `C[m, n] = A[m, k] · B[k, n]` for static `m, k, n`:
//! rows in blocks of 4, columns in blocks of two `f32x4` vectors (one when
//! two `B` matrices share the tile, as the gated MLPs do), then one vector,
//! then scalar columns. For each tile the `k` loop broadcasts one `A`
//! element per row and multiplies it into the `B` vectors, accumulating in
//! registers; the tile is stored once. Each output element is accumulated
//! in `k` order from `+0.0`, as the reference does, so without FMA the
//! result is bit-exact; with FMA (the default where the ISA has it) each
//! step rounds once instead of twice and results differ by a few ulps.

use cranelift_codegen::ir::{types, InstBuilder, Value};
use cranelift_frontend::Variable;
use slmcc_ir::ops::gelu::GeluApprox;
use slmcc_ir::ops::glu::{Glu, GluKind};
use slmcc_ir::DType;

use super::{unsupported, NodeSig};
use crate::cpu::emit::{broadcast_strides, row_major, Access, KernelBuilder, Ptr, Width};
use crate::cpu::math::MathFn;
use crate::cpu::CpuError;

/// Rows per tile.
const MR: usize = 4;

/// One `B` operand of a GEMM: its first column and its row stride (elements).
#[derive(Clone, Copy)]
struct BMat {
    base: Value,
    ld: i64,
}

/// The combination of the accumulated products (one per `B`) into the
/// stored value.
type Epilogue<'f> = dyn FnMut(&mut KernelBuilder, &[Value], Width) -> Result<Value, CpuError> + 'f;

struct Gemm<'e, 'f> {
    m: usize,
    k: usize,
    n: usize,
    lda: i64,
    ldc: i64,
    bs: Vec<BMat>,
    epilogue: &'e mut Epilogue<'f>,
}

impl Gemm<'_, '_> {
    fn emit(&mut self, kb: &mut KernelBuilder, a: Value, c: Value) -> Result<(), CpuError> {
        let full = self.m / MR;
        let (lda, ldc) = (self.lda * 4, self.ldc * 4);
        kb.for_n(full, |kb, rb| {
            let a_rows = kb.index(a, rb, MR as i64 * lda);
            let c_rows = kb.index(c, rb, MR as i64 * ldc);
            self.rows(kb, MR, a_rows, c_rows)
        })?;
        let rem = self.m % MR;
        if rem > 0 {
            let a_rows = kb.offset(a, (full * MR) as i64 * lda);
            let c_rows = kb.offset(c, (full * MR) as i64 * ldc);
            self.rows(kb, rem, a_rows, c_rows)?;
        }
        Ok(())
    }

    /// All columns of `mr` rows.
    fn rows(
        &mut self,
        kb: &mut KernelBuilder,
        mr: usize,
        a: Value,
        c: Value,
    ) -> Result<(), CpuError> {
        let nv = if self.bs.len() == 1 { 2 } else { 1 };
        let wide = 4 * nv;
        let blocks = self.n / wide;
        kb.for_n(blocks, |kb, j| {
            let col = kb.b.ins().imul_imm_s(j, wide as i64 * 4);
            self.tile(kb, mr, nv, Width::Vector(4), a, c, Some(col), 0)
        })?;
        let mut at = blocks * wide;
        if nv == 2 && self.n - at >= 4 {
            self.tile(kb, mr, 1, Width::Vector(4), a, c, None, at)?;
            at += 4;
        }
        if self.bs.len() > 1 || nv == 1 {
            while self.n - at >= 4 {
                self.tile(kb, mr, 1, Width::Vector(4), a, c, None, at)?;
                at += 4;
            }
        }
        for col in at..self.n {
            self.tile(kb, mr, 1, Width::Scalar, a, c, None, col)?;
        }
        Ok(())
    }

    /// One `mr × (nv · lanes)` tile at byte column `col` (dynamic) plus
    /// element column `col0` (static).
    #[allow(clippy::too_many_arguments)]
    fn tile(
        &mut self,
        kb: &mut KernelBuilder,
        mr: usize,
        nv: usize,
        w: Width,
        a: Value,
        c: Value,
        col: Option<Value>,
        col0: usize,
    ) -> Result<(), CpuError> {
        let ty = w.ty(types::F32);
        let at_col = |kb: &mut KernelBuilder, base: Value| {
            let base = match col {
                Some(cv) => kb.b.ins().iadd(base, cv),
                None => base,
            };
            kb.offset(base, col0 as i64 * 4)
        };
        let bcols: Vec<Value> = self.bs.clone().iter().map(|b| at_col(kb, b.base)).collect();
        let nb = self.bs.len();
        // acc[r][v][b]
        let zero = kb.f32c(0.0, w);
        let mut acc: Vec<Variable> = Vec::with_capacity(mr * nv * nb);
        for _ in 0..mr * nv * nb {
            let var = kb.b.declare_var(ty);
            kb.b.def_var(var, zero);
            acc.push(var);
        }
        let slot = |r: usize, v: usize, b: usize| (r * nv + v) * nb + b;
        let lanes = w.lanes() as i32;
        let lda = self.lda * 4;
        let bs = self.bs.clone();
        let fma = kb.fma;
        kb.for_n(self.k, |kb, kk| {
            let mut bv = Vec::with_capacity(nv * nb);
            for v in 0..nv {
                for (bi, bm) in bs.iter().enumerate() {
                    let row = kb.index(bcols[bi], kk, bm.ld * 4);
                    let p = kb.offset(row, (v as i32 * lanes * 4) as i64);
                    bv.push(kb.load(
                        types::F32,
                        Ptr {
                            addr: p,
                            splat: false,
                        },
                        w,
                    ));
                }
            }
            for r in 0..mr {
                let arow = kb.offset(a, r as i64 * lda);
                let ap = kb.index(arow, kk, 4);
                let x = kb.load(
                    types::F32,
                    Ptr {
                        addr: ap,
                        splat: true,
                    },
                    w,
                );
                for v in 0..nv {
                    for b in 0..nb {
                        let var = acc[slot(r, v, b)];
                        let sum = kb.b.use_var(var);
                        let y = bv[v * nb + b];
                        let next = if fma {
                            kb.b.ins().fma(x, y, sum)
                        } else {
                            let p = kb.b.ins().fmul(x, y);
                            kb.b.ins().fadd(sum, p)
                        };
                        kb.b.def_var(var, next);
                    }
                }
            }
            Ok(())
        })?;
        let ccol = at_col(kb, c);
        for r in 0..mr {
            let crow = kb.offset(ccol, r as i64 * self.ldc * 4);
            for v in 0..nv {
                let sums: Vec<Value> = (0..nb).map(|b| kb.b.use_var(acc[slot(r, v, b)])).collect();
                let out = (self.epilogue)(kb, &sums, w)?;
                let p = kb.offset(crow, (v as i32 * lanes * 4) as i64);
                kb.store(
                    out,
                    Ptr {
                        addr: p,
                        splat: false,
                    },
                );
            }
        }
        Ok(())
    }
}

pub fn matmul(kb: &mut KernelBuilder, sig: &NodeSig) -> Result<(), CpuError> {
    let (a, b) = (&sig.inputs[0], &sig.inputs[1]);
    if a.dtype != DType::F32 {
        return Err(unsupported("matmul", format!("on {}", a.dtype)));
    }
    let mut ash = a.shape.clone();
    let mut bsh = b.shape.clone();
    if ash.len() == 1 {
        ash.insert(0, 1);
    }
    if bsh.len() == 1 {
        bsh.push(1);
    }
    let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
    let n = bsh[bsh.len() - 1];
    let (ab, bb) = (&ash[..ash.len() - 2], &bsh[..bsh.len() - 2]);
    let rank = ab.len().max(bb.len());
    let batch: Vec<usize> = (0..rank)
        .map(|i| {
            let pick = |s: &[usize]| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
            pick(ab).max(pick(bb))
        })
        .collect();
    let scale = |st: Vec<i64>, by: usize| st.into_iter().map(|s| s * by as i64).collect();
    let accesses = [
        Access {
            base: kb.buf(0),
            strides: scale(broadcast_strides(ab, &batch), m * k),
            elem_bytes: 4,
        },
        Access {
            base: kb.buf(1),
            strides: scale(broadcast_strides(bb, &batch), k * n),
            elem_bytes: 4,
        },
        Access {
            base: kb.buf(2),
            strides: scale(row_major(&batch), m * n),
            elem_bytes: 4,
        },
    ];
    kb.nest(&batch, &accesses, None, |kb, p, _| {
        let mut id = |_: &mut KernelBuilder, s: &[Value], _: Width| Ok(s[0]);
        Gemm {
            m,
            k,
            n,
            lda: k as i64,
            ldc: n as i64,
            bs: vec![BMat {
                base: p[1].addr,
                ld: n as i64,
            }],
            epilogue: &mut id,
        }
        .emit(kb, p[0].addr, p[2].addr)
    })
}

/// `swiglu`/`geglu`: `act(x · w_gate) · (x · w_up)`, both products in one
/// tile; with one fused `[hidden, 2·inter]` weight, `up` starts at column
/// `inter`.
pub fn glu(kb: &mut KernelBuilder, op: &Glu, sig: &NodeSig) -> Result<(), CpuError> {
    let x = &sig.inputs[0];
    if x.dtype != DType::F32 {
        return Err(unsupported(
            match op.kind {
                GluKind::SwiGlu => "swiglu",
                GluKind::GeGlu(_) => "geglu",
            },
            format!("on {}", x.dtype),
        ));
    }
    let hidden = x.shape[x.shape.len() - 1];
    let rows: usize = x.shape[..x.shape.len() - 1].iter().product();
    let inter = *sig.outputs[0].shape.last().expect("rank >= 1");
    let out_buf = kb.buf(sig.inputs.len());
    let bs = match sig.inputs.len() {
        3 => vec![
            BMat {
                base: kb.buf(1),
                ld: inter as i64,
            },
            BMat {
                base: kb.buf(2),
                ld: inter as i64,
            },
        ],
        _ => {
            let gu = kb.buf(1);
            let up = kb.offset(gu, inter as i64 * 4);
            vec![
                BMat {
                    base: gu,
                    ld: 2 * inter as i64,
                },
                BMat {
                    base: up,
                    ld: 2 * inter as i64,
                },
            ]
        }
    };
    let kind = op.kind;
    let mut epi = move |kb: &mut KernelBuilder, s: &[Value], w: Width| {
        let (g, u) = (s[0], s[1]);
        let a = match kind {
            GluKind::SwiGlu => {
                let sg = kb.math(MathFn::Sigmoid, &[g], w)?;
                kb.b.ins().fmul(g, sg)
            }
            GluKind::GeGlu(GeluApprox::None) => kb.math(MathFn::GeluErf, &[g], w)?,
            GluKind::GeGlu(GeluApprox::Tanh) => kb.math(MathFn::GeluTanh, &[g], w)?,
        };
        Ok(kb.b.ins().fmul(a, u))
    };
    let xb = kb.buf(0);
    Gemm {
        m: rows,
        k: hidden,
        n: inter,
        lda: hidden as i64,
        ldc: inter as i64,
        bs,
        epilogue: &mut epi,
    }
    .emit(kb, xb, out_buf)
}
