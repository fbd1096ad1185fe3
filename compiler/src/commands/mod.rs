//! One module per subcommand; [`dispatch`] routes to them.

mod golden;
mod import;
mod load;
mod onnx_test;
mod opt;
mod report;
mod run;

use anyhow::anyhow;

use crate::cli::Command;
use crate::exit::{CmdResult, Failure};

/// Runs a parsed subcommand.
pub fn dispatch(command: Command) -> CmdResult {
    match command {
        Command::Opt(args) => opt::run(args),
        Command::Import(args) => import::run(args),
        Command::Compile(_) => not_yet("compile"),
        Command::Run(args) => run::run(args),
        Command::OnnxTest(args) => onnx_test::run(args),
        Command::Golden(args) => golden::run(args),
        Command::Report(args) => report::run(args),
    }
}

/// The answer of a subcommand that this build does not implement yet.
fn not_yet(name: &str) -> CmdResult {
    Err(Failure::BadInput(anyhow!(
        "`slmcc {name}` is not yet supported in this version"
    )))
}
