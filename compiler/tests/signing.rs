//! Signed packages: `slmcc keygen`, `compile --sign KEY` and
//! `run`/`generate --trust PUBKEY`. A package is refused (exit code 2, a
//! message naming the file and the reason) when any byte of it changed,
//! when it is unsigned, or when another key signed it; the signature is
//! checked with OpenSSL as well, and keys OpenSSL made work as ours do.

mod common;

use std::path::Path;
use std::process::Command;

use common::{compile_llama, keygen_in, repo, s, scratch_dir, skip, slmcc, stderr, stdout};
use slmcc_runtime::package::{signature, Package, HEADER_BYTES};

fn input() -> String {
    format!(
        "input_ids={}",
        repo().join("goldens/llama/seq5/input_ids.npy").display()
    )
}

/// `slmcc run PKG --trust KEY` on the golden input.
fn run_trusting(pkg: &Path, key: &Path, out: &Path) -> std::process::Output {
    let i = input();
    slmcc(&[
        "run",
        s(pkg),
        "--trust",
        s(key),
        "--input",
        &i,
        "--output-dir",
        s(out),
    ])
}

fn refused(o: &std::process::Output, path: &Path, reason: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    assert!(e.contains(reason), "want `{reason}`: {e}");
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn keygen_writes_a_private_and_a_public_key_and_never_overwrites() {
    let dir = scratch_dir("signing-keygen");
    let (private, public) = keygen_in(&dir, "release");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&private), 0o600);
    }
    let text = std::fs::read_to_string(&private).unwrap();
    assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"), "{text}");
    let key = signature::read_signing_key(&private).unwrap();
    assert_eq!(
        signature::read_verifying_key(&public).unwrap(),
        key.verifying_key()
    );
    // A second keygen of the same name changes nothing.
    let o = slmcc(&["keygen", s(&dir.join("release"))]);
    refused(&o, &private, "never overwritten");
    assert_eq!(std::fs::read_to_string(&private).unwrap(), text);
    // Two keys differ.
    let (other, _) = keygen_in(&dir, "other");
    assert_ne!(
        signature::read_signing_key(&other).unwrap().to_bytes(),
        key.to_bytes()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn trusted_packages_run_and_any_other_is_refused() {
    let dir = scratch_dir("signing-trust");
    let (a_key, a_pub) = keygen_in(&dir, "a");
    let (b_key, b_pub) = keygen_in(&dir, "b");
    let signed = dir.join("signed.slmpkg");
    let o = compile_llama(&signed, &["--sign", s(&a_key)]);
    let a_id = signature::key_id(&signature::read_verifying_key(&a_pub).unwrap());
    assert!(
        stdout(&o).contains(&format!("signed by {a_id}")),
        "{}",
        stdout(&o)
    );
    let unsigned = dir.join("unsigned.slmpkg");
    compile_llama(&unsigned, &[]);

    // The signature is a trailer: the rest is the unsigned package.
    let (sb, ub) = (
        std::fs::read(&signed).unwrap(),
        std::fs::read(&unsigned).unwrap(),
    );
    assert_eq!(sb.len(), ub.len() + signature::TRAILER_BYTES);
    assert_eq!(sb[HEADER_BYTES..ub.len()], ub[HEADER_BYTES..]);

    // Trusted: it runs, with the unsigned package's numbers.
    let o = run_trusting(&signed, &a_pub, &dir.join("out-signed"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let i = input();
    let out = dir.join("out-unsigned");
    let o = slmcc(&["run", s(&unsigned), "--input", &i, "--output-dir", s(&out)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(dir.join("out-signed/logits.npy")).unwrap(),
        std::fs::read(out.join("logits.npy")).unwrap()
    );
    let o = slmcc(&["report", s(&signed)]);
    assert!(
        stdout(&o).contains(&format!("signed by  {a_id} (signature verified)")),
        "{}",
        stdout(&o)
    );
    let o = slmcc(&["report", s(&unsigned)]);
    assert!(
        stdout(&o).contains("signed by  none (unsigned)"),
        "{}",
        stdout(&o)
    );

    // Signed by A, trusting B; unsigned, trusting A.
    let o = run_trusting(&signed, &b_pub, &dir.join("x"));
    refused(
        &o,
        &signed,
        &format!("signature: signed by {a_id}, not by the trusted key"),
    );
    let o = run_trusting(&unsigned, &a_pub, &dir.join("x"));
    refused(&o, &unsigned, "signature: the package is not signed");
    let o = slmcc(&[
        "generate",
        s(&signed),
        "--trust",
        s(&b_pub),
        "--prompt-ids",
        "1,2",
    ]);
    refused(&o, &signed, "not by the trusted key");

    // One flipped byte anywhere: the header, the manifest, the weights, the
    // trailer's key and its signature.
    let weights_at = ub.len() - Package::open(&unsigned).unwrap().weights_bytes();
    for (at, reason) in [
        (
            60,
            "does not verify: the package was changed after it was signed",
        ),
        (112, "header"),
        (HEADER_BYTES + 7, "manifest: SHA-256 mismatch"),
        (weights_at + 100, "weights: SHA-256 mismatch"),
        (ub.len() + 3, "signature: "),
        (
            sb.len() - 1,
            "does not verify: the package was changed after it was signed",
        ),
    ] {
        let mut bad = sb.clone();
        bad[at] ^= 0x04;
        let path = dir.join("bad.slmpkg");
        std::fs::write(&path, &bad).unwrap();
        let o = run_trusting(&path, &a_pub, &dir.join("x"));
        refused(&o, &path, reason);
    }
    // B's signature under A's key.
    let resigned = dir.join("resigned.slmpkg");
    compile_llama(&resigned, &["--sign", s(&b_key)]);
    let rb = std::fs::read(&resigned).unwrap();
    let mut pasted = sb.clone();
    pasted[ub.len() + 32..].copy_from_slice(&rb[ub.len() + 32..]);
    let path = dir.join("pasted.slmpkg");
    std::fs::write(&path, &pasted).unwrap();
    refused(
        &run_trusting(&path, &a_pub, &dir.join("x")),
        &path,
        "does not verify",
    );
    // The trailer cut off.
    std::fs::write(&path, &sb[..ub.len()]).unwrap();
    refused(
        &run_trusting(&path, &a_pub, &dir.join("x")),
        &path,
        "truncated",
    );

    // Usage: --trust on a model, a private key to --trust, a public key to
    // --sign (and then nothing is written).
    let model = repo().join("testdata/models/llama.onnx");
    let o = slmcc(&["run", s(&model), "--trust", s(&a_pub), "--input", &i]);
    refused(&o, &model, "not a package");
    refused(
        &run_trusting(&signed, &a_key, &dir.join("x")),
        &a_key,
        "this is a private key",
    );
    let never = dir.join("never.slmpkg");
    refused(
        &slmcc(&[
            "compile",
            "testdata/models/llama.onnx",
            "--target",
            "cpu",
            "--sign",
            s(&a_pub),
            "-o",
            s(&never),
        ]),
        &a_pub,
        "this is a public key",
    );
    assert!(!never.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// OpenSSL, which nobody here wrote: a key it makes signs packages that
/// `--trust` accepts, and it verifies our signatures (the message being
/// the domain string followed by the 128-byte header).
#[test]
fn openssl_keys_sign_and_openssl_verifies_our_signatures() {
    let ok = Command::new("openssl")
        .args(["list", "-public-key-algorithms"])
        .output()
        .is_ok_and(|o| o.status.success() && stdout(&o).contains("ED25519"));
    if !ok {
        skip("openssl interop", "no openssl with Ed25519 on PATH");
        return;
    }
    let dir = scratch_dir("signing-openssl");
    let openssl = |args: &[&str]| {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "openssl {args:?}: {}", stderr(&o));
        o
    };
    openssl(&["genpkey", "-algorithm", "ed25519", "-out", "ossl.key"]);
    openssl(&["pkey", "-in", "ossl.key", "-pubout", "-out", "ossl.pub"]);
    let pkg = dir.join("ossl.slmpkg");
    compile_llama(&pkg, &["--sign", s(&dir.join("ossl.key"))]);
    let o = run_trusting(&pkg, &dir.join("ossl.pub"), &dir.join("out"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // Our key, verified by openssl.
    let (_, ours) = keygen_in(&dir, "ours");
    let bytes = std::fs::read(&pkg).unwrap();
    let mut message = signature::DOMAIN.to_vec();
    message.extend_from_slice(&bytes[..HEADER_BYTES]);
    std::fs::write(dir.join("message"), &message).unwrap();
    std::fs::write(dir.join("sig"), &bytes[bytes.len() - 64..]).unwrap();
    let verify = |key: &str| {
        Command::new("openssl")
            .args(["pkeyutl", "-verify", "-pubin", "-inkey", key, "-rawin"])
            .args(["-in", "message", "-sigfile", "sig"])
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let o = verify("ossl.pub");
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        !verify(s(&ours)).status.success(),
        "another key verified the signature"
    );
    // The public key in the trailer is the signer's.
    let der = openssl(&["pkey", "-pubin", "-in", "ossl.pub", "-outform", "DER"]).stdout;
    assert_eq!(
        der[der.len() - 32..],
        bytes[bytes.len() - 96..bytes.len() - 64]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
