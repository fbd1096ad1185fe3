//! Unit tests of the textual IR: located parse errors, names, comments,
//! unknown dims and canonical text.

use slmcc_ir::text::{parse_module, print_module, ParseError};
use slmcc_ir::{verify_module, DType, Dim, TensorType, ValueDef};

/// Parses `src`, expecting an error; returns `(line, col, message)`.
fn error(src: &str) -> (usize, usize, String) {
    match parse_module(src) {
        Ok(m) => panic!("parsed unexpectedly:\n{}", print_module(&m)),
        Err(ParseError { line, col, message }) => (line, col, message),
    }
}

/// A module with one graph `@g(%x: f32[2])` whose body is `body`.
fn in_graph(body: &str) -> String {
    format!("module @m {{\n  graph @g(%x: f32[2]) -> (f32[2]) {{\n{body}\n  }}\n}}\n")
}

#[test]
fn unknown_op_is_located() {
    let src = in_graph("    %y = frobnicate %x : f32[2]\n    return %y");
    let (line, col, msg) = error(&src);
    assert_eq!((line, col), (3, 10));
    assert_eq!(msg, "unknown op `frobnicate`");
    let err = parse_module(&src).unwrap_err();
    assert_eq!(err.to_string(), "3:10: unknown op `frobnicate`");
}

#[test]
fn undefined_and_redefined_values() {
    let (line, col, msg) = error(&in_graph("    %y = exp %z : f32[2]\n    return %y"));
    assert_eq!(
        (line, col, msg.as_str()),
        (3, 14, "use of undefined value %z")
    );

    let (line, col, msg) = error(&in_graph("    %x = exp %x : f32[2]\n    return %x"));
    assert_eq!(
        (line, col, msg.as_str()),
        (3, 5, "value %x is defined twice")
    );

    let (_, col, msg) = error(&in_graph(
        "    %a, %a = exp %x : f32[2], f32[2]\n    return %x",
    ));
    assert_eq!((col, msg.as_str()), (9, "value %a is defined twice"));

    let (line, col, msg) = error("module @m {\n  graph @g(%x: f32[2], %x: f32[2]) -> () {\n");
    assert_eq!(
        (line, col, msg.as_str()),
        (2, 24, "value %x is defined twice")
    );

    // A value cannot be used before the node that defines it.
    let body = "    %y = exp %z : f32[2]\n    %z = exp %x : f32[2]\n    return %y";
    assert_eq!(error(&in_graph(body)).0, 3);
}

#[test]
fn bad_dim_expressions() {
    let (line, col, msg) = error(&in_graph("    %y = exp %x : f32[2*]\n    return %y"));
    assert_eq!((line, col), (3, 25));
    assert_eq!(
        msg,
        "expected a dim (integer, symbol, `?` or `(`), found `]`"
    );

    let (_, col, msg) = error(&in_graph("    %y = exp %x : f32[seq+f16]\n    return %y"));
    assert_eq!(col, 27);
    assert_eq!(msg, "`f16` is a reserved word and cannot be a dim symbol");

    let (_, _, msg) = error(&in_graph("    %y = exp %x : f32[(seq]\n    return %y"));
    assert_eq!(msg, "expected `)`, found `]`");

    let (_, _, msg) = error(&in_graph(
        "    %y = exp %x : f32[99999999999999999999]\n    return %y",
    ));
    assert_eq!(msg, "integer `99999999999999999999` is out of range");

    let (_, _, msg) = error(&in_graph("    %y = exp %x : f33[2]\n    return %y"));
    assert_eq!(msg, "unknown dtype `f33`");
}

