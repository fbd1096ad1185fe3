//! `matmul` (`f32`, NumPy batching and 1-D promotion) and the fused gated
//! MLPs `swiglu`/`geglu`, on one GEMM emitter.
//!
//! The GEMM computes `C[m, n] = A[m, k] · B[k, n]` for static `m, k, n`
//! with a register-tiled micro-kernel: `MR = 4` rows by `NV` `f32x4`
//! vectors of columns per `B` (the gated MLPs carry gate and up in one
//! tile), `NV` sized to the target's vector registers (x86-64: 4×8, or
//! 4×4 gate + 4×4 up; aarch64: 4×16, or 4×8 + 4×8). For each `k` the
//! micro-kernel broadcasts one `A` element per row and multiplies it into
//! the `B` vectors, accumulating in registers; its `k` loop walks `A` and
//! `B` by pointer increments, every load at an immediate offset. (Unrolling
//! it does not pay with Cranelift: the loads of all steps are scheduled
//! before the multiply-adds and the accumulators spill.)
//!
//! Large operands are blocked so the weights stream well:
//!
//! - **packed** (`m >= 64`, gated MLPs `m >= 8`): for each strip of
//!   `NR = 4·NV` columns and each block of `KC` rows of `B`, the strip is
//!   copied into a contiguous stack buffer (`KC · NR · 4` bytes per `B`,
//!   at most [`PACK_BYTES`] = 32 KiB), then every row block of `A` runs
//!   over it: the panel is read from L1
//!   `m / 4` times, with unit stride and no cache-set aliasing whatever
//!   `n` is. `KC = k` when the strip fits, else `k` is split: partial sums
//!   go to `C` and are reloaded by the next block. A gated MLP stores its
//!   up sums in a second stack buffer (`m · NR · 4` bytes, at most
//!   [`PARTIAL_BYTES`]) and applies the activation in a separate pass over
//!   the finished strip, which keeps the activation's many values out of
//!   the GEMM loop's registers.
//! - **direct** (fewer rows; the decode GEMV): no copy, `B` read in
//!   place, column strips outside and row blocks inside; below 4 rows,
//!   strips of 8 (x86-64) or 16 (aarch64) columns per `B`.
//!
//! Each output element is still accumulated in `k` order from `+0.0`, as
//! the reference does (blocking over `k` stores and reloads the exact
//! partial sum), so without FMA the result is bit-exact; with FMA (the
//! default where the ISA has it) each step rounds once instead of twice
//! and results differ by a few ulps.
//!
//! **Host GEMM** ([`KernelBuilder::host_gemm`], the JIT's default; never
//! in AOT objects nor with `CpuOptions::exact()`): a product of at least
//! [`HOST_GEMM_MIN_MACS`] multiply-adds and [`HOST_GEMM_MIN_N`] columns
//! is a call of `slmcc_sgemm` ([`crate::cpu::hostgemm`], the `gemm`
//! crate's micro-kernels, on the kernel's `CpuOptions::threads`) instead of generated
//! code; measured 1.3 to 6 times faster than the generated GEMM from there
//! on (see `docs/ARCHITECTURE.md`, "Host GEMM: crate vs generated").
//! A batched `matmul` makes one call per batch from the generated batch
//! loop (broadcast batches included). A gated MLP computes `gate` with one
//! call straight into its output, then `up` tile by tile (rows × columns,
//! at most [`HOST_UP_BYTES`] on the stack) followed by the generated
//! activation epilogue over the tile, `out = act(out) · up`.

use cranelift_codegen::ir::{types, FuncRef, InstBuilder, MemFlagsData, Value};
use cranelift_frontend::Variable;
use slmcc_ir::ops::gelu::GeluApprox;
use slmcc_ir::ops::glu::{Glu, GluKind};
use slmcc_ir::DType;

use super::{unsupported, NodeSig};
use crate::cpu::emit::{broadcast_strides, row_major, Access, KernelBuilder, Width};
use crate::cpu::hostgemm::SGEMM_SYMBOL;
use crate::cpu::math::MathFn;
use crate::cpu::CpuError;

