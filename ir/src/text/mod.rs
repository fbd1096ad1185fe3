//! The textual form of the IR (printer and parser).

use crate::graph::Module;

/// Error parsing the textual IR, located by 1-based line and column.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// Prints a module in the textual form.
pub fn print_module(_m: &Module) -> String {
    unimplemented!("printer")
}

/// Parses a module from the textual form.
pub fn parse_module(_src: &str) -> Result<Module, ParseError> {
    unimplemented!("parser")
}
