//! The NPU instruction set (see `docs/NPU_ISA.md` for the full semantics).
//!
//! A [`Program`] has, per core, a DMA queue and a compute queue of
//! [`Instr`]s. DMA instructions move bytes between DDR and the core's CBUF;
//! compute instructions read and write CBUF only; semaphore instructions
//! order the two queues of a core. Field ranges are those of the 128-bit
//! encoding ([`mod@crate::npu::encode`]); [`Instr::check`] validates them and
//! [`Program::check`] also checks that each instruction is on a queue that
//! can run it. `Display` prints the assembly syntax of the disassembler.

use std::fmt;

/// Alignment of every CBUF address in bytes (CBUF addresses are encoded in
/// 16-byte granules).
pub const CBUF_ALIGN: u32 = 16;
/// Exclusive upper bound of encodable CBUF addresses (15-bit granules).
pub const CBUF_ADDR_LIMIT: u32 = (1 << 15) * CBUF_ALIGN;
/// Largest DMA contiguous run in bytes.
pub const DMA_MAX_RUN: u32 = 1 << 13;
/// Largest DMA outer-dim count.
pub const DMA_MAX_COUNT: u32 = 1 << 10;
/// Exclusive upper bound of a DMA outer-dim stride in bytes.
pub const DMA_STRIDE_LIMIT: u32 = 1 << 20;
/// Largest matmul / epilogue `m` and `n`, and reduce `m`.
pub const MAX_MN: u32 = 1 << 12;
/// Largest matmul `k` and reduce `n`.
pub const MAX_K: u32 = 1 << 14;
/// Largest `m` and `n` of the attention instructions `sm.online` (10-bit
/// fields).
pub const MAX_SM: u32 = 1 << 10;
/// Range of `sm.online`'s causal diagonal (20-bit two's complement).
pub const DIAG_RANGE: std::ops::RangeInclusive<i32> = -(1 << 19)..=(1 << 19) - 1;
/// Largest element-wise length (elements: INT8 for `ew.add`/`ew.mul`, f32
/// for `ew.silu_mul`).
pub const MAX_LEN: u32 = 1 << 19;
/// Number of semaphore ids the encoding holds (a target may have fewer).
pub const MAX_SEMS: u8 = 16;

/// The DDR side of a DMA transfer: `count2` blocks `stride2` bytes apart,
/// each of `count1` runs `stride1` bytes apart, each run `run` contiguous
/// bytes. The CBUF side is dense: the runs land back to back in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaDims {
    /// Contiguous bytes per run, `1..=8192`.
    pub run: u32,
    /// Runs per block, `1..=1024`.
    pub count1: u32,
    /// Bytes between runs, `< 2^20`.
    pub stride1: u32,
    /// Blocks, `1..=1024`.
    pub count2: u32,
    /// Bytes between blocks, `< 2^20`.
    pub stride2: u32,
}

impl DmaDims {
    /// A single contiguous run of `run` bytes.
    pub fn contiguous(run: u32) -> Self {
        DmaDims {
            run,
            count1: 1,
            stride1: 0,
            count2: 1,
            stride2: 0,
        }
    }

    /// `rows` runs of `run` bytes, `stride` bytes apart.
    pub fn rows(run: u32, rows: u32, stride: u32) -> Self {
        DmaDims {
            run,
            count1: rows,
            stride1: stride,
            count2: 1,
            stride2: 0,
        }
    }

    /// Total bytes moved.
    pub fn bytes(&self) -> u64 {
        u64::from(self.run) * u64::from(self.count1) * u64::from(self.count2)
    }
}

/// Weight element type of a matmul tile (activations are always INT8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightType {
    /// One signed byte per weight.
    I8,
    /// Two signed 4-bit weights per byte, low nibble first.
    I4,
}

/// Output element type of an epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutType {
    /// Requantized, activated, residual-added INT8.
    I8,
    /// `acc + bias` as INT32 (no requantization, LUT or residual).
    I32,
}

