//! `slmcc`: the command-line driver.
//!
//! Parses the command line ([`cli`]), sets up logging, dispatches to a
//! subcommand in [`commands`], and maps failures to exit codes: 0 success,
//! 1 a check failed, 2 bad input or usage (with a one-line message).

mod cli;
mod commands;
mod exit;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    init_logging(cli.verbose);
    // A test build's kernel mutant must name one that exists.
    if let Err(e) = slmcc_backends::mutant::check_env() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
    if let Some(m) = slmcc_backends::mutant::current() {
        tracing::warn!(
            "{}={m}: the kernels are mutated",
            slmcc_backends::mutant::KERNEL_MUTANT_ENV
        );
    }
    let code = match commands::dispatch(cli.command) {
        Ok(()) => 0,
        Err(failure) => {
            eprintln!("error: {failure}");
            failure.exit_code()
        }
    };
    std::process::exit(code);
}

/// Logs go to stderr through `tracing`; `SLMCC_LOG` (an env-filter string)
/// overrides the level picked by `-v`. `-v` and `-vv` raise slmcc's own
/// crates only: the libraries' info and debug logs (egg's per-iteration
/// report, Cranelift's IR of every function) would drown them; `-vvv`
/// traces everything.
fn init_logging(verbose: u8) {
    let ours = |level: &str| {
        [
            "slmcc",
            "slmcc_ir",
            "slmcc_passes",
            "slmcc_backends",
            "slmcc_runtime",
        ]
        .map(|c| format!("{c}={level}"))
        .join(",")
    };
    let default = match verbose {
        0 => "warn".to_string(),
        1 => format!("warn,{}", ours("info")),
        2 => format!("warn,{}", ours("debug")),
        _ => "trace".to_string(),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLMCC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
