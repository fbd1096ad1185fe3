//! Failures of a subcommand and the exit code each maps to.

use std::fmt;

/// Why a subcommand failed.
#[derive(Debug)]
pub enum Failure {
    /// Bad input or usage: exit code 2.
    BadInput(anyhow::Error),
    /// A check ran and failed (a golden or conformance mismatch): exit code 1.
    CheckFailed(anyhow::Error),
}

impl Failure {
    pub fn exit_code(&self) -> i32 {
        match self {
            Failure::BadInput(_) => 2,
            Failure::CheckFailed(_) => 1,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:#}` prints the whole context chain on one line: `a: b: c`.
        match self {
            Failure::BadInput(e) | Failure::CheckFailed(e) => write!(f, "{e:#}"),
        }
    }
}

/// Any error raised with `?` is bad input unless said otherwise.
impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::BadInput(e.into())
    }
}

pub type CmdResult = Result<(), Failure>;
