//! The mainline Linux `rocket` driver (`drivers/accel/rocket`, Linux 6.18)
//! through its DRM accel ioctls on `/dev/accel/accel*`.
//!
//! The structs mirror `include/uapi/drm/rocket_accel.h`; compile-time
//! asserts hold their sizes and field offsets to the header's. Buffers are
//! GEM objects made by `CREATE_BO`, mapped into this process at the offset
//! it returns; CPU access is bracketed by `PREP_BO` (waits for the NPU jobs
//! that use the buffer, then makes it coherent for the CPU) and `FINI_BO`.
//! A submit is one job whose tasks run in order on one core; every buffer
//! is named as both input and output, so `PREP_BO` on any of them waits
//! for the job. Not run on a board yet: only the layouts are checked here.

use std::fs::File;
use std::mem::{offset_of, size_of};

use super::drm::{self, drm_ioc, Mappings, DRM_COMMAND_BASE, IOC_READ_WRITE, IOC_WRITE};
use super::{check_range, DeviceError, NpuBuffer, NpuDevice, NpuTask};

/// `struct drm_rocket_create_bo`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CreateBo {
    pub size: u32,
    pub handle: u32,
    pub dma_address: u64,
    pub offset: u64,
}

/// `struct drm_rocket_prep_bo`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PrepBo {
    pub handle: u32,
    pub reserved: u32,
    /// An absolute CLOCK_MONOTONIC time.
    pub timeout_ns: i64,
}

/// `struct drm_rocket_fini_bo`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FiniBo {
    pub handle: u32,
    pub reserved: u32,
}

/// `struct drm_rocket_task`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Task {
    pub regcmd: u32,
    pub regcmd_count: u32,
}

/// `struct drm_rocket_job`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Job {
    pub tasks: u64,
    pub in_bo_handles: u64,
    pub out_bo_handles: u64,
    pub task_count: u32,
    pub task_struct_size: u32,
    pub in_bo_handle_count: u32,
    pub out_bo_handle_count: u32,
}

/// `struct drm_rocket_submit`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Submit {
    pub jobs: u64,
    pub job_count: u32,
    pub job_struct_size: u32,
    pub reserved: u64,
}

/// `struct drm_gem_close`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GemClose {
    pub handle: u32,
    pub pad: u32,
}

const _: () = {
    assert!(size_of::<CreateBo>() == 24);
    assert!(offset_of!(CreateBo, handle) == 4);
    assert!(offset_of!(CreateBo, dma_address) == 8);
    assert!(offset_of!(CreateBo, offset) == 16);
    assert!(size_of::<PrepBo>() == 16);
    assert!(offset_of!(PrepBo, timeout_ns) == 8);
    assert!(size_of::<FiniBo>() == 8);
    assert!(size_of::<Task>() == 8);
    assert!(offset_of!(Task, regcmd_count) == 4);
    assert!(size_of::<Job>() == 40);
    assert!(offset_of!(Job, in_bo_handles) == 8);
    assert!(offset_of!(Job, out_bo_handles) == 16);
    assert!(offset_of!(Job, task_count) == 24);
    assert!(offset_of!(Job, task_struct_size) == 28);
    assert!(offset_of!(Job, in_bo_handle_count) == 32);
    assert!(offset_of!(Job, out_bo_handle_count) == 36);
    assert!(size_of::<Submit>() == 24);
    assert!(offset_of!(Submit, job_count) == 8);
    assert!(offset_of!(Submit, job_struct_size) == 12);
    assert!(offset_of!(Submit, reserved) == 16);
    assert!(size_of::<GemClose>() == 8);
};

pub const IOCTL_CREATE_BO: u64 = drm_ioc(IOC_READ_WRITE, DRM_COMMAND_BASE, size_of::<CreateBo>());
pub const IOCTL_SUBMIT: u64 = drm_ioc(IOC_WRITE, DRM_COMMAND_BASE + 1, size_of::<Submit>());
pub const IOCTL_PREP_BO: u64 = drm_ioc(IOC_WRITE, DRM_COMMAND_BASE + 2, size_of::<PrepBo>());
pub const IOCTL_FINI_BO: u64 = drm_ioc(IOC_WRITE, DRM_COMMAND_BASE + 3, size_of::<FiniBo>());
/// `DRM_IOCTL_GEM_CLOSE` (a core DRM ioctl, number 0x09).
pub const IOCTL_GEM_CLOSE: u64 = drm_ioc(IOC_WRITE, 0x09, size_of::<GemClose>());

const _: () = {
    assert!(IOCTL_CREATE_BO == 0xC018_6440);
    assert!(IOCTL_SUBMIT == 0x4018_6441);
    assert!(IOCTL_PREP_BO == 0x4010_6442);
    assert!(IOCTL_FINI_BO == 0x4008_6443);
    assert!(IOCTL_GEM_CLOSE == 0x4008_6409);
};

/// How long a CPU access waits for the NPU (the kernel's own job timeout
/// is 500 ms).
const WAIT_NS: i64 = 5_000_000_000;

/// An open `rocket` device.
pub struct RocketDevice {
    file: File,
    maps: Mappings,
}

