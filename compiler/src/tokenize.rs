//! Text in and out of `slmcc generate`: a Hugging Face `tokenizer.json`
//! through the `tokenizers` crate (pure Rust regexes, no downloads).

use std::path::{Path, PathBuf};

use anyhow::anyhow;

/// A loaded tokenizer and the file it came from (for error messages).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl Tokenizer {
    pub fn load(path: &Path) -> anyhow::Result<Tokenizer> {
        let bytes = std::fs::read(path)
            .map_err(|e| anyhow!("{}: cannot read the tokenizer: {e}", path.display()))?;
        // The file is parsed as JSON first: the tokenizers crate panics on
        // some syntax errors inside its sections (found by fuzzing,
        // testdata/malformed/fuzz/tokenizer).
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(|e| anyhow!("{}: not a tokenizer.json: {e}", path.display()))?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| anyhow!("{}: cannot load the tokenizer: {e}", path.display()))?;
        Ok(Tokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// The ids of `text`, without added special tokens.
    pub fn encode(&self, text: &str) -> anyhow::Result<Vec<i64>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("{}: cannot encode the prompt: {e}", self.path.display()))?;
        Ok(enc.get_ids().iter().map(|&i| i as i64).collect())
    }

    /// The text of `ids`, special tokens skipped.
    pub fn decode(&self, ids: &[i64]) -> anyhow::Result<String> {
        let ids: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
        self.inner
            .decode(&ids, true)
            .map_err(|e| anyhow!("{}: cannot decode: {e}", self.path.display()))
    }
}
