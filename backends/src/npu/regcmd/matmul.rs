//! The register program of one single-task matmul: `C[M,N] = A[M,K] · Bᵀ`
//! with B given as N kernels of K channels, run as a 1×1 convolution
//! (feature cube width 1, height M, K channels; N kernels; output cube
//! width 1, height M, N channels).
//!
//! Contract: [`MatmulTask::regcmd`] returns the 108 words of one task in
//! the order and with the values the public RK3588 matmul generator
//! (github mtx512/rk3588-npu, which ran int8 and fp16 matmuls on boards)
//! writes for the same shape and buffer addresses, or a [`MatmulError`]
//! when the shape is not a single task (features or weights do not fit the
//! CBUF) or a value does not fit its register field. Register values come
//! from field values by name through the database ([`super::db`]), which
//! checks their widths. `backends/tests/npu_regcmd.rs` holds the
//! generator's words for a grid of shapes.
//!
//! What the public sources leave open is said where it is used: the
//! meaning of `SURF_STRIDE` for M < 4, of `SURFACE_ADD` and of the
//! `BS_OW_CFG` sizes is unknown; the values are the generator's.

use std::collections::BTreeMap;

use super::db::{self, Block, FieldError};
use super::word::Word;
use crate::npu::Target;

/// Operand and output precisions of a matmul task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulPrecision {
    /// int8 × int8, int32 output.
    Int8,
    /// fp16 × fp16, fp32 output.
    Fp16,
    /// fp16 × fp16, fp32 accumulation converted to fp16 on output.
    Fp16ToFp16,
}

/// The precision codes of the `*_PRECISION` register fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PrecisionCode {
    Int8 = 0,
    Fp16 = 2,
    Int32 = 4,
    Fp32 = 5,
}

impl MatmulPrecision {
    /// `int8->int32`, `fp16->fp32` or `fp16->fp16`.
    pub fn name(self) -> &'static str {
        match self {
            MatmulPrecision::Int8 => "int8->int32",
            MatmulPrecision::Fp16 => "fp16->fp32",
            MatmulPrecision::Fp16ToFp16 => "fp16->fp16",
        }
    }

    /// Bytes per input element.
    pub fn input_bytes(self) -> u32 {
        match self {
            MatmulPrecision::Int8 => 1,
            MatmulPrecision::Fp16 | MatmulPrecision::Fp16ToFp16 => 2,
        }
    }

    /// Bytes per output element.
    pub fn output_bytes(self) -> u32 {
        match self {
            MatmulPrecision::Int8 | MatmulPrecision::Fp16 => 4,
            MatmulPrecision::Fp16ToFp16 => 2,
        }
    }

    fn input_code(self) -> PrecisionCode {
        match self {
            MatmulPrecision::Int8 => PrecisionCode::Int8,
            MatmulPrecision::Fp16 | MatmulPrecision::Fp16ToFp16 => PrecisionCode::Fp16,
        }
    }

    fn output_code(self) -> PrecisionCode {
        match self {
            MatmulPrecision::Int8 => PrecisionCode::Int32,
            MatmulPrecision::Fp16 => PrecisionCode::Fp32,
            MatmulPrecision::Fp16ToFp16 => PrecisionCode::Fp16,
        }
    }

    /// The generator's output size factor: `SIZE_E_*` of `BS_OW_CFG` is
    /// this minus 1, and `SURFACE_ADD` is M times it (8 for int32 output,
    /// 4 for fp32, 2 for fp16; its meaning is not documented publicly).
    fn output_factor(self) -> u64 {
        match self {
            MatmulPrecision::Int8 => 8,
            MatmulPrecision::Fp16 => 4,
            MatmulPrecision::Fp16ToFp16 => 2,
        }
    }
}

