//! `slmcc report`: the memory plan of every bucket, as text and optionally
//! as an SVG picture of the arena over time.
//!
//! The input is a package (`.slmpkg`: its version set, options and kernels
//! first), a module that already holds plans (`.slm` written after
//! `plan-memory`), or a model that is planned now (fusion, buckets,
//! planning: [`Pipeline`]).
//! With `--fusion`, a model is fused instead and what fusion made of it is
//! printed ([`slmcc::fusion`]).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, Context};
use slmcc_ir::{MemoryPlan, Module, Region};
use slmcc_runtime::package::encryption::{self, WeightKey};
use slmcc_runtime::package::{hex, signature, Package};

use super::load::{is_rk3588, load_module};
use crate::cli::{CardFormat, ReportArgs, Target};
use crate::exit::CmdResult;

pub use slmcc::pipeline::DEFAULT_BUCKETS;
use slmcc::pipeline::{BucketSpec, PackTarget, Pipeline};
use slmcc_passes::transforms::bucket_specialize::parse_buckets;

use super::estimate::{asm_report, estimate_report};

/// `--fusion`: fuses a model now and prints [`slmcc::fusion::FusionSummary`].
fn fusion_report(path: &Path) -> CmdResult {
    if path.extension().is_some_and(|e| e == "slmpkg") {
        return Err(anyhow!(
            "{}: --fusion reports a model (.onnx or .slm); a package is already fused",
            path.display()
        )
        .into());
    }
    let mut module = load_module(path)?;
    let summary = slmcc::fusion::fuse_and_summarize(&mut module)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    print!("{}", summary.text(&path.display().to_string()));
    Ok(())
}

pub fn run(args: ReportArgs) -> CmdResult {
    let path = &args.package;
    if args.fusion {
        return fusion_report(path);
    }
    let is_package = path.extension().is_some_and(|e| e == "slmpkg");
    if args.card.is_some() && !is_package {
        return Err(anyhow!(
            "{}: --card prints the model card that compile writes into a package (.slmpkg)",
            path.display()
        )
        .into());
    }
    if is_package {
        if args.buckets.is_some() {
            return Err(anyhow!(
                "{}: a package's buckets are fixed when it is compiled; --buckets applies only to inputs planned now",
                path.display()
            )
            .into());
        }
        if args.quant.quant.is_some() || args.target.is_some() {
            return Err(anyhow!(
                "{}: a package's target and quantization are fixed when it is compiled",
                path.display()
            )
            .into());
        }
        let mut pkg = Package::open(path)?;
        if let Some(format) = args.card {
            return print_card(&pkg, format);
        }
        if let Some(key) = &args.decrypt {
            pkg.decrypt(&WeightKey::read(key).map_err(|e| anyhow!(e))?)?;
        }
        let mut module = pkg.module()?;
        print!("{}", package_report(&pkg));
        print!("{}", text_report(&module, path, false));
        print_npu(&mut module, &args, is_rk3588(&pkg), Some(&pkg))?;
        if let Some(svg) = &args.plan_svg {
            super::opt::write_atomically(svg, plan_svg(&module).as_bytes())?;
        }
        return Ok(());
    }
    if args.decrypt.is_some() {
        return Err(anyhow!(
            "{}: --decrypt decrypts a package's weights, and this is not a package (.slmpkg)",
            path.display()
        )
        .into());
    }
    let target = args.target.unwrap_or(Target::Cpu);
    let rk3588 = target == Target::Rk3588;
    let quant = args.quant.get(target.default_quant())?;
    let mut module = load_module(path)?;
    let planned_now = module.plans.is_empty();
    if planned_now {
        let cpu = slmcc_backends::cpu::CpuOptions::default();
        super::load::calibrate(&mut module, &args.quant, &quant, path, &cpu)?;
        let buckets = args.buckets.as_deref().unwrap_or(DEFAULT_BUCKETS);
        let sizes = parse_buckets(buckets).map_err(|e| anyhow!("--buckets: {e}"))?;
        let pipeline = Pipeline::fusion()
            .quantized(quant)
            .buckets(BucketSpec::Sizes(sizes));
        let pipeline = match rk3588 {
            true => pipeline.packed(PackTarget::Rk3588),
            false => pipeline,
        };
        pipeline
            .planned()
            .run(&mut module)
            .with_context(|| format!("{}", path.display()))?;
    } else if args.buckets.is_some() {
        return Err(anyhow!(
            "{}: the module already holds memory plans; --buckets applies only to inputs planned now",
            path.display()
        )
        .into());
    }
    print!("{}", text_report(&module, path, planned_now));
    if let Some(svg) = &args.plan_svg {
        super::opt::write_atomically(svg, plan_svg(&module).as_bytes())?;
    }
    print_npu(&mut module, &args, rk3588, None)
}

