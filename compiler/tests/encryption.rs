//! Encrypted packages: `compile --encrypt KEYFILE`, and `run`, `generate`
//! and `report` with `--decrypt KEYFILE`. With its key an encrypted package
//! gives the plain package's outputs byte for byte; without it, with
//! another key, or with a byte changed, it is refused (exit code 2, a
//! message naming the file and the reason), and no weight bytes of the
//! plain package appear in it.

mod common;

use std::path::{Path, PathBuf};

use common::{keygen_in, ok, refused, repo, s, scratch_dir, slmcc, stdout};

fn qwen2() -> PathBuf {
    repo().join("testdata/models/qwen2.onnx")
}

fn input() -> String {
    format!(
        "input_ids={}",
        repo().join("goldens/qwen2/seq11/input_ids.npy").display()
    )
}

/// Compiles the tiny Qwen2 for the RK3588 (W8A8) to `out`, with `extra`
/// options.
fn compile(out: &Path, extra: &[&str]) -> std::process::Output {
    let q = qwen2();
    let mut args = vec![
        "compile",
        s(&q),
        "--target",
        "rk3588",
        "--quant",
        "w8a8",
        "--buckets",
        "16",
        "-o",
        s(out),
    ];
    args.extend_from_slice(extra);
    slmcc(&args)
}

