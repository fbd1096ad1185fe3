//! Fusion scaling bench, and a fusion runner for IR files.
//!
//! ```sh
//! cargo run --release -p slmcc-passes --example fusion            # bench
//! cargo run --release -p slmcc-passes --example fusion -- a.slm   # fuse files
//! ```
//!
//! The bench builds Llama-shaped graphs of 2, 6, 12, 24 and 48 layers (the
//! layer the PyTorch dynamo exporter writes for `LlamaDecoderLayer`, as
//! `slmcc import` reads it, repeated), runs `canonicalize,eqsat-fuse` and
//! prints the time and e-graph size of each run. Given `.slm` files, it runs
//! the fusion pipeline on each and prints the pass statistics.

use std::fmt::Write as _;
use std::time::Instant;

use slmcc_ir::text::parse_module;
use slmcc_passes::runner::format_stats;
use slmcc_passes::{PassManager, RunOptions};

const PIPELINE: &str = "shape-infer,const-fold,dce,canonicalize,eqsat-fuse,dce,cse";

fn main() {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        bench();
    }
    for f in files {
        let src = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{f}: {e}"));
        let mut m = parse_module(&src).unwrap_or_else(|e| panic!("{f}: {e}"));
        let options = RunOptions {
            verify_each: true,
            ..RunOptions::default()
        };
        let mut pm = PassManager::parse(PIPELINE, options).expect("pipeline");
        let records = pm
            .run(&mut m, &mut std::io::sink())
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        println!("== {f}\n{}", format_stats(&records));
        let out = format!("{f}.fused");
        std::fs::write(&out, slmcc_ir::text::print_module(&m)).expect("write");
    }
}

fn bench() {
    println!("layers  nodes-in  egraph-nodes  egraph-classes  iters  stop            saturate-ms  fuse-ms  canon+fuse-ms");
    for layers in [2, 6, 12, 24, 48] {
        let src = llama(layers);
        let nodes_in = parse_module(&src).expect("generated IR parses").graphs[0]
            .nodes
            .len();
        // The fastest of three runs.
        let mut best: Option<(std::time::Duration, Vec<slmcc_passes::PassRecord>)> = None;
        for _ in 0..3 {
            let mut m = parse_module(&src).expect("generated IR parses");
            let mut prep = PassManager::parse("shape-infer,const-fold,dce", RunOptions::default())
                .expect("pipeline");
            prep.run(&mut m, &mut std::io::sink()).expect("prepare");
            let start = Instant::now();
            let mut pm = PassManager::parse("canonicalize,eqsat-fuse", RunOptions::default())
                .expect("pipeline");
            let records = pm.run(&mut m, &mut std::io::sink()).expect("fuse");
            let total = start.elapsed();
            if best.as_ref().is_none_or(|(t, _)| total < *t) {
                best = Some((total, records));
            }
        }
        let (total, records) = best.expect("ran");
        let fuse = &records[1];
        let s = &fuse.stats;
        let stop = s
            .iter()
            .find(|(k, _)| k.starts_with("stop-"))
            .map_or("?", |(k, _)| k);
        println!(
            "{layers:>6}  {nodes_in:>8}  {:>12}  {:>14}  {:>5}  {stop:<14}  {:>11.1}  {:>7.1}  {:>13.1}",
            s.get("egraph-nodes"),
            s.get("egraph-classes"),
            s.get("iterations"),
            s.get("saturation-us") as f64 / 1e3,
            fuse.duration.as_secs_f64() * 1e3,
            total.as_secs_f64() * 1e3,
        );
        let formed = [
            "formed-attention",
            "formed-rope",
            "formed-swiglu",
            "formed-add-rms-norm",
        ];
        let counts: Vec<String> = formed.iter().map(|k| format!("{k}={}", s.get(k))).collect();
        println!("        {}", counts.join(" "));
    }
}

