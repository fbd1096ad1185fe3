//! What the two kernel drivers' devices share: opening a DRM node, the
//! ioctl call with its error, and buffers mapped into this process
//! (`mmap` of the offset a driver gives; range-checked copies in and out).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{check_range, DeviceError, NpuBuffer};

/// `_IOC(dir, 'd', nr, size)`: a DRM ioctl number.
pub(super) const fn drm_ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((b'd' as u64) << 8) | nr
}
pub(super) const IOC_WRITE: u64 = 1;
pub(super) const IOC_READ_WRITE: u64 = 3;
/// The first driver-specific DRM ioctl number.
pub(super) const DRM_COMMAND_BASE: u64 = 0x40;

/// Opens a device node for reading and writing.
pub(super) fn open_node(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// `ioctl(file, request, arg)`, its failure named `call`.
pub(super) fn ioctl<T>(
    file: &File,
    call: &'static str,
    request: u64,
    arg: &mut T,
) -> Result<(), DeviceError> {
    // SAFETY: `arg` is a live, exclusively borrowed #[repr(C)] struct of
    // the size encoded in `request` (the callers' structs are asserted
    // against their headers); any pointers in it point at buffers of the
    // lengths given beside them.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            request as _,
            arg as *mut T as *mut libc::c_void,
        )
    };
    if rc < 0 {
        return Err(DeviceError::Os {
            call,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// A buffer mapped into this process, with what its driver needs to free
/// it (`token`: `rknpu`'s object address; 0 for `rocket`).
pub(super) struct Mapping {
    pub buf: NpuBuffer,
    pub token: u64,
    ptr: *mut u8,
}

/// The mapped buffers of one open device, by handle.
#[derive(Default)]
pub(super) struct Mappings(HashMap<u32, Mapping>);

impl Mappings {
    /// Maps `buf` (of `buf.size` bytes) at the driver's `offset` on `file`.
    pub fn map(
        &mut self,
        file: &File,
        buf: NpuBuffer,
        token: u64,
        offset: u64,
    ) -> Result<(), DeviceError> {
        // SAFETY: maps `size` bytes of the buffer at the offset the driver gave.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                buf.size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(DeviceError::Os {
                call: "mmap",
                source: std::io::Error::last_os_error(),
            });
        }
        self.0.insert(
            buf.handle,
            Mapping {
                buf,
                token,
                ptr: ptr as *mut u8,
            },
        );
        Ok(())
    }

    /// The mapping of `buf`.
    pub fn get(&self, buf: &NpuBuffer) -> Result<&Mapping, DeviceError> {
        self.0
            .get(&buf.handle)
            .filter(|m| m.buf == *buf)
            .ok_or(DeviceError::UnknownBuffer(buf.handle))
    }

    /// Unmaps `handle`'s buffer; its token, if it was mapped.
    pub fn unmap(&mut self, handle: u32) -> Option<u64> {
        let m = self.0.remove(&handle)?;
        // SAFETY: `ptr` is the mapping of `size` bytes made in `map`.
        unsafe { libc::munmap(m.ptr as *mut libc::c_void, m.buf.size) };
        Some(m.token)
    }

    /// Every mapped buffer's handle and token.
    pub fn held(&self) -> Vec<(u32, u64)> {
        self.0.values().map(|m| (m.buf.handle, m.token)).collect()
    }
}

impl Mapping {
    /// Copies `data` into the buffer at `offset`.
    pub fn copy_in(&self, offset: usize, data: &[u8]) -> Result<(), DeviceError> {
        check_range("write", offset, data.len(), self.buf.size)?;
        // SAFETY: the range was checked against the mapping's size.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) };
        Ok(())
    }

    /// Copies the buffer's bytes at `offset` into `out`.
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        check_range("read", offset, out.len(), self.buf.size)?;
        // SAFETY: the range was checked against the mapping's size.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}
