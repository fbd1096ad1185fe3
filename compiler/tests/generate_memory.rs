//! A long generation with a sliding window keeps resident memory flat: the
//! KV cache is a preallocated ring (`--kv-window 256 --kv-sinks 4`), and a
//! decode step allocates nothing, so after warm-up the process's resident
//! set must not grow, however many tokens it generates.
//!
//! The test runs `slmcc generate` for 10,000 tokens, reads the tokens as
//! they stream, and samples the child's `VmRSS` (`/proc/PID/status`) every
//! 500 tokens. The window wraps after 260 tokens, so from token 1,000 on
//! the ring is full and every later sample is of the steady state.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use common::repo;

/// Resident kilobytes of process `pid`.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn ten_thousand_tokens_with_a_window_keep_memory_flat() {
    if !std::path::Path::new("/proc/self/status").exists() {
        panic!("this test samples /proc/PID/status (Linux only)");
    }
    let model = repo().join("testdata/models/qwen2.onnx");
    let mut child = Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args([
            "generate",
            model.to_str().unwrap(),
            "--prompt-ids",
            "1,2,3,4,5",
            "--max-new-tokens",
            "10000",
            "--kv-window",
            "256",
            "--kv-sinks",
            "4",
            "--temperature",
            "0.9",
            "--seed",
            "3",
        ])
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run slmcc");
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let (mut tokens, mut samples) = (0usize, Vec::new());
    let mut buf = [0u8; 4096];
    let mut next_sample = 500;
    loop {
        let n = out.read(&mut buf).expect("read the token stream");
        if n == 0 {
            break;
        }
        tokens += buf[..n].iter().filter(|&&b| b == b' ').count();
        while tokens >= next_sample && next_sample < 10_000 {
            if let Some(kib) = rss_kib(pid) {
                samples.push((next_sample, kib));
            }
            next_sample += 500;
        }
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
    assert_eq!(tokens, 10_000, "{err}");
    eprintln!("VmRSS (tokens, KiB): {samples:?}");
    let steady: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= 1000)
        .map(|(_, k)| *k)
        .collect();
    assert!(steady.len() >= 10, "too few samples: {samples:?}");
    // Flat: no sample exceeds the first steady one by more than 256 KiB
    // (page-granular noise of stdout buffering and the allocator); a cache
    // that grew per token would add ≥ 2 layers × 2 × 2 heads × 16 × 4 B =
    // 512 B per token, 4.5 MB over the run.
    let base = steady[0];
    let worst = steady.iter().copied().max().unwrap();
    assert!(
        worst <= base + 256,
        "resident memory grew from {base} KiB to {worst} KiB after warm-up: {samples:?}"
    );
}
