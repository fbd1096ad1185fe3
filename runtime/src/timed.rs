//! Per-kernel timing for profiles: a [`KernelSet`] that wraps another and
//! reports the wall time of every kernel call to a recorder. Benchmarks use
//! it to break a step down by node; the executor itself never times.

use std::rc::Rc;
use std::time::Instant;

use slmcc_ir::Graph;

use crate::exec::{Kernel, KernelArgs, KernelSet};

/// Receives `(node, nanoseconds)` after every kernel call.
pub type Recorder = Rc<dyn Fn(usize, u64)>;

/// `inner`'s kernels, each call timed into `record` (two clock reads per
/// call: profiles of very short kernels include that overhead).
pub struct TimedKernels<K> {
    pub inner: K,
    pub record: Recorder,
}

impl<K: KernelSet> KernelSet for TimedKernels<K> {
    fn kernel(&self, graph: &Graph, node: usize) -> Result<Kernel, String> {
        let k = self.inner.kernel(graph, node)?;
        let record = self.record.clone();
        Ok(Box::new(move |args: &KernelArgs<'_>| {
            let t = Instant::now();
            let r = k(args);
            record(node, t.elapsed().as_nanos() as u64);
            r
        }))
    }
}
