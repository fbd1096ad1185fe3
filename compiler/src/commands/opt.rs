//! `slmcc opt`: parse textual IR, run a pipeline, print or write the result.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, Context};
use slmcc_ir::text::{parse_module, print_module};
use slmcc_ir::verify_input;
use slmcc_passes::runner::{format_stats, parse_pass_names};
use slmcc_passes::{PassManager, PrintAfter, RunOptions};

use crate::cli::OptArgs;
use crate::exit::CmdResult;

pub fn run(args: OptArgs) -> CmdResult {
    let path = &args.input;
    let src =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut module = parse_module(&src)
        .map_err(|e| anyhow!("{}:{}:{}: {}", path.display(), e.line, e.col, e.message))?;
    // The input is checked before any pass, so that a pass is never blamed
    // for its input.
    verify_input(&module).map_err(|e| anyhow!("{}: invalid IR: {e}", path.display()))?;
    attach_weights(&mut module, path)?;

    let print_ir_after = match &args.print_ir_after {
        Some(text) => PrintAfter::parse(text)?,
        None => PrintAfter::Never,
    };
    let print_ir_before = match &args.print_ir_before {
        Some(text) => parse_pass_names("--print-ir-before", text)?,
        None => Vec::new(),
    };
    if let Some(file) = &args.reproducer {
        let _ = fs::remove_file(file);
    }
    let options = RunOptions {
        print_ir_after,
        print_ir_before,
        print_ir_after_failure: args.print_ir_after_failure,
        verify_each: args.verify_each,
        bisect_limit: args.bisect_limit,
        reproducer: args.reproducer.clone(),
    };
    let mut pm = PassManager::parse(&args.passes, options)?;
    let mut stderr = std::io::stderr().lock();
    let records = pm.run(&mut module, &mut stderr).map_err(|e| {
        let mut message = format!("{}: {e}", path.display());
        if let Some(file) = args.reproducer.as_ref().filter(|f| f.exists()) {
            message.push_str(&format!(
                " (reproducer, the IR before the pass with its replay command: {})",
                file.display()
            ));
        }
        anyhow!(message)
    })?;
    if args.pass_stats {
        let _ = write!(stderr, "{}", format_stats(&records));
    }
    let output = output_file(&args.output);
    if let Some(out) = output {
        save_held_weights(&mut module, out)?;
    }
    let text = print_module(&module);
    match output {
        Some(out) => write_atomically(out, text.as_bytes())?,
        None => print!("{text}"),
    }
    Ok(())
}

/// Attaches the weights file a module names, resolved beside the input file.
/// A missing file is not an error for `opt`, which works on structure alone;
/// a file that is present but disagrees with the declarations is.
fn attach_weights(module: &mut slmcc_ir::Module, input: &Path) -> anyhow::Result<()> {
    let Some(file) = module.weights.file.clone() else {
        return Ok(());
    };
    let path = input.parent().unwrap_or(Path::new(".")).join(&file);
    if !path.exists() {
        tracing::info!(
            "weights file {} not found; continuing without weight data",
            path.display()
        );
        return Ok(());
    }
    module.weights.attach_file(&path)?;
    Ok(())
}

/// A pass that added weights in memory (`quantize`) leaves the input's
/// weights file incomplete: every weight is written to the output's
/// `.safetensors` sibling, which the module header then names.
fn save_held_weights(module: &mut slmcc_ir::Module, out: &Path) -> anyhow::Result<()> {
    if !module.weights.has_held() {
        return Ok(());
    }
    let path = out.with_extension("safetensors");
    module.weights.save(&path)?;
    module.weights.file = path.file_name().map(|f| f.to_string_lossy().into_owned());
    Ok(())
}

/// The file named by `-o`, or `None` for stdout (no `-o`, or `-o -`).
pub fn output_file(output: &Option<std::path::PathBuf>) -> Option<&Path> {
    output.as_deref().filter(|p| *p != Path::new("-"))
}

/// Writes through a temporary file in the same folder, renamed into place,
/// so a failure never leaves a half-written output.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = partial_path(path);
    if let Err(e) = fs::write(&tmp, bytes) {
        let _ = fs::remove_file(&tmp);
        return Err(anyhow::anyhow!("cannot write {}: {e}", tmp.display()));
    }
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes `path` through its temporary file ([`partial_path`]): `write`
/// fills the file (given its buffered writer and its path), which is then
/// flushed, synced and renamed into place; on any failure it is removed
/// and `path` is left as it was.
pub fn write_through_partial<T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<fs::File>, &Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    with_partial_file(path, |file, tmp| {
        let mut f = std::io::BufWriter::new(file.try_clone()?);
        let value = write(&mut f, tmp)?;
        std::io::Write::flush(&mut f).with_context(|| format!("cannot write {}", tmp.display()))?;
        Ok(value)
    })
}

/// [`write_through_partial`] for a writer that needs the file itself,
/// opened for reading and writing (to map what it wrote): `write` fills it,
/// then it is synced and renamed into place, or removed on any failure.
pub fn with_partial_file<T>(
    path: &Path,
    write: impl FnOnce(&mut fs::File, &Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let tmp = partial_path(path);
    let result = (|| {
        let mut file = fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        let value = write(&mut file, &tmp)?;
        file.sync_all()
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        Ok(value)
    })();
    match result {
        Ok(value) => {
            fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
            Ok(value)
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// The temporary file that `path` is written through: in its folder (so the
/// rename stays on one file system), named for this process and this write,
/// so that two writers of one path never share it; a reader of `path` sees
/// the old file or a whole new one.
pub fn partial_path(path: &Path) -> std::path::PathBuf {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |f| f.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{}-{n}.slmcc-partial", std::process::id()))
}
