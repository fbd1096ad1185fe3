//! Access to an NPU that runs register command lists: one trait,
//! [`NpuDevice`], for the mainline `rocket` driver ([`rocket`]), the
//! vendor `rknpu` driver ([`rknpu`]) and the functional model
//! ([`ModelDevice`]). [`open_board`] opens whichever driver the board has.
//!
//! Contract: buffers come from [`NpuDevice::alloc`] and carry the NPU
//! address that command lists use; [`NpuDevice::submit`] runs tasks in
//! order on one core and returns when they are done, after which
//! [`NpuDevice::read`] sees their output. A device that cannot do what is
//! asked says why in a [`DeviceError`]; nothing here panics on a device's
//! answer.

mod drm;
pub mod fault;
pub mod rknpu;
pub mod rocket;

use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

use memmap2::Mmap;

use crate::npu_model::{self, Ddr, ModelError};

/// A buffer the NPU can address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpuBuffer {
    /// The device's handle.
    pub handle: u32,
    /// Its NPU address (32 bits: the register fields and the task's
    /// command list address are 32-bit).
    pub addr: u32,
    pub size: usize,
}

/// Bytes that stay valid and unchanged while a device holds them: part of
/// a package's mapping (its weights, used in place), or bytes in memory.
#[derive(Clone, Debug)]
pub enum SharedBytes {
    Mapped(Arc<Mmap>, Range<usize>),
    Owned(Arc<[u8]>),
}

impl SharedBytes {
    pub fn bytes(&self) -> &[u8] {
        match self {
            SharedBytes::Mapped(map, r) => &map[r.clone()],
            SharedBytes::Owned(b) => b,
        }
    }
}

/// One task: the NPU address of its command list and its word count,
/// the four tail words included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NpuTask {
    pub regcmd: u32,
    pub words: u32,
}

/// Why a device call failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("no NPU device: {0}")]
    NoDevice(String),
    #[error("{call}: {source}")]
    Os {
        call: &'static str,
        source: std::io::Error,
    },
    #[error("{what} [{offset:#x}, +{len:#x}) is outside the buffer of {size:#x} bytes")]
    OutOfRange {
        what: &'static str,
        offset: usize,
        len: usize,
        size: usize,
    },
    #[error("unknown buffer handle {0}")]
    UnknownBuffer(u32),
    #[error("buffer {0} is read-only (imported)")]
    ReadOnly(u32),
    #[error("out of NPU memory: {0:#x} bytes more asked for")]
    OutOfMemory(usize),
    #[error("task {index}: {source}")]
    Task { index: usize, source: ModelError },
    #[error(transparent)]
    Memory(ModelError),
    #[error("the task's shape: {0}")]
    Shape(#[from] slmcc_backends::npu::regcmd::MatmulError),
    #[error("a command list: {0}")]
    Program(slmcc_backends::npu::regcmd::BufferError),
    #[error("a command list's address passes 32 bits once relocated to its buffers")]
    AddressOverflow,
    #[error("{0}")]
    FaultPlan(String),
}

/// An NPU that runs register command lists.
pub trait NpuDevice {
    /// The device's name in messages (`rocket`, `model`).
    fn name(&self) -> &'static str;
    /// A zeroed buffer of `size` bytes.
    fn alloc(&mut self, size: usize) -> Result<NpuBuffer, DeviceError>;
    /// Writes `data` into `buf` at `offset`.
    fn write(&mut self, buf: &NpuBuffer, offset: usize, data: &[u8]) -> Result<(), DeviceError>;
    /// Reads `out.len()` bytes of `buf` at `offset`.
    fn read(&mut self, buf: &NpuBuffer, offset: usize, out: &mut [u8]) -> Result<(), DeviceError>;
    /// Runs `tasks` in order on one core and waits for them.
    fn submit(&mut self, tasks: &[NpuTask]) -> Result<(), DeviceError>;
    /// A read-only buffer holding `bytes` (a product's weights). The
    /// functional model reads them in place; a driver's buffer is memory
    /// the NPU can address, so it gets a copy (the default).
    fn import(&mut self, bytes: SharedBytes) -> Result<NpuBuffer, DeviceError> {
        let data = bytes.bytes();
        let buf = self.alloc(data.len())?;
        self.write(&buf, 0, data)?;
        Ok(buf)
    }
}

/// The board's NPU: the mainline `rocket` driver's device if one opens,
/// else the vendor `rknpu` driver's; or why neither does.
pub fn open_board() -> Result<Rc<RefCell<dyn NpuDevice>>, DeviceError> {
    let why = |e: DeviceError| match e {
        DeviceError::NoDevice(s) => s,
        e => e.to_string(),
    };
    let rocket = match rocket::RocketDevice::open() {
        Ok(d) => return shared_device(d),
        Err(e) => why(e),
    };
    match rknpu::RknpuDevice::open() {
        Ok(d) => shared_device(d),
        Err(e) => Err(DeviceError::NoDevice(format!(
            "rocket: {rocket}; rknpu: {}",
            why(e)
        ))),
    }
}

