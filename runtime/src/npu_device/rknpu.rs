//! Rockchip's vendor `rknpu` driver (the BSP kernels boards ship with,
//! driver 0.9.x) through its DRM ioctls on the render node it registers.
//!
//! The structs mirror the driver's UAPI header (`rknpu_ioctl.h`, as in the
//! vendor kernel trees); compile-time asserts hold their sizes and field
//! offsets to the header's. The node is found by asking each
//! `/dev/dri/renderD*` for its driver name (`DRM_IOCTL_VERSION`: `rknpu`).
//! Buffers are `MEM_CREATE` objects, contiguous and not cached by the CPU
//! (so no `MEM_SYNC` is needed), mapped into this process at the offset
//! `MEM_MAP` gives. A submit writes the tasks into a task buffer the
//! kernel maps (`KERNEL_MAPPING`) and runs them in program-counter mode,
//! blocking, on core 0. Each task's interrupt mask waits for the DPU, the
//! block that writes a matmul's output. Not run on a board yet: only the
//! layouts are checked here.

use std::fs::File;
use std::mem::{offset_of, size_of};

use super::drm::{self, drm_ioc, Mappings, DRM_COMMAND_BASE, IOC_READ_WRITE};
use super::{DeviceError, NpuBuffer, NpuDevice, NpuTask};

/// `struct drm_version` (the core DRM ioctl's reply).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DrmVersion {
    pub version_major: i32,
    pub version_minor: i32,
    pub version_patchlevel: i32,
    pub name_len: usize,
    pub name: *mut u8,
    pub date_len: usize,
    pub date: *mut u8,
    pub desc_len: usize,
    pub desc: *mut u8,
}

/// `struct rknpu_mem_create` (driver 0.9.7 and later; older drivers take
/// the first 40 bytes, and the DRM core zero-fills what a shorter struct
/// leaves out).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MemCreate {
    pub handle: u32,
    pub flags: u32,
    pub size: u64,
    /// The kernel's token for the object, passed back in submits.
    pub obj_addr: u64,
    /// The NPU address.
    pub dma_addr: u64,
    pub sram_size: u64,
    pub iommu_domain_id: i32,
    pub reserved: u32,
}

/// `struct rknpu_mem_map`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MemMap {
    pub handle: u32,
    pub reserved: u32,
    pub offset: u64,
}

/// `struct rknpu_mem_destroy`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MemDestroy {
    pub handle: u32,
    pub reserved: u32,
    pub obj_addr: u64,
}

/// `struct rknpu_task` (packed in the header; its natural layout is the
/// same).
#[repr(C, packed)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Task {
    pub flags: u32,
    pub op_idx: u32,
    pub enable_mask: u32,
    pub int_mask: u32,
    pub int_clear: u32,
    pub int_status: u32,
    /// Words of the command list, without the 4 tail words.
    pub regcfg_amount: u32,
    pub regcfg_offset: u32,
    pub regcmd_addr: u64,
}

/// `struct rknpu_subcore_task`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SubcoreTask {
    pub task_start: u32,
    pub task_number: u32,
}

/// `struct rknpu_submit` (the 0.9.7 names; older drivers call the words
/// at 32 and 48 `regcfg_obj_addr` and `user_data`, unused here).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Submit {
    pub flags: u32,
    /// Milliseconds.
    pub timeout: u32,
    pub task_start: u32,
    pub task_number: u32,
    pub task_counter: u32,
    pub priority: i32,
    pub task_obj_addr: u64,
    pub iommu_domain_id: u32,
    pub reserved: u32,
    pub task_base_addr: u64,
    pub hw_elapse_time: i64,
    pub core_mask: u32,
    pub fence_fd: i32,
    /// Per core the range of tasks it runs (entries 2..=4 when three cores
    /// run at once).
    pub subcore_task: [SubcoreTask; 5],
}

