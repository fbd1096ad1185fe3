//! Kernel throughput of the cpu backend on this host.
//!
//! ```sh
//! cargo run --release -p slmcc-backends --example bench            # matmul shapes
//! cargo run --release -p slmcc-backends --example bench -- all      # + swiglu, attention, softmax
//! cargo run --release -p slmcc-backends --example bench -- all libm # transcendentals by libm calls
//! cargo run --release -p slmcc-backends --example bench -- nofma    # separate multiply and add
//! ```
//!
//! Each case is one node JIT-compiled for the host (weights as graph
//! inputs here: the kernel reads them from a buffer either way), called
//! directly through its function pointer on preallocated buffers, timed
//! in 15 rounds of ~0.1 s each; the best round is printed (the one least
//! disturbed by other load on the host). The matrix products are timed
//! three ways: the generated GEMM (`host_gemm: false`), and the host GEMM
//! ([`slmcc_backends::cpu::hostgemm`]) on 1 and on 2 threads
//! (`CpuOptions::threads`); the other ops run on one thread.

use std::time::Instant;

use slmcc_backends::cpu::{CpuOptions, JitProgram};
use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::glu::Glu;
use slmcc_ir::ops::matmul::MatMul;
use slmcc_ir::ops::softmax::Softmax;
use slmcc_ir::ops::{static_dims, Fact};
use slmcc_ir::{DType, Graph, Op, OpDef, TensorType};

/// A one-node graph over f32 inputs of `shapes`.
fn graph(op: Op, shapes: &[Vec<usize>]) -> Graph {
    let mut g = Graph::new("main");
    let mut ids = Vec::new();
    let mut facts = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        let ty = TensorType::new(DType::F32, static_dims(s));
        ids.push(g.add_input(format!("x{i}"), ty.clone()).unwrap());
        facts.push(Fact::new(ty));
    }
    let refs: Vec<&Fact> = facts.iter().collect();
    let results = op.infer(&refs).unwrap();
    let named = results
        .iter()
        .enumerate()
        .map(|(i, f)| (format!("y{i}"), f.ty.clone()))
        .collect();
    g.outputs = g.add_node(op, ids, named).unwrap();
    g
}

/// Seconds per call of the node's kernel (best of 15 rounds).
fn time(op: Op, shapes: &[Vec<usize>], options: &CpuOptions) -> f64 {
    let g = graph(op, shapes);
    let prog = JitProgram::compile(&g, options).unwrap();
    let kernel = &prog.kernels[0];
    let mut bufs: Vec<Vec<f32>> = kernel
        .spec
        .buffers
        .iter()
        .map(|&v| {
            let n: usize = g.ty(v).shape.as_fixed().unwrap().iter().product();
            (0..n)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                .collect()
        })
        .collect();
    let ptrs: Vec<*mut u8> = bufs.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
    // SAFETY: the kernel was compiled for exactly these buffer sizes.
    let call = || assert_eq!(unsafe { (kernel.func)(ptrs.as_ptr()) }, 0);
    call();
    let start = Instant::now();
    let mut reps = 0usize;
    while start.elapsed().as_secs_f64() < 0.1 {
        call();
        reps += 1;
    }
    let reps = reps.max(1);
    let mut best = f64::INFINITY;
    for _ in 0..15 {
        let t = Instant::now();
        for _ in 0..reps {
            call();
        }
        best = best.min(t.elapsed().as_secs_f64() / reps as f64);
    }
    best
}

/// GFLOP/s of `flops` per call on the generated GEMM, then on the host
/// GEMM with 1 and 2 threads.
fn products(op: &Op, shapes: &[Vec<usize>], flops: f64, options: &CpuOptions) -> [f64; 3] {
    let with = |host_gemm, threads| CpuOptions {
        host_gemm,
        threads,
        ..*options
    };
    let mut out = [0.0; 3];
    for (i, opts) in [with(false, 1), with(true, 1), with(true, 2)]
        .into_iter()
        .enumerate()
    {
        out[i] = flops / time(op.clone(), shapes, &opts) / 1e9;
    }
    out
}

fn main() {
    let all = std::env::args().any(|a| a == "all");
    let options = CpuOptions {
        fast_math: !std::env::args().any(|a| a == "libm"),
        fma: !std::env::args().any(|a| a == "nofma"),
        host_gemm: true,
        host_qgemm: true,
        threads: 1,
    };
    println!("best of 15 rounds, {options:?}");
    println!("GFLOP/s                     generated  host×1  host×2");
    for (m, k, n) in [
        (1, 512, 1408),
        (1, 512, 8000),
        (8, 512, 1408),
        (32, 512, 512),
        (128, 512, 1408),
        (128, 512, 8000),
    ] {
        let flops = 2.0 * (m * k * n) as f64;
        let [g, h1, h2] = products(
            &Op::MatMul(MatMul),
            &[vec![m, k], vec![k, n]],
            flops,
            &options,
        );
        println!("matmul {m:>3}x{k}x{n:<5}         {g:7.1} {h1:7.1} {h2:7.1}");
    }
    if !all {
        return;
    }
    for (m, k, n) in [(1, 512, 1408), (32, 512, 1408), (128, 512, 1408)] {
        let flops = 4.0 * (m * k * n) as f64;
        let [g, h1, h2] = products(
            &Op::Glu(Glu::swiglu()),
            &[vec![m, k], vec![k, n], vec![k, n]],
            flops,
            &options,
        );
        println!("swiglu {m:>3}x{k}x{n:<5}         {g:7.1} {h1:7.1} {h2:7.1}");
    }
    let s = time(
        Op::Softmax(Softmax { axis: -1 }),
        &[vec![8, 128, 128]],
        &options,
    );
    println!("softmax [8, 128, 128]: {:9.1} us", s * 1e6);
    // Attention: the generated row kernel, then the host attention
    // (prefill rows) on 1 and 2 threads; GFLOP/s of the multiply-adds the
    // causal range leaves (decode rows stay generated in all three).
    for (s_len, t_len, causal) in [(128, 128, true), (512, 512, true), (1, 128, false)] {
        let op = Attention {
            causal,
            ..Attention::new(2, 0.125)
        };
        let shapes = [
            vec![1, 8, s_len, 64],
            vec![1, 2, t_len, 64],
            vec![1, 2, t_len, 64],
        ];
        let keys: usize = (0..s_len)
            .map(|i| {
                if causal {
                    (i + t_len - s_len + 1).min(t_len)
                } else {
                    t_len
                }
            })
            .sum();
        let flops = 4.0 * (8 * keys * 64) as f64;
        let [g, h1, h2] = products(&Op::Attention(op), &shapes, flops, &options);
        println!(
            "attention q[1,8,{s_len},64] kv[1,2,{t_len},64]{} {g:7.1} {h1:7.1} {h2:7.1}",
            if causal { " causal" } else { "       " }
        );
    }
}