/// `dev` as the runtime holds it: behind the fault plan of
/// [`fault::FAULT_ENV`] when the build injects faults and a plan is set.
pub fn shared_device<D: NpuDevice + 'static>(
    dev: D,
) -> Result<Rc<RefCell<dyn NpuDevice>>, DeviceError> {
    Ok(
        match fault::Fault::from_env().map_err(DeviceError::FaultPlan)? {
            Some(f) => Rc::new(RefCell::new(fault::FaultyDevice::new(dev, f))),
            None => Rc::new(RefCell::new(dev)),
        },
    )
}

/// Checks that `[offset, offset + len)` lies in a buffer of `size` bytes.
pub(crate) fn check_range(
    what: &'static str,
    offset: usize,
    len: usize,
    size: usize,
) -> Result<(), DeviceError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            what,
            offset,
            len,
            size,
        }),
    }
}

/// The functional model as a device: buffers are ranges of one image of
/// NPU memory, handed out in order (4 KiB aligned, as pages), imported
/// ones are mapped read-only above the image, and a submit runs each task
/// with [`npu_model::execute`].
pub struct ModelDevice {
    ddr: Ddr,
    next: usize,
    /// The NPU address of the next imported buffer.
    next_import: u64,
    buffers: Vec<NpuBuffer>,
    /// Which buffers (by handle) are imported, so read-only.
    imported: Vec<bool>,
}

/// Alignment of the model's buffers.
pub const PAGE: usize = 4096;

impl ModelDevice {
    /// A device with `size` bytes of NPU memory at NPU address `base`.
    pub fn new(base: u32, size: usize) -> ModelDevice {
        ModelDevice {
            ddr: Ddr::new(base, size),
            next: 0,
            next_import: (u64::from(base) + size as u64).next_multiple_of(PAGE as u64),
            buffers: Vec::new(),
            imported: Vec::new(),
        }
    }

    fn buffer(&self, buf: &NpuBuffer) -> Result<NpuBuffer, DeviceError> {
        let known = self.buffers.get(buf.handle as usize).copied();
        known
            .filter(|b| b == buf)
            .ok_or(DeviceError::UnknownBuffer(buf.handle))
    }
}

impl NpuDevice for ModelDevice {
    fn name(&self) -> &'static str {
        "model"
    }

    fn alloc(&mut self, size: usize) -> Result<NpuBuffer, DeviceError> {
        let end = self
            .next
            .checked_add(size)
            .filter(|&end| end <= self.ddr.size())
            .ok_or(DeviceError::OutOfMemory(size))?;
        let buf = NpuBuffer {
            handle: self.buffers.len() as u32,
            addr: self.ddr.base() + self.next as u32,
            size,
        };
        self.next = end.next_multiple_of(PAGE).min(self.ddr.size());
        self.buffers.push(buf);
        self.imported.push(false);
        Ok(buf)
    }

    fn import(&mut self, bytes: SharedBytes) -> Result<NpuBuffer, DeviceError> {
        let size = bytes.bytes().len();
        let addr = u32::try_from(self.next_import).map_err(|_| DeviceError::OutOfMemory(size))?;
        self.ddr
            .map(addr, bytes)
            .map_err(|_| DeviceError::OutOfMemory(size))?;
        let buf = NpuBuffer {
            handle: self.buffers.len() as u32,
            addr,
            size,
        };
        self.next_import = (self.next_import + size as u64).next_multiple_of(PAGE as u64);
        self.buffers.push(buf);
        self.imported.push(true);
        Ok(buf)
    }

    fn write(&mut self, buf: &NpuBuffer, offset: usize, data: &[u8]) -> Result<(), DeviceError> {
        let buf = self.buffer(buf)?;
        if self.imported[buf.handle as usize] {
            return Err(DeviceError::ReadOnly(buf.handle));
        }
        check_range("write", offset, data.len(), buf.size)?;
        self.ddr
            .write(buf.addr + offset as u32, data)
            .map_err(DeviceError::Memory)
    }

    fn read(&mut self, buf: &NpuBuffer, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        let buf = self.buffer(buf)?;
        check_range("read", offset, out.len(), buf.size)?;
        let bytes = self
            .ddr
            .read(buf.addr + offset as u32, out.len())
            .map_err(DeviceError::Memory)?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn submit(&mut self, tasks: &[NpuTask]) -> Result<(), DeviceError> {
        for (index, t) in tasks.iter().enumerate() {
            let task_error = |source| DeviceError::Task { index, source };
            let len = t.words as usize * 8;
            let list = self.ddr.read(t.regcmd, len).map_err(task_error)?.to_vec();
            npu_model::execute(&mut self.ddr, &list).map_err(task_error)?;
        }
        Ok(())
    }
}