/// Element-wise operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EltOp {
    Add,
    Mul,
}

/// Row reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `Σ (x - zp)²` (wrapping INT32).
    SumSq,
    /// `max (x - zp)`.
    Max,
}

/// The mask tile of an `sm.online`: none, `u8` keep flags (`0` masks, any
/// other value keeps) or `f32` values added to the scaled scores; either
/// `m×n`, dense row-major, at the CBUF address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScoreMask {
    None,
    Keep(u32),
    Add(u32),
}

/// What an `ew.rescale` does to its `m×n` f32 output tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RescaleMode {
    /// `out = t` (the first key tile of a row block).
    First,
    /// `out = out·alpha_i + t` (each later key tile).
    Accumulate,
    /// `out = l_i == 0 ? +0.0 : out / l_i` (after the last key tile; `t`
    /// unused and 0).
    Finish,
}

/// One NPU instruction. CBUF addresses are byte addresses in the core's
/// CBUF (multiples of 16); DDR addresses are byte addresses in DDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instr {
    /// DDR → CBUF (DMA queue).
    DmaLoad { cbuf: u32, ddr: u32, dims: DmaDims },
    /// CBUF → DDR (DMA queue).
    DmaStore { ddr: u32, cbuf: u32, dims: DmaDims },
    /// `acc[m×n] (+)= a[m×k] · w[k×n]` in INT32 (compute queue).
    MatMul {
        wtype: WeightType,
        a: u32,
        w: u32,
        acc: u32,
        m: u32,
        k: u32,
        n: u32,
        accumulate: bool,
    },
    /// Bias, requantization, LUT activation and residual add over an
    /// `m×n` INT32 accumulator tile (compute queue).
    Epilogue {
        out_type: OutType,
        acc: u32,
        params: u32,
        out: u32,
        m: u32,
        n: u32,
        out_zp: i8,
        /// CBUF address of a 256-byte INT8 table.
        lut: Option<u32>,
        /// CBUF address of an `m×n` INT8 tensor and its zero point.
        residual: Option<(u32, i8)>,
    },
    /// Dequantize-accumulate of an `m×n` INT32 accumulator tile into an
    /// `m×n` f32 tile (compute queue): `out[i][j] = (accumulate ?
    /// out[i][j] : +0.0) + ((acc[i][j] - z_i·colsum_j) as f32) · (s_i ·
    /// scale_j)`, with `n` channel records `(scale: f32, colsum: i32)` at
    /// `params` and `m` row records `(s: f32, z: i32)` at `rows` (8 bytes
    /// each).
    EpilogueF32 {
        acc: u32,
        params: u32,
        rows: u32,
        out: u32,
        m: u32,
        n: u32,
        accumulate: bool,
    },
    /// Element-wise INT8 add/mul with requantization (compute queue).
    Eltwise {
        op: EltOp,
        a: u32,
        b: u32,
        out: u32,
        params: u32,
        len: u32,
        a_zp: i8,
        b_zp: i8,
        out_zp: i8,
    },
    /// `out[i] = (a[i] · sigmoid(a[i])) · b[i]` over `len` f32 elements
    /// (SiLU of `a` times `b`, the SwiGLU combination; compute queue).
    /// `sigmoid` is the IR's f32 sigmoid (`slmcc_ir::ops::fused_util::
    /// sigmoid`); every operand is read before `out` is written, so `out`
    /// may equal `a` or `b`.
    SiluMul { a: u32, b: u32, out: u32, len: u32 },
    /// RMS norm of `m` rows of `n` f32 values (compute queue), optionally
    /// after a residual add: with `residual = Some((r, s))`, `s = x + r`
    /// is written at `s` and normalised, else `x` is; `y = v · (1 /
    /// sqrt(Σv²/n + eps)) · (w + offset)` with `eps`, `offset` and the `n`
    /// weights in the record at `params` (f32 `eps` @0, `offset` @4,
    /// weights from @16). `y` may equal `x`.
    RmsNorm {
        x: u32,
        residual: Option<(u32, u32)>,
        params: u32,
        y: u32,
        m: u32,
        n: u32,
    },
    /// `len` f32 values `x` to IEEE binary16 `hi = f16(x)` (round to
    /// nearest even) at `out`, and with `lo` the remainders
    /// `f16(x - hi)` there (compute queue; `x ≈ hi + lo` to 22 bits). Every
    /// operand is read before anything is written: `out = input`, `lo =
    /// input + 2·len` converts in place.
    CvtF16 {
        input: u32,
        out: u32,
        len: u32,
        lo: Option<u32>,
    },
    /// `acc[m×n] (+)= a[m×k] · b` in f32 from f16 operands (compute
    /// queue): `b` is `k×n`, or `n×k` with `b_transposed` (so `a · bᵀ`).
    MatMulF16 {
        a: u32,
        b: u32,
        acc: u32,
        m: u32,
        k: u32,
        n: u32,
        b_transposed: bool,
        accumulate: bool,
    },
    /// One online-softmax step over an `m×n` f32 score tile (compute
    /// queue): scale (f32 @0 of the record at `params`), mask, causal /
    /// window rule (`causal = Some(diag)`: key `jj` of row `ii` is masked
    /// when `jj - ii > diag`, or with the record's i32 window @4 > 0 when
    /// `jj - ii <= diag - window`), running max and sum in the 16-byte row
    /// records at `rows` (f32 max @0, sum @4, rescale factor @8), `exp`
    /// of the scores minus the new max written as f16 at `probs`.
    /// `first` starts the rows afresh (max `-inf`, sum 0).
    SoftmaxOnline {
        scores: u32,
        probs: u32,
        rows: u32,
        params: u32,
        mask: ScoreMask,
        m: u32,
        n: u32,
        causal: Option<i32>,
        first: bool,
    },
    /// Flash-attention output update of an `m×n` f32 tile `out` from the
    /// `m×n` f32 tile `t` and the row records of `sm.online` (compute
    /// queue); see [`RescaleMode`].
    Rescale {
        out: u32,
        t: u32,
        rows: u32,
        m: u32,
        n: u32,
        mode: RescaleMode,
    },
    /// Row reduction of an `m×n` INT8 tile to `m` INT32 (compute queue).
    Reduce {
        op: ReduceOp,
        input: u32,
        out: u32,
        m: u32,
        n: u32,
        zp: i8,
    },
    /// Increment semaphore `sem` of this core (either queue).
    Signal { sem: u8 },
    /// Wait until semaphore `sem` of this core is positive, then decrement
    /// it (either queue).
    Wait { sem: u8 },
}

