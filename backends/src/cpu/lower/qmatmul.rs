//! `qmatmul`: f32 activations times an `i8` or `i4` weight, with the op's
//! per-token INT8 quantization of the activations and exact `i32`
//! accumulation per group of `G` rows (see `slmcc_ir::ops::qmatmul` for
//! the semantics, which this kernel reproduces bit for bit).
//!
//! Buffers: `x: f32[.., M, K]`, `q: [K, N]` (`i8`, or `i4` packed two per
//! byte, low nibble first, in row-major element order, as
//! `Tensor::to_le_bytes` writes weights), `scale: f32[K / G, N]`, and the
//! result `y: f32[.., M, N]`. Every row of `x` (one token) runs on its own:
//!
//! 1. `lo`/`hi`: one scalar pass, compare-and-select so that NaN elements
//!    are skipped as `f32::min`/`max` skip them;
//! 2. `s`, `z` and `zi = z as i32` in scalar `f32`, in the reference's
//!    operations; rounding half to even is `(|v| + 2^23) - 2^23` with the
//!    sign put back (`|v| < 2^23`; larger values are integers already), so
//!    no `nearest` instruction or libcall is needed on any target;
//! 3. `xq[k] - zi` as `i32` into a stack scratch of `4·K` bytes (at most
//!    [`SCRATCH_BYTES`]; for a longer `K` it is recomputed where it is
//!    used, once per column strip);
//! 4. the product, by strips of 16 output columns: per group, four `i32x4`
//!    accumulators start at zero; per row `k` of the group, 16 weights are
//!    loaded (16 `i8` bytes, or 8 `i4` bytes whose nibbles are spread to
//!    bytes and sign-extended as `(n ^ 8) - 8`), widened to `i16x8`,
//!    multiplied by the splatted `xq[k] - zi` (`|·| <= 255 · 128 < 2^15`,
//!    exact in `i16`) and widened into the `i32` accumulators. After the
//!    group, `f32x4` sums (from `+0.0`) add `acc as f32 · (s · scale[g, n])`
//!    — both products rounded separately, no FMA. The remaining `N mod 16`
//!    columns (and every column of an `i4` weight with odd `N`, whose rows
//!    do not start on a byte) run the same steps one column at a time.
//!
//! Integer sums are exact, so their order is free; the float operations
//! are the reference's, in its order, which makes the result bit-exact.
//!
//! Weight-only products (`activations = "f32"`) and weights in `strips16`
//! or the NPU's `rk3588` layout are always a call of the runtime's `slmcc_qgemm`
//! ([`crate::cpu::hostqgemm`]), which takes every layout and both kinds.
//!
//! Steps 3 and 4 are [`products`], shared with `qswiglu`
//! ([`super::qswiglu`]): it takes several weights (each a column range of
//! a `[K, stride]` buffer, [`QCols`]), computes each one's sums for a strip
//! (or a column) from the one quantized row, and hands them to an
//! epilogue that makes the stored value (`qmatmul`: the sum itself).

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, Endianness, InstBuilder, MemFlagsData, Value};
use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::ops::qmatmul::{QActivations, QMatMul};
use slmcc_ir::DType;

use super::{unsupported, NodeSig, Operand};
use crate::cpu::emit::{KernelBuilder, Width};
use crate::cpu::hostqgemm::{layout_flags, QGEMM_SYMBOL};
use crate::cpu::CpuError;

/// Most stack bytes of the quantized row (`4·K`): `K <= 16384`.
pub const SCRATCH_BYTES: usize = 64 * 1024;

/// Output columns per vector strip.
const STRIP: usize = 16;

fn flags() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// The static facts of one `qmatmul`-like node (`qmatmul`, `qswiglu`).
pub(super) struct Dims {
    pub rows: usize,
    pub k: usize,
    /// Output columns (of each product).
    pub n: usize,
    pub group: usize,
    pub int4: bool,
    /// How the weights are stored: any layout but row-major
    /// (`pack-weights`, the NPU lowering) only `slmcc_qgemm` reads.
    pub layout: QLayout,
    /// Weight-only (`activations = "f32"`): only `slmcc_qgemm` computes it.
    pub weight_only: bool,
}

impl Dims {
    /// Whether the weights are in a layout only `slmcc_qgemm` reads.
    pub fn packed(&self) -> bool {
        self.layout != QLayout::RowMajor
    }
}

