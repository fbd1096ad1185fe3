//! `slmcc keygen`: an Ed25519 key pair for signing packages
//! (`compile --sign`) and checking them (`run`/`generate --trust`).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use slmcc_runtime::package::signature;

use crate::cli::KeygenArgs;
use crate::exit::CmdResult;

/// Writes `NAME.key` (the private key, PKCS#8 PEM, readable by its owner
/// only) and `NAME.pub` (the public key, SubjectPublicKeyInfo PEM); both are
/// the files `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout`
/// write. Neither may exist already: a key is never overwritten.
pub fn run(args: KeygenArgs) -> CmdResult {
    let (private, public) = (
        with_suffix(&args.name, "key"),
        with_suffix(&args.name, "pub"),
    );
    for p in [&private, &public] {
        if p.exists() {
            return Err(anyhow!("{}: exists; a key is never overwritten", p.display()).into());
        }
    }
    let key = signature::generate().map_err(|e| anyhow!(e))?;
    let private_pem = signature::signing_key_pem(&key).map_err(|e| anyhow!(e))?;
    let public_pem = signature::verifying_key_pem(&key.verifying_key()).map_err(|e| anyhow!(e))?;
    write_new(&private, private_pem.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&public, public_pem.as_bytes(), 0o644) {
        let _ = std::fs::remove_file(&private);
        return Err(e.into());
    }
    println!(
        "wrote {} (private: keep it secret) and {} (public: give it to --trust); key {}",
        private.display(),
        public.display(),
        signature::key_id(&key.verifying_key())
    );
    Ok(())
}

/// `NAME.EXT`, keeping any dots already in NAME (`release.2026` →
/// `release.2026.key`).
fn with_suffix(name: &Path, ext: &str) -> PathBuf {
    let mut s = name.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Creates `path`, which must not exist, with `mode` (on Unix) from the
/// start, so the private key is never readable by others even briefly; a
/// failed write removes it.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut f = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| {
        let _ = std::fs::remove_file(path);
        anyhow!("cannot write {}: {e}", path.display())
    })
}
