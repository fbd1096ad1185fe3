//! No heap allocation per inference step on the real models, with the cpu
//! backend's kernels inside the planned arena.
//!
//! For each exported decoder (Llama, Qwen2, Phi-3, GPT-2): import, run the
//! fusion pipeline then `bucket-specialize{buckets=64,128},plan-memory` (so
//! the fused attention, rope and add+norm kernels are covered), load both
//! buckets with the executor over their memory plans and the JIT kernels
//! (`PlannedBuckets::load_jit`), then, under a counting global allocator,
//! run steps — pad a 45-token (and a 100-token) prompt into its bucket's
//! arena slot (`pad_into`), run the kernels, copy the logits out
//! (`slice_into`) — and require zero allocations and zero deallocations.
//! The logits must match the reference interpreter's unpadded run on the
//! real tokens (relative error below 1e-5; the matmuls use FMA).
//!
//! The test prints each bucket's regions and the median time per step (and, for
//! comparison, the simple cpu executor's step at 45 tokens, one buffer per
//! value and no padding).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{repo, run_pipeline, tokens, DECODERS};
use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::{DType, MemoryPlan, Tensor};
use slmcc_passes::specialize;
use slmcc_runtime::bucket::Padding;
use slmcc_runtime::compare::diff;
use slmcc_runtime::exec::Executor;
use slmcc_runtime::jit::JitKernels;
use slmcc_runtime::planned::PlannedBuckets;
use slmcc_runtime::{run_graph, Capture};

/// Counts allocations and deallocations made on a thread while it has
/// counting switched on.
struct Counting;

// Per thread, the switch and the counts: tests run on several threads at
// once, and another test's allocations must not count here.
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static DEALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note(counter: &'static std::thread::LocalKey<Cell<usize>>) {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = counter.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCATIONS);
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(&ALLOCATIONS);
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(&ALLOCATIONS);
        note(&DEALLOCATIONS);
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(&DEALLOCATIONS);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and deallocations `f` makes on this thread.
fn counted<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    let (a0, d0) = (ALLOCATIONS.with(Cell::get), DEALLOCATIONS.with(Cell::get));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (
        out,
        ALLOCATIONS.with(Cell::get) - a0,
        DEALLOCATIONS.with(Cell::get) - d0,
    )
}

#[test]
fn counting_allocator_sees_allocations_and_deallocations() {
    let ((), a, d) = counted(|| drop(Vec::<u8>::with_capacity(10)));
    assert_eq!((a, d), (1, 1));
}

/// Runs `steps` steps of `len` tokens on `p`, counted; returns the logits
/// of the last step, the bucket and the counts.
fn steps(p: &mut PlannedBuckets, ids: &[i64], steps: usize) -> (Vec<u8>, usize, usize, usize) {
    let len = ids.len();
    let input: Vec<u8> = ids.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut logits = vec![0u8; len * 512 * 4];
    let inputs: [&[u8]; 1] = [&input];
    let (bucket, a, d) = {
        let mut outputs: [&mut [u8]; 1] = [&mut logits];
        counted(|| {
            let mut bucket = usize::MAX;
            for _ in 0..steps {
                bucket = p.step(len, &inputs, &mut outputs).unwrap();
            }
            bucket
        })
    };
    (logits, p.buckets()[bucket].size, a, d)
}

