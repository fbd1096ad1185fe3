//! The package loader: `Package::open` (header, digests, sections,
//! versions), then the module and every bucket's NPU programs, as `run`
//! loads them. The first byte picks how the rest is used:
//! - even: the rest is a package file, as it is (mostly refused by the
//!   header and digest checks);
//! - odd: the rest is a package whose manifest and weights are read as
//!   the header places them and sealed again (fresh digests), so that the
//!   manifest's contents reach the checks behind the digests; when bit 1
//!   is set too, it is also signed, and the signer checked against the key.
//!
//! An encrypted package is decrypted with the seeds' key (32 bytes of 9)
//! first: the encryption record's checks, and AES-GCM on changed chunks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use slmcc_fuzz::write;
use slmcc_runtime::package::encryption::WeightKey;
use slmcc_runtime::package::signature::SigningKey;
use slmcc_runtime::package::{self, Manifest, Package, Part};

/// (manifest, weights) of a package file whose header is whole, by its
/// offsets and lengths, clamped to the file.
fn parts(file: &[u8]) -> Option<(Manifest, &[u8])> {
    let at = |o: usize| -> Option<usize> {
        usize::try_from(u64::from_le_bytes(file.get(o..o + 8)?.try_into().ok()?)).ok()
    };
    let (moff, mlen, woff, wlen) = (at(16)?, at(24)?, at(32)?, at(40)?);
    let manifest = file.get(moff..moff.checked_add(mlen)?)?;
    let weights = file.get(woff.min(file.len())..woff.saturating_add(wlen).min(file.len()))?;
    let mut m = Manifest::decode(manifest).ok()?;
    m.weight_sections = None;
    Some((m, weights))
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, file)) = data.split_first() else {
        return;
    };
    let key = SigningKey::from_bytes(&[7; 32]);
    let signed = mode & 3 == 3;
    let bytes = if mode % 2 == 0 {
        file.to_vec()
    } else {
        let Some((manifest, weights)) = parts(file) else {
            return;
        };
        let mut out = Vec::new();
        package::encode_signed_to(&mut out, &manifest, weights, signed.then_some(&key))
            .expect("writing to memory");
        out
    };
    let path = write("model.slmpkg", &bytes);
    let mut pkg = match Package::open(&path) {
        Ok(pkg) => pkg,
        // A package signed here is refused for its contents, never for
        // its signature.
        Err(e) => {
            assert!(!(signed && e.part == Part::Signature), "{e}");
            return;
        }
    };
    if signed {
        pkg.check_signer(&key.verifying_key())
            .expect("a package signed here verifies");
    }
    if pkg.encryption().is_some() && pkg.decrypt(&WeightKey::from_bytes([9; 32])).is_err() {
        assert!(pkg.module().is_err(), "nothing half-decrypted loads");
        return;
    }
    let Ok(module) = pkg.module() else {
        return;
    };
    for g in &module.graphs {
        let _ = pkg.npu_programs(&module, &g.name);
    }
});
