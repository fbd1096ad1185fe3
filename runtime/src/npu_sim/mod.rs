//! Simulator of the NPU ISA (`docs/NPU_ISA.md`).
//!
//! [`NpuSim`] owns a DDR byte array and one CBUF byte array per core and
//! runs a [`Program`]: bit-exact data semantics ([`exec`], with the
//! integer arithmetic of [`arith`]; f32/f16 in [`exec_float`]) and the
//! documented cycle model ([`timing`]). Each core's DMA and compute
//! queues advance independently; the next instruction executed is always
//! the one with the earliest start time among the queues that can proceed
//! (ties: lower core, then the DMA queue), and it takes effect
//! atomically. A `sem.wait` proceeds once a signal is available and
//! completes `sem_cycles` after the later of its own start and that
//! signal's completion. When no queue can proceed but some have
//! instructions left, the run ends with [`SimError::Deadlock`]; it never
//! hangs. Invalid programs, out-of-range addresses and bad requantization
//! shifts are errors, never panics.

pub mod arith;
pub mod exec;
pub mod exec_float;
pub mod mem;
pub mod timing;

use mem::Mem;
use slmcc_backends::npu::isa::{Instr, IsaError, Program, Queue};
use slmcc_backends::npu::Target;

/// An instruction that cannot execute.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error("{mem} access [{addr:#x}, +{len}) out of range (size {size:#x})")]
    OutOfRange {
        mem: Mem,
        addr: u64,
        len: u64,
        size: u64,
    },
    #[error("requantization shift {0} outside -31..=31")]
    BadShift(i8),
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("invalid program: {0}")]
    Invalid(#[from] IsaError),
    #[error("invalid target: {0}")]
    Target(&'static str),
    #[error("core {core} {queue} queue, instruction {index} (`{instr}`): {source}")]
    Exec {
        core: usize,
        queue: Queue,
        index: usize,
        instr: String,
        source: ExecError,
    },
    #[error("deadlock: {0}")]
    Deadlock(String),
}

/// Timing of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Cycle at which the queue's last instruction completed.
    pub finish: u64,
    /// Cycles spent executing instructions (excluding waiting).
    pub busy: u64,
    /// Instructions executed.
    pub instrs: u64,
}

/// Timing and work of one core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    pub dma: QueueStats,
    pub compute: QueueStats,
    pub macs: u64,
}

impl CoreStats {
    /// Cycles until both queues are done.
    pub fn cycles(&self) -> u64 {
        self.dma.finish.max(self.compute.finish)
    }

    /// `macs / (cycles · macs_per_cycle)` of this core (0 when idle).
    pub fn utilisation(&self, t: &Target) -> f64 {
        ratio(self.macs, self.cycles(), u64::from(t.macs_per_cycle))
    }
}

/// `macs / (cycles · MACs per cycle of all of `t`'s cores)`, 0 for no
/// cycles: the NPU utilisation of work that took `cycles`.
pub fn npu_utilisation(t: &Target, macs: u64, cycles: u64) -> f64 {
    ratio(
        macs,
        cycles,
        u64::from(t.macs_per_cycle) * u64::from(t.cores),
    )
}

fn ratio(macs: u64, cycles: u64, per_cycle: u64) -> f64 {
    let cap = cycles as f64 * per_cycle as f64;
    if cap == 0.0 {
        0.0
    } else {
        macs as f64 / cap
    }
}

/// What a run did and how long the model says it took.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimStats {
    /// Cycles until every queue of every core is done.
    pub cycles: u64,
    pub cores: Vec<CoreStats>,
    pub ddr_bytes_read: u64,
    pub ddr_bytes_written: u64,
    pub macs: u64,
    /// `macs / (cycles · macs_per_cycle · target cores)`: the whole NPU.
    pub utilisation: f64,
}

impl SimStats {
    /// Model time in seconds at the target clock.
    pub fn seconds(&self, t: &Target) -> f64 {
        self.cycles as f64 / t.clock_hz.max(1) as f64
    }
}

/// The simulated machine: DDR and the cores' CBUFs.
#[derive(Clone, Debug)]
pub struct NpuSim {
    pub target: Target,
    pub ddr: Vec<u8>,
    /// One zero-initialised array of `target.cbuf_bytes` per core.
    pub cbuf: Vec<Vec<u8>>,
}

struct QueueState {
    pc: usize,
    clock: u64,
}

impl NpuSim {
    /// A machine with the given DDR contents and zeroed CBUFs.
    pub fn new(target: Target, ddr: Vec<u8>) -> Self {
        let cbuf = vec![vec![0u8; target.cbuf_bytes as usize]; target.cores as usize];
        NpuSim { target, ddr, cbuf }
    }

    fn check_target(&self) -> Result<(), SimError> {
        let t = &self.target;
        if t.ddr_bytes_per_sec == 0 || t.clock_hz == 0 {
            return Err(SimError::Target("zero DDR bandwidth or clock"));
        }
        if t.macs_per_cycle == 0 || t.f16_macs_per_cycle == 0 || t.vector_lanes == 0 {
            return Err(SimError::Target("zero MACs or vector lanes per cycle"));
        }
        if self.cbuf.len() != t.cores as usize {
            return Err(SimError::Target("CBUF count differs from the core count"));
        }
        Ok(())
    }

    /// Runs `program` to completion (memory keeps its effects, also after
    /// an error up to the failing instruction).
    pub fn run(&mut self, program: &Program) -> Result<SimStats, SimError> {
        self.run_with(program, true)
    }

