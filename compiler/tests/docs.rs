//! The guides' code is the code that builds and runs: every fenced block
//! after a `<!-- source: PATH -->` line in `docs/ADDING_A_REWRITE.md` must
//! occur in PATH, line by line (indentation aside), so the worked example
//! cannot drift from the rule, test and filetest the suite runs.

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

#[test]
fn the_rewrite_guides_code_is_the_code_that_runs() {
    let guide = std::fs::read_to_string(repo().join("docs/ADDING_A_REWRITE.md")).unwrap();
    let blocks = quoted_blocks(&guide);
    assert!(
        blocks.len() >= 4,
        "the guide quotes {} blocks",
        blocks.len()
    );
    for (path, block) in blocks {
        let text =
            std::fs::read_to_string(repo().join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            occurs(&text, &block),
            "docs/ADDING_A_REWRITE.md quotes a block that {path} does not hold:\n{}",
            block.join("\n")
        );
    }
}

#[test]
fn a_changed_block_is_caught() {
    let text = "fn a() {\n    let x = 1;\n    let y = 2;\n}\n";
    assert!(occurs(text, &["let x = 1;".into(), "let y = 2;".into()]));
    assert!(!occurs(text, &["let x = 1;".into(), "let y = 3;".into()]));
}
