//! The pipeline runner.
//!
//! Runs passes in order, and around each one: the bisect limit (passes past
//! it are skipped and said so), timing, statistics, the verifier
//! (`--verify-each`), the check that graph outputs keep their names, IR
//! dumps (`--print-ir-before=NAME`, `--print-ir-after=all|change|NAME`,
//! `--print-ir-after-failure`), a panic in a pass turned into an error
//! naming it, and a crash reproducer (`--reproducer FILE`: the IR before
//! the failing pass and the pipeline that replays it).

use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use slmcc_ir::text::print_module;
use slmcc_ir::{verify_module, Module};

use crate::pass::{Invalidates, Pass, PassError, Statistic, Statistics};
use crate::pipeline::{parse_pipeline, PipelineEntry};
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
    /// Print the IR before the passes with these names.
    pub print_ir_before: Vec<String>,
    /// Print the IR as a failing pass left it.
    pub print_ir_after_failure: bool,
    pub verify_each: bool,
    /// Run only the first N passes of the pipeline (for bisecting a breakage).
    pub bisect_limit: Option<usize>,
    /// When a pass fails, write the IR before it and the pipeline that
    /// replays the failure here (see [`reproducer_text`]).
    pub reproducer: Option<PathBuf>,
}

/// Checks the names of `--print-ir-before` (each a registered pass).
pub fn parse_pass_names(flag: &str, text: &str) -> Result<Vec<String>, PassError> {
    let names: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    let valid = pass_names();
    if let Some(bad) = names.iter().find(|n| !valid.contains(&n.as_str())) {
        return Err(PassError::Pipeline(format!(
            "{flag}: unknown pass `{bad}` (one of: {})",
            valid.join(", ")
        )));
    }
    Ok(names)
}

/// A reproducer: the IR `before` the pass `entry` and a header saying what
/// failed and how to replay it (`slmcc opt FILE --passes ENTRY`); the
/// header lines are IR comments, so the file is itself the input.
pub fn reproducer_text(entry: &str, error: &PassError, before: &str) -> String {
    let mut out = String::new();
    out.push_str("; slmcc reproducer: the IR before the failing pass\n");
    for line in error.to_string().lines() {
        out.push_str(&format!("; error: {line}\n"));
    }
    out.push_str(&format!(
        "; replay: slmcc opt THIS_FILE --passes '{entry}'\n"
    ));
    out.push_str(before);
    out
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
    /// Each pass as the pipeline wrote it (for reproducers).
    entries: Vec<PipelineEntry>,
    options: RunOptions,
}