/// Columns `col0 .. col0 + n` of a quantized weight: the buffers of `q`
/// (`[K, stride]`) and `scale` (`[K / G, stride]`).
#[derive(Clone, Copy)]
pub(super) struct QCols {
    pub q: Value,
    pub scale: Value,
    pub stride: usize,
    pub col0: usize,
}

/// The epilogue of [`products`]: the products of one output element (or
/// vector), one per weight, to the result.
pub(super) type Combine<'f> =
    dyn FnMut(&mut KernelBuilder, &[Value], Width) -> Result<Value, CpuError> + 'f;

/// Checks activations `x`, weight `q` and scales `scale` of `name` as
/// `qmatmul` takes them (f32, the dtype of `op.bits`, `K` a multiple of the
/// group); returns `(rows, K, columns of q)`.
pub(super) fn check_operands(
    name: &str,
    op: &QMatMul,
    x: &Operand,
    q: &Operand,
    scale: &Operand,
) -> Result<(usize, usize, usize), CpuError> {
    let wdt = op.weight_dtype();
    if x.dtype != DType::F32 || scale.dtype != DType::F32 {
        return Err(unsupported(
            name,
            format!("on {} activations and {} scales", x.dtype, scale.dtype),
        ));
    }
    if q.dtype != wdt || q.shape.len() != 2 || x.shape.len() < 2 {
        return Err(unsupported(
            name,
            format!("with bits = {} on {} weights", op.bits, q.dtype),
        ));
    }
    let (k, n) = (q.shape[0], q.shape[1]);
    let group = op.group as usize;
    if group == 0 || !k.is_multiple_of(group) || x.shape.last() != Some(&k) {
        return Err(unsupported(name, "with inconsistent shapes"));
    }
    if scale.shape != [k / group, n] {
        return Err(unsupported(name, "with inconsistent shapes"));
    }
    let rows: usize = x.shape[..x.shape.len() - 1].iter().product();
    Ok((rows, k, n))
}

fn check(op: &QMatMul, sig: &NodeSig) -> Result<Dims, CpuError> {
    let name = "qmatmul";
    if sig.inputs.len() != 3 || sig.outputs.len() != 1 {
        return Err(unsupported(name, "with other than 3 operands and 1 result"));
    }
    let (x, q, scale, y) = (
        &sig.inputs[0],
        &sig.inputs[1],
        &sig.inputs[2],
        &sig.outputs[0],
    );
    let (rows, k, n) = check_operands(name, op, x, q, scale)?;
    let out: usize = y.shape.iter().product();
    if y.dtype != DType::F32 || out != rows * n {
        return Err(unsupported(name, "with inconsistent shapes"));
    }
    Ok(Dims {
        rows,
        k,
        n,
        group: op.group as usize,
        int4: q.dtype == DType::I4,
        layout: op.layout,
        weight_only: op.activations == QActivations::F32,
    })
}

/// Emits the kernel of `qmatmul` `op`.
pub fn qmatmul(kb: &mut KernelBuilder, op: &QMatMul, sig: &NodeSig) -> Result<(), CpuError> {
    let d = check(op, sig)?;
    let w = QCols {
        q: kb.buf(1),
        scale: kb.buf(2),
        stride: d.n,
        col0: 0,
    };
    let (x, y) = (kb.buf(0), kb.buf(3));
    if host_qgemm(kb, &d)? {
        return call_qgemm(kb, &d, x, &[w], y);
    }
    products(kb, &d, x, &[w], y, &mut |_, s, _| Ok(s[0]))
}

/// Whether the product goes to the runtime's `slmcc_qgemm`
/// ([`KernelBuilder::host_qgemm`], `K` within its limit); weights in
/// `strips16` or `rk3588` always do (the generated loops read row-major
/// weights), and are refused past that limit; weight-only products always do, for any
/// `K` (the generated loops quantize the activations).
pub(super) fn host_qgemm(kb: &KernelBuilder, d: &Dims) -> Result<bool, CpuError> {
    if d.weight_only {
        return Ok(true);
    }
    let fits = d.k <= crate::cpu::hostqgemm::MAX_K;
    if d.packed() && !fits {
        return Err(unsupported(
            "qmatmul",
            format!(
                "with {} weights and K = {} > {}",
                d.layout.attr_name().unwrap_or_default(),
                d.k,
                crate::cpu::hostqgemm::MAX_K
            ),
        ));
    }
    Ok(d.packed() || (kb.host_qgemm && fits))
}

