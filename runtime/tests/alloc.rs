//! No heap allocation per inference step: the executor over a memory plan,
//! counted with a counting global allocator.
//!
//! What this proves: once [`Executor::load`] has run, writing padded inputs
//! into the arena ([`pad_into`]), [`Executor::run`] and reading the outputs
//! back ([`slice_into`]) allocate nothing, on both buckets of a
//! bucket-specialized, memory-planned graph, with in-place results; and the
//! results equal the reference interpreter's on the unpadded input. The
//! kernels are the test-only table below (f32 element-wise ops and reshape,
//! written for the executor's calling convention); the CPU backend's kernels
//! must keep the same promise for the whole step to be allocation-free.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use slmcc_ir::ops::binary::BinaryKind;
use slmcc_ir::ops::unary::UnaryKind;
use slmcc_ir::text::parse_module;
use slmcc_ir::{Graph, Module, Op, Tensor};
use slmcc_passes::{PassManager, RunOptions};
use slmcc_runtime::bucket::{pad_into, slice_into, Buckets};
use slmcc_runtime::exec::{Executor, Kernel, KernelArgs, KernelError, KernelSet};
use slmcc_runtime::{run_graph, Capture};

/// Counts allocations made on a thread while it has counting switched on.
struct Counting;

// Per thread, both the switch and the count: tests run on several threads
// at once, and another test's allocations must not count here.
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
    }
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations_in<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATIONS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (out, ALLOCATIONS.with(Cell::get) - before)
}

/// Test-only kernels: f32 element-wise ops, and reshape.
/// Each reads element `i` before writing element `i`, so in-place results
/// (result pointer == operand pointer) are safe.
struct TestKernels;

fn unary(f: fn(f32) -> f32) -> Kernel {
    Box::new(move |a: &KernelArgs<'_>| {
        let (x, y) = (&a.inputs[0], &a.outputs[0]);
        let (x, y) = (x.ptr as *const f32, y.ptr as *mut f32);
        for i in 0..a.outputs[0].elements() {
            // SAFETY: the executor's contract: both valid for the element
            // count, equal or disjoint.
            unsafe { *y.add(i) = f(*x.add(i)) };
        }
        Ok(())
    })
}

fn binary(f: fn(f32, f32) -> f32) -> Kernel {
    Box::new(move |a: &KernelArgs<'_>| {
        let (x, w, y) = (&a.inputs[0], &a.inputs[1], &a.outputs[0]);
        // The first operand has the result's shape; the second has it too,
        // or is broadcast along the leading axes (`[1, 1, 16]`).
        if x.shape != y.shape || y.elements() % w.elements() != 0 {
            return Err(KernelError(
                "test kernels broadcast the second operand only",
            ));
        }
        let (n, m) = (y.elements(), w.elements());
        let (x, w, y) = (x.ptr as *const f32, w.ptr as *const f32, y.ptr as *mut f32);
        for i in 0..n {
            // SAFETY: as in `unary`.
            unsafe { *y.add(i) = f(*x.add(i), *w.add(i % m)) };
        }
        Ok(())
    })
}

impl KernelSet for TestKernels {
    fn kernel(&self, g: &Graph, n: usize) -> Result<Kernel, String> {
        Ok(match &g.nodes[n].op {
            Op::Unary(u) => match u.kind {
                UnaryKind::Exp => unary(f32::exp),
                UnaryKind::Neg => unary(|x| -x),
                UnaryKind::Sigmoid => unary(|x| 1.0 / (1.0 + (-x).exp())),
                k => return Err(format!("no test kernel for {k:?}")),
            },
            Op::Binary(b) => match b.kind {
                BinaryKind::Add => binary(|x, y| x + y),
                BinaryKind::Sub => binary(|x, y| x - y),
                BinaryKind::Mul => binary(|x, y| x * y),
                k => return Err(format!("no test kernel for {k:?}")),
            },
            Op::Reshape(_) => Box::new(|a: &KernelArgs<'_>| {
                let (x, y) = (&a.inputs[0], &a.outputs[0]);
                if x.ptr != y.ptr {
                    // SAFETY: distinct buffers of `bytes` bytes each.
                    unsafe { std::ptr::copy_nonoverlapping(x.ptr, y.ptr, y.bytes) };
                }
                Ok(())
            }),
            op => return Err(format!("no test kernel for {op:?}")),
        })
    }
}

