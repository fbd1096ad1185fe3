//! `partition`: reports which nodes the RK3588 NPU runs and
//! which stay on the CPU (the Cranelift kernels), each with the reason.
//!
//! The rules are [`slmcc_ir::placement`]'s: a pure function of the graph
//! that the compiler and the runtime apply too, so the three can never
//! disagree. The IR carries no placement of its own; this pass changes
//! nothing.

use slmcc_ir::placement::{macs, place, Device};
use slmcc_ir::Module;

use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// Options of `partition`.
pub const OPTIONS: &[OptionSpec] = &[OptionSpec {
    name: "target",
    kind: OptionKind::Enum(&["rk3588"]),
    default: "rk3588",
    help: "the NPU whose kernels decide the placement (rk3588)",
}];

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("npu-nodes", "nodes the NPU runs"),
    Statistic::new("cpu-nodes", "nodes that stay on the CPU"),
    Statistic::new("npu-macs", "matmul multiply-accumulates on the NPU (static shapes, summed over graphs)"),
    Statistic::new("cpu-macs", "matmul multiply-accumulates on the CPU (static shapes, summed over graphs)"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "partition",
    summary: "report which nodes the NPU runs and which stay on the CPU, and why (changes nothing)",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Nothing,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(Partition::from_options(o))),
};

/// Reports the placement ([`slmcc_ir::placement::place`]) of every node.
///
/// Requires: a verified module. Guarantees: the module is not changed;
/// statistics `npu-nodes`, `cpu-nodes`, `npu-macs`, `cpu-macs` (matmul
/// multiply-accumulates with static shapes, summed over graphs); one
/// `debug` event per node naming its device and the reason.
pub struct Partition;

impl Partition {
    /// The one target (`target=rk3588`) is checked when the pipeline is
    /// parsed.
    pub fn from_options(_: &PassOptions) -> Partition {
        Partition
    }
}

impl Pass for Partition {
    fn name(&self) -> &'static str {
        "partition"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        for g in &module.graphs {
            for (i, p) in place(g).iter().enumerate() {
                let (nodes, mac) = match p.device {
                    Device::Npu => ("npu-nodes", "npu-macs"),
                    Device::Cpu => ("cpu-nodes", "cpu-macs"),
                };
                stats.add(nodes, 1);
                stats.add(mac, macs(g, i));
                tracing::debug!(
                    graph = %g.name,
                    node = %slmcc_ir::verify::node_label(g, i),
                    device = ?p.device,
                    reason = p.reason,
                    "partition"
                );
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;

    #[test]
    fn counts_nodes_and_macs_per_device_and_changes_nothing() {
        let mut m = parse_module(slmcc_ir::placement::tests_src::SRC).unwrap();
        let before = slmcc_ir::text::print_module(&m);
        let mut stats = Statistics::default();
        assert!(!Partition.run(&mut m, &mut stats).unwrap());
        assert_eq!(slmcc_ir::text::print_module(&m), before);
        assert_eq!(stats.get("npu-nodes"), 1);
        assert_eq!(stats.get("cpu-nodes"), 2);
        assert_eq!(stats.get("npu-macs"), 2 * 32 * 32);
        assert_eq!(stats.get("cpu-macs"), 2 * 32 * 5);
    }
}
