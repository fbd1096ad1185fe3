//! One W8A8 product node (`qmatmul` or `qswiglu`) on an NPU device, from
//! its stored register program: the integer products as the program's
//! tasks on the NPU, and the rest of the op on the CPU, bit-exact with
//! the reference (`slmcc_ir`'s `QMatMul`, whose module doc gives the
//! semantics).
//!
//! Contract: [`LoadedProduct::load`] takes a program that has passed
//! [`ProductProgram::check`] and its weights' column sums. It imports the
//! weights (the functional model reads the package's mapping in place; a
//! driver's buffer gets a copy), allocates the feature, output and
//! command-list buffers once, and writes every task's command list once,
//! relocated to those buffers. Nothing is tiled, packed or emitted at
//! load: the program and the weights' layout were made at compile time.
//! [`LoadedProduct::call`] runs the node:
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

/// One operand's weights as the CPU's part reads them.
pub struct OperandData {
    /// The weights' bytes in the NPU's layout, for the device.
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
    dev: Rc<RefCell<dyn NpuDevice>>,
    features: NpuBuffer,
    outputs: NpuBuffer,
    /// Each core's tasks, as ranges of `tasks`.
    per_core: Vec<Range<usize>>,
    tasks: Vec<NpuTask>,
    /// Reused by every call: the packed features, the raw outputs.
    feature_bytes: Vec<u8>,
    output_bytes: Vec<u8>,
}

impl LoadedProduct {
    /// Loads `program` (checked) with its operands' data on `dev`.
    pub fn load(
        program: ProductProgram,
        operands: Vec<OperandData>,
        dev: Rc<RefCell<dyn NpuDevice>>,
    ) -> Result<LoadedProduct, DeviceError> {
        let (features, outputs, tasks) = {
            let mut d = dev.borrow_mut();
            let weights: Vec<NpuBuffer> = operands
                .iter()
                .map(|o| d.import(o.weights.clone()))
                .collect::<Result<_, _>>()?;
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
                MatmulTask::relocate(&mut words, base).ok_or(DeviceError::OutOfMemory(0))?;
                tasks.push(NpuTask {
                    regcmd: lists.addr + all.len() as u32,
                    words: words.len() as u32,
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
        Ok(LoadedProduct {
            feature_bytes: vec![0; program.features_bytes as usize],
            output_bytes: vec![0; program.outputs_bytes as usize],
            program,
            operands,
            dev,
            features,
            outputs,
            per_core,
            tasks,
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
        let p = &self.program;
        let (m, k, n) = (p.rows as usize, p.k as usize, p.n as usize);
        let group = p.group as usize;
        let groups = k / group;
        assert_eq!(x.len(), m * k, "activations");
        assert_eq!(y.len(), self.result_len(), "result");
        // 1. Per-row quantization, as the reference.
        let mut params = Vec::with_capacity(m);
        let mut xq = vec![0i8; m * k];
        for (row, q) in x.chunks_exact(k).zip(xq.chunks_exact_mut(k)) {
            let (s, z) = activation_params(row);
            params.push((s, z as i32));
            for (q, &v) in q.iter_mut().zip(row) {
                *q = quantize_activation(v, s, z) as i8;
            }
        }
        // 2. The feature cubes.
        for c in &p.features {
            let (rows, channels) = (c.rows as usize, c.channels as usize);
            let cube = &mut self.feature_bytes[c.offset as usize..][..rows * channels];
            for h in 0..rows {
                let src = &xq[(c.m0 as usize + h) * k + c.k0 as usize..][..channels];
                for (ch, &v) in src.iter().enumerate() {
                    cube[cube_index(ch, h, rows, C2_IN)] = v as u8;
                }
            }
        }
        // 3. Every core's tasks.
        {
            let mut d = self.dev.borrow_mut();
            d.write(&self.features, 0, &self.feature_bytes)?;
            for range in &self.per_core {
                if !range.is_empty() {
                    d.submit(&self.tasks[range.clone()])?;
                }
            }
            d.read(&self.outputs, 0, &mut self.output_bytes)?;
        }
        // 4. Per operand, group, row and column: the blocks' sums, then
        // the zero-point correction.
        let ops = p.weights.len();
        let mut acc = vec![0i64; ops * groups * m * n];
        for t in &p.tasks {
            let (rows, kernels) = (t.rows as usize, t.kernels as usize);
            let out = &self.output_bytes[t.output as usize..][..rows * kernels * 4];
            let g = t.k0 as usize / group;
            for r in 0..rows {
                let at = ((t.operand as usize * groups + g) * m + t.m0 as usize + r) * n;
                for j in 0..kernels {
                    let e = cube_index(j, r, rows, C2_OUT) * 4;
                    let v = i32::from_le_bytes(out[e..e + 4].try_into().expect("4 bytes"));
                    acc[at + t.n0 as usize + j] += i64::from(v);
                }
            }
        }
        // 5. The scales, groups in order, as the reference; then the
        // result (a `qswiglu`'s gate, by its up projection).
        let mut sums = vec![0f32; ops * m * n];
        for (o, data) in self.operands.iter().enumerate() {
            for (row, &(s, z)) in params.iter().enumerate() {
                let out = &mut sums[(o * m + row) * n..][..n];
                for g in 0..groups {
                    let a = &acc[((o * groups + g) * m + row) * n..][..n];
                    let sc = &data.scale[g * n..][..n];
                    let cs = &data.column_sums[g * n..][..n];
                    for (((o, &a), &sc), &cs) in out.iter_mut().zip(a).zip(sc).zip(cs) {
                        // The reference's Σ (xq - z)·q, within i32 as its sum is.
                        let exact = (a - i64::from(z) * i64::from(cs)) as i32;
                        *o += exact as f32 * (s * sc);
                    }
                }
            }
        }
        match (p.swiglu, ops) {
            (false, _) => y.copy_from_slice(&sums),
            (true, 1) => {
                let half = n / 2;
                for (out, row) in y.chunks_exact_mut(half).zip(sums.chunks_exact(n)) {
                    for (j, o) in out.iter_mut().enumerate() {
                        *o = QSwiGlu::gate(row[j], row[half + j]);
                    }
                }
            }
            (true, _) => {
                let (gate, up) = sums.split_at(m * n);
                for ((o, &g), &u) in y.iter_mut().zip(gate).zip(up) {
                    *o = QSwiGlu::gate(g, u);
                }
            }
        }
        Ok(())
    }
}
