//! A functional model of the RK3588 NPU's register interface
//! (`docs/NPU.md`): executes a task's register command list over an image
//! of NPU memory.
//!
//! Contract: [`execute`] decodes every word (refusing what the register
//! database refuses), collects the register state the list leaves, and
//! runs the task only when that state is one the model knows. So far that
//! is exactly the single-task matmul of
//! [`slmcc_backends::npu::regcmd::matmul`]: every register must hold the
//! value that programming gives for the task's shape and addresses, and a
//! register that differs (or one the matmul does not write) is refused by
//! name. The model reads A and B from the image in the hardware's layouts
//! ([`slmcc_backends::npu::regcmd::layout`]) and writes C. int8 is exact
//! (int32 sums). fp16 products are exact in f32 and summed in f32 in
//! channel order; the hardware's order is not public, so fp16 results are
//! the model's, not the board's. fp16 output rounds to nearest even. An
//! access outside the image is an error, and a failed task writes nothing.
//! Read-only regions can be mapped into the image from memory the caller
//! keeps (a package's weights, used in place). The model is untimed: the
//! estimates come from the tile model (`TilePlan::estimate`).

use half::f16;

use crate::npu_device::SharedBytes;
use slmcc_backends::npu::regcmd::layout::{cube_index, cube_len, unpack_cube, weight_index};
use slmcc_backends::npu::regcmd::{
    self, BufferError, MatmulPrecision, MatmulTask, TaskError, Word,
};

/// NPU memory: `size` bytes at NPU addresses `base..base + size`, and
/// read-only regions mapped at other addresses ([`Ddr::map`]).
#[derive(Clone, Debug)]
pub struct Ddr {
    base: u32,
    bytes: Vec<u8>,
    /// (NPU address, bytes), in address order, not overlapping.
    mapped: Vec<(u32, SharedBytes)>,
}

/// Why a task did not run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Decode(#[from] BufferError),
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error("NPU memory [{addr:#x}, +{len:#x}) is outside the image [{base:#x}, +{size:#x})")]
    OutOfRange {
        addr: u64,
        len: u64,
        base: u32,
        size: u64,
    },
}

impl Ddr {
    pub fn new(base: u32, size: usize) -> Ddr {
        Ddr {
            base,
            bytes: vec![0; size],
            mapped: Vec::new(),
        }
    }

    /// Maps `bytes` read-only at NPU address `addr`: tasks read them in
    /// place. Fails when the range passes 32 bits or overlaps the image
    /// or another mapped region.
    pub fn map(&mut self, addr: u32, bytes: SharedBytes) -> Result<(), ModelError> {
        let len = bytes.bytes().len() as u64;
        let end = u64::from(addr) + len;
        let overlaps = |start: u64, stop: u64| u64::from(addr) < stop && start < end;
        let image = (
            u64::from(self.base),
            u64::from(self.base) + self.bytes.len() as u64,
        );
        if end > 1 << 32
            || overlaps(image.0, image.1)
            || self
                .mapped
                .iter()
                .any(|(a, b)| overlaps(u64::from(*a), u64::from(*a) + b.bytes().len() as u64))
        {
            return Err(ModelError::OutOfRange {
                addr: u64::from(addr),
                len,
                base: self.base,
                size: self.bytes.len() as u64,
            });
        }
        let at = self.mapped.partition_point(|(a, _)| *a < addr);
        self.mapped.insert(at, (addr, bytes));
        Ok(())
    }

    pub fn base(&self) -> u32 {
        self.base
    }

    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    fn range(&self, addr: u32, len: usize) -> Result<std::ops::Range<usize>, ModelError> {
        let err = || ModelError::OutOfRange {
            addr: u64::from(addr),
            len: len as u64,
            base: self.base,
            size: self.bytes.len() as u64,
        };
        let start = addr.checked_sub(self.base).ok_or_else(err)? as usize;
        let end = start.checked_add(len).ok_or_else(err)?;
        if end > self.bytes.len() {
            return Err(err());
        }
        Ok(start..end)
    }

