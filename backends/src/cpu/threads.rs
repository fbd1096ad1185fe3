//! The pool of threads kernels may use: [`parallel_for`] runs tasks on up
//! to the number of threads its caller asks for, without allocating. How
//! many a kernel uses is its own business, fixed when it is compiled
//! (`CpuOptions::threads`), except in a loaded object (a package's AOT
//! kernels, compiled before anyone chose): its calls ask for the count
//! the runtime set when it loaded the object ([`set_object_threads`]).
//!
//! Kernels never allocate, so the pool is built for that: its worker
//! threads are spawned by [`ensure_workers`] when a program is compiled
//! (not by a kernel), and a dispatch only stores a pointer to the caller's job in a mutex-guarded
//! slot, wakes the workers through a condition variable (idle workers
//! spin for [`SPIN`] first, watching an atomic copy of the job counter,
//! so that back-to-back dispatches skip the wake-up) and hands out
//! task indices with an atomic counter; the calling thread takes tasks too
//! and returns once every worker that joined has finished. One job runs
//! at a time: a dispatch that finds the pool busy (another thread's
//! kernel, or a task that itself calls [`parallel_for`]) runs its tasks
//! on its own thread instead of waiting. The host GEMM
//! ([`super::hostgemm`]) is its user.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// Most threads a kernel may use.
pub const MAX_THREADS: usize = 64;

/// How long an idle worker spins, watching for the next job, before it
/// sleeps on the condition variable, and how long a dispatcher spins for
/// its workers to finish: a decode step dispatches every few tens of
/// microseconds, and waking a sleeping thread costs as much (on the
/// 2-core machine, the 2-thread decode step was slower than 1 thread's
/// while the workers slept between dispatches).
const SPIN: Duration = Duration::from_micros(200);

/// `State::generation` and `State::pending`, readable without the lock
/// (written under it): what the spinning threads watch.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// Spins until `ready()` or [`SPIN`] has passed; whether it became ready.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= SPIN {
            return false;
        }
    }
}

/// Threads a loaded object's kernels may use ([`object_threads`]).
static OBJECT_THREADS: AtomicUsize = AtomicUsize::new(1);

/// Sets the threads a loaded object's kernels may use (clamped to
/// `1..=`[`MAX_THREADS`]; `--threads` of `run`/`generate`), and spawns the
/// workers they need.
pub fn set_object_threads(n: usize) {
    let n = n.clamp(1, MAX_THREADS);
    ensure_workers(n);
    OBJECT_THREADS.store(n, Ordering::Relaxed);
}

/// Threads a loaded object's kernels may use (1 until set).
pub fn object_threads() -> usize {
    OBJECT_THREADS.load(Ordering::Relaxed)
}

/// Spawns the pool's missing workers so that `n` threads (the calling
/// thread included, clamped to `1..=`[`MAX_THREADS`]) can run a job;
/// workers are never stopped (idle ones wait on a condition variable).
/// Called when a program that may use `n` threads is compiled.
pub fn ensure_workers(n: usize) {
    let n = n.clamp(1, MAX_THREADS);
    let mut state = lock(&POOL.state);
    while state.workers + 1 < n {
        let id = state.workers;
        std::thread::Builder::new()
            .name(format!("slmcc-kernel-{}", id + 1))
            .spawn(move || worker(id))
            .expect("spawning a kernel thread");
        state.workers += 1;
    }
}

/// One dispatched job, on the dispatching thread's stack.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    tasks: usize,
    next: AtomicUsize,
}

impl Job<'_> {
    /// Takes tasks until none is left.
    fn run(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.tasks {
                return;
            }
            (self.f)(i);
        }
    }
}

