//! `--profile` of `run` and `generate`: every kernel call is timed (the
//! runtime's [`TimedKernels`]), and a report goes to stderr when the
//! command ends: per op kind the calls, the time, its share and the bytes
//! the kernels moved (each call's operands and results at their static
//! sizes, weights included: what a kernel must read and write at least),
//! the slowest nodes, the phases (`generate`: prefill and decode tokens/s)
//! and the process's peak resident memory.
//!
//! Times are wall times on this machine; an NPU node's time is that of its
//! model on this machine, not the NPU's (the estimates of `slmcc report`
//! are).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use slmcc_ir::{Graph, OpDef};
use slmcc_runtime::exec::KernelSet;
use slmcc_runtime::timed::{Recorder, TimedKernels};

/// One node's totals.
#[derive(Default, Clone)]
struct NodeStat {
    kind: String,
    bytes: u64,
    calls: u64,
    nanos: u64,
}

/// One graph's nodes.
struct GraphStats {
    name: String,
    nodes: Vec<NodeStat>,
}

/// The kernel times of one command.
#[derive(Default)]
pub struct Profile {
    /// Per graph wrapped, its nodes' totals by node index.
    graphs: RefCell<Vec<GraphStats>>,
}

/// What a command did besides its kernels, for the report.
pub enum Phases {
    /// `run`: one execution.
    Run { wall: Duration },
    /// `generate`: the prompt's prefill and the decode steps after it.
    Generate {
        prompt: usize,
        prefill: Duration,
        decoded: usize,
        decode: Duration,
    },
}

impl Profile {
    pub fn new() -> Rc<Profile> {
        Rc::new(Profile::default())
    }

    /// `inner`'s kernels for graph `g`, each call timed into this profile.
    pub fn wrap(self: &Rc<Self>, g: &Graph, inner: Box<dyn KernelSet>) -> Box<dyn KernelSet> {
        // Looked up here, once, so that a call only indexes.
        let index = {
            let mut graphs = self.graphs.borrow_mut();
            match graphs.iter().position(|s| s.name == g.name) {
                Some(i) => i,
                None => {
                    let nodes = g
                        .nodes
                        .iter()
                        .map(|node| NodeStat {
                            kind: node.op.mnemonic().to_string(),
                            bytes: node
                                .inputs
                                .iter()
                                .chain(&node.outputs)
                                .map(|&v| value_bytes(g, v))
                                .sum(),
                            ..NodeStat::default()
                        })
                        .collect();
                    graphs.push(GraphStats {
                        name: g.name.clone(),
                        nodes,
                    });
                    graphs.len() - 1
                }
            }
        };
        let me = self.clone();
        let record: Recorder = Rc::new(move |node, nanos| {
            if let Some(s) = me.graphs.borrow_mut()[index].nodes.get_mut(node) {
                s.calls += 1;
                s.nanos += nanos;
            }
        });
        Box::new(TimedKernels { inner, record })
    }

    /// The report, on stderr.
    pub fn print(&self, phases: &Phases) {
        eprint!("{}", self.report(phases));
    }

    fn report(&self, phases: &Phases) -> String {
        let graphs = self.graphs.borrow();
        let called = || {
            graphs.iter().flat_map(|g| {
                g.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.calls > 0)
                    .map(move |(i, s)| (g.name.as_str(), i, s))
            })
        };
        let mut kinds: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
        for (_, _, s) in called() {
            let k = kinds.entry(&s.kind).or_default();
            k.0 += s.calls;
            k.1 += s.nanos;
            k.2 += s.bytes * s.calls;
        }
        let total: u64 = kinds.values().map(|k| k.1).sum();
        let mut out = String::from("profile (wall time of every kernel call):\n");
        out += &format!(
            "{:<22} {:>8} {:>11} {:>6} {:>11} {:>8}\n",
            "op", "calls", "ms", "%", "MB moved", "GB/s"
        );
        let mut rows: Vec<_> = kinds.into_iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1 .1));
        for (kind, (calls, nanos, bytes)) in rows {
            out += &format!(
                "{kind:<22} {calls:>8} {:>11.3} {:>5.1}% {:>11.2} {:>8.2}\n",
                nanos as f64 / 1e6,
                100.0 * nanos as f64 / total.max(1) as f64,
                bytes as f64 / 1e6,
                bytes as f64 / nanos.max(1) as f64,
            );
        }
        out += &format!(
            "{:<22} {:>8} {:>11.3}\n",
            "all kernels",
            "",
            total as f64 / 1e6
        );
        let mut slow: Vec<_> = called().collect();
        slow.sort_by_key(|(_, _, s)| std::cmp::Reverse(s.nanos));
        out += "slowest nodes:\n";
        for (graph, node, s) in slow.into_iter().take(8) {
            out += &format!(
                "  @{graph} node {node} {}: {} calls, {:.3} ms, {:.3} ms per call\n",
                s.kind,
                s.calls,
                s.nanos as f64 / 1e6,
                s.nanos as f64 / 1e6 / s.calls as f64
            );
        }
        match *phases {
            Phases::Run { wall } => {
                out += &format!("run: {:.3} ms\n", wall.as_secs_f64() * 1e3);
            }
            Phases::Generate {
                prompt,
                prefill,
                decoded,
                decode,
            } => {
                let rate = |n: usize, d: Duration| match d.as_secs_f64() {
                    s if n > 0 && s > 0.0 => format!("{:.1} tokens/s", n as f64 / s),
                    _ => "n/a".to_string(),
                };
                out += &format!(
                    "prefill: {prompt} tokens in {:.3} ms ({}); decode: {decoded} steps in {:.3} ms ({})\n",
                    prefill.as_secs_f64() * 1e3,
                    rate(prompt, prefill),
                    decode.as_secs_f64() * 1e3,
                    rate(decoded, decode),
                );
            }
        }
        match peak_rss() {
            Some(kb) => out += &format!("peak memory (resident): {:.1} MB\n", kb as f64 / 1e3),
            None => out += "peak memory: not known on this system\n",
        }
        out
    }
}

/// The bytes of value `v` at its static size (0 when not static).
fn value_bytes(g: &Graph, v: slmcc_ir::ValueId) -> u64 {
    let ty = &g.value(v).ty;
    ty.shape
        .as_fixed()
        .map_or(0, |dims| ty.dtype.bytes_for(dims.iter().product()) as u64)
}

/// The process's peak resident set (`VmHWM`, kB), where Linux tells it.
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
