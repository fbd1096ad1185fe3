//! The rk3588 part of `slmcc report`: per bucket, the estimated time of
//! each kernel (grouped by op and shapes; the NPU's W8A8 products through
//! its register interface, with their task counts), the CPU/NPU split and
//! NPU MAC utilisation, then the estimated time to first token and decode
//! rate;
//! with `--asm`, the disassembly of every NPU program (encoded and decoded
//! again, so it shows what the binary form holds).
//!
//! Every number here is the estimate of our models
//! ([`slmcc_runtime::estimate`]), labelled as such.

use std::fmt::Write as _;

use slmcc_backends::npu::encode::{disassemble, encode_stream};
use slmcc_backends::npu::Target;
use slmcc_ir::placement::Device;
use slmcc_ir::{Module, OpDef};
use slmcc_runtime::estimate::{
    estimate_graph, npu_utilisation, BoardCpu, EstimateOptions, GraphEstimate,
};
use slmcc_runtime::npu::plan_graph;
use slmcc_runtime::package::Package;

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

/// The estimate section for `m` (bucket graphs, static shapes).
pub fn estimate_report(m: &Module, prompt: usize) -> anyhow::Result<String> {
    let target = Target::rk3588();
    let cpu = BoardCpu::rk3588();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "estimate for rk3588 (the model's estimate, not a measurement: the W8A8 products on the \
         NPU's register interface by its tile model at {} GB/s DDR, every other node on the CPU \
         by a roofline of {} x A76 at {} GHz; docs/NPU.md)",
        target.ddr_bytes_per_sec / 1_000_000_000,
        cpu.cores,
        cpu.clock_hz / 1e9
    );
    let mut prefill: Option<(usize, f64)> = None;
    let mut decode: Option<f64> = None;
    for (size, g) in buckets(m) {
        let has_cache = g
            .nodes
            .iter()
            .any(|n| matches!(n.op, slmcc_ir::Op::KvWrite(_)));
        let context = if size == 1 { prompt + 1 } else { size };
        let e = estimate_graph(g, &target, &cpu, &EstimateOptions { context })
            .map_err(|e| anyhow::anyhow!("graph @{}: {e}", g.name))?;
        let _ = writeln!(out, "  bucket @{} ({size} tokens)", g.name);
        table(&e, &mut out);
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
        if size == 1 && has_cache {
            decode = Some(e.seconds());
        }
        if size >= prompt && prefill.is_none() {
            prefill = Some((size, e.seconds()));
        }
    }
    match prefill {
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
    match decode {
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
    Ok(out)
}

/// The disassembly of every NPU program of every bucket: those `pkg`
/// stores when given (what runs on the board), else emitted now.
pub fn asm_report(m: &Module, pkg: Option<&Package>) -> anyhow::Result<String> {
    let target = Target::rk3588();
    let mut out = String::new();
    for (size, g) in buckets(m) {
        let stored = pkg.map(|p| p.npu_programs(&g.name)).transpose()?;
        for k in plan_graph(g, &target).map_err(|e| anyhow::anyhow!("graph @{}: {e}", g.name))? {
            let program = match &stored {
                Some(s) => s.get(&k.node).ok_or_else(|| {
                    anyhow::anyhow!(
                        "graph @{}: no NPU program stored for node {}",
                        g.name,
                        k.node
                    )
                })?,
                None => &k.program,
            };
            let _ = writeln!(
                out,
                "; @{} ({size} tokens) node %{}: {} {}",
                g.name,
                g.value(g.nodes[k.node].outputs[0]).name,
                g.nodes[k.node].op.mnemonic(),
                k.kernel.describe()
            );
            for (c, core) in program.cores.iter().enumerate() {
                for (q, instrs) in [("dma", &core.dma), ("compute", &core.compute)] {
                    let _ = writeln!(out, "core{c}.{q}:");
                    let bytes = encode_stream(instrs)?;
                    out.push_str(&disassemble(&bytes)?);
                }
            }
        }
    }
    Ok(out)
}