/// Rows per tile.
const MR: usize = 4;

/// Fewest rows for which the `B` strips of a matmul are packed (with
/// fewer, reading `B` in place measured as fast on x86-64: the copy is
/// amortised over too few row blocks). Gated MLPs pack from [`MR`]`· 2`
/// rows on, for their separate activation pass.
const PACK_MIN_M: usize = 64;

/// Most stack bytes of one packed `B` strip block (all `B`s together).
pub const PACK_BYTES: usize = 32 * 1024;

/// Most stack bytes of the sums of a gated MLP's second product over one
/// strip (`m · NR · 4`); beyond, the direct path runs.
pub const PARTIAL_BYTES: usize = 128 * 1024;

/// Fewest multiply-adds (`m · n · k`, per batch) of a product that goes
/// to the host GEMM when [`KernelBuilder::host_gemm`] is set; smaller
/// ones stay generated. Measured (`examples/bench.rs` shapes and small
/// ones): the two break even around 4096 (the call, packing and tile
/// dispatch against fully unrolled generated code); from 16384 on the
/// host GEMM is 1.3 to 3 times faster, and more for large products.
pub const HOST_GEMM_MIN_MACS: usize = 1 << 14;

/// Fewest output columns for the host GEMM: with fewer than one 256-bit
/// vector of columns its micro-kernels run masked and the generated GEMM
/// is faster (`64×512×4`: 10 against 13 µs; `1×4096×4`: 5 against 17 µs).
pub const HOST_GEMM_MIN_N: usize = 8;

/// Most stack bytes of a gated MLP's `up` tile on the host GEMM path.
pub const HOST_UP_BYTES: usize = 128 * 1024;

/// Most rows of a gated MLP's `up` tile on the host GEMM path.
const UP_TILE_ROWS: usize = 512;

/// The columns of a gated MLP's `up` tile are a multiple of this (one
/// AVX-512 panel of the host GEMM), and at least this many.
const UP_TILE_COLS: usize = 64;

/// Whether an `m × k × n` product goes to the host GEMM.
fn host_product(kb: &KernelBuilder, m: usize, k: usize, n: usize) -> bool {
    kb.host_gemm && n >= HOST_GEMM_MIN_N && m * k * n >= HOST_GEMM_MIN_MACS
}

/// Declares [`crate::cpu::hostgemm::slmcc_sgemm`] for this kernel.
fn import_sgemm(kb: &mut KernelBuilder) -> Result<FuncRef, CpuError> {
    let i64s = [types::I64; 9];
    let params: Vec<types::Type> = i64s.into_iter().chain([types::I32; 2]).collect();
    kb.import_host(SGEMM_SYMBOL, &params, &[])
}

/// Emits `slmcc_sgemm(m, n, k, a, lda, b, ldb, c, ldc, accumulate,
/// threads)`, `threads` the kernel's own ([`KernelBuilder::threads`]).
#[allow(clippy::too_many_arguments)]
fn call_sgemm(
    kb: &mut KernelBuilder,
    f: FuncRef,
    (m, n, k): (usize, usize, usize),
    a: Value,
    lda: usize,
    b: Value,
    ldb: usize,
    c: Value,
    ldc: usize,
) {
    let dims = [m, n, k].map(|d| kb.iconst(d as i64));
    let (lda, ldb, ldc) = (
        kb.iconst(lda as i64),
        kb.iconst(ldb as i64),
        kb.iconst(ldc as i64),
    );
    let acc = kb.b.ins().iconst(types::I32, 0);
    let threads = kb.b.ins().iconst(types::I32, kb.threads as i64);
    let args = [
        dims[0], dims[1], dims[2], a, lda, b, ldb, c, ldc, acc, threads,
    ];
    kb.b.ins().call(f, &args);
}

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

