//! One module per subcommand; [`dispatch`] routes to them.

mod card;
mod compile;
mod delta;
mod estimate;
mod eval;
mod generate;
mod golden;
mod golden_record;
mod import;
mod keygen;
mod load;
mod npu;
mod onnx_test;
mod opt;
mod passes;
pub mod pin;
mod profile;
mod report;
mod run;
use slmcc::tokenize;

use crate::cli::Command;
use crate::exit::CmdResult;

/// Runs a parsed subcommand.
pub fn dispatch(command: Command) -> CmdResult {
    match command {
        Command::Opt(args) => opt::run(args),
        Command::Import(args) => import::run(args),
        Command::Compile(args) => compile::run(args),
        Command::Run(args) => run::run(args),
        Command::Generate(args) => generate::run(args),
        Command::OnnxTest(args) => onnx_test::run(args),
        Command::Golden(args) => golden::run(args),
        Command::Report(args) => report::run(args),
        Command::Passes(args) => passes::run(args),
        Command::Npu(args) => npu::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Keygen(args) => keygen::run(args),
        Command::Delta(args) => delta::make(args),
        Command::Patch(args) => delta::apply(args),
    }
}