/// `run PKG` on the golden input with `keys`, writing the outputs to `out`.
fn run(pkg: &Path, keys: &[&str], backend: &str, out: &Path) -> std::process::Output {
    let i = input();
    let mut args = vec![
        "run",
        s(pkg),
        "--backend",
        backend,
        "--input",
        &i,
        "--output-dir",
        s(out),
    ];
    args.extend_from_slice(keys);
    slmcc(&args)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn encrypted_packages_run_with_their_key_only() {
    let dir = scratch_dir("encryption");
    let (a, b) = (dir.join("a.key"), dir.join("b.key"));
    // A hex key file as `openssl rand -hex 32` writes it, and a raw one.
    std::fs::write(&a, format!("{}\n", "5c".repeat(32))).unwrap();
    std::fs::write(&b, [0xa7u8; 32]).unwrap();
    let plain = dir.join("plain.slmpkg");
    let enc = dir.join("enc.slmpkg");
    ok(&compile(&plain, &[]));
    let o = compile(&enc, &["--encrypt", s(&a)]);
    ok(&o);
    assert!(
        stdout(&o).contains("weights encrypted with aes:"),
        "{}",
        stdout(&o)
    );
    // Deterministic: a second compile gives the same bytes.
    let again = dir.join("again.slmpkg");
    ok(&compile(&again, &["--encrypt", s(&a)]));
    let bytes = std::fs::read(&enc).unwrap();
    assert_eq!(bytes, std::fs::read(&again).unwrap());
    // The weights are not there in clear: neither the safetensors header
    // nor any 64-byte run of the plain package's weights.
    let plain_bytes = std::fs::read(&plain).unwrap();
    assert!(contains(&plain_bytes, b"\"data_offsets\""));
    assert!(!contains(&bytes, b"\"data_offsets\""));
    let tail = &plain_bytes[plain_bytes.len() - 4096..plain_bytes.len() - 4032];
    assert!(!contains(&bytes, tail));

    // With the key, the outputs are the plain package's, on the NPU's
    // functional model and on the CPU kernels.
    for backend in ["npu-sim", "cpu"] {
        let (p, e) = (
            dir.join(format!("p-{backend}")),
            dir.join(format!("e-{backend}")),
        );
        ok(&run(&plain, &[], backend, &p));
        ok(&run(&enc, &["--decrypt", s(&a)], backend, &e));
        assert_eq!(
            std::fs::read(p.join("logits.npy")).unwrap(),
            std::fs::read(e.join("logits.npy")).unwrap(),
            "{backend}"
        );
    }
    // generate decodes the same tokens from a package with the decode
    // graph.
    let (plain_kv, enc_kv) = (dir.join("plain-kv.slmpkg"), dir.join("enc-kv.slmpkg"));
    ok(&compile(&plain_kv, &["--kv-cache"]));
    ok(&compile(&enc_kv, &["--kv-cache", "--encrypt", s(&a)]));
    let gen = |pkg: &Path, keys: &[&str]| {
        let mut args = vec![
            "generate",
            s(pkg),
            "--prompt-ids",
            "1,2,3,4",
            "--max-new-tokens",
            "6",
        ];
        args.extend_from_slice(keys);
        let o = slmcc(&args);
        ok(&o);
        stdout(&o)
    };
    assert_eq!(gen(&plain_kv, &[]), gen(&enc_kv, &["--decrypt", s(&a)]));

    // Without the key, with another key, on a plain package, on a model.
    let out = dir.join("refused");
    refused(
        &run(&enc, &[], "cpu", &out),
        "the weights are encrypted (aes-256-gcm, key aes:",
    );
    refused(
        &run(&enc, &["--decrypt", s(&b)], "cpu", &out),
        "wrong key: the weights were encrypted with key aes:",
    );
    refused(
        &run(&plain, &["--decrypt", s(&a)], "cpu", &out),
        "the weights are not encrypted",
    );
    let q = qwen2();
    refused(
        &run(&q, &["--decrypt", s(&a)], "cpu", &out),
        "--decrypt decrypts a package's weights, and this is not a package",
    );
    assert!(!out.exists());
    // A byte changed in the ciphertext fails its section's digest.
    let mut bad = bytes.clone();
    let at = bad.len() - 100;
    bad[at] ^= 0x04;
    let flipped = dir.join("flipped.slmpkg");
    std::fs::write(&flipped, &bad).unwrap();
    let o = run(&flipped, &["--decrypt", s(&a)], "cpu", &out);
    refused(&o, "SHA-256 mismatch in section 0");
    refused(&o, &flipped.display().to_string());

    // report: the card without the key, the rest with it.
    let o = slmcc(&["report", s(&enc), "--card", "json"]);
    ok(&o);
    refused(&slmcc(&["report", s(&enc)]), "give the key with --decrypt");
    let o = slmcc(&["report", s(&enc), "--decrypt", s(&a)]);
    ok(&o);
    assert!(
        stdout(&o).contains("encrypted  aes-256-gcm in chunks of 1048576 bytes, key aes:"),
        "{}",
        stdout(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad keys fail before anything is compiled, and nothing is written; a
/// package both signed and encrypted needs both keys' checks to pass.
#[test]
fn bad_keys_are_refused_and_signing_composes() {
    let dir = scratch_dir("encryption-keys");
    let (private, public) = keygen_in(&dir, "release");
    let out = dir.join("m.slmpkg");
    refused(&compile(&out, &["--encrypt", s(&private)]), "a PEM file");
    let short = dir.join("short.key");
    std::fs::write(&short, "00112233").unwrap();
    refused(
        &compile(&out, &["--encrypt", s(&short)]),
        "this file holds 8 bytes",
    );
    refused(
        &compile(&out, &["--encrypt", s(&dir.join("missing.key"))]),
        "missing.key",
    );
    // A device is refused, not read forever.
    refused(
        &compile(&out, &["--encrypt", "/dev/zero"]),
        "not a key file",
    );
    refused(
        &compile(&out, &["--sign", "/dev/zero"]),
        "a key file is a regular file",
    );
    assert!(!out.exists());

    let key = dir.join("w.key");
    std::fs::write(&key, "0123456789abcdef".repeat(4)).unwrap();
    ok(&compile(
        &out,
        &["--encrypt", s(&key), "--sign", s(&private)],
    ));
    let (_, other) = keygen_in(&dir, "other");
    let o = dir.join("o");
    refused(
        &run(
            &out,
            &["--decrypt", s(&key), "--trust", s(&other)],
            "cpu",
            &o,
        ),
        "not by the trusted key",
    );
    refused(
        &run(&out, &["--decrypt", "/dev/zero"], "cpu", &o),
        "not a key file",
    );
    refused(
        &run(&out, &["--trust", "/dev/zero"], "cpu", &o),
        "a key file is a regular file",
    );
    ok(&run(
        &out,
        &["--decrypt", s(&key), "--trust", s(&public)],
        "cpu",
        &o,
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
