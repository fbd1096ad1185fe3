//! Helpers shared by the integration tests that run the `slmcc` binary.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use slmcc_ir::Module;

/// Runs `slmcc` from the repository root.
pub fn slmcc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run slmcc")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The exported decoder models of `testdata/models/`.
pub const DECODERS: [&str; 4] = ["llama", "qwen2", "phi3", "gpt2"];

/// Runs a pipeline with the verifier after each pass; panics naming it.
pub fn run_pipeline(m: &mut Module, pipeline: &str) {
    slmcc_passes::run_pipeline(m, pipeline).unwrap_or_else(|e| panic!("{pipeline}: {e}"));
}

/// `n` token ids below `vocab`, from a fixed-seed LCG.
pub fn tokens(n: usize, vocab: u64, seed: u64) -> Vec<i64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % vocab) as i64
        })
        .collect()
}