#[test]
fn missing_or_mismatched_return() {
    let (line, col, msg) = error(&in_graph("    %y = exp %x : f32[2]"));
    assert_eq!(
        (line, col, msg.as_str()),
        (4, 3, "graph @g has no `return`")
    );

    let src = "module @m {\n  graph @g(%x: f32[2]) -> (f16[2]) {\n    return %x\n  }\n}\n";
    let (line, col, msg) = error(src);
    assert_eq!((line, col), (3, 12));
    assert_eq!(
        msg,
        "returned value %x has type f32[2] but the signature declares f16[2]"
    );

    let src = "module @m {\n  graph @g(%x: f32[2]) -> (f32[2]) {\n    return %x, %x\n  }\n}\n";
    let (line, col, msg) = error(src);
    assert_eq!((line, col), (3, 5));
    assert_eq!(
        msg,
        "`return` gives 2 value(s) but the signature of @g declares 1"
    );

    // `return` must be last.
    let (_, _, msg) = error(&in_graph("    return %x\n    %y = exp %x : f32[2]"));
    assert_eq!(msg, "expected `}`, found %y");
}

#[test]
fn op_construction_errors_name_the_op() {
    let (line, col, msg) = error(&in_graph(
        "    %c = constant {value = [1, 2]} : i64[3]\n    return %x",
    ));
    assert_eq!((line, col), (3, 10));
    assert_eq!(
        msg,
        "op `constant`: `constant` of type i64[3] needs 3 values, found 2"
    );

    let (_, _, msg) = error(&in_graph(
        "    %y = exp %x {bogus = 1} : f32[2]\n    return %y",
    ));
    assert!(
        msg.starts_with("op `exp`: unknown attribute `bogus`"),
        "{msg}"
    );

    let (_, col, msg) = error(&in_graph(
        "    %y = cast %x {to = f16, to = f32} : f16[2]\n    return %y",
    ));
    assert_eq!((col, msg.as_str()), (29, "attribute `to` is given twice"));

    let (_, col, msg) = error(&in_graph("    %y = exp %x : f32[2], f32[2]\n    return %y"));
    assert_eq!(
        (col, msg.as_str()),
        (17, "node has 1 result(s) but 2 type(s)")
    );

    // Constants too large to materialise are refused, not attempted.
    let (_, _, msg) = error(&in_graph(
        "    %c = constant {value = 1} : f32[100000000000, 100000000000]\n    return %x",
    ));
    assert!(msg.contains("too many elements"), "{msg}");
}

#[test]
fn weights_and_graphs() {
    let src = "module @m weights \"w.bin\" {\n  weight @w : f32[4, 2]\n\n  graph @g(%i: i64[3]) -> (f32[3, 2]) {\n    %y = gather @w, %i {axis = 0} : f32[3, 2]\n    return %y\n  }\n}\n";
    let m = parse_module(src).unwrap();
    assert_eq!(m.weights.file.as_deref(), Some("w.bin"));
    let g = m.graph("g").unwrap();
    let w = g.find_weight("w").unwrap();
    assert_eq!(g.value(w).def, ValueDef::Weight("w".into()));
    verify_module(&m).unwrap();
    assert_eq!(print_module(&m), src);

    let (line, col, msg) = error(&src.replace("gather @w", "gather @v"));
    assert_eq!(
        (line, col, msg.as_str()),
        (5, 17, "use of undeclared weight @v")
    );

    // Weights are declared before the graphs that use them.
    let late = "module @m {\n  graph @g(%i: i64[3]) -> () {\n    %y = gather @w, %i : f32[3, 2]\n    return\n  }\n  weight @w : f32[4, 2]\n}\n";
    assert_eq!(error(late).2, "use of undeclared weight @w");

    let twice = "module @m {\n  weight @w : f32[1]\n  weight @w : f32[2]\n}\n";
    assert_eq!(error(twice), (3, 10, "weight @w is declared twice".into()));

    let dup = "module @m {\n  graph @g() -> () {\n    return\n  }\n  graph @g() -> () {\n    return\n  }\n}\n";
    assert_eq!(error(dup), (5, 9, "graph @g is defined twice".into()));
}

