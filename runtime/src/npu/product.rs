//! One W8A8 product node (`qmatmul` or `qswiglu`) on an NPU device, from
//! its stored register program: the integer products as the program's
//! tasks on the NPU, and the rest of the op on the CPU, bit-exact with
//! the reference (`slmcc_ir`'s `QMatMul`, whose module doc gives the
//! semantics).
//!
//! Contract: [`LoadedProduct::load`] takes a program that has passed
//! [`ProductProgram::check`], its weights' scales and column sums, and
//! the device buffers its weights were imported into (by
//! [`super::load_product`]: once per device and weight). It allocates the
//! feature, output and command-list buffers and the CPU's working memory
//! once, and writes every task's command list once, relocated to those
//! buffers. Nothing is tiled, packed or emitted at load: the program and
//! the weights' layout were made at compile time. [`LoadedProduct::call`]
//! allocates nothing and runs the node:
//!
//! 1. It quantizes each row of `x` as the reference does (`s`, `z`, `xq`).
//! 2. It packs the rows into the program's feature cubes.
//! 3. It submits each core's tasks. Each task gives `Σ xq·q` over one K
//!    block of one operand's columns.
//! 4. It adds up each group's blocks and subtracts `z · Σ q` (the
//!    column sums stored with the weights).
//! 5. It applies the scales in the reference's order and, for a
//!    `qswiglu`, `(g · sigmoid(g)) · u`.
//!
//! Steps 3 and 4 are exact in integers, so the result equals the
//! reference's bit for bit. The DPU's stages could take part of steps 4
//! and 5 (a per-channel bias and scale); no public run shows their
//! programming, so they stay on the CPU (`docs/NPU.md`).

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use slmcc_backends::npu::lower::{NpuWeight, ProductProgram};
use slmcc_backends::npu::regcmd::layout::cube_index;
use slmcc_backends::npu::regcmd::{decode_buffer, encode_buffer, MatmulTask, TaskBuffer};
use slmcc_ir::ops::qmatmul::{activation_params, quantize_activation};
use slmcc_ir::ops::qswiglu::QSwiGlu;

use crate::npu_device::{DeviceError, NpuBuffer, NpuDevice, NpuTask, SharedBytes};

/// Channels per atom of an int8 feature cube and of an int32 output cube.
const C2_IN: usize = 16;
const C2_OUT: usize = 4;

/// One operand's weights as the node's parts read them.
pub struct OperandData {
    /// The weights' bytes in the NPU's layout, for the device to import.
    pub weights: SharedBytes,
    /// `[K / group][N]` scales and column sums.
    pub scale: Vec<f32>,
    pub column_sums: Vec<i32>,
}

impl OperandData {
    /// Checks the operand's parts against `program`.
    pub fn check(&self, program: &ProductProgram, stored: &NpuWeight) -> Result<(), String> {
        let groups = (program.k / program.group) as usize;
        let cells = groups * program.n as usize;
        let fits = self.weights.bytes().len() as u64 == program.weight_bytes()
            && self.scale.len() == cells
            && self.column_sums.len() == cells
            && (stored.k_block, stored.k, stored.n, stored.group)
                == (program.k_block, program.k, program.n, program.group);
        match fits {
            true => Ok(()),
            false => Err(format!(
                "weight @{} does not match its NPU program (K {} N {} group {}, K block {})",
                stored.name, program.k, program.n, program.group, program.k_block
            )),
        }
    }
}

/// A product node loaded on a device.
pub struct LoadedProduct {
    program: ProductProgram,
    operands: Vec<OperandData>,
    device: OnDevice,
    /// The tasks of each quantization group, as indices into the
    /// program's tasks.
    by_group: Vec<Vec<usize>>,
    /// Reused by every call, so that a call allocates nothing.
    scratch: Scratch,
}

/// A program's part on the device: its buffers and relocated tasks.
struct OnDevice {
    dev: Rc<RefCell<dyn NpuDevice>>,
    features: NpuBuffer,
    outputs: NpuBuffer,
    /// Each core's tasks, as ranges of `tasks`.
    per_core: Vec<Range<usize>>,
    tasks: Vec<NpuTask>,
}

