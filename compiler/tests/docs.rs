//! The guides' code is the code that builds and runs: every fenced block
//! after a `<!-- source: PATH -->` line in `docs/ADDING_A_PASS.md` and
//! `docs/ADDING_A_REWRITE.md` must occur in PATH, line by line
//! (indentation aside), so the worked examples cannot drift from the pass,
//! rule, tests and filetests the suite runs. The worked pass and rule are
//! registered like any other, and their statistics reach `slmcc passes`,
//! `--pass-stats` and the `--report` JSON.

mod common;

use common::repo;

/// The (path, block) pairs a guide quotes.
fn quoted_blocks(guide: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        let Some(path) = line
            .trim()
            .strip_prefix("<!-- source: ")
            .and_then(|r| r.strip_suffix(" -->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or_default();
        assert!(
            fence.starts_with("```"),
            "a code block must follow the source of {path}"
        );
        let block: Vec<String> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .map(|l| l.trim().to_string())
            .collect();
        out.push((path.to_string(), block));
    }
    out
}

/// Whether `block` occurs in `text` as consecutive lines (trimmed).
fn occurs(text: &str, block: &[String]) -> bool {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(block.len())
        .any(|w| w.iter().zip(block).all(|(a, b)| *a == b))
}

/// Fails unless every block `guide` quotes occurs in the file it names;
/// `at_least` guards against a guide whose markers were lost.
fn check_quoted_blocks(guide: &str, at_least: usize) {
    let text = std::fs::read_to_string(repo().join(guide)).unwrap();
    let blocks = quoted_blocks(&text);
    assert!(
        blocks.len() >= at_least,
        "{guide} quotes {} blocks",
        blocks.len()
    );
    for (path, block) in blocks {
        let text =
            std::fs::read_to_string(repo().join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            occurs(&text, &block),
            "{guide} quotes a block that {path} does not hold:\n{}",
            block.join("\n")
        );
    }
}

#[test]
fn the_rewrite_guides_code_is_the_code_that_runs() {
    check_quoted_blocks("docs/ADDING_A_REWRITE.md", 4);
}

#[test]
fn the_pass_guides_code_is_the_code_that_runs() {
    check_quoted_blocks("docs/ADDING_A_PASS.md", 5);
}

fn slmcc(args: &[&str]) -> std::process::Output {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_slmcc"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "slmcc {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The worked pass (`drop-identity`) and rule (`qswiglu`) as a user of
/// them sees them: listed with their statistics, run by name, counted.
#[test]
fn the_worked_pass_and_rule_are_registered_and_counted() {
    let listing = String::from_utf8(slmcc(&["passes"]).stdout).unwrap();
    assert!(listing.contains("  drop-identity "), "{listing}");
    let lists = |name: &str, description: &str| {
        listing.lines().any(|l| {
            let l = l.trim();
            l.starts_with(&format!("{name}  ")) && l.ends_with(description)
        })
    };
    assert!(
        lists("identities-removed", "`identity` nodes removed"),
        "{listing}"
    );
    assert!(
        lists("formed-qswiglu", "`qswiglu` nodes formed"),
        "{listing}"
    );

    // `opt --passes`, with the counters in `--pass-stats`.
    let stats = |file: &str, passes: &str| {
        let o = slmcc(&["opt", file, "--passes", passes, "--pass-stats"]);
        String::from_utf8(o.stderr).unwrap()
    };
    let err = stats(
        "passes/filetests/drop-identity/removes-chains.slm",
        "drop-identity",
    );
    assert!(err.contains("identities-removed=2"), "{err}");
    let err = stats(
        "passes/filetests/eqsat-fuse/qswiglu-from-matmul-nbits.slm",
        "eqsat-fuse",
    );
    assert!(err.contains("formed-qswiglu=1"), "{err}");

    // A compile pipeline that runs the pass, with both in the report.
    let dir = std::env::temp_dir().join(format!("slmcc-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pkg, report) = (dir.join("m.slmpkg"), dir.join("m.json"));
    slmcc(&[
        "compile",
        "testdata/models/qwen2.onnx",
        "--target",
        "cpu",
        "--passes",
        "decoder-inputs,drop-identity,shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse",
        "--buckets",
        "16",
        "-o",
        pkg.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let stat = |pass: &str, name: &str| {
        json["passes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == pass)
            .and_then(|p| p["stats"][name].as_u64())
    };
    assert_eq!(stat("drop-identity", "identities-removed"), Some(0));
    assert_eq!(stat("eqsat-fuse", "formed-qswiglu"), Some(0));
    assert_eq!(stat("eqsat-fuse", "formed-swiglu"), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_changed_block_is_caught() {
    let text = "fn a() {\n    let x = 1;\n    let y = 2;\n}\n";
    assert!(occurs(text, &["let x = 1;".into(), "let y = 2;".into()]));
    assert!(!occurs(text, &["let x = 1;".into(), "let y = 3;".into()]));
}
