//! The tensor readers of `run --input` and `golden check`: `.npy` files,
//! and ONNX `TensorProto` files (`input_0.pb`) whose external data,
//! after the separator, is the file `data.bin` beside them. The first
//! byte picks the reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slmcc_fuzz::{remove, split, write};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let path = write("input.npy", rest);
        let _ = slmcc_runtime::npy::read(&path);
    } else {
        let (pb, external) = split(rest);
        match external {
            Some(bytes) => {
                write("data.bin", bytes);
            }
            None => remove("data.bin"),
        }
        let path = write("input_0.pb", pb);
        let _ = slmcc::onnx::read_tensor_pb(&path);
    }
});
