//! `verify`: the verifier as a pass.

use slmcc_ir::{verify_module, Module};

use crate::pass::{failed, Pass, PassError, Statistics};

/// Runs the IR verifier ([`slmcc_ir::verify`]) and fails with its message.
/// Changes nothing. Use it in a pipeline to check a point without
/// `--verify-each`.
pub struct Verify;

impl Pass for Verify {
    fn name(&self) -> &'static str {
        "verify"
    }

    fn run(&mut self, module: &mut Module, _: &mut Statistics) -> Result<bool, PassError> {
        verify_module(module).map_err(|e| failed("verify", e.to_string()))?;
        Ok(false)
    }
}
