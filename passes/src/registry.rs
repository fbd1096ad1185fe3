//! The registry: one list of every pass, with its options and help.
//!
//! Each pass declares its entry, [`PassInfo`], as `INFO` in its own module;
//! adding a pass means adding its module's name to the list in
//! `transforms/mod.rs`, which makes [`PASSES`]. Unknown names are rejected
//! with the list of valid ones.

use slmcc_ir::Phase;

use crate::options::{OptionSpec, PassOptions};
use crate::pass::{Invalidates, Pass, PassError, Requires, Statistic};
use crate::pipeline::PipelineEntry;

/// A registered pass: name, one-line summary, declared options and constructor.
pub struct PassInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub options: &'static [OptionSpec],
    /// The phase the module must be in (checked by the pass manager).
    pub requires: Requires,
    /// What a run that changes the module invalidates (dropped by the pass
    /// manager).
    pub invalidates: Invalidates,
    /// The phase the pass leaves the module in, when it guarantees one
    /// (checked by the pass manager).
    pub establishes: Option<Phase>,
    /// Whether each graph's outputs keep their names (checked by the pass
    /// manager: goldens and `run --output-dir` name files by them); false
    /// only for a pass that changes a graph's interface by design.
    pub keeps_outputs: bool,
    /// The counters the pass reports (`--pass-stats`, the `--report`
    /// JSON), besides the manager's [`PLANS_DROPPED`](crate::runner::PLANS_DROPPED).
    pub statistics: fn() -> Vec<Statistic>,
    /// Builds the pass; fails when options that parsed one by one do not
    /// go together (the message names the pass).
    pub create: fn(&PassOptions) -> Result<Box<dyn Pass>, String>,
}

/// Every pass slmcc knows, in the order they usually run: one line per
/// pass in `transforms/mod.rs`.
pub use crate::transforms::PASSES;

/// The names of every registered pass.
pub fn pass_names() -> Vec<&'static str> {
    PASSES.iter().map(|p| p.name).collect()
}

/// Builds the pass an entry names, checking its options.
pub fn create_pass(entry: &PipelineEntry) -> Result<Box<dyn Pass>, PassError> {
    create_entry(entry).map(|(_, pass)| pass)
}

/// Builds the pass an entry names, with its registry entry.
pub fn create_entry(
    entry: &PipelineEntry,
) -> Result<(&'static PassInfo, Box<dyn Pass>), PassError> {
    let Some(&info) = PASSES.iter().find(|p| p.name == entry.name) else {
        return Err(PassError::Pipeline(format!(
            "unknown pass `{}` (valid passes: {})",
            entry.name,
            pass_names().join(", ")
        )));
    };
    let options = PassOptions::resolve(info.name, info.options, &entry.options)?;
    let pass = (info.create)(&options).map_err(PassError::Pipeline)?;
    Ok((info, pass))
}

/// An option's default as help and docs print it.
fn default_text(o: &OptionSpec) -> &'static str {
    if o.default.is_empty() {
        "none"
    } else {
        o.default
    }
}

/// What a pass's registry entry declares about phases, in words:
/// `requires any phase; invalidates memory plans`.
fn phase_text(p: &PassInfo) -> String {
    let mut out = format!(
        "requires {}; when it changes the module, invalidates {}",
        p.requires.describe(),
        p.invalidates.describe()
    );
    if let Some(phase) = p.establishes {
        out.push_str(&format!("; leaves the module {phase}"));
    }
    if !p.keeps_outputs {
        out.push_str("; may change graph outputs");
    }
    out
}

/// A help text listing every pass with its phase declarations, options
/// and statistics (`slmcc passes`, `slmcc opt --help`); columns are as
/// wide as the longest name.
pub fn describe_passes() -> String {
    let width = PASSES.iter().map(|p| p.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for p in PASSES {
        out.push_str(&format!("  {:<width$}  {}\n", p.name, p.summary));
        out.push_str(&format!("  {:<width$}  ({})\n", "", phase_text(p)));
        for o in p.options {
            out.push_str(&format!(
                "      {}={}  {} (default {})\n",
                o.name,
                o.kind.describe(),
                o.help,
                default_text(o)
            ));
        }
        let stats = (p.statistics)();
        if !stats.is_empty() {
            out.push_str("      statistics:\n");
            let width = stats.iter().map(|s| s.name.len()).max().unwrap_or(0);
            for s in stats {
                out.push_str(&format!("        {:<width$}  {}\n", s.name, s.description));
            }
        }
    }
    let dropped = crate::runner::PLANS_DROPPED;
    out.push_str(&format!(
        "\n  Every pass that invalidates memory plans also reports `{}`: {}.\n",
        dropped.name, dropped.description
    ));
    out
}

/// The registry as a Markdown table (`slmcc passes --markdown`), which the
/// pass table of `docs/ARCHITECTURE.md` is (a test compares them).
pub fn markdown_table() -> String {
    let code = |s: &str| format!("`{}`", s.replace('|', "\\|"));
    let mut out = String::from(
        "| pass | contract | phases | options (default) | statistics |\n|---|---|---|---|---|\n",
    );
    for p in PASSES {
        let options: Vec<String> = p
            .options
            .iter()
            .map(|o| {
                format!(
                    "{}: {} ({})",
                    code(&format!("{}={}", o.name, o.kind.describe())),
                    o.help.replace('|', "\\|"),
                    code(default_text(o))
                )
            })
            .collect();
        let stats: Vec<String> = (p.statistics)()
            .iter()
            .map(|s| format!("{}: {}", code(s.name), s.description.replace('|', "\\|")))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            code(p.name),
            p.summary.replace('|', "\\|"),
            phase_text(p),
            if options.is_empty() {
                "—".to_string()
            } else {
                options.join("<br>")
            },
            if stats.is_empty() {
                "—".to_string()
            } else {
                stats.join("<br>")
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::parse_pipeline;

    #[test]
    fn every_pass_is_created_under_its_own_name() {
        for p in PASSES {
            let entry = PipelineEntry {
                name: p.name.to_string(),
                options: Vec::new(),
            };
            assert_eq!(create_pass(&entry).unwrap().name(), p.name);
        }
    }

    #[test]
    fn unknown_pass_lists_valid_names() {
        let entry = &parse_pipeline("frobnicate").unwrap()[0];
        let e = create_pass(entry).err().unwrap().to_string();
        let all = pass_names().join(", ");
        assert_eq!(
            e,
            format!("unknown pass `frobnicate` (valid passes: {all})")
        );
    }

    #[test]
    fn names_are_kebab_case_and_unique() {
        let names = pass_names();
        for (i, n) in names.iter().enumerate() {
            let kebab = n.starts_with(|c: char| c.is_ascii_lowercase())
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            assert!(kebab, "{n}");
            assert!(!names[..i].contains(n), "{n} twice");
        }
    }
}
