//! What the fuzz targets share: a scratch folder per process, and the
//! split of one input into the files a loader reads side by side.

use std::path::PathBuf;
use std::sync::OnceLock;

/// This process's scratch folder (under the system's temp dir, made once).
/// Targets whose loader takes a path write their input here, so that the
/// code under test is the code `slmcc` runs on a user's file.
pub fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("slmcc-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    })
}

/// The separator between the parts of a multi-file input (a model and its
/// external data): a string the dictionaries also hold.
pub const SEPARATOR: &[u8] = b"\n--slmcc-fuzz-part--\n";

/// `data` cut at the first [`SEPARATOR`]: (first part, rest if any).
pub fn split(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
        Some(at) => (&data[..at], Some(&data[at + SEPARATOR.len()..])),
        None => (data, None),
    }
}

/// Writes `bytes` to `name` in the scratch folder and returns its path.
pub fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, bytes).expect("scratch write");
    path
}

/// Removes `name` from the scratch folder if it is there.
pub fn remove(name: &str) {
    let _ = std::fs::remove_file(scratch().join(name));
}