    /// The timing model alone: `program`'s cycles, DDR bytes and MACs
    /// exactly as [`NpuSim::run`] counts them, without computing any data
    /// (no DDR image needed: what `slmcc report` uses to estimate models
    /// too large to simulate). Deadlocks are found as in a full run.
    pub fn time(target: &Target, program: &Program) -> Result<SimStats, SimError> {
        let mut sim = NpuSim {
            target: target.clone(),
            ddr: Vec::new(),
            cbuf: vec![Vec::new(); target.cores as usize],
        };
        sim.run_with(program, false)
    }

    fn run_with(&mut self, program: &Program, data: bool) -> Result<SimStats, SimError> {
        self.check_target()?;
        program.check(&self.target)?;
        let t = self.target.clone();
        let ncores = program.cores.len();
        let active = program
            .cores
            .iter()
            .filter(|c| !c.dma.is_empty())
            .count()
            .max(1) as u32;
        let queues = [Queue::Dma, Queue::Compute];
        let mut st: Vec<[QueueState; 2]> = (0..ncores)
            .map(|_| {
                [
                    QueueState { pc: 0, clock: 0 },
                    QueueState { pc: 0, clock: 0 },
                ]
            })
            .collect();
        // Completion times of the signals not yet consumed, per core and
        // semaphore.
        let mut sems: Vec<Vec<Vec<u64>>> =
            vec![vec![Vec::new(); usize::from(t.semaphores)]; ncores];
        let mut stats = SimStats {
            cores: vec![CoreStats::default(); ncores],
            ..SimStats::default()
        };
        loop {
            let mut next: Option<(usize, usize)> = None;
            let mut unfinished = false;
            for (c, cp) in program.cores.iter().enumerate() {
                for (qi, &q) in queues.iter().enumerate() {
                    let s = &st[c][qi];
                    let Some(instr) = cp.queue(q).get(s.pc) else {
                        continue;
                    };
                    unfinished = true;
                    if let Instr::Wait { sem } = *instr {
                        if sems[c][usize::from(sem)].is_empty() {
                            continue;
                        }
                    }
                    if next.is_none_or(|(nc, nq)| s.clock < st[nc][nq].clock) {
                        next = Some((c, qi));
                    }
                }
            }
            let Some((c, qi)) = next else {
                if unfinished {
                    return Err(SimError::Deadlock(describe_blocked(program, &st)));
                }
                break;
            };
            let q = queues[qi];
            let index = st[c][qi].pc;
            let instr = &program.cores[c].queue(q)[index];
            let start = st[c][qi].clock;
            let cost = timing::cycles(&t, instr, active);
            let end = match *instr {
                Instr::Signal { sem } => {
                    sems[c][usize::from(sem)].push(start.saturating_add(cost));
                    start.saturating_add(cost)
                }
                Instr::Wait { sem } => {
                    let pending = &mut sems[c][usize::from(sem)];
                    // Consume the earliest signal (the queue was only picked
                    // because one is available).
                    let earliest = pending.iter().enumerate().min_by_key(|(_, &v)| v);
                    let Some((pos, &at)) = earliest else {
                        return Err(SimError::Deadlock(describe_blocked(program, &st)));
                    };
                    pending.swap_remove(pos);
                    start.max(at).saturating_add(cost)
                }
                _ if !data => {
                    let (read, written) = match *instr {
                        Instr::DmaLoad { dims, .. } => (dims.bytes(), 0),
                        Instr::DmaStore { dims, .. } => (0, dims.bytes()),
                        _ => (0, 0),
                    };
                    stats.ddr_bytes_read += read;
                    stats.ddr_bytes_written += written;
                    stats.cores[c].macs += instr.macs();
                    start.saturating_add(cost)
                }
                _ => {
                    let traffic =
                        exec::exec(instr, &mut self.ddr, &mut self.cbuf[c]).map_err(|source| {
                            SimError::Exec {
                                core: c,
                                queue: q,
                                index,
                                instr: instr.to_string(),
                                source,
                            }
                        })?;
                    stats.ddr_bytes_read += traffic.read;
                    stats.ddr_bytes_written += traffic.written;
                    stats.cores[c].macs += instr.macs();
                    start.saturating_add(cost)
                }
            };
            let qs = match q {
                Queue::Dma => &mut stats.cores[c].dma,
                Queue::Compute => &mut stats.cores[c].compute,
            };
            qs.busy = qs.busy.saturating_add(cost);
            qs.instrs += 1;
            qs.finish = end;
            st[c][qi] = QueueState {
                pc: index + 1,
                clock: end,
            };
        }
        stats.macs = stats.cores.iter().map(|c| c.macs).sum();
        stats.cycles = stats.cores.iter().map(CoreStats::cycles).max().unwrap_or(0);
        stats.utilisation = npu_utilisation(&t, stats.macs, stats.cycles);
        Ok(stats)
    }
}

fn describe_blocked(program: &Program, st: &[[QueueState; 2]]) -> String {
    let mut parts = Vec::new();
    for (c, cp) in program.cores.iter().enumerate() {
        for (qi, q) in [Queue::Dma, Queue::Compute].into_iter().enumerate() {
            let pc = st[c][qi].pc;
            if let Some(i) = cp.queue(q).get(pc) {
                parts.push(format!(
                    "core {c} {q} queue blocked at instruction {pc} (`{i}`)"
                ));
            }
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod qmatmul_tests;

#[cfg(test)]
mod qswiglu_tests;

#[cfg(test)]
mod float_tests;

#[cfg(test)]
mod attention_tests;

#[cfg(test)]
mod rms_norm_tests;
