//! The register database: every block, register and field (with its bit
//! range) that slmcc writes into an RK3588 register command list.
//!
//! This table is the only place where a bit position is written. The
//! encoder ([`Register::pack`]), the decoder and its range checks
//! ([`Register::unpack`]) and the disassembler all read it.
//!
//! Names, offsets and fields are those of Mesa's `rocket` driver register
//! description (`src/gallium/drivers/rocket/registers.xml`, MIT), limited to
//! the registers a matmul task writes. Two registers that both Mesa and the
//! public matmul generator write as 0 are not described anywhere public
//! (CORE 0x3030, DPU 0x40C4): they have no fields here, so only 0 encodes.

use std::fmt;

macro_rules! fields {
    ($($name:ident [$hi:literal : $lo:literal]),* $(,)?) => {
        &[$(Field { name: stringify!($name), hi: $hi, lo: $lo }),*]
    };
}

/// One [`Register`]: `Block OFFSET NAME { FIELD[hi:lo], ... }`, or
/// `Block OFFSET NAME = FIELDS` for a shared field list.
macro_rules! reg {
    ($block:ident $offset:literal $name:ident { $($fields:tt)* }) => {
        Register {
            block: Block::$block,
            offset: $offset,
            name: stringify!($name),
            fields: fields![$($fields)*],
        }
    };
    ($block:ident $offset:literal $name:ident = $fields:ident) => {
        Register {
            block: Block::$block,
            offset: $offset,
            name: stringify!($name),
            fields: $fields,
        }
    };
}

macro_rules! registers {
    ($($block:ident $offset:literal $name:ident $def:tt $($shared:ident)?;)*) => {
        &[$(reg!($block $offset $name $def $($shared)?)),*]
    };
}

/// A hardware block of one NPU core. Its id, plus 1, is the target of a
/// register-write word; its registers sit at `base..base + 0x1000`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Block {
    /// The front end that fetches the register command list.
    Pc,
    /// Convolution DMA (feature and weight reads) and the CBUF.
    Cna,
    /// The MAC array.
    Core,
    /// Output processing (bias, scale, element-wise, LUT, conversion) and
    /// the write DMA.
    Dpu,
    /// The DPU's read DMA (bias, batch-norm and element-wise operands).
    DpuRdma,
}

impl Block {
    /// Every block, in id order.
    pub const ALL: [Block; 5] = [
        Block::Pc,
        Block::Cna,
        Block::Core,
        Block::Dpu,
        Block::DpuRdma,
    ];

    /// The block id (Mesa's `enum target`).
    pub fn id(self) -> u16 {
        match self {
            Block::Pc => 0x0100,
            Block::Cna => 0x0200,
            Block::Core => 0x0800,
            Block::Dpu => 0x1000,
            Block::DpuRdma => 0x2000,
        }
    }

    /// The target field of a word that writes one of this block's
    /// registers: the id with bit 0 set.
    pub fn write_target(self) -> u16 {
        self.id() | 1
    }

    /// The block whose register-write target is `target`.
    pub fn from_write_target(target: u16) -> Option<Block> {
        Block::ALL.into_iter().find(|b| b.write_target() == target)
    }

    /// The first register offset of the block.
    pub fn base(self) -> u16 {
        match self {
            Block::Pc => 0x0000,
            Block::Cna => 0x1000,
            Block::Core => 0x3000,
            Block::Dpu => 0x4000,
            Block::DpuRdma => 0x5000,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Block::Pc => "PC",
            Block::Cna => "CNA",
            Block::Core => "CORE",
            Block::Dpu => "DPU",
            Block::DpuRdma => "DPU_RDMA",
        }
    }
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A bit range `hi..=lo` of a register value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub hi: u8,
    pub lo: u8,
}

impl Field {
    /// Bits in the field.
    pub fn width(&self) -> u32 {
        u32::from(self.hi - self.lo) + 1
    }

    /// The field's bits within the register value.
    pub fn mask(&self) -> u32 {
        (u32::MAX >> (32 - self.width())) << self.lo
    }

    /// The field's value within the register value `value`.
    pub fn get(&self, value: u32) -> u32 {
        (value & self.mask()) >> self.lo
    }
}

