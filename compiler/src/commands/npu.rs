//! `slmcc npu regcmd` and `slmcc npu disasm`: the RK3588 register command
//! list of one matmul, and the decoding of a command buffer, one line per
//! word (`TTTT AAAA VVVVVVVV  REGISTER FIELD=value ...`). The debugging view
//! for a board that disagrees: compare with what its driver submitted.

use std::fmt::Write as _;

use anyhow::{anyhow, Context};
use clap::ValueEnum;
use slmcc_backends::npu::regcmd::{self, MatmulPrecision, MatmulTask, Word};

use crate::cli::{DisasmArgs, NpuAction, NpuArgs, NpuDtype, NpuOutDtype, RegcmdArgs};
use crate::exit::CmdResult;

pub fn run(args: NpuArgs) -> CmdResult {
    match args.action {
        NpuAction::Regcmd(a) => regcmd(a),
        NpuAction::Disasm(a) => disasm(a),
    }
}

fn precision(dtype: NpuDtype, out: Option<NpuOutDtype>) -> anyhow::Result<MatmulPrecision> {
    use NpuOutDtype::{Fp16, Fp32, Int32};
    match (dtype, out) {
        (NpuDtype::Int8, None | Some(Int32)) => Ok(MatmulPrecision::Int8),
        (NpuDtype::Fp16, None | Some(Fp32)) => Ok(MatmulPrecision::Fp16),
        (NpuDtype::Fp16, Some(Fp16)) => Ok(MatmulPrecision::Fp16ToFp16),
        (NpuDtype::Int8, Some(o)) => Err(anyhow!(
            "--out-dtype {}: an int8 matmul writes int32 (requantized int8 output is not \
             supported yet)",
            o.to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_string())
        )),
        (NpuDtype::Fp16, Some(Int32)) => Err(anyhow!(
            "--out-dtype int32: an fp16 matmul writes fp32 or fp16"
        )),
    }
}

fn regcmd(a: RegcmdArgs) -> CmdResult {
    let task = MatmulTask {
        precision: precision(a.dtype, a.out_dtype)?,
        m: a.m,
        k: a.k,
        n: a.n,
        input: a.input_addr,
        weights: a.weights_addr,
        output: a.output_addr,
    };
    let words = task.regcmd().with_context(|| {
        format!(
            "{} matmul M={} K={} N={} as one task",
            task.precision.name(),
            a.m,
            a.k,
            a.n
        )
    })?;
    if let Some(path) = &a.output {
        super::opt::write_atomically(path, &regcmd::encode_buffer(&words))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{}", lines(&words));
    Ok(())
}

fn disasm(a: DisasmArgs) -> CmdResult {
    let bytes =
        std::fs::read(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
    let words = regcmd::decode_buffer(&bytes).with_context(|| a.input.display().to_string())?;
    print!("{}", lines(&words));
    Ok(())
}

fn lines(words: &[Word]) -> String {
    let mut out = String::new();
    for w in words {
        let _ = writeln!(out, "{w}");
    }
    out
}
