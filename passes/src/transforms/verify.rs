//! `verify`: the verifier as a pass.

use slmcc_ir::{verify_module, Module};

use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// This pass reports no counters.
pub const STATISTICS: &[Statistic] = &[];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "verify",
    summary: "check SSA form, types and weight references; change nothing",
    options: &[],
    requires: Requires::Any,
    invalidates: Invalidates::Nothing,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |_| Ok(Box::new(Verify)),
};

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
