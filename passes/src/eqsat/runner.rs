//! Running rules to saturation under hard limits, and the report of the run.

use std::time::Duration;

use egg::{Runner, StopReason};

use super::analysis::{EGraph, FactAnalysis};
use super::language::Lang;
use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{Statistic, Statistics};

/// The rewrite rules of the e-graph.
pub type Rewrite = egg::Rewrite<Lang, FactAnalysis>;

/// Options of the passes that run rules (`canonicalize`, `eqsat-fuse`).
pub const LIMIT_OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "node-limit",
        kind: OptionKind::COUNT,
        default: "200000",
        help: "stop once the e-graph holds this many e-nodes (a graph that starts there is left as it is)",
    },
    OptionSpec {
        name: "iter-limit",
        kind: OptionKind::COUNT,
        default: "30",
        help: "stop after this many rounds of rule application",
    },
    OptionSpec {
        name: "time-limit-ms",
        kind: OptionKind::COUNT,
        default: "2000",
        help: "stop after this many milliseconds of rule application",
    },
];

/// Hard limits on one run.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub nodes: usize,
    pub iterations: usize,
    pub time: Duration,
}

impl Limits {
    /// Reads the [`LIMIT_OPTIONS`].
    pub fn from_options(o: &PassOptions) -> Limits {
        Limits {
            nodes: o.count("node-limit"),
            iterations: o.count("iter-limit"),
            time: Duration::from_millis(o.count("time-limit-ms") as u64),
        }
    }
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum Stop {
    /// No rule could add anything new.
    Saturated,
    NodeLimit,
    IterationLimit,
    TimeLimit,
    Other(String),
}

impl Stop {
    /// The statistic that records this reason.
    pub fn statistic(&self) -> &'static str {
        match self {
            Stop::Saturated => "stop-saturated",
            Stop::NodeLimit => "stop-node-limit",
            Stop::IterationLimit => "stop-iter-limit",
            Stop::TimeLimit => "stop-time-limit",
            Stop::Other(_) => "stop-other",
        }
    }
}

/// The counters [`Report::record`] adds: the e-graph's size, the
/// iterations and time, and one `stop-*` counter for why it stopped.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new(
        "egraph-nodes",
        "e-nodes in the e-graph when saturation stopped",
    ),
    Statistic::new(
        "egraph-classes",
        "e-classes in the e-graph when saturation stopped",
    ),
    Statistic::new("iterations", "rule-application iterations run"),
    Statistic::new("saturation-us", "microseconds spent saturating"),
    Statistic::new(
        "stop-saturated",
        "runs that stopped because no rule changed the e-graph",
    ),
    Statistic::new("stop-node-limit", "runs stopped by the `node-limit` option"),
    Statistic::new("stop-iter-limit", "runs stopped by the `iter-limit` option"),
    Statistic::new(
        "stop-time-limit",
        "runs stopped by the `time-limit-ms` option",
    ),
    Statistic::new("stop-other", "runs stopped for another reason"),
];

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub iterations: usize,
    pub nodes: usize,
    pub classes: usize,
    pub time: Duration,
    pub stop: Stop,
}

impl RunReport {
    /// Adds the report to a pass's statistics.
    pub fn record(&self, stats: &mut Statistics) {
        stats.add("egraph-nodes", self.nodes as u64);
        stats.add("egraph-classes", self.classes as u64);
        stats.add("iterations", self.iterations as u64);
        stats.add("saturation-us", self.time.as_micros() as u64);
        stats.add(self.stop.statistic(), 1);
    }
}

/// Applies `rules` to `egraph` until it saturates or a limit is hit.
pub fn saturate(egraph: EGraph, rules: &[Rewrite], limits: Limits) -> (EGraph, RunReport) {
    let runner: Runner<Lang, FactAnalysis> = Runner::new(FactAnalysis::default())
        .with_egraph(egraph)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .run(rules);
    let stop = match &runner.stop_reason {
        Some(StopReason::Saturated) => Stop::Saturated,
        Some(StopReason::NodeLimit(_)) => Stop::NodeLimit,
        Some(StopReason::IterationLimit(_)) => Stop::IterationLimit,
        Some(StopReason::TimeLimit(_)) => Stop::TimeLimit,
        Some(StopReason::Other(s)) => Stop::Other(s.clone()),
        None => Stop::Other("not run".to_string()),
    };
    let time = runner
        .iterations
        .iter()
        .map(|i| Duration::from_secs_f64(i.total_time))
        .sum();
    let report = RunReport {
        iterations: runner.iterations.len(),
        nodes: runner.egraph.total_number_of_nodes(),
        classes: runner.egraph.number_of_classes(),
        time,
        stop,
    };
    (runner.egraph, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eqsat::rules::{fusion, testing::egraph};

    fn run(limits: Limits) -> RunReport {
        let mut eg = egraph("%x: f32[1, seq, 64], @w: f32[64]");
        let e = "(mul @w (mul %x (reciprocal (sqrt (add (reduce_mean (list -1) true \
                 (pow %x (constant f32[]=2.0))) (constant f32[]=1e-6))))))";
        eg.add_expr(&e.parse().unwrap());
        eg.rebuild();
        saturate(eg, &fusion(), limits).1
    }

    #[test]
    fn reports_which_limit_stopped_the_run() {
        let ample = Limits {
            nodes: 100_000,
            iterations: 30,
            time: Duration::from_secs(10),
        };
        assert_eq!(run(ample).stop, Stop::Saturated);
        let one_round = Limits {
            iterations: 1,
            ..ample
        };
        assert_eq!(run(one_round).stop, Stop::IterationLimit);
        let tiny = Limits { nodes: 5, ..ample };
        assert_eq!(run(tiny).stop, Stop::NodeLimit);
        let no_time = Limits {
            time: Duration::ZERO,
            ..ample
        };
        assert_eq!(run(no_time).stop, Stop::TimeLimit);
    }
}