/// One matmul task and the NPU addresses of its three buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulTask {
    pub precision: MatmulPrecision,
    /// Feature rows (the output height).
    pub m: u32,
    /// Channels (the reduction length).
    pub k: u32,
    /// Kernels (the output channels).
    pub n: u32,
    /// A, in the NC1HWC2 feature layout.
    pub input: u32,
    /// B, in the layout CNA reads.
    pub weights: u32,
    /// C, in the NC1HWC2 layout of the output precision.
    pub output: u32,
}

/// A matmul that is not one task, or whose registers cannot hold it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MatmulError {
    #[error("{what} must be at least 1")]
    Empty { what: &'static str },
    #[error("K = {k} is not a multiple of {align} (the channel block CNA reads)")]
    KAlign { k: u32, align: u32 },
    #[error("the group {group} is not a multiple of {align} that divides K = {k}")]
    Group { group: u32, k: u32, align: u32 },
    #[error("the group {group} does not divide K = {k}")]
    GroupDivides { group: u32, k: u32 },
    #[error("N = {n} is not a multiple of {align} (the kernel block of the weight layout)")]
    NAlign { n: u32, align: u32 },
    #[error(
        "the features ({bytes} bytes) need {banks} CBUF banks; one task holds at most {max} \
         (one bank stays for the weights)"
    )]
    FeaturesTooLarge { bytes: u64, banks: u64, max: u32 },
    #[error(
        "the weights ({bytes} bytes) do not fit the {banks} CBUF banks the features leave \
         ({bank_bytes} bytes each)"
    )]
    WeightsTooLarge {
        bytes: u64,
        banks: u32,
        bank_bytes: u32,
    },
    #[error("register field: {0}")]
    Field(#[from] FieldError),
    #[error("no register {block}.{name} in the database")]
    NoRegister { block: Block, name: &'static str },
}

/// How a task divides the CBUF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CbufSplit {
    pub data_banks: u32,
    pub weight_banks: u32,
}

/// Channel alignment of K and kernel alignment of N that the task
/// accepts: the shapes the public generator's tests ran (K in blocks of
/// 32 channels, N in blocks of 16 kernels).
pub const K_ALIGN: u32 = 32;
pub const N_ALIGN: u32 = 16;

impl MatmulTask {
    /// Checks that the task is one task and returns the CBUF split: the
    /// features take `ceil(M·K·bytes / bank)` banks (at most all but one),
    /// the weights the rest, and all N·K weights must fit there.
    pub fn cbuf_split(&self) -> Result<CbufSplit, MatmulError> {
        for (what, v) in [("M", self.m), ("K", self.k), ("N", self.n)] {
            if v == 0 {
                return Err(MatmulError::Empty { what });
            }
        }
        if !self.k.is_multiple_of(K_ALIGN) {
            return Err(MatmulError::KAlign {
                k: self.k,
                align: K_ALIGN,
            });
        }
        if !self.n.is_multiple_of(N_ALIGN) {
            return Err(MatmulError::NAlign {
                n: self.n,
                align: N_ALIGN,
            });
        }
        let target = Target::rk3588();
        let bank = u64::from(target.cbuf_bank_bytes);
        let bpe = u64::from(self.precision.input_bytes());
        let feature_bytes = u64::from(self.m) * u64::from(self.k) * bpe;
        let data_banks = feature_bytes.div_ceil(bank);
        if data_banks >= u64::from(target.cbuf_banks) {
            return Err(MatmulError::FeaturesTooLarge {
                bytes: feature_bytes,
                banks: data_banks,
                max: target.cbuf_banks - 1,
            });
        }
        let data_banks = data_banks as u32;
        let weight_banks = target.cbuf_banks - data_banks;
        let weight_bytes = u64::from(self.n) * u64::from(self.k) * bpe;
        if weight_bytes > u64::from(weight_banks) * bank {
            return Err(MatmulError::WeightsTooLarge {
                bytes: weight_bytes,
                banks: weight_banks,
                bank_bytes: target.cbuf_bank_bytes,
            });
        }
        Ok(CbufSplit {
            data_banks,
            weight_banks,
        })
    }

