//! Target description of the modelled RK3588 NPU.
//!
//! A [`Target`] holds the numbers the tiler, the cost model and the
//! simulator use: core count, MAC throughput, CBUF size and banking, DDR
//! bandwidth (shared by the cores) and the fixed latencies of the timing
//! model in `docs/NPU_ISA.md`. [`Target::rk3588`] is the default
//! configuration; fields are public so experiments can change them.
//! Nothing here is measured on hardware: these are the model's parameters.

/// The modelled NPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Name used in reports (`"rk3588"`).
    pub name: &'static str,
    /// Number of NPU cores; each has one DMA queue and one compute queue.
    pub cores: u32,
    /// INT8×INT8 multiply-accumulates per cycle per core (INT4×INT8 counts
    /// the same MACs).
    pub macs_per_cycle: u32,
    /// f16×f16 multiply-accumulates (f32 accumulation) per cycle per core
    /// (`mm.f16`, the attention kernel's products).
    pub f16_macs_per_cycle: u32,
    /// Core clock in Hz.
    pub clock_hz: u64,
    /// CBUF bytes per core.
    pub cbuf_bytes: u32,
    /// CBUF banks per core.
    pub cbuf_banks: u32,
    /// Bytes per CBUF bank (`cbuf_bytes / cbuf_banks`).
    pub cbuf_bank_bytes: u32,
    /// DDR bandwidth in bytes per second, shared by the cores whose DMA
    /// queues are active.
    pub ddr_bytes_per_sec: u64,
    /// Fixed latency added to every DMA transfer, in cycles.
    pub dma_latency_cycles: u64,
    /// Fixed issue overhead of every compute instruction (matmul, epilogue,
    /// element-wise, reduce), in cycles.
    pub compute_issue_cycles: u64,
    /// Elements per cycle of the vector unit (epilogue, element-wise,
    /// reduce).
    pub vector_lanes: u32,
    /// Cycles of a semaphore signal or wait (after the wait is satisfied).
    pub sem_cycles: u64,
    /// Counting semaphores per core, shared by its two queues.
    pub semaphores: u8,
}

impl Target {
    /// The RK3588 NPU model: 3 cores × 1024 INT8 MAC/cycle (512 f16) at 1 GHz,
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
            dma_latency_cycles: 64,
            compute_issue_cycles: 16,
            vector_lanes: 64,
            sem_cycles: 1,
            semaphores: 8,
        }
    }

    /// The same target with another DDR bandwidth (bytes per second).
    pub fn with_ddr_bandwidth(mut self, bytes_per_sec: u64) -> Self {
        self.ddr_bytes_per_sec = bytes_per_sec;
        self
    }

    /// The same target with a CBUF of `banks` banks of `bank_bytes` bytes
    /// per core (small CBUFs force many tiles in tests).
    pub fn with_cbuf(mut self, banks: u32, bank_bytes: u32) -> Self {
        self.cbuf_banks = banks;
        self.cbuf_bank_bytes = bank_bytes;
        self.cbuf_bytes = banks.saturating_mul(bank_bytes);
        self
    }

    /// Cycles of a DMA transfer of `bytes` when `active_cores` cores share
    /// the DDR bandwidth (the timing model's `dma.load`/`dma.store` cost):
    /// `latency + ceil(bytes · active · clock_hz / ddr_bytes_per_sec)`.
    pub fn dma_cycles(&self, bytes: u64, active_cores: u32) -> u64 {
        let num = u128::from(bytes) * u128::from(active_cores.max(1)) * u128::from(self.clock_hz);
        self.dma_latency_cycles
            .saturating_add(ceil_div(num, self.ddr_bytes_per_sec.into()))
    }

    /// Cycles of a vector-unit instruction over `elements` element passes:
    /// `issue + ceil(elements / vector_lanes)`.
    pub fn vector_cycles(&self, elements: u64) -> u64 {
        self.compute_issue_cycles
            .saturating_add(ceil_div(elements.into(), self.vector_lanes.into()))
    }

    /// Cycles of a matmul tile of `macs` multiply-accumulates at
    /// `per_cycle` of them per cycle: `issue + ceil(macs / per_cycle)`.
    pub fn mac_cycles(&self, macs: u64, per_cycle: u32) -> u64 {
        self.compute_issue_cycles
            .saturating_add(ceil_div(macs.into(), per_cycle.into()))
    }

    /// Peak INT8 MACs per second over all cores.
    pub fn peak_macs_per_sec(&self) -> u64 {
        u64::from(self.cores) * u64::from(self.macs_per_cycle) * self.clock_hz
    }
}

/// `ceil(a / b)` (`b` taken as at least 1), saturating at `u64::MAX`.
fn ceil_div(a: u128, b: u128) -> u64 {
    a.div_ceil(b.max(1)).min(u128::from(u64::MAX)) as u64
}

impl Default for Target {
    fn default() -> Self {
        Target::rk3588()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rk3588_numbers() {
        let t = Target::rk3588();
        assert_eq!(t.cbuf_banks * t.cbuf_bank_bytes, t.cbuf_bytes);
        assert_eq!(t.cbuf_bytes, 393_216);
        // 3 × 1024 MAC × 1 GHz = 3.072 TMAC/s ≈ 6 TOPS.
        assert_eq!(t.peak_macs_per_sec(), 3_072_000_000_000);
        assert_eq!(t.clone().with_ddr_bandwidth(10).ddr_bytes_per_sec, 10);
        assert_eq!(t.with_cbuf(6, 1024).cbuf_bytes, 6144);
    }
}