const _: () = {
    assert!(size_of::<DrmVersion>() == 64);
    assert!(offset_of!(DrmVersion, name_len) == 16);
    assert!(offset_of!(DrmVersion, name) == 24);
    assert!(size_of::<MemCreate>() == 48);
    assert!(offset_of!(MemCreate, flags) == 4);
    assert!(offset_of!(MemCreate, size) == 8);
    assert!(offset_of!(MemCreate, obj_addr) == 16);
    assert!(offset_of!(MemCreate, dma_addr) == 24);
    assert!(offset_of!(MemCreate, sram_size) == 32);
    assert!(offset_of!(MemCreate, iommu_domain_id) == 40);
    assert!(size_of::<MemMap>() == 16);
    assert!(offset_of!(MemMap, offset) == 8);
    assert!(size_of::<MemDestroy>() == 16);
    assert!(offset_of!(MemDestroy, obj_addr) == 8);
    assert!(size_of::<Task>() == 40);
    assert!(offset_of!(Task, int_mask) == 12);
    assert!(offset_of!(Task, regcfg_amount) == 24);
    assert!(offset_of!(Task, regcmd_addr) == 32);
    assert!(size_of::<SubcoreTask>() == 8);
    assert!(size_of::<Submit>() == 104);
    assert!(offset_of!(Submit, task_counter) == 16);
    assert!(offset_of!(Submit, priority) == 20);
    assert!(offset_of!(Submit, task_obj_addr) == 24);
    assert!(offset_of!(Submit, iommu_domain_id) == 32);
    assert!(offset_of!(Submit, task_base_addr) == 40);
    assert!(offset_of!(Submit, hw_elapse_time) == 48);
    assert!(offset_of!(Submit, core_mask) == 56);
    assert!(offset_of!(Submit, fence_fd) == 60);
    assert!(offset_of!(Submit, subcore_task) == 64);
};

/// `_IOWR('d', nr, size)`.
const fn drm_iowr(nr: u64, size: usize) -> u64 {
    drm_ioc(IOC_READ_WRITE, nr, size)
}

pub const IOCTL_VERSION: u64 = drm_iowr(0x00, size_of::<DrmVersion>());
pub const IOCTL_SUBMIT: u64 = drm_iowr(DRM_COMMAND_BASE + 1, size_of::<Submit>());
pub const IOCTL_MEM_CREATE: u64 = drm_iowr(DRM_COMMAND_BASE + 2, size_of::<MemCreate>());
pub const IOCTL_MEM_MAP: u64 = drm_iowr(DRM_COMMAND_BASE + 3, size_of::<MemMap>());
pub const IOCTL_MEM_DESTROY: u64 = drm_iowr(DRM_COMMAND_BASE + 4, size_of::<MemDestroy>());

const _: () = {
    assert!(IOCTL_VERSION == 0xC040_6400);
    assert!(IOCTL_SUBMIT == 0xC068_6441);
    assert!(IOCTL_MEM_CREATE == 0xC030_6442);
    assert!(IOCTL_MEM_MAP == 0xC010_6443);
    assert!(IOCTL_MEM_DESTROY == 0xC010_6444);
};

/// `RKNPU_MEM_KERNEL_MAPPING`: the kernel maps the buffer too (it reads
/// the task array through that mapping).
const MEM_KERNEL_MAPPING: u32 = 1 << 3;
/// `RKNPU_JOB_PC | RKNPU_JOB_BLOCK | RKNPU_JOB_PINGPONG`.
const JOB_FLAGS: u32 = 1 | (1 << 2);
/// The submit's timeout, ms.
const TIMEOUT_MS: u32 = 6000;
/// Core 0.
const CORE0: u32 = 1;
/// A task's interrupt mask: the DPU's completion pair (it writes the
/// output last).
const INT_DPU_DONE: u32 = 0x300;
/// Every interrupt bit, cleared before a task.
const INT_CLEAR_ALL: u32 = 0x1_ffff;
/// The blocks a matmul task enables (CNA, CORE, DPU).
const ENABLE_MATMUL: u32 = 0xd;
/// The tail words (`RKNPU_PC_DATA_EXTRA_AMOUNT`) that a task's
/// `regcfg_amount` leaves out.
const TAIL_WORDS: u32 = 4;

