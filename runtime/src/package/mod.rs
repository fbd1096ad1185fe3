//! The deployable package (`.slmpkg`): writing and loading.
//!
//! A package is one file:
//!
//! ```text
//! offset  bytes  field
//!      0      7  magic "SLMPKG\0"
//!      7      1  zero
//!      8      4  format version (u32 little-endian) = FORMAT_VERSION
//!     12      4  header length (u32) = 128
//!     16      8  manifest offset (u64) = 128
//!     24      8  manifest length (u64)
//!     32      8  weights offset (u64): the manifest's end rounded up to 64
//!     40      8  weights length (u64)
//!     48     32  SHA-256 of the manifest bytes
//!     80     32  SHA-256 of the weights' integrity table: the SHA-256
//!                digests of the weights' sections, concatenated in order
//!    112      4  signature trailer length (u32): 0 unsigned, or
//!                [`signature::TRAILER_BYTES`]
//!    116     12  zero
//!    128         the manifest (protobuf, [`Manifest`]), zeros up to the
//!                weights offset, then the weights (safetensors layout, its
//!                data 64-byte aligned in the file), then the signature
//!                trailer if signed; nothing after it
//! ```
//!
//! The manifest holds the version set, the compile options, and one entry
//! per bucket graph: the graph as textual IR with its bucket record and
//! memory plan, plus, when compiled for the board, an aarch64 object with
//! its kernels ([`manifest`]). The host runtime compiles the kernels from
//! the IR at load (JIT), so a host package carries none.
//!
//! The weights are cut into sections of [`sections::SECTION_BYTES`], whose
//! digests the manifest holds ([`WeightSections`]; `sections.rs`).
//!
//! [`Package::open`] checks everything before anything is used: the magic,
//! the format version, the lengths against the file size, that the reserved
//! and padding bytes are zero, the manifest's digest, the integrity table
//! against the header, every weight section against the table (in place
//! in the mapping, on several threads), and the version set (a runtime ABI
//! other than [`RUNTIME_ABI`] is refused), and a signed package's signature
//! ([`signature`]; whether the signer is trusted is the caller's question,
//! [`Package::check_signer`]): one flipped byte anywhere in the
//! file is an error naming the file and the part that failed (for the
//! weights, the section and its byte range).
//! An encrypted package (`compile --encrypt`, [`encryption`]) is this
//! layout with the weights blob AES-256-GCM encrypted in place, the
//! manifest's `encryption` record holding the nonces and tags; the
//! digests are over the ciphertext, so it verifies without the key, and
//! [`Package::decrypt`] must run before [`Package::module`].
//! [`encode`] is deterministic: the same manifest and weights give the same
//! bytes (no timestamps; prost encodes fields in tag order).

pub mod delta;
pub mod encryption;
pub mod manifest;
pub mod progress;
pub mod sections;
pub mod signature;
pub mod stream;

use std::fmt;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use prost::Message;
use sha2::{Digest, Sha256};
use slmcc_ir::text::{parse_module, print_module};
use slmcc_ir::{Module, WeightStore};

pub use manifest::{
    BucketEntry, KernelObject, KernelSymbol, Manifest, NpuWeights, TargetOptions, VersionSet,
    WeightSections,
};

/// The first bytes of every package.
pub const MAGIC: [u8; 7] = *b"SLMPKG\0";
/// The layout version this runtime writes and reads. Version 2 was this
/// layout without signatures; it is not read, because nothing in an
/// unsigned package covers the header, so a flipped bit turning 3 into 2
/// would load unnoticed.
pub const FORMAT_VERSION: u32 = 3;
/// The runtime ABI this runtime implements (see [`VersionSet::runtime_abi`]).
pub const RUNTIME_ABI: u32 = 2;
/// The fixed header's length.
pub const HEADER_BYTES: usize = 128;
/// Alignment of the weights section (and of the weights' data inside it).
pub const WEIGHTS_ALIGN: usize = 64;
/// A package whose graphs run on the CPU kernels alone.
pub const TARGET_CPU: &str = "cpu";
/// A package for the RK3588: the W8A8 products as the NPU's register
/// programs (the placement of `slmcc_ir::placement`), the rest on its CPU
/// cores. On the host it runs on the NPU's functional model or on the CPU
/// kernels alone.
pub const TARGET_RK3588: &str = "rk3588";
/// [`VersionSet::isa`] of a package without kernels, compiled at load.
pub const ISA_HOST_JIT: &str = "host-jit";

