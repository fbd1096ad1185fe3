//! `slmcc delta` and `slmcc patch`: a package update as the bytes that
//! differ (`slmcc_runtime::package::delta`), and NEW rebuilt from OLD and
//! that update, verified before it replaces anything.

use std::io::Write as _;

use anyhow::{anyhow, Context};
use slmcc_runtime::package::{delta, signature, Package};

use super::opt::write_through_partial;
use crate::cli::{DeltaArgs, PatchArgs};
use crate::exit::CmdResult;

/// Writes the delta from OLD to NEW and prints its size against NEW's.
pub fn make(args: DeltaArgs) -> CmdResult {
    let old = Package::open(&args.old)?;
    let new = Package::open(&args.new)?;
    let stats = write_through_partial(&args.output, |f, _| {
        delta::make(&old, &new, f).map_err(|e| anyhow!("{}: {e}", args.output.display()))
    })?;
    let new_bytes = new.file().len();
    println!(
        "wrote {}: {} bytes, {:.2}% of {} ({} bytes); weight sections: {} copied, {} changed \
         (xor), {} new; {} bytes before zstd",
        args.output.display(),
        stats.file_bytes,
        100.0 * stats.file_bytes as f64 / new_bytes.max(1) as f64,
        args.new.display(),
        new_bytes,
        stats.copied,
        stats.xored,
        stats.literal,
        stats.body_bytes
    );
    Ok(())
}

/// Rebuilds NEW from OLD and the delta into a temporary file, checks its
/// digest, opens it as a package (its digests and signature; with
/// `--trust`, its signer) and only then renames it to `-o` (which may be
/// OLD itself).
pub fn apply(args: PatchArgs) -> CmdResult {
    let trusted = match &args.trust {
        Some(key) => Some(signature::read_verifying_key(key).map_err(|e| anyhow!(e))?),
        None => None,
    };
    let old = map(&args.old)?;
    let update = map(&args.delta)?;
    let at = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", args.delta.display());
    let n = write_through_partial(&args.output, |f, tmp| {
        let n = delta::apply(&old, &update, f).map_err(|e| at(&e))?;
        f.flush()
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        let pkg = Package::open(tmp)
            .map_err(|e| at(&format!("the rebuilt package does not verify: {e}")))?;
        if let Some(key) = &trusted {
            pkg.check_signer(key)
                .map_err(|e| at(&format!("the rebuilt package is refused: {e}")))?;
        }
        Ok(n)
    })?;
    println!("wrote {}: {n} bytes, verified", args.output.display());
    Ok(())
}

/// `path` mapped read-only (OLD may be a package of gigabytes; `-o` may
/// replace it while mapped: the rename leaves the mapped file intact).
fn map(path: &std::path::Path) -> anyhow::Result<memmap2::Mmap> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    // SAFETY: read-only; a file changed by another process while mapped is
    // outside what we defend against (as for packages).
    unsafe { memmap2::Mmap::map(&file) }.with_context(|| format!("cannot read {}", path.display()))
}
