//! Weights encrypted at rest (`compile --encrypt KEYFILE`): AES-256-GCM in
//! chunks of [`CHUNK_BYTES`], the sections of the integrity table.
//!
//! The key is 32 bytes (a key file holds them raw, or as 64 hex digits:
//! `openssl rand -hex 32 > weights.key`). Chunk `i` of the weights blob is
//! encrypted in place, with:
//! - the nonce `HMAC-SHA256(key, "slmcc nonce" ‖ i ‖ SHA-256(plaintext))`,
//!   its first 12 bytes. Compiles stay deterministic (the same model, key
//!   and options give the same bytes, and a chunk a fine-tune left alone
//!   stays the same, so delta updates stay small), and two different
//!   plaintexts get the same nonce only by a 96-bit collision. What this
//!   reveals is which chunks of two packages under one key are equal;
//! - the associated data `"slmcc weights"`, `i` and the blob's length, so a
//!   chunk moved to another place or another package does not decrypt.
//!
//! The blob is the same length encrypted. The manifest holds the
//! [`Encryption`] record: the scheme, every chunk's nonce and tag, a key id
//! (`HMAC-SHA256(key, "slmcc key id")`, 8 bytes: a wrong key is named as
//! such before any chunk is tried), and the NPU weights' column sums
//! (`npu_weights`), sealed with the same key, since they are statistics of
//! the weights. The integrity table's digests are over the ciphertext, so a
//! package is verified (and its signature checked) without the key.
//!
//! [`decrypt_into`] fills a buffer chunk by chunk on several threads (each
//! thread authenticates its chunk before it takes another); the caller's `release`
//! is told each chunk's ciphertext range once it is read, so the file's
//! pages leave the process (`Package::decrypt` drops them from its
//! mapping). The first chunk that fails authentication is named, and the
//! buffer is dropped: nothing half-decrypted is used.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::sections::{for_each_section, SECTION_BYTES};

/// The scheme [`Encryption::scheme`] names: the only one there is.
pub const SCHEME: &str = "aes-256-gcm";
/// The chunk length: every chunk but the last is this long.
pub const CHUNK_BYTES: usize = SECTION_BYTES;
/// A nonce's length.
pub const NONCE_BYTES: usize = 12;
/// A tag's length.
pub const TAG_BYTES: usize = 16;
/// A key id's length.
pub const KEY_ID_BYTES: usize = 8;

/// How a package's weights are encrypted (manifest tag 11).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Encryption {
    /// [`SCHEME`].
    #[prost(string, tag = "1")]
    pub scheme: String,
    /// [`CHUNK_BYTES`].
    #[prost(uint64, tag = "2")]
    pub chunk_bytes: u64,
    /// The key's id ([`WeightKey::id`]).
    #[prost(bytes = "vec", tag = "3")]
    pub key_id: Vec<u8>,
    /// Every chunk's nonce, concatenated.
    #[prost(bytes = "vec", tag = "4")]
    pub nonces: Vec<u8>,
    /// Every chunk's tag, concatenated.
    #[prost(bytes = "vec", tag = "5")]
    pub tags: Vec<u8>,
    /// The manifest's `npu_weights` (an encoded [`super::manifest::NpuWeights`]),
    /// sealed: nonce, ciphertext, tag. Empty when there were none.
    #[prost(bytes = "vec", tag = "6")]
    pub sealed_npu_weights: Vec<u8>,
}

/// A 256-bit weights key, wiped from memory when dropped.
pub struct WeightKey(Zeroizing<[u8; 32]>);

type HmacSha256 = Hmac<Sha256>;

