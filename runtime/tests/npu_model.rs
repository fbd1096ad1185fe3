//! The functional model of the RK3588 register interface: single-task
//! matmuls packed in the hardware layouts, run from their command buffers,
//! against plain matmuls; and the programs it refuses.

mod common;

use half::f16;
use slmcc_backends::npu::regcmd::layout::{pack_cube, pack_weights, unpack_cube};
use slmcc_backends::npu::regcmd::{
    db, encode_buffer, Block, MatmulPrecision, MatmulTask, TaskError, Word,
};
use slmcc_runtime::npu_device::{DeviceError, ModelDevice, NpuDevice, NpuTask, SharedBytes};
use slmcc_runtime::npu_model::{execute, Ddr, ModelError};

use common::Rng;

const BASE: u32 = 0x1000_0000;
const INPUT: u32 = BASE;
const WEIGHTS: u32 = BASE + 0x10_0000;
const OUTPUT: u32 = BASE + 0x20_0000;

fn task(precision: MatmulPrecision, m: u32, k: u32, n: u32) -> MatmulTask {
    MatmulTask {
        precision,
        m,
        k,
        n,
        input: INPUT,
        weights: WEIGHTS,
        output: OUTPUT,
    }
}

/// Runs an int8 matmul on the model and compares it with the plain one.
fn check_int8(m: usize, k: usize, n: usize, rng: &mut Rng) {
    let a: Vec<i8> = (0..m * k)
        .map(|_| rng.small(128).clamp(-128, 127) as i8)
        .collect();
    let b: Vec<i8> = (0..k * n)
        .map(|_| rng.small(128).clamp(-128, 127) as i8)
        .collect();
    let p = MatmulPrecision::Int8;
    let t = task(p, m as u32, k as u32, n as u32);
    let mut ddr = Ddr::new(BASE, 0x40_0000);
    let packed_a = pack_cube(&a, m, k, p.input_atom_channels());
    ddr.write(
        INPUT,
        &packed_a.iter().map(|&x| x as u8).collect::<Vec<_>>(),
    )
    .unwrap();
    let packed_b = pack_weights(&b, k, n, p.kernel_block());
    ddr.write(
        WEIGHTS,
        &packed_b.iter().map(|&x| x as u8).collect::<Vec<_>>(),
    )
    .unwrap();
    let report = execute(&mut ddr, &encode_buffer(&t.regcmd().unwrap())).unwrap();
    assert_eq!(report.task, t);
    assert_eq!(report.macs, (m * k * n) as u64);
    let c2 = p.output_atom_channels();
    let raw = ddr.read(OUTPUT, m * n * 4).unwrap();
    let cube: Vec<i32> = raw
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let c = unpack_cube(&cube, m, n, c2);
    assert_int8_matmul(&c, a.as_slice(), b.as_slice(), (m, k, n));
}

/// `c` is the plain int8 matmul of row-major `a: [M, K]` by `b: [K, N]`.
fn assert_int8_matmul(c: &[i32], a: &[i8], b: &[i8], (m, k, n): (usize, usize, usize)) {
    for i in 0..m {
        for j in 0..n {
            let want: i32 = (0..k)
                .map(|kk| i32::from(a[i * k + kk]) * i32::from(b[kk * n + j]))
                .sum();
            assert_eq!(c[i * n + j], want, "int8 M={m} K={k} N={n}: C[{i}][{j}]");
        }
    }
}

#[test]
fn int8_matmuls_are_exact() {
    let mut rng = Rng(0x5eed);
    for (m, k, n) in [
        (1, 32, 16),
        (3, 64, 32),
        (4, 32, 16),
        (17, 96, 48),
        (32, 1024, 256),
        (8, 544, 176),
        (64, 64, 64),
    ] {
        check_int8(m, k, n, &mut rng);
    }
}