/// One register: its block, full offset (block base included), name and
/// fields in descending bit order.
#[derive(Debug, PartialEq, Eq)]
pub struct Register {
    pub block: Block,
    pub offset: u16,
    pub name: &'static str,
    pub fields: &'static [Field],
}

/// A register value that the database does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("{block}.{register} has no field {field}")]
    UnknownField {
        block: Block,
        register: &'static str,
        field: String,
    },
    #[error("{block}.{register}.{field} = {value:#x} does not fit its {bits} bits")]
    Overflow {
        block: Block,
        register: &'static str,
        field: &'static str,
        value: u64,
        bits: u32,
    },
    #[error("{block}.{register}: value {value:#010x} sets bits {bits:#010x} outside its fields")]
    Reserved {
        block: Block,
        register: &'static str,
        value: u32,
        bits: u32,
    },
}

impl Register {
    /// The full name, `BLOCK_NAME`.
    pub fn full_name(&self) -> String {
        format!("{}_{}", self.block.name(), self.name)
    }

    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The bits covered by some field.
    pub fn defined_bits(&self) -> u32 {
        self.fields.iter().fold(0, |m, f| m | f.mask())
    }

    /// Packs field values into a register value; unnamed fields are 0.
    /// Fails on an unknown field or a value wider than its field.
    pub fn pack(&self, values: &[(&str, u64)]) -> Result<u32, FieldError> {
        let mut out = 0u32;
        for &(name, value) in values {
            let field = self.field(name).ok_or_else(|| FieldError::UnknownField {
                block: self.block,
                register: self.name,
                field: name.to_string(),
            })?;
            if value >> field.width() != 0 {
                return Err(FieldError::Overflow {
                    block: self.block,
                    register: self.name,
                    field: field.name,
                    value,
                    bits: field.width(),
                });
            }
            out |= (value as u32) << field.lo;
        }
        Ok(out)
    }

    /// Splits a register value into its fields (descending bit order).
    /// Fails if the value sets a bit no field covers.
    pub fn unpack(&self, value: u32) -> Result<Vec<(&'static str, u32)>, FieldError> {
        let stray = value & !self.defined_bits();
        if stray != 0 {
            return Err(FieldError::Reserved {
                block: self.block,
                register: self.name,
                value,
                bits: stray,
            });
        }
        Ok(self.fields.iter().map(|f| (f.name, f.get(value))).collect())
    }
}

/// The register at `offset`, if the database has it.
pub fn register(offset: u16) -> Option<&'static Register> {
    REGISTERS.iter().find(|r| r.offset == offset)
}

/// The register named `BLOCK`, `NAME` (e.g. `Block::Cna`, `"CONV_CON2"`).
pub fn lookup(block: Block, name: &str) -> Option<&'static Register> {
    REGISTERS
        .iter()
        .find(|r| r.block == block && r.name == name)
}

/// The fields of the value of the operation-enable word (`0x0081` target,
/// register 0x0008): one enable bit per block. These are the bits of the
/// GLOBAL `OPERATION_ENABLE` register (0xF008), whose layout the word's
/// value follows; the TRM says the word "will set each block's op_en".
pub static OP_ENABLE_FIELDS: &[Field] = fields![
    PPU_RDMA_OP_EN[6:6],
    PPU_OP_EN[5:5],
    DPU_RDMA_OP_EN[4:4],
    DPU_OP_EN[3:3],
    CORE_OP_EN[2:2],
    CNA_OP_EN[0:0],
];

/// The S_POINTER layout, shared by CNA, CORE, DPU and DPU_RDMA.
const S_POINTER_FIELDS: &[Field] = fields![
    EXECUTER[16:16],
    EXECUTER_PP_CLEAR[5:5],
    POINTER_PP_CLEAR[4:4],
    POINTER_PP_MODE[3:3],
    EXECUTER_PP_EN[2:2],
    POINTER_PP_EN[1:1],
    POINTER[0:0],
];

