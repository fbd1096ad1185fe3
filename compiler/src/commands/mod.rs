//! One module per subcommand; [`dispatch`] routes to them.

mod opt;

use anyhow::anyhow;

use crate::cli::Command;
use crate::exit::{CmdResult, Failure};

/// Runs a parsed subcommand.
pub fn dispatch(command: Command) -> CmdResult {
    match command {
        Command::Opt(args) => opt::run(args),
        Command::Import(_) => not_yet("import"),
        Command::Compile(_) => not_yet("compile"),
        Command::Run(_) => not_yet("run"),
        Command::OnnxTest(_) => not_yet("onnx-test"),
        Command::Golden(_) => not_yet("golden"),
        Command::Report(_) => not_yet("report"),
    }
}

/// The answer of a subcommand that this build does not implement yet.
fn not_yet(name: &str) -> CmdResult {
    Err(Failure::BadInput(anyhow!(
        "`slmcc {name}` is not yet supported in this version"
    )))
}