/// Emits the call of `slmcc_qgemm` ([`crate::cpu::hostqgemm`]) for the
/// products by `ws` (one weight: `qmatmul`; two, gate and up, of one
/// stride: `qswiglu`, its epilogue in the callee) into `y`, with the
/// kernel's threads ([`KernelBuilder::threads`]; 0 in an object: the
/// runtime's).
pub(super) fn call_qgemm(
    kb: &mut KernelBuilder,
    d: &Dims,
    x: Value,
    ws: &[QCols],
    y: Value,
) -> Result<(), CpuError> {
    let f = kb.import_host(QGEMM_SYMBOL, &[types::I64; 15], &[])?;
    let int = |kb: &mut KernelBuilder, v: usize| kb.iconst(v as i64);
    let (first, second) = (ws[0], ws.get(1).copied());
    let mut args = vec![
        int(kb, d.rows),
        int(kb, d.k),
        int(kb, d.n),
        int(kb, d.group),
        kb.iconst((d.int4 as u64 | layout_flags(d.layout) | (d.weight_only as u64) << 2) as i64),
        x,
        first.q,
        first.scale,
        int(kb, first.stride),
        int(kb, first.col0),
    ];
    match second {
        Some(w) => args.extend([w.q, w.scale, int(kb, w.col0)]),
        None => {
            let null = int(kb, 0);
            args.extend([null, null, null]);
        }
    }
    let threads = int(kb, kb.threads);
    args.extend([y, threads]);
    kb.b.ins().call(f, &args);
    Ok(())
}

/// For every row of `x` (`[rows, K]`), the `qmatmul` products by each of
/// `ws` (`d.n` columns each; the row quantized once), combined by `combine`
/// into `y` (`[rows, d.n]`).
pub(super) fn products(
    kb: &mut KernelBuilder,
    d: &Dims,
    x: Value,
    ws: &[QCols],
    y: Value,
    combine: &mut Combine,
) -> Result<(), CpuError> {
    if d.rows == 0 || d.n == 0 {
        return Ok(());
    }
    if d.k == 0 {
        // No groups: every sum stays `+0.0`.
        let zero = kb.b.ins().f32const(0.0);
        let sums = vec![zero; ws.len()];
        let v = combine(kb, &sums, Width::Scalar)?;
        return kb.for_n(d.rows * d.n, |kb, i| {
            let at = kb.index(y, i, 4);
            kb.b.ins().store(flags(), v, at, 0);
            Ok(())
        });
    }
    let scratch = (4 * d.k <= SCRATCH_BYTES).then(|| kb.stack_buf((4 * d.k) as u32));
    // `i4` rows of a strip start on a byte only at even element offsets.
    let aligned = ws.iter().all(|w| w.stride % 2 == 0 && w.col0 % 2 == 0);
    let strips = if d.int4 && !aligned { 0 } else { d.n / STRIP };
    kb.for_n(d.rows, |kb, m| {
        let xrow = kb.index(x, m, (4 * d.k) as i64);
        let yrow = kb.index(y, m, (4 * d.n) as i64);
        let (s, z) = activation_params(kb, xrow, d.k)?;
        let zi = kb.b.ins().fcvt_to_sint_sat(types::I32, z);
        let row = Row {
            x: xrow,
            s,
            z,
            zi,
            scratch,
        };
        if let Some(buf) = scratch {
            kb.for_n(d.k, |kb, k| {
                let v = row.quantize(kb, k);
                let at = kb.index(buf, k, 4);
                kb.b.ins().store(flags(), v, at, 0);
                Ok(())
            })?;
        }
        kb.for_n(strips, |kb, st| {
            let n0 = kb.b.ins().imul_imm_s(st, STRIP as i64);
            let mut sums = Vec::with_capacity(ws.len());
            for w in ws {
                sums.push(strip(kb, d, &row, w, n0)?);
            }
            let yp = kb.index(yrow, n0, 4);
            for j in 0..STRIP / 4 {
                let vs: Vec<Value> = sums.iter().map(|s| s[j]).collect();
                let v = combine(kb, &vs, Width::Vector(4))?;
                kb.b.ins().store(flags(), v, yp, (16 * j) as i32);
            }
            Ok(())
        })?;
        let first = strips * STRIP;
        kb.for_n(d.n - first, |kb, c| {
            let col = kb.b.ins().iadd_imm_s(c, first as i64);
            let mut sums = Vec::with_capacity(ws.len());
            for w in ws {
                sums.push(column(kb, d, &row, w, col)?);
            }
            let v = combine(kb, &sums, Width::Scalar)?;
            let at = kb.index(yrow, col, 4);
            kb.b.ins().store(flags(), v, at, 0);
            Ok(())
        })
    })
}