impl OnDevice {
    /// Allocates `program`'s buffers on `dev` and writes its command
    /// lists, relocated to them and to the operands' `weights`.
    fn load(
        program: &ProductProgram,
        weights: &[NpuBuffer],
        dev: Rc<RefCell<dyn NpuDevice>>,
    ) -> Result<OnDevice, DeviceError> {
        let (features, outputs, tasks) = {
            let mut d = dev.borrow_mut();
            let features = d.alloc(program.features_bytes as usize)?;
            let outputs = d.alloc(program.outputs_bytes as usize)?;
            let list_bytes: usize = program.tasks.iter().map(|t| t.regcmd.len()).sum();
            let lists = d.alloc(list_bytes)?;
            let mut all = Vec::with_capacity(list_bytes);
            let mut tasks = Vec::with_capacity(program.tasks.len());
            for t in &program.tasks {
                let mut words = decode_buffer(&t.regcmd).map_err(DeviceError::Program)?;
                let base = |b: TaskBuffer| match b {
                    TaskBuffer::Features => features.addr,
                    TaskBuffer::Weights => weights[t.operand as usize].addr,
                    TaskBuffer::Outputs => outputs.addr,
                };
                MatmulTask::relocate(&mut words, base).ok_or(DeviceError::AddressOverflow)?;
                let regcmd = u32::try_from(all.len())
                    .ok()
                    .and_then(|at| lists.addr.checked_add(at))
                    .ok_or(DeviceError::AddressOverflow)?;
                let words_len =
                    u32::try_from(words.len()).map_err(|_| DeviceError::AddressOverflow)?;
                tasks.push(NpuTask {
                    regcmd,
                    words: words_len,
                });
                all.extend(encode_buffer(&words));
            }
            d.write(&lists, 0, &all)?;
            (features, outputs, tasks)
        };
        let mut per_core = Vec::new();
        let mut start = 0;
        for core in 0..program.cores {
            let len = program.tasks[start..]
                .iter()
                .take_while(|t| t.core == core)
                .count();
            per_core.push(start..start + len);
            start += len;
        }
        Ok(OnDevice {
            dev,
            features,
            outputs,
            per_core,
            tasks,
        })
    }

    /// Writes the packed `features`, runs every core's tasks and reads
    /// the raw `outputs` back.
    fn run(&self, features: &[u8], outputs: &mut [u8]) -> Result<(), DeviceError> {
        let mut d = self.dev.borrow_mut();
        d.write(&self.features, 0, features)?;
        for range in &self.per_core {
            if !range.is_empty() {
                d.submit(&self.tasks[range.clone()])?;
            }
        }
        d.read(&self.outputs, 0, outputs)
    }
}

/// A call's working memory, sized at load.
struct Scratch {
    /// The quantized rows and each row's `(s, z)`.
    xq: Vec<i8>,
    params: Vec<(f32, i32)>,
    /// The packed features and the raw outputs.
    feature_bytes: Vec<u8>,
    output_bytes: Vec<u8>,
    /// One group's `Σ (xq - z)·q` per operand, row and column (`i32`
    /// wrapping, as the reference's sum), and the scaled sums so far.
    acc: Vec<i32>,
    sums: Vec<f32>,
}

impl LoadedProduct {
    /// Loads `program` (checked) with its operands' data on `dev`, whose
    /// weights `weights` (one buffer per operand) already hold.
    pub fn load(
        program: ProductProgram,
        operands: Vec<OperandData>,
        weights: &[NpuBuffer],
        dev: Rc<RefCell<dyn NpuDevice>>,
    ) -> Result<LoadedProduct, DeviceError> {
        let device = OnDevice::load(&program, weights, dev)?;
        let (m, k, n) = (
            program.rows as usize,
            program.k as usize,
            program.n as usize,
        );
        let cells = program.weights.len() * m * n;
        let mut by_group = vec![Vec::new(); k / program.group as usize];
        for (i, t) in program.tasks.iter().enumerate() {
            by_group[(t.k0 / program.group) as usize].push(i);
        }
        Ok(LoadedProduct {
            scratch: Scratch {
                xq: vec![0; m * k],
                params: Vec::with_capacity(m),
                feature_bytes: vec![0; program.features_bytes as usize],
                output_bytes: vec![0; program.outputs_bytes as usize],
                acc: vec![0; cells],
                sums: vec![0.0; cells],
            },
            by_group,
            program,
            operands,
            device,
        })
    }

    pub fn program(&self) -> &ProductProgram {
        &self.program
    }