/// Where a micro-kernel reads `B`: per `B`, a pointer at the tile's first
/// column and first `k`, and the byte stride from one `k` to the next.
#[derive(Clone)]
struct BSrc {
    ptrs: Vec<Value>,
    /// Byte offset of `B` number `bi` from its pointer (packed: all share
    /// one pointer).
    offsets: Vec<i64>,
    row_bytes: i64,
}

/// Where the running sums of a tile start from and go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The only `k` block: from zero, epilogue applied.
    Whole,
    /// The first of several: from zero, partial sums stored.
    First,
    /// A middle block: partial sums loaded and stored.
    Middle,
    /// The last block: partial sums loaded, epilogue applied.
    Last,
}

impl Phase {
    fn of(first: bool, last: bool) -> Phase {
        match (first, last) {
            (true, true) => Phase::Whole,
            (true, false) => Phase::First,
            (false, false) => Phase::Middle,
            (false, true) => Phase::Last,
        }
    }
}

/// One micro-kernel call.
struct Tile {
    mr: usize,
    nv: usize,
    w: Width,
    /// `A` at the tile's first row and the block's first `k`.
    a: Value,
    b: BSrc,
    /// `C` at the tile's first row and column.
    c: Value,
    /// Partial sums of the second `B` (gated MLPs blocked over `k`): the
    /// tile's first row and column in a `[m, NR]` buffer, and its row
    /// stride in bytes.
    partial: Option<(Value, i64)>,
    kc: usize,
    phase: Phase,
}

fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

impl Gemm<'_, '_> {
    fn emit(&mut self, kb: &mut KernelBuilder, a: Value, c: Value) -> Result<(), CpuError> {
        if self.m == 0 || self.n == 0 {
            return Ok(());
        }
        let nb = self.bs.len();
        // Accumulators the tile may hold: half the vector registers.
        let acc = kb.vector_regs() / 2;
        let nv = if self.m < MR {
            // Decode (GEMV) is bound by the weights' bandwidth: 8 columns
            // per B on x86-64 (16 on aarch64). Wider strips measured no
            // better on x86-64, and at 32 columns an accumulator spills.
            (acc / 4 / (self.m.max(1) * nb)).clamp(1, 8)
        } else {
            (acc / (MR * nb)).max(1)
        };
        let nr = 4 * nv;
        let strips = self.n / nr;
        let mut at = 0;
        if strips > 0 {
            let min_m = if nb > 1 { 2 * MR } else { PACK_MIN_M };
            let packed = self.m >= min_m && self.packed(kb, a, c, nv, strips)?;
            if !packed {
                self.direct(kb, a, c, nv, Width::Vector(4), 0, strips)?;
            }
            at = strips * nr;
        }
        let rest = (self.n - at) / 4;
        if rest > 0 {
            self.direct(kb, a, c, rest, Width::Vector(4), at, 1)?;
            at += 4 * rest;
        }
        for col in at..self.n {
            self.direct(kb, a, c, 1, Width::Scalar, col, 1)?;
        }
        Ok(())
    }

    /// Row blocks of `MR` (then the remaining rows) over one column tile:
    /// `tile(rows, row0)` emits one micro-kernel.
    fn rows(
        &mut self,
        kb: &mut KernelBuilder,
        mut tile: impl FnMut(&mut Self, &mut KernelBuilder, usize, Value) -> Result<(), CpuError>,
    ) -> Result<(), CpuError> {
        let mr = MR.min(self.m);
        let full = self.m / mr;
        kb.for_n(full, |kb, rb| {
            let row0 = kb.b.ins().imul_imm_s(rb, mr as i64);
            tile(self, kb, mr, row0)
        })?;
        let rem = self.m - full * mr;
        if rem > 0 {
            let row0 = kb.iconst((full * mr) as i64);
            tile(self, kb, rem, row0)?;
        }
        Ok(())
    }

