//! The [`Pass`] trait and what a pass reports back.

use std::fmt;

use slmcc_ir::Module;

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
    /// The verifier rejected the module after a pass.
    #[error("verification failed after pass `{pass}`: {message}")]
    Verify { pass: String, message: String },
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

/// Shorthand for a [`PassError::Failed`] of pass `pass`.
pub fn failed(pass: &str, message: impl Into<String>) -> PassError {
    PassError::Failed {
        pass: pass.to_string(),
        message: message.into(),
    }
}
