//! The text front end of `generate` and `--calib`. The first byte picks
//! what the rest is:
//! - even: a prompt, encoded by the trained model's tokenizer
//!   (`testdata/models/trained/tokenizer.json`) and decoded back, as
//!   `generate` does; its ids also decode as output ids would;
//! - odd: a `tokenizer.json` the user gives, loaded, then used on a
//!   fixed prompt.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use slmcc::tokenize::Tokenizer;
use slmcc_fuzz::write;

fn trained() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/models/trained/tokenizer.json");
        Tokenizer::load(&path).expect("the trained model's tokenizer")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let text = String::from_utf8_lossy(rest);
        let Ok(ids) = trained().encode(&text) else {
            return;
        };
        let _ = trained().decode(&ids);
        let raw: Vec<i64> = rest.iter().map(|&b| i64::from(b) * 37 - 512).collect();
        let _ = trained().decode(&raw);
    } else {
        let path = write("tokenizer.json", rest);
        if let Ok(t) = Tokenizer::load(&path) {
            if let Ok(ids) = t.encode("The quick brown fox, 123 déjà vu!") {
                let _ = t.decode(&ids);
            }
        }
    }
});
