//! The update reader of `slmcc patch`: `package::delta::apply` on an OLD
//! and an update. The first byte picks how the rest is used:
//! - even: OLD and the update as they are (mostly refused: the update
//!   names another OLD);
//! - odd: the update's OLD digest set to OLD's, so that mutations reach
//!   the pieces behind it.
//!
//! A rebuilt NEW must be as long as `apply` says and have the digest the
//! update promises.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slmcc_fuzz::split;
use slmcc_runtime::package::{delta, sha256};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (old, Some(update)) = split(rest) else {
        return;
    };
    let mut update = update.to_vec();
    if mode % 2 == 1 && update.len() >= delta::DELTA_HEADER_BYTES {
        update[12..44].copy_from_slice(&sha256(old));
    }
    let mut out = Vec::new();
    if let Ok(n) = delta::apply(old, &update, &mut out) {
        assert_eq!(n as usize, out.len());
        assert_eq!(sha256(&out)[..], update[44..76]);
    }
});