/// The rk3588 estimate and, with `--asm`, the NPU programs: those `pkg`
/// stores, else the module's lowered now.
fn print_npu(
    module: &mut Module,
    args: &ReportArgs,
    rk3588: bool,
    pkg: Option<&Package>,
) -> CmdResult {
    if !rk3588 {
        if args.asm {
            return Err(anyhow!("--asm: only rk3588 models have NPU programs").into());
        }
        return Ok(());
    }
    let lowered = super::load::npu_lowered(module, pkg)?;
    print!("{}", estimate_report(module, &lowered, args.prompt_len));
    if args.asm {
        print!("{}", asm_report(module, &lowered)?);
    }
    Ok(())
}

/// `--card`: the package's model card as stored (JSON) or as Markdown.
fn print_card(pkg: &Package, format: CardFormat) -> CmdResult {
    let at = |e: &dyn std::fmt::Display| anyhow!("{}: {e}", pkg.path.display());
    let text = &pkg.manifest.card;
    if text.is_empty() {
        return Err(at(&"the package holds no model card").into());
    }
    match format {
        CardFormat::Json => print!("{text}"),
        CardFormat::Md => {
            let card: serde_json::Value =
                serde_json::from_str(text).map_err(|e| at(&format!("model card: {e}")))?;
            print!("{}", super::card::markdown(&card).map_err(|e| at(&e))?);
        }
    }
    Ok(())
}

/// What a package says about itself: sizes and digests, the version set,
/// the options, and the kernels it carries.
fn package_report(pkg: &Package) -> String {
    let m = &pkg.manifest;
    let (md, wd) = pkg.digests();
    let v = m.versions.clone().unwrap_or_default();
    let o = m.options.clone().unwrap_or_default();
    let mut out = format!(
        "{}: package of module @{} (entry @{}), {} bytes, verified\n",
        pkg.path.display(),
        m.module,
        m.entry,
        pkg.file_bytes()
    );
    let _ = writeln!(
        out,
        "  manifest   {:>12} bytes  sha256 {}",
        pkg.manifest_bytes(),
        hex(&md)
    );
    let sections = m.weight_sections.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "  weights    {:>12} bytes  sha256 {} (of {} section digests, {} bytes each)",
        pkg.weights_bytes(),
        hex(&wd),
        sections.sha256.len(),
        sections.section_bytes
    );
    let signer = match &pkg.signer {
        Some(key) => format!("{} (signature verified)", signature::key_id(key)),
        None => "none (unsigned)".to_string(),
    };
    let _ = writeln!(out, "  signed by  {signer}");
    if let Some(e) = pkg.encryption() {
        let _ = writeln!(
            out,
            "  encrypted  {} in chunks of {} bytes, key {}",
            e.scheme,
            e.chunk_bytes,
            encryption::key_id_text(&e.key_id)
        );
    }
    let _ = writeln!(
        out,
        "  versions   compiler {}, target {}, kernel library {}, isa {}, runtime ABI {}",
        v.compiler, v.target, v.kernel_library, v.isa, v.runtime_abi
    );
    let buckets: Vec<String> = o.buckets.iter().map(u64::to_string).collect();
    let _ = writeln!(
        out,
        "  options    cpu {}, quant {}, buckets {}, fma {}",
        o.cpu,
        o.quant,
        buckets.join(", "),
        if o.fma { "on" } else { "off" }
    );
    let _ = writeln!(out, "  pipeline   {}", o.pipeline);
    if !o.calibration.is_empty() {
        let _ = writeln!(out, "  calibrated {}", o.calibration);
    }
    let _ = writeln!(
        out,
        "  source     {} sha256 {}",
        m.source,
        hex(&m.source_sha256)
    );
    for b in &m.buckets {
        let kernels = match &b.kernels {
            Some(k) => format!(
                "{} kernels in a {}-byte {} object",
                k.symbols.len(),
                k.object.len(),
                k.triple
            ),
            None => "no kernels (JIT-compiled from the IR at load)".to_string(),
        };
        let npu = match b.npu.len() {
            0 => String::new(),
            n => format!(
                ", {n} NPU programs ({} register-command tasks, {} bytes of command lists)",
                b.npu.iter().map(|p| p.tasks.len()).sum::<usize>(),
                b.npu
                    .iter()
                    .flat_map(|p| &p.tasks)
                    .map(|t| t.regcmd.len())
                    .sum::<usize>()
            ),
        };
        let _ = writeln!(
            out,
            "  bucket     @{} ({} = {}): IR {} bytes, {kernels}{npu}",
            b.graph,
            b.symbol,
            b.size,
            b.ir.len()
        );
    }
    out
}

