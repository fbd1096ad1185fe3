//! `slmcc import`: an ONNX model to textual IR, printed on stdout, or
//! written with `-o OUT.slm` together with its weights (`OUT.safetensors`
//! beside it, named in the module header). Both files are written
//! atomically; a failure leaves neither behind.

use std::fs;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use slmcc::onnx::import_model;
use slmcc_ir::text::print_module;
use slmcc_ir::{verify_module, Module};

use super::opt::write_atomically;
use crate::cli::ImportArgs;
use crate::exit::CmdResult;

pub fn run(args: ImportArgs) -> CmdResult {
    let path = &args.model;
    let mut module = import_model(path)?;
    verify_module(&module).map_err(|e| {
        anyhow!(
            "{}: the imported module does not verify: {e}",
            path.display()
        )
    })?;
    match super::opt::output_file(&args.output) {
        None => print!("{}", print_module(&module)),
        Some(out) => write_module(&mut module, out)?,
    }
    Ok(())
}

/// Writes the weights file (when there are weights) and then the IR.
fn write_module(module: &mut Module, out: &Path) -> anyhow::Result<()> {
    let mut written = None;
    if !module.weights.is_empty() {
        let weights = out.with_extension("safetensors");
        if weights == out {
            bail!(
                "{}: the IR output cannot be named like its weights file (use .slm)",
                out.display()
            );
        }
        let name = weights
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{}: not a file name", out.display()))?;
        module.weights.file = Some(name);
        module
            .weights
            .save(&weights)
            .with_context(|| format!("cannot write {}", weights.display()))?;
        written = Some(weights);
    }
    let text = print_module(module);
    if let Err(e) = write_atomically(out, text.as_bytes()) {
        if let Some(w) = written {
            let _ = fs::remove_file(w);
        }
        return Err(e);
    }
    Ok(())
}
