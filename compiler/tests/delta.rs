//! `slmcc delta` and `slmcc patch`: patch(OLD, delta(OLD, NEW)) == NEW byte
//! for byte, for a LoRA-merged fine-tune of the Qwen2 test model
//! (`compile --lora testdata/lora/qwen2_attn`: PEFT's rank-4 adapter on
//! the attention projections) compiled for rk3588 and signed; and a patch is refused,
//! with nothing written, for another OLD, a changed or cut update, or a
//! result the trusted key did not sign.

mod common;

use std::path::Path;

use common::{keygen_in, ok, refused, repo, s, scratch_dir, slmcc, stderr, stdout};

fn compile(model: &Path, out: &Path, key: &Path, extra: &[&str]) {
    let mut args = vec![
        "compile",
        s(model),
        "--target",
        "rk3588",
        "--buckets",
        "16",
        "--sign",
        s(key),
        "-o",
        s(out),
    ];
    args.extend_from_slice(extra);
    ok(&slmcc(&args));
}

/// Nothing but `keep` in `dir` (no temporary file left behind).
fn only(dir: &Path, keep: &[&str]) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want: Vec<String> = keep.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn patching_a_lora_update_rebuilds_the_package_byte_for_byte() {
    let dir = scratch_dir("delta-lora");
    let keys = scratch_dir("delta-keys");
    let (a_key, a_pub) = keygen_in(&keys, "a");
    let (_, b_pub) = keygen_in(&keys, "b");
    let model = repo().join("testdata/models/qwen2.onnx");
    let adapter = repo().join("testdata/lora/qwen2_attn");
    let (old, new) = (dir.join("old.slmpkg"), dir.join("new.slmpkg"));
    compile(&model, &old, &a_key, &[]);
    compile(&model, &new, &a_key, &["--lora", s(&adapter)]);
    let (old_bytes, new_bytes) = (std::fs::read(&old).unwrap(), std::fs::read(&new).unwrap());
    assert_ne!(old_bytes, new_bytes);

    let update = dir.join("update.slmdelta");
    let o = slmcc(&["delta", s(&old), s(&new), "-o", s(&update)]);
    ok(&o);
    eprintln!("{}", stdout(&o));
    let size = std::fs::metadata(&update).unwrap().len() as usize;
    assert!(size < new_bytes.len() / 4, "{size} of {}", new_bytes.len());

    let patched = dir.join("patched.slmpkg");
    let o = slmcc(&[
        "patch",
        s(&old),
        s(&update),
        "-o",
        s(&patched),
        "--trust",
        s(&a_pub),
    ]);
    ok(&o);
    assert!(
        std::fs::read(&patched).unwrap() == new_bytes,
        "patched != NEW"
    );
    std::fs::remove_file(&patched).unwrap();

    // Refused, and nothing written: another OLD, a flipped byte in the
    // update's body, a cut update, a result another key signed.
    let o = slmcc(&["patch", s(&new), s(&update), "-o", s(&patched)]);
    refused(&o, "the delta was made from another package");
    let bad = dir.join("bad.slmdelta");
    let body = std::fs::read(&update).unwrap();
    for at in [100, body.len() / 2, body.len() - 2] {
        let mut b = body.clone();
        b[at] ^= 0x20;
        std::fs::write(&bad, &b).unwrap();
        let o = slmcc(&["patch", s(&old), s(&bad), "-o", s(&patched)]);
        assert_eq!(o.status.code(), Some(2), "byte {at}: {}", stderr(&o));
        assert!(stderr(&o).contains("bad.slmdelta"), "{}", stderr(&o));
    }
    std::fs::write(&bad, &body[..body.len() - 10]).unwrap();
    refused(
        &slmcc(&["patch", s(&old), s(&bad), "-o", s(&patched)]),
        "corrupted",
    );
    std::fs::write(&bad, b"not a delta").unwrap();
    refused(
        &slmcc(&["patch", s(&old), s(&bad), "-o", s(&patched)]),
        "not a slmcc delta",
    );
    std::fs::remove_file(&bad).unwrap();
    let o = slmcc(&[
        "patch",
        s(&old),
        s(&update),
        "-o",
        s(&old),
        "--trust",
        s(&b_pub),
    ]);
    refused(&o, "not by the trusted key");
    assert!(std::fs::read(&old).unwrap() == old_bytes, "OLD changed");
    only(&dir, &["old.slmpkg", "new.slmpkg", "update.slmdelta"]);

    // In place: OLD becomes NEW.
    ok(&slmcc(&["patch", s(&old), s(&update), "-o", s(&old)]));
    assert!(
        std::fs::read(&old).unwrap() == new_bytes,
        "patched in place != NEW"
    );
    only(&dir, &["old.slmpkg", "new.slmpkg", "update.slmdelta"]);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&keys).unwrap();
}

/// A requantization (round-to-nearest, then GPTQ on the calibration text)
/// keeps the layout: the update is the integers that moved.
#[test]
fn patching_a_requantization_rebuilds_the_package_byte_for_byte() {
    let dir = scratch_dir("delta-requant");
    let t = repo().join("testdata/models/trained");
    let (old, new) = (dir.join("rtn.slmpkg"), dir.join("gptq.slmpkg"));
    let model = t.join("llama_trained.onnx");
    let base = [
        "compile",
        s(&model),
        "--target",
        "cpu",
        "--quant",
        "w8a8",
        "--buckets",
        "32",
    ];
    let mut a = base.to_vec();
    a.extend(["-o", s(&old)]);
    ok(&slmcc(&a));
    let (calib, tok) = (t.join("calib.txt"), t.join("tokenizer.json"));
    let mut a = base.to_vec();
    a.extend(["--quant-method", "gptq", "--calib", s(&calib)]);
    a.extend([
        "--calib-tokenizer",
        s(&tok),
        "--calib-windows",
        "4",
        "-o",
        s(&new),
    ]);
    ok(&slmcc(&a));
    let update = dir.join("requant.slmdelta");
    let o = slmcc(&["delta", s(&old), s(&new), "-o", s(&update)]);
    ok(&o);
    eprintln!("{}", stdout(&o));
    let patched = dir.join("patched.slmpkg");
    ok(&slmcc(&["patch", s(&old), s(&update), "-o", s(&patched)]));
    let new_bytes = std::fs::read(&new).unwrap();
    assert!(
        std::fs::read(&patched).unwrap() == new_bytes,
        "patched != NEW"
    );
    let size = std::fs::metadata(&update).unwrap().len() as usize;
    assert!(size < new_bytes.len() / 4, "{size} of {}", new_bytes.len());
    std::fs::remove_dir_all(&dir).unwrap();
}
