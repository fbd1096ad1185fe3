//! The rk3588 part of `slmcc report`: per bucket, the estimated time of
//! each kernel (grouped by op and shapes; the NPU's W8A8 products through
//! its register interface, with their task counts), the CPU/NPU split and
//! NPU MAC utilisation, then the estimated time to first token and decode
//! rate; with `--asm`, every NPU product's register program: its tile
//! plan, then each task's command list decoded from the bytes stored (one
//! line per word, as `slmcc npu disasm` prints them).
//!
//! Every number here is the estimate of our models
//! ([`slmcc_runtime::estimate`]), labelled as such.

use std::fmt::Write as _;

use slmcc_backends::npu::lower::ProductProgram;
use slmcc_backends::npu::regcmd::decode_buffer;
use slmcc_backends::npu::Target;
use slmcc_ir::placement::Device;
use slmcc_ir::{Module, OpDef};
use slmcc_runtime::estimate::{
    estimate_graph, npu_utilisation, BoardCpu, EstimateOptions, GraphEstimate,
};
use slmcc_runtime::npu::NpuLowered;

/// The bucket graphs of `m` with their sizes, smallest first.
fn buckets(m: &Module) -> Vec<(usize, &slmcc_ir::Graph)> {
    let mut v: Vec<(usize, &slmcc_ir::Graph)> = m
        .graphs
        .iter()
        .filter_map(|g| Some((m.buckets.get(&g.name)?.size as usize, g)))
        .collect();
    v.sort_by_key(|(s, _)| *s);
    v
}

fn table(e: &GraphEstimate, out: &mut String) {
    let _ = writeln!(
        out,
        "    {:<4} {:<14} {:>5} {:>10} {:>12} {:>10} {:>6}  shapes",
        "dev", "op", "count", "ms", "npu tasks", "DDR MB", "util"
    );
    let t = Target::rk3588();
    let mut groups = e.grouped();
    groups.sort_by(|a, b| b.0.seconds.total_cmp(&a.0.seconds));
    for (g, count) in groups {
        let util = if g.device == Device::Npu && g.npu_seconds > 0.0 {
            format!("{:.0}%", 100.0 * npu_utilisation(&t, g.macs, g.npu_seconds))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "    {:<4} {:<14} {:>5} {:>10.3} {:>12} {:>10.2} {:>6}  {}",
            match g.device {
                Device::Npu => "npu",
                Device::Cpu => "cpu",
            },
            g.op,
            count,
            g.seconds * 1e3,
            if g.tasks > 0 {
                g.tasks.to_string()
            } else {
                String::new()
            },
            g.ddr_bytes as f64 / 1e6,
            util,
            g.shape
        );
    }
}

/// The estimate of one bucket graph.
pub struct BucketEstimate<'m> {
    pub size: usize,
    pub graph: &'m slmcc_ir::Graph,
    pub estimate: GraphEstimate,
}

/// The estimate of every bucket of a module, and what a user asks of it:
/// the time to first token of a `prompt`-token prompt (the smallest bucket
/// that holds it) and the time per token of the decode graph (bucket 1
/// over a KV cache) at context `prompt + 1`.
pub struct ModelEstimate<'m> {
    pub prompt: usize,
    pub buckets: Vec<BucketEstimate<'m>>,
    /// (bucket, seconds), if a bucket holds the prompt.
    pub first_token: Option<(usize, f64)>,
    /// Seconds per decoded token, if there is a decode graph.
    pub per_token: Option<f64>,
}

/// Estimates the bucket graphs of `m` with the NPU programs `programs`
/// gives per graph name.
pub fn estimate_model<'m, 'p>(
    m: &'m Module,
    programs: impl Fn(&str) -> &'p [ProductProgram],
    prompt: usize,
) -> ModelEstimate<'m> {
    let target = Target::rk3588();
    let cpu = BoardCpu::rk3588();
    let mut out = ModelEstimate {
        prompt,
        buckets: Vec::new(),
        first_token: None,
        per_token: None,
    };
    for (size, g) in buckets(m) {
        let has_cache = g
            .nodes
            .iter()
            .any(|n| matches!(n.op, slmcc_ir::Op::KvWrite(_)));
        let context = if size == 1 { prompt + 1 } else { size };
        let e = estimate_graph(
            g,
            programs(&g.name),
            &target,
            &cpu,
            &EstimateOptions { context },
        );
        if size == 1 && has_cache {
            out.per_token = Some(e.seconds());
        }
        if size >= prompt && out.first_token.is_none() {
            out.first_token = Some((size, e.seconds()));
        }
        out.buckets.push(BucketEstimate {
            size,
            graph: g,
            estimate: e,
        });
    }
    out
}

