//! `slmcc report`: plans printed per bucket, an SVG that is well-formed XML,
//! planned `.slm` files reported as they are, and clear errors.

mod common;

use common::{repo, slmcc, stderr, stdout};

/// A minimal XML well-formedness check: one root element, tags balanced and
/// properly nested, attribute values quoted, `&` only in the five predefined
/// entities or character references, no `<` in text or attribute values.
fn check_xml(text: &str) -> Result<usize, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut elements = 0;
    let mut roots = 0;
    let mut rest = text;
    let check_amp = |s: &str| -> Result<(), String> {
        let mut parts = s.split('&');
        parts.next();
        for p in parts {
            let ent = p.split(';').next().unwrap_or("");
            let ok = matches!(ent, "amp" | "lt" | "gt" | "quot" | "apos")
                || (ent.starts_with('#') && ent.len() > 1 && p.contains(';'));
            if !ok {
                return Err(format!("bad entity `&{ent}`"));
            }
        }
        Ok(())
    };
    if let Some(r) = rest.strip_prefix("<?xml") {
        rest = &r[r.find("?>").ok_or("unterminated XML declaration")? + 2..];
    }
    while let Some(lt) = rest.find('<') {
        let text_part = &rest[..lt];
        if stack.is_empty() && !text_part.trim().is_empty() {
            return Err(format!("text outside the root: {text_part:?}"));
        }
        check_amp(text_part)?;
        let gt = rest[lt..].find('>').ok_or("unterminated tag")? + lt;
        let tag = &rest[lt + 1..gt];
        rest = &rest[gt + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            match stack.pop() {
                Some(open) if open == name.trim() => {}
                other => return Err(format!("`</{name}>` closes {other:?}")),
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/');
        let name: String = body.chars().take_while(|c| !c.is_whitespace()).collect();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || "-_:".contains(c))
        {
            return Err(format!("bad tag name in `<{tag}>`"));
        }
        // Attributes: name="value" pairs.
        let mut attrs = body[name.len()..].trim();
        while !attrs.is_empty() {
            let eq = attrs
                .find('=')
                .ok_or(format!("attribute without value in `<{tag}>`"))?;
            let quote = attrs[eq + 1..].chars().next();
            if quote != Some('"') {
                return Err(format!("unquoted attribute in `<{tag}>`"));
            }
            let end = attrs[eq + 2..].find('"').ok_or("unterminated attribute")? + eq + 2;
            let value = &attrs[eq + 2..end];
            if value.contains('<') {
                return Err(format!("`<` in an attribute of `<{tag}>`"));
            }
            check_amp(value)?;
            attrs = attrs[end + 1..].trim_start();
        }
        elements += 1;
        if stack.is_empty() {
            roots += 1;
        }
        if !self_closing {
            stack.push(name);
        }
    }
    if !rest.trim().is_empty() {
        return Err(format!("text after the root: {rest:?}"));
    }
    match (stack.is_empty(), roots) {
        (true, 1) => Ok(elements),
        (false, _) => Err(format!("unclosed elements {stack:?}")),
        _ => Err(format!("{roots} root elements")),
    }
}

#[test]
fn the_xml_checker_rejects_what_it_should() {
    assert_eq!(check_xml("<a><b x=\"1\"/>t &amp; u</a>"), Ok(2));
    assert!(check_xml("<a><b></a></b>").is_err());
    assert!(check_xml("<a x=1></a>").is_err());
    assert!(check_xml("<a>&nbsp;</a>").is_err());
    assert!(check_xml("<a></a><b></b>").is_err());
    assert!(check_xml("<a>").is_err());
}

#[test]
fn reports_every_bucket_and_writes_a_valid_svg() {
    let dir = std::env::temp_dir().join(format!("slmcc-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("plan.svg");
    let o = slmcc(&[
        "report",
        "testdata/models/llama.onnx",
        "--buckets",
        "64,128",
        "--plan-svg",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for want in [
        "graph @main_64, bucket seq = 64 of @main:",
        "graph @main_128, bucket seq = 128 of @main:",
        "lower bound",
        "ratio 1.000",
        "weights",
        "kv_cache",
        "scratch",
        "peak total",
    ] {
        assert!(out.contains(want), "missing `{want}` in:\n{out}");
    }
    let text = std::fs::read_to_string(&svg).unwrap();
    let elements = check_xml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(elements > 100, "{elements} elements");
    assert!(text.contains("<title>%embedding: "), "{text}");
    assert_eq!(text.matches("<g>").count(), 2, "one panel per bucket");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_planned_module_is_reported_as_it_is() {
    let dir = std::env::temp_dir().join(format!("slmcc-report-slm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let slm = dir.join("m.slm");
    std::fs::write(
        &slm,
        "module @m {\n  graph @main(%x: f32[1, seq, 16]) -> (f32[1, seq, 16]) {\n    \
         %y = exp %x : f32[1, seq, 16]\n    return %y\n  }\n}\n",
    )
    .unwrap();
    let planned = dir.join("p.slm");
    let o = slmcc(&[
        "opt",
        slm.to_str().unwrap(),
        "--passes",
        "bucket-specialize{buckets=4,8},plan-memory",
        "-o",
        planned.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = slmcc(&["report", planned.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("planned now"), "{out}");
    assert!(
        out.contains("graph @main_8, bucket seq = 8 of @main: 1 steps, 2 tensors, 1 in place"),
        "{out}"
    );
    assert!(
        out.contains("arena               512 (0.5 KiB)  lower bound 512"),
        "{out}"
    );
    // --buckets makes no sense for a module that holds plans.
    let o = slmcc(&["report", planned.to_str().unwrap(), "--buckets", "16"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("already holds memory plans"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn report_errors_are_clear() {
    let o = slmcc(&["report", "model.slmpkg"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("model.slmpkg: file:"), "{}", stderr(&o));
    let o = slmcc(&["report", "testdata/models/llama.onnx", "--buckets", "64,x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("bad bucket `x`"), "{}", stderr(&o));
    let help = slmcc(&["report", "--help"]);
    assert!(stdout(&help).contains("--plan-svg"), "{}", stdout(&help));
    assert!(repo().join("testdata/models/llama.onnx").exists());
}
