//! End-to-end tests of the `slmcc` binary: exit codes, messages, outputs.

mod common;

use common::{slmcc, stderr, stdout};

const EXAMPLE: &str = "testdata/ir/attention_prologue.slm";
const PIPELINE: &str = "shape-infer,const-fold,dce,cse";

#[test]
fn version_prints_the_compiler_version() {
    let o = slmcc(&["--version"]);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).trim(),
        format!("slmcc {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn opt_runs_the_readme_pipeline() {
    let o = slmcc(&["opt", EXAMPLE, "--passes", PIPELINE, "--verify-each"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("%tq = constant {value = [1, seq, 4, 32]} : i64[4]"),
        "{out}"
    );
    assert!(!out.contains("gather"), "{out}");
}

#[test]
fn pass_stats_and_print_ir_after() {
    let o = slmcc(&[
        "opt",
        EXAMPLE,
        "--passes",
        PIPELINE,
        "--pass-stats",
        "--print-ir-after=dce",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("; ----- IR after dce (3/4) -----"), "{err}");
    assert!(!err.contains("IR after cse"), "{err}");
    assert!(err.contains("const-fold"), "{err}");
    assert!(err.contains("nodes-folded=18"), "{err}");
}

#[test]
fn print_ir_after_change_skips_passes_that_change_nothing() {
    let o = slmcc(&[
        "opt",
        EXAMPLE,
        "--passes",
        "shape-infer,verify,const-fold,verify",
        "--print-ir-after=change",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("IR after shape-infer (1/4)"), "{err}");
    assert!(err.contains("IR after const-fold (3/4)"), "{err}");
    assert!(!err.contains("IR after verify"), "{err}");
}

#[test]
fn bisect_limit_skips_the_tail() {
    let o = slmcc(&["opt", EXAMPLE, "--passes", PIPELINE, "--bisect-limit", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("BISECT: running pass (2) const-fold"), "{err}");
    assert!(err.contains("BISECT: NOT running pass (3) dce"), "{err}");
    // const-fold ran but dce did not: the folded bookkeeping is still there.
    assert!(
        stdout(&o).contains("%nq = constant {value = seq} : i64[]"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn output_file_is_written() {
    let dir = std::env::temp_dir().join(format!("slmcc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out.slm");
    let o = slmcc(&[
        "opt",
        EXAMPLE,
        "--passes",
        PIPELINE,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
    let text = std::fs::read_to_string(&out).unwrap();
    // The written IR reads back and is already at a fixed point.
    let again = slmcc(&[
        "opt",
        out.to_str().unwrap(),
        "--passes",
        PIPELINE,
        "--verify-each",
    ]);
    assert_eq!(stdout(&again), text);
}

/// Runs `slmcc` and checks exit code 2 with a one-line message containing `want`.
fn expect_bad_input(args: &[&str], want: &str) {
    expect_bad_input_from(slmcc(args), args, want);
}

/// [`expect_bad_input`] with warnings silenced (`SLMCC_LOG=error`), for a
/// model that also has something to warn about (an unfused softmax).
fn expect_bad_input_quiet(args: &[&str], want: &str) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(args)
        .current_dir(common::repo())
        .env("SLMCC_LOG", "error")
        .output()
        .expect("run slmcc");
    expect_bad_input_from(o, args, want);
}

fn expect_bad_input_from(o: std::process::Output, args: &[&str], want: &str) {
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: expected `{want}` in `{err}`");
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(stdout(&o).is_empty());
}

/// `opt` checks its input before any pass (a pass is never blamed for its
/// input); a failing pass writes a reproducer that replays the failure;
/// `--print-ir-before` and `--print-ir-after-failure` print the module.
#[test]
fn opt_verifies_its_input_and_writes_a_reproducer() {
    expect_bad_input(
        &["opt", "testdata/malformed/wrong_result_type.slm", "--passes", "dce"],
        "wrong_result_type.slm: invalid IR: graph @main, node %y: %y is declared f32[3] but `exp` gives f32[2]",
    );
    let dir = std::env::temp_dir().join(format!("slmcc-cli-repro-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let repro = dir.join("repro.slm");
    let repro = repro.to_str().unwrap();
    let failure =
        "pass `plan-memory`: requires a bucketed or planned module, but the module is symbolic";
    let args = [
        "opt",
        "testdata/ir/attention_prologue.slm",
        "--passes",
        "shape-infer,dce,plan-memory",
        "--reproducer",
        repro,
        "--print-ir-before",
        "dce",
        "--print-ir-after-failure",
    ];
    let o = slmcc(&args);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("; ----- IR before dce (2/3) -----"), "{err}");
    assert!(
        err.contains("; ----- IR after failure of plan-memory (3/3) -----"),
        "{err}"
    );
    let last = err.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("error: testdata/ir/attention_prologue.slm: "),
        "{last}"
    );
    assert!(last.contains(failure), "{last}");
    assert!(
        last.contains(&format!(
            "reproducer, the IR before the pass with its replay command: {repro}"
        )),
        "{last}"
    );
    let text = std::fs::read_to_string(repro).unwrap();
    assert!(
        text.contains("; replay: slmcc opt THIS_FILE --passes 'plan-memory'"),
        "{text}"
    );
    // The replay fails the same way, on the reproducer itself.
    expect_bad_input(&["opt", repro, "--passes", "plan-memory"], failure);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--extra-passes` runs a pipeline of the user's after fusion on `run`,
/// `generate` and `golden check`: a pass that keeps the numbers passes
/// the goldens, one that changes them fails them at the layer.
#[test]
fn extra_passes_show_a_pass_effect_on_the_numbers() {
    let check = |extra: &str| {
        slmcc(&[
            "golden",
            "check",
            "goldens/qwen2",
            "--backend",
            "cpu",
            "--extra-passes",
            extra,
        ])
    };
    let same = check("cse,dce");
    assert!(same.status.success(), "{}", stderr(&same));
    let changed = check("quantize{activations=f32}");
    assert_eq!(changed.status.code(), Some(1), "{}", stderr(&changed));
    // --json: every layer's figures and verdict, and the first divergence.
    let json = std::env::temp_dir().join(format!("slmcc-cli-golden-{}.json", std::process::id()));
    let o = slmcc(&[
        "golden",
        "check",
        "goldens/qwen2",
        "--backend",
        "cpu",
        "--extra-passes",
        "quantize{activations=f32}",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(report["ok"], false);
    assert_eq!(report["layers"].as_array().unwrap().len(), 10);
    assert_eq!(report["layers"][0]["ok"], true);
    assert_eq!(report["layers"][1]["ok"], false);
    assert!(report["first_divergence"]
        .as_str()
        .unwrap()
        .contains("model.layers.0"));
    assert!(
        stdout(&changed).contains("first divergence: goldens/qwen2 seq5 layer `model.layers.0`"),
        "{}",
        stdout(&changed)
    );
    let generate = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "testdata/models/qwen2.onnx",
            "--prompt-ids",
            "1,2,3",
            "--max-new-tokens",
            "4",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        let o = slmcc(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(generate(&["--extra-passes", "cse"]), generate(&[]));
    expect_bad_input(
        &[
            "run",
            "testdata/models/qwen2.onnx",
            "--input",
            "input_ids=goldens/qwen2/seq5/input_ids.npy",
            "--extra-passes",
            "nope",
        ],
        "unknown pass `nope`",
    );
}

/// The crashes fuzzing found (testdata/malformed/fuzz: each file is a fuzz
/// target's input, its first byte the target's mode where it takes one),
/// given to the commands that read such files: each is refused on one
/// line, exit 2.
#[test]
fn inputs_found_by_fuzzing_are_refused() {
    let dir = std::env::temp_dir().join(format!("slmcc-cli-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |case: &str, name: &str| -> String {
        let bytes =
            std::fs::read(common::repo().join("testdata/malformed/fuzz").join(case)).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, &bytes[1..]).unwrap();
        path.to_str().unwrap().to_string()
    };
    let npy = file("tensor_readers/npy-shape-closes-first", "ids.npy");
    expect_bad_input(
        &[
            "run",
            "testdata/models/qwen2.onnx",
            "--input",
            &format!("input_ids={npy}"),
        ],
        "malformed 'shape'",
    );
    let tok = file("tokenizer/json-syntax-error-in-decoder", "tokenizer.json");
    expect_bad_input(
        &[
            "generate",
            "testdata/models/trained/llama_trained.onnx",
            "--tokenizer",
            &tok,
            "--prompt",
            "hi",
        ],
        "not a tokenizer.json: key must be a string",
    );
    // Nested groups in an unknown field: the protobuf crate skips them by
    // recursing once per group, and 2 million of them overflowed the stack.
    let deep = dir.join("deep.onnx");
    std::fs::write(&deep, [0x9b, 0x06].repeat(2_000_000)).unwrap();
    for model in [
        deep.to_str().unwrap(),
        "testdata/malformed/fuzz/onnx_import/nested-groups-in-unknown-field",
    ] {
        expect_bad_input(
            &["import", model],
            "not a valid ONNX model: byte 0: field 99 opens groups nested deeper than 100",
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn malformed_ir_is_rejected_with_position() {
    expect_bad_input(
        &["opt", "testdata/malformed/unknown_op.slm"],
        "testdata/malformed/unknown_op.slm:3:10: ",
    );
    expect_bad_input(
        &["opt", "testdata/malformed/undefined_value.slm"],
        "testdata/malformed/undefined_value.slm:3:",
    );
    expect_bad_input(
        &["opt", "testdata/malformed/truncated.slm"],
        "truncated.slm:",
    );
    expect_bad_input(&["opt", "testdata/malformed/bad_dim.slm"], "bad_dim.slm:2:");
    expect_bad_input(
        &["opt", "testdata/no/such/file.slm"],
        "cannot read testdata/no/such/file.slm",
    );
}

/// A result past the memory budget is refused before it is allocated,
/// naming it, by the interpreter and by the planned CPU run.
#[test]
fn tensors_past_the_memory_budget_are_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("slmcc-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let x = dir.join("x.npy");
    slmcc_runtime::npy::write(&x, &slmcc_ir::Tensor::from_f32(vec![1, 1], vec![1.0])).unwrap();
    let input = format!("x={}", x.display());
    for (backend, want) in [
        (
            "reference",
            "node %y (`expand`): %y (f32[65536, 65536, seq]) would take 16.0 GiB",
        ),
        (
            "cpu",
            "its memory plan (largest tensor %y: 16.0 GiB in the arena) would take 16.0 GiB",
        ),
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_slmcc"))
            .args([
                "run",
                "testdata/malformed/huge_intermediate.slm",
                "--backend",
                backend,
            ])
            .args(["--input", &input])
            .env("SLMCC_MEMORY_BUDGET", "1G")
            .current_dir(common::repo())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{backend}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(want)
                && stderr(&o).contains("memory budget of 1.0 GiB (SLMCC_MEMORY_BUDGET)"),
            "{backend}: {}",
            stderr(&o)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-o -` is stdout, as without `-o`: no file named `-` appears.
#[test]
fn dash_output_is_stdout() {
    let plain = slmcc(&["opt", EXAMPLE, "--passes", "dce"]);
    let dash = slmcc(&["opt", EXAMPLE, "--passes", "dce", "-o", "-"]);
    assert!(dash.status.success(), "{}", stderr(&dash));
    assert!(stdout(&dash).starts_with("module @"), "{}", stdout(&dash));
    assert_eq!(stdout(&dash), stdout(&plain));
    let import = slmcc(&["import", "testdata/models/llama.onnx", "-o", "-"]);
    assert!(import.status.success(), "{}", stderr(&import));
    assert!(stdout(&import).starts_with("module @"));
    assert!(!common::repo().join("-").exists());
}

#[test]
fn bad_pipelines_are_rejected_with_valid_names() {
    let all = slmcc_passes::registry::pass_names().join(", ");
    expect_bad_input(
        &["opt", EXAMPLE, "--passes", "dce,frobnicate"],
        &format!("unknown pass `frobnicate` (valid passes: {all})"),
    );
    expect_bad_input(
        &["opt", EXAMPLE, "--passes", "const-fold{bogus=1}"],
        "unknown option `bogus` for pass `const-fold` (valid options: max-elements)",
    );
    expect_bad_input(
        &["opt", EXAMPLE, "--passes", "dce cse"],
        "expected `,` between passes",
    );
    expect_bad_input(
        &["opt", EXAMPLE, "--print-ir-after", "nope"],
        "--print-ir-after: unknown pass `nope`",
    );
}

/// The pass table of `docs/ARCHITECTURE.md` is `slmcc passes --markdown`;
/// `SLMCC_BLESS=1` rewrites it.
#[test]
fn docs_pass_table_is_the_registry() {
    const DOC: &str = "docs/ARCHITECTURE.md";
    const BEGIN: &str = "<!-- begin pass-table -->\n";
    const END: &str = "<!-- end pass-table -->";
    let o = slmcc(&["passes", "--markdown"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = stdout(&o);
    common::check_generated_doc(DOC, BEGIN, END, &table);
}

#[test]
fn passes_lists_every_pass_with_phases_options_and_statistics() {
    let o = slmcc(&["passes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for name in slmcc_passes::registry::pass_names() {
        assert!(
            out.contains(&format!("  {name} ")),
            "{name} missing:\n{out}"
        );
    }
    assert!(out.contains("max-elements=<int >= 0>"), "{out}");
    assert!(out.contains("(default 65536)"), "{out}");
    // Every declared statistic, with its description, on a line of its own.
    for pass in slmcc_passes::PASSES {
        for stat in (pass.statistics)() {
            assert!(
                out.lines().any(|l| {
                    let l = l.trim();
                    l.starts_with(&format!("{}  ", stat.name)) && l.ends_with(stat.description)
                }),
                "{}: statistic {} missing:\n{out}",
                pass.name,
                stat.name
            );
        }
    }
    assert!(out.contains("also reports `plans-dropped`"), "{out}");
    assert!(
        out.contains("requires bucketed or planned; when it changes the module, invalidates nothing; leaves the module planned"),
        "{out}"
    );
}

#[test]
fn failing_pass_names_file_and_node() {
    expect_bad_input(
        &[
            "opt",
            "passes/filetests/quantize/needs-weight-data.slm",
            "--passes",
            "quantize{keep=none}",
        ],
        "needs-weight-data.slm: pass `quantize`: graph @main, node %y: weight @head has no data",
    );
    // An input no pass could take is refused before any pass runs.
    expect_bad_input(
        &[
            "opt",
            "passes/filetests/shape-infer/error-names-node.slm",
            "--passes",
            "shape-infer",
        ],
        "error-names-node.slm: invalid IR: graph @main, node %b: `matmul`",
    );
}

#[test]
fn failed_output_leaves_nothing_behind() {
    let dir = std::env::temp_dir().join(format!("slmcc-cli-fail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("never.slm");
    let o = slmcc(&[
        "opt",
        "passes/filetests/shape-infer/error-names-node.slm",
        "--passes",
        "shape-infer",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
}

#[test]
fn golden_record_needs_a_model_and_a_folder() {
    expect_bad_input(
        &["golden", "record", "goldens/llama", "-o", "never"],
        "goldens/llama: golden record takes an ONNX model (.onnx)",
    );
    assert!(!common::repo().join("never").exists());
}

#[test]
fn usage_errors_exit_2() {
    let o = slmcc(&["opt"]);
    assert_eq!(o.status.code(), Some(2));
    let o = slmcc(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn run_writes_outputs_that_match_onnxruntime() {
    let dir = std::env::temp_dir().join(format!("slmcc-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = slmcc(&[
        "run",
        "testdata/models/qwen2.onnx",
        "--input",
        "input_ids=goldens/qwen2/seq11/input_ids.npy",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("logits: f32 [1, 11, 512] -> "),
        "{}",
        stdout(&o)
    );
    let got = slmcc_runtime::npy::read(&dir.join("logits.npy")).unwrap();
    let want =
        slmcc_runtime::npy::read(&common::repo().join("goldens/qwen2/seq11/logits.npy")).unwrap();
    let d = slmcc_runtime::compare::diff(&got, &want).unwrap();
    assert!(d.max_rel < 1e-5, "{d:?}");
}

#[test]
fn run_on_the_cpu_backend_matches_onnxruntime() {
    let dir = std::env::temp_dir().join(format!("slmcc-run-cpu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = slmcc(&[
        "run",
        "testdata/models/llama.onnx",
        "--backend",
        "cpu",
        "--input",
        "input_ids=goldens/llama/seq5/input_ids.npy",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = slmcc_runtime::npy::read(&dir.join("logits.npy")).unwrap();
    let want =
        slmcc_runtime::npy::read(&common::repo().join("goldens/llama/seq5/logits.npy")).unwrap();
    let d = slmcc_runtime::compare::diff(&got, &want).unwrap();
    assert!(d.max_rel < 1e-5, "{d:?}");
}

#[test]
fn run_on_the_cpu_backend_names_the_first_unsupported_node() {
    let dir = std::env::temp_dir().join(format!("slmcc-run-cpu-unsup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("m.slm");
    std::fs::write(
        &model,
        "module @m {\n  graph @main(%x: f32[seq]) -> (f32[seq]) {\n    %e = exp %x : f32[seq]\n    %h = cast %e {to = f16} : f16[seq]\n    %j = add %h, %h : f16[seq]\n    %q = cast %j {to = i4} : i4[seq]\n    %c = cast %q {to = f32} : f32[seq]\n    return %c\n  }\n}\n",
    )
    .unwrap();
    let input = dir.join("x.npy");
    let x = slmcc_ir::Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]);
    std::fs::write(&input, slmcc_runtime::npy::to_bytes(&x).unwrap()).unwrap();
    let spec = format!("x={}", input.display());
    expect_bad_input_quiet(
        &[
            "run",
            model.to_str().unwrap(),
            "--backend",
            "cpu",
            "--input",
            &spec,
        ],
        "node %q (`cast`): cpu backend: op `cast` from f16 to i4 is not supported by the cpu backend yet",
    );
}

#[test]
fn run_rejects_bad_inputs() {
    expect_bad_input(
        &["run", "testdata/models/qwen2.onnx", "--input", "input_ids"],
        "--input `input_ids`: expected NAME=FILE",
    );
    expect_bad_input(
        &[
            "run",
            "testdata/models/qwen2.onnx",
            "--input",
            "ids=goldens/qwen2/seq5/input_ids.npy",
        ],
        "`ids` is not an input of the graph",
    );
    expect_bad_input(
        &[
            "run",
            "testdata/models/qwen2.onnx",
            "--input",
            "input_ids=goldens/qwen2/seq5/logits.npy",
        ],
        "input `input_ids` is f32, the graph expects i64[1, seq]",
    );
    expect_bad_input(
        &["run", "testdata/models/qwen2.onnx"],
        "missing input `input_ids` (i64[1, seq])",
    );
}

#[test]
fn npu_regcmd_prints_and_disasm_reads_back_a_command_list() {
    let dir = std::env::temp_dir().join(format!("slmcc-cli-npu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let buf = dir.join("task.bin");
    let args = [
        "npu",
        "regcmd",
        "--dtype",
        "int8",
        "--m",
        "4",
        "--k",
        "32",
        "--n",
        "16",
        "--input-addr",
        "0x11110000",
        "-o",
        buf.to_str().unwrap(),
    ];
    let o = slmcc(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 108);
    assert_eq!(
        lines[2],
        "0201 1010 00000050  CNA_CONV_CON2 FEATURE_GRAINS=5"
    );
    assert_eq!(
        lines[21],
        "0201 1070 11110000  CNA_FEATURE_DATA_ADDR FEATURE_BASE_ADDR=0x11110000"
    );
    assert_eq!(std::fs::metadata(&buf).unwrap().len(), 108 * 8);
    let again = slmcc(&["npu", "disasm", buf.to_str().unwrap()]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(stdout(&again), text);

    let bad = dir.join("bad.bin");
    std::fs::write(&bad, 0x0401_0000_0000_2004u64.to_le_bytes()).unwrap();
    expect_bad_input(
        &["npu", "disasm", bad.to_str().unwrap()],
        "word 0 (0x0401000000002004): unknown target 0x0401",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn npu_regcmd_refuses_what_is_not_one_task() {
    expect_bad_input(
        &[
            "npu", "regcmd", "--dtype", "fp16", "--m", "32", "--k", "1024", "--n", "256",
        ],
        "fp16->fp32 matmul M=32 K=1024 N=256 as one task: the weights (524288 bytes) do not \
         fit the 10 CBUF banks the features leave",
    );
    expect_bad_input(
        &[
            "npu", "regcmd", "--dtype", "int8", "--m", "4", "--k", "40", "--n", "16",
        ],
        "K = 40 is not a multiple of 32",
    );
    expect_bad_input(
        &[
            "npu",
            "regcmd",
            "--dtype",
            "int8",
            "--out-dtype",
            "fp16",
            "--m",
            "4",
            "--k",
            "32",
            "--n",
            "16",
        ],
        "--out-dtype fp16: an int8 matmul writes int32",
    );
}

#[test]
fn npu_plan_prints_the_tiles_and_an_estimate() {
    let o = slmcc(&[
        "npu", "plan", "--dtype", "int8", "--m", "64", "--k", "1536", "--n", "8960",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with("int8->int32 matmul M=64 K=1536 N=8960, K blocks of "),
        "{text}"
    );
    assert!(text.contains("estimated time (a model of rk3588"), "{text}");
    expect_bad_input(
        &[
            "npu", "plan", "--dtype", "int8", "--m", "4", "--k", "1536", "--n", "64", "--group",
            "100",
        ],
        "the group 100 is not a multiple of 32 that divides K = 1536",
    );
}