#[test]
fn quoted_and_plain_names() {
    let src = "module @\"my model\" {\n  weight @\"layers.0/w\" : f32[2]\n\n  graph @\"g:0\"(%\"a b\": f32[2], %0: f32[2]) -> (f32[2], f32[2]) {\n    %\"\" = add %\"a b\", %0 : f32[2]\n    %x.1$-y = add %\"\", @\"layers.0/w\" : f32[2]\n    %\"tab\\there\\\"\\u{301}\" = identity %x.1$-y : f32[2]\n    return %\"tab\\there\\\"\\u{301}\", %\"\"\n  }\n}\n";
    let m = parse_module(src).unwrap();
    assert_eq!(m.name, "my model");
    let g = m.graph("g:0").unwrap();
    assert!(g.find("a b").is_some() && g.find("0").is_some() && g.find("").is_some());
    assert!(g.find("tab\there\"\u{301}").is_some());
    assert!(m.weights.get("layers.0/w").is_some());
    verify_module(&m).unwrap();
    assert_eq!(print_module(&m), src);
}

#[test]
fn comments_are_ignored() {
    let src = "; leading comment\nmodule @m { ; after brace\n  ; check: %y = exp\n  graph @g(%x: f32[2]) -> (f32[2]) {\n    %y = exp %x : f32[2] ; trailing\n; check-next: return\n    return %y\n  }\n}\n; the end";
    let m = parse_module(src).unwrap();
    assert_eq!(m.graphs[0].nodes.len(), 1);
    // `;` inside a quoted name is not a comment.
    let m = parse_module("module @\";x\" {\n}\n").unwrap();
    assert_eq!(m.name, ";x");
}

#[test]
fn unknown_dims_parse_and_print() {
    let src = "module @m {\n  graph @g(%x: f32[?, seq]) -> (f32[?, seq]) {\n    %y = exp %x : f32[?, seq]\n    return %y\n  }\n}\n";
    let m = parse_module(src).unwrap();
    let g = &m.graphs[0];
    let ty = g.ty(g.inputs[0]);
    assert_eq!(
        *ty,
        TensorType::new(DType::F32, vec![Dim::unknown(), Dim::sym("seq")])
    );
    assert_eq!(print_module(&m), src);
    // Parsing does not verify: the verifier is what rejects `?` results.
    assert!(verify_module(&m).is_err());
}

#[test]
fn canonical_text_round_trips() {
    let src = r#"module @qwen2 weights "qwen2.safetensors" {
  weight @embed_tokens : f32[1000, 128]
  weight @"layers.0/odd name" : f32[128]

  graph @prefill(%ids: i64[1, seq], %past: f32[1, past, 128]) -> (f32[1, past+seq, 128], i64[4]) {
    %x0 = gather @embed_tokens, %ids {axis = 0} : f32[1, seq, 128]
    %x1 = mul %x0, @"layers.0/odd name" : f32[1, seq, 128]
    %s = shape %x1 {start = 1, end = 2} : i64[1]
    %c = constant {value = [1, seq, 4, 32]} : i64[4]
    %r = reshape %x1, %c : f32[1, seq, 4, 32]
    %h = cast %r {to = f16} : f16[1, seq, 4, 32]
    %kv = concat %past, %x1 {axis = 1} : f32[1, past+seq, 128]
    %a, %b = split %kv {axis = 2, sizes = [64, 64]} : f32[1, past+seq, 64], f32[1, past+seq, 64]
    %f = constant {value = [1e-6, -inf, nan, 0.5]} : f32[4]
    return %kv, %c
  }

  graph @decode(%ids: i64[1, 1]) -> (f32[1, 1, 128]) {
    %x0 = gather @embed_tokens, %ids {axis = 0} : f32[1, 1, 128]
    return %x0
  }
}
"#;
    let m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    verify_module(&m).unwrap();
    assert_eq!(print_module(&m), src);
}

