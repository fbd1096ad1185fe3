//! The pipeline runner.
//!
//! Runs passes in order, and around each one: the bisect limit (passes past
//! it are skipped and said so), timing, statistics, the verifier
//! (`--verify-each`) and IR dumps (`--print-ir-after=all|change|NAME`).

use std::io::Write;
use std::time::{Duration, Instant};

use slmcc_ir::text::print_module;
use slmcc_ir::{verify_module, Module};

use crate::pass::{Pass, PassError, Statistics};
use crate::pipeline::parse_pipeline;
use crate::registry::{create_pass, pass_names};

/// When to print the IR after a pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PrintAfter {
    #[default]
    Never,
    All,
    /// Only after passes that changed the printed IR.
    Change,
    /// After passes with these names.
    Passes(Vec<String>),
}

impl PrintAfter {
    /// Parses the `--print-ir-after` value: `all`, `change`, or a comma list
    /// of pass names (each must be a registered pass).
    pub fn parse(text: &str) -> Result<PrintAfter, PassError> {
        match text {
            "all" => Ok(PrintAfter::All),
            "change" => Ok(PrintAfter::Change),
            _ => {
                let names: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
                let valid = pass_names();
                if let Some(bad) = names.iter().find(|n| !valid.contains(&n.as_str())) {
                    return Err(PassError::Pipeline(format!(
                        "--print-ir-after: unknown pass `{bad}` (use all, change, or one of: {})",
                        valid.join(", ")
                    )));
                }
                Ok(PrintAfter::Passes(names))
            }
        }
    }
}

/// How to run a pipeline.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub print_ir_after: PrintAfter,
    pub verify_each: bool,
    /// Run only the first N passes of the pipeline (for bisecting a breakage).
    pub bisect_limit: Option<usize>,
}

/// Parses `pipeline` and runs it on `module` with the verifier after every
/// pass (the driver's and the tools' one way to run a pipeline).
pub fn run_pipeline(module: &mut Module, pipeline: &str) -> Result<Vec<PassRecord>, PassError> {
    let options = RunOptions {
        verify_each: true,
        ..RunOptions::default()
    };
    PassManager::parse(pipeline, options)?.run(module, &mut std::io::sink())
}

/// What happened to one pass of the pipeline.
#[derive(Clone, Debug)]
pub struct PassRecord {
    pub name: &'static str,
    pub ran: bool,
    pub changed: bool,
    pub duration: Duration,
    pub stats: Statistics,
}

/// A parsed pipeline ready to run.
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
    options: RunOptions,
}

impl PassManager {
    /// Builds the pipeline a string describes.
    pub fn parse(pipeline: &str, options: RunOptions) -> Result<PassManager, PassError> {
        let passes = parse_pipeline(pipeline)?
            .iter()
            .map(create_pass)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PassManager { passes, options })
    }

    pub fn new(passes: Vec<Box<dyn Pass>>, options: RunOptions) -> PassManager {
        PassManager { passes, options }
    }

    /// Runs every pass on `module`. Dumps and bisect notes go to `log`.
    pub fn run(
        &mut self,
        module: &mut Module,
        log: &mut dyn Write,
    ) -> Result<Vec<PassRecord>, PassError> {
        let total = self.passes.len();
        let mut records = Vec::with_capacity(total);
        let mut before = match self.options.print_ir_after {
            PrintAfter::Change => Some(print_module(module)),
            _ => None,
        };
        for (i, pass) in self.passes.iter_mut().enumerate() {
            let name = pass.name();
            if let Some(limit) = self.options.bisect_limit {
                let verdict = if i < limit { "running" } else { "NOT running" };
                let _ = writeln!(log, "BISECT: {verdict} pass ({}) {name}", i + 1);
                if i >= limit {
                    records.push(PassRecord {
                        name,
                        ran: false,
                        changed: false,
                        duration: Duration::ZERO,
                        stats: Statistics::default(),
                    });
                    continue;
                }
            }
            let _span = tracing::info_span!("pass", name).entered();
            let mut stats = Statistics::default();
            let start = Instant::now();
            let changed = pass.run(module, &mut stats)?;
            let duration = start.elapsed();
            tracing::debug!(changed, ?duration, %stats, "pass finished");
            if self.options.verify_each {
                verify_module(module).map_err(|e| PassError::Verify {
                    pass: name.to_string(),
                    message: e.to_string(),
                })?;
            }
            let header = format!("; ----- IR after {name} ({}/{total}) -----", i + 1);
            match &self.options.print_ir_after {
                PrintAfter::Never => {}
                PrintAfter::All => {
                    let _ = writeln!(log, "{header}\n{}", print_module(module));
                }
                PrintAfter::Passes(names) => {
                    if names.iter().any(|n| n == name) {
                        let _ = writeln!(log, "{header}\n{}", print_module(module));
                    }
                }
                PrintAfter::Change => {
                    let now = print_module(module);
                    if before.as_deref() != Some(now.as_str()) {
                        let _ = writeln!(log, "{header}\n{now}");
                    }
                    before = Some(now);
                }
            }
            records.push(PassRecord {
                name,
                ran: true,
                changed,
                duration,
                stats,
            });
        }
        Ok(records)
    }
}

/// A table of per-pass timing and statistics (`--pass-stats`).
pub fn format_stats(records: &[PassRecord]) -> String {
    let mut out = String::from("pass            time(ms)  changed  statistics\n");
    let mut total = Duration::ZERO;
    for r in records {
        total += r.duration;
        let stats = if r.ran {
            r.stats.to_string()
        } else {
            "(skipped by bisect limit)".to_string()
        };
        out.push_str(&format!(
            "{:<15} {:>8.3}  {:<7}  {}\n",
            r.name,
            r.duration.as_secs_f64() * 1e3,
            if r.changed { "yes" } else { "no" },
            stats
        ));
    }
    out.push_str(&format!(
        "{:<15} {:>8.3}\n",
        "total",
        total.as_secs_f64() * 1e3
    ));
    out
}
