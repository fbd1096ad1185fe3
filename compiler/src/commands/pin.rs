//! `--pin-cores`: the cores the process's threads may run on.
//!
//! On the RK3588 the four Cortex-A76 cores are 4-7 (0-3 are A55s), so
//! `--pin-cores 4-7` keeps the kernels and the GEMM's workers off the small
//! cores. The mask is set on the process before any worker thread is
//! spawned (the pool spawns them when kernels are compiled or loaded), so
//! every thread inherits it.

#[cfg(not(target_os = "linux"))]
use anyhow::anyhow;
#[cfg(target_os = "linux")]
use anyhow::bail;

/// A set of core numbers below 64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cores(pub u64);

impl Cores {
    /// Parses `4-7`, `0,2,4` or `0-1,4-7`.
    pub fn parse(text: &str) -> Result<Cores, String> {
        let mut mask = 0u64;
        for part in text.split(',') {
            let core = |s: &str| -> Result<u32, String> {
                s.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&c| c < 64)
                    .ok_or_else(|| format!("`{s}` is not a core number below 64"))
            };
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (core(a)?, core(b)?),
                None => (core(part)?, core(part)?),
            };
            if lo > hi {
                return Err(format!("`{part}`: the range runs backwards"));
            }
            for c in lo..=hi {
                mask |= 1 << c;
            }
        }
        Ok(Cores(mask))
    }

    /// Restricts this process (and the threads it spawns from now on) to
    /// these cores.
    pub fn pin(self) -> anyhow::Result<()> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes
            // bits below CPU_SETSIZE (64 < 1024); sched_setaffinity reads
            // the set we pass by pointer with its size.
            let rc = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for c in 0..64 {
                    if self.0 & (1 << c) != 0 {
                        libc::CPU_SET(c, &mut set);
                    }
                }
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            if rc != 0 {
                bail!(
                    "--pin-cores: cannot pin to cores {:#x}: {}",
                    self.0,
                    std::io::Error::last_os_error()
                );
            }
            tracing::info!(cores = format!("{:#x}", self.0), "pinned to cores");
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        Err(anyhow!("--pin-cores is supported on Linux only"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_lists() {
        assert_eq!(Cores::parse("4-7"), Ok(Cores(0xf0)));
        assert_eq!(Cores::parse("0,2"), Ok(Cores(0b101)));
        assert_eq!(Cores::parse("0-1,4-5"), Ok(Cores(0x33)));
        assert!(Cores::parse("7-4").unwrap_err().contains("backwards"));
        assert!(Cores::parse("64").unwrap_err().contains("below 64"));
        assert!(Cores::parse("a").is_err());
    }

    #[test]
    fn pinning_to_the_core_we_run_on_succeeds() {
        // Every machine has core 0 in some process's set; ask for all of
        // them so the test cannot starve itself.
        Cores(u64::MAX).pin().unwrap();
    }
}
