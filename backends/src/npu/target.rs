//! Target description of the RK3588 NPU as the estimates and the tiling
//! model it.
//!
//! A [`Target`] holds the numbers the tiling ([`super::regcmd::tiling`])
//! and its estimate use: core count, MAC throughput, CBUF size and
//! banking, and the DDR bandwidth the cores share. [`Target::rk3588`] is
//! the default configuration; fields are public so experiments can change
//! them. The MAC rates and the CBUF are the public figures (1024 int8
//! MACs per cycle per core at about 1 GHz, 12 banks of 32 KiB); the
//! bandwidth is an assumption of the model, not a measurement.

/// The modelled NPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Name used in reports (`"rk3588"`).
    pub name: &'static str,
    /// Number of NPU cores.
    pub cores: u32,
    /// INT8×INT8 multiply-accumulates per cycle per core.
    pub macs_per_cycle: u32,
    /// f16×f16 multiply-accumulates (f32 accumulation) per cycle per core.
    pub f16_macs_per_cycle: u32,
    /// Core clock in Hz.
    pub clock_hz: u64,
    /// CBUF bytes per core.
    pub cbuf_bytes: u32,
    /// CBUF banks per core.
    pub cbuf_banks: u32,
    /// Bytes per CBUF bank (`cbuf_bytes / cbuf_banks`).
    pub cbuf_bank_bytes: u32,
    /// DDR bandwidth in bytes per second, shared by the cores that have
    /// tasks.
    pub ddr_bytes_per_sec: u64,
}

impl Target {
    /// The RK3588 NPU: 3 cores × 1024 INT8 MAC/cycle (512 f16) at 1 GHz,
    /// 384 KiB CBUF per core in 12 banks of 32 KiB, 25 GB/s DDR shared.
    pub fn rk3588() -> Self {
        Target {
            name: "rk3588",
            cores: 3,
            macs_per_cycle: 1024,
            f16_macs_per_cycle: 512,
            clock_hz: 1_000_000_000,
            cbuf_bytes: 384 * 1024,
            cbuf_banks: 12,
            cbuf_bank_bytes: 32 * 1024,
            ddr_bytes_per_sec: 25_000_000_000,
        }
    }
}

impl Default for Target {
    fn default() -> Self {
        Target::rk3588()
    }
}
