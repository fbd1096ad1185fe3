//! The weights' integrity table: the blob cut into sections of
//! [`SECTION_BYTES`], each with its SHA-256 in the manifest
//! ([`WeightSections`]), and the SHA-256 of those digests in the header.
//!
//! Verifying reads each section once from the mapping, in place, on
//! several threads (one section at a time per thread, taken in order):
//! no copy and no buffer that grows with the blob, and the time of one
//! pass divided by the threads instead of one sequential hash of the
//! whole blob. A mismatch names the section and its byte range.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::manifest::WeightSections;

/// The length of every section but the last.
pub const SECTION_BYTES: usize = 1 << 20;

/// Threads at most for hashing (more than the memory bus feeds gain
/// nothing).
const MAX_THREADS: usize = 8;

/// The table of `weights`, in sections of `section_bytes`.
pub fn table(weights: &[u8], section_bytes: usize) -> WeightSections {
    let n = weights.len().div_ceil(section_bytes);
    let digests = Mutex::new(vec![Vec::new(); n]);
    for_each_section(n, |i| {
        let d = Sha256::digest(section(weights, section_bytes, i)).to_vec();
        digests.lock().expect("no thread panics holding it")[i] = d;
        true
    });
    WeightSections {
        section_bytes: section_bytes as u64,
        sha256: digests.into_inner().expect("no thread panics holding it"),
    }
}

/// The SHA-256 of the table's digests, in order (what the header holds).
pub fn top_digest(t: &WeightSections) -> [u8; 32] {
    let mut h = Sha256::new();
    for d in &t.sha256 {
        h.update(d);
    }
    h.finalize().into()
}

/// Checks `weights` against `t`: the table's shape, then every section.
/// The error names the first bad section.
pub fn verify(weights: &[u8], t: &WeightSections) -> Result<(), String> {
    let size = usize::try_from(t.section_bytes)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| format!("section length {} is not usable", t.section_bytes))?;
    let n = weights.len().div_ceil(size);
    if t.sha256.len() != n || t.sha256.iter().any(|d| d.len() != 32) {
        return Err(format!(
            "the integrity table has {} digests, the {} weight bytes make {n} sections of {size}",
            t.sha256.len(),
            weights.len()
        ));
    }
    let first_bad = AtomicUsize::new(usize::MAX);
    for_each_section(n, |i| {
        if Sha256::digest(section(weights, size, i))[..] == t.sha256[i][..] {
            return true;
        }
        first_bad.fetch_min(i, Ordering::Relaxed);
        false
    });
    match first_bad.into_inner() {
        usize::MAX => Ok(()),
        i => {
            let start = i * size;
            let end = (start + size).min(weights.len());
            Err(format!(
                "SHA-256 mismatch in section {i} of {n} (weights bytes {start}..{end}): the \
                 package is corrupted"
            ))
        }
    }
}

/// Section `i` of `weights`.
fn section(weights: &[u8], size: usize, i: usize) -> &[u8] {
    &weights[i * size..((i + 1) * size).min(weights.len())]
}

/// Runs `f(i)` for `i` in `0..n`, in increasing order per thread, on up to
/// [`MAX_THREADS`] threads; stops handing out sections once `f` returns
/// `false` (also what the cipher of `encryption.rs` runs on).
pub(super) fn for_each_section(n: usize, f: impl Fn(usize) -> bool + Sync) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .clamp(1, MAX_THREADS)
        .min(n);
    let next = AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let work = || {
        while !stop.load(Ordering::Relaxed) {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            if !f(i) {
                stop.store(true, Ordering::Relaxed);
            }
        }
    };
    if threads <= 1 {
        return work();
    }
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_bad_section() {
        let mut blob: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let t = table(&blob, 64);
        assert_eq!(t.sha256.len(), 16);
        assert_eq!(t.sha256[3], Sha256::digest(&blob[192..256]).to_vec());
        verify(&blob, &t).unwrap();
        blob[999] ^= 1;
        blob[200] ^= 1;
        let e = verify(&blob, &t).unwrap_err();
        assert!(
            e.contains("section 3 of 16 (weights bytes 192..256)"),
            "{e}"
        );
        let e = verify(&blob[..900], &t).unwrap_err();
        assert!(e.contains("has 16 digests"), "{e}");
    }
}