/// One row's quantization parameters and where its quantized values are.
#[derive(Clone, Copy)]
struct Row {
    x: Value,
    s: Value,
    z: Value,
    zi: Value,
    scratch: Option<Value>,
}

impl Row {
    /// `quantize_activation(x[k], s, z) - zi` as an `i32`, computed.
    fn quantize(&self, kb: &mut KernelBuilder, k: Value) -> Value {
        let at = kb.index(self.x, k, 4);
        let v = kb.b.ins().load(types::F32, flags(), at, 0);
        let t = kb.b.ins().fdiv(v, self.s);
        let t = round_half_even(kb, t);
        let t = kb.b.ins().fadd(t, self.z);
        let t = clamp(kb, t, -128.0, 127.0);
        let i = kb.b.ins().fcvt_to_sint_sat(types::I32, t);
        kb.b.ins().isub(i, self.zi)
    }

    /// `xq[k] - zi`: from the scratch, or computed.
    fn xq(&self, kb: &mut KernelBuilder, k: Value) -> Value {
        match self.scratch {
            Some(buf) => {
                let at = kb.index(buf, k, 4);
                kb.b.ins().load(types::I32, flags(), at, 0)
            }
            None => self.quantize(kb, k),
        }
    }
}

/// Rust's `f32::round_ties_even` on a scalar.
fn round_half_even(kb: &mut KernelBuilder, v: Value) -> Value {
    const TWO23: f32 = 8_388_608.0;
    let a = kb.b.ins().fabs(v);
    let c = kb.b.ins().f32const(TWO23);
    let r = kb.b.ins().fadd(a, c);
    let r = kb.b.ins().fsub(r, c);
    let r = kb.b.ins().fcopysign(r, v);
    // `|v| >= 2^23` is an integer (or infinite); NaN stays NaN either way.
    let small = kb.b.ins().fcmp(FloatCC::LessThan, a, c);
    kb.b.ins().select(small, r, v)
}

/// Rust's `f32::clamp(lo, hi)` (a NaN stays NaN).
fn clamp(kb: &mut KernelBuilder, v: Value, lo: f32, hi: f32) -> Value {
    let lo = kb.b.ins().f32const(lo);
    let hi = kb.b.ins().f32const(hi);
    let below = kb.b.ins().fcmp(FloatCC::LessThan, v, lo);
    let v = kb.b.ins().select(below, lo, v);
    let above = kb.b.ins().fcmp(FloatCC::GreaterThan, v, hi);
    kb.b.ins().select(above, hi, v)
}

/// `(s, z)` of the `k` contiguous `f32` at `xrow`, as
/// `slmcc_ir::ops::qmatmul::activation_params` computes them.
fn activation_params(
    kb: &mut KernelBuilder,
    xrow: Value,
    k: usize,
) -> Result<(Value, Value), CpuError> {
    let (lo, hi) = (kb.b.declare_var(types::F32), kb.b.declare_var(types::F32));
    let zero = kb.b.ins().f32const(0.0);
    kb.b.def_var(lo, zero);
    kb.b.def_var(hi, zero);
    kb.for_n(k, |kb, i| {
        let at = kb.index(xrow, i, 4);
        let v = kb.b.ins().load(types::F32, flags(), at, 0);
        // A NaN compares false: the running value is kept.
        let l = kb.b.use_var(lo);
        let lt = kb.b.ins().fcmp(FloatCC::LessThan, v, l);
        let l = kb.b.ins().select(lt, v, l);
        kb.b.def_var(lo, l);
        let h = kb.b.use_var(hi);
        let gt = kb.b.ins().fcmp(FloatCC::GreaterThan, v, h);
        let h = kb.b.ins().select(gt, v, h);
        kb.b.def_var(hi, h);
        Ok(())
    })?;
    let (lo, hi) = (kb.b.use_var(lo), kb.b.use_var(hi));
    let range = kb.b.ins().fsub(hi, lo);
    let c255 = kb.b.ins().f32const(255.0);
    let s = kb.b.ins().fdiv(range, c255);
    let zero = kb.b.ins().f32const(0.0);
    let one = kb.b.ins().f32const(1.0);
    let is_zero = kb.b.ins().fcmp(FloatCC::Equal, s, zero);
    let s = kb.b.ins().select(is_zero, one, s);
    let t = kb.b.ins().fdiv(lo, s);
    let c128 = kb.b.ins().f32const(-128.0);
    let t = kb.b.ins().fsub(c128, t);
    let t = round_half_even(kb, t);
    Ok((s, clamp(kb, t, -128.0, 127.0)))
}