/// The plans in the module's graph order (buckets ascending).
fn planned_graphs(m: &Module) -> impl Iterator<Item = (&str, &MemoryPlan)> {
    m.graphs
        .iter()
        .filter_map(|g| Some((g.name.as_str(), m.plans.get(&g.name)?)))
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

/// The text report: one block per planned graph.
fn text_report(m: &Module, path: &Path, planned_now: bool) -> String {
    let mut out = format!("{}: module @{}", path.display(), m.name);
    if planned_now {
        out.push_str(", planned now");
    }
    let _ = writeln!(out, ", {} planned graph(s)", m.plans.len());
    for (name, plan) in planned_graphs(m) {
        let g = m.graph(name);
        let steps = g.map_or(plan.steps(), |g| g.nodes.len());
        let bucket = match m.buckets.get(name) {
            Some(b) => format!(", bucket {} = {} of @{}", b.symbol, b.size, b.base),
            None => String::new(),
        };
        let in_place = plan.tensors.iter().filter(|t| t.in_place.is_some()).count();
        let _ = writeln!(
            out,
            "\ngraph @{name}{bucket}: {steps} steps, {} tensors, {in_place} in place",
            plan.tensors.len()
        );
        for r in Region::ALL {
            let bytes = plan.regions.get(r);
            let extra = if r == Region::Arena {
                format!(
                    "  lower bound {} ({}), ratio {:.3}",
                    plan.lower_bound,
                    kib(plan.lower_bound),
                    plan.ratio()
                )
            } else {
                String::new()
            };
            let _ = writeln!(out, "  {:<11}{bytes:>12} ({}){extra}", r.name(), kib(bytes));
        }
        let total = plan.regions.total();
        let _ = writeln!(out, "  {:<11}{total:>12} ({})", "peak total", kib(total));
    }
    out
}

/// Escapes text for XML content and attribute values.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// A stable colour per name.
fn colour(name: &str) -> String {
    let h = name.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    format!("hsl({},60%,62%)", h % 360)
}

const WIDTH: f64 = 1000.0;
const PANEL: f64 = 360.0;
const MARGIN: f64 = 60.0;

/// One panel per planned graph, stacked: x = step, y = arena offset, one
/// `rect` per arena tensor over its lifetime with a `title` naming it.
pub fn plan_svg(m: &Module) -> String {
    let panels = m.plans.len().max(1) as f64;
    let height = panels * (PANEL + MARGIN) + MARGIN;
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{w}\" height=\"{height}\" viewBox=\"0 0 {w} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        w = WIDTH + 2.0 * MARGIN
    );
    let _ = writeln!(
        out,
        "<title>memory plans of module @{}</title>",
        xml_escape(&m.name)
    );
    for (i, (name, plan)) in planned_graphs(m).enumerate() {
        let top = MARGIN + i as f64 * (PANEL + MARGIN);
        panel(&mut out, name, plan, top);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, name: &str, plan: &MemoryPlan, top: f64) {
    let steps = plan.steps().max(1) as f64;
    let arena = plan.regions.arena.max(1) as f64;
    let (sx, sy) = (WIDTH / steps, PANEL / arena);
    let _ = writeln!(
        out,
        "<g><text x=\"{MARGIN}\" y=\"{:.1}\">@{}: arena {} bytes, lower bound {} (ratio {:.3}), {} steps; x = step, y = offset</text>",
        top - 8.0,
        xml_escape(name),
        plan.regions.arena,
        plan.lower_bound,
        plan.ratio(),
        plan.steps()
    );
    let _ = writeln!(
        out,
        "<rect x=\"{MARGIN}\" y=\"{top:.1}\" width=\"{WIDTH}\" height=\"{PANEL}\" fill=\"none\" stroke=\"#444\"/>"
    );
    if plan.lower_bound > 0 {
        let y = top + plan.lower_bound as f64 * sy;
        let _ = writeln!(
            out,
            "<line x1=\"{MARGIN}\" y1=\"{y:.2}\" x2=\"{:.1}\" y2=\"{y:.2}\" stroke=\"#c00\" stroke-dasharray=\"4 3\"><title>lower bound {} bytes</title></line>",
            MARGIN + WIDTH,
            plan.lower_bound
        );
    }
    for t in &plan.tensors {
        let (Region::Arena, Some((first, last))) = (t.region, t.live) else {
            continue;
        };
        if t.size == 0 {
            continue;
        }
        let in_place = match &t.in_place {
            Some(src) => format!(", in place of %{src}"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{}\" stroke=\"#222\" stroke-width=\"0.3\"><title>%{}: {} bytes at offset {}, steps {first} to {last}{}</title></rect>",
            MARGIN + first as f64 * sx,
            top + t.offset as f64 * sy,
            (last - first + 1) as f64 * sx,
            t.size as f64 * sy,
            colour(&t.name),
            xml_escape(&t.name),
            t.size,
            t.offset,
            xml_escape(&in_place)
        );
    }
    out.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            xml_escape("a<b>&\"c'\u{1}"),
            "a&lt;b&gt;&amp;&quot;c&apos;?"
        );
    }
}
