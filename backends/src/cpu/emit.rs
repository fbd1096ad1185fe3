//! The kernel builder: a thin layer over Cranelift's `FunctionBuilder` that
//! the op lowerings share.
//!
//! It owns the kernel ABI (see [`super`]): the entry block reads the buffer
//! pointers from the `bufs` array, and every early exit returns a status
//! code. On top of that it offers counted loops (static trip counts: shapes
//! are baked), affine loop nests over strided accesses with the innermost
//! dimension vectorised to 128-bit vectors where every access is contiguous
//! or broadcast, loads and stores at a [`Width`], calls of the math helpers
//! ([`super::math`]), and element-wise selection that works on scalars and
//! vectors alike.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{
    types, AbiParam, FuncRef, InstBuilder, MemFlagsData, Signature, StackSlotData, StackSlotKind,
    Type, Value,
};
use cranelift_frontend::FunctionBuilder;
use cranelift_module::{Linkage, Module};

use super::math::MathFn;
use super::CpuError;

/// Status a kernel returns: 0 is success.
pub const STATUS_OK: i64 = 0;
/// Status of a kernel that met an index out of range (`gather`,
/// `gather_nd`, `gather_elements`).
pub const STATUS_INDEX_OUT_OF_RANGE: i64 = 1;
/// Status of a kernel that met an integer division by zero (`div`, `mod`).
pub const STATUS_DIVISION_BY_ZERO: i64 = 2;
/// Status of a `kv_write` whose positions have no cache slot: past the
/// capacity of a cache without a window (the context is full), or
/// negative. Nothing is written.
pub const STATUS_CONTEXT_FULL: i64 = 3;

/// What a kernel's non-zero status means, for error messages.
pub fn status_message(status: i64) -> &'static str {
    match status {
        STATUS_INDEX_OUT_OF_RANGE => "index out of range",
        STATUS_DIVISION_BY_ZERO => "integer division by zero",
        STATUS_CONTEXT_FULL => "KV cache position out of range (the context is full)",
        _ => "cpu kernel failed",
    }
}

/// How many elements one step of a loop body handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// One element in a scalar register.
    Scalar,
    /// A 128-bit vector of this many lanes.
    Vector(u8),
}

impl Width {
    /// The number of elements.
    pub fn lanes(self) -> usize {
        match self {
            Width::Scalar => 1,
            Width::Vector(n) => n as usize,
        }
    }

    /// The Cranelift type of `elem` at this width.
    pub fn ty(self, elem: Type) -> Type {
        match self {
            Width::Scalar => elem,
            Width::Vector(n) => elem.by(n as u32).expect("128-bit vector type"),
        }
    }
}

/// A strided access of an affine loop nest: element `(i_0, .., i_r)` is at
/// `base + Σ i_j · strides[j] · elem_bytes`.
#[derive(Clone, Debug)]
pub struct Access {
    pub base: Value,
    /// Strides in elements, one per loop dim (0 for a broadcast dim).
    pub strides: Vec<i64>,
    pub elem_bytes: i64,
}

/// Where one access points in the current step of a loop nest body.
#[derive(Clone, Copy, Debug)]
pub struct Ptr {
    pub addr: Value,
    /// The access does not move along the vectorised dim: a vector load
    /// of it is a splat of one element.
    pub splat: bool,
}

/// The body of a loop nest step: the accesses' pointers and the width.
pub type NestBody<'k, 'f> =
    dyn FnMut(&mut KernelBuilder<'k>, &[Ptr], Width) -> Result<(), CpuError> + 'f;

/// Builds the body of one kernel.
pub struct KernelBuilder<'a> {
    pub b: FunctionBuilder<'a>,
    module: &'a mut dyn Module,
    imported: HashMap<MathFn, FuncRef>,
    /// Data objects holding splatted `f32x4` constants, by bit pattern.
    vconsts: HashMap<u32, cranelift_module::DataId>,
    bufs: Vec<Value>,
    /// Fused multiply-add in matmul-like loops (the ISA has it natively).
    pub fma: bool,
    /// Vectorised transcendentals and reductions ([`super::CpuOptions::fast_math`]).
    pub fast_math: bool,
    /// The inline vector math loads its constants where it uses them
    /// ([`KernelBuilder::f32c_local`]) instead of letting them be hoisted:
    /// for kernels whose hot loop needs every vector register (the GEMM).
    pub local_constants: bool,
    /// Large matrix products call the host GEMM
    /// ([`super::CpuOptions::host_gemm`]; JIT only).
    pub host_gemm: bool,
    /// Quantized products call `slmcc_qgemm`
    /// ([`super::CpuOptions::host_qgemm`]).
    pub host_qgemm: bool,
    /// Threads the host GEMM may use ([`super::CpuOptions::threads`]).
    pub threads: usize,
}