    /// Columns `col0 + j·4·nv` for `j < strips`, `B` read in place.
    #[allow(clippy::too_many_arguments)]
    fn direct(
        &mut self,
        kb: &mut KernelBuilder,
        a: Value,
        c: Value,
        nv: usize,
        w: Width,
        col0: usize,
        strips: usize,
    ) -> Result<(), CpuError> {
        let nr = (nv * w.lanes()) as i64;
        let nb = self.bs.len();
        kb.for_n(strips, |kb, j| {
            let col = kb.b.ins().imul_imm_s(j, nr);
            let col = kb.b.ins().iadd_imm_s(col, col0 as i64);
            let bcols: Vec<Value> = self
                .bs
                .clone()
                .iter()
                .map(|bm| kb.index(bm.base, col, 4))
                .collect();
            let ccol = kb.index(c, col, 4);
            let ld = self.bs[0].ld;
            self.rows(kb, |g, kb, mr, row0| {
                let ar = kb.index(a, row0, g.lda * 4);
                let cr = kb.index(ccol, row0, g.ldc * 4);
                let tile = Tile {
                    mr,
                    nv,
                    w,
                    a: ar,
                    b: BSrc {
                        ptrs: bcols.clone(),
                        offsets: vec![0; nb],
                        row_bytes: ld * 4,
                    },
                    c: cr,
                    partial: None,
                    kc: g.k,
                    phase: Phase::Whole,
                };
                g.micro(kb, &tile)
            })
        })
    }

    /// The packed path over `strips` strips of `4·nv` columns; `false`
    /// (nothing emitted) when its scratch would exceed the limits.
    fn packed(
        &mut self,
        kb: &mut KernelBuilder,
        a: Value,
        c: Value,
        nv: usize,
        strips: usize,
    ) -> Result<bool, CpuError> {
        let nb = self.bs.len();
        let nr = 4 * nv;
        let strip_row = nr * 4 * nb;
        let kc = if self.k * strip_row <= PACK_BYTES {
            self.k
        } else {
            PACK_BYTES / strip_row
        };
        // A gated MLP keeps its second product's sums in a stack buffer and
        // applies the activation in a pass of its own after the strip: the
        // epilogue's many values then never compete with the accumulators
        // for registers (on x86-64 they made the GEMM loop spill).
        let partial_bytes = self.m * nr * 4 * (nb - 1);
        if kc == 0 || partial_bytes > PARTIAL_BYTES {
            return Ok(false);
        }
        let pack = kb.stack_buf((kc.max(1) * strip_row) as u32);
        let partial = (nb > 1).then(|| kb.stack_buf(partial_bytes as u32));
        let ld = self.bs[0].ld;
        kb.for_n(strips, |kb, j| {
            let col = kb.b.ins().imul_imm_s(j, nr as i64);
            let bcols: Vec<Value> = self
                .bs
                .clone()
                .iter()
                .map(|bm| kb.index(bm.base, col, 4))
                .collect();
            let ccol = kb.index(c, col, 4);
            let mut pc = 0;
            while pc < self.k {
                let kcur = kc.min(self.k - pc);
                // Pack rows pc..pc + kcur of the strip: row kk of B number
                // bi goes to pack[(kk · nb + bi) · nr ..].
                let srcs: Vec<Value> = bcols
                    .iter()
                    .map(|&bc| kb.offset(bc, pc as i64 * ld * 4))
                    .collect();
                kb.for_n(kcur, |kb, kk| {
                    let dst = kb.index(pack, kk, strip_row as i64);
                    for (bi, &src) in srcs.iter().enumerate() {
                        let row = kb.index(src, kk, ld * 4);
                        for v in 0..nv {
                            let x = kb.b.ins().load(types::F32X4, flags(), row, (16 * v) as i32);
                            let off = (bi * nr * 4 + 16 * v) as i32;
                            kb.b.ins().store(flags(), x, dst, off);
                        }
                    }
                    Ok(())
                })?;
                // With a separate epilogue pass, every block stores sums.
                let last = pc + kcur == self.k && partial.is_none();
                let phase = Phase::of(pc == 0, last);
                self.rows(kb, |g, kb, mr, row0| {
                    let ar = kb.index(a, row0, g.lda * 4);
                    let ar = kb.offset(ar, pc as i64 * 4);
                    let cr = kb.index(ccol, row0, g.ldc * 4);
                    let part = partial.map(|p| {
                        let pr = kb.index(p, row0, (nr * 4) as i64);
                        (pr, (nr * 4) as i64)
                    });
                    let tile = Tile {
                        mr,
                        nv,
                        w: Width::Vector(4),
                        a: ar,
                        b: BSrc {
                            ptrs: vec![pack],
                            offsets: (0..nb).map(|bi| (bi * nr * 4) as i64).collect(),
                            row_bytes: strip_row as i64,
                        },
                        c: cr,
                        partial: part,
                        kc: kcur,
                        phase,
                    };
                    g.micro(kb, &tile)
                })?;
                pc += kcur;
            }
            if let Some(p) = partial {
                self.strip_epilogue(kb, ccol, p, nv)?;
            }
            Ok(())
        })?;
        Ok(true)
    }

