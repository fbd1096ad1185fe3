//! `slmcc run`: run a model on input tensors and write or summarise its outputs.

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use slmcc_ir::Tensor;
use slmcc_runtime::{npy, Capture};

use super::load::{entry_graph, execute, load_module, prepare, read_tensor, Backend};
use crate::cli::RunArgs;
use crate::exit::CmdResult;

pub fn run(args: RunArgs) -> CmdResult {
    let backend = Backend::parse(&args.backend)?;
    let mut inputs: Vec<(String, Tensor)> = Vec::new();
    for spec in &args.input {
        let Some((name, file)) = spec.split_once('=') else {
            return Err(anyhow!("--input `{spec}`: expected NAME=FILE").into());
        };
        inputs.push((name.to_string(), read_tensor(Path::new(file))?));
    }
    check_unique(&inputs)?;
    let mut module = load_module(&args.model)?;
    prepare(&mut module, backend, &args.model)?;
    let graph = entry_graph(&module)?;
    let result = execute(backend, &module, graph, &inputs, &Capture::Nothing)
        .map_err(|e| anyhow!("{}: {e}", args.model.display()))?;
    match &args.output_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for (name, t) in &result.outputs {
                let path = dir.join(format!("{}.npy", file_stem(name)));
                let bytes = npy::to_bytes(t).map_err(|e| anyhow!("output `{name}`: {e}"))?;
                super::opt::write_atomically(&path, &bytes)?;
                println!(
                    "{name}: {} {:?} -> {}",
                    t.dtype(),
                    t.shape(),
                    path.display()
                );
            }
        }
        None => {
            for (name, t) in &result.outputs {
                println!("{}", summary(name, t));
            }
        }
    }
    Ok(())
}

/// A file name for a value name: anything but `[A-Za-z0-9_.-]` becomes `_`.
pub fn file_stem(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// One line about a tensor: dtype, shape, range and its first values.
fn summary(name: &str, t: &Tensor) -> String {
    let n = t.len();
    let head: Vec<String> = (0..n.min(6))
        .map(|i| format!("{:.6}", t.get_f64(i)))
        .collect();
    let (lo, hi) = (0..n).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), i| {
        let v = t.get_f64(i);
        (lo.min(v), hi.max(v))
    });
    format!(
        "{name}: {} {:?} min {lo:.6} max {hi:.6} [{}{}]",
        t.dtype(),
        t.shape(),
        head.join(", "),
        if n > 6 { ", ..." } else { "" }
    )
}

/// Fails unless every input is named once.
fn check_unique(inputs: &[(String, Tensor)]) -> anyhow::Result<()> {
    for (i, (n, _)) in inputs.iter().enumerate() {
        if inputs[..i].iter().any(|(m, _)| m == n) {
            bail!("input `{n}` is given twice");
        }
    }
    Ok(())
}