/// fp16 inputs with small integer values: every product and sum is exact
/// in f32, so the result does not depend on the summation order.
#[test]
fn fp16_matmuls_with_exact_values() {
    let mut rng = Rng(0xf16);
    for (p, m, k, n) in [
        (MatmulPrecision::Fp16, 4, 32, 16),
        (MatmulPrecision::Fp16, 17, 256, 48),
        (MatmulPrecision::Fp16ToFp16, 8, 64, 32),
        (MatmulPrecision::Fp16ToFp16, 1, 512, 128),
    ] {
        let a: Vec<f16> = (0..m * k)
            .map(|_| f16::from_f32(rng.small(4) as f32))
            .collect();
        let b: Vec<f16> = (0..k * n)
            .map(|_| f16::from_f32(rng.small(4) as f32))
            .collect();
        let t = task(p, m as u32, k as u32, n as u32);
        let mut ddr = Ddr::new(BASE, 0x40_0000);
        let bytes = |v: Vec<f16>| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        ddr.write(INPUT, &bytes(pack_cube(&a, m, k, p.input_atom_channels())))
            .unwrap();
        ddr.write(WEIGHTS, &bytes(pack_weights(&b, k, n, p.kernel_block())))
            .unwrap();
        execute(&mut ddr, &encode_buffer(&t.regcmd().unwrap())).unwrap();
        let out_bytes = p.output_bytes() as usize;
        let raw = ddr.read(OUTPUT, m * n * out_bytes).unwrap();
        let cube: Vec<f32> = raw
            .chunks_exact(out_bytes)
            .map(|c| match p {
                MatmulPrecision::Fp16 => f32::from_le_bytes(c.try_into().unwrap()),
                _ => f16::from_le_bytes(c.try_into().unwrap()).to_f32(),
            })
            .collect();
        let c = unpack_cube(&cube, m, n, p.output_atom_channels());
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k)
                    .map(|kk| a[i * k + kk].to_f32() * b[kk * n + j].to_f32())
                    .sum();
                let want = if p == MatmulPrecision::Fp16ToFp16 {
                    f16::from_f32(want).to_f32()
                } else {
                    want
                };
                assert_eq!(c[i * n + j], want, "{p:?} M={m} K={k} N={n}: C[{i}][{j}]");
            }
        }
    }
}

fn with_write(words: &mut [Word], block: Block, name: &str, value: u32) {
    let reg = db::lookup(block, name).unwrap();
    let w = words
        .iter_mut()
        .find(|w| matches!(w, Word::Write { reg: r, .. } if r.offset == reg.offset))
        .unwrap();
    *w = Word::write(reg, value).unwrap();
}

#[test]
fn programs_the_model_does_not_know_are_refused_by_register() {
    let t = task(MatmulPrecision::Int8, 4, 32, 16);
    let words = t.regcmd().unwrap();
    let mut ddr = Ddr::new(BASE, 0x40_0000);

    // A DPU stage switched on: bias add instead of the bypass.
    let mut bias = words.clone();
    with_write(&mut bias, Block::Dpu, "BS_CFG", 0x0002_0150);
    let err = execute(&mut ddr, &encode_buffer(&bias)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "not modelled: DPU_BS_CFG = 0x20150 (a matmul task of this shape writes 0x53)"
    );

    // A register the matmul does not write.
    let mut extra = words.clone();
    let rdma = db::lookup(Block::DpuRdma, "S_POINTER").unwrap();
    extra.insert(0, Word::write(rdma, 0xe).unwrap());
    let err = execute(&mut ddr, &encode_buffer(&extra)).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("not modelled: DPU_RDMA_S_POINTER = 0xe"),
        "{err}"
    );

    // No enable at the end.
    let err = execute(&mut ddr, &encode_buffer(&words[..106])).unwrap_err();
    assert!(
        matches!(err, ModelError::Task(TaskError::NoEnable)),
        "{err}"
    );

    // An undecodable word: the decoder's message, with its index.
    let mut bytes = encode_buffer(&words);
    bytes[8 * 3 + 6..8 * 3 + 8].copy_from_slice(&0x0401u16.to_le_bytes());
    let err = execute(&mut ddr, &bytes).unwrap_err();
    assert!(err.to_string().starts_with("word 3 "), "{err}");

    // Output outside the image: refused, nothing written.
    let mut far = t;
    far.output = BASE + 0x40_0000 - 16;
    let before = ddr.read(BASE, ddr.size()).unwrap().to_vec();
    let err = execute(&mut ddr, &encode_buffer(&far.regcmd().unwrap())).unwrap_err();
    assert!(matches!(err, ModelError::OutOfRange { .. }), "{err}");
    assert_eq!(ddr.read(BASE, ddr.size()).unwrap(), &before[..]);
}

