//! Writing a package with its weights streamed from the module's store into
//! the file, never held whole in memory: the bytes [`super::encode_signed_to`]
//! writes for the same manifest and weights, in a bounded resident set.
//!
//! The header names the manifest's digest and the manifest holds the
//! weights' integrity table (and, encrypted, every chunk's nonce and tag),
//! so the front of the file is known only once the weights are written.
//! Its size is known before: the table's digests and the record's nonces
//! and tags have fixed sizes, so a manifest with placeholders of those
//! sizes encodes to as many bytes as the final one. So:
//!
//! 1. the manifest gets placeholders, which fixes where the weights start;
//! 2. the weights are written there one tensor at a time
//!    ([`WeightStore::write_safetensors_to`]: a weight mapped from the
//!    model's file is copied from the mapping, whose pages are then let
//!    go);
//! 3. alongside, on another thread, each 64 MiB window of the blob, once
//!    written and flushed, is encrypted in place through a mapping of the
//!    file (`--encrypt`) and hashed into the integrity table (its sections
//!    on all cores), and its pages are let go (they stay in the page
//!    cache), so the hashing overlaps the writing;
//! 4. the final manifest, of the placeholders' size, and the header are
//!    written in front, and the signature trailer (`--sign`) after.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use prost::Message;
use slmcc_ir::weights::WeightStore;

use super::encryption::{self, WeightKey};
use super::progress::Progress;
use super::sections::{self, SECTION_BYTES};
use super::{front_matter, weights_offset, Manifest, NpuWeights, WeightSections, WEIGHTS_ALIGN};

/// The blob is encrypted, hashed and let go this many bytes at a time.
const WINDOW_BYTES: usize = 64 * SECTION_BYTES;

/// What [`write_streamed`] wrote.
#[derive(Debug)]
pub struct Written {
    /// The manifest as written: its integrity table, and the encryption
    /// record when encrypted.
    pub manifest: Manifest,
    /// The file's length.
    pub file_bytes: usize,
    /// The weights blob's length.
    pub weights_bytes: usize,
}

/// Writes the package of `manifest` and `weights` into `file` (emptied
/// first), the weights encrypted with `encrypt` and the package signed by
/// `signer` when given (see the module doc). An error is an I/O error, or a
/// weight without data.
pub fn write_streamed(
    file: &mut File,
    manifest: Manifest,
    weights: &WeightStore,
    encrypt: Option<&WeightKey>,
    signer: Option<&ed25519_dalek::SigningKey>,
) -> std::io::Result<Written> {
    write_in_windows(file, manifest, weights, (encrypt, signer), WINDOW_BYTES)
}

/// [`write_streamed`], sealing `window` bytes (a multiple of the
/// sections and the chunks) at a time.
fn write_in_windows(
    file: &mut File,
    mut manifest: Manifest,
    weights: &WeightStore,
    (encrypt, signer): (Option<&WeightKey>, Option<&ed25519_dalek::SigningKey>),
    window: usize,
) -> std::io::Result<Written> {
    debug_assert!(
        window.is_multiple_of(SECTION_BYTES) && window.is_multiple_of(encryption::CHUNK_BYTES)
    );
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let layout = weights
        .safetensors_layout(WEIGHTS_ALIGN, true)
        .map_err(|e| invalid(e.to_string()))?;
    let total = layout.len;
    let sections = total.div_ceil(SECTION_BYTES);
    // Encrypted, the NPU weights' statistics move into the record.
    let npu = match (encrypt, manifest.npu_weights.is_empty()) {
        (Some(_), false) => NpuWeights {
            weights: std::mem::take(&mut manifest.npu_weights),
        }
        .encode_to_vec(),
        _ => Vec::new(),
    };
    manifest.weight_sections = Some(WeightSections {
        section_bytes: SECTION_BYTES as u64,
        sha256: vec![vec![0; 32]; sections],
    });
    if let Some(key) = encrypt {
        let blank = vec![Default::default(); total.div_ceil(encryption::CHUNK_BYTES)];
        manifest.encryption = Some(encryption::record(key, &blank, &npu));
    }
    let manifest_len = manifest.encoded_len();
    let woff = weights_offset(manifest_len);

    let started = std::time::Instant::now();
    file.set_len(0)?;
    // The file has its final blob length first, so that one mapping
    // covers every window the sealing thread reads.
    file.set_len((woff + total) as u64)?;
    // SAFETY: this process created the file and is its only writer: the
    // writing below never touches a window once it is reported flushed,
    // and only then does the sealing thread use it; the mapping is
    // dropped before the function returns.
    let map = unsafe { memmap2::MmapMut::map_mut(&*file)? };
    file.seek(SeekFrom::Start(woff as u64))?;
    let (report, flushed) = std::sync::mpsc::channel::<usize>();
    let (sealed, digests) = std::thread::scope(|s| {
        let sealer = s.spawn(move || seal_windows(map, (woff, total), window, encrypt, flushed));
        let written = (|| {
            let mut w = Flushed {
                inner: BufWriter::with_capacity(1 << 20, &mut *file),
                written: 0,
                window,
                report: &report,
                progress: Progress::on_terminal(&layout),
            };
            weights.write_safetensors_to(&layout, &mut w, true)?;
            w.inner.flush()?;
            let _ = report.send(w.written);
            if let Some(p) = &mut w.progress {
                p.finish();
            }
            std::io::Result::Ok(w.written)
        })();
        drop(report);
        let sealed = sealer.join().expect("the sealing thread does not panic");
        match written {
            Ok(n) if n == total => Ok(sealed),
            Ok(n) => Err(invalid(format!(
                "the weights were {n} bytes, their layout {total}"
            ))),
            Err(e) => Err(e),
        }
    })?;
    tracing::debug!(
        "weights: {total} bytes written, {}hashed alongside, in {:.2} s",
        if encrypt.is_some() {
            "encrypted and "
        } else {
            ""
        },
        started.elapsed().as_secs_f64()
    );

    let table = WeightSections {
        section_bytes: SECTION_BYTES as u64,
        sha256: digests,
    };
    let top = sections::top_digest(&table);
    manifest.weight_sections = Some(table);
    if let Some(key) = encrypt {
        manifest.encryption = Some(encryption::record(key, &sealed, &npu));
    }
    let m = manifest.encode_to_vec();
    if m.len() != manifest_len {
        return Err(invalid(format!(
            "the manifest encodes to {} bytes, its placeholder to {manifest_len}",
            m.len()
        )));
    }
    let front = front_matter(&m, total, &top, signer);
    debug_assert_eq!(front.head.len(), woff);
    file.write_all_at(&front.head, 0)?;
    let mut file_bytes = woff + total;
    if let Some(t) = &front.trailer {
        file.write_all_at(t, file_bytes as u64)?;
        file_bytes += t.len();
    }
    Ok(Written {
        manifest,
        file_bytes,
        weights_bytes: total,
    })
}