    /// The task's register command list (108 words, ending with the
    /// enable word).
    pub fn regcmd(&self) -> Result<Vec<Word>, MatmulError> {
        let split = self.cbuf_split()?;
        let p = self.precision;
        let (m, k, n) = (u64::from(self.m), u64::from(self.k), u64::from(self.n));
        let bpe = u64::from(p.input_bytes());
        let in_code = p.input_code() as u64;
        let fp16 = u64::from(p.input_code() == PrecisionCode::Fp16);
        let mut e = Emitter(Vec::with_capacity(108));
        use Block::{Cna, Core, Dpu};

        let pp = [
            ("POINTER_PP_MODE", 1),
            ("EXECUTER_PP_EN", 1),
            ("POINTER_PP_EN", 1),
        ];
        e.set(Dpu, "S_POINTER", &pp)?;

        // CNA: the feature cube (width 1, height M, K channels), the N
        // kernels of 1×1×K, the CBUF split and the two read DMAs.
        let conv = [("PROC_PRECISION", in_code), ("IN_PRECISION", in_code)];
        e.set(Cna, "CONV_CON1", &conv)?;
        e.set(Cna, "CONV_CON2", &[("FEATURE_GRAINS", m + 1)])?;
        let stride = [("CONV_Y_STRIDE", 1), ("CONV_X_STRIDE", 1)];
        e.set(Cna, "CONV_CON3", &stride)?;
        let size0 = [("DATAIN_WIDTH", 1), ("DATAIN_HEIGHT", m)];
        e.set(Cna, "DATA_SIZE0", &size0)?;
        let size1 = [("DATAIN_CHANNEL_REAL", k - 1), ("DATAIN_CHANNEL", k)];
        e.set(Cna, "DATA_SIZE1", &size1)?;
        e.set(Cna, "DATA_SIZE2", &[("DATAOUT_WIDTH", 1)])?;
        e.set(Cna, "DATA_SIZE3", &[("DATAOUT_ATOMICS", m)])?;
        e.set(Cna, "WEIGHT_SIZE0", &[("WEIGHT_BYTES", n * k * bpe)])?;
        e.set(Cna, "WEIGHT_SIZE1", &[("WEIGHT_BYTES_PER_KERNEL", k * bpe)])?;
        let wsize2 = [
            ("WEIGHT_WIDTH", 1),
            ("WEIGHT_HEIGHT", 1),
            ("WEIGHT_KERNELS", n),
        ];
        e.set(Cna, "WEIGHT_SIZE2", &wsize2)?;
        let banks = [
            ("WEIGHT_BANK", u64::from(split.weight_banks)),
            ("DATA_BANK", u64::from(split.data_banks)),
        ];
        e.set(Cna, "CBUF_CON0", &banks)?;
        // CBUF entries per feature row: 64 input bytes each (width 1).
        e.set(
            Cna,
            "CBUF_CON1",
            &[("DATA_ENTRIES", (k * bpe).div_ceil(64))],
        )?;
        let cvt = [("DATA_SIGN", 1), ("CVT_TYPE", 1), ("CVT_BYPASS", 1)];
        e.set(Cna, "CVT_CON0", &cvt)?;
        e.set(Cna, "CVT_CON1", &[("CVT_SCALE0", 1)])?;
        e.set(Cna, "CVT_CON2", &[("CVT_SCALE1", 1)])?;
        e.set(Cna, "CVT_CON3", &[("CVT_SCALE2", 1)])?;
        e.set(Cna, "CVT_CON4", &[("CVT_SCALE3", 1)])?;
        e.zero(Cna, &["FC_CON0", "FC_CON1", "PAD_CON0"])?;
        let input = u64::from(self.input);
        e.set(Cna, "FEATURE_DATA_ADDR", &[("FEATURE_BASE_ADDR", input)])?;
        e.zero(Cna, &["FC_CON2"])?;
        let burst = [("WEIGHT_BURST_LEN", 15), ("DATA_BURST_LEN", 15)];
        e.set(Cna, "DMA_CON0", &burst)?;
        // Line stride in 4-byte units of one 16-byte feature atom per line.
        e.set(Cna, "DMA_CON1", &[("LINE_STRIDE", 4)])?;
        e.set(Cna, "DMA_CON2", &[("SURF_STRIDE", surf_stride(self.m))])?;
        let dma0 = [("DMA_WIDTH", 1), ("DMA_HEIGHT", m)];
        e.set(Cna, "FC_DATA_SIZE0", &dma0)?;
        e.set(Cna, "FC_DATA_SIZE1", &[("DMA_CHANNEL", k)])?;
        e.zero(Cna, &["DCOMP_CTRL", "DCOMP_REGNUM"])?;
        let weights = u64::from(self.weights);
        e.set(Cna, "DCOMP_ADDR0", &[("DECOMPRESS_ADDR0", weights)])?;
        for name in DCOMP_AMOUNTS {
            e.zero(Cna, &[name])?;
        }
        e.zero(Cna, &["CVT_CON5", "PAD_CON1"])?;

        // CORE: the MAC array's output cube (height M, N channels).
        let misc = [("PROC_PRECISION", in_code), ("QD_EN", fp16)];
        e.set(Core, "MISC_CFG", &misc)?;
        e.set(Core, "DATAOUT_SIZE_0", &[("DATAOUT_HEIGHT", m - 1)])?;
        e.set(Core, "DATAOUT_SIZE_1", &[("DATAOUT_CHANNEL", n - 1)])?;
        e.zero(Core, &["CLIP_TRUNCATE", "UNDOCUMENTED_3030"])?;

        // DPU: every stage bypassed; the output written as NC1HWC2.
        let mode = [("BURST_LEN", 15), ("OUTPUT_MODE", 2)];
        e.set(Dpu, "FEATURE_MODE_CFG", &mode)?;
        let format = [
            ("OUT_PRECISION", p.output_code() as u64),
            ("IN_PRECISION", in_code),
            ("PROC_PRECISION", in_code),
        ];
        e.set(Dpu, "DATA_FORMAT", &format)?;
        e.zero(Dpu, &["OFFSET_PEND"])?;
        let output = u64::from(self.output);
        e.set(Dpu, "DST_BASE_ADDR", &[("DST_BASE_ADDR", output)])?;
        // One output surface (C2 channels of all M rows) is M 16-byte atoms.
        e.set(Dpu, "DST_SURF_STRIDE", &[("DST_SURF_STRIDE", m)])?;
        e.zero(Dpu, &["DATA_CUBE_WIDTH"])?;
        e.set(Dpu, "DATA_CUBE_HEIGHT", &[("HEIGHT", m - 1)])?;
        e.zero(Dpu, &["DATA_CUBE_NOTCH_ADDR"])?;
        let channel = [("ORIG_CHANNEL", n - 1), ("CHANNEL", n - 1)];
        e.set(Dpu, "DATA_CUBE_CHANNEL", &channel)?;
        let bs_bypass = [
            ("BS_RELU_BYPASS", 1),
            ("BS_MUL_BYPASS", 1),
            ("BS_ALU_BYPASS", 1),
            ("BS_BYPASS", 1),
        ];
        e.set(Dpu, "BS_CFG", &bs_bypass)?;
        e.zero(Dpu, &["BS_ALU_CFG", "BS_MUL_CFG", "BS_RELUX_CMP_VALUE"])?;
        let size_e = p.output_factor() - 1;
        let ow = [
            ("SIZE_E_2", size_e),
            ("SIZE_E_1", size_e),
            ("SIZE_E_0", size_e),
            ("OD_BYPASS", 1),
        ];
        e.set(Dpu, "BS_OW_CFG", &ow)?;
        e.zero(Dpu, &["BS_OW_OP"])?;
        e.set(Dpu, "WDMA_SIZE_0", &[("CHANNEL_WDMA", n - 1)])?;
        e.set(Dpu, "WDMA_SIZE_1", &[("HEIGHT_WDMA", m - 1)])?;
        let bn_bypass = [
            ("BN_RELU_BYPASS", 1),
            ("BN_MUL_BYPASS", 1),
            ("BN_ALU_BYPASS", 1),
            ("BN_BYPASS", 1),
        ];
        e.set(Dpu, "BN_CFG", &bn_bypass)?;
        e.zero(Dpu, &["BN_ALU_CFG", "BN_MUL_CFG", "BN_RELUX_CMP_VALUE"])?;
        let ew_bypass = [
            ("EW_RELU_BYPASS", 1),
            ("EW_OP_CVT_BYPASS", 1),
            ("EW_LUT_BYPASS", 1),
            ("EW_OP_BYPASS", 1),
            ("EW_BYPASS", 1),
        ];
        e.set(Dpu, "EW_CFG", &ew_bypass)?;
        e.zero(Dpu, &["EW_CVT_OFFSET_VALUE"])?;
        e.set(Dpu, "EW_CVT_SCALE_VALUE", &[("EW_OP_CVT_SCALE", 1)])?;
        e.zero(Dpu, &["EW_RELUX_CMP_VALUE", "OUT_CVT_OFFSET"])?;
        let to_fp16 = u64::from(p == MatmulPrecision::Fp16ToFp16);
        let scale = [("FP32TOFP16_EN", to_fp16), ("OUT_CVT_SCALE", 1)];
        e.set(Dpu, "OUT_CVT_SCALE", &scale)?;
        e.zero(Dpu, &["OUT_CVT_SHIFT"])?;
        e.zero(Dpu, &EW_OP_VALUES)?;
        let surf_add = m * p.output_factor();
        e.set(Dpu, "SURFACE_ADD", &[("SURF_ADD", surf_add)])?;
        e.zero(Dpu, &["UNDOCUMENTED_40C4"])?;
        e.zero(Dpu, &LUT_REGISTERS)?;

        // The tail: no next task, the pre-enable word, then start CNA,
        // CORE and DPU.
        e.0.push(Word::Zero);
        e.set(Block::Pc, "REGISTER_AMOUNTS", &[("PC_DATA_AMOUNT", 0)])?;
        e.0.push(Word::PreEnable);
        let enable = db::OP_ENABLE_FIELDS
            .iter()
            .filter(|f| matches!(f.name, "CNA_OP_EN" | "CORE_OP_EN" | "DPU_OP_EN"))
            .fold(0, |mask, f| mask | f.mask());
        e.0.push(Word::Enable { blocks: enable });
        Ok(e.0)
    }
}

