//! The IR text parser and verifier on arbitrary text. A module that parses
//! and verifies prints to text that parses back to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slmcc_ir::text::{parse_module, print_module};
use slmcc_ir::verify::verify_module;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(module) = parse_module(src) else {
        return;
    };
    if verify_module(&module).is_err() {
        return;
    }
    let printed = print_module(&module);
    let again = parse_module(&printed).expect("printed IR parses");
    assert_eq!(
        printed,
        print_module(&again),
        "print, parse, print is stable"
    );
});