/// An open `rknpu` device.
pub struct RknpuDevice {
    file: File,
    /// Each buffer's mapping, with the object address the driver frees
    /// it by.
    maps: Mappings,
    /// The task array of submits, grown as needed.
    tasks: Option<(NpuBuffer, usize)>,
}

impl RknpuDevice {
    /// Opens the `/dev/dri/renderD*` node whose driver is `rknpu`.
    pub fn open() -> Result<RknpuDevice, DeviceError> {
        let dir = std::path::Path::new("/dev/dri");
        let entries = std::fs::read_dir(dir)
            .map_err(|e| DeviceError::NoDevice(format!("{}: {e}", dir.display())))?;
        let mut tried = Vec::new();
        let mut paths: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("renderD"))
            })
            .collect();
        paths.sort();
        for path in paths {
            let file = match drm::open_node(&path) {
                Ok(f) => f,
                Err(e) => {
                    tried.push(e);
                    continue;
                }
            };
            let dev = RknpuDevice {
                file,
                maps: Mappings::default(),
                tasks: None,
            };
            match dev.driver_name() {
                Ok(name) if name == "rknpu" => return Ok(dev),
                Ok(name) => tried.push(format!("{}: driver `{name}`", path.display())),
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
        Err(DeviceError::NoDevice(if tried.is_empty() {
            format!("{} holds no render node", dir.display())
        } else {
            tried.join("; ")
        }))
    }

    /// The DRM driver's name.
    fn driver_name(&self) -> Result<String, DeviceError> {
        let mut name = [0u8; 64];
        let mut v = DrmVersion {
            version_major: 0,
            version_minor: 0,
            version_patchlevel: 0,
            name_len: name.len(),
            name: name.as_mut_ptr(),
            date_len: 0,
            date: std::ptr::null_mut(),
            desc_len: 0,
            desc: std::ptr::null_mut(),
        };
        self.ioctl("DRM_IOCTL_VERSION", IOCTL_VERSION, &mut v)?;
        let len = v.name_len.min(name.len());
        Ok(String::from_utf8_lossy(&name[..len]).into_owned())
    }

    fn ioctl<T>(&self, call: &'static str, request: u64, arg: &mut T) -> Result<(), DeviceError> {
        drm::ioctl(&self.file, call, request, arg)
    }

    /// A mapped buffer of `size` bytes with the driver's `flags`.
    fn create(&mut self, size: usize, flags: u32) -> Result<NpuBuffer, DeviceError> {
        let mut create = MemCreate {
            flags,
            size: size as u64,
            ..MemCreate::default()
        };
        self.ioctl("RKNPU_MEM_CREATE", IOCTL_MEM_CREATE, &mut create)?;
        let (handle, obj_addr) = (create.handle, create.obj_addr);
        let Ok(addr) = u32::try_from(create.dma_addr) else {
            self.destroy(handle, obj_addr);
            return Err(DeviceError::Os {
                call: "RKNPU_MEM_CREATE",
                source: std::io::Error::other(format!(
                    "NPU address {:#x} does not fit 32 bits",
                    create.dma_addr
                )),
            });
        };
        let mut map = MemMap {
            handle,
            ..MemMap::default()
        };
        if let Err(e) = self.ioctl("RKNPU_MEM_MAP", IOCTL_MEM_MAP, &mut map) {
            self.destroy(handle, obj_addr);
            return Err(e);
        }
        let buf = NpuBuffer { handle, addr, size };
        if let Err(e) = self.maps.map(&self.file, buf, obj_addr, map.offset) {
            self.destroy(handle, obj_addr);
            return Err(e);
        }
        Ok(buf)
    }

    /// Unmaps (when mapped) and frees a buffer.
    fn destroy(&mut self, handle: u32, obj_addr: u64) {
        self.maps.unmap(handle);
        let mut destroy = MemDestroy {
            handle,
            reserved: 0,
            obj_addr,
        };
        // Nothing to do if freeing fails: closing the fd frees it too.
        let _ = self.ioctl("RKNPU_MEM_DESTROY", IOCTL_MEM_DESTROY, &mut destroy);
    }

    /// The task buffer, holding at least `count` tasks.
    fn task_buffer(&mut self, count: usize) -> Result<NpuBuffer, DeviceError> {
        match self.tasks {
            Some((buf, capacity)) if capacity >= count => Ok(buf),
            old => {
                if let Some((buf, _)) = old {
                    let obj = self.maps.get(&buf)?.token;
                    self.destroy(buf.handle, obj);
                    self.tasks = None;
                }
                let capacity = count.next_power_of_two().max(64);
                let buf = self.create(capacity * size_of::<Task>(), MEM_KERNEL_MAPPING)?;
                self.tasks = Some((buf, capacity));
                Ok(buf)
            }
        }
    }
}