/// A command list that is not the programming of a matmul task.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("the command list does not end with the pre-enable and enable words")]
    NoEnable,
    #[error("{0} is never written: the task is not a matmul")]
    Missing(String),
    #[error("not modelled: {register} = {got} (a matmul task of this shape writes {expected:#x})")]
    Unmodelled {
        register: String,
        got: String,
        expected: u32,
    },
    #[error("the task's shape: {0}")]
    Shape(#[from] MatmulError),
}

/// Which buffer an address register of a matmul task points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskBuffer {
    /// The feature cube (CNA `FEATURE_DATA_ADDR`).
    Features,
    /// The weights (CNA `DCOMP_ADDR0`).
    Weights,
    /// The output cube (DPU `DST_BASE_ADDR`).
    Outputs,
}

/// The registers of a task that hold an NPU address, with the buffer
/// each one points into: what a relocation adds a buffer's base to.
pub const ADDRESS_REGISTERS: [(Block, &str, TaskBuffer); 3] = [
    (Block::Cna, "FEATURE_DATA_ADDR", TaskBuffer::Features),
    (Block::Cna, "DCOMP_ADDR0", TaskBuffer::Weights),
    (Block::Dpu, "DST_BASE_ADDR", TaskBuffer::Outputs),
];

impl MatmulTask {
    /// The task a command list programs, checked register by register:
    /// every register must hold what [`MatmulTask::regcmd`] writes for the
    /// shape and addresses the list gives, and the list must write no
    /// other. What the functional model runs, and how a loader checks a
    /// stored list.
    pub fn from_words(words: &[Word]) -> Result<MatmulTask, TaskError> {
        matmul_of(words)
    }