/// The two queues of a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    Dma,
    Compute,
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Queue::Dma => "dma",
            Queue::Compute => "compute",
        })
    }
}

/// A field out of its encodable range, or an instruction on the wrong
/// queue.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    #[error("{instr}: field `{field}` = {value} out of range ({range})")]
    Field {
        instr: &'static str,
        field: &'static str,
        value: u64,
        range: &'static str,
    },
    #[error(
        "core {core} {queue} queue, instruction {index}: `{mnemonic}` cannot run on this queue"
    )]
    WrongQueue {
        core: usize,
        queue: Queue,
        index: usize,
        mnemonic: &'static str,
    },
    #[error("program has {cores} cores, the target has {max}")]
    TooManyCores { cores: usize, max: u32 },
    #[error("core {core}: semaphore s{sem} but the target has {max}")]
    Semaphore { core: usize, sem: u8, max: u8 },
}

fn field(
    instr: &'static str,
    name: &'static str,
    value: u64,
    ok: bool,
    range: &'static str,
) -> Result<(), IsaError> {
    if ok {
        Ok(())
    } else {
        Err(IsaError::Field {
            instr,
            field: name,
            value,
            range,
        })
    }
}

fn cbuf_field(instr: &'static str, name: &'static str, a: u32) -> Result<(), IsaError> {
    let ok = a.is_multiple_of(CBUF_ALIGN) && a < CBUF_ADDR_LIMIT;
    field(instr, name, a.into(), ok, "multiple of 16, < 0x80000")
}