/// An int8 matmul through the device trait: buffers, writes, one submit,
/// the read back; here on the functional model. With `import`, the
/// weights are an imported (read-only) buffer.
fn matmul_on(
    dev: &mut dyn NpuDevice,
    (a, b): (&[i8], &[i8]),
    (m, k, n): (usize, usize, usize),
    import: bool,
) -> Vec<i32> {
    let p = MatmulPrecision::Int8;
    let to_bytes = |v: Vec<i8>| -> Vec<u8> { v.iter().map(|&x| x as u8).collect() };
    let a_bytes = to_bytes(pack_cube(a, m, k, p.input_atom_channels()));
    let b_bytes = to_bytes(pack_weights(b, k, n, p.kernel_block()));
    let abuf = dev.alloc(a_bytes.len()).unwrap();
    let bbuf = match import {
        true => dev.import(SharedBytes::Owned(b_bytes.into())).unwrap(),
        false => {
            let buf = dev.alloc(b_bytes.len()).unwrap();
            dev.write(&buf, 0, &b_bytes).unwrap();
            buf
        }
    };
    if import {
        assert!(matches!(
            dev.write(&bbuf, 0, &[1]),
            Err(DeviceError::ReadOnly(_))
        ));
    }
    let cbuf = dev.alloc(m * n * 4).unwrap();
    dev.write(&abuf, 0, &a_bytes).unwrap();
    let t = MatmulTask {
        precision: p,
        m: m as u32,
        k: k as u32,
        n: n as u32,
        input: abuf.addr,
        weights: bbuf.addr,
        output: cbuf.addr,
    };
    let list = encode_buffer(&t.regcmd().unwrap());
    let lbuf = dev.alloc(list.len()).unwrap();
    dev.write(&lbuf, 0, &list).unwrap();
    let words = (list.len() / 8) as u32;
    dev.submit(&[NpuTask {
        regcmd: lbuf.addr,
        words,
    }])
    .unwrap();
    let mut out = vec![0u8; m * n * 4];
    dev.read(&cbuf, 0, &mut out).unwrap();
    let cube: Vec<i32> = out
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    unpack_cube(&cube, m, n, p.output_atom_channels())
}

#[test]
fn the_device_trait_submits_to_the_model() {
    let mut rng = Rng(0xde71ce);
    let (m, k, n) = (8, 128, 64);
    let a: Vec<i8> = (0..m * k).map(|_| rng.small(127) as i8).collect();
    let b: Vec<i8> = (0..k * n).map(|_| rng.small(127) as i8).collect();
    let mut dev = ModelDevice::new(0x2000_0000, 1 << 20);
    assert_eq!(dev.name(), "model");
    let c = matmul_on(&mut dev, (&a, &b), (m, k, n), false);
    assert_int8_matmul(&c, &a, &b, (m, k, n));

    // Out of a buffer, an unknown buffer, a list outside NPU memory, too
    // much memory: each refused with its reason.
    let buf = dev.alloc(64).unwrap();
    let err = dev.write(&buf, 60, &[0; 8]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "write [0x3c, +0x8) is outside the buffer of 0x40 bytes"
    );
    let mut forged = buf;
    forged.handle = 99;
    assert!(matches!(
        dev.read(&forged, 0, &mut [0; 4]),
        Err(DeviceError::UnknownBuffer(99))
    ));
    let err = dev
        .submit(&[NpuTask {
            regcmd: 0x1000_0000,
            words: 108,
        }])
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("task 0: NPU memory [0x10000000"),
        "{err}"
    );
    assert!(matches!(
        dev.alloc(1 << 21),
        Err(DeviceError::OutOfMemory(_))
    ));
}

/// An imported buffer is read in place by the tasks and refuses writes;
/// the model's own memory does not hold it.
#[test]
fn imported_weights_are_read_in_place() {
    let mut rng = Rng(0x1a7);
    let (m, k, n) = (4, 64, 32);
    let a: Vec<i8> = (0..m * k).map(|_| rng.small(127) as i8).collect();
    let b: Vec<i8> = (0..k * n).map(|_| rng.small(127) as i8).collect();
    // Room for the features, the output and the list (a page each), not
    // the weights.
    let mut dev = ModelDevice::new(0x2000_0000, 3 * 4096);
    let c = matmul_on(&mut dev, (&a, &b), (m, k, n), true);
    assert_int8_matmul(&c, &a, &b, (m, k, n));
}