impl Drop for RknpuDevice {
    fn drop(&mut self) {
        for (handle, obj) in self.maps.held() {
            self.destroy(handle, obj);
        }
    }
}

/// The driver's task records for `tasks`.
pub fn task_records(tasks: &[NpuTask]) -> Vec<Task> {
    tasks
        .iter()
        .map(|t| Task {
            enable_mask: ENABLE_MATMUL,
            int_mask: INT_DPU_DONE,
            int_clear: INT_CLEAR_ALL,
            regcfg_amount: t.words.saturating_sub(TAIL_WORDS),
            regcmd_addr: u64::from(t.regcmd),
            ..Task::default()
        })
        .collect()
}

/// The submit that runs `count` tasks of the task buffer `task_obj_addr`
/// on core 0, blocking.
pub fn submit_record(task_obj_addr: u64, count: u32) -> Submit {
    let mut subcore_task = [SubcoreTask::default(); 5];
    subcore_task[0] = SubcoreTask {
        task_start: 0,
        task_number: count,
    };
    Submit {
        flags: JOB_FLAGS,
        timeout: TIMEOUT_MS,
        task_start: 0,
        task_number: count,
        task_obj_addr,
        core_mask: CORE0,
        fence_fd: -1,
        subcore_task,
        ..Submit::default()
    }
}

impl NpuDevice for RknpuDevice {
    fn name(&self) -> &'static str {
        "rknpu"
    }

    fn alloc(&mut self, size: usize) -> Result<NpuBuffer, DeviceError> {
        // Contiguous, not cached by the CPU: writes reach the NPU and its
        // writes are seen without a sync.
        self.create(size, 0)
    }

    fn write(&mut self, buf: &NpuBuffer, offset: usize, data: &[u8]) -> Result<(), DeviceError> {
        self.maps.get(buf)?.copy_in(offset, data)
    }

    fn read(&mut self, buf: &NpuBuffer, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        self.maps.get(buf)?.copy_out(offset, out)
    }

    fn submit(&mut self, tasks: &[NpuTask]) -> Result<(), DeviceError> {
        if tasks.is_empty() {
            return Ok(());
        }
        let records = task_records(tasks);
        let buf = self.task_buffer(records.len())?;
        // SAFETY: `Task` is a packed plain-data struct; its bytes are the
        // header's layout.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                records.as_ptr() as *const u8,
                records.len() * size_of::<Task>(),
            )
        };
        self.write(&buf, 0, bytes)?;
        let obj = self.maps.get(&buf)?.token;
        let count =
            u32::try_from(records.len()).map_err(|_| DeviceError::OutOfMemory(bytes.len()))?;
        let mut submit = submit_record(obj, count);
        self.ioctl("RKNPU_SUBMIT", IOCTL_SUBMIT, &mut submit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 108-word matmul list is submitted as the public programs do: 104
    /// configuration words, the DPU's completion awaited, core 0 only.
    #[test]
    fn records_follow_the_drivers_conventions() {
        let t = task_records(&[NpuTask {
            regcmd: 0x1234_5000,
            words: 108,
        }]);
        let t = t[0];
        let (amount, mask, addr) = (t.regcfg_amount, t.int_mask, t.regcmd_addr);
        assert_eq!((amount, mask, addr), (104, 0x300, 0x1234_5000));
        let s = submit_record(0xdead_0000, 7);
        assert_eq!((s.flags, s.core_mask, s.fence_fd), (5, 1, -1));
        assert_eq!(
            (s.subcore_task[0].task_number, s.subcore_task[1].task_number),
            (7, 0)
        );
    }
}