    /// `words` (a task's list whose addresses are offsets into its
    /// buffers) with `base(buffer)` added to each address register;
    /// `None` when an address would pass 32 bits.
    pub fn relocate(words: &mut [Word], base: impl Fn(TaskBuffer) -> u32) -> Option<()> {
        for w in words.iter_mut() {
            let Word::Write { reg, value } = w else {
                continue;
            };
            for (block, name, buffer) in ADDRESS_REGISTERS {
                if reg.block == block && reg.name == name {
                    *value = value.checked_add(base(buffer))?;
                }
            }
        }
        Some(())
    }
}

/// The register state a list leaves: register offset to value.
fn register_state(words: &[Word]) -> Result<(BTreeMap<u16, u32>, u32), TaskError> {
    let [.., Word::PreEnable, Word::Enable { blocks }] = words else {
        return Err(TaskError::NoEnable);
    };
    let mut state = BTreeMap::new();
    for w in words {
        if let Word::Write { reg, value } = w {
            state.insert(reg.offset, *value);
        }
    }
    Ok((state, *blocks))
}

/// Reads `block.register.field` from the state.
fn field(
    state: &BTreeMap<u16, u32>,
    block: Block,
    reg: &str,
    name: &str,
) -> Result<u32, TaskError> {
    let missing = || TaskError::Missing(format!("{block}_{reg}.{name}"));
    let r = db::lookup(block, reg).ok_or_else(missing)?;
    let f = r.field(name).ok_or_else(missing)?;
    let value = state.get(&r.offset).ok_or_else(missing)?;
    Ok(f.get(*value))
}

