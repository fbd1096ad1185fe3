//! The pipeline runner.
//!
//! Runs passes in order, and around each one: the bisect limit (passes past
//! it are skipped and said so), timing, statistics, the verifier
//! (`--verify-each`) and IR dumps (`--print-ir-after=all|change|NAME`).

use std::io::Write;
use std::time::{Duration, Instant};

use slmcc_ir::text::print_module;
use slmcc_ir::{verify_module, Module};

use crate::pass::{Invalidates, Pass, PassError, Statistics};
use crate::pipeline::parse_pipeline;
use crate::registry::{create_entry, pass_names, PassInfo};

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
///
/// Around each pass the manager enforces the pass's declarations in the
/// registry ([`PassInfo`]): the module must be in a phase the pass
/// [`requires`](PassInfo::requires), else the pass is refused with the
/// reason; when the pass changes the module, what it
/// [`invalidates`](PassInfo::invalidates) is dropped (counted as
/// `plans-dropped`); a pass that [`establishes`](PassInfo::establishes) a
/// phase must leave the module in it.
pub struct PassManager {
    passes: Vec<(&'static PassInfo, Box<dyn Pass>)>,
    options: RunOptions,
}

impl PassManager {
    /// Builds the pipeline a string describes.
    pub fn parse(pipeline: &str, options: RunOptions) -> Result<PassManager, PassError> {
        let passes = parse_pipeline(pipeline)?
            .iter()
            .map(create_entry)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PassManager { passes, options })
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
        for (i, (info, pass)) in self.passes.iter_mut().enumerate() {
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
            check_required_phase(info, module)?;
            let changed = pass.run(module, &mut stats)?;
            debug_assert_declared(info, &stats);
            if changed {
                drop_invalidated(info, module, &mut stats);
            }
            check_established_phase(info, module)?;
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

/// Refuses to run `info`'s pass on a module in a phase it does not admit.
fn check_required_phase(info: &PassInfo, module: &Module) -> Result<(), PassError> {
    let phase = module.phase();
    if info.requires.admits(phase) {
        return Ok(());
    }
    let why = match module.first_symbolic_input() {
        Some(input) => format!("{input} has symbolic dims (run bucket-specialize first)"),
        None => "every graph input is static (run it before bucket-specialize)".to_string(),
    };
    Err(PassError::Phase {
        pass: info.name.to_string(),
        message: format!(
            "requires a {} module, but the module is {phase}: {why}",
            info.requires.describe()
        ),
    })
}

/// Drops what a pass that changed the module invalidates.
fn drop_invalidated(info: &PassInfo, module: &mut Module, stats: &mut Statistics) {
    match info.invalidates {
        Invalidates::Nothing => {}
        Invalidates::Plans => {
            if !module.plans.is_empty() {
                tracing::info!(
                    pass = info.name,
                    plans = module.plans.len(),
                    "the pass changed the module; its memory plans are dropped (plan again after it)"
                );
                stats.add("plans-dropped", module.plans.len() as u64);
                module.plans.clear();
            }
        }
    }
}

/// Fails when a pass that establishes a phase did not reach it.
fn check_established_phase(info: &PassInfo, module: &Module) -> Result<(), PassError> {
    match info.establishes {
        // A module without graphs has nothing to be in a phase.
        Some(want) if !module.graphs.is_empty() && module.phase() != want => {
            Err(PassError::Phase {
                pass: info.name.to_string(),
                message: format!(
                    "left the module {}, not {want} as it declares",
                    module.phase()
                ),
            })
        }
        _ => Ok(()),
    }
}

/// In debug builds, fails loudly when a pass reports a counter its
/// registry entry does not declare (so `slmcc passes` stays complete).
fn debug_assert_declared(info: &PassInfo, stats: &Statistics) {
    if cfg!(debug_assertions) {
        let declared = (info.statistics)();
        for (name, _) in stats.iter() {
            assert!(
                declared.contains(&name),
                "pass `{}` reported statistic `{name}` that its registry entry does not declare",
                info.name
            );
        }
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