fn in_1_to(
    instr: &'static str,
    name: &'static str,
    v: u32,
    max: u32,
    r: &'static str,
) -> Result<(), IsaError> {
    field(instr, name, v.into(), (1..=max).contains(&v), r)
}

impl Instr {
    /// The assembly mnemonic.
    pub fn mnemonic(&self) -> &'static str {
        match self {
            Instr::DmaLoad { .. } => "dma.load",
            Instr::DmaStore { .. } => "dma.store",
            Instr::MatMul {
                wtype: WeightType::I8,
                ..
            } => "mm.i8",
            Instr::MatMul {
                wtype: WeightType::I4,
                ..
            } => "mm.i4",
            Instr::Epilogue {
                out_type: OutType::I8,
                ..
            } => "epi.i8",
            Instr::Epilogue {
                out_type: OutType::I32,
                ..
            } => "epi.i32",
            Instr::EpilogueF32 { .. } => "epi.f32",
            Instr::Eltwise { op: EltOp::Add, .. } => "ew.add",
            Instr::Eltwise { op: EltOp::Mul, .. } => "ew.mul",
            Instr::SiluMul { .. } => "ew.silu_mul",
            Instr::RmsNorm { .. } => "norm.rms",
            Instr::CvtF16 { .. } => "cvt.f16",
            Instr::MatMulF16 { .. } => "mm.f16",
            Instr::SoftmaxOnline { .. } => "sm.online",
            Instr::Rescale { .. } => "ew.rescale",
            Instr::Reduce {
                op: ReduceOp::SumSq,
                ..
            } => "red.sumsq",
            Instr::Reduce {
                op: ReduceOp::Max, ..
            } => "red.max",
            Instr::Signal { .. } => "sem.signal",
            Instr::Wait { .. } => "sem.wait",
        }
    }

    /// Whether `queue` can run this instruction.
    pub fn runs_on(&self, queue: Queue) -> bool {
        match self {
            Instr::DmaLoad { .. } | Instr::DmaStore { .. } => queue == Queue::Dma,
            Instr::Signal { .. } | Instr::Wait { .. } => true,
            _ => queue == Queue::Compute,
        }
    }

    /// Checks every field against its encodable range.
    pub fn check(&self) -> Result<(), IsaError> {
        let name = self.mnemonic();
        match *self {
            Instr::DmaLoad { cbuf, dims, .. } | Instr::DmaStore { cbuf, dims, .. } => {
                cbuf_field(name, "cbuf", cbuf)?;
                in_1_to(name, "run", dims.run, DMA_MAX_RUN, "1..=8192")?;
                in_1_to(name, "count1", dims.count1, DMA_MAX_COUNT, "1..=1024")?;
                in_1_to(name, "count2", dims.count2, DMA_MAX_COUNT, "1..=1024")?;
                let r = "< 2^20";
                field(
                    name,
                    "stride1",
                    dims.stride1.into(),
                    dims.stride1 < DMA_STRIDE_LIMIT,
                    r,
                )?;
                field(
                    name,
                    "stride2",
                    dims.stride2.into(),
                    dims.stride2 < DMA_STRIDE_LIMIT,
                    r,
                )
            }
            Instr::MatMul {
                a, w, acc, m, k, n, ..
            } => {
                cbuf_field(name, "a", a)?;
                cbuf_field(name, "w", w)?;
                cbuf_field(name, "acc", acc)?;
                in_1_to(name, "m", m, MAX_MN, "1..=4096")?;
                in_1_to(name, "k", k, MAX_K, "1..=16384")?;
                in_1_to(name, "n", n, MAX_MN, "1..=4096")
            }
            Instr::Epilogue {
                out_type,
                acc,
                params,
                out,
                m,
                n,
                lut,
                residual,
                ..
            } => {
                cbuf_field(name, "acc", acc)?;
                cbuf_field(name, "params", params)?;
                cbuf_field(name, "out", out)?;
                in_1_to(name, "m", m, MAX_MN, "1..=4096")?;
                in_1_to(name, "n", n, MAX_MN, "1..=4096")?;
                if let Some(l) = lut {
                    cbuf_field(name, "lut", l)?;
                }
                if let Some((r, _)) = residual {
                    cbuf_field(name, "residual", r)?;
                }
                let plain = lut.is_none() && residual.is_none();
                let ok = out_type == OutType::I8 || plain;
                field(name, "lut/residual", 1, ok, "none with an INT32 output")
            }
            Instr::EpilogueF32 {
                acc,
                params,
                rows,
                out,
                m,
                n,
                ..
            } => {
                cbuf_field(name, "acc", acc)?;
                cbuf_field(name, "params", params)?;
                cbuf_field(name, "rows", rows)?;
                cbuf_field(name, "out", out)?;
                in_1_to(name, "m", m, MAX_MN, "1..=4096")?;
                in_1_to(name, "n", n, MAX_MN, "1..=4096")
            }
            Instr::Eltwise {
                a,
                b,
                out,
                params,
                len,
                ..
            } => {
                cbuf_field(name, "a", a)?;
                cbuf_field(name, "b", b)?;
                cbuf_field(name, "out", out)?;
                cbuf_field(name, "params", params)?;
                in_1_to(name, "len", len, MAX_LEN, "1..=524288")
            }
            Instr::SiluMul { a, b, out, len } => {
                cbuf_field(name, "a", a)?;
                cbuf_field(name, "b", b)?;
                cbuf_field(name, "out", out)?;
                in_1_to(name, "len", len, MAX_LEN, "1..=524288")
            }
            Instr::RmsNorm {
                x,
                residual,
                params,
                y,
                m,
                n,
            } => {
                cbuf_field(name, "x", x)?;
                if let Some((r, s)) = residual {
                    cbuf_field(name, "r", r)?;
                    cbuf_field(name, "s", s)?;
                }
                cbuf_field(name, "params", params)?;
                cbuf_field(name, "y", y)?;
                in_1_to(name, "m", m, MAX_MN, "1..=4096")?;
                in_1_to(name, "n", n, MAX_K, "1..=16384")
            }
            Instr::CvtF16 {
                input,
                out,
                len,
                lo,
            } => {
                cbuf_field(name, "input", input)?;
                cbuf_field(name, "out", out)?;
                if let Some(l) = lo {
                    cbuf_field(name, "lo", l)?;
                }
                in_1_to(name, "len", len, MAX_LEN, "1..=524288")
            }
            Instr::MatMulF16 {
                a, b, acc, m, k, n, ..
            } => {
                cbuf_field(name, "a", a)?;
                cbuf_field(name, "b", b)?;
                cbuf_field(name, "acc", acc)?;
                in_1_to(name, "m", m, MAX_MN, "1..=4096")?;
                in_1_to(name, "k", k, MAX_K, "1..=16384")?;
                in_1_to(name, "n", n, MAX_MN, "1..=4096")
            }
            Instr::SoftmaxOnline {
                scores,
                probs,
                rows,
                params,
                mask,
                m,
                n,
                causal,
                ..
            } => {
                cbuf_field(name, "scores", scores)?;
                cbuf_field(name, "probs", probs)?;
                cbuf_field(name, "rows", rows)?;
                cbuf_field(name, "params", params)?;
                if let ScoreMask::Keep(a) | ScoreMask::Add(a) = mask {
                    cbuf_field(name, "mask", a)?;
                }
                in_1_to(name, "m", m, MAX_SM, "1..=1024")?;
                in_1_to(name, "n", n, MAX_SM, "1..=1024")?;
                let diag = causal.unwrap_or(0);
                field(
                    name,
                    "diag",
                    i64::from(diag).unsigned_abs(),
                    DIAG_RANGE.contains(&diag),
                    "-2^19..2^19",
                )
            }
            Instr::Rescale {
                out,
                t,
                rows,
                m,
                n,
                mode,
            } => {
                cbuf_field(name, "out", out)?;
                cbuf_field(name, "t", t)?;
                cbuf_field(name, "rows", rows)?;
                in_1_to(name, "m", m, MAX_MN, "1..=4096")?;
                in_1_to(name, "n", n, MAX_MN, "1..=4096")?;
                let ok = mode != RescaleMode::Finish || t == 0;
                field(name, "t", t.into(), ok, "0 with finish")
            }
            Instr::Reduce {
                input, out, m, n, ..
            } => {
                cbuf_field(name, "input", input)?;
                cbuf_field(name, "out", out)?;
                in_1_to(name, "m", m, MAX_MN, "1..=4096")?;
                in_1_to(name, "n", n, MAX_K, "1..=16384")
            }
            Instr::Signal { sem } | Instr::Wait { sem } => {
                field(name, "sem", sem.into(), sem < MAX_SEMS, "0..16")
            }
        }
    }

    /// Multiply-accumulates this instruction performs (`m·k·n` for a
    /// matmul, 0 otherwise).
    pub fn macs(&self) -> u64 {
        match *self {
            Instr::MatMul { m, k, n, .. } | Instr::MatMulF16 { m, k, n, .. } => {
                u64::from(m) * u64::from(k) * u64::from(n)
            }
            _ => 0,
        }
    }
}