/// The matmul a register state describes, checked register by register
/// against the programming of that matmul.
fn matmul_of(words: &[Word]) -> Result<MatmulTask, TaskError> {
    let (state, blocks) = register_state(words)?;
    let get = |block, reg, name| field(&state, block, reg, name);
    let in_precision = get(Block::Cna, "CONV_CON1", "IN_PRECISION")?;
    let out_precision = get(Block::Dpu, "DATA_FORMAT", "OUT_PRECISION")?;
    let precision = match (in_precision, out_precision) {
        (0, 4) => MatmulPrecision::Int8,
        (2, 5) => MatmulPrecision::Fp16,
        (2, 2) => MatmulPrecision::Fp16ToFp16,
        (i, o) => {
            return Err(TaskError::Unmodelled {
                register: "precisions (CNA in, DPU out)".into(),
                got: format!("{i}, {o}"),
                expected: 0,
            })
        }
    };
    let task = MatmulTask {
        precision,
        m: get(Block::Cna, "DATA_SIZE0", "DATAIN_HEIGHT")?,
        k: get(Block::Cna, "DATA_SIZE1", "DATAIN_CHANNEL")?,
        n: get(Block::Cna, "WEIGHT_SIZE2", "WEIGHT_KERNELS")?,
        input: get(Block::Cna, "FEATURE_DATA_ADDR", "FEATURE_BASE_ADDR")?,
        weights: get(Block::Cna, "DCOMP_ADDR0", "DECOMPRESS_ADDR0")?,
        output: get(Block::Dpu, "DST_BASE_ADDR", "DST_BASE_ADDR")?,
    };
    let mut expected_offsets = Vec::new();
    for w in task.regcmd()? {
        match w {
            Word::Write { reg, value } => {
                expected_offsets.push(reg.offset);
                let got = state.get(&reg.offset).copied();
                if got != Some(value) {
                    return Err(TaskError::Unmodelled {
                        register: reg.full_name(),
                        got: got.map_or("unwritten".into(), |v| format!("{v:#x}")),
                        expected: value,
                    });
                }
            }
            Word::Enable { blocks: want } if want != blocks => {
                return Err(TaskError::Unmodelled {
                    register: "the enable word's blocks".into(),
                    got: format!("{blocks:#x}"),
                    expected: want,
                });
            }
            _ => {}
        }
    }
    if let Some((&offset, &value)) = state.iter().find(|(o, _)| !expected_offsets.contains(o)) {
        let name = db::register(offset).map_or(format!("{offset:#06x}"), |r| r.full_name());
        return Err(TaskError::Unmodelled {
            register: name,
            got: format!("{value:#x}"),
            expected: 0,
        });
    }
    Ok(task)
}