impl<'a> KernelBuilder<'a> {
    /// Starts a kernel over `nbufs` buffers: emits the entry block, which
    /// loads each buffer pointer from the `bufs` argument.
    pub fn new(
        mut b: FunctionBuilder<'a>,
        module: &'a mut dyn Module,
        nbufs: usize,
        fma: bool,
        fast_math: bool,
    ) -> KernelBuilder<'a> {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let arg = b.block_params(entry)[0];
        let bufs = (0..nbufs)
            .map(|i| {
                b.ins()
                    .load(types::I64, MemFlagsData::trusted(), arg, (i * 8) as i32)
            })
            .collect();
        KernelBuilder {
            b,
            module,
            imported: HashMap::new(),
            vconsts: HashMap::new(),
            bufs,
            fma,
            fast_math,
            local_constants: false,
            host_gemm: false,
            host_qgemm: false,
            threads: 1,
        }
    }

    /// Returns success from where the builder is and finalises the function.
    pub fn finish(mut self) {
        let ok = self.b.ins().iconst(types::I32, STATUS_OK);
        self.b.ins().return_(&[ok]);
        self.b.seal_all_blocks();
        let config = self.module.target_config();
        self.b.finalize(config);
    }

    /// The number of 128-bit vector registers of the target (32 on
    /// aarch64, 16 on x86-64), which sizes register tiles.
    pub fn vector_regs(&self) -> usize {
        match self.module.isa().triple().architecture {
            target_lexicon::Architecture::Aarch64(_) => 32,
            _ => 16,
        }
    }

    /// The base pointer of buffer `i` (operands first, then results).
    pub fn buf(&self, i: usize) -> Value {
        self.bufs[i]
    }

    pub fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(types::I64, v)
    }

    /// `base + offset` bytes.
    pub fn offset(&mut self, base: Value, bytes: i64) -> Value {
        if bytes == 0 {
            base
        } else {
            self.b.ins().iadd_imm_s(base, bytes)
        }
    }

    /// `base + index · scale` bytes, for a dynamic index.
    pub fn index(&mut self, base: Value, index: Value, scale: i64) -> Value {
        let off = if scale == 1 {
            index
        } else {
            self.b.ins().imul_imm_s(index, scale)
        };
        self.b.ins().iadd(base, off)
    }

    /// A loop running `body(i)` for `i` in `0..n`; `n == 1` emits the body
    /// once, without a loop.
    pub fn for_n(
        &mut self,
        n: usize,
        mut body: impl FnMut(&mut Self, Value) -> Result<(), CpuError>,
    ) -> Result<(), CpuError> {
        match n {
            0 => Ok(()),
            1 => {
                let zero = self.iconst(0);
                body(self, zero)
            }
            _ => {
                let head = self.b.create_block();
                let exit = self.b.create_block();
                let i = self.b.append_block_param(head, types::I64);
                let zero = self.iconst(0);
                self.b.ins().jump(head, &[zero.into()]);
                self.b.switch_to_block(head);
                body(self, i)?;
                let next = self.b.ins().iadd_imm_s(i, 1);
                let more = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::SignedLessThan, next, n as i64);
                self.b.ins().brif(more, head, &[next.into()], exit, &[]);
                self.b.switch_to_block(exit);
                Ok(())
            }
        }
    }

    /// A loop running `body(i)` for `i` in `lo, lo + step, ..` while
    /// `i < hi`, with bounds known only at run time (nothing when
    /// `lo >= hi`). `step > 0`.
    pub fn for_range(
        &mut self,
        lo: Value,
        hi: Value,
        step: i64,
        mut body: impl FnMut(&mut Self, Value) -> Result<(), CpuError>,
    ) -> Result<(), CpuError> {
        let head = self.b.create_block();
        let exit = self.b.create_block();
        let i = self.b.append_block_param(head, types::I64);
        let any = self.b.ins().icmp(IntCC::SignedLessThan, lo, hi);
        self.b.ins().brif(any, head, &[lo.into()], exit, &[]);
        self.b.switch_to_block(head);
        body(self, i)?;
        let next = self.b.ins().iadd_imm_s(i, step);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, hi);
        self.b.ins().brif(more, head, &[next.into()], exit, &[]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// Runs `then` only when `cond` (an `i8` flag) is set.
    pub fn if_then(
        &mut self,
        cond: Value,
        then: impl FnOnce(&mut Self) -> Result<(), CpuError>,
    ) -> Result<(), CpuError> {
        let yes = self.b.create_block();
        let done = self.b.create_block();
        self.b.ins().brif(cond, yes, &[], done, &[]);
        self.b.switch_to_block(yes);
        then(self)?;
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
        Ok(())
    }

    /// The address of a fresh 16-byte aligned stack buffer of `bytes`
    /// bytes: kernel scratch that lives for the call (kernels never
    /// allocate on the heap). Callers keep it small and say how much.
    pub fn stack_buf(&mut self, bytes: u32) -> Value {
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            bytes.max(16),
            4,
        ));
        self.b.ins().stack_addr(types::I64, slot, 0)
    }

    /// `v` (an `f32` scalar) broadcast to width `w`.
    pub fn splat(&mut self, v: Value, w: Width) -> Value {
        match w {
            Width::Scalar => v,
            Width::Vector(_) => self.b.ins().splat(w.ty(types::F32), v),
        }
    }

    /// `exp(x)` on `f32` at width `w`: the polynomial of [`super::vmath`]
    /// under `fast_math`, else the reference's `expf` lane by lane.
    pub fn exp(&mut self, x: Value, w: Width) -> Result<Value, CpuError> {
        if self.fast_math {
            super::vmath::exp(self, x, w)
        } else {
            self.math(MathFn::Exp, &[x], w)
        }
    }

    /// The logistic function, as [`KernelBuilder::exp`] chooses.
    pub fn sigmoid(&mut self, x: Value, w: Width) -> Result<Value, CpuError> {
        if self.fast_math {
            super::vmath::sigmoid(self, x, w)
        } else {
            self.math(MathFn::Sigmoid, &[x], w)
        }
    }

    /// An affine loop nest over `dims` (row-major order). `body` receives one
    /// [`Ptr`] per access and the width of the step. With `vector` set to a
    /// lane count, the innermost dim runs in vectors of that many elements
    /// (then a scalar tail) when every access is contiguous (stride 1) or
    /// broadcast (stride 0) along it. Dims are collapsed first where every
    /// access is contiguous across them, so `[seq, hidden]` + `[hidden]`
    /// vectorises over `hidden` and a plain copy over the whole tensor.
    pub fn nest(
        &mut self,
        dims: &[usize],
        accesses: &[Access],
        vector: Option<u8>,
        mut body: impl FnMut(&mut Self, &[Ptr], Width) -> Result<(), CpuError>,
    ) -> Result<(), CpuError> {
        if dims.contains(&0) {
            return Ok(());
        }
        let (dims, strides) = collapse(dims, accesses);
        let bases: Vec<Value> = accesses.iter().map(|a| a.base).collect();
        let bytes: Vec<i64> = accesses.iter().map(|a| a.elem_bytes).collect();
        self.nest_level(&dims, &strides, &bytes, &bases, vector, &mut body)
    }

    fn nest_level(
        &mut self,
        dims: &[usize],
        strides: &[Vec<i64>],
        bytes: &[i64],
        bases: &[Value],
        vector: Option<u8>,
        body: &mut NestBody<'a, '_>,
    ) -> Result<(), CpuError> {
        let step = |s: &[Vec<i64>], j: usize, k: usize| s[k][j] * bytes[k];
        match dims.len() {
            0 => {
                let ptrs: Vec<Ptr> = bases
                    .iter()
                    .map(|&addr| Ptr { addr, splat: false })
                    .collect();
                body(self, &ptrs, Width::Scalar)
            }
            1 => {
                let n = dims[0];
                let lanes = vector.map_or(1, |l| l as usize);
                let vectorise =
                    lanes > 1 && n >= lanes && strides.iter().all(|s| s[0] == 0 || s[0] == 1);
                let chunks = if vectorise { n / lanes } else { 0 };
                if chunks > 0 {
                    let w = Width::Vector(lanes as u8);
                    self.for_n(chunks, |kb, i| {
                        let ptrs: Vec<Ptr> = (0..bases.len())
                            .map(|k| {
                                let st = step(strides, 0, k) * lanes as i64;
                                Ptr {
                                    addr: if st == 0 {
                                        bases[k]
                                    } else {
                                        kb.index(bases[k], i, st)
                                    },
                                    splat: strides[k][0] == 0,
                                }
                            })
                            .collect();
                        body(kb, &ptrs, w)
                    })?;
                }
                let done = chunks * lanes;
                // The scalar tail is shorter than a vector: unroll it.
                let tail = n - done;
                if vectorise || tail <= 1 {
                    for t in done..n {
                        let ptrs: Vec<Ptr> = (0..bases.len())
                            .map(|k| Ptr {
                                addr: self.offset(bases[k], step(strides, 0, k) * t as i64),
                                splat: false,
                            })
                            .collect();
                        body(self, &ptrs, Width::Scalar)?;
                    }
                    Ok(())
                } else {
                    self.for_n(n, |kb, i| {
                        let ptrs: Vec<Ptr> = (0..bases.len())
                            .map(|k| Ptr {
                                addr: kb.index(bases[k], i, step(strides, 0, k)),
                                splat: false,
                            })
                            .collect();
                        body(kb, &ptrs, Width::Scalar)
                    })
                }
            }
            _ => self.for_n(dims[0], |kb, i| {
                let inner: Vec<Value> = (0..bases.len())
                    .map(|k| kb.index(bases[k], i, step(strides, 0, k)))
                    .collect();
                let rest: Vec<Vec<i64>> = strides.iter().map(|s| s[1..].to_vec()).collect();
                kb.nest_level(&dims[1..], &rest, bytes, &inner, vector, body)
            }),
        }
    }

    /// Loads an element (or a vector of them) of type `elem` at `p`.
    pub fn load(&mut self, elem: Type, p: Ptr, w: Width) -> Value {
        let flags = MemFlagsData::new().with_notrap();
        match w {
            Width::Scalar => self.b.ins().load(elem, flags, p.addr, 0),
            Width::Vector(_) if p.splat => {
                let s = self.b.ins().load(elem, flags, p.addr, 0);
                self.b.ins().splat(w.ty(elem), s)
            }
            Width::Vector(_) => self.b.ins().load(w.ty(elem), flags, p.addr, 0),
        }
    }

    /// Stores `v` at `p`.
    pub fn store(&mut self, v: Value, p: Ptr) {
        let flags = MemFlagsData::new().with_notrap();
        self.b.ins().store(flags, v, p.addr, 0);
    }

    /// An `f32` constant at width `w`.
    pub fn f32c(&mut self, v: f32, w: Width) -> Value {
        let s = self.b.ins().f32const(v);
        match w {
            Width::Scalar => s,
            Width::Vector(_) => self.b.ins().splat(w.ty(types::F32), s),
        }
    }

    /// An `f32` constant at width `w` that stays where it is used: vectors
    /// are loaded from a data object right there. (Cranelift hoists a
    /// splatted constant out of every loop to the function's entry, where
    /// it occupies a vector register for the whole kernel; a handful of
    /// them — the vector exp has a dozen — make a GEMM's accumulators
    /// spill. A load from memory is not hoisted.)
    pub fn f32c_local(&mut self, v: f32, w: Width) -> Result<Value, CpuError> {
        let Width::Vector(n) = w else {
            return Ok(self.b.ins().f32const(v));
        };
        let id = match self.vconsts.get(&v.to_bits()) {
            Some(&id) => id,
            None => {
                let bytes = (0..n).flat_map(|_| v.to_le_bytes()).collect();
                let id = self.define_data(bytes)?;
                self.vconsts.insert(v.to_bits(), id);
                id
            }
        };
        let addr = self.data_addr(id);
        let flags = MemFlagsData::new().with_notrap().with_aligned();
        Ok(self.b.ins().load(w.ty(types::F32), flags, addr, 0))
    }

    /// `cond ? a : b` element-wise, where `cond` comes from an `fcmp` or
    /// `icmp` at the same width (a scalar flag or a vector lane mask).
    pub fn select(&mut self, cond: Value, a: Value, b: Value, w: Width) -> Value {
        match w {
            Width::Scalar => self.b.ins().select(cond, a, b),
            Width::Vector(_) => {
                let ty = self.b.func.dfg.value_type(a);
                let mask = self.b.ins().bitcast(ty, MemFlagsData::new(), cond);
                self.b.ins().bitselect(mask, a, b)
            }
        }
    }

    /// `a cc b` on floats at width `w` (see [`KernelBuilder::select`]).
    pub fn fcmp(&mut self, cc: FloatCC, a: Value, b: Value) -> Value {
        self.b.ins().fcmp(cc, a, b)
    }

    /// Calls a math helper on scalars, or lane by lane on vectors (of
    /// `f32`: the `f64` helpers take scalars).
    pub fn math(&mut self, f: MathFn, args: &[Value], w: Width) -> Result<Value, CpuError> {
        let fref = self.math_ref(f)?;
        match w {
            Width::Scalar => {
                let call = self.b.ins().call(fref, args);
                Ok(self.b.inst_results(call)[0])
            }
            Width::Vector(n) => {
                let mut out = args[0];
                for lane in 0..n {
                    let lane_args: Vec<Value> = args
                        .iter()
                        .map(|&a| self.b.ins().extractlane(a, lane))
                        .collect();
                    let call = self.b.ins().call(fref, &lane_args);
                    let r = self.b.inst_results(call)[0];
                    out = self.b.ins().insertlane(out, r, lane);
                }
                Ok(out)
            }
        }
    }

    fn math_ref(&mut self, f: MathFn) -> Result<FuncRef, CpuError> {
        if let Some(&r) = self.imported.get(&f) {
            return Ok(r);
        }
        let mut sig = Signature::new(self.module.isa().default_call_conv());
        let ty = if f.double() { types::F64 } else { types::F32 };
        for _ in 0..f.arity() {
            sig.params.push(AbiParam::new(ty));
        }
        sig.returns.push(AbiParam::new(ty));
        let id = self
            .module
            .declare_function(f.symbol(), Linkage::Import, &sig)
            .map_err(|e| CpuError::Codegen(format!("declaring {}: {e}", f.symbol())))?;
        let r = self.module.declare_func_in_func(id, self.b.func);
        self.imported.insert(f, r);
        Ok(r)
    }

    /// Declares the host function `symbol` (platform C convention, `params`
    /// in, `returns` out) for calls from this kernel; the JIT links it, an
    /// object file leaves it undefined.
    pub fn import_host(
        &mut self,
        symbol: &str,
        params: &[Type],
        returns: &[Type],
    ) -> Result<FuncRef, CpuError> {
        let mut sig = Signature::new(self.module.isa().default_call_conv());
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns
            .extend(returns.iter().map(|&t| AbiParam::new(t)));
        let id = self
            .module
            .declare_function(symbol, Linkage::Import, &sig)
            .map_err(|e| CpuError::Codegen(format!("declaring {symbol}: {e}")))?;
        Ok(self.module.declare_func_in_func(id, self.b.func))
    }

    /// Returns `status` from the kernel when `cond` is set, else goes on.
    pub fn fail_if(&mut self, cond: Value, status: i64) {
        let fail = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(cond, fail, &[], cont, &[]);
        self.b.switch_to_block(fail);
        let s = self.b.ins().iconst(types::I32, status);
        self.b.ins().return_(&[s]);
        self.b.switch_to_block(cont);
    }

    /// Defines a read-only data object holding `bytes` (16-byte aligned).
    pub fn define_data(&mut self, bytes: Vec<u8>) -> Result<cranelift_module::DataId, CpuError> {
        let id = self
            .module
            .declare_anonymous_data(false, false)
            .map_err(|e| CpuError::Codegen(format!("declaring data: {e}")))?;
        let mut desc = cranelift_module::DataDescription::new();
        desc.define(bytes.into_boxed_slice());
        desc.set_align(16);
        self.module
            .define_data(id, &desc)
            .map_err(|e| CpuError::Codegen(format!("defining data: {e}")))?;
        Ok(id)
    }

    /// The address of a data object of the module (constants).
    pub fn data_addr(&mut self, id: cranelift_module::DataId) -> Value {
        let gv = self.module.declare_data_in_func(id, self.b.func);
        self.b.ins().symbol_value(types::I64, gv)
    }
}