    /// `len` bytes at NPU address `addr`, in the image or in one mapped
    /// region.
    pub fn read(&self, addr: u32, len: usize) -> Result<&[u8], ModelError> {
        let region = self.mapped.partition_point(|(a, _)| *a <= addr);
        if let Some((start, bytes)) = region.checked_sub(1).map(|i| &self.mapped[i]) {
            let at = (addr - start) as usize;
            if let Some(b) = bytes.bytes().get(at..at.saturating_add(len)) {
                return Ok(b);
            }
        }
        let r = self.range(addr, len)?;
        Ok(&self.bytes[r])
    }

    /// Writes `data` at NPU address `addr`.
    pub fn write(&mut self, addr: u32, data: &[u8]) -> Result<(), ModelError> {
        let r = self.range(addr, data.len())?;
        self.bytes[r].copy_from_slice(data);
        Ok(())
    }
}

/// What a task did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskReport {
    pub task: MatmulTask,
    /// Multiply-accumulates.
    pub macs: u64,
}

/// Decodes and runs one task's command buffer (little-endian words).
pub fn execute(ddr: &mut Ddr, regcmd: &[u8]) -> Result<TaskReport, ModelError> {
    execute_words(ddr, &regcmd::decode_buffer(regcmd)?)
}

/// Runs one task's decoded command list.
pub fn execute_words(ddr: &mut Ddr, words: &[Word]) -> Result<TaskReport, ModelError> {
    let task = MatmulTask::from_words(words)?;
    let output = run_matmul(ddr, &task)?;
    ddr.write(task.output, &output)?;
    let macs = u64::from(task.m) * u64::from(task.k) * u64::from(task.n);
    Ok(TaskReport { task, macs })
}

/// The output cube's bytes of `task`, computed from the image.
fn run_matmul(ddr: &Ddr, task: &MatmulTask) -> Result<Vec<u8>, ModelError> {
    let p = task.precision;
    let (m, k, n) = (task.m as usize, task.k as usize, task.n as usize);
    let bpe = p.input_bytes() as usize;
    let c2in = p.input_atom_channels();
    let a_bytes = ddr.read(task.input, cube_len(k, m, c2in) * bpe)?;
    let b_bytes = ddr.read(task.weights, n * k * bpe)?;
    let kb = p.kernel_block();
    // A as row-major [M, K]; B as kernel-major [N, K].
    fn kernel_major<T: Copy>(b: &[T], n: usize, k: usize, kb: usize) -> Vec<T> {
        (0..n)
            .flat_map(|j| (0..k).map(move |kk| weight_index(j, kk, n, k, kb)))
            .map(|i| b[i])
            .collect()
    }
    let c2out = p.output_atom_channels();
    let out_bytes = p.output_bytes() as usize;
    let mut out = vec![0u8; cube_len(n, m, c2out) * out_bytes];
    let mut put = |row: usize, col: usize, bytes: &[u8]| {
        let at = cube_index(col, row, m, c2out) * out_bytes;
        out[at..at + bytes.len()].copy_from_slice(bytes);
    };
    match p {
        MatmulPrecision::Int8 => {
            let a: Vec<i8> = a_bytes.iter().map(|&x| x as i8).collect();
            let b: Vec<i8> = b_bytes.iter().map(|&x| x as i8).collect();
            let a = unpack_cube(&a, m, k, c2in);
            let b = kernel_major(&b, n, k, kb);
            for row in 0..m {
                for col in 0..n {
                    let dot = a[row * k..][..k]
                        .iter()
                        .zip(&b[col * k..][..k])
                        .map(|(&x, &y)| i32::from(x) * i32::from(y))
                        .sum::<i32>();
                    put(row, col, &dot.to_le_bytes());
                }
            }
        }
        MatmulPrecision::Fp16 | MatmulPrecision::Fp16ToFp16 => {
            let halves = |bytes: &[u8]| -> Vec<f32> {
                bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect()
            };
            let a = unpack_cube(&halves(a_bytes), m, k, c2in);
            let b = kernel_major(&halves(b_bytes), n, k, kb);
            for row in 0..m {
                for col in 0..n {
                    let dot = a[row * k..][..k]
                        .iter()
                        .zip(&b[col * k..][..k])
                        .fold(0f32, |acc, (&x, &y)| acc + x * y);
                    if p == MatmulPrecision::Fp16 {
                        put(row, col, &dot.to_le_bytes());
                    } else {
                        put(row, col, &f16::from_f32(dot).to_le_bytes());
                    }
                }
            }
        }
    }
    Ok(out)
}
