//! W8A8 products lowered to register-interface tasks (the backend's
//! `lower`), run from their programs on the functional model, against the
//! IR reference (`QMatMul::eval`, `QSwiGlu::eval`), bit for bit.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use slmcc_ir::placement::place;
use slmcc_ir::text::parse_module;
use slmcc_ir::{DType, EvalCtx, Module, OpDef, Tensor};
use slmcc_runtime::npu::{load_product, program_bytes, NpuLowered, NpuSession};
use slmcc_runtime::npu_device::{
    DeviceError, ModelDevice, NpuBuffer, NpuDevice, NpuTask, SharedBytes,
};

use common::Rng;

/// A module with one product of `m` rows by `[k, n]` weights in groups of
/// `group`: `qmatmul`, or `qswiglu` with two weights or one fused.
fn module(m: usize, k: usize, n: usize, group: usize, kind: &str, rng: &mut Rng) -> Module {
    let g = k / group;
    let (weights, node, out) = match kind {
        "qmatmul" => (
            vec![("w", n)],
            format!("qmatmul %x, @w, @w.s {{bits = 8, group = {group}}}"),
            n,
        ),
        "qswiglu" => (
            vec![("g", n), ("u", n)],
            format!("qswiglu %x, @g, @g.s, @u, @u.s {{bits = 8, group = {group}}}"),
            n,
        ),
        _ => (
            vec![("gu", 2 * n)],
            format!("qswiglu %x, @gu, @gu.s {{bits = 8, group = {group}}}"),
            n,
        ),
    };
    let decls: String = weights
        .iter()
        .map(|(w, c)| format!("  weight @{w} : i8[{k}, {c}]\n  weight @{w}.s : f32[{g}, {c}]\n"))
        .collect();
    let src = format!(
        "module @m {{\n{decls}\n  graph @main(%x: f32[1, {m}, {k}]) -> (f32[1, {m}, {out}]) {{\n    \
         %y = {node} : f32[1, {m}, {out}]\n    return %y\n  }}\n}}\n"
    );
    let mut module = parse_module(&src).unwrap();
    for (w, c) in weights {
        let q: Vec<i64> = (0..k * c).map(|_| (rng.unit() * 127.0) as i64).collect();
        module
            .weights
            .insert(w, Tensor::from_i64(vec![k, c], q).cast(DType::I8));
        let s: Vec<f32> = (0..g * c).map(|_| 1e-3 * (1.5 + rng.unit())).collect();
        module
            .weights
            .insert(format!("{w}.s"), Tensor::from_f32(vec![g, c], s));
    }
    module
}

/// Lowers and runs one product on the model and on the reference (the
/// module as stored: the reference reads the NPU's layout back); returns
/// the task count.
fn check(m: usize, k: usize, n: usize, group: usize, kind: &str, seed: u64) -> usize {
    let mut rng = Rng(seed);
    let mut module = module(m, k, n, group, kind, &mut rng);
    let lowered = NpuLowered::lower(&mut module).unwrap();
    let g = &module.graphs[0];
    let program = &lowered.programs["main"][0];
    program.check(g, &place(g)).unwrap();
    // Rows with an offset, so that the zero points are not 0.
    let x: Vec<f32> = (0..m * k)
        .map(|i| rng.unit() * 3.0 + (i % 7) as f32 * 0.1)
        .collect();
    let dev: Rc<RefCell<dyn NpuDevice>> = Rc::new(RefCell::new(ModelDevice::new(
        0x1000_0000,
        program_bytes(program),
    )));
    let mut session = NpuSession::new(dev);
    let mut loaded = load_product(&module, g, program, &lowered.weights, &mut session).unwrap();
    let mut got = vec![0f32; loaded.result_len()];
    loaded.call(&x, &mut got).unwrap();

    let node = &g.nodes[0];
    let mut operands = vec![Tensor::from_f32(vec![1, m, k], x)];
    for &v in &node.inputs[1..] {
        let slmcc_ir::ValueDef::Weight(w) = &g.value(v).def else {
            unreachable!("weights")
        };
        operands.push((*module.weights.tensor(w).unwrap().unwrap()).clone());
    }
    let refs: Vec<&Tensor> = operands.iter().collect();
    let want = node.op.eval(&refs, &EvalCtx::default()).unwrap()[0].to_f32_vec();
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{kind} M={m} K={k} N={n} G={group}: y[{i}] = {g}, the reference {w}"
        );
    }
    program.tasks.len()
}

