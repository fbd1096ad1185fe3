//! `slmcc npu regcmd`, `npu disasm` and `npu plan`: the RK3588 register
//! command list of one matmul, the decoding of a command buffer, one line
//! per word (`TTTT AAAA VVVVVVVV  REGISTER FIELD=value ...`; the debugging
//! view for a board that disagrees: compare with what its driver
//! submitted), and how a larger matmul splits into tasks, with its
//! estimated time.

use std::fmt::Write as _;

use anyhow::{anyhow, Context};
use clap::ValueEnum;
use slmcc_backends::npu::regcmd::tiling::TilePlan;
use slmcc_backends::npu::regcmd::{self, MatmulPrecision, MatmulTask, Word};
use slmcc_backends::npu::Target;

use crate::cli::{DisasmArgs, NpuAction, NpuArgs, NpuDtype, NpuOutDtype, NpuPlanArgs, RegcmdArgs};
use crate::exit::CmdResult;

pub fn run(args: NpuArgs) -> CmdResult {
    match args.action {
        NpuAction::Regcmd(a) => regcmd(a),
        NpuAction::Disasm(a) => disasm(a),
        NpuAction::Plan(a) => plan(a),
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

fn regcmd(args: RegcmdArgs) -> CmdResult {
    let a = &args.matmul;
    let task = MatmulTask {
        precision: precision(a.dtype, a.out_dtype)?,
        m: a.m,
        k: a.k,
        n: a.n,
        input: args.input_addr,
        weights: args.weights_addr,
        output: args.output_addr,
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
    if let Some(path) = &args.output {
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

fn plan(args: NpuPlanArgs) -> CmdResult {
    let a = &args.matmul;
    let precision = precision(a.dtype, a.out_dtype)?;
    let target = Target::rk3588();
    let group = args.group.unwrap_or(a.k);
    let plan =
        TilePlan::new(precision, (a.m, a.k, a.n), group, target.cores).with_context(|| {
            format!(
                "{} matmul M={} K={} N={} in groups of {group}",
                precision.name(),
                a.m,
                a.k,
                a.n
            )
        })?;
    let est = plan.estimate(&target);
    let per_core: Vec<String> = plan.tiles().iter().map(|t| t.len().to_string()).collect();
    let slowest = est.slowest;
    let (setup, ddr, macs) = est.per_core.get(slowest).copied().unwrap_or_default();
    let ms = |s: f64| format!("{:.3} ms", s * 1e3);
    println!(
        "{} matmul M={} K={} N={}, K blocks of {}, {} cores",
        precision.name(),
        a.m,
        a.k,
        a.n,
        plan.kt,
        plan.cores
    );
    println!(
        "tiles: {} rows x {} kernels x {} channels; {} tasks ({} per core)",
        plan.mt,
        plan.nt,
        plan.kt,
        est.tasks,
        per_core.join(", ")
    );
    println!("DDR bytes: {:.2} MB", plan.ddr_bytes() as f64 / 1e6);
    println!(
        "estimated time (a model of {}, docs/NPU.md): {} (core {slowest}: setup {}, DDR {}, MACs {})",
        target.name,
        ms(est.seconds),
        ms(setup),
        ms(ddr),
        ms(macs)
    );
    Ok(())
}

fn lines(words: &[Word]) -> String {
    let mut out = String::new();
    for w in words {
        let _ = writeln!(out, "{w}");
    }
    out
}
