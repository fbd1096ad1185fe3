//! The ONNX importer on arbitrary bytes: the model file, and after the
//! separator the external-data file `data.bin` beside it (what a model's
//! `location` fields may name). An imported module must verify and print.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slmcc_fuzz::{remove, split, write};

fuzz_target!(|data: &[u8]| {
    let (model, external) = split(data);
    match external {
        Some(bytes) => {
            write("data.bin", bytes);
        }
        None => remove("data.bin"),
    }
    let path = write("model.onnx", model);
    if let Ok(module) = slmcc::onnx::import_model(&path) {
        slmcc_ir::verify::verify_module(&module).expect("an imported module verifies");
        let _ = slmcc_ir::text::print_module(&module);
    }
});
