//! Package signatures: who built a package (Ed25519, RFC 8032).
//!
//! A signed package ends, after its weights, with a trailer of
//! [`TRAILER_BYTES`]: the signer's public key (32 bytes) and the signature
//! (64 bytes). The header's bytes 112..116 give the trailer's length
//! (0 for an unsigned package). What is signed is [`DOMAIN`] followed by
//! the whole 128-byte header ([`signed_message`]). The header holds the
//! SHA-256 of the manifest and of the weights' integrity table, and the
//! manifest names every weight section's digest, so the signature covers
//! every byte of the package; and since the loader checks the sections in
//! place once, verifying a signature reads nothing twice.
//!
//! Keys are the files OpenSSL reads and writes: a private key as PKCS#8
//! PEM (`-----BEGIN PRIVATE KEY-----`, as `openssl genpkey -algorithm
//! ed25519` makes), a public key as SubjectPublicKeyInfo PEM (`-----BEGIN
//! PUBLIC KEY-----`, as `openssl pkey -pubout` makes). A key is named in
//! messages by its [`key_id`].

use std::path::Path;

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer};
pub use ed25519_dalek::{SigningKey, VerifyingKey};

/// The trailer of a signed package: public key, then signature.
pub const TRAILER_BYTES: usize = 32 + 64;

/// What precedes the header in the signed message, so that a signature
/// made for a package can mean nothing else.
pub const DOMAIN: &[u8] = b"slmcc package signature v1\0";

/// The message a package's signature signs: [`DOMAIN`], then its header.
pub fn signed_message(header: &[u8]) -> Vec<u8> {
    [DOMAIN, header].concat()
}

/// A key's short name: the first 8 bytes of the SHA-256 of its raw 32
/// bytes, in hex (`ed25519:3f1c…`).
pub fn key_id(key: &VerifyingKey) -> String {
    let digest = super::sha256(key.as_bytes());
    format!("ed25519:{}", super::hex(&digest[..8]))
}

/// The trailer for `header`, signed with `key`.
pub fn trailer(header: &[u8], key: &SigningKey) -> [u8; TRAILER_BYTES] {
    let signature = key.sign(&signed_message(header));
    let mut out = [0u8; TRAILER_BYTES];
    out[..32].copy_from_slice(key.verifying_key().as_bytes());
    out[32..].copy_from_slice(&signature.to_bytes());
    out
}

/// Checks `trailer` against `header`; returns the signer's key.
pub fn verify(header: &[u8], trailer: &[u8]) -> Result<VerifyingKey, String> {
    let (Ok(key), Ok(signature)) = (
        <[u8; 32]>::try_from(&trailer[..32.min(trailer.len())]),
        Signature::from_slice(trailer.get(32..).unwrap_or_default()),
    ) else {
        return Err(format!(
            "the signature trailer is {} bytes, not {TRAILER_BYTES}",
            trailer.len()
        ));
    };
    let key = VerifyingKey::from_bytes(&key)
        .map_err(|_| "the signer's public key is not a valid Ed25519 key".to_string())?;
    key.verify_strict(&signed_message(header), &signature)
        .map_err(|_| {
            format!(
                "the signature by {} does not verify: the package was changed after it was \
                 signed, or its signature is corrupted",
                key_id(&key)
            )
        })?;
    Ok(key)
}

/// A fresh key pair from the operating system's random source.
pub fn generate() -> Result<SigningKey, String> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| format!("no random source: {e}"))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// The PKCS#8 PEM of `key` (what [`read_signing_key`] reads).
pub fn signing_key_pem(key: &SigningKey) -> Result<String, String> {
    key.to_pkcs8_pem(Default::default())
        .map(|pem| pem.to_string())
        .map_err(|e| format!("cannot encode the private key: {e}"))
}

/// The SubjectPublicKeyInfo PEM of `key` (what [`read_verifying_key`]
/// reads).
pub fn verifying_key_pem(key: &VerifyingKey) -> Result<String, String> {
    key.to_public_key_pem(Default::default())
        .map_err(|e| format!("cannot encode the public key: {e}"))
}

/// An Ed25519 private key from a PKCS#8 PEM file.
pub fn read_signing_key(path: &Path) -> Result<SigningKey, String> {
    let text = read_pem(path)?;
    SigningKey::from_pkcs8_pem(&text).map_err(|e| {
        let hint = if text.contains("PUBLIC KEY") {
            " (this is a public key; --sign takes the private one)"
        } else {
            ""
        };
        format!(
            "{}: not an Ed25519 private key in PKCS#8 PEM{hint}: {e}",
            path.display()
        )
    })
}

/// An Ed25519 public key from a SubjectPublicKeyInfo PEM file.
pub fn read_verifying_key(path: &Path) -> Result<VerifyingKey, String> {
    let text = read_pem(path)?;
    VerifyingKey::from_public_key_pem(&text).map_err(|e| {
        let hint = if text.contains("PRIVATE KEY") {
            " (this is a private key; --trust takes the public one)"
        } else {
            ""
        };
        format!(
            "{}: not an Ed25519 public key in PEM{hint}: {e}",
            path.display()
        )
    })
}

fn read_pem(path: &Path) -> Result<String, String> {
    use std::io::Read;
    const LIMIT: u64 = 64 * 1024;
    let cannot = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(cannot)?;
    // A device or a pipe (`/dev/zero`) is refused, not read forever.
    if !file.metadata().map_err(cannot)?.is_file() {
        return Err(format!("{}: a key file is a regular file", path.display()));
    }
    let mut bytes = Vec::new();
    file.take(LIMIT + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > LIMIT {
        return Err(format!(
            "{}: more than {LIMIT} bytes is too long for a key file",
            path.display()
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{}: a key file is PEM text", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_and_verifies_and_refuses_any_change() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let header = [3u8; 128];
        let t = trailer(&header, &key);
        assert_eq!(verify(&header, &t).unwrap(), key.verifying_key());
        let mut h = header;
        h[100] ^= 1;
        let e = verify(&h, &t).unwrap_err();
        assert!(e.contains("does not verify"), "{e}");
        for at in [0, 31, 32, 95] {
            let mut bad = t;
            bad[at] ^= 0x40;
            assert!(verify(&header, &bad).is_err(), "trailer byte {at}");
        }
        assert!(verify(&header, &t[..95]).unwrap_err().contains("95 bytes"));
    }

    #[test]
    fn keys_round_trip_through_pem() {
        let key = generate().unwrap();
        let dir = std::env::temp_dir().join(format!("slmcc-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (private, public) = (dir.join("k.key"), dir.join("k.pub"));
        std::fs::write(&private, signing_key_pem(&key).unwrap()).unwrap();
        std::fs::write(&public, verifying_key_pem(&key.verifying_key()).unwrap()).unwrap();
        assert_eq!(
            read_signing_key(&private).unwrap().to_bytes(),
            key.to_bytes()
        );
        assert_eq!(read_verifying_key(&public).unwrap(), key.verifying_key());
        let e = read_verifying_key(&private).unwrap_err();
        assert!(e.contains("this is a private key"), "{e}");
        let e = read_signing_key(&public).unwrap_err();
        assert!(e.contains("this is a public key"), "{e}");
        assert!(key_id(&key.verifying_key()).starts_with("ed25519:"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