/// A Llama-shaped module of `layers` decoder layers (hidden 64, 4 query
/// heads and 2 KV heads of 16, MLP 176), written as the dynamo exporter
/// decomposes it.
pub fn llama(layers: usize) -> String {
    let mut s = String::from(
        "module @llama {\n  weight @embed : f32[512, 64]\n  weight @lm_head : f32[64, 512]\n",
    );
    for l in 0..layers {
        for (w, ty) in [
            ("q", "f32[64, 64]"),
            ("k", "f32[64, 32]"),
            ("v", "f32[64, 32]"),
            ("o", "f32[64, 64]"),
            ("gate", "f32[64, 176]"),
            ("up", "f32[64, 176]"),
            ("down", "f32[176, 64]"),
            ("n1", "f32[64]"),
            ("n2", "f32[64]"),
        ] {
            writeln!(s, "  weight @l{l}.{w} : {ty}").unwrap();
        }
    }
    s.push_str("  weight @norm : f32[64]\n  weight @inv_freq : f32[8]\n");
    s.push_str(
        "  graph @main(%input_ids: i64[1, seq]) -> (f32[1, seq, 512]) {
    %x0 = gather @embed, %input_ids {axis = 0} : f32[1, seq, 64]
    %zero = constant {value = 0} : i64[]
    %one = constant {value = 1} : i64[]
    %n = constant {value = seq} : i64[]
    %arange = range %zero, %n, %one : i64[seq]
    %pos = unsqueeze %arange {axes = [0, 2]} : i64[1, seq, 1]
    %posf = cast %pos {to = f32} : f32[1, seq, 1]
    %freqs = mul %posf, @inv_freq : f32[1, seq, 8]
    %emb = concat %freqs, %freqs {axis = -1} : f32[1, seq, 16]
    %cos0 = cos %emb : f32[1, seq, 16]
    %sin0 = sin %emb : f32[1, seq, 16]
    %cos = unsqueeze %cos0 {axes = [1]} : f32[1, 1, seq, 16]
    %sin = unsqueeze %sin0 {axes = [1]} : f32[1, 1, seq, 16]
    %i = unsqueeze %arange {axes = [0, 1, 3]} : i64[1, 1, seq, 1]
    %j = unsqueeze %arange {axes = [0, 1, 2]} : i64[1, 1, 1, seq]
    %keep = less_or_equal %j, %i : bool[1, 1, seq, seq]
    %fzero = constant {value = 0.0} : f32[]
    %fmin = constant {value = -3.4028235e38} : f32[]
    %mask = where %keep, %fzero, %fmin : f32[1, 1, seq, seq]
    %two = constant {value = 2.0} : f32[]
    %eps = constant {value = 1e-6} : f32[]
    %scale = constant {value = 0.25} : f32[]
    %s_q = constant {value = [1, -1, 4, 16]} : i64[4]
    %s_kv = constant {value = [1, -1, 2, 16]} : i64[4]
    %s_rep = constant {value = [1, 2, 2, seq, 16]} : i64[5]
    %s_heads = constant {value = [1, 4, -1, 16]} : i64[4]
    %s_out = constant {value = [1, -1, 64]} : i64[3]
    %c0 = constant {value = 0} : i64[1]
    %c8 = constant {value = 8} : i64[1]
    %c3 = constant {value = 3} : i64[1]
    %c1 = constant {value = 1} : i64[1]
    %cmax = constant {value = 9223372036854775807} : i64[1]
",
    );
    let rms = |s: &mut String, p: &str, x: &str, w: &str| {
        writeln!(
            s,
            "    %{p}_sq = pow %{x}, %two : f32[1, seq, 64]
    %{p}_ms = reduce_mean %{p}_sq {{axes = [-1]}} : f32[1, seq, 1]
    %{p}_e = add %{p}_ms, %eps : f32[1, seq, 1]
    %{p}_sd = sqrt %{p}_e : f32[1, seq, 1]
    %{p}_r = reciprocal %{p}_sd : f32[1, seq, 1]
    %{p}_xr = mul %{x}, %{p}_r : f32[1, seq, 64]
    %{p} = mul @{w}, %{p}_xr : f32[1, seq, 64]"
        )
        .unwrap();
    };
    let rope = |s: &mut String, p: &str, x: &str, h: usize| {
        writeln!(
            s,
            "    %{p}_c = mul %{x}, %cos : f32[1, {h}, seq, 16]
    %{p}_lo = slice %{x}, %c0, %c8, %c3, %c1 : f32[1, {h}, seq, 8]
    %{p}_hi = slice %{x}, %c8, %cmax, %c3, %c1 : f32[1, {h}, seq, 8]
    %{p}_n = neg %{p}_hi : f32[1, {h}, seq, 8]
    %{p}_rot = concat %{p}_n, %{p}_lo {{axis = -1}} : f32[1, {h}, seq, 16]
    %{p}_s = mul %{p}_rot, %sin : f32[1, {h}, seq, 16]
    %{p} = add %{p}_c, %{p}_s : f32[1, {h}, seq, 16]"
        )
        .unwrap();
    };
    let mut x = "x0".to_string();
    for l in 0..layers {
        rms(&mut s, &format!("l{l}_n1"), &x, &format!("l{l}.n1"));
        writeln!(
            s,
            "    %l{l}_q0 = matmul %l{l}_n1, @l{l}.q : f32[1, seq, 64]
    %l{l}_q1 = reshape %l{l}_q0, %s_q {{allow_zero = true}} : f32[1, seq, 4, 16]
    %l{l}_q2 = transpose %l{l}_q1 {{perm = [0, 2, 1, 3]}} : f32[1, 4, seq, 16]
    %l{l}_k0 = matmul %l{l}_n1, @l{l}.k : f32[1, seq, 32]
    %l{l}_k1 = reshape %l{l}_k0, %s_kv {{allow_zero = true}} : f32[1, seq, 2, 16]
    %l{l}_k2 = transpose %l{l}_k1 {{perm = [0, 2, 1, 3]}} : f32[1, 2, seq, 16]
    %l{l}_v0 = matmul %l{l}_n1, @l{l}.v : f32[1, seq, 32]
    %l{l}_v1 = reshape %l{l}_v0, %s_kv {{allow_zero = true}} : f32[1, seq, 2, 16]
    %l{l}_v2 = transpose %l{l}_v1 {{perm = [0, 2, 1, 3]}} : f32[1, 2, seq, 16]"
        )
        .unwrap();
        rope(&mut s, &format!("l{l}_qr"), &format!("l{l}_q2"), 4);
        rope(&mut s, &format!("l{l}_kr"), &format!("l{l}_k2"), 2);
        writeln!(
            s,
            "    %l{l}_ku = unsqueeze %l{l}_kr {{axes = [2]}} : f32[1, 2, 1, seq, 16]
    %l{l}_ke = expand %l{l}_ku, %s_rep : f32[1, 2, 2, seq, 16]
    %l{l}_kh = reshape %l{l}_ke, %s_heads {{allow_zero = true}} : f32[1, 4, seq, 16]
    %l{l}_vu = unsqueeze %l{l}_v2 {{axes = [2]}} : f32[1, 2, 1, seq, 16]
    %l{l}_ve = expand %l{l}_vu, %s_rep : f32[1, 2, 2, seq, 16]
    %l{l}_vh = reshape %l{l}_ve, %s_heads {{allow_zero = true}} : f32[1, 4, seq, 16]
    %l{l}_kt = transpose %l{l}_kh {{perm = [0, 1, 3, 2]}} : f32[1, 4, 16, seq]
    %l{l}_qk = matmul %l{l}_qr, %l{l}_kt : f32[1, 4, seq, seq]
    %l{l}_sc = mul %l{l}_qk, %scale : f32[1, 4, seq, seq]
    %l{l}_am = add %l{l}_sc, %mask : f32[1, 4, seq, seq]
    %l{l}_p = softmax %l{l}_am {{axis = -1}} : f32[1, 4, seq, seq]
    %l{l}_pv = matmul %l{l}_p, %l{l}_vh : f32[1, 4, seq, 16]
    %l{l}_t = transpose %l{l}_pv {{perm = [0, 2, 1, 3]}} : f32[1, seq, 4, 16]
    %l{l}_a = reshape %l{l}_t, %s_out {{allow_zero = true}} : f32[1, seq, 64]
    %l{l}_o = matmul %l{l}_a, @l{l}.o : f32[1, seq, 64]
    %l{l}_h = add %{x}, %l{l}_o : f32[1, seq, 64]"
        )
        .unwrap();
        rms(
            &mut s,
            &format!("l{l}_n2"),
            &format!("l{l}_h"),
            &format!("l{l}.n2"),
        );
        writeln!(
            s,
            "    %l{l}_g = matmul %l{l}_n2, @l{l}.gate : f32[1, seq, 176]
    %l{l}_sg = sigmoid %l{l}_g : f32[1, seq, 176]
    %l{l}_silu = mul %l{l}_g, %l{l}_sg : f32[1, seq, 176]
    %l{l}_u = matmul %l{l}_n2, @l{l}.up : f32[1, seq, 176]
    %l{l}_m = mul %l{l}_silu, %l{l}_u : f32[1, seq, 176]
    %l{l}_d = matmul %l{l}_m, @l{l}.down : f32[1, seq, 64]
    %l{l}_out = add %l{l}_h, %l{l}_d : f32[1, seq, 64]"
        )
        .unwrap();
        x = format!("l{l}_out");
    }
    rms(&mut s, "final", &x, "norm");
    s.push_str(
        "    %logits = matmul %final, @lm_head : f32[1, seq, 512]
    return %logits
  }
}
",
    );
    s
}