impl PassManager {
    /// Builds the pipeline a string describes.
    pub fn parse(pipeline: &str, options: RunOptions) -> Result<PassManager, PassError> {
        let entries = parse_pipeline(pipeline)?;
        let passes = entries
            .iter()
            .map(create_entry)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PassManager {
            passes,
            entries,
            options,
        })
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
            let printed_before = self.options.print_ir_before.iter().any(|n| n == name);
            let input =
                (printed_before || self.options.reproducer.is_some()).then(|| print_module(module));
            if printed_before {
                let text = input.as_deref().unwrap_or_default();
                let _ = writeln!(
                    log,
                    "; ----- IR before {name} ({}/{total}) -----\n{text}",
                    i + 1
                );
            }
            let mut stats = Statistics::default();
            let start = Instant::now();
            let outputs = output_names(module);
            let mut duration = Duration::ZERO;
            let ran = check_required_phase(info, module)
                .and_then(|()| run_catching_panics(name, pass.as_mut(), module, &mut stats))
                .and_then(|changed| {
                    duration = start.elapsed();
                    debug_assert_declared(info, &stats);
                    if changed {
                        drop_invalidated(info, module, &mut stats);
                    }
                    check_established_phase(info, module)?;
                    if info.keeps_outputs {
                        check_output_names(name, &outputs, module)?;
                    }
                    if self.options.verify_each {
                        verify_module(module).map_err(|e| PassError::Verify {
                            pass: name.to_string(),
                            message: e.to_string(),
                        })?;
                    }
                    Ok(changed)
                });
            let changed = match ran {
                Ok(changed) => changed,
                Err(e) => {
                    if self.options.print_ir_after_failure {
                        let _ = writeln!(
                            log,
                            "; ----- IR after failure of {name} ({}/{total}) -----\n{}",
                            i + 1,
                            print_module(module)
                        );
                    }
                    if let (Some(path), Some(input)) = (&self.options.reproducer, &input) {
                        let text = reproducer_text(&self.entries[i].to_string(), &e, input);
                        if let Err(io) = std::fs::write(path, text) {
                            tracing::warn!("cannot write the reproducer {}: {io}", path.display());
                        }
                    }
                    return Err(e);
                }
            };
            tracing::debug!(changed, ?duration, %stats, "pass finished");
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

/// Runs `pass`, turning a panic into [`PassError::Panicked`] with its
/// message and place (the panic is not printed: the error says it).
fn run_catching_panics(
    name: &str,
    pass: &mut dyn Pass,
    module: &mut Module,
    stats: &mut Statistics,
) -> Result<bool, PassError> {
    let caught: Arc<Mutex<Option<String>>> = Arc::default();
    let hook = panic::take_hook();
    let sink = caught.clone();
    panic::set_hook(Box::new(move |info| {
        let message = match info.payload().downcast_ref::<&str>() {
            Some(s) => s.to_string(),
            None => match info.payload().downcast_ref::<String>() {
                Some(s) => s.clone(),
                None => "(no message)".to_string(),
            },
        };
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        if let Ok(mut slot) = sink.lock() {
            slot.get_or_insert(format!("{message}{place}"));
        }
    }));
    let result = panic::catch_unwind(AssertUnwindSafe(|| pass.run(module, stats)));
    panic::set_hook(hook);
    result.unwrap_or_else(|_| {
        let message = caught.lock().ok().and_then(|mut m| m.take());
        Err(PassError::Panicked {
            pass: name.to_string(),
            message: message.unwrap_or_else(|| "(no message)".to_string()),
        })
    })
}

/// Each graph's name and its outputs' names.
fn output_names(module: &Module) -> Vec<(String, Vec<String>)> {
    module
        .graphs
        .iter()
        .map(|g| {
            let names = g.outputs.iter().map(|&v| g.value(v).name.clone());
            (g.name.clone(), names.collect())
        })
        .collect()
}

/// Graph outputs keep their names (goldens and `run --output-dir` name
/// files by them), unless the pass's registry entry says it changes them
/// ([`PassInfo::keeps_outputs`]): each graph the pass left with the same name must still
/// have the outputs it had, by name and in order, first. A pass may add
/// outputs after them, and may replace graphs by new ones.
fn check_output_names(
    pass: &str,
    before: &[(String, Vec<String>)],
    module: &Module,
) -> Result<(), PassError> {
    for (graph, names) in before {
        let Some(g) = module.graph(graph) else {
            continue;
        };
        let now: Vec<&str> = g
            .outputs
            .iter()
            .map(|&v| g.value(v).name.as_str())
            .collect();
        let kept = names.len() <= now.len() && names.iter().zip(&now).all(|(a, b)| a == b);
        if !kept {
            return Err(PassError::Failed {
                pass: pass.to_string(),
                message: format!(
                    "graph @{graph}: its outputs were ({}) and are now ({}); graph outputs keep their names",
                    names.iter().map(|n| format!("%{n}")).collect::<Vec<_>>().join(", "),
                    now.iter().map(|n| format!("%{n}")).collect::<Vec<_>>().join(", ")
                ),
            });
        }
    }
    Ok(())
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
                stats.add(PLANS_DROPPED.name, module.plans.len() as u64);
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

/// The counter the pass manager adds to a pass that invalidates the
/// memory plans and changed the module.
pub const PLANS_DROPPED: Statistic = Statistic::new(
    "plans-dropped",
    "memory plans the pass manager dropped because the pass changed the module",
);

/// In debug builds, fails loudly when a pass reports a counter its
/// registry entry does not declare (so `slmcc passes` stays complete).
fn debug_assert_declared(info: &PassInfo, stats: &Statistics) {
    if cfg!(debug_assertions) {
        let declared = (info.statistics)();
        for (name, _) in stats.iter() {
            assert!(
                name == PLANS_DROPPED.name || declared.iter().any(|s| s.name == name),
                "pass `{}` reported statistic `{name}` that its registry entry does not declare",
                info.name
            );
        }
    }
}

/// A table of per-pass timing and statistics (`--pass-stats`).
pub fn format_stats(records: &[PassRecord]) -> String {
    // The first column is as wide as the longest pass name.
    let width = records
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut out = format!("{:<width$} time(ms)  changed  statistics\n", "pass");
    let mut total = Duration::ZERO;
    for r in records {
        total += r.duration;
        let stats = if r.ran {
            r.stats.to_string()
        } else {
            "(skipped by bisect limit)".to_string()
        };
        out.push_str(&format!(
            "{:<width$} {:>8.3}  {:<7}  {}\n",
            r.name,
            r.duration.as_secs_f64() * 1e3,
            if r.changed { "yes" } else { "no" },
            stats
        ));
    }
    out.push_str(&format!(
        "{:<width$} {:>8.3}\n",
        "total",
        total.as_secs_f64() * 1e3
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::PASSES;
    use slmcc_ir::text::parse_module;

    const MODULE: &str = "module @m {
  graph @main(%x: f32[2]) -> (f32[2]) {
    %y = exp %x : f32[2]
    return %y
  }
}
";

    /// A pass that does what a test needs: panic, or rename the output.
    struct Broken {
        panics: bool,
    }

    impl Pass for Broken {
        fn name(&self) -> &'static str {
            "dce"
        }
        fn run(&mut self, module: &mut Module, _: &mut Statistics) -> Result<bool, PassError> {
            if self.panics {
                let nodes: Vec<usize> = Vec::new();
                return Ok(nodes[module.graphs.len()] > 0);
            }
            let g = &mut module.graphs[0];
            let out = g.outputs[0];
            g.value_mut(out).name = "renamed".to_string();
            Ok(true)
        }
    }

    fn manager(panics: bool, options: RunOptions) -> PassManager {
        let info = PASSES.iter().find(|p| p.name == "dce").unwrap();
        PassManager {
            passes: vec![(info, Box::new(Broken { panics }))],
            entries: parse_pipeline("dce").unwrap(),
            options,
        }
    }

    #[test]
    fn a_panic_in_a_pass_is_an_error_naming_it_with_a_reproducer() {
        let dir = std::env::temp_dir().join(format!("slmcc-runner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("repro.slm");
        let options = RunOptions {
            print_ir_before: vec!["dce".to_string()],
            print_ir_after_failure: true,
            reproducer: Some(file.clone()),
            ..RunOptions::default()
        };
        let mut module = parse_module(MODULE).unwrap();
        let mut log = Vec::new();
        let e = manager(true, options)
            .run(&mut module, &mut log)
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("pass `dce` panicked (a bug in the pass): index out of bounds"),
            "{text}"
        );
        assert!(text.contains("runner.rs:"), "{text}");
        let log = String::from_utf8(log).unwrap();
        assert!(
            log.contains("; ----- IR before dce (1/1) -----\nmodule @m"),
            "{log}"
        );
        assert!(
            log.contains("; ----- IR after failure of dce (1/1) -----\nmodule @m"),
            "{log}"
        );
        let repro = std::fs::read_to_string(&file).unwrap();
        assert!(repro.contains("; error: pass `dce` panicked"), "{repro}");
        assert!(
            repro.contains("; replay: slmcc opt THIS_FILE --passes 'dce'"),
            "{repro}"
        );
        let replayed = parse_module(&repro).unwrap();
        assert_eq!(print_module(&replayed), MODULE);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pass_that_renames_a_graph_output_fails() {
        let mut module = parse_module(MODULE).unwrap();
        let e = manager(false, RunOptions::default())
            .run(&mut module, &mut std::io::sink())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "pass `dce`: graph @main: its outputs were (%y) and are now (%renamed); graph outputs keep their names"
        );
    }

    #[test]
    fn pass_stats_columns_fit_the_longest_name() {
        let record = |name| PassRecord {
            name,
            ran: true,
            changed: false,
            duration: Duration::from_micros(1500),
            stats: Statistics::default(),
        };
        let table = format_stats(&[record("dce"), record("bucket-specialize")]);
        let at: Vec<usize> = table
            .lines()
            .map(|l| l.find(" 1.500").unwrap_or(0))
            .collect();
        assert_eq!(
            table.lines().next(),
            Some("pass              time(ms)  changed  statistics")
        );
        assert_eq!(at[1], at[2], "{table}");
        assert!(table.contains("bucket-specialize    1.500  no"), "{table}");
    }
}
