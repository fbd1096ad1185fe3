//! Fault injection for the NPU path (cargo feature `fault-injection`,
//! for tests; a build without it never reads the plan).
//!
//! `SLMCC_NPU_FAULT=PLAN` wraps every NPU device that `run`, `generate` and
//! `golden check` open (the functional model's and a board's) in a
//! [`FaultyDevice`]:
//! - `fail-once`: the first submit fails, later ones work (a transient
//!   fault: the runtime's retry succeeds);
//! - `fail`: every submit fails (the runtime falls back to the CPU);
//! - `timeout`: every submit ends in the error a driver gives when its
//!   deadline passes (`ETIMEDOUT`), at once rather than after the wait;
//! - `corrupt`: submits succeed, but the first 256 bytes read back after
//!   each one (the start of the first output tile) have bit 24 of every
//!   32-bit word flipped: silent corruption, which only a golden check
//!   can catch.

use super::{DeviceError, NpuBuffer, NpuDevice, NpuTask, SharedBytes};

/// The environment variable holding the plan.
pub const FAULT_ENV: &str = "SLMCC_NPU_FAULT";

/// Bytes of the output tile `corrupt` changes.
pub const CORRUPT_BYTES: usize = 256;

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    FailOnce,
    Fail,
    Timeout,
    Corrupt,
}

impl Fault {
    /// Parses a plan (the names in the module doc).
    pub fn parse(plan: &str) -> Result<Fault, String> {
        match plan {
            "fail-once" => Ok(Fault::FailOnce),
            "fail" => Ok(Fault::Fail),
            "timeout" => Ok(Fault::Timeout),
            "corrupt" => Ok(Fault::Corrupt),
            other => Err(format!(
                "{FAULT_ENV}={other}: expected fail-once, fail, timeout or corrupt"
            )),
        }
    }

    /// The plan in the environment, when the build injects faults.
    pub fn from_env() -> Result<Option<Fault>, String> {
        if !cfg!(feature = "fault-injection") {
            return Ok(None);
        }
        match std::env::var(FAULT_ENV) {
            Ok(plan) if !plan.is_empty() => Fault::parse(&plan).map(Some),
            _ => Ok(None),
        }
    }
}

/// A device that injects `fault` into `inner`'s answers.
pub struct FaultyDevice<D> {
    inner: D,
    fault: Fault,
    submits: u64,
    /// A submit ran since the last read (so the next read is an output).
    submitted: bool,
}

impl<D: NpuDevice> FaultyDevice<D> {
    pub fn new(inner: D, fault: Fault) -> FaultyDevice<D> {
        FaultyDevice {
            inner,
            fault,
            submits: 0,
            submitted: false,
        }
    }
}

impl<D: NpuDevice> NpuDevice for FaultyDevice<D> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn alloc(&mut self, size: usize) -> Result<NpuBuffer, DeviceError> {
        self.inner.alloc(size)
    }

    fn write(&mut self, buf: &NpuBuffer, offset: usize, data: &[u8]) -> Result<(), DeviceError> {
        self.inner.write(buf, offset, data)
    }

    fn read(&mut self, buf: &NpuBuffer, offset: usize, out: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read(buf, offset, out)?;
        if self.fault == Fault::Corrupt && std::mem::take(&mut self.submitted) {
            let tile = CORRUPT_BYTES.min(out.len()) / 4 * 4;
            for word in out[..tile].chunks_exact_mut(4) {
                word[3] ^= 0x01;
            }
        }
        Ok(())
    }

    fn submit(&mut self, tasks: &[NpuTask]) -> Result<(), DeviceError> {
        self.submits += 1;
        let injected = |kind| DeviceError::Os {
            call: "submit (injected fault)",
            source: std::io::Error::from(kind),
        };
        match self.fault {
            Fault::FailOnce if self.submits == 1 => Err(injected(std::io::ErrorKind::Other)),
            Fault::Fail => Err(injected(std::io::ErrorKind::Other)),
            Fault::Timeout => Err(injected(std::io::ErrorKind::TimedOut)),
            _ => {
                self.inner.submit(tasks)?;
                self.submitted = true;
                Ok(())
            }
        }
    }

    fn import(&mut self, bytes: SharedBytes) -> Result<NpuBuffer, DeviceError> {
        self.inner.import(bytes)
    }
}