impl WeightKey {
    /// The key of 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> WeightKey {
        WeightKey(Zeroizing::new(bytes))
    }

    /// Reads a key file: 32 raw bytes, or 64 hex digits with surrounding
    /// whitespace.
    pub fn read(path: &Path) -> Result<WeightKey, String> {
        let fail = |m: String| format!("{}: {m}", path.display());
        let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if !meta.is_file() || meta.len() > 1024 {
            return Err(fail(
                "not a key file: an encryption key is 32 bytes, or 64 hex digits (make one with \
                 `openssl rand -hex 32 > KEYFILE`)"
                    .to_string(),
            ));
        }
        let bytes = Zeroizing::new(std::fs::read(path).map_err(|e| fail(e.to_string()))?);
        let text = std::str::from_utf8(&bytes).map(str::trim).unwrap_or("");
        let mut key = Zeroizing::new([0u8; 32]);
        if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            for (k, pair) in key.iter_mut().zip(text.as_bytes().chunks(2)) {
                let digit = |c: u8| (c as char).to_digit(16).expect("checked hex") as u8;
                *k = digit(pair[0]) << 4 | digit(pair[1]);
            }
        } else if bytes.len() == 32 && !bytes.starts_with(b"-----BEGIN") {
            key.copy_from_slice(&bytes);
        } else {
            let what = if bytes.starts_with(b"-----BEGIN") {
                "a PEM file (a signing key? an encryption key is an AES key)".to_string()
            } else {
                format!("{} bytes", bytes.len())
            };
            return Err(fail(format!(
                "an encryption key is 32 bytes, or 64 hex digits (make one with \
                 `openssl rand -hex 32 > KEYFILE`); this file holds {what}"
            )));
        }
        Ok(WeightKey(key))
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.0[..]).expect("any key length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().into()
    }

    /// The key's id, as the manifest holds it.
    pub fn id(&self) -> [u8; KEY_ID_BYTES] {
        self.mac(&[b"slmcc key id"])[..KEY_ID_BYTES]
            .try_into()
            .expect("8 bytes")
    }

    fn nonce(&self, index: u64, plain: &[u8]) -> [u8; NONCE_BYTES] {
        let digest = Sha256::digest(plain);
        self.mac(&[b"slmcc nonce", &index.to_le_bytes(), &digest])[..NONCE_BYTES]
            .try_into()
            .expect("12 bytes")
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new_from_slice(&self.0[..]).expect("32-byte key")
    }
}

/// The key id as text (`report` and errors show it).
pub fn key_id_text(id: &[u8]) -> String {
    format!("aes:{}", super::hex(id))
}

/// The associated data of chunk `index` of a blob of `total` bytes.
fn associated(index: u64, total: u64) -> [u8; 32] {
    let mut a = [0u8; 32];
    a[..13].copy_from_slice(b"slmcc weights");
    a[16..24].copy_from_slice(&index.to_le_bytes());
    a[24..].copy_from_slice(&total.to_le_bytes());
    a
}

/// Encrypts `blob` in place, chunk by chunk, and `npu_weights` (encoded;
/// may be empty); returns the manifest's record.
pub fn encrypt_in_place(key: &WeightKey, blob: &mut [u8], npu_weights: &[u8]) -> Encryption {
    let total = blob.len() as u64;
    let sealed = encrypt_chunks(key, blob, 0, total);
    record(key, &sealed, npu_weights)
}

/// A chunk's nonce and tag.
pub type SealedChunk = ([u8; NONCE_BYTES], [u8; TAG_BYTES]);

/// Encrypts `part` in place: the chunks from index `first` on of a blob of
/// `total` bytes (`part` starts at a chunk boundary, and only the blob's
/// last chunk may be short). Returns each chunk's nonce and tag, in order.
pub fn encrypt_chunks(
    key: &WeightKey,
    part: &mut [u8],
    first: u64,
    total: u64,
) -> Vec<SealedChunk> {
    let chunks: Vec<Mutex<&mut [u8]>> = part.chunks_mut(CHUNK_BYTES).map(Mutex::new).collect();
    let sealed = Mutex::new(vec![([0u8; NONCE_BYTES], [0u8; TAG_BYTES]); chunks.len()]);
    let cipher = key.cipher();
    for_each_section(chunks.len(), |i| {
        let mut chunk = chunks[i].lock().expect("no panic holding it");
        let index = first + i as u64;
        let nonce = key.nonce(index, &chunk);
        let tag = cipher
            .encrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                &associated(index, total),
                &mut chunk,
            )
            .expect("a chunk is far below GCM's length limit");
        sealed.lock().expect("no panic holding it")[i] = (nonce, tag.into());
        true
    });
    sealed.into_inner().expect("no panic holding it")
}

/// The manifest's record of a blob whose chunks were sealed as `sealed`
/// ([`encrypt_chunks`]), with `npu_weights` (encoded; may be empty)
/// sealed into it.
pub fn record(key: &WeightKey, sealed: &[SealedChunk], npu_weights: &[u8]) -> Encryption {
    Encryption {
        scheme: SCHEME.to_string(),
        chunk_bytes: CHUNK_BYTES as u64,
        key_id: key.id().to_vec(),
        nonces: sealed.iter().flat_map(|(n, _)| *n).collect(),
        tags: sealed.iter().flat_map(|(_, t)| *t).collect(),
        sealed_npu_weights: match npu_weights.is_empty() {
            true => Vec::new(),
            false => seal_small(key, npu_weights),
        },
    }
}