/// Sixteen weights `q[k, n0 .. n0 + 16]` at `p` (their first byte) as two
/// `i16x8`.
fn load_weights16(kb: &mut KernelBuilder, p: Value, int4: bool) -> (Value, Value) {
    let bytes = if int4 {
        // Byte j holds columns 2j (low nibble) and 2j + 1 (high nibble):
        // in each i16 lane put the low nibble in the low byte and the high
        // one in the high byte, so that the bytes are the columns in order.
        let b = kb.b.ins().uload8x8(flags(), p, 0);
        let lo_mask = kb.b.ins().iconst(types::I16, 0x000f);
        let lo_mask = kb.b.ins().splat(types::I16X8, lo_mask);
        let hi_mask = kb.b.ins().iconst(types::I16, 0x0f00);
        let hi_mask = kb.b.ins().splat(types::I16X8, hi_mask);
        let lo = kb.b.ins().band(b, lo_mask);
        let four = kb.b.ins().iconst(types::I32, 4);
        let hi = kb.b.ins().ishl(b, four);
        let hi = kb.b.ins().band(hi, hi_mask);
        let both = kb.b.ins().bor(lo, hi);
        let le = MemFlagsData::new().with_endianness(Endianness::Little);
        let nibbles = kb.b.ins().bitcast(types::I8X16, le, both);
        // Sign-extend 4 bits: (n ^ 8) - 8.
        let eight = kb.b.ins().iconst(types::I8, 8);
        let eight = kb.b.ins().splat(types::I8X16, eight);
        let t = kb.b.ins().bxor(nibbles, eight);
        kb.b.ins().isub(t, eight)
    } else {
        kb.b.ins().load(types::I8X16, flags(), p, 0)
    };
    (kb.b.ins().swiden_low(bytes), kb.b.ins().swiden_high(bytes))
}

/// The element index of weight column `col` (of `w`'s columns) in row `k`.
fn element(kb: &mut KernelBuilder, w: &QCols, k: Value, col: Value) -> Value {
    let e = kb.b.ins().imul_imm_s(k, w.stride as i64);
    let e = kb.b.ins().iadd(e, col);
    kb.b.ins().iadd_imm_s(e, w.col0 as i64)
}

/// The address of `scale[g, col]` (of `w`'s columns).
fn scale_addr(kb: &mut KernelBuilder, w: &QCols, g: Value, col: Value) -> Value {
    let e = element(kb, w, g, col);
    kb.index(w.scale, e, 4)
}

/// The byte address of weight column `col` in row `k` for a row-aligned
/// element (`i8`, or `i4` at an even element index).
fn weight_addr(kb: &mut KernelBuilder, d: &Dims, w: &QCols, k: Value, col: Value) -> Value {
    let e = element(kb, w, k, col);
    let byte = if d.int4 {
        kb.b.ins().ushr_imm_u(e, 1)
    } else {
        e
    };
    kb.b.ins().iadd(w.q, byte)
}