const SRC: &str = r#"
module @m {
  weight @scale : f32[1, 1, 16]

  graph @main(%x: f32[1, seq, 16], %y: f32[1, seq, 16]) -> (f32[1, seq, 16], f32[1, seq, 16]) {
    %a = add %x, %y : f32[1, seq, 16]
    %b = exp %a : f32[1, seq, 16]
    %c = mul %b, %x : f32[1, seq, 16]
    %t = constant {value = [1, seq, 4, 4]} : i64[4]
    %r = reshape %c, %t : f32[1, seq, 4, 4]
    %u = constant {value = [1, seq, 16]} : i64[3]
    %d = reshape %r, %u : f32[1, seq, 16]
    %e = sigmoid %d : f32[1, seq, 16]
    %f = sub %e, %b : f32[1, seq, 16]
    %g = neg %f : f32[1, seq, 16]
    %h = mul %g, @scale : f32[1, seq, 16]
    return %h, %b
  }
}
"#;

fn planned() -> (Module, Module) {
    let mut m = parse_module(SRC).unwrap();
    m.weights
        .insert("scale", Tensor::from_f32(vec![1, 1, 16], vec![0.5; 16]));
    let symbolic = m.clone();
    let options = RunOptions {
        verify_each: true,
        ..RunOptions::default()
    };
    PassManager::parse("bucket-specialize{buckets=8,16},plan-memory", options)
        .unwrap()
        .run(&mut m, &mut std::io::sink())
        .unwrap();
    (symbolic, m)
}

fn inputs(len: usize) -> Vec<(String, Tensor)> {
    let x: Vec<f32> = (0..len * 16).map(|i| (i as f32 * 0.37).sin()).collect();
    let y: Vec<f32> = (0..len * 16).map(|i| (i as f32 * 0.11).cos()).collect();
    vec![
        ("x".to_string(), Tensor::from_f32(vec![1, len, 16], x)),
        ("y".to_string(), Tensor::from_f32(vec![1, len, 16], y)),
    ]
}

#[test]
fn counting_allocator_sees_allocations() {
    let (v, n) = allocations_in(|| Vec::<u8>::with_capacity(10));
    drop(v);
    assert_eq!(n, 1);
}

#[test]
fn a_step_allocates_nothing_after_load() {
    let (symbolic, m) = planned();
    let buckets = Buckets::new(&m, "main").unwrap();
    for len in [5usize, 8, 13] {
        let ins = inputs(len);
        let reference = run_graph(&symbolic, &symbolic.graphs[0], &ins, &Capture::Nothing).unwrap();
        let (g, info) = buckets.pick(len).unwrap();
        let mut exec = Executor::load(&m, &g.name, &TestKernels).unwrap();
        assert!(m.plans[&g.name]
            .tensors
            .iter()
            .any(|t| t.in_place.is_some()));
        let bytes: Vec<Vec<u8>> = ins.iter().map(|(_, t)| t.to_le_bytes()).collect();
        let mut outs: Vec<Vec<u8>> = (0..2).map(|_| vec![0u8; len * 16 * 4]).collect();
        let shape = [1, info.size as usize, 16];
        let ((), count) = allocations_in(|| {
            for _ in 0..3 {
                for (i, b) in bytes.iter().enumerate() {
                    pad_into(exec.input_mut(i), b, &shape, 1, len, &0f32.to_le_bytes());
                }
                exec.run().unwrap();
                for (i, o) in outs.iter_mut().enumerate() {
                    slice_into(o, exec.output(i), &shape, 1, len, 4);
                }
            }
        });
        assert_eq!(count, 0, "allocations during steps at length {len}");
        for ((name, want), got) in reference.outputs.iter().zip(&outs) {
            let got =
                Tensor::from_le_bytes(slmcc_ir::DType::F32, want.shape().to_vec(), got).unwrap();
            let d = slmcc_runtime::compare::diff(&got, want).unwrap();
            assert!(
                d.max_rel < 1e-6 && d.mismatched_specials == 0,
                "output {name} at length {len}: {d:?}"
            );
        }
    }
}

#[test]
fn loading_fails_cleanly_without_plan_or_kernel() {
    let (symbolic, mut m) = planned();
    let e = Executor::load(&symbolic, "main", &TestKernels)
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "graph @main: no memory plan (run plan-memory)"
    );
    m.graphs[0].nodes[0].op = Op::Binary(slmcc_ir::ops::binary::Binary {
        kind: BinaryKind::Pow,
    });
    let e = Executor::load(&m, "main_8", &TestKernels).err().unwrap();
    assert_eq!(
        e.to_string(),
        "graph @main_8, node %a: no test kernel for Pow"
    );
}
