//! The memory budget: how many bytes one run may allocate, checked before
//! anything is allocated, so that a model whose tensors or plan exceed the
//! machine's memory is refused with an error naming the tensor instead of
//! aborting in the allocator.
//!
//! `SLMCC_MEMORY_BUDGET` sets it: bytes, or a number with a `K`, `M`, `G`
//! or `T` suffix (powers of 1024). The default is the memory the kernel
//! reports available (`MemAvailable` in `/proc/meminfo`); where there is no
//! such file the budget is unlimited.

use std::sync::OnceLock;

use slmcc_ir::plan::{MemoryPlan, Region};

/// The budget and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    pub bytes: u64,
    pub source: &'static str,
}

/// The process's budget, read once; `None` when unlimited.
pub fn budget() -> Option<Budget> {
    static BUDGET: OnceLock<Option<Budget>> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        if let Ok(text) = std::env::var("SLMCC_MEMORY_BUDGET") {
            match parse_bytes(&text) {
                Some(bytes) => {
                    return Some(Budget {
                        bytes,
                        source: "SLMCC_MEMORY_BUDGET",
                    })
                }
                None => tracing::warn!(
                    "SLMCC_MEMORY_BUDGET={text:?} is not a size (bytes, or a number with K, M, G \
                     or T); using the available memory"
                ),
            }
        }
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let kib = meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix("MemAvailable:")?;
            rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })?;
        Some(Budget {
            bytes: kib.saturating_mul(1024),
            source: "the available memory; SLMCC_MEMORY_BUDGET sets it",
        })
    })
}

/// `123`, `512M`, `1.5G` (powers of 1024).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, scale) = match text.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => {
            let power = "KMGT".find(c.to_ascii_uppercase())? as i32 + 1;
            (&text[..i], 1024f64.powi(power))
        }
        _ => (text, 1.0),
    };
    let value = number.trim().parse::<f64>().ok()? * scale;
    (value.is_finite() && value >= 0.0 && value < u64::MAX as f64).then_some(value as u64)
}

/// `bytes` in GiB or MiB, for messages.
pub fn human(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes as f64 >= 1024.0 * MIB {
        format!("{:.1} GiB", bytes as f64 / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

/// Fails when `bytes` (what `what` would take) exceed `budget`.
pub fn check(what: &str, bytes: u64, budget: Option<Budget>) -> Result<(), String> {
    match budget {
        Some(b) if bytes > b.bytes => Err(format!(
            "{what} would take {}, more than the memory budget of {} ({})",
            human(bytes),
            human(b.bytes),
            b.source
        )),
        _ => Ok(()),
    }
}

/// Fails when the regions a run of `plan` allocates (all but the weights,
/// which are mapped or counted with the module) exceed `budget`, naming the
/// largest tensor.
pub fn check_plan(plan: &MemoryPlan, budget: Option<Budget>) -> Result<(), String> {
    let allocated = [
        Region::Arena,
        Region::Constants,
        Region::KvCache,
        Region::Scratch,
    ];
    let need = allocated
        .iter()
        .fold(0u64, |a, &r| a.saturating_add(plan.regions.get(r)));
    let largest = plan
        .tensors
        .iter()
        .filter(|t| allocated.contains(&t.region))
        .max_by_key(|t| t.size);
    let what = match largest {
        Some(t) => format!(
            "its memory plan (largest tensor %{}: {} in the {})",
            t.name,
            human(t.size),
            t.region
        ),
        None => "its memory plan".to_string(),
    };
    check(&what, need, budget)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("512M"), Some(512 << 20));
        assert_eq!(parse_bytes("1.5g"), Some(3 << 29));
        assert_eq!(parse_bytes(" 2T "), Some(2 << 40));
        for bad in ["", "G", "-1G", "12X", "one", "1e30T"] {
            assert_eq!(parse_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn over_budget_names_the_thing_and_the_budget() {
        let b = Some(Budget {
            bytes: 1 << 30,
            source: "test",
        });
        check("%y", 1 << 30, b).unwrap();
        check("%y", 1 << 40, None).unwrap();
        assert_eq!(
            check("%y", 64 << 30, b).unwrap_err(),
            "%y would take 64.0 GiB, more than the memory budget of 1.0 GiB (test)"
        );
    }
}
