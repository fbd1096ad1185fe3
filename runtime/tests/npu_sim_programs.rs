//! NPU simulator on whole programs: a double-buffered weight-stationary
//! matmul (weight tiles ping-pong between two CBUF buffers, the next load
//! overlapping the current matmul) checked against a reference, and random
//! programs, which must end in a result or an error, never a panic.

use proptest::prelude::*;
use slmcc_backends::npu::isa::{CoreProgram, DmaDims, Instr, OutType, Program, Queue, WeightType};
use slmcc_backends::npu::{decode, Target};
use slmcc_runtime::npu_sim::arith::{requant, sat8};
use slmcc_runtime::npu_sim::NpuSim;

const M: usize = 8;
const K: usize = 256;
const N: usize = 64;
const TN: usize = 16;
const TILES: usize = N / TN;

#[test]
fn double_buffered_matmul() {
    let mult = 1_518_500_250i32; // ≈ 0.7071 · 2^31
    let shift = 9i8;
    let zp = 5i8;
    let mut ddr = vec![0u8; 0x20000];
    let a: Vec<i8> = (0..M * K).map(|i| ((i * 37 + 11) % 251) as i8).collect();
    let w: Vec<i8> = (0..K * N).map(|i| ((i * 53 + 7) % 253) as i8).collect();
    const W_DDR: usize = 0x1000;
    const P_DDR: usize = 0x6000;
    const O_DDR: usize = 0x8000;
    for (i, v) in a.iter().enumerate() {
        ddr[i] = *v as u8;
    }
    for (i, v) in w.iter().enumerate() {
        ddr[W_DDR + i] = *v as u8;
    }
    for j in 0..N {
        let r = P_DDR + 16 * j;
        ddr[r..r + 4].copy_from_slice(&(j as i32 * 100 - 3000).to_le_bytes());
        ddr[r + 4..r + 8].copy_from_slice(&mult.to_le_bytes());
        ddr[r + 12] = shift as u8;
    }
    // CBUF: A, two weight buffers, params, accumulators, output tiles.
    let a_cb = 0u32;
    let w_cb = [0x1000u32, 0x2000];
    let p_cb = 0x3000u32;
    let acc_cb = 0x4000u32;
    let out_cb = |t: usize| 0x5000 + (t * M * TN) as u32;
    let (full, free, ready) = (|b: usize| b as u8, |b: usize| 2 + b as u8, 4u8);
    let load_w = |t: usize| Instr::DmaLoad {
        cbuf: w_cb[t % 2],
        ddr: (W_DDR + t * TN) as u32,
        dims: DmaDims::rows(TN as u32, K as u32, N as u32),
    };
    let mut dma = vec![
        Instr::DmaLoad {
            cbuf: a_cb,
            ddr: 0,
            dims: DmaDims::contiguous((M * K) as u32),
        },
        Instr::DmaLoad {
            cbuf: p_cb,
            ddr: P_DDR as u32,
            dims: DmaDims::contiguous((16 * N) as u32),
        },
    ];
    let mut compute = Vec::new();
    for t in 0..TILES {
        if t >= 2 {
            dma.push(Instr::Wait { sem: free(t % 2) });
        }
        dma.push(load_w(t));
        dma.push(Instr::Signal { sem: full(t % 2) });
        compute.extend([
            Instr::Wait { sem: full(t % 2) },
            Instr::MatMul {
                wtype: WeightType::I8,
                a: a_cb,
                w: w_cb[t % 2],
                acc: acc_cb,
                m: M as u32,
                k: K as u32,
                n: TN as u32,
                accumulate: false,
            },
            Instr::Signal { sem: free(t % 2) },
            Instr::Epilogue {
                out_type: OutType::I8,
                acc: acc_cb,
                params: p_cb + (16 * t * TN) as u32,
                out: out_cb(t),
                m: M as u32,
                n: TN as u32,
                out_zp: zp,
                lut: None,
                residual: None,
            },
            Instr::Signal { sem: ready },
        ]);
    }
    for t in 0..TILES {
        dma.push(Instr::Wait { sem: ready });
        let dims = DmaDims::rows(TN as u32, M as u32, N as u32);
        dma.push(Instr::DmaStore {
            ddr: (O_DDR + t * TN) as u32,
            cbuf: out_cb(t),
            dims,
        });
    }
    let prog = Program {
        cores: vec![CoreProgram { dma, compute }],
    };
    let mut sim = NpuSim::new(Target::rk3588(), ddr);
    let stats = sim.run(&prog).unwrap();

    for i in 0..M {
        for j in 0..N {
            let acc: i32 = (0..K)
                .map(|p| i32::from(a[i * K + p]) * i32::from(w[p * N + j]))
                .sum();
            let x = acc + (j as i32 * 100 - 3000);
            let expect = sat8(requant(x, mult, shift) + i32::from(zp));
            assert_eq!(sim.ddr[O_DDR + i * N + j] as i8, expect, "({i}, {j})");
        }
    }
    let core = stats.cores[0];
    assert_eq!(stats.macs, (M * K * N) as u64);
    assert_eq!(stats.ddr_bytes_read, (M * K + K * N + 16 * N) as u64);
    assert_eq!(stats.ddr_bytes_written, (M * N) as u64);
    // The queues overlap: the run is shorter than the two queues' work
    // back to back, and no shorter than either.
    assert!(
        stats.cycles < core.dma.busy + core.compute.busy,
        "{stats:?}"
    );
    assert!(
        stats.cycles >= core.dma.busy.max(core.compute.busy),
        "{stats:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_programs_never_panic(
        words in proptest::collection::vec((any::<[u8; 16]>(), 0usize..8, any::<bool>(), 0usize..4), 0..24),
    ) {
        let ops = [0x01u8, 0x02, 0x10, 0x11, 0x12, 0x13, 0x20, 0x21];
        let mut cores = vec![CoreProgram::default(); 2];
        for (mut word, op, second_core, shrink) in words {
            word[0] = ops[op];
            // Mostly small addresses and sizes, so that many instructions
            // stay in range and the data paths run.
            if shrink > 0 {
                for b in &mut word[1 + shrink..] {
                    *b &= 0x01;
                }
            }
            let Ok(mut i) = decode(&word) else { continue };
            if shrink > 0 {
                if let Instr::DmaLoad { ddr, dims, .. } | Instr::DmaStore { ddr, dims, .. } = &mut i {
                    *ddr &= 0xfff;
                    dims.run = 1 + dims.run % 256;
                    dims.count1 = 1 + dims.count1 % 4;
                    dims.count2 = 1 + dims.count2 % 4;
                    dims.stride1 %= 1024;
                    dims.stride2 %= 1024;
                }
            }
            let core = &mut cores[usize::from(second_core)];
            if i.runs_on(Queue::Dma) && (op % 2 == 0 || !i.runs_on(Queue::Compute)) {
                core.dma.push(i);
            } else {
                core.compute.push(i);
            }
        }
        let mut sim = NpuSim::new(Target::rk3588(), vec![0x5a; 4096]);
        let _ = sim.run(&Program { cores });
    }
}