/// The sums of columns `n0 .. n0 + 16` of one row, as four `f32x4`.
fn strip(
    kb: &mut KernelBuilder,
    d: &Dims,
    row: &Row,
    w: &QCols,
    n0: Value,
) -> Result<Vec<Value>, CpuError> {
    let sums: Vec<_> = (0..4).map(|_| kb.b.declare_var(types::F32X4)).collect();
    let accs: Vec<_> = (0..4).map(|_| kb.b.declare_var(types::I32X4)).collect();
    let zero = kb.b.ins().f32const(0.0);
    let zero = kb.b.ins().splat(types::F32X4, zero);
    for &v in &sums {
        kb.b.def_var(v, zero);
    }
    let s4 = kb.b.ins().splat(types::F32X4, row.s);
    kb.for_n(d.k / d.group, |kb, g| {
        let izero = kb.b.ins().iconst(types::I32, 0);
        let izero = kb.b.ins().splat(types::I32X4, izero);
        for &v in &accs {
            kb.b.def_var(v, izero);
        }
        let k0 = kb.b.ins().imul_imm_s(g, d.group as i64);
        kb.for_n(d.group, |kb, kk| {
            let k = kb.b.ins().iadd(k0, kk);
            let a = row.xq(kb, k);
            let a = kb.b.ins().ireduce(types::I16, a);
            let a = kb.b.ins().splat(types::I16X8, a);
            let p = weight_addr(kb, d, w, k, n0);
            let (w0, w1) = load_weights16(kb, p, d.int4);
            let p0 = kb.b.ins().imul(w0, a);
            let p1 = kb.b.ins().imul(w1, a);
            let parts = [
                kb.b.ins().swiden_low(p0),
                kb.b.ins().swiden_high(p0),
                kb.b.ins().swiden_low(p1),
                kb.b.ins().swiden_high(p1),
            ];
            for (&v, part) in accs.iter().zip(parts) {
                let acc = kb.b.use_var(v);
                let acc = kb.b.ins().iadd(acc, part);
                kb.b.def_var(v, acc);
            }
            Ok(())
        })?;
        // y += acc as f32 · (s · scale[g, n]).
        let sp = scale_addr(kb, w, g, n0);
        for (j, (&sv, &av)) in sums.iter().zip(&accs).enumerate() {
            let sc = kb.b.ins().load(types::F32X4, flags(), sp, (16 * j) as i32);
            let t = kb.b.ins().fmul(s4, sc);
            let acc = kb.b.use_var(av);
            let af = kb.b.ins().fcvt_from_sint(types::F32X4, acc);
            let p = kb.b.ins().fmul(af, t);
            let sum = kb.b.use_var(sv);
            let sum = kb.b.ins().fadd(sum, p);
            kb.b.def_var(sv, sum);
        }
        Ok(())
    })?;
    Ok(sums.iter().map(|&sv| kb.b.use_var(sv)).collect())
}

/// Weight column `col` (of `w`'s columns) in row `k` as an `i32`, at any
/// nibble.
fn weight(kb: &mut KernelBuilder, d: &Dims, w: &QCols, k: Value, col: Value) -> Value {
    let e = element(kb, w, k, col);
    if !d.int4 {
        let at = kb.b.ins().iadd(w.q, e);
        return kb.b.ins().sload8(types::I32, flags(), at, 0);
    }
    let byte = kb.b.ins().ushr_imm_u(e, 1);
    let at = kb.b.ins().iadd(w.q, byte);
    let b = kb.b.ins().uload8(types::I32, flags(), at, 0);
    // Element `e` is the low nibble when `e` is even.
    let odd = kb.b.ins().band_imm_u(e, 1);
    let shift = kb.b.ins().ishl_imm_u(odd, 2);
    let nib = kb.b.ins().ushr(b, shift);
    let nib = kb.b.ins().band_imm_u(nib, 0xf);
    let nib = kb.b.ins().bxor_imm_u(nib, 8);
    kb.b.ins().iadd_imm_s(nib, -8)
}

/// The sum of output column `col` of one row.
fn column(
    kb: &mut KernelBuilder,
    d: &Dims,
    row: &Row,
    w: &QCols,
    col: Value,
) -> Result<Value, CpuError> {
    let sum = kb.b.declare_var(types::F32);
    let acc = kb.b.declare_var(types::I32);
    let zero = kb.b.ins().f32const(0.0);
    kb.b.def_var(sum, zero);
    kb.for_n(d.k / d.group, |kb, g| {
        let izero = kb.b.ins().iconst(types::I32, 0);
        kb.b.def_var(acc, izero);
        let k0 = kb.b.ins().imul_imm_s(g, d.group as i64);
        kb.for_n(d.group, |kb, kk| {
            let k = kb.b.ins().iadd(k0, kk);
            let a = row.xq(kb, k);
            let q = weight(kb, d, w, k, col);
            let p = kb.b.ins().imul(a, q);
            let c = kb.b.use_var(acc);
            let c = kb.b.ins().iadd(c, p);
            kb.b.def_var(acc, c);
            Ok(())
        })?;
        let sp = scale_addr(kb, w, g, col);
        let sc = kb.b.ins().load(types::F32, flags(), sp, 0);
        let t = kb.b.ins().fmul(row.s, sc);
        let c = kb.b.use_var(acc);
        let af = kb.b.ins().fcvt_from_sint(types::F32, c);
        let p = kb.b.ins().fmul(af, t);
        let s = kb.b.use_var(sum);
        let s = kb.b.ins().fadd(s, p);
        kb.b.def_var(sum, s);
        Ok(())
    })?;
    Ok(kb.b.use_var(sum))
}
