//! Runs the pass filetests under `passes/filetests/`.
//!
//! Each `.slm` file is one test: a `; pipeline: ...` line naming the passes,
//! the input module, and expectations as comments. `; check:`, `; nextln:`,
//! `; sameln:`, `; not:`, `; regex:` lines are matched against the printed
//! result with `filecheck`; `; error: TEXT` instead expects the pipeline (or
//! the parse) to fail with a message containing TEXT; `; stats: a=1, b=2`
//! expects those pass statistics (summed over the pipeline's passes), for
//! passes that report rather than rewrite. Every pipeline runs with the
//! verifier after each pass.

use std::path::{Path, PathBuf};

use filecheck::{CheckerBuilder, NO_VARIABLES};
use slmcc_ir::text::{parse_module, print_module};
use slmcc_passes::{PassManager, PassRecord, RunOptions};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "slm") {
            out.push(p);
        }
    }
}

/// The text after `; key:` on the first line that has it.
fn directive<'a>(src: &'a str, key: &str) -> Option<&'a str> {
    src.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix(';')?.trim_start();
        rest.strip_prefix(key)?.strip_prefix(':').map(str::trim)
    })
}

/// Runs one filetest; `Err` describes the failure.
fn run_one(path: &Path) -> Result<(), String> {
    let src = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let pipeline = directive(&src, "pipeline").ok_or("missing `; pipeline:` line")?;
    let expect_error = directive(&src, "error");
    let expect_stats = directive(&src, "stats");
    let mut records = Vec::new();
    let result = parse_module(&src)
        .map_err(|e| format!("{}:{}: {}", e.line, e.col, e.message))
        .and_then(|mut m| {
            let options = RunOptions {
                verify_each: true,
                ..RunOptions::default()
            };
            let mut pm = PassManager::parse(pipeline, options).map_err(|e| e.to_string())?;
            records = pm
                .run(&mut m, &mut std::io::sink())
                .map_err(|e| e.to_string())?;
            Ok(print_module(&m))
        });
    match (result, expect_error) {
        (Err(e), Some(want)) if e.contains(want) => Ok(()),
        (Err(e), Some(want)) => Err(format!("expected an error containing `{want}`, got `{e}`")),
        (Err(e), None) => Err(format!("unexpected error: {e}")),
        (Ok(out), Some(want)) => Err(format!(
            "expected an error containing `{want}`, got output:\n{out}"
        )),
        (Ok(out), None) => {
            if let Some(want) = expect_stats {
                check_stats(want, &records)?;
            }
            let checks: String = src
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix(';'))
                .collect::<Vec<_>>()
                .join("\n");
            let checker = CheckerBuilder::new()
                .text(&checks)
                .map_err(|e| format!("bad check lines: {e}"))?
                .finish();
            if checker.is_empty() {
                return Err("no `; check:` lines".to_string());
            }
            let (ok, explain) = checker
                .explain(&out, NO_VARIABLES)
                .map_err(|e| format!("bad check lines: {e}"))?;
            if ok {
                Ok(())
            } else {
                Err(format!("checks failed on output:\n{out}\n{explain}"))
            }
        }
    }
}

/// Checks `a=1, b=2` against the statistics of `records`, summed by name.
fn check_stats(want: &str, records: &[PassRecord]) -> Result<(), String> {
    for pair in want.split(',') {
        let (name, value) = pair
            .trim()
            .split_once('=')
            .ok_or_else(|| format!("bad `; stats:` entry `{pair}` (want name=value)"))?;
        let value: u64 = value
            .trim()
            .parse()
            .map_err(|_| format!("bad `; stats:` value in `{pair}`"))?;
        let got: u64 = records.iter().map(|r| r.stats.get(name.trim())).sum();
        if got != value {
            return Err(format!("statistic {name}: expected {value}, got {got}"));
        }
    }
    Ok(())
}

#[test]
fn filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let mut files = Vec::new();
    collect(&root, &mut files);
    assert!(
        files.len() >= 10,
        "expected the filetests under {}",
        root.display()
    );
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| {
            run_one(f)
                .err()
                .map(|e| format!("--- {}\n{e}", f.display()))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} filetests failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    eprintln!("{} filetests passed", files.len());
}