#[test]
fn tiled_products_are_bit_exact_with_the_reference() {
    // Several K blocks (groups), several N tiles over the 3 cores, M tiles.
    assert!(check(5, 64, 96, 32, "qmatmul", 1) > 1);
    assert!(check(40, 1536, 256, 1536, "qmatmul", 2) >= 1);
    assert!(check(3, 8960, 64, 128, "qmatmul", 3) > 3);
    // More rows than one task's FEATURE_GRAINS holds.
    assert!(check(1100, 256, 32, 256, "qmatmul", 4) > 1);
}

#[test]
fn swiglu_products_with_two_weights_and_one_fused() {
    check(7, 128, 96, 128, "qswiglu", 5);
    check(7, 128, 96, 64, "fused", 6);
    check(1, 256, 64, 256, "qswiglu", 7);
}

/// The shapes of Qwen2-1.5B's projections (hidden 1536, 2 KV heads of 128,
/// MLP 8960), per output channel, at one and at seven tokens.
#[test]
fn qwen2_1p5b_projection_shapes() {
    for (k, n) in [(1536, 1536), (1536, 256), (8960, 1536)] {
        for m in [1, 7] {
            check(m, k, n, k, "qmatmul", (k * n + m) as u64);
        }
    }
    check(1, 1536, 8960, 1536, "qswiglu", 11);
}

/// Every product shape of Qwen2-1.5B, the LM head (N = 151936) included,
/// at 1, 64 and 512 tokens. Minutes in release:
/// `cargo test --release -p slmcc-runtime --test npu_product -- --ignored`.
#[test]
#[ignore]
fn qwen2_1p5b_every_shape_up_to_512_tokens() {
    for (k, n, kind) in [
        (1536, 1536, "qmatmul"),
        (1536, 256, "qmatmul"),
        (1536, 8960, "qswiglu"),
        (8960, 1536, "qmatmul"),
        (1536, 151936, "qmatmul"),
    ] {
        for m in [1, 64, 512] {
            let tasks = check(m, k, n, k, kind, (k * n + m) as u64);
            eprintln!("{kind} K={k} N={n} M={m}: {tasks} tasks, bit-exact");
        }
    }
}

/// Calls reuse the loaded buffers: the device's memory holds the program's
/// buffers and nothing grows per call; the weights are read in place.
#[test]
fn calls_reuse_the_loaded_buffers() {
    let (m, k, n, group) = (40, 512, 96, 128);
    let mut rng = Rng(7);
    let mut module = module(m, k, n, group, "qmatmul", &mut rng);
    let lowered = NpuLowered::lower(&mut module).unwrap();
    let g = &module.graphs[0];
    let program = &lowered.programs["main"][0];
    // Memory for the program's buffers only: the weights are mapped.
    let dev: Rc<RefCell<dyn NpuDevice>> = Rc::new(RefCell::new(ModelDevice::new(
        0x1000_0000,
        program_bytes(program),
    )));
    let mut session = NpuSession::new(dev);
    let mut loaded = load_product(&module, g, program, &lowered.weights, &mut session).unwrap();
    let node = &g.nodes[0];
    let tensor = |i: usize| {
        let slmcc_ir::ValueDef::Weight(w) = &g.value(node.inputs[i]).def else {
            unreachable!("weights")
        };
        (*module.weights.tensor(w).unwrap().unwrap()).clone()
    };
    let (q, s) = (tensor(1), tensor(2));
    for _ in 0..5 {
        let x: Vec<f32> = (0..m * k).map(|_| rng.unit() * 2.0 + 0.5).collect();
        let mut got = vec![0f32; m * n];
        loaded.call(&x, &mut got).unwrap();
        let xt = Tensor::from_f32(vec![1, m, k], x);
        let want = node.op.eval(&[&xt, &q, &s], &EvalCtx::default()).unwrap()[0].to_f32_vec();
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "a call differs from the reference");
    }
}

