//! Runs the pass filetests under `passes/filetests/`, each file its own
//! test case named by its path there (`cargo test -p slmcc-passes --test
//! filetests -- cse/merges` runs the files whose name holds `cse/merges`).
//!
//! Each `.slm` file is one test: a `; pipeline: ...` line naming the passes,
//! the input module, and expectations as comments. `; check:`, `; nextln:`,
//! `; sameln:`, `; unordered:`, `; not:`, `; regex:` lines are matched
//! against the printed result with `filecheck`, whose semantics hold: a
//! `not:` scans only the text between the matches of the directives around
//! it, so a `not:` after the last match would scan only the rest of the
//! output and is refused here; `; none: TEXT` says TEXT occurs nowhere in
//! the output. `; error: TEXT` instead expects the pipeline (or the parse)
//! to fail with a message containing TEXT; `; stats: a=1, b=2` expects those
//! pass statistics (summed over the pipeline's passes), for passes that
//! report rather than rewrite. Every pipeline runs with the verifier after
//! each pass.

use std::path::{Path, PathBuf};

use filecheck::{CheckerBuilder, NO_VARIABLES};
use libtest_mimic::{Arguments, Failed, Trial};
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

/// The directives of a filetest that match text, in order.
const MATCHING: [&str; 4] = ["check", "nextln", "sameln", "unordered"];

/// The name of the directive on a comment line (`check` for `; check: x`).
fn directive_name(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix(';')?.trim_start();
    let (name, _) = rest.split_once(':')?;
    name.chars()
        .all(|c| c.is_ascii_lowercase() || c == '-')
        .then_some(name)
}

/// Refuses a `not:` after the last matching directive: filecheck would
/// scan only the text after that match, which is seldom what is meant.
fn check_not_placement(src: &str) -> Result<(), String> {
    let names: Vec<&str> = src.lines().filter_map(directive_name).collect();
    let last_match = names.iter().rposition(|n| MATCHING.contains(n));
    let trailing = match last_match {
        Some(i) => names[i + 1..].contains(&"not"),
        None => names.contains(&"not"),
    };
    if trailing {
        return Err(
            "a `; not:` after the last `; check:` scans only the output after that \
            match: put it between checks, or use `; none:` for text that must occur nowhere"
                .to_string(),
        );
    }
    Ok(())
}

/// Runs one filetest; `Err` describes the failure.
fn run_one(path: &Path) -> Result<(), String> {
    let src = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    run_source(&src)
}

/// Runs the filetest whose text is `src`.
fn run_source(src: &str) -> Result<(), String> {
    let pipeline = directive(src, "pipeline").ok_or("missing `; pipeline:` line")?;
    let expect_error = directive(src, "error");
    let expect_stats = directive(src, "stats");
    let mut records = Vec::new();
    let result = parse_module(src)
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
            check_not_placement(src)?;
            for line in src.lines() {
                if directive_name(line) == Some("none") {
                    let text = line.split_once(':').map_or("", |(_, t)| t.trim());
                    if let Some(at) = out.find(text) {
                        let line = out[..at].lines().count().max(1);
                        return Err(format!(
                            "`; none: {text}` occurs at line {line} of the output:\n{out}"
                        ));
                    }
                }
            }
            let checks: String = src
                .lines()
                .filter(|l| directive_name(l) != Some("none"))
                .filter_map(|l| l.trim_start().strip_prefix(';'))
                .collect::<Vec<_>>()
                .join("\n");
            let checker = CheckerBuilder::new()
                .text(&checks)
                .map_err(|e| format!("bad check lines: {e}"))?
                .finish();
            if checker.is_empty() && directive(src, "none").is_none() {
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

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let mut files = Vec::new();
    collect(&root, &mut files);
    assert!(
        files.len() >= 10,
        "expected the filetests under {}",
        root.display()
    );
    let mut trials: Vec<Trial> = files
        .into_iter()
        .map(|f| {
            let name = f.strip_prefix(&root).unwrap_or(&f).display().to_string();
            Trial::test(name, move || {
                run_one(&f).map_err(|e| Failed::from(format!("{}\n{e}", f.display())))
            })
        })
        .collect();
    trials.extend(self_tests());
    libtest_mimic::run(&args, trials).exit();
}

/// The harness's own tests: a `not:` after the last check is refused, and
/// `none:` catches text anywhere in the output (where a trailing `not:`
/// would have missed it).
fn self_tests() -> Vec<Trial> {
    const MODULE: &str = "; pipeline: dce
module @m {
  graph @main(%x: f32[2]) -> (f32[2]) {
    %a = exp %x : f32[2]
    %b = neg %a : f32[2]
    return %b
  }
}
";
    let expect_err = |extra: &str, want: &str| {
        let (extra, want) = (extra.to_string(), want.to_string());
        move || match run_source(&format!("{MODULE}{extra}")) {
            Err(e) if e.contains(&want) => Ok(()),
            Err(e) => Err(Failed::from(format!("expected `{want}`, got `{e}`"))),
            Ok(()) => Err(Failed::from(format!("`{extra}` passed; it must fail"))),
        }
    };
    vec![
        Trial::test(
            "self-test/trailing-not-is-refused",
            expect_err("; check: %b = neg\n; not: exp\n", "put it between checks"),
        ),
        Trial::test(
            "self-test/none-sees-text-above-the-last-check",
            expect_err(
                "; check: %b = neg\n; none: exp\n",
                "`; none: exp` occurs at line 3",
            ),
        ),
        Trial::test(
            "self-test/not-between-checks-scans-between-them",
            expect_err(
                "; check: %a = exp\n; not: neg\n; check: return %b\n",
                "checks failed",
            ),
        ),
        Trial::test(
            "self-test/not-between-checks-passes-when-absent",
            move || {
                run_source(&format!(
                    "{MODULE}; check: %b = neg %a\n; not: exp\n; check: return %b\n"
                ))
                .map_err(Failed::from)
            },
        ),
    ]
}