/// The part of a package a failure is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Reading the file at all.
    File,
    /// The fixed header: magic, format version, lengths, reserved bytes.
    Header,
    /// The manifest: its digest, its decoding, its bucket graphs.
    Manifest,
    /// The weights: their digest, their safetensors header.
    Weights,
    /// The version set: what the package needs of the runtime.
    Versions,
    /// The signature, or who made it.
    Signature,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::File => "file",
            Part::Header => "header",
            Part::Manifest => "manifest",
            Part::Weights => "weights",
            Part::Versions => "version set",
            Part::Signature => "signature",
        })
    }
}

/// A package that cannot be loaded, naming the file and the part at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {part}: {message}", path.display())]
pub struct PackageError {
    pub path: PathBuf,
    pub part: Part,
    pub message: String,
}

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn align_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// The package file of `manifest` and the weights blob `weights` (a
/// safetensors blob whose data starts at a multiple of [`WEIGHTS_ALIGN`],
/// as [`WeightStore::to_safetensors`] writes with that alignment).
pub fn encode(manifest: &Manifest, weights: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_to(&mut out, manifest, weights).expect("writing to memory");
    out
}

/// `manifest` with the integrity table of `weights` (what [`encode_to`]
/// writes; sealing first tells the manifest's final size).
pub fn seal(manifest: Manifest, weights: &[u8]) -> Manifest {
    Manifest {
        weight_sections: Some(sections::table(weights, sections::SECTION_BYTES)),
        ..manifest
    }
}

/// [`encode`] into a writer (a file, without a copy of the weights in
/// memory); returns the package's size in bytes. A manifest without an
/// integrity table is [`seal`]ed here; one with a table is written as it
/// is (the table must be that of `weights`, or the package will not load).
pub fn encode_to(w: &mut dyn Write, manifest: &Manifest, weights: &[u8]) -> std::io::Result<usize> {
    encode_signed_to(w, manifest, weights, None)
}

/// [`encode_to`], signed with `signer` when one is given (the trailer of
/// [`signature`] after the weights).
pub fn encode_signed_to(
    w: &mut dyn Write,
    manifest: &Manifest,
    weights: &[u8],
    signer: Option<&ed25519_dalek::SigningKey>,
) -> std::io::Result<usize> {
    let sealed;
    let manifest = match manifest.weight_sections {
        Some(_) => manifest,
        None => {
            sealed = seal(manifest.clone(), weights);
            &sealed
        }
    };
    let table = manifest.weight_sections.as_ref().expect("sealed above");
    let front = front_matter(
        &manifest.encode_to_vec(),
        weights.len(),
        &sections::top_digest(table),
        signer,
    );
    w.write_all(&front.head)?;
    w.write_all(weights)?;
    if let Some(t) = &front.trailer {
        w.write_all(t)?;
    }
    Ok(front.head.len() + weights.len() + front.trailer.as_ref().map_or(0, |t| t.len()))
}

/// What surrounds a package's weights: the header and the manifest, padded
/// to where the weights start, and the signature trailer after them.
pub(crate) struct FrontMatter {
    /// Header, manifest and padding: the weights start at `head.len()`.
    pub head: Vec<u8>,
    pub trailer: Option<[u8; signature::TRAILER_BYTES]>,
}

/// The [`FrontMatter`] of a package whose encoded manifest is `m` and whose
/// weights of `weights_len` bytes have the integrity table's top digest
/// `top`, signed by `signer` when one is given.
pub(crate) fn front_matter(
    m: &[u8],
    weights_len: usize,
    top: &[u8; 32],
    signer: Option<&ed25519_dalek::SigningKey>,
) -> FrontMatter {
    let woff = weights_offset(m.len());
    let mut head = Vec::with_capacity(woff);
    head.extend_from_slice(&MAGIC);
    head.push(0);
    head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    head.extend_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    for n in [HEADER_BYTES, m.len(), woff, weights_len] {
        head.extend_from_slice(&(n as u64).to_le_bytes());
    }
    head.extend_from_slice(&sha256(m));
    head.extend_from_slice(top);
    let trailer_len = if signer.is_some() {
        signature::TRAILER_BYTES
    } else {
        0
    };
    head.extend_from_slice(&(trailer_len as u32).to_le_bytes());
    head.resize(HEADER_BYTES, 0);
    let trailer = signer.map(|key| signature::trailer(&head, key));
    head.extend_from_slice(m);
    head.resize(woff, 0);
    FrontMatter { head, trailer }
}

/// Where the weights start after a manifest of `manifest_len` bytes.
pub(crate) fn weights_offset(manifest_len: usize) -> usize {
    align_up(HEADER_BYTES + manifest_len, WEIGHTS_ALIGN)
}

/// The SHA-256 of a file's contents, read in chunks.
pub fn sha256_file(path: &Path) -> std::io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut h)?;
    Ok(h.finalize().into())
}

/// The weights blob of a module, as a package carries it.
pub fn weights_blob(weights: &WeightStore) -> Result<Vec<u8>, String> {
    weights
        .to_safetensors_region(WEIGHTS_ALIGN)
        .map_err(|e| e.to_string())
}