/// `SURF_STRIDE` as the generator programs it: `4·(⌊M/4⌋ − 1)`, and for
/// M < 4 (where that is negative) `−3` in the field's 28 bits. What the
/// hardware does with it for M < 4 is not known publicly.
fn surf_stride(m: u32) -> u64 {
    let stride = 4 * (i64::from(m / 4) - 1);
    let stride = if stride < 0 { stride + 1 } else { stride };
    (stride as u64) & ((1 << 28) - 1)
}

const DCOMP_AMOUNTS: [&str; 16] = [
    "DCOMP_AMOUNT0",
    "DCOMP_AMOUNT1",
    "DCOMP_AMOUNT2",
    "DCOMP_AMOUNT3",
    "DCOMP_AMOUNT4",
    "DCOMP_AMOUNT5",
    "DCOMP_AMOUNT6",
    "DCOMP_AMOUNT7",
    "DCOMP_AMOUNT8",
    "DCOMP_AMOUNT9",
    "DCOMP_AMOUNT10",
    "DCOMP_AMOUNT11",
    "DCOMP_AMOUNT12",
    "DCOMP_AMOUNT13",
    "DCOMP_AMOUNT14",
    "DCOMP_AMOUNT15",
];

const EW_OP_VALUES: [&str; 8] = [
    "EW_OP_VALUE_0",
    "EW_OP_VALUE_1",
    "EW_OP_VALUE_2",
    "EW_OP_VALUE_3",
    "EW_OP_VALUE_4",
    "EW_OP_VALUE_5",
    "EW_OP_VALUE_6",
    "EW_OP_VALUE_7",
];

const LUT_REGISTERS: [&str; 12] = [
    "LUT_ACCESS_CFG",
    "LUT_ACCESS_DATA",
    "LUT_CFG",
    "LUT_INFO",
    "LUT_LE_START",
    "LUT_LE_END",
    "LUT_LO_START",
    "LUT_LO_END",
    "LUT_LE_SLOPE_SCALE",
    "LUT_LE_SLOPE_SHIFT",
    "LUT_LO_SLOPE_SCALE",
    "LUT_LO_SLOPE_SHIFT",
];

/// Appends register writes built from field values.
struct Emitter(Vec<Word>);

impl Emitter {
    fn set(
        &mut self,
        block: Block,
        name: &'static str,
        fields: &[(&str, u64)],
    ) -> Result<(), MatmulError> {
        let reg = db::lookup(block, name).ok_or(MatmulError::NoRegister { block, name })?;
        let value = reg.pack(fields)?;
        self.0.push(Word::Write { reg, value });
        Ok(())
    }

    /// Writes 0 to each named register.
    fn zero(&mut self, block: Block, names: &[&'static str]) -> Result<(), MatmulError> {
        names.iter().try_for_each(|name| self.set(block, name, &[]))
    }
}
