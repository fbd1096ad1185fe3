//! The [`Pass`] trait and what a pass reports back.

use std::fmt;

use slmcc_ir::{Module, Phase};

/// A counter a pass declares (its `STATISTICS`, listed by its registry
/// entry): the name `--pass-stats` and the `--report` JSON print, and what
/// it counts, which `slmcc passes` and `docs/ARCHITECTURE.md` show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Statistic {
    pub name: &'static str,
    pub description: &'static str,
}

impl Statistic {
    pub const fn new(name: &'static str, description: &'static str) -> Self {
        Statistic { name, description }
    }
}

/// Counters a pass reports (`nodes-removed = 3`), in the order first added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Statistics {
    entries: Vec<(&'static str, u64)>,
}

impl Statistics {
    /// Adds `n` to the counter `name` (creating it at zero first).
    pub fn add(&mut self, name: &'static str, n: u64) {
        match self.entries.iter_mut().find(|(k, _)| *k == name) {
            Some((_, v)) => *v += n,
            None => self.entries.push((name, n)),
        }
    }

    pub fn get(&self, name: &str) -> u64 {
        self.entries
            .iter()
            .find(|(k, _)| *k == name)
            .map_or(0, |(_, v)| *v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.entries.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for Statistics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// An error raised by a pass, the pipeline parser or the runner.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PassError {
    /// A pipeline string or pass option is malformed or names something unknown.
    #[error("{0}")]
    Pipeline(String),
    /// A pass failed on the module.
    #[error("pass `{pass}`: {message}")]
    Failed { pass: String, message: String },
    /// The module is not in the phase the pass requires, or a pass did not
    /// leave it in the phase it establishes.
    #[error("pass `{pass}`: {message}")]
    Phase { pass: String, message: String },
    /// The verifier rejected the module after a pass.
    #[error("verification failed after pass `{pass}`: {message}")]
    Verify { pass: String, message: String },
    /// A pass panicked: a bug in the pass, reported as an error.
    #[error("pass `{pass}` panicked (a bug in the pass): {message}")]
    Panicked { pass: String, message: String },
}

/// A transformation or analysis over a whole module.
///
/// Implementors document their contract (what they require of the input, what
/// they guarantee of the output) on the struct. `run` must leave the module
/// valid for the verifier whenever it returns `Ok`, and return whether it
/// changed anything.
pub trait Pass {
    /// The kebab-case name used in pipeline strings.
    fn name(&self) -> &'static str;

    /// Runs the pass, adding counters to `stats`; returns whether the module changed.
    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError>;
}

/// The module phase a pass needs before it runs (see [`Phase`]); the pass
/// manager refuses to run a pass on a module in another phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requires {
    /// Any phase.
    Any,
    /// Still symbolic: some graph input has a symbolic dim. For passes that
    /// rewrite in terms of the sequence symbol (`kv-cache` shifts the ranges
    /// of length `seq`); on a bucketed graph they would silently do nothing.
    Symbolic,
    /// Bucketed or planned: every graph input static.
    Static,
}

impl Requires {
    pub fn admits(self, phase: Phase) -> bool {
        match self {
            Requires::Any => true,
            Requires::Symbolic => phase == Phase::Symbolic,
            Requires::Static => phase >= Phase::Bucketed,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Requires::Any => "any phase",
            Requires::Symbolic => "symbolic",
            Requires::Static => "bucketed or planned",
        }
    }
}

/// What a pass invalidates when it changes the module. The pass manager
/// drops what is invalidated (the pass itself never does) and counts it in
/// the pass's `plans-dropped` statistic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalidates {
    /// Nothing: the pass changes no graph (analyses, reports, the planner).
    Nothing,
    /// The memory plans: the pass rewrites graphs, so offsets computed for
    /// the old graphs no longer hold.
    Plans,
}

impl Invalidates {
    pub fn describe(self) -> &'static str {
        match self {
            Invalidates::Nothing => "nothing",
            Invalidates::Plans => "memory plans",
        }
    }
}

/// Shorthand for a [`PassError::Failed`] of pass `pass`.
pub fn failed(pass: &str, message: impl Into<String>) -> PassError {
    PassError::Failed {
        pass: pass.to_string(),
        message: message.into(),
    }
}