/// The manifest entry of bucket graph `graph` of `module`: the graph with
/// the module's weight declarations, its bucket record and its plan, as
/// text. Fails unless the graph is a bucket graph with a memory plan.
pub fn bucket_entry(module: &Module, graph: &str) -> Result<BucketEntry, String> {
    let g = module
        .graph(graph)
        .ok_or_else(|| format!("no graph @{graph}"))?;
    let info = module.buckets.get(graph).ok_or_else(|| {
        format!("graph @{graph} is not a bucket graph (the pipeline must run bucket-specialize)")
    })?;
    let plan = module.plans.get(graph).ok_or_else(|| {
        format!("graph @{graph} has no memory plan (the pipeline must end with plan-memory)")
    })?;
    let size = u64::try_from(info.size).map_err(|_| format!("bucket size {}", info.size))?;
    let mut weights = module.weights.clone();
    weights.file = None;
    let one = Module {
        name: module.name.clone(),
        weights,
        graphs: vec![g.clone()],
        buckets: [(graph.to_string(), info.clone())].into(),
        plans: [(graph.to_string(), plan.clone())].into(),
    };
    Ok(BucketEntry {
        graph: graph.to_string(),
        symbol: info.symbol.clone(),
        size,
        ir: print_module(&one),
        kernels: None,
        npu: Vec::new(),
        kernel_fingerprint: Vec::new(),
    })
}

/// Checks what a package needs of this runtime.
pub fn check_versions(v: &VersionSet) -> Result<(), String> {
    if v.runtime_abi != RUNTIME_ABI {
        return Err(format!(
            "the package needs runtime ABI {}, this runtime implements ABI {RUNTIME_ABI} \
             (compiled by {}); recompile it with this slmcc",
            v.runtime_abi,
            if v.compiler.is_empty() {
                "an unknown compiler"
            } else {
                &v.compiler
            }
        ));
    }
    if v.target != TARGET_CPU && v.target != TARGET_RK3588 {
        return Err(format!(
            "target `{}` is not supported by this runtime (it runs `{TARGET_CPU}` and \
             `{TARGET_RK3588}` packages)",
            v.target
        ));
    }
    Ok(())
}

/// A verified package, memory-mapped.
pub struct Package {
    pub path: PathBuf,
    pub manifest: Manifest,
    /// The key that signed the package, verified at open; `None` when it
    /// is not signed.
    pub signer: Option<ed25519_dalek::VerifyingKey>,
    map: Arc<Mmap>,
    manifest_range: Range<usize>,
    weights_range: Range<usize>,
    /// An encrypted package's weights and NPU weights once
    /// [`Package::decrypt`] ran.
    decrypted: Option<(Arc<Mmap>, Vec<slmcc_backends::npu::lower::NpuWeight>)>,
}