/// The two instruction queues of one core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreProgram {
    pub dma: Vec<Instr>,
    pub compute: Vec<Instr>,
}

impl CoreProgram {
    /// The queue's instructions.
    pub fn queue(&self, q: Queue) -> &[Instr] {
        match q {
            Queue::Dma => &self.dma,
            Queue::Compute => &self.compute,
        }
    }
}

/// An NPU program: one [`CoreProgram`] per used core (core `i` is the
/// `i`-th entry).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    pub cores: Vec<CoreProgram>,
}

impl Program {
    /// Checks every instruction's fields, that it is on a queue that runs
    /// it, and core and semaphore counts against the target's.
    pub fn check(&self, target: &crate::npu::Target) -> Result<(), IsaError> {
        if self.cores.len() > target.cores as usize {
            return Err(IsaError::TooManyCores {
                cores: self.cores.len(),
                max: target.cores,
            });
        }
        for (core, cp) in self.cores.iter().enumerate() {
            for queue in [Queue::Dma, Queue::Compute] {
                for (index, i) in cp.queue(queue).iter().enumerate() {
                    i.check()?;
                    if !i.runs_on(queue) {
                        let mnemonic = i.mnemonic();
                        return Err(IsaError::WrongQueue {
                            core,
                            queue,
                            index,
                            mnemonic,
                        });
                    }
                    if let Instr::Signal { sem } | Instr::Wait { sem } = *i {
                        if sem >= target.semaphores {
                            return Err(IsaError::Semaphore {
                                core,
                                sem,
                                max: target.semaphores,
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for DmaDims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dims [{}B, {} x {:#x}, {} x {:#x}]",
            self.run, self.count1, self.stride1, self.count2, self.stride2
        )
    }
}

impl fmt::Display for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mn = self.mnemonic();
        match *self {
            Instr::DmaLoad { cbuf, ddr, dims } => {
                write!(f, "{mn} cbuf[{cbuf:#07x}] <- ddr[{ddr:#010x}] {dims}")
            }
            Instr::DmaStore { ddr, cbuf, dims } => {
                write!(f, "{mn} ddr[{ddr:#010x}] <- cbuf[{cbuf:#07x}] {dims}")
            }
            Instr::MatMul { a, w, acc, m, k, n, accumulate, .. } => {
                let op = if accumulate { "+=" } else { "=" };
                write!(f, "{mn} acc[{acc:#07x}] {op} a[{a:#07x}] * w[{w:#07x}] m={m} k={k} n={n}")
            }
            Instr::Epilogue { acc, params, out, m, n, out_zp, lut, residual, .. } => {
                write!(
                    f,
                    "{mn} out[{out:#07x}] <- acc[{acc:#07x}] params[{params:#07x}] m={m} n={n} zp={out_zp}"
                )?;
                if let Some(l) = lut {
                    write!(f, " lut[{l:#07x}]")?;
                }
                if let Some((r, zp)) = residual {
                    write!(f, " res[{r:#07x}] rzp={zp}")?;
                }
                Ok(())
            }
            Instr::EpilogueF32 { acc, params, rows, out, m, n, accumulate } => {
                let op = if accumulate { "+=" } else { "=" };
                write!(
                    f,
                    "{mn} out[{out:#07x}] {op} acc[{acc:#07x}] params[{params:#07x}] rows[{rows:#07x}] m={m} n={n}"
                )
            }
            Instr::Eltwise { a, b, out, params, len, a_zp, b_zp, out_zp, .. } => write!(
                f,
                "{mn} out[{out:#07x}] <- a[{a:#07x}], b[{b:#07x}] params[{params:#07x}] len={len} zp={a_zp},{b_zp},{out_zp}"
            ),
            Instr::SiluMul { a, b, out, len } => {
                write!(f, "{mn} out[{out:#07x}] = a[{a:#07x}], b[{b:#07x}] len={len}")
            }
            Instr::Reduce { input, out, m, n, zp, .. } => {
                write!(f, "{mn} out[{out:#07x}] <- in[{input:#07x}] m={m} n={n} zp={zp}")
            }
            Instr::RmsNorm { x, residual, params, y, m, n } => match residual {
                Some((r, s)) => write!(
                    f,
                    "{mn} y[{y:#07x}], s[{s:#07x}] <- x[{x:#07x}], r[{r:#07x}] params[{params:#07x}] m={m} n={n}"
                ),
                None => write!(f, "{mn} y[{y:#07x}] <- x[{x:#07x}] params[{params:#07x}] m={m} n={n}"),
            },
            Instr::CvtF16 { input, out, len, lo } => {
                write!(f, "{mn} out[{out:#07x}] <- in[{input:#07x}] len={len}")?;
                match lo {
                    Some(l) => write!(f, " lo[{l:#07x}]"),
                    None => Ok(()),
                }
            }
            Instr::MatMulF16 { a, b, acc, m, k, n, b_transposed, accumulate } => {
                let op = if accumulate { "+=" } else { "=" };
                let t = if b_transposed { "^T" } else { "" };
                write!(f, "{mn} acc[{acc:#07x}] {op} a[{a:#07x}] * b[{b:#07x}]{t} m={m} k={k} n={n}")
            }
            Instr::SoftmaxOnline { scores, probs, rows, params, mask, m, n, causal, first } => {
                write!(
                    f,
                    "{mn} p[{probs:#07x}] <- s[{scores:#07x}] rows[{rows:#07x}] params[{params:#07x}] m={m} n={n}"
                )?;
                match mask {
                    ScoreMask::None => {}
                    ScoreMask::Keep(a) => write!(f, " keep[{a:#07x}]")?,
                    ScoreMask::Add(a) => write!(f, " add[{a:#07x}]")?,
                }
                if let Some(d) = causal {
                    write!(f, " causal diag={d}")?;
                }
                if first {
                    f.write_str(" first")?;
                }
                Ok(())
            }
            Instr::Rescale { out, t, rows, m, n, mode } => match mode {
                RescaleMode::First => write!(f, "{mn} out[{out:#07x}] = t[{t:#07x}] m={m} n={n}"),
                RescaleMode::Accumulate => write!(
                    f,
                    "{mn} out[{out:#07x}] = out * alpha[{rows:#07x}] + t[{t:#07x}] m={m} n={n}"
                ),
                RescaleMode::Finish => {
                    write!(f, "{mn} out[{out:#07x}] /= sum[{rows:#07x}] m={m} n={n}")
                }
            },
            Instr::Signal { sem } | Instr::Wait { sem } => write!(f, "{mn} s{sem}"),
        }
    }
}
