//! Making freshly written code visible to instruction fetch.
//!
//! x86-64 keeps instruction and data caches coherent. On aarch64 the data
//! cache lines holding the new code are cleaned to the point of
//! unification and the instruction cache lines invalidated, with the
//! barriers the Arm Architecture Reference Manual prescribes for
//! self-modifying code (B2.4.4): `dc cvau` per line, `dsb ish`, `ic ivau`
//! per line, `dsb ish`, `isb`. Line sizes come from `CTR_EL0`.

/// Flushes `len` bytes of code at `start` (a no-op off aarch64).
pub fn flush_icache(start: *const u8, len: usize) {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: cache maintenance by address on mapped memory; no data is
    // changed.
    unsafe {
        let ctr: u64;
        std::arch::asm!("mrs {}, ctr_el0", out(reg) ctr);
        let dline = 4usize << ((ctr >> 16) & 0xf);
        let iline = 4usize << (ctr & 0xf);
        let (begin, end) = (start as usize, start as usize + len);
        let mut a = begin & !(dline - 1);
        while a < end {
            std::arch::asm!("dc cvau, {}", in(reg) a);
            a += dline;
        }
        std::arch::asm!("dsb ish");
        let mut a = begin & !(iline - 1);
        while a < end {
            std::arch::asm!("ic ivau, {}", in(reg) a);
            a += iline;
        }
        std::arch::asm!("dsb ish", "isb");
    }
    #[cfg(not(target_arch = "aarch64"))]
    let _ = (start, len);
}