impl RocketDevice {
    /// Opens the first `/dev/accel/accel*` that accepts `rocket`'s
    /// `CREATE_BO`.
    pub fn open() -> Result<RocketDevice, DeviceError> {
        let dir = std::path::Path::new("/dev/accel");
        let entries = std::fs::read_dir(dir)
            .map_err(|e| DeviceError::NoDevice(format!("{}: {e}", dir.display())))?;
        let mut tried = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let file = match drm::open_node(&path) {
                Ok(f) => f,
                Err(e) => {
                    tried.push(e);
                    continue;
                }
            };
            let mut dev = RocketDevice {
                file,
                maps: Mappings::default(),
            };
            // A probe allocation tells a rocket device from another accel driver.
            match dev.alloc(4096) {
                Ok(probe) => {
                    dev.release(probe.handle);
                    return Ok(dev);
                }
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
        Err(DeviceError::NoDevice(if tried.is_empty() {
            format!("{} holds no device", dir.display())
        } else {
            tried.join("; ")
        }))
    }

    fn ioctl<T>(&self, call: &'static str, request: u64, arg: &mut T) -> Result<(), DeviceError> {
        drm::ioctl(&self.file, call, request, arg)
    }

    /// Waits for the NPU's use of `handle` and opens it to the CPU.
    fn prep(&self, handle: u32) -> Result<(), DeviceError> {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid timespec to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let mut prep = PrepBo {
            handle,
            reserved: 0,
            timeout_ns: now.tv_sec * 1_000_000_000 + now.tv_nsec + WAIT_NS,
        };
        self.ioctl("ROCKET_PREP_BO", IOCTL_PREP_BO, &mut prep)
    }

    fn fini(&self, handle: u32) -> Result<(), DeviceError> {
        let mut fini = FiniBo {
            handle,
            reserved: 0,
        };
        self.ioctl("ROCKET_FINI_BO", IOCTL_FINI_BO, &mut fini)
    }

    /// Unmaps and closes a buffer.
    fn release(&mut self, handle: u32) {
        self.maps.unmap(handle);
        let mut close = GemClose { handle, pad: 0 };
        // Nothing to do if closing fails: the fd's close frees it too.
        let _ = self.ioctl("DRM_GEM_CLOSE", IOCTL_GEM_CLOSE, &mut close);
    }
}

impl Drop for RocketDevice {
    fn drop(&mut self) {
        for (h, _) in self.maps.held() {
            self.release(h);
        }
    }
}

impl NpuDevice for RocketDevice {
    fn name(&self) -> &'static str {
        "rocket"
    }

    fn alloc(&mut self, size: usize) -> Result<NpuBuffer, DeviceError> {
        let mut create = CreateBo {
            size: u32::try_from(size).map_err(|_| DeviceError::OutOfMemory(size))?,
            ..CreateBo::default()
        };
        self.ioctl("ROCKET_CREATE_BO", IOCTL_CREATE_BO, &mut create)?;
        let Ok(addr) = u32::try_from(create.dma_address) else {
            self.release(create.handle);
            return Err(DeviceError::Os {
                call: "ROCKET_CREATE_BO",
                source: std::io::Error::other(format!(
                    "NPU address {:#x} does not fit 32 bits",
                    create.dma_address
                )),
            });
        };
        let buf = NpuBuffer {
            handle: create.handle,
            addr,
            size,
        };
        if let Err(e) = self.maps.map(&self.file, buf, 0, create.offset) {
            self.release(create.handle);
            return Err(e);
        }
        Ok(buf)
    }

    fn write(&mut self, buf: &NpuBuffer, offset: usize, data: &[u8]) -> Result<(), DeviceError> {
        // Checked before PREP_BO, so that a bad range leaves no buffer open.
        let m = self.maps.get(buf)?;
        check_range("write", offset, data.len(), m.buf.size)?;
        self.prep(buf.handle)?;
        m.copy_in(offset, data)?;
        self.fini(buf.handle)
    }

    fn read(&mut self, buf: &NpuBuffer, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        let m = self.maps.get(buf)?;
        check_range("read", offset, out.len(), m.buf.size)?;
        self.prep(buf.handle)?;
        m.copy_out(offset, out)?;
        self.fini(buf.handle)
    }

    fn submit(&mut self, tasks: &[NpuTask]) -> Result<(), DeviceError> {
        let tasks: Vec<Task> = tasks
            .iter()
            .map(|t| Task {
                regcmd: t.regcmd,
                regcmd_count: t.words,
            })
            .collect();
        let handles: Vec<u32> = self.maps.held().into_iter().map(|(h, _)| h).collect();
        let mut job = Job {
            tasks: tasks.as_ptr() as u64,
            in_bo_handles: handles.as_ptr() as u64,
            out_bo_handles: handles.as_ptr() as u64,
            task_count: tasks.len() as u32,
            task_struct_size: size_of::<Task>() as u32,
            in_bo_handle_count: handles.len() as u32,
            out_bo_handle_count: handles.len() as u32,
        };
        let mut submit = Submit {
            jobs: &mut job as *mut Job as u64,
            job_count: 1,
            job_struct_size: size_of::<Job>() as u32,
            reserved: 0,
        };
        self.ioctl("ROCKET_SUBMIT", IOCTL_SUBMIT, &mut submit)?;
        // Wait for the job: PREP_BO on a buffer it uses returns when it is done.
        if let Some(&h) = handles.first() {
            self.prep(h)?;
            self.fini(h)?;
        }
        Ok(())
    }
}