/// A job pointer with its lifetime erased: valid from the dispatch that
/// stores it until `pending` is back to zero, which the dispatcher waits
/// for before its stack frame (holding the job) ends.
#[derive(Clone, Copy)]
struct JobPtr(*const Job<'static>);

// SAFETY: the job is `Sync` (a `Sync` closure and an atomic) and outlives
// every use by the workers (see `JobPtr`).
unsafe impl Send for JobPtr {}

struct State {
    /// Incremented by each dispatch; workers wait for a change.
    generation: u64,
    job: Option<JobPtr>,
    /// Workers `0..joiners` take part in the current job.
    joiners: usize,
    /// Joiners that have not finished the current job yet.
    pending: usize,
    workers: usize,
}

struct Pool {
    /// Held for the whole of a dispatch: one job at a time.
    dispatch: Mutex<()>,
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
}

static POOL: Pool = Pool {
    dispatch: Mutex::new(()),
    state: Mutex::new(State {
        generation: 0,
        job: None,
        joiners: 0,
        pending: 0,
        workers: 0,
    }),
    work: Condvar::new(),
    done: Condvar::new(),
};

/// Locks, ignoring poisoning (nothing panics while holding these locks;
/// a panicking task aborts the process).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn worker(id: usize) {
    let mut seen = 0u64;
    loop {
        let job = {
            spin_until(|| GENERATION.load(Ordering::Acquire) != seen);
            let mut state = lock(&POOL.state);
            while state.generation == seen {
                state = POOL.work.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            seen = state.generation;
            if id >= state.joiners {
                continue;
            }
            state.job.expect("a job with joiners")
        };
        // SAFETY: see `JobPtr`: the dispatcher keeps the job alive until
        // this worker has decremented `pending`.
        let job = unsafe { &*job.0 };
        if catch_unwind(AssertUnwindSafe(|| job.run())).is_err() {
            // Kernels cannot report a panic; a task never panics unless
            // something is badly wrong.
            std::process::abort();
        }
        let mut state = lock(&POOL.state);
        state.pending -= 1;
        PENDING.store(state.pending, Ordering::Release);
        if state.pending == 0 {
            POOL.done.notify_all();
        }
    }
}

/// Runs `f(i)` for every `i` in `0..tasks`, on up to `threads` threads
/// (the caller's included; as many as the pool has workers for), and
/// returns when all have run. Allocates nothing. Tasks must not panic (the
/// process aborts if one does).
pub fn parallel_for(threads: usize, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
    let helpers = threads.min(tasks).saturating_sub(1);
    let guard = match helpers {
        0 => None,
        _ => match POOL.dispatch.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        },
    };
    let Some(_guard) = guard else {
        (0..tasks).for_each(f);
        return;
    };
    let job = Job {
        f,
        tasks,
        next: AtomicUsize::new(0),
    };
    let joiners = {
        let mut state = lock(&POOL.state);
        let joiners = helpers.min(state.workers);
        // SAFETY (lifetime erasure): this function does not return before
        // `pending` is zero again, i.e. before every joiner stopped using
        // the job.
        let ptr = JobPtr((&job as *const Job<'_>).cast::<Job<'static>>());
        state.job = Some(ptr);
        state.joiners = joiners;
        state.pending = joiners;
        state.generation += 1;
        PENDING.store(joiners, Ordering::Release);
        GENERATION.store(state.generation, Ordering::Release);
        joiners
    };
    if joiners > 0 {
        POOL.work.notify_all();
    }
    if catch_unwind(AssertUnwindSafe(|| job.run())).is_err() {
        std::process::abort();
    }
    spin_until(|| PENDING.load(Ordering::Acquire) == 0);
    let mut state = lock(&POOL.state);
    while state.pending > 0 {
        state = POOL.done.wait(state).unwrap_or_else(|e| e.into_inner());
    }
    state.job = None;
    state.joiners = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_on_several_threads() {
        ensure_workers(3);
        for tasks in [0usize, 1, 2, 3, 7, 100] {
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            parallel_for(3, tasks, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
        // Nested: the inner dispatch finds the pool busy and runs inline.
        let total = AtomicUsize::new(0);
        parallel_for(3, 4, &|_| {
            parallel_for(3, 5, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(total.load(Ordering::Relaxed), 20);
    }
}