/// Products of two bucket graphs on one device (a board's) share their
/// weights' buffer: each weight is imported once, and both stay exact.
#[test]
fn buckets_on_one_device_share_their_weights() {
    let (k, n) = (128, 64);
    let graph = |m: usize| {
        format!(
            "  graph @main_{m}(%x: f32[1, {m}, {k}]) -> (f32[1, {m}, {n}]) {{\n    \
             %y = qmatmul %x, @w, @w.s {{bits = 8, group = {k}}} : f32[1, {m}, {n}]\n    \
             return %y\n  }}\n"
        )
    };
    let src = format!(
        "module @m {{\n  weight @w : i8[{k}, {n}]\n  weight @w.s : f32[1, {n}]\n\n{}\n{}}}\n",
        graph(1),
        graph(9)
    );
    let mut module = parse_module(&src).unwrap();
    let mut rng = Rng(11);
    let q: Vec<i64> = (0..k * n).map(|_| (rng.unit() * 127.0) as i64).collect();
    module
        .weights
        .insert("w", Tensor::from_i64(vec![k, n], q).cast(DType::I8));
    let s: Vec<f32> = (0..n).map(|_| 1e-3 * (1.5 + rng.unit())).collect();
    module
        .weights
        .insert("w.s", Tensor::from_f32(vec![1, n], s));
    let lowered = NpuLowered::lower(&mut module).unwrap();
    let programs: Vec<_> = module
        .graphs
        .iter()
        .map(|g| (g, &lowered.programs[&g.name][0]))
        .collect();
    let memory = programs.iter().map(|(_, p)| program_bytes(p)).sum();
    let counting = Rc::new(RefCell::new(CountingImports {
        inner: ModelDevice::new(0x1000_0000, memory),
        imports: 0,
    }));
    let mut session = NpuSession::new(counting.clone());
    let mut loaded: Vec<_> = programs
        .iter()
        .map(|(g, p)| load_product(&module, g, p, &lowered.weights, &mut session).unwrap())
        .collect();
    assert_eq!(session.imported(), 1);
    assert_eq!(counting.borrow().imports, 1, "one weight, imported once");
    let w = module.weights.tensor("w").unwrap().unwrap();
    let ws = module.weights.tensor("w.s").unwrap().unwrap();
    for ((g, _), l) in programs.iter().zip(&mut loaded) {
        let m = if g.name == "main_1" { 1 } else { 9 };
        let x: Vec<f32> = (0..m * k).map(|_| rng.unit() * 2.0 - 0.3).collect();
        let mut got = vec![0f32; m * n];
        l.call(&x, &mut got).unwrap();
        let xt = Tensor::from_f32(vec![1, m, k], x);
        let want = g.nodes[0]
            .op
            .eval(&[&xt, &w, &ws], &EvalCtx::default())
            .unwrap()[0]
            .to_f32_vec();
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "@{}: differs from the reference", g.name);
    }
}

/// The model device, counting its imports.
struct CountingImports {
    inner: ModelDevice,
    imports: usize,
}

impl NpuDevice for CountingImports {
    fn name(&self) -> &'static str {
        "counting"
    }
    fn alloc(&mut self, size: usize) -> Result<NpuBuffer, DeviceError> {
        self.inner.alloc(size)
    }
    fn write(&mut self, buf: &NpuBuffer, offset: usize, data: &[u8]) -> Result<(), DeviceError> {
        self.inner.write(buf, offset, data)
    }
    fn read(&mut self, buf: &NpuBuffer, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read(buf, offset, out)
    }
    fn submit(&mut self, tasks: &[NpuTask]) -> Result<(), DeviceError> {
        self.inner.submit(tasks)
    }
    fn import(&mut self, bytes: SharedBytes) -> Result<NpuBuffer, DeviceError> {
        self.imports += 1;
        self.inner.import(bytes)
    }
}