#[test]
fn structural_errors() {
    assert_eq!(
        error("modul @m {}"),
        (1, 1, "expected `module`, found `modul`".into())
    );
    assert_eq!(
        error("module @m {\n}\nextra"),
        (
            3,
            1,
            "expected end of input after the module, found `extra`".into()
        )
    );
    assert_eq!(
        error("module @m {\n  graph @g(%x: f32[2]) -> (f32[2]) {\n    %y = exp %x"),
        (3, 16, "expected `:`, found end of input".into())
    );
    assert_eq!(
        error("module @m {\n  weight @w : f32[2]\n  bogus\n}"),
        (
            3,
            3,
            "expected `weight`, `graph`, `bucket`, `plan` or `}`, found `bogus`".into()
        )
    );
    assert_eq!(
        error("module @\"unterminated {\n}"),
        (1, 9, "unterminated string".into())
    );
    assert_eq!(error("module @m { # }").2, "unexpected character #");
    assert_eq!(error("module % {}").2, "expected a name after `%`");
    assert_eq!(error("").2, "expected `module`, found end of input");
}

/// A bucket-specialized graph with its bucket record and memory plan.
const PLANNED: &str = r#"module @m {
  weight @w : f32[4]

  graph @g_4(%x: f32[4]) -> (f32[4]) {
    %a = add %x, @w : f32[4]
    %b = exp %a : f32[4]
    %c = constant {value = 1.0} : f32[4]
    %d = mul %b, %c : f32[4]
    return %d
  }

  bucket @g_4 = @g {seq = 4} : (f32[seq]) -> (f32[seq])

  plan @g_4 {arena = 128, weights = 64, constants = 64, kv_cache = 0, scratch = 0, lower_bound = 128} {
    %x : arena {offset = 0, size = 64, live = [0, 0]}
    @w : weights {offset = 0, size = 64}
    %a : arena {offset = 64, size = 64, live = [0, 1]}
    %b : arena {offset = 64, size = 64, live = [1, 3]} in_place %a
    %c : constants {offset = 0, size = 64}
    %d : arena {offset = 64, size = 64, live = [3, 3]} in_place %b
  }
}
"#;

#[test]
fn buckets_and_plans_round_trip_and_verify() {
    let m = parse_module(PLANNED).unwrap();
    assert_eq!(print_module(&m), PLANNED);
    verify_module(&m).unwrap();
    let p = &m.plans["g_4"];
    assert_eq!(p.get("b", false).unwrap().in_place.as_deref(), Some("a"));
    assert_eq!(m.buckets["g_4"].symbol, "seq");
}

#[test]
fn stale_or_malformed_plans_are_rejected() {
    // The verifier names a plan entry that disagrees with the graph.
    let stale = PLANNED.replace("live = [0, 0]", "live = [0, 1]");
    let e = verify_module(&parse_module(&stale).unwrap()).unwrap_err();
    assert!(e.to_string().contains("%x is planned live"), "{e}");
    // Plans are checked on their own terms first.
    let broken = PLANNED.replace("live = [1, 3]} in_place", "live = [1, 2]} in_place");
    let e = verify_module(&parse_module(&broken).unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("does not die where it is born"),
        "{e}"
    );
    let missing = PLANNED.replace("    %c : constants {offset = 0, size = 64}\n", "");
    let e = verify_module(&parse_module(&missing).unwrap()).unwrap_err();
    assert_eq!(e.to_string(), "graph @g_4: memory plan: %c is not planned");
    let bucket = PLANNED.replace("{seq = 4}", "{seq = 8}");
    let e = verify_module(&parse_module(&bucket).unwrap()).unwrap_err();
    assert!(e.to_string().contains("not @g's with seq = 8"), "{e}");
    // The parser locates malformed entries.
    let (_, _, msg) = error(&PLANNED.replace("%x : arena", "%x : heap"));
    assert!(msg.starts_with("unknown region `heap`"), "{msg}");
    let (_, _, msg) = error(&PLANNED.replace("@w : weights", "%w : weights"));
    assert!(msg.contains("only weights"), "{msg}");
    let (_, _, msg) = error(&PLANNED.replace("live = [0, 0]", "live = [1, 0]"));
    assert!(msg.contains("first <= last"), "{msg}");
}