/// Drops unit dims and merges adjacent dims where every access is
/// contiguous across them (`stride[j] == stride[j+1] · dims[j+1]`).
fn collapse(dims: &[usize], accesses: &[Access]) -> (Vec<usize>, Vec<Vec<i64>>) {
    let mut out_dims: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<i64>> = vec![Vec::new(); accesses.len()];
    for (j, &d) in dims.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let mergeable = !out_dims.is_empty()
            && accesses.iter().zip(&out_strides).all(|(a, s)| {
                *s.last().expect("one stride per kept dim") == a.strides[j] * d as i64
            });
        if mergeable {
            *out_dims.last_mut().expect("non-empty") *= d;
            for (a, s) in accesses.iter().zip(out_strides.iter_mut()) {
                *s.last_mut().expect("non-empty") = a.strides[j];
            }
        } else {
            out_dims.push(d);
            for (a, s) in accesses.iter().zip(out_strides.iter_mut()) {
                s.push(a.strides[j]);
            }
        }
    }
    (out_dims, out_strides)
}

/// Row-major strides (in elements) of a shape, as `i64`.
pub fn row_major(shape: &[usize]) -> Vec<i64> {
    slmcc_ir::ops::strides(shape)
        .into_iter()
        .map(|s| s as i64)
        .collect()
}