/// What the estimates are of, said wherever one is printed.
pub fn estimate_basis() -> String {
    let target = Target::rk3588();
    let cpu = BoardCpu::rk3588();
    format!(
        "the model's estimate, not a measurement: the W8A8 products on the NPU's register \
         interface by its tile model at {} GB/s DDR, every other node on the CPU by a roofline \
         of {} x A76 at {} GHz; docs/NPU.md",
        target.ddr_bytes_per_sec / 1_000_000_000,
        cpu.cores,
        cpu.clock_hz / 1e9
    )
}

/// The estimate section for `m` (bucket graphs, static shapes) with its
/// NPU programs `lowered`.
pub fn estimate_report(m: &Module, lowered: &NpuLowered, prompt: usize) -> String {
    let target = Target::rk3588();
    let mut out = String::new();
    let _ = writeln!(out, "estimate for rk3588 ({})", estimate_basis());
    let est = estimate_model(
        m,
        |g| lowered.programs.get(g).map_or(&[][..], Vec::as_slice),
        prompt,
    );
    for b in &est.buckets {
        let (e, size) = (&b.estimate, b.size);
        let _ = writeln!(out, "  bucket @{} ({size} tokens)", b.graph.name);
        table(e, &mut out);
        let (npu, cpu_s) = (e.seconds_on(Device::Npu), e.seconds_on(Device::Cpu));
        let _ = writeln!(
            out,
            "    total {:.3} ms: npu {:.3} ms ({:.0}%, MAC utilisation {:.0}%), cpu {:.3} ms",
            e.seconds() * 1e3,
            npu * 1e3,
            100.0 * npu / e.seconds().max(f64::MIN_POSITIVE),
            100.0 * e.npu_utilisation(&target),
            cpu_s * 1e3
        );
    }
    match est.first_token {
        Some((size, s)) => {
            let _ = writeln!(
                out,
                "  time to first token, {prompt}-token prompt (bucket {size}): {:.1} ms (estimate)",
                s * 1e3
            );
        }
        None => {
            let _ = writeln!(out, "  no bucket holds a {prompt}-token prompt");
        }
    }
    match est.per_token {
        Some(s) => {
            let _ = writeln!(
                out,
                "  decode: {:.2} ms per token, {:.1} tokens/s (estimate, context {})",
                s * 1e3,
                1.0 / s,
                prompt + 1
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  decode: no decode graph (compile with --kv-cache for bucket 1 over a cache)"
            );
        }
    }
    out
}

/// Every NPU product's register program, per bucket (see the module
/// doc).
pub fn asm_report(m: &Module, lowered: &NpuLowered) -> anyhow::Result<String> {
    let mut out = String::new();
    for (size, g) in buckets(m) {
        for p in lowered.programs.get(&g.name).into_iter().flatten() {
            let node = &g.nodes[p.node as usize];
            let _ = writeln!(
                out,
                "; @{} ({size} tokens) node %{}: {} M={} K={} N={} x {} (weights {}), groups of \
                 {}, K blocks of {}; tiles {} rows x {} kernels over {} cores, {} tasks",
                g.name,
                g.value(node.outputs[0]).name,
                node.op.mnemonic(),
                p.rows,
                p.k,
                p.n,
                p.weights.len(),
                p.weights.join(", "),
                p.group,
                p.k_block,
                p.mt,
                p.nt,
                p.cores,
                p.tasks.len()
            );
            for (i, t) in p.tasks.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "; task {i}: core {}, weights {}, rows {}..{}, kernels {}..{}, channels \
                     {}..{}",
                    t.core,
                    p.weights[t.operand as usize],
                    t.m0,
                    t.m0 + t.rows,
                    t.n0,
                    t.n0 + t.kernels,
                    t.k0,
                    t.k0 + p.k_block
                );
                for w in decode_buffer(&t.regcmd)? {
                    let _ = writeln!(out, "{w}");
                }
            }
        }
    }
    Ok(out)
}