    /// `C = epilogue(C, partial)` over the `m` rows of a strip of `4·nv`
    /// columns (gated MLPs: gate sums in `C`, up sums in `partial`).
    fn strip_epilogue(
        &mut self,
        kb: &mut KernelBuilder,
        ccol: Value,
        partial: Value,
        nv: usize,
    ) -> Result<(), CpuError> {
        let w = Width::Vector(4);
        let ty = w.ty(types::F32);
        let (ldc, ldp) = (self.ldc * 4, (nv * 16) as i64);
        kb.for_n(self.m, |kb, r| {
            let crow = kb.index(ccol, r, ldc);
            let prow = kb.index(partial, r, ldp);
            for v in 0..nv {
                let off = (16 * v) as i32;
                let g = kb.b.ins().load(ty, flags(), crow, off);
                let u = kb.b.ins().load(ty, flags(), prow, off);
                let out = (self.epilogue)(kb, &[g, u], w)?;
                kb.b.ins().store(flags(), out, crow, off);
            }
            Ok(())
        })
    }

    /// One `mr × (nv · lanes)` tile over `kc` steps of `k`.
    fn micro(&mut self, kb: &mut KernelBuilder, t: &Tile) -> Result<(), CpuError> {
        let (mr, nv, w, nb) = (t.mr, t.nv, t.w, self.bs.len());
        let ty = w.ty(types::F32);
        let lanes = w.lanes() as i64;
        let lda = self.lda * 4;
        let ldc = self.ldc * 4;
        let slot = |r: usize, v: usize, b: usize| (r * nv + v) * nb + b;
        // Where the running sum of (r, v, b) is kept between k blocks.
        let home = |r: usize, v: usize, b: usize| -> (Value, i32) {
            let off = (v as i64 * lanes * 4) as i32;
            match (b, t.partial) {
                (0, _) => (t.c, r as i32 * ldc as i32 + off),
                (_, Some((p, stride))) => (p, r as i32 * stride as i32 + off),
                _ => unreachable!("a second B only stores its sums with a partial buffer"),
            }
        };
        let mut acc: Vec<Variable> = Vec::with_capacity(mr * nv * nb);
        let zero = kb.f32c(0.0, w);
        for r in 0..mr {
            for v in 0..nv {
                for b in 0..nb {
                    let var = kb.b.declare_var(ty);
                    let init = match t.phase {
                        Phase::Whole | Phase::First => zero,
                        Phase::Middle | Phase::Last => {
                            let (base, off) = home(r, v, b);
                            kb.b.ins().load(ty, flags(), base, off)
                        }
                    };
                    kb.b.def_var(var, init);
                    debug_assert_eq!(acc.len(), slot(r, v, b));
                    acc.push(var);
                }
            }
        }
        let fma = kb.fma;
        let a_var = kb.b.declare_var(types::I64);
        kb.b.def_var(a_var, t.a);
        let b_vars: Vec<Variable> =
            t.b.ptrs
                .iter()
                .map(|&p| {
                    let var = kb.b.declare_var(types::I64);
                    kb.b.def_var(var, p);
                    var
                })
                .collect();
        let b_of = |bi: usize| if t.b.ptrs.len() == 1 { 0 } else { bi };
        // One k step at the current pointers.
        let step = |kb: &mut KernelBuilder| {
            let ap = kb.b.use_var(a_var);
            let bps: Vec<Value> = b_vars.iter().map(|&v| kb.b.use_var(v)).collect();
            let mut bv = Vec::with_capacity(nv * nb);
            for v in 0..nv {
                for bi in 0..nb {
                    let off = t.b.offsets[bi] + v as i64 * lanes * 4;
                    bv.push(kb.b.ins().load(ty, flags(), bps[b_of(bi)], off as i32));
                }
            }
            for r in 0..mr {
                let off = r as i64 * lda;
                let x = kb.b.ins().load(types::F32, flags(), ap, off as i32);
                let x = kb.splat(x, w);
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
        };
        let advance = |kb: &mut KernelBuilder| {
            let ap = kb.b.use_var(a_var);
            let ap = kb.b.ins().iadd_imm_s(ap, 4);
            kb.b.def_var(a_var, ap);
            for &var in &b_vars {
                let bp = kb.b.use_var(var);
                let bp = kb.b.ins().iadd_imm_s(bp, t.b.row_bytes);
                kb.b.def_var(var, bp);
            }
        };
        kb.for_n(t.kc, |kb, _| {
            step(kb);
            advance(kb);
            Ok(())
        })?;
        let finish = matches!(t.phase, Phase::Whole | Phase::Last);
        for r in 0..mr {
            for v in 0..nv {
                let sums: Vec<Value> = (0..nb).map(|b| kb.b.use_var(acc[slot(r, v, b)])).collect();
                if finish {
                    let out = (self.epilogue)(kb, &sums, w)?;
                    let (base, off) = home(r, v, 0);
                    kb.b.ins().store(flags(), out, base, off);
                } else {
                    for (b, &s) in sums.iter().enumerate() {
                        let (base, off) = home(r, v, b);
                        kb.b.ins().store(flags(), s, base, off);
                    }
                }
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
    if host_product(kb, m, k, n) {
        // One call per batch (broadcast batches included): the batch loop
        // stays generated.
        let f = import_sgemm(kb)?;
        return kb.nest(&batch, &accesses, None, |kb, p, _| {
            call_sgemm(kb, f, (m, n, k), p[0].addr, k, p[1].addr, n, p[2].addr, n);
            Ok(())
        });
    }
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
                let sg = kb.sigmoid(g, w)?;
                kb.b.ins().fmul(g, sg)
            }
            GluKind::GeGlu(GeluApprox::None) => kb.math(MathFn::GeluErf, &[g], w)?,
            GluKind::GeGlu(GeluApprox::Tanh) => kb.math(MathFn::GeluTanh, &[g], w)?,
        };
        Ok(kb.b.ins().fmul(a, u))
    };
    let xb = kb.buf(0);
    kb.local_constants = true;
    if host_product(kb, rows, hidden, inter) {
        return host_glu(kb, (rows, hidden, inter), xb, &bs, out_buf, &mut epi);
    }
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

/// A gated MLP on the host GEMM: `gate = x · w_gate` straight into the
/// output, then, tile by tile (rows × columns, at most [`HOST_UP_BYTES`]),
/// `up = x · w_up` into a stack buffer and the activation epilogue
/// `out = act(out) · up` over the tile, generated.
fn host_glu(
    kb: &mut KernelBuilder,
    (rows, hidden, inter): (usize, usize, usize),
    x: Value,
    bs: &[BMat],
    out: Value,
    epi: &mut Epilogue,
) -> Result<(), CpuError> {
    let f = import_sgemm(kb)?;
    let (gate, up) = (bs[0], bs[1]);
    let ldb = gate.ld as usize;
    call_sgemm(
        kb,
        f,
        (rows, inter, hidden),
        x,
        hidden,
        gate.base,
        ldb,
        out,
        inter,
    );
    let max_elems = HOST_UP_BYTES / 4;
    // Tall, narrow tiles: every row (up to `UP_TILE_ROWS`) of a strip of
    // columns, so that each call packs its strip of `w_up` once and every
    // row tile of `x` runs over it (short, wide tiles packed the same
    // columns again for every block of rows).
    let (tr, tc) = if rows * inter <= max_elems {
        (rows, inter)
    } else {
        let tr = rows.min(UP_TILE_ROWS);
        let tc = (max_elems / tr / UP_TILE_COLS * UP_TILE_COLS).max(UP_TILE_COLS);
        (rows.min(max_elems / tc).max(1), tc.min(inter))
    };
    let ubuf = kb.stack_buf((tr * tc * 4) as u32);
    let (full_r, rem_r) = (rows / tr, rows % tr);
    let (full_c, rem_c) = (inter / tc, inter % tc);
    // One tile of `rr × cc` at row `r0`, column `c0`.
    let mut tile = |kb: &mut KernelBuilder, r0: Value, rr: usize, c0: Value, cc: usize| {
        let xr = kb.index(x, r0, (hidden * 4) as i64);
        let ub = kb.index(up.base, c0, 4);
        call_sgemm(kb, f, (rr, cc, hidden), xr, hidden, ub, ldb, ubuf, cc);
        let orow0 = kb.index(out, r0, (inter * 4) as i64);
        let ocol0 = kb.index(orow0, c0, 4);
        epilogue_tile(kb, ocol0, inter, ubuf, rr, cc, epi)
    };
    // Row blocks of `rr` rows at `r0`: full column strips, then the rest.
    let mut block = |kb: &mut KernelBuilder, r0: Value, rr: usize| {
        kb.for_n(full_c, |kb, cb| {
            let c0 = kb.b.ins().imul_imm_s(cb, tc as i64);
            tile(kb, r0, rr, c0, tc)
        })?;
        if rem_c > 0 {
            let c0 = kb.iconst((full_c * tc) as i64);
            tile(kb, r0, rr, c0, rem_c)?;
        }
        Ok(())
    };
    kb.for_n(full_r, |kb, rb| {
        let r0 = kb.b.ins().imul_imm_s(rb, tr as i64);
        block(kb, r0, tr)
    })?;
    if rem_r > 0 {
        let r0 = kb.iconst((full_r * tr) as i64);
        block(kb, r0, rem_r)?;
    }
    Ok(())
}

/// `out[r, c] = epi(out[r, c], up[r, c])` over `rr × cc` elements: `out`
/// with row stride `ldo` elements, `up` contiguous (`cc` per row).
fn epilogue_tile(
    kb: &mut KernelBuilder,
    out: Value,
    ldo: usize,
    up: Value,
    rr: usize,
    cc: usize,
    epi: &mut Epilogue,
) -> Result<(), CpuError> {
    let vecs = cc / 4;
    kb.for_n(rr, |kb, r| {
        let orow = kb.index(out, r, (ldo * 4) as i64);
        let urow = kb.index(up, r, (cc * 4) as i64);
        let w = Width::Vector(4);
        let ty = w.ty(types::F32);
        kb.for_n(vecs, |kb, v| {
            let o = kb.index(orow, v, 16);
            let u = kb.index(urow, v, 16);
            let g = kb.b.ins().load(ty, flags(), o, 0);
            let uv = kb.b.ins().load(ty, flags(), u, 0);
            let y = epi(kb, &[g, uv], w)?;
            kb.b.ins().store(flags(), y, o, 0);
            Ok(())
        })?;
        for j in 4 * vecs..cc {
            let off = (4 * j) as i32;
            let g = kb.b.ins().load(types::F32, flags(), orow, off);
            let uv = kb.b.ins().load(types::F32, flags(), urow, off);
            let y = epi(kb, &[g, uv], Width::Scalar)?;
            kb.b.ins().store(flags(), y, orow, off);
        }
        Ok(())
    })
}