/// The strides with which an operand of shape `input` is read when it is
/// broadcast (NumPy rules) to `out`: 0 on stretched and missing axes.
pub fn broadcast_strides(input: &[usize], out: &[usize]) -> Vec<i64> {
    let st = row_major(input);
    let offset = out.len() - input.len();
    (0..out.len())
        .map(|i| {
            if i < offset || input[i - offset] == 1 {
                0
            } else {
                st[i - offset]
            }
        })
        .collect()
}

/// `IntCC` for a signed comparison, re-exported for lowerings.
pub use cranelift_codegen::ir::condcodes::IntCC as Icc;

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(strides: Vec<i64>) -> Access {
        Access {
            base: Value::from_u32(0),
            strides,
            elem_bytes: 4,
        }
    }

    #[test]
    fn collapses_contiguous_dims() {
        // [2, 5, 64] + [64]: the output collapses to [640], the operand
        // does not (it repeats), so the nest is [10, 64].
        let (d, s) = collapse(&[2, 5, 64], &[acc(vec![320, 64, 1]), acc(vec![0, 0, 1])]);
        assert_eq!(d, vec![10, 64]);
        assert_eq!(s, vec![vec![64, 1], vec![0, 1]]);
        // A transpose keeps both dims; unit dims vanish.
        let (d, s) = collapse(&[1, 3, 4], &[acc(vec![12, 4, 1]), acc(vec![12, 1, 3])]);
        assert_eq!(d, vec![3, 4]);
        assert_eq!(s, vec![vec![4, 1], vec![1, 3]]);
    }

    #[test]
    fn broadcast_strides_follow_numpy() {
        assert_eq!(broadcast_strides(&[3], &[2, 3]), vec![0, 1]);
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3]), vec![1, 0]);
        assert_eq!(broadcast_strides(&[], &[2]), vec![0]);
    }
}
