//! W8A8 `qmatmul` tiled into register-interface tasks on the functional
//! model, against the IR reference (`QMatMul::eval`), bit for bit.

mod common;

use slmcc_ir::ops::qmatmul::QMatMul;
use slmcc_ir::{DType, EvalCtx, OpDef, Tensor};
use slmcc_runtime::npu_device::{ModelDevice, PAGE};
use slmcc_runtime::npu_qmatmul::NpuQMatMul;

use common::Rng;

/// Runs one shape on the model and on the reference; returns the task count.
fn check(m: usize, k: usize, n: usize, group: usize, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    // Rows with an offset, so that the zero points are not 0.
    let x: Vec<f32> = (0..m * k)
        .map(|i| rng.unit() * 3.0 + (i % 7) as f32 * 0.1)
        .collect();
    let q: Vec<i8> = (0..k * n).map(|_| (rng.unit() * 127.0) as i8).collect();
    let scale: Vec<f32> = (0..k / group * n)
        .map(|_| 1e-3 * (1.5 + rng.unit()))
        .collect();

    let npu = NpuQMatMul::new(&q, &scale, (m, k, n), group, 3).unwrap();
    let mut dev = ModelDevice::new(0x1000_0000, npu.device_bytes(PAGE));
    let weights = npu.load(&mut dev).unwrap();
    let got = npu.run(&mut dev, &weights, &x, m).unwrap();

    let op = QMatMul::new(8, group as i64).unwrap();
    let qt =
        Tensor::from_i64(vec![k, n], q.iter().map(|&v| i64::from(v)).collect()).cast(DType::I8);
    let xt = Tensor::from_f32(vec![m, k], x);
    let st = Tensor::from_f32(vec![k / group, n], scale);
    let want = op.eval(&[&xt, &qt, &st], &EvalCtx::default()).unwrap();
    let want = want[0].to_f32_vec();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "M={m} K={k} N={n} G={group}: y[{}][{}] = {g}, the reference {w}",
            i / n,
            i % n
        );
    }
    npu.plan().task_count()
}

#[test]
fn tiled_qmatmuls_are_bit_exact_with_the_reference() {
    // Several K blocks (groups), several N tiles over the 3 cores, M tiles.
    assert!(check(5, 64, 48, 32, 1) > 1);
    assert!(check(40, 1536, 256, 1536, 2) >= 1);
    assert!(check(3, 8960, 64, 128, 3) > 3);
    // More rows than one task's FEATURE_GRAINS holds.
    assert!(check(1100, 256, 32, 256, 4) > 1);
}

/// Groups that are not whole 32-channel blocks and N that is not a whole
/// number of 16 kernels: padded with zeros for the NPU, the same result.
#[test]
fn groups_and_columns_the_npu_does_not_align_are_padded() {
    check(11, 176, 176, 176, 5); // the test models' MLP down projection
    check(3, 64, 40, 16, 6); // groups of 16, N = 40
    check(9, 96, 8, 48, 7);
}

/// The shapes of Qwen2-1.5B's projections (hidden 1536, 2 KV heads of 128,
/// MLP 8960), per output channel, at one and at seven tokens.
#[test]
fn qwen2_1p5b_projection_shapes() {
    for (k, n) in [(1536, 1536), (1536, 256), (1536, 8960), (8960, 1536)] {
        for m in [1, 7] {
            check(m, k, n, k, (k * n + m) as u64);
        }
    }
}

/// Every `qmatmul` shape of Qwen2-1.5B, the LM head (N = 151936) included,
/// at 1, 64 and 512 tokens. Minutes in release:
/// `cargo test --release -p slmcc-runtime --test npu_qmatmul -- --ignored`.
#[test]
#[ignore]
fn qwen2_1p5b_every_shape_up_to_512_tokens() {
    for (k, n) in [
        (1536, 1536),
        (1536, 256),
        (1536, 8960),
        (8960, 1536),
        (1536, 151936),
    ] {
        for m in [1, 64, 512] {
            let tasks = check(m, k, n, k, (k * n + m) as u64);
            eprintln!("K={k} N={n} M={m}: {tasks} tasks, bit-exact");
        }
    }
}

/// One load serves runs of any number of rows up to the planned M, on the
/// same buffers: the device's memory does not grow per run.
#[test]
fn runs_reuse_the_loaded_buffers() {
    let (m, k, n, group) = (40, 512, 96, 128);
    let mut rng = Rng(7);
    let q: Vec<i8> = (0..k * n).map(|_| (rng.unit() * 127.0) as i8).collect();
    let scale: Vec<f32> = (0..k / group * n)
        .map(|_| 1e-3 * (1.5 + rng.unit()))
        .collect();
    let npu = NpuQMatMul::new(&q, &scale, (m, k, n), group, 3).unwrap();
    // Room for the load (about 0.2 MiB) but not for 15 runs' buffers.
    let mut dev = ModelDevice::new(0x1000_0000, 1 << 20);
    let loaded = npu.load(&mut dev).unwrap();
    let op = QMatMul::new(8, group as i64).unwrap();
    let qt =
        Tensor::from_i64(vec![k, n], q.iter().map(|&v| i64::from(v)).collect()).cast(DType::I8);
    let st = Tensor::from_f32(vec![k / group, n], scale.clone());
    for rows in [40, 3, 17, 40, 1].repeat(3) {
        let x: Vec<f32> = (0..rows * k).map(|_| rng.unit() * 2.0 + 0.5).collect();
        let got = npu.run(&mut dev, &loaded, &x, rows).unwrap();
        let xt = Tensor::from_f32(vec![rows, k], x);
        let want = op.eval(&[&xt, &qt, &st], &EvalCtx::default()).unwrap()[0].to_f32_vec();
        let same = got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{rows} rows differ from the reference");
    }
}
