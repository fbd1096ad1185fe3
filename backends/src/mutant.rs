//! Kernel mutants (cargo feature `fault-injection`, for tests; a build
//! without it never reads the variable): small changes to the code the
//! backends generate or run, the regressions the golden checks and the
//! packages' kernel fingerprints must catch.
//!
//! `SLMCC_KERNEL_MUTANT=NAME` turns one on:
//! - `rms-norm-eps`: the cpu `rms_norm` and `add_rms_norm` kernels add
//!   twice the epsilon;
//! - `exp-coefficient`: the fast vector `exp` (softmax, attention,
//!   sigmoid; the host attention's too) uses 0.501 for its `x²`
//!   coefficient instead of 0.5;
//! - `npu-rounding`: the NPU products round the activations' codes down
//!   instead of to nearest even (one quantization step on about half of
//!   them).

/// The environment variable naming the mutant.
pub const KERNEL_MUTANT_ENV: &str = "SLMCC_KERNEL_MUTANT";

/// The mutants there are.
pub const MUTANTS: &[&str] = &["rms-norm-eps", "exp-coefficient", "npu-rounding"];

/// Whether mutant `name` is on: never in a build without the
/// `fault-injection` feature.
pub fn active(name: &str) -> bool {
    if !cfg!(feature = "fault-injection") {
        return false;
    }
    debug_assert!(MUTANTS.contains(&name), "unknown mutant {name}");
    std::env::var(KERNEL_MUTANT_ENV).is_ok_and(|v| v == name)
}

/// The mutant that is on, if any.
pub fn current() -> Option<&'static str> {
    MUTANTS.iter().copied().find(|m| active(m))
}

/// Fails on a mutant name that is not one of [`MUTANTS`] (a typo would
/// otherwise test nothing).
pub fn check_env() -> Result<(), String> {
    if !cfg!(feature = "fault-injection") {
        return Ok(());
    }
    match std::env::var(KERNEL_MUTANT_ENV) {
        Ok(v) if !v.is_empty() && !MUTANTS.contains(&v.as_str()) => Err(format!(
            "{KERNEL_MUTANT_ENV}={v}: expected one of {}",
            MUTANTS.join(", ")
        )),
        _ => Ok(()),
    }
}