/// A writer that reports, each time it has written past another multiple
/// of `window` bytes, how many bytes it has written and flushed to the
/// file (and updates the progress line, if any).
struct Flushed<'a, W: Write> {
    inner: W,
    written: usize,
    window: usize,
    report: &'a std::sync::mpsc::Sender<usize>,
    progress: Option<Progress>,
}

impl<W: Write> Write for Flushed<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        let before = self.written;
        self.written += n;
        if self.written / self.window > before / self.window {
            self.inner.flush()?;
            let _ = self.report.send(self.written);
            if let Some(p) = &mut self.progress {
                p.update(self.written);
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Encrypts (with `encrypt`) and hashes the blob of `total` bytes at
/// `woff` of `map`, `window` bytes at a time as `flushed` reports the bytes
/// written, and lets each window's pages go (they stay in the page
/// cache). Returns the chunks' seals and the sections' digests, of the
/// windows written before the reports stopped.
fn seal_windows(
    mut map: memmap2::MmapMut,
    (woff, total): (usize, usize),
    window: usize,
    encrypt: Option<&WeightKey>,
    flushed: std::sync::mpsc::Receiver<usize>,
) -> (Vec<encryption::SealedChunk>, Vec<Vec<u8>>) {
    let mut sealed = Vec::new();
    let mut digests = Vec::with_capacity(total.div_ceil(SECTION_BYTES));
    let mut at = 0;
    for upto in flushed {
        while at < total && (at + window <= upto || upto == total) {
            let end = (at + window).min(total);
            let window = &mut map[woff + at..woff + end];
            if let Some(key) = encrypt {
                let first = (at / encryption::CHUNK_BYTES) as u64;
                sealed.extend(encryption::encrypt_chunks(key, window, first, total as u64));
            }
            digests.extend(sections::table(window, SECTION_BYTES).sha256);
            // SAFETY: a shared mapping of a file: dropped pages keep their
            // (written) contents in the page cache and are read again if
            // touched; no reference into them is held.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, woff + at, end - at)
            };
            at = end;
        }
    }
    (sealed, digests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::Tensor;

    fn store() -> WeightStore {
        let mut w = WeightStore::new();
        // Three sections and a ragged tail: several windows when a window
        // is one section.
        let n = (3 * SECTION_BYTES + 12345) / 4;
        w.insert(
            "a",
            Tensor::from_f32(vec![n], (0..n).map(|i| i as f32).collect()),
        );
        w.insert("b", Tensor::from_f32(vec![3, 5], vec![0.5; 15]));
        w
    }

    fn manifest() -> Manifest {
        Manifest {
            module: "m".into(),
            entry: "main".into(),
            ..Default::default()
        }
    }

    /// The streamed file equals `encode_signed_to`'s bytes, plain, signed
    /// and encrypted.
    #[test]
    fn streams_the_bytes_the_encoder_writes() {
        let weights = store();
        let blob = super::super::weights_blob(&weights).unwrap();
        let signer = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        let key = WeightKey::from_bytes([9; 32]);
        let cases = [(false, false), (false, true), (true, true)];
        // One section per window: the blob's four windows are sealed while
        // the later ones are still being written.
        for ((encrypt, sign), window) in cases
            .into_iter()
            .flat_map(|c| [(c, WINDOW_BYTES), (c, SECTION_BYTES)])
        {
            let signer = sign.then_some(&signer);
            let mut plain = blob.clone();
            let mut m = manifest();
            if encrypt {
                m.encryption = Some(encryption::encrypt_in_place(&key, &mut plain, &[]));
            }
            let mut want = Vec::new();
            super::super::encode_signed_to(&mut want, &m, &plain, signer).unwrap();
            let path = std::env::temp_dir().join(format!(
                "slmcc-stream-{}-{encrypt}-{sign}",
                std::process::id()
            ));
            let mut f = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .unwrap();
            let written = write_in_windows(
                &mut f,
                manifest(),
                &weights,
                (encrypt.then_some(&key), signer),
                window,
            )
            .unwrap();
            let got = std::fs::read(&path).unwrap();
            let _ = std::fs::remove_file(&path);
            assert_eq!(written.file_bytes, got.len());
            assert_eq!(written.weights_bytes, blob.len());
            assert!(
                got == want,
                "encrypt {encrypt}, sign {sign}, window {window}: the bytes differ"
            );
        }
    }
}
