//! The NPU register-program decoder: a command buffer of 64-bit words
//! decoded, and read back as a matmul task. A task that decodes encodes to
//! words that decode to the same task.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slmcc_backends::npu::regcmd::{decode_buffer, matmul::MatmulTask};

fuzz_target!(|data: &[u8]| {
    let Ok(words) = decode_buffer(data) else {
        return;
    };
    let Ok(task) = MatmulTask::from_words(&words) else {
        return;
    };
    let again = task.regcmd().expect("a decoded task encodes");
    assert_eq!(
        MatmulTask::from_words(&again).expect("its words decode"),
        task,
        "decode, encode, decode is stable"
    );
});