/// Associated data of the sealed NPU weights.
const NPU_AAD: &[u8] = b"slmcc npu weights";

fn seal_small(key: &WeightKey, plain: &[u8]) -> Vec<u8> {
    let nonce = key.nonce(u64::MAX, plain);
    let mut out = nonce.to_vec();
    out.extend_from_slice(plain);
    let tag = key
        .cipher()
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), NPU_AAD, &mut out[NONCE_BYTES..])
        .expect("small");
    out.extend_from_slice(&tag);
    out
}

/// Checks `e` against `key` and a blob of `total` bytes: the scheme, the
/// chunking, the key id.
pub fn check(e: &Encryption, key: &WeightKey, total: usize) -> Result<(), String> {
    if e.scheme != SCHEME || e.chunk_bytes != CHUNK_BYTES as u64 {
        return Err(format!(
            "the weights are encrypted as `{}` in chunks of {} bytes; this runtime decrypts \
             `{SCHEME}` in chunks of {CHUNK_BYTES}",
            e.scheme, e.chunk_bytes
        ));
    }
    let n = total.div_ceil(CHUNK_BYTES);
    if e.nonces.len() != n * NONCE_BYTES || e.tags.len() != n * TAG_BYTES {
        return Err(format!(
            "the encryption record holds {} nonce and {} tag bytes; {total} weight bytes make \
             {n} chunks",
            e.nonces.len(),
            e.tags.len()
        ));
    }
    if e.key_id[..] != key.id()[..] {
        return Err(format!(
            "wrong key: the weights were encrypted with key {}, and this key is {}",
            key_id_text(&e.key_id),
            key_id_text(&key.id())
        ));
    }
    Ok(())
}

/// Opens the sealed NPU weights of `e` (the encoded list; empty when none).
pub fn open_npu_weights(e: &Encryption, key: &WeightKey) -> Result<Vec<u8>, String> {
    if e.sealed_npu_weights.is_empty() {
        return Ok(Vec::new());
    }
    let s = &e.sealed_npu_weights;
    if s.len() < NONCE_BYTES + TAG_BYTES {
        return Err("the sealed NPU weights are truncated".to_string());
    }
    let (nonce, rest) = s.split_at(NONCE_BYTES);
    let (body, tag) = rest.split_at(rest.len() - TAG_BYTES);
    let mut plain = body.to_vec();
    key.cipher()
        .decrypt_in_place_detached(
            Nonce::from_slice(nonce),
            NPU_AAD,
            &mut plain,
            Tag::from_slice(tag),
        )
        .map_err(|_| "the sealed NPU weights fail authentication".to_string())?;
    Ok(plain)
}

