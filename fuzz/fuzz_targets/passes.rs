//! The pass pipeline on arbitrary IR: a module that parses and verifies
//! goes through the default pipeline's passes (fusion, bucket
//! specialisation, memory planning) with the verifier after each. A pass
//! may refuse the module with an error; it must not panic (the runner
//! turns a panic into an error naming the pass, which this target treats
//! as the crash it is) nor leave an invalid module.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slmcc_ir::text::parse_module;
use slmcc_ir::verify::verify_module;
use slmcc_passes::runner::run_pipeline;
use slmcc_passes::PassError;

const PIPELINE: &str = "shape-infer,const-fold,dce,canonicalize{time-limit-ms=200},\
    eqsat-fuse{time-limit-ms=200},dce,cse,bucket-specialize{buckets=1,4},plan-memory";

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut module) = parse_module(src) else {
        return;
    };
    if verify_module(&module).is_err() {
        return;
    }
    if let Err(e @ (PassError::Panicked { .. } | PassError::Verify { .. })) =
        run_pipeline(&mut module, PIPELINE)
    {
        panic!("{e}");
    }
});