/// Every register of the database, in offset order.
pub static REGISTERS: &[Register] = registers! {
    Pc 0x0008 OPERATION_ENABLE { RESERVED_0[31:1], OP_EN[0:0] };
    Pc 0x0010 BASE_ADDRESS { PC_SOURCE_ADDR[31:4], RESERVED_0[3:1], PC_SEL[0:0] };
    Pc 0x0014 REGISTER_AMOUNTS { RESERVED_0[31:16], PC_DATA_AMOUNT[15:0] };
    Cna 0x1004 S_POINTER = S_POINTER_FIELDS;
    Cna 0x100C CONV_CON1 {
            NONALIGN_DMA[30:30], GROUP_LINE_OFF[29:29], DECONV[16:16], ARGB_IN[15:12],
            PROC_PRECISION[9:7], IN_PRECISION[6:4], CONV_MODE[3:0]
        };
    Cna 0x1010 CONV_CON2 {
            KERNEL_GROUP[23:16], FEATURE_GRAINS[13:4], CSC_WO_EN[2:2], CSC_DO_EN[1:1],
            CMD_FIFO_SRST[0:0]
        };
    Cna 0x1014 CONV_CON3 {
            NN_MODE[30:28], ATROUS_Y_DILATION[25:21], ATROUS_X_DILATION[20:16],
            DECONV_Y_STRIDE[13:11], DECONV_X_STRIDE[10:8], CONV_Y_STRIDE[5:3],
            CONV_X_STRIDE[2:0]
        };
    Cna 0x1020 DATA_SIZE0 { DATAIN_WIDTH[26:16], DATAIN_HEIGHT[10:0] };
    Cna 0x1024 DATA_SIZE1 { DATAIN_CHANNEL_REAL[29:16], DATAIN_CHANNEL[15:0] };
    Cna 0x1028 DATA_SIZE2 { DATAOUT_WIDTH[10:0] };
    Cna 0x102C DATA_SIZE3 { SURF_MODE[23:22], DATAOUT_ATOMICS[21:0] };
    Cna 0x1030 WEIGHT_SIZE0 { WEIGHT_BYTES[31:0] };
    Cna 0x1034 WEIGHT_SIZE1 { WEIGHT_BYTES_PER_KERNEL[18:0] };
    Cna 0x1038 WEIGHT_SIZE2 { WEIGHT_WIDTH[28:24], WEIGHT_HEIGHT[20:16], WEIGHT_KERNELS[13:0] };
    Cna 0x1040 CBUF_CON0 {
            WEIGHT_REUSE[13:13], DATA_REUSE[12:12], FC_DATA_BANK[10:8], WEIGHT_BANK[7:4],
            DATA_BANK[3:0]
        };
    Cna 0x1044 CBUF_CON1 { DATA_ENTRIES[13:0] };
    Cna 0x104C CVT_CON0 {
            CVT_TRUNCATE_3[27:22], CVT_TRUNCATE_2[21:16], CVT_TRUNCATE_1[15:10],
            CVT_TRUNCATE_0[9:4], DATA_SIGN[3:3], ROUND_TYPE[2:2], CVT_TYPE[1:1],
            CVT_BYPASS[0:0]
        };
    Cna 0x1050 CVT_CON1 { CVT_SCALE0[31:16], CVT_OFFSET0[15:0] };
    Cna 0x1054 CVT_CON2 { CVT_SCALE1[31:16], CVT_OFFSET1[15:0] };
    Cna 0x1058 CVT_CON3 { CVT_SCALE2[31:16], CVT_OFFSET2[15:0] };
    Cna 0x105C CVT_CON4 { CVT_SCALE3[31:16], CVT_OFFSET3[15:0] };
    Cna 0x1060 FC_CON0 { FC_SKIP_DATA[31:16], FC_SKIP_EN[0:0] };
    Cna 0x1064 FC_CON1 { DATA_OFFSET[16:0] };
    Cna 0x1068 PAD_CON0 { PAD_LEFT[7:4], PAD_TOP[3:0] };
    Cna 0x1070 FEATURE_DATA_ADDR { FEATURE_BASE_ADDR[31:0] };
    Cna 0x1074 FC_CON2 { WEIGHT_OFFSET[16:0] };
    Cna 0x1078 DMA_CON0 { OV4K_BYPASS[31:31], WEIGHT_BURST_LEN[19:16], DATA_BURST_LEN[3:0] };
    Cna 0x107C DMA_CON1 { LINE_STRIDE[27:0] };
    Cna 0x1080 DMA_CON2 { SURF_STRIDE[27:0] };
    Cna 0x1084 FC_DATA_SIZE0 { DMA_WIDTH[29:16], DMA_HEIGHT[10:0] };
    Cna 0x1088 FC_DATA_SIZE1 { DMA_CHANNEL[15:0] };
    Cna 0x1100 DCOMP_CTRL { WT_DEC_BYPASS[3:3], DECOMP_CONTROL[2:0] };
    Cna 0x1104 DCOMP_REGNUM { DCOMP_REGNUM[31:0] };
    Cna 0x1110 DCOMP_ADDR0 { DECOMPRESS_ADDR0[31:0] };
    Cna 0x1140 DCOMP_AMOUNT0 { DCOMP_AMOUNT0[31:0] };
    Cna 0x1144 DCOMP_AMOUNT1 { DCOMP_AMOUNT1[31:0] };
    Cna 0x1148 DCOMP_AMOUNT2 { DCOMP_AMOUNT2[31:0] };
    Cna 0x114C DCOMP_AMOUNT3 { DCOMP_AMOUNT3[31:0] };
    Cna 0x1150 DCOMP_AMOUNT4 { DCOMP_AMOUNT4[31:0] };
    Cna 0x1154 DCOMP_AMOUNT5 { DCOMP_AMOUNT5[31:0] };
    Cna 0x1158 DCOMP_AMOUNT6 { DCOMP_AMOUNT6[31:0] };
    Cna 0x115C DCOMP_AMOUNT7 { DCOMP_AMOUNT7[31:0] };
    Cna 0x1160 DCOMP_AMOUNT8 { DCOMP_AMOUNT8[31:0] };
    Cna 0x1164 DCOMP_AMOUNT9 { DCOMP_AMOUNT9[31:0] };
    Cna 0x1168 DCOMP_AMOUNT10 { DCOMP_AMOUNT10[31:0] };
    Cna 0x116C DCOMP_AMOUNT11 { DCOMP_AMOUNT11[31:0] };
    Cna 0x1170 DCOMP_AMOUNT12 { DCOMP_AMOUNT12[31:0] };
    Cna 0x1174 DCOMP_AMOUNT13 { DCOMP_AMOUNT13[31:0] };
    Cna 0x1178 DCOMP_AMOUNT14 { DCOMP_AMOUNT14[31:0] };
    Cna 0x117C DCOMP_AMOUNT15 { DCOMP_AMOUNT15[31:0] };
    Cna 0x1180 CVT_CON5 { PER_CHANNEL_CVT_EN[31:0] };
    Cna 0x1184 PAD_CON1 { PAD_VALUE[31:0] };
    Core 0x3004 S_POINTER = S_POINTER_FIELDS;
    Core 0x3010 MISC_CFG { SOFT_GATING[19:14], PROC_PRECISION[10:8], DW_EN[1:1], QD_EN[0:0] };
    Core 0x3014 DATAOUT_SIZE_0 { DATAOUT_HEIGHT[31:16], DATAOUT_WIDTH[15:0] };
    Core 0x3018 DATAOUT_SIZE_1 { DATAOUT_CHANNEL[15:0] };
    Core 0x301C CLIP_TRUNCATE { ROUND_TYPE[6:6], CLIP_TRUNCATE[4:0] };
    Core 0x3030 UNDOCUMENTED_3030 {};
    Dpu 0x4004 S_POINTER = S_POINTER_FIELDS;
    Dpu 0x400C FEATURE_MODE_CFG {
            COMB_USE[31:31], TP_EN[30:30], RGP_TYPE[29:26], NONALIGN[25:25], SURF_LEN[24:9],
            BURST_LEN[8:5], CONV_MODE[4:3], OUTPUT_MODE[2:1], FLYING_MODE[0:0]
        };
    Dpu 0x4010 DATA_FORMAT {
            OUT_PRECISION[31:29], IN_PRECISION[28:26], EW_TRUNCATE_NEG[25:16],
            BN_MUL_SHIFT_VALUE_NEG[15:10], BS_MUL_SHIFT_VALUE_NEG[9:4], MC_SURF_OUT[3:3],
            PROC_PRECISION[2:0]
        };
    Dpu 0x4014 OFFSET_PEND { OFFSET_PEND[15:0] };
    Dpu 0x4020 DST_BASE_ADDR { DST_BASE_ADDR[31:0] };
    Dpu 0x4024 DST_SURF_STRIDE { DST_SURF_STRIDE[31:4] };
    Dpu 0x4030 DATA_CUBE_WIDTH { WIDTH[12:0] };
    Dpu 0x4034 DATA_CUBE_HEIGHT { MINMAX_CTL[24:22], HEIGHT[12:0] };
    Dpu 0x4038 DATA_CUBE_NOTCH_ADDR { NOTCH_ADDR_1[28:16], NOTCH_ADDR_0[12:0] };
    Dpu 0x403C DATA_CUBE_CHANNEL { ORIG_CHANNEL[28:16], CHANNEL[12:0] };
    Dpu 0x4040 BS_CFG {
            BS_ALU_ALGO[19:16], BS_ALU_SRC[8:8], BS_RELUX_EN[7:7], BS_RELU_BYPASS[6:6],
            BS_MUL_PRELU[5:5], BS_MUL_BYPASS[4:4], BS_ALU_BYPASS[1:1], BS_BYPASS[0:0]
        };
    Dpu 0x4044 BS_ALU_CFG { BS_ALU_OPERAND[31:0] };
    Dpu 0x4048 BS_MUL_CFG {
            BS_MUL_OPERAND[31:16], BS_MUL_SHIFT_VALUE[13:8], BS_TRUNCATE_SRC[1:1], BS_MUL_SRC[0:0]
        };
    Dpu 0x404C BS_RELUX_CMP_VALUE { BS_RELUX_CMP_DAT[31:0] };
    Dpu 0x4050 BS_OW_CFG {
            RGP_CNTER[31:28], TP_ORG_EN[27:27], SIZE_E_2[10:8], SIZE_E_1[7:5], SIZE_E_0[4:2],
            OD_BYPASS[1:1], OW_SRC[0:0]
        };
    Dpu 0x4054 BS_OW_OP { OW_OP[15:0] };
    Dpu 0x4058 WDMA_SIZE_0 { TP_PRECISION[27:27], SIZE_C_WDMA[26:16], CHANNEL_WDMA[12:0] };
    Dpu 0x405C WDMA_SIZE_1 { HEIGHT_WDMA[28:16], WIDTH_WDMA[12:0] };
    Dpu 0x4060 BN_CFG {
            BN_ALU_ALGO[19:16], BN_ALU_SRC[8:8], BN_RELUX_EN[7:7], BN_RELU_BYPASS[6:6],
            BN_MUL_PRELU[5:5], BN_MUL_BYPASS[4:4], BN_ALU_BYPASS[1:1], BN_BYPASS[0:0]
        };
    Dpu 0x4064 BN_ALU_CFG { BN_ALU_OPERAND[31:0] };
    Dpu 0x4068 BN_MUL_CFG {
            BN_MUL_OPERAND[31:16], BN_MUL_SHIFT_VALUE[13:8], BN_TRUNCATE_SRC[1:1], BN_MUL_SRC[0:0]
        };
    Dpu 0x406C BN_RELUX_CMP_VALUE { BN_RELUX_CMP_DAT[31:0] };
    Dpu 0x4070 EW_CFG {
            EW_CVT_TYPE[31:31], EW_CVT_ROUND[30:30], EW_DATA_MODE[29:28], EDATA_SIZE[23:22],
            EW_EQUAL_EN[21:21], EW_BINARY_EN[20:20], EW_ALU_ALGO[19:16], EW_RELUX_EN[10:10],
            EW_RELU_BYPASS[9:9], EW_OP_CVT_BYPASS[8:8], EW_LUT_BYPASS[7:7], EW_OP_SRC[6:6],
            EW_MUL_PRELU[5:5], EW_OP_TYPE[2:2], EW_OP_BYPASS[1:1], EW_BYPASS[0:0]
        };
    Dpu 0x4074 EW_CVT_OFFSET_VALUE { EW_OP_CVT_OFFSET[31:0] };
    Dpu 0x4078 EW_CVT_SCALE_VALUE {
            EW_TRUNCATE[31:22], EW_OP_CVT_SHIFT[21:16], EW_OP_CVT_SCALE[15:0]
        };
    Dpu 0x407C EW_RELUX_CMP_VALUE { EW_RELUX_CMP_DAT[31:0] };
    Dpu 0x4080 OUT_CVT_OFFSET { OUT_CVT_OFFSET[31:0] };
    Dpu 0x4084 OUT_CVT_SCALE { FP32TOFP16_EN[16:16], OUT_CVT_SCALE[15:0] };
    Dpu 0x4088 OUT_CVT_SHIFT {
            CVT_TYPE[31:31], CVT_ROUND[30:30], MINUS_EXP[19:12], OUT_CVT_SHIFT[11:0]
        };
    Dpu 0x4090 EW_OP_VALUE_0 { EW_OPERAND_0[31:0] };
    Dpu 0x4094 EW_OP_VALUE_1 { EW_OPERAND_1[31:0] };
    Dpu 0x4098 EW_OP_VALUE_2 { EW_OPERAND_2[31:0] };
    Dpu 0x409C EW_OP_VALUE_3 { EW_OPERAND_3[31:0] };
    Dpu 0x40A0 EW_OP_VALUE_4 { EW_OPERAND_4[31:0] };
    Dpu 0x40A4 EW_OP_VALUE_5 { EW_OPERAND_5[31:0] };
    Dpu 0x40A8 EW_OP_VALUE_6 { EW_OPERAND_6[31:0] };
    Dpu 0x40AC EW_OP_VALUE_7 { EW_OPERAND_7[31:0] };
    Dpu 0x40C0 SURFACE_ADD { SURF_ADD[31:4] };
    Dpu 0x40C4 UNDOCUMENTED_40C4 {};
    Dpu 0x4100 LUT_ACCESS_CFG { LUT_ACCESS_TYPE[17:17], LUT_TABLE_ID[16:16], LUT_ADDR[9:0] };
    Dpu 0x4104 LUT_ACCESS_DATA { LUT_ACCESS_DATA[15:0] };
    Dpu 0x4108 LUT_CFG {
            LUT_CAL_SEL[7:7], LUT_HYBRID_PRIORITY[6:6], LUT_OFLOW_PRIORITY[5:5],
            LUT_UFLOW_PRIORITY[4:4], LUT_LO_LE_MUX[3:2], LUT_EXPAND_EN[1:1], LUT_ROAD_SEL[0:0]
        };
    Dpu 0x410C LUT_INFO { LUT_LO_INDEX_SELECT[23:16], LUT_LE_INDEX_SELECT[15:8] };
    Dpu 0x4110 LUT_LE_START { LUT_LE_START[31:0] };
    Dpu 0x4114 LUT_LE_END { LUT_LE_END[31:0] };
    Dpu 0x4118 LUT_LO_START { LUT_LO_START[31:0] };
    Dpu 0x411C LUT_LO_END { LUT_LO_END[31:0] };
    Dpu 0x4120 LUT_LE_SLOPE_SCALE {
            LUT_LE_SLOPE_OFLOW_SCALE[31:16], LUT_LE_SLOPE_UFLOW_SCALE[15:0]
        };
    Dpu 0x4124 LUT_LE_SLOPE_SHIFT {
            LUT_LE_SLOPE_OFLOW_SHIFT[9:5], LUT_LE_SLOPE_UFLOW_SHIFT[4:0]
        };
    Dpu 0x4128 LUT_LO_SLOPE_SCALE {
            LUT_LO_SLOPE_OFLOW_SCALE[31:16], LUT_LO_SLOPE_UFLOW_SCALE[15:0]
        };
    Dpu 0x412C LUT_LO_SLOPE_SHIFT {
            LUT_LO_SLOPE_OFLOW_SHIFT[9:5], LUT_LO_SLOPE_UFLOW_SHIFT[4:0]
        };
    DpuRdma 0x5004 S_POINTER = S_POINTER_FIELDS;
};
