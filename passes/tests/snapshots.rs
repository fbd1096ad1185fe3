//! Snapshot tests where the whole output is the expectation: the IR dump
//! after every pass of the README pipeline on `testdata/ir/`.

use std::path::Path;

use slmcc_ir::text::parse_module;
use slmcc_passes::{PassManager, PrintAfter, RunOptions};

#[test]
fn attention_prologue_after_each_pass() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/ir/attention_prologue.slm");
    let src = std::fs::read_to_string(&path).unwrap();
    let mut module = parse_module(&src).unwrap();
    let options = RunOptions {
        print_ir_after: PrintAfter::All,
        verify_each: true,
        ..RunOptions::default()
    };
    let mut pm = PassManager::parse("shape-infer,const-fold,dce,cse", options).unwrap();
    let mut log = Vec::new();
    pm.run(&mut module, &mut log).unwrap();
    insta::assert_snapshot!(String::from_utf8(log).unwrap());
}