/// Decrypts `cipher` (the blob as stored) into `out` (as long), chunk by
/// chunk on several threads; `release(range)` is called with each chunk's
/// range once it has been read. `e` must have passed [`check`]. The error
/// names the first chunk that fails authentication.
pub fn decrypt_into(
    e: &Encryption,
    key: &WeightKey,
    cipher: &[u8],
    out: &mut [u8],
    release: impl Fn(Range<usize>) + Sync,
) -> Result<(), String> {
    assert_eq!(cipher.len(), out.len(), "the plaintext is as long");
    let total = cipher.len() as u64;
    let chunks: Vec<Mutex<&mut [u8]>> = out.chunks_mut(CHUNK_BYTES).map(Mutex::new).collect();
    let n = chunks.len();
    let aes = key.cipher();
    let first_bad = AtomicUsize::new(usize::MAX);
    for_each_section(n, |i| {
        let mut chunk = chunks[i].lock().expect("no panic holding it");
        let range = i * CHUNK_BYTES..i * CHUNK_BYTES + chunk.len();
        chunk.copy_from_slice(&cipher[range.clone()]);
        release(range);
        let ok = aes
            .decrypt_in_place_detached(
                Nonce::from_slice(&e.nonces[i * NONCE_BYTES..][..NONCE_BYTES]),
                &associated(i as u64, total),
                &mut chunk,
                Tag::from_slice(&e.tags[i * TAG_BYTES..][..TAG_BYTES]),
            )
            .is_ok();
        if !ok {
            first_bad.fetch_min(i, Ordering::Relaxed);
        }
        ok
    });
    match first_bad.into_inner() {
        usize::MAX => Ok(()),
        i => {
            let start = i * CHUNK_BYTES;
            let end = (start + CHUNK_BYTES).min(cipher.len());
            Err(format!(
                "chunk {i} of {n} (weights bytes {start}..{end}) fails AES-GCM authentication: \
                 it, its nonce or its tag was changed"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    fn decrypt(e: &Encryption, key: &WeightKey, c: &[u8]) -> Result<Vec<u8>, String> {
        check(e, key, c.len())?;
        let mut out = vec![0; c.len()];
        decrypt_into(e, key, c, &mut out, |_| {})?;
        Ok(out)
    }

    /// Round trips, deterministically, and equal chunks at the same index
    /// stay equal while a changed chunk changes alone.
    #[test]
    fn round_trips_deterministically() {
        let key = WeightKey::from_bytes([7; 32]);
        let plain = blob(3 * CHUNK_BYTES + 100);
        let mut a = plain.clone();
        let ea = encrypt_in_place(&key, &mut a, b"npu");
        assert_ne!(a, plain);
        let mut again = plain.clone();
        assert_eq!(encrypt_in_place(&key, &mut again, b"npu"), ea);
        assert_eq!(again, a);
        assert_eq!(decrypt(&ea, &key, &a).unwrap(), plain);
        assert_eq!(open_npu_weights(&ea, &key).unwrap(), b"npu");
        let mut changed = plain.clone();
        changed[CHUNK_BYTES + 5] ^= 1;
        encrypt_in_place(&key, &mut changed, b"");
        assert_eq!(changed[..CHUNK_BYTES], a[..CHUNK_BYTES]);
        assert_ne!(
            changed[CHUNK_BYTES..2 * CHUNK_BYTES],
            a[CHUNK_BYTES..2 * CHUNK_BYTES]
        );
        assert_eq!(changed[2 * CHUNK_BYTES..], a[2 * CHUNK_BYTES..]);
    }

    /// A wrong key, a flipped byte in a chunk, a nonce or a tag, swapped
    /// chunks, and a changed sealed record are each refused, naming what.
    #[test]
    fn refuses_wrong_keys_and_changes() {
        let key = WeightKey::from_bytes([7; 32]);
        let plain = blob(2 * CHUNK_BYTES + 9);
        let mut c = plain.clone();
        let e = encrypt_in_place(&key, &mut c, b"sums");
        let err = decrypt(&e, &WeightKey::from_bytes([8; 32]), &c).unwrap_err();
        assert!(err.starts_with("wrong key: "), "{err}");
        let mut bad = c.clone();
        bad[CHUNK_BYTES + 3] ^= 0x40;
        let err = decrypt(&e, &key, &bad).unwrap_err();
        assert!(err.starts_with("chunk 1 of 3 "), "{err}");
        for field in [4usize, 5] {
            let mut e2 = e.clone();
            match field {
                4 => e2.nonces[2 * NONCE_BYTES] ^= 1,
                _ => e2.tags[0] ^= 1,
            }
            let err = decrypt(&e2, &key, &c).unwrap_err();
            let want = if field == 4 {
                "chunk 2 of 3"
            } else {
                "chunk 0 of 3"
            };
            assert!(err.starts_with(want), "{err}");
        }
        let mut swapped = c.clone();
        swapped.copy_within(0..CHUNK_BYTES, CHUNK_BYTES);
        swapped[..CHUNK_BYTES].copy_from_slice(&c[CHUNK_BYTES..2 * CHUNK_BYTES]);
        assert!(decrypt(&e, &key, &swapped).is_err());
        let mut e2 = e.clone();
        let last = e2.sealed_npu_weights.len() - 1;
        e2.sealed_npu_weights[last] ^= 1;
        assert!(open_npu_weights(&e2, &key).is_err());
        assert!(open_npu_weights(&e, &WeightKey::from_bytes([8; 32])).is_err());
    }

    #[test]
    fn reads_hex_and_raw_key_files() {
        let dir = std::env::temp_dir().join(format!("slmcc-aeskey-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let hex_file = dir.join("hex.key");
        std::fs::write(&hex_file, format!("{}\n", "0f".repeat(32))).unwrap();
        let raw = dir.join("raw.key");
        std::fs::write(&raw, [0x0f; 32]).unwrap();
        let a = WeightKey::read(&hex_file).unwrap();
        let b = WeightKey::read(&raw).unwrap();
        assert_eq!(a.id(), b.id());
        let pem = dir.join("k.pem");
        std::fs::write(&pem, "-----BEGIN PRIVATE KEY-----\nabc\n").unwrap();
        let err = WeightKey::read(&pem).err().unwrap();
        assert!(err.contains("a PEM file"), "{err}");
        std::fs::write(&pem, "abcd").unwrap();
        let err = WeightKey::read(&pem).err().unwrap();
        assert!(err.contains("holds 4 bytes"), "{err}");
    }
}
