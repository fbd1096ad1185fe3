//! Helpers shared by the integration tests that run the `slmcc` binary.

#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