    /// Elements of the result: `rows × N`, or `rows × N/2` for a fused
    /// gate/up `qswiglu`.
    pub fn result_len(&self) -> usize {
        let p = &self.program;
        let n = match (p.swiglu, p.weights.len()) {
            (true, 1) => p.n / 2,
            _ => p.n,
        };
        p.rows as usize * n as usize
    }

    /// `y` of the node for row-major `x: [rows, K]` (see the module doc).
    pub fn call(&mut self, x: &[f32], y: &mut [f32]) -> Result<(), DeviceError> {
        assert_eq!(y.len(), self.result_len(), "result");
        let (p, sc) = (&self.program, &mut self.scratch);
        let (m, k, n) = (p.rows as usize, p.k as usize, p.n as usize);
        assert_eq!(x.len(), m * k, "activations");
        // 1. Per-row quantization, as the reference.
        sc.params.clear();
        let round_down = slmcc_backends::mutant::active("npu-rounding");
        for (row, q) in x.chunks_exact(k).zip(sc.xq.chunks_exact_mut(k)) {
            let (s, z) = activation_params(row);
            sc.params.push((s, z as i32));
            for (q, &v) in q.iter_mut().zip(row) {
                *q = match round_down {
                    true => ((v / s).floor() + z).clamp(-128.0, 127.0) as i8,
                    false => quantize_activation(v, s, z) as i8,
                };
            }
        }
        // 2. The feature cubes.
        for c in &p.features {
            let (rows, channels) = (c.rows as usize, c.channels as usize);
            let cube = &mut sc.feature_bytes[c.offset as usize..][..rows * channels];
            for h in 0..rows {
                let src = &sc.xq[(c.m0 as usize + h) * k + c.k0 as usize..][..channels];
                for (ch, &v) in src.iter().enumerate() {
                    cube[cube_index(ch, h, rows, C2_IN)] = v as u8;
                }
            }
        }
        // 3. Every core's tasks.
        self.device.run(&sc.feature_bytes, &mut sc.output_bytes)?;
        // 4 and 5, group by group in order, as the reference: the blocks'
        // sums and the zero-point correction, exact modulo 2^32 as the
        // reference's i32 sum; then the scales.
        sc.sums.fill(0.0);
        for (g, group_tasks) in self.by_group.iter().enumerate() {
            sc.acc.fill(0);
            for &i in group_tasks {
                let t = &p.tasks[i];
                let (rows, kernels) = (t.rows as usize, t.kernels as usize);
                let out = &sc.output_bytes[t.output as usize..][..rows * kernels * 4];
                for r in 0..rows {
                    let at = (t.operand as usize * m + t.m0 as usize + r) * n + t.n0 as usize;
                    let acc = &mut sc.acc[at..][..kernels];
                    for (j, a) in acc.iter_mut().enumerate() {
                        let e = cube_index(j, r, rows, C2_OUT) * 4;
                        let v = i32::from_le_bytes(out[e..e + 4].try_into().expect("4 bytes"));
                        *a = a.wrapping_add(v);
                    }
                }
            }
            for (o, data) in self.operands.iter().enumerate() {
                let scale = &data.scale[g * n..][..n];
                let column_sums = &data.column_sums[g * n..][..n];
                for (row, &(s, z)) in sc.params.iter().enumerate() {
                    let cell = (o * m + row) * n;
                    let acc = &sc.acc[cell..][..n];
                    let out = &mut sc.sums[cell..][..n];
                    for (((o, &a), &w), &cs) in out.iter_mut().zip(acc).zip(scale).zip(column_sums)
                    {
                        let exact = a.wrapping_sub(z.wrapping_mul(cs));
                        *o += exact as f32 * (s * w);
                    }
                }
            }
        }
        // The result (a `qswiglu`'s gate, by its up projection).
        let ops = p.weights.len();
        match (p.swiglu, ops) {
            (false, _) => y.copy_from_slice(&sc.sums),
            (true, 1) => {
                let half = n / 2;
                for (out, row) in y.chunks_exact_mut(half).zip(sc.sums.chunks_exact(n)) {
                    for (j, o) in out.iter_mut().enumerate() {
                        *o = QSwiGlu::gate(row[j], row[half + j]);
                    }
                }
            }
            (true, _) => {
                let (gate, up) = sc.sums.split_at(m * n);
                for ((o, &g), &u) in y.iter_mut().zip(gate).zip(up) {
                    *o = QSwiGlu::gate(g, u);
                }
            }
        }
        Ok(())
    }
}