impl std::fmt::Debug for Package {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Package")
            .field("path", &self.path)
            .field("manifest", &self.manifest_range)
            .field("weights", &self.weights_range)
            .finish()
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Package {
    /// Maps and verifies the package at `path` (see the module doc).
    pub fn open(path: &Path) -> Result<Package, PackageError> {
        let fail = |part: Part, message: String| PackageError {
            path: path.to_path_buf(),
            part,
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| fail(Part::File, e.to_string()))?;
        // SAFETY: read-only mapping; a package changed by another process
        // while mapped is outside what we defend against (as with any
        // memory-mapped model file).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| fail(Part::File, e.to_string()))?;
        let b = &map[..];
        let header = |m: String| fail(Part::Header, m);
        if b.len() < MAGIC.len() || b[..MAGIC.len()] != MAGIC {
            return Err(header(
                "not a slmcc package (the file does not start with the magic `SLMPKG\\0`)"
                    .to_string(),
            ));
        }
        if b.len() < HEADER_BYTES {
            return Err(header(format!(
                "the file is {} bytes, shorter than the {HEADER_BYTES}-byte header",
                b.len()
            )));
        }
        let version = u32_at(b, 8);
        if version != FORMAT_VERSION {
            return Err(header(format!(
                "format version {version}, this slmcc reads version {FORMAT_VERSION} \
                 (compile the package again with this slmcc)"
            )));
        }
        let hlen = u32_at(b, 12) as usize;
        if hlen != HEADER_BYTES {
            return Err(header(format!(
                "header length {hlen}, expected {HEADER_BYTES}"
            )));
        }
        let [moff, mlen, woff, wlen] = [16, 24, 32, 40].map(|at| u64_at(b, at));
        if b[7] != 0 || b[116..HEADER_BYTES].iter().any(|&x| x != 0) {
            return Err(header("reserved header bytes are not zero".to_string()));
        }
        let trailer_len = u64::from(u32_at(b, 112));
        if trailer_len != 0 && trailer_len != signature::TRAILER_BYTES as u64 {
            return Err(header(format!(
                "a signature trailer of {trailer_len} bytes (a signed package's is {})",
                signature::TRAILER_BYTES
            )));
        }
        let expect_woff = (HEADER_BYTES as u64)
            .checked_add(mlen)
            .map(|e| e.div_ceil(WEIGHTS_ALIGN as u64) * WEIGHTS_ALIGN as u64);
        let end = woff
            .checked_add(wlen)
            .and_then(|e| e.checked_add(trailer_len));
        if moff != HEADER_BYTES as u64 || Some(woff) != expect_woff || end != Some(b.len() as u64) {
            return Err(header(format!(
                "sections (manifest {moff}+{mlen}, weights {woff}+{wlen}, signature \
                 {trailer_len}) do not match a {}-byte package: the file is truncated or corrupted",
                b.len()
            )));
        }
        let (mrange, wrange) = (
            moff as usize..(moff + mlen) as usize,
            woff as usize..(woff + wlen) as usize,
        );
        // The signature covers the header, whose digests cover the rest:
        // checked first, so that a package changed after signing is named
        // as such.
        let signer = match trailer_len {
            0 => None,
            _ => Some(
                signature::verify(&b[..HEADER_BYTES], &b[wrange.end..])
                    .map_err(|m| fail(Part::Signature, m))?,
            ),
        };
        if b[mrange.end..wrange.start].iter().any(|&x| x != 0) {
            return Err(fail(
                Part::Manifest,
                "the padding after the manifest is not zero".to_string(),
            ));
        }
        if sha256(&b[mrange.clone()])[..] != b[48..80] {
            return Err(fail(
                Part::Manifest,
                "SHA-256 mismatch: the manifest bytes do not match the digest in the header \
                 (the package is corrupted)"
                    .to_string(),
            ));
        }
        let manifest = Manifest::decode(&b[mrange.clone()])
            .map_err(|e| fail(Part::Manifest, format!("cannot decode: {e}")))?;
        let table = manifest
            .weight_sections
            .as_ref()
            .ok_or_else(|| fail(Part::Manifest, "no weights integrity table".to_string()))?;
        if sections::top_digest(table)[..] != b[80..112] {
            return Err(fail(
                Part::Weights,
                "SHA-256 mismatch: the weights' integrity table does not match the digest in \
                 the header (the package is corrupted)"
                    .to_string(),
            ));
        }
        let started = std::time::Instant::now();
        sections::verify(&b[wrange.clone()], table).map_err(|m| fail(Part::Weights, m))?;
        tracing::debug!(
            "{}: verified {} weight sections ({} bytes) in {:.1} ms",
            path.display(),
            table.sha256.len(),
            wrange.len(),
            started.elapsed().as_secs_f64() * 1e3
        );
        let versions = manifest
            .versions
            .as_ref()
            .ok_or_else(|| fail(Part::Versions, "missing".to_string()))?;
        check_versions(versions).map_err(|m| fail(Part::Versions, m))?;
        Ok(Package {
            path: path.to_path_buf(),
            manifest,
            signer,
            map: Arc::new(map),
            manifest_range: mrange,
            weights_range: wrange,
            decrypted: None,
        })
    }

    /// Refuses the package unless `trusted` signed it (`--trust`).
    pub fn check_signer(&self, trusted: &ed25519_dalek::VerifyingKey) -> Result<(), PackageError> {
        let fail = |message: String| PackageError {
            path: self.path.clone(),
            part: Part::Signature,
            message,
        };
        match &self.signer {
            None => Err(fail(format!(
                "the package is not signed, and only packages signed by {} are trusted \
                 (compile --sign KEY)",
                signature::key_id(trusted)
            ))),
            Some(key) if key != trusted => Err(fail(format!(
                "signed by {}, not by the trusted key {}",
                signature::key_id(key),
                signature::key_id(trusted)
            ))),
            Some(_) => Ok(()),
        }
    }

    /// How the weights are encrypted (`compile --encrypt`), when they are.
    pub fn encryption(&self) -> Option<&encryption::Encryption> {
        self.manifest.encryption.as_ref()
    }

    /// Decrypts an encrypted package's weights with `key` into anonymous
    /// memory, chunk by chunk ([`encryption::decrypt_into`]); the file's
    /// pages of each chunk are dropped from the mapping once read, so the
    /// process holds the weights once, not twice. A wrong key, or a chunk
    /// that fails authentication, is an error and leaves the package as it
    /// was (still encrypted). A package that is not encrypted is refused.
    pub fn decrypt(&mut self, key: &encryption::WeightKey) -> Result<(), PackageError> {
        let fail = |message: String| PackageError {
            path: self.path.clone(),
            part: Part::Weights,
            message,
        };
        let Some(e) = &self.manifest.encryption else {
            return Err(fail(
                "the weights are not encrypted (a key was given to decrypt them)".to_string(),
            ));
        };
        let range = self.weights_range.clone();
        encryption::check(e, key, range.len()).map_err(&fail)?;
        let npu = encryption::open_npu_weights(e, key).map_err(&fail)?;
        let npu = NpuWeights::decode(&npu[..])
            .map_err(|err| fail(format!("the sealed NPU weights do not decode: {err}")))?
            .weights;
        let started = std::time::Instant::now();
        let mut plain = memmap2::MmapMut::map_anon(range.len().max(1))
            .map_err(|err| fail(format!("cannot map {} bytes: {err}", range.len())))?;
        let map = &self.map;
        // The package's mapping is of its file; nothing refers to a
        // chunk's pages once it is copied out.
        let release = |r: Range<usize>| {
            slmcc_ir::weights::release_pages(map, range.start + r.start..range.start + r.end)
        };
        // The verification at open read every page: let them go first.
        release(0..range.len());
        encryption::decrypt_into(
            e,
            key,
            &self.map[range.clone()],
            &mut plain[..range.len()],
            release,
        )
        .map_err(fail)?;
        let plain = plain
            .make_read_only()
            .map_err(|err| fail(format!("cannot protect the decrypted weights: {err}")))?;
        let seconds = started.elapsed().as_secs_f64();
        tracing::info!(
            "{}: decrypted {:.1} MB of weights in {:.3} s ({:.2} GB/s)",
            self.path.display(),
            range.len() as f64 / 1e6,
            seconds,
            range.len() as f64 / 1e9 / seconds.max(1e-9)
        );
        self.decrypted = Some((Arc::new(plain), npu));
        Ok(())
    }

    /// The whole file's size in bytes.
    pub fn file_bytes(&self) -> usize {
        self.map.len()
    }

    /// The manifest's size in bytes.
    pub fn manifest_bytes(&self) -> usize {
        self.manifest_range.len()
    }

    /// The weights blob's size in bytes.
    pub fn weights_bytes(&self) -> usize {
        self.weights_range.len()
    }

    /// The whole file, as mapped (verified at open).
    pub fn file(&self) -> &[u8] {
        &self.map
    }

    /// Where the weights blob lies in [`Package::file`].
    pub fn weights_range(&self) -> Range<usize> {
        self.weights_range.clone()
    }

    /// The SHA-256 digests of the manifest and of the weights' integrity
    /// table (verified at open).
    pub fn digests(&self) -> ([u8; 32], [u8; 32]) {
        let d = |at: usize| self.map[at..at + 32].try_into().expect("32 bytes");
        (d(48), d(80))
    }

    /// The NPU programs of bucket graph `graph`, in node order (a
    /// `--target rk3588` package; empty otherwise), each checked against
    /// the graph of `module` (the package's [`Package::module`]).
    pub fn npu_programs(
        &self,
        module: &Module,
        graph: &str,
    ) -> Result<Vec<slmcc_backends::npu::lower::ProductProgram>, PackageError> {
        let fail = |message: String| PackageError {
            path: self.path.clone(),
            part: Part::Manifest,
            message,
        };
        let b = self.manifest.buckets.iter().find(|b| b.graph == graph);
        let (Some(b), Some(g)) = (b, module.graph(graph)) else {
            return Err(fail(format!("no bucket graph @{graph}")));
        };
        let placed = slmcc_ir::placement::place(g);
        b.npu
            .iter()
            .map(|p| {
                p.check(g, &placed).map_err(|e| {
                    fail(format!(
                        "graph @{graph}, NPU program of node {}: {e}",
                        p.node
                    ))
                })?;
                Ok(p.clone())
            })
            .collect()
    }

    /// The weights stored in the NPU's layout, by name (a `--target
    /// rk3588` package; empty otherwise).
    pub fn npu_weights(
        &self,
    ) -> std::collections::HashMap<String, slmcc_backends::npu::lower::NpuWeight> {
        let stored = match &self.decrypted {
            Some((_, npu)) => npu,
            None => &self.manifest.npu_weights,
        };
        stored.iter().map(|w| (w.name.clone(), w.clone())).collect()
    }

    /// The module the package holds: every bucket graph with its bucket
    /// record and memory plan, verified, its weights mapped from the
    /// package.
    pub fn module(&self) -> Result<Module, PackageError> {
        let fail = |part: Part, message: String| PackageError {
            path: self.path.clone(),
            part,
            message,
        };
        let (weights_map, weights_range) = match (&self.manifest.encryption, &self.decrypted) {
            (None, _) => (self.map.clone(), self.weights_range.clone()),
            (Some(_), Some((plain, _))) => (plain.clone(), 0..self.weights_range.len()),
            (Some(e), None) => {
                return Err(fail(
                    Part::Weights,
                    format!(
                        "the weights are encrypted ({}, key {}): give the key with \
                         --decrypt KEYFILE",
                        encryption::SCHEME,
                        encryption::key_id_text(&e.key_id)
                    ),
                ))
            }
        };
        let mut module = Module::new(self.manifest.module.clone());
        if self.manifest.buckets.is_empty() {
            return Err(fail(Part::Manifest, "no bucket graphs".to_string()));
        }
        for (i, b) in self.manifest.buckets.iter().enumerate() {
            let bad = |m: String| fail(Part::Manifest, format!("bucket @{}: {m}", b.graph));
            let mut one = parse_module(&b.ir).map_err(|e| bad(format!("IR {e}")))?;
            if one.graphs.len() != 1 || one.graphs[0].name != b.graph {
                return Err(bad("the IR must hold exactly this one graph".to_string()));
            }
            let (Some(info), Some(plan)) =
                (one.buckets.remove(&b.graph), one.plans.remove(&b.graph))
            else {
                return Err(bad("the IR has no bucket record or no plan".to_string()));
            };
            if info.base != self.manifest.entry
                || info.symbol != b.symbol
                || u64::try_from(info.size).ok() != Some(b.size)
            {
                return Err(bad(format!(
                    "bucket record @{} {{{} = {}}} disagrees with the manifest's @{} {{{} = {}}}",
                    info.base, info.symbol, info.size, self.manifest.entry, b.symbol, b.size
                )));
            }
            if i == 0 {
                module.name = one.name.clone();
                module.weights = std::mem::take(&mut one.weights);
            } else {
                let same = one.weights.len() == module.weights.len()
                    && one
                        .weights
                        .iter()
                        .zip(module.weights.iter())
                        .all(|((n, w), (m, v))| n == m && w.ty == v.ty);
                if !same {
                    return Err(bad(
                        "its weight declarations differ from the first bucket's".to_string(),
                    ));
                }
            }
            module.buckets.insert(b.graph.clone(), info);
            module.plans.insert(b.graph.clone(), plan);
            module.graphs.push(one.graphs.remove(0));
        }
        slmcc_ir::verify_module(&module).map_err(|e| fail(Part::Manifest, e.to_string()))?;
        module
            .weights
            .attach_mapped(weights_map, weights_range, &self.path)
            .map_err(|e| fail(Part::Weights, e.to_string()))?;
        Ok(module)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::Tensor;
    use slmcc_passes::{PassManager, RunOptions};

    const SRC: &str = r#"
module @m {
  weight @w : f32[4, 4]
  graph @main(%x: f32[1, seq, 4]) -> (f32[1, seq, 4]) {
    %y = matmul %x, @w : f32[1, seq, 4]
    %z = exp %y : f32[1, seq, 4]
    return %z
  }
}
"#;

    fn planned() -> Module {
        let mut m = parse_module(SRC).unwrap();
        m.weights.insert(
            "w",
            Tensor::from_f32(vec![4, 4], (0..16).map(|i| i as f32 * 0.125).collect()),
        );
        PassManager::parse(
            "bucket-specialize{buckets=2,4},plan-memory",
            RunOptions::default(),
        )
        .unwrap()
        .run(&mut m, &mut std::io::sink())
        .unwrap();
        m
    }

    fn manifest(m: &Module, abi: u32) -> Manifest {
        Manifest {
            versions: Some(VersionSet {
                compiler: "slmcc test".to_string(),
                target: TARGET_CPU.to_string(),
                kernel_library: "k".to_string(),
                isa: ISA_HOST_JIT.to_string(),
                runtime_abi: abi,
            }),
            options: None,
            module: m.name.clone(),
            entry: "main".to_string(),
            buckets: m
                .graphs
                .iter()
                .map(|g| bucket_entry(m, &g.name).unwrap())
                .collect(),
            source: String::new(),
            source_sha256: Vec::new(),
            weight_sections: None,
            npu_weights: Vec::new(),
            card: String::new(),
            encryption: None,
        }
    }

    fn write(tag: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("slmcc-pkg-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.slmpkg");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// A package's weights region is its mapped blob, used in place, and
    /// runs as the copied one does; a module whose weights are held in
    /// memory gets a copied region.
    #[test]
    fn the_weights_region_is_the_mapped_blob() {
        use crate::exec::Executor;
        use crate::jit::JitKernels;
        use slmcc_backends::cpu::CpuOptions;
        let m = planned();
        let bytes = encode(
            &manifest(&m, RUNTIME_ABI),
            &weights_blob(&m.weights).unwrap(),
        );
        let path = write("zero-copy", &bytes);
        let pkg = Package::open(&path).unwrap();
        let mapped = pkg.module().unwrap();
        let g = mapped.graph("main_4").unwrap();
        let kernels = JitKernels::compile(g, &CpuOptions::exact()).unwrap();
        let mut in_place = Executor::load(&mapped, "main_4", &kernels).unwrap();
        let mut copied = Executor::load(&m, "main_4", &kernels).unwrap();
        assert!(in_place.weights_in_place());
        assert!(!copied.weights_in_place());
        for e in [&mut in_place, &mut copied] {
            let x = e.input_mut(0);
            for (i, b) in x.chunks_mut(4).enumerate() {
                b.copy_from_slice(&(i as f32 * 0.25 - 1.0).to_le_bytes());
            }
            e.run().unwrap();
        }
        assert_eq!(in_place.output(0), copied.output(0));
    }

    #[test]
    fn round_trips_and_refuses_any_flipped_byte() {
        let m = planned();
        let blob = weights_blob(&m.weights).unwrap();
        let bytes = encode(&manifest(&m, RUNTIME_ABI), &blob);
        assert_eq!(bytes, encode(&manifest(&m, RUNTIME_ABI), &blob));
        let path = write("rt", &bytes);
        let pkg = Package::open(&path).unwrap();
        assert_eq!(pkg.file_bytes(), bytes.len());
        let woff = bytes.len() - pkg.weights_bytes();
        assert_eq!(woff % WEIGHTS_ALIGN, 0);
        let back = pkg.module().unwrap();
        assert_eq!(print_module(&back), {
            let mut m = m.clone();
            m.weights.file = None;
            print_module(&m)
        });
        assert_eq!(
            back.weights.tensor("w").unwrap().unwrap(),
            m.weights.tensor("w").unwrap().unwrap()
        );
        // Every byte matters.
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            let path = write("flip", &bad);
            let e = Package::open(&path).unwrap_err();
            let want = if at < HEADER_BYTES {
                vec![Part::Header, Part::Manifest, Part::Weights]
            } else if at < woff {
                vec![Part::Manifest]
            } else {
                vec![Part::Weights]
            };
            assert!(want.contains(&e.part), "byte {at}: {e}");
        }
        let e = Package::open(&write("trunc", &bytes[..bytes.len() - 1])).unwrap_err();
        assert_eq!(e.part, Part::Header, "{e}");
        assert!(e.to_string().contains("truncated"), "{e}");
        let e = Package::open(&write("magic", b"PK\x03\x04 not a package")).unwrap_err();
        assert!(e.to_string().contains("not a slmcc package"), "{e}");
    }

    /// A signed package names its signer, and one flipped byte anywhere,
    /// the trailer included, is refused; the trust check refuses another
    /// key and an unsigned package.
    #[test]
    fn signed_packages_verify_and_refuse_any_flipped_byte() {
        use ed25519_dalek::SigningKey;
        let m = planned();
        let blob = weights_blob(&m.weights).unwrap();
        let (a, b) = (
            SigningKey::from_bytes(&[1; 32]),
            SigningKey::from_bytes(&[2; 32]),
        );
        let mut bytes = Vec::new();
        let n = encode_signed_to(&mut bytes, &manifest(&m, RUNTIME_ABI), &blob, Some(&a)).unwrap();
        assert_eq!(n, bytes.len());
        let unsigned = encode(&manifest(&m, RUNTIME_ABI), &blob);
        assert_eq!(bytes.len(), unsigned.len() + signature::TRAILER_BYTES);
        let pkg = Package::open(&write("signed", &bytes)).unwrap();
        assert_eq!(pkg.signer, Some(a.verifying_key()));
        pkg.check_signer(&a.verifying_key()).unwrap();
        let e = pkg.check_signer(&b.verifying_key()).unwrap_err();
        assert_eq!(e.part, Part::Signature);
        assert!(e.to_string().contains("not by the trusted key"), "{e}");
        let plain = Package::open(&write("unsigned", &unsigned)).unwrap();
        assert_eq!(plain.signer, None);
        let e = plain.check_signer(&a.verifying_key()).unwrap_err();
        assert!(e.to_string().contains("not signed"), "{e}");
        // The weights are checked in the same place as unsigned ones.
        assert_eq!(pkg.weights_bytes(), plain.weights_bytes());
        let woff = unsigned.len() - plain.weights_bytes();
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            let e = Package::open(&write("signed-flip", &bad)).unwrap_err();
            let want = if at < HEADER_BYTES {
                vec![Part::Header, Part::Signature]
            } else if at < woff {
                vec![Part::Manifest]
            } else if at < unsigned.len() {
                vec![Part::Weights]
            } else {
                vec![Part::Signature]
            };
            assert!(want.contains(&e.part), "byte {at}: {e}");
        }
        // The trailer cut off is a short file.
        let e = Package::open(&write("cut", &bytes[..unsigned.len()])).unwrap_err();
        assert_eq!(e.part, Part::Header, "{e}");
        // Another signer's whole trailer is a valid signature by that
        // signer: the package opens, and the trust check refuses it.
        let mut other = Vec::new();
        encode_signed_to(&mut other, &manifest(&m, RUNTIME_ABI), &blob, Some(&b)).unwrap();
        let at = unsigned.len();
        let mut resigned = bytes.clone();
        resigned[at..].copy_from_slice(&other[at..]);
        let pkg = Package::open(&write("resigned", &resigned)).unwrap();
        assert_eq!(pkg.signer, Some(b.verifying_key()));
        assert!(pkg.check_signer(&a.verifying_key()).is_err());
        // B's signature under A's key is refused at open.
        let mut pasted = bytes.clone();
        pasted[at + 32..].copy_from_slice(&other[at + 32..]);
        let e = Package::open(&write("pasted", &pasted)).unwrap_err();
        assert_eq!(e.part, Part::Signature, "{e}");
    }

    /// An encrypted package verifies and opens without its key, and loads
    /// only with it, as the plain one does; a wrong key is named; a chunk
    /// changed with its digests made to match fails authentication at
    /// decryption, and the package stays unloaded.
    #[test]
    fn encrypted_packages_load_only_with_their_key() {
        use encryption::{encrypt_in_place, WeightKey};
        let m = planned();
        let plain = weights_blob(&m.weights).unwrap();
        let key = WeightKey::from_bytes([3; 32]);
        let mut blob = plain.clone();
        let mut man = manifest(&m, RUNTIME_ABI);
        man.encryption = Some(encrypt_in_place(&key, &mut blob, &[]));
        let mut pkg = Package::open(&write("enc", &encode(&man, &blob))).unwrap();
        let e = pkg.module().unwrap_err();
        assert!(e.message.contains("give the key with --decrypt"), "{e}");
        let e = pkg.decrypt(&WeightKey::from_bytes([4; 32])).unwrap_err();
        assert!(e.message.starts_with("wrong key"), "{e}");
        pkg.decrypt(&key).unwrap();
        let back = pkg.module().unwrap();
        assert_eq!(
            back.weights.tensor("w").unwrap().unwrap(),
            m.weights.tensor("w").unwrap().unwrap()
        );
        // Sealed over the changed ciphertext: the digests match.
        let mut forged = blob.clone();
        *forged.last_mut().unwrap() ^= 1;
        let mut pkg = Package::open(&write("forged", &encode(&man, &forged))).unwrap();
        let e = pkg.decrypt(&key).unwrap_err();
        assert_eq!(e.part, Part::Weights);
        assert!(e.message.contains("fails AES-GCM authentication"), "{e}");
        assert!(pkg.module().is_err());
        // A plain package has nothing to decrypt.
        let mut pkg =
            Package::open(&write("plain", &encode(&manifest(&m, RUNTIME_ABI), &plain))).unwrap();
        assert!(pkg
            .decrypt(&key)
            .unwrap_err()
            .message
            .contains("not encrypted"));
    }

    /// Version 2 (the layout without signatures) is refused: one flipped
    /// bit turns 3 into 2.
    #[test]
    fn refuses_format_version_2() {
        let m = planned();
        let mut bytes = encode(
            &manifest(&m, RUNTIME_ABI),
            &weights_blob(&m.weights).unwrap(),
        );
        bytes[8] ^= 1;
        let e = Package::open(&write("v2", &bytes)).unwrap_err();
        assert_eq!(e.part, Part::Header);
        assert!(e.to_string().contains("format version 2"), "{e}");
    }

    #[test]
    fn refuses_another_runtime_abi() {
        let m = planned();
        let blob = weights_blob(&m.weights).unwrap();
        let path = write("abi", &encode(&manifest(&m, RUNTIME_ABI + 1), &blob));
        let e = Package::open(&path).unwrap_err();
        assert_eq!(e.part, Part::Versions);
        assert!(e.to_string().contains("runtime ABI 3"), "{e}");
    }

    #[test]
    fn bucket_entries_need_plans() {
        let mut m = parse_module(SRC).unwrap();
        let e = bucket_entry(&m, "main").unwrap_err();
        assert!(e.contains("not a bucket graph"), "{e}");
        PassManager::parse("bucket-specialize{buckets=2}", RunOptions::default())
            .unwrap()
            .run(&mut m, &mut std::io::sink())
            .unwrap();
        let e = bucket_entry(&m, "main_2").unwrap_err();
        assert!(e.contains("no memory plan"), "{e}");
    }
}