/// The median time of `n` calls of `f`, after one warm-up call.
fn time_per_call(n: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

#[test]
fn decoder_steps_allocate_nothing_and_match_the_reference() {
    let mut rows = Vec::new();
    for model in DECODERS {
        let path = repo().join(format!("testdata/models/{model}.onnx"));
        let mut symbolic = slmcc::onnx::import_model(&path).unwrap();
        run_pipeline(
            &mut symbolic,
            "shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse",
        );
        let mut m = symbolic.clone();
        run_pipeline(&mut m, "bucket-specialize{buckets=64,128},plan-memory");

        let load = Instant::now();
        let mut p = PlannedBuckets::load_jit(
            &m,
            "main",
            Padding { pad_id: 0 },
            &|_| true,
            &CpuOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{model}: {e}"));
        let load = load.elapsed();
        assert_eq!(
            p.buckets().iter().map(|b| b.size).collect::<Vec<_>>(),
            [64, 128],
            "{model}"
        );

        for (len, bucket) in [(45usize, 64usize), (100, 128)] {
            let ids = tokens(len, 512, 0x5eed + len as u64);
            let (logits, ran, allocs, deallocs) = steps(&mut p, &ids, 4);
            assert_eq!(ran, bucket, "{model} at {len} tokens");
            assert_eq!(
                (allocs, deallocs),
                (0, 0),
                "{model}: allocations and deallocations during 4 steps of {len} tokens"
            );
            let inputs = vec![(
                "input_ids".to_string(),
                Tensor::from_i64(vec![1, len], ids.clone()),
            )];
            let want = run_graph(&symbolic, &symbolic.graphs[0], &inputs, &Capture::Nothing)
                .unwrap()
                .outputs
                .remove(0)
                .1;
            let got = Tensor::from_le_bytes(DType::F32, vec![1, len, 512], &logits).unwrap();
            let d = diff(&got, &want).unwrap();
            assert!(
                d.max_rel < 1e-5 && d.mismatched_specials == 0,
                "{model} at {len} tokens (bucket {bucket}): {d:?}"
            );
            rows.push(format!(
                "{model:<6} {len:>3} tokens in bucket {bucket:>3}: 0 allocations, 0 deallocations in 4 steps; logits max_rel {:.2e} vs the reference",
                d.max_rel
            ));
        }

        // Numbers: regions per bucket and time per step.
        let loaded: Vec<_> = p
            .buckets()
            .iter()
            .map(|b| (b.graph.clone(), b.region_sizes()))
            .collect();
        for (i, (graph, r)) in loaded.into_iter().enumerate() {
            let plan = &m.plans[&graph];
            let len = if i == 0 { 45 } else { 100 };
            let input: Vec<u8> = tokens(len, 512, 1)
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect();
            let mut logits = vec![0u8; len * 512 * 4];
            let t = {
                let p = &mut p;
                time_per_call(21, || {
                    p.step(len, &[&input], &mut [&mut logits]).unwrap();
                })
            };
            // What one buffer per activation would take.
            let unshared: u64 = plan
                .tensors
                .iter()
                .filter(|t| t.region == slmcc_ir::Region::Arena && t.in_place.is_none())
                .map(|t| t.size)
                .sum();
            rows.push(format!(
                "{model:<6} {:<9} arena {:>9} (lower bound {:>9}, unshared {:>9})  weights {:>9}  constants {:>7}  scratch {}  step {:>7.3} ms ({len} tokens)",
                graph,
                r.arena,
                plan.lower_bound,
                unshared,
                r.weights,
                r.constants,
                r.scratch,
                t.as_secs_f64() * 1e3
            ));
        }
        // The same kernels over an unshared plan (one place per value,
        // specialised to 45): what `slmcc run` on a model uses.
        let special =
            specialize(&symbolic, "main", &HashMap::from([("seq".to_string(), 45)])).unwrap();
        let g = &special.graphs[0];
        let kernels = JitKernels::compile(g, &CpuOptions::default()).unwrap();
        let plan = MemoryPlan::unshared(g).unwrap();
        let mut simple = Executor::load_planned(&special, "main", &plan, &kernels, None).unwrap();
        simple
            .input_mut(0)
            .copy_from_slice(&Tensor::from_i64(vec![1, 45], tokens(45, 512, 1)).to_le_bytes());
        let t = time_per_call(21, || {
            simple.run().unwrap();
        });
        rows.push(format!(
            "{model:<6} load (JIT, both buckets) {:.0} ms; unshared plan at 45 tokens {:.3} ms/step",
            load.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e3
        ));
    }
    eprintln!("{}", rows.join("\n"));
}
