//! `quantize`: weight-only quantization of the linear layers to `qmatmul`
//! (and of the `swiglu` gated MLPs to `qswiglu`; INT8 per output channel,
//! or INT4 per group), activations quantized per token at run time by the
//! op itself.

pub mod fallback;
pub mod glu;
pub mod gptq;
pub mod rtn;
pub mod smooth;

use std::collections::{BTreeSet, HashMap};

use slmcc_ir::ops::qmatmul::{QActivations, QMatMul};
use slmcc_ir::verify::node_label;
use slmcc_ir::{DType, Graph, Module, Op, TensorType, ValueDef, ValueId, WeightStore};

use self::glu::QWeight;
use self::gptq::Gptq;
use self::rtn::Rounding;
use self::rtn::{Rtn, WeightQuantizer};
use self::smooth::Smooth;
use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;
use crate::transforms::fresh_weight_name;
use slmcc_ir::ops::glu::{Glu, GluKind};
use slmcc_ir::ops::qswiglu::QSwiGlu;

/// Options of `quantize`.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "weights",
        kind: OptionKind::Enum(&["int8", "int4"]),
        default: "int8",
        help: "int8 (per output channel) or int4 (per group of `group` rows)",
    },
    OptionSpec {
        name: "group",
        kind: OptionKind::Int {
            min: 0,
            max: slmcc_ir::ops::qmatmul::MAX_GROUP,
        },
        default: "128",
        help: "int4: rows of K sharing a scale; 0 = one group (per output channel)",
    },
    OptionSpec {
        name: "glus",
        kind: OptionKind::Enum(&["fuse", "split", "keep"]),
        default: "fuse",
        help: "fused gated MLPs (swiglu/geglu): fuse (swiglu into one qswiglu; geglu split), split (into qmatmuls and the gate arithmetic) or keep (in f32)",
    },
    OptionSpec {
        name: "activations",
        kind: OptionKind::Enum(&["int8", "f32"]),
        default: "int8",
        help: "int8 (quantized per token, integer dot products) or f32 (weight-only: the product by the dequantized weight)",
    },
    OptionSpec {
        name: "keep",
        kind: OptionKind::Enum(&["lm-head", "none"]),
        default: "lm-head",
        help: "linear layers kept in f32: lm-head (a matmul producing a graph output) or none",
    },
    OptionSpec {
        name: "method",
        kind: OptionKind::Enum(&["rtn", "gptq"]),
        default: "rtn",
        help: "rtn (round to nearest) or gptq (needs each weight's calibration Hessian as the module weight `<weight>.hessian`: `--calib`)",
    },
    OptionSpec {
        name: "fallback",
        kind: OptionKind::Int { min: 0, max: 100 },
        default: "0",
        help: "mixed precision: the most sensitive products stay at higher precision (int4 at int8, int8 in f32) within this percent of the quantized weights' bytes",
    },
    OptionSpec {
        name: "smooth",
        kind: OptionKind::Enum(&["none", "smoothquant", "awq"]),
        default: "none",
        help: "per-channel scales moved from the activations into the weights first: smoothquant (needs `<weight>.absmax`) or awq (needs `<weight>.hessian`); `--calib` adds both",
    },
    OptionSpec {
        name: "alpha",
        kind: OptionKind::Int { min: 0, max: 100 },
        default: "50",
        help: "smoothquant: the migration strength, in hundredths (50: alpha = 0.5)",
    },
];

/// The suffix of the module weight holding a weight's calibration Hessian
/// (`@w.hessian`, `f32[K, K]`: the mean of `xᵀx` over the calibration
/// rows of its activations), which `method=gptq` reads.
pub const HESSIAN_SUFFIX: &str = ".hessian";

/// The suffix of the module weight holding the largest magnitude per
/// channel of a weight's calibration activations (`@w.absmax`, `f32[K]`),
/// which `smooth=smoothquant` reads.
pub const ABSMAX_SUFFIX: &str = ".absmax";

/// How `quantize` rounds (`method=rtn|gptq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Round to nearest ([`rtn::Rtn`]).
    Rtn,
    /// GPTQ with the calibration Hessians ([`gptq::Gptq`]).
    Gptq,
}

/// The products `quantize` may quantize in `g`, as (activation operand,
/// weight names): a `matmul` by one weight, or a gated MLP by its
/// weights. What calibration collects statistics for.
pub fn calibration_points(g: &Graph) -> Vec<(ValueId, Vec<String>)> {
    (0..g.nodes.len())
        .filter_map(|i| {
            let ws = match g.nodes[i].op {
                Op::Glu(_) => glu_weights(g, i)?,
                _ => vec![weight_operand(g, i)?],
            };
            Some((g.nodes[i].inputs[0], ws))
        })
        .collect()
}

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("weight-bytes-before", "bytes of all module weights before the pass"),
    Statistic::new("sites-smoothed", "norm-fed activations whose channel scales moved into the weights (`smooth`)"),
    Statistic::new("sites-not-smoothed", "activations `smooth` could not rescale (no norm to absorb the division)"),
    Statistic::new("matmuls-quantized", "weight matmuls made `qmatmul`"),
    Statistic::new("matmuls-kept", "weight matmuls left in `f32` (`keep`)"),
    Statistic::new("glus-fused", "`swiglu`s made `qswiglu`"),
    Statistic::new("glus-split", "gated MLPs taken apart into `qmatmul`s and the gate arithmetic"),
    Statistic::new("glus-kept", "gated MLPs left in `f32`"),
    Statistic::new("groups-narrowed", "weights whose group was narrowed to a divisor of their K"),
    Statistic::new("products-at-higher-precision", "products kept at a higher precision by `fallback`"),
    Statistic::new("fallback-bytes", "weight bytes `fallback` added"),
    Statistic::new("weight-bytes-after", "bytes of all module weights after the pass"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "quantize",
    summary: "linear layers to qmatmul: int8/int4 weights (round-to-nearest or GPTQ, after SmoothQuant or AWQ scales), int8 activations per token",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(Quantize::from_options(o))),
};

/// Replaces every `matmul %x, @w` whose `@w` is a 2-D `f32` module weight
/// and `%x` an `f32` operand of rank >= 2 by `qmatmul %x, @w.q, @w.scale`
/// (see the `qmatmul` op for the exact semantics), with `@w.q`/`@w.scale`
/// new module weights held in memory, computed from `@w`'s data by
/// round-to-nearest ([`rtn::Rtn`]), or with `method=gptq` by GPTQ from the
/// calibration Hessian `@w.hessian` ([`gptq::Gptq`]; the driver's
/// `--calib` adds them, the pass removes them): `weights=int8` gives `i8` weights with
/// one scale per output channel, `weights=int4` gives `i4` weights with one
/// scale per `group` rows of `K` and output column (`group=0`: per output
/// channel). A weight used by several matmuls (or graphs) is quantized once.
/// `activations=f32` makes every product weight-only (`qmatmul` and
/// `qswiglu` with `activations = "f32"`: the activations stay unquantized
/// and multiply the dequantized weight, on the CPU).
///
/// Half-precision products (`f16`/`bf16` activations and weights, from a
/// model exported in half precision) are quantized too: the weights are
/// widened to `f32` (exactly) first, and the `qmatmul` keeps the
/// activations' dtype (see the op; `widen-half` later makes the cpu
/// backend's conversions explicit).
///
/// The group of a weight is `gcd(K, group)`: the requested group when it
/// divides `K`, else the largest divisor of `K` that also divides it (for
/// a power of two, the largest power of two dividing both; a weight with
/// `K = 64` at `group=128` is per output channel). Narrowed weights are
/// counted (`groups-narrowed`).
///
/// Fused gated MLPs (`swiglu`/`geglu` by module weights): with `glus=fuse`
/// (the default) a `swiglu` becomes one `qswiglu` by the quantized weights
/// (two weights, or the fused gate/up weight, as the `swiglu` had; see the
/// `qswiglu` op), and a `geglu` is split as with `glus=split` (there is no
/// quantized `geglu`); `glus=split` takes both apart into `qmatmul`s and
/// the gate arithmetic ([`glu`]), which computes what `qswiglu` computes
/// bit for bit; `glus=keep` leaves them in `f32`.
///
/// Kept unquantized: with `keep=lm-head` (the default) every matmul whose result
/// is a graph output (the LM head); the embedding (`gather`), norms and
/// residual adds are not matmuls and are never touched. Original
/// weights that no graph references any more are removed from the module,
/// so a package holds only the quantized form. It invalidates the memory
/// plans (the weights region changed), which the pass manager drops when
/// this pass changes the module: plan again after it.
///
/// With `smooth=smoothquant|awq`, per-channel scales are first moved from
/// the activations into the weights where a norm makes the activations
/// ([`smooth`]: SmoothQuant, or AWQ's search for the rounding chosen
/// here); the norm's parameters absorb the division, so the model computes
/// the same function before rounding. Calibration statistics (`@w.hessian`,
/// `@w.absmax`) are the pass's input only and are removed.
///
/// With `fallback=P` (mixed precision, [`fallback`]), the products whose
/// rounding costs the most (relative output error by the calibration
/// Hessian, or relative weight error without one) stay at a higher
/// precision, 4-bit weights at 8 bits per output channel and 8-bit ones in
/// `f32`, as long as the extra bytes fit in `P`% of the quantized weights'.
///
/// Requires: a verified module whose quantized weights have data loaded
/// (with `method=gptq`, each with its `@w.hessian`; with `smooth`, the
/// statistics above).
/// Fails, naming the graph and node, otherwise. Guarantees: a module that
/// verifies; graph signatures unchanged. Statistics: `matmuls-quantized`,
/// `matmuls-kept` (weight matmuls left in `f32`), `glus-fused` (`swiglu`s
/// made `qswiglu`), `glus-split`, `glus-kept`, `groups-narrowed`,
/// `weight-bytes-before`, `weight-bytes-after` (all module weights); with
/// `smooth`, `sites-smoothed` and `sites-not-smoothed`; with `fallback`,
/// `products-at-higher-precision` and `fallback-bytes`.
pub struct Quantize {
    options: QuantizeOptions,
}

/// The weight format `quantize` writes (`weights=int8|int4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightBits {
    /// INT8, one scale per output channel.
    Int8,
    /// INT4, one scale per group of rows of `K` and output column.
    Int4,
}

/// What `quantize` does with a fused gated MLP (`glus=fuse|split|keep`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glus {
    /// `swiglu` into `qswiglu`; `geglu` split.
    Fuse,
    /// Into `qmatmul`s and the gate arithmetic.
    Split,
    /// Left in `f32`.
    Keep,
}

/// The options of `quantize`, typed: what the `--quant` choices of the
/// driver build and what the pipeline text `quantize{...}` holds
/// ([`QuantizeOptions::entry`] renders it; the registry parses and checks
/// it against [`OPTIONS`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizeOptions {
    pub weights: WeightBits,
    /// INT4: rows of `K` sharing a scale; 0 = per output channel. Ignored
    /// for INT8.
    pub group: usize,
    pub glus: Glus,
    /// Keep the LM head (a matmul producing a graph output) in `f32`.
    pub keep_lm_head: bool,
    /// INT8 activations, or `f32` ones (weight-only quantization).
    pub activations: QActivations,
    pub method: Method,
    /// Scales moved from the activations into the weights before rounding.
    pub smooth: Option<Smooth>,
    /// Mixed precision: percent of the quantized weights' bytes that the
    /// most sensitive products may add by staying at higher precision.
    pub fallback_percent: u8,
}

impl QuantizeOptions {
    /// Whether these options need calibration statistics (`--calib`).
    pub fn calibrated(&self) -> bool {
        self.method == Method::Gptq || self.smooth.is_some()
    }

    /// INT8 weights per output channel, the LM head kept.
    pub fn int8() -> QuantizeOptions {
        QuantizeOptions {
            weights: WeightBits::Int8,
            group: 128,
            glus: Glus::Fuse,
            keep_lm_head: true,
            activations: QActivations::Int8,
            method: Method::Rtn,
            smooth: None,
            fallback_percent: 0,
        }
    }

    /// These options with `f32` activations (weight-only quantization).
    pub fn weight_only(self) -> QuantizeOptions {
        QuantizeOptions {
            activations: QActivations::F32,
            ..self
        }
    }

    /// INT4 weights per group of `group` rows, the LM head kept.
    pub fn int4(group: usize) -> QuantizeOptions {
        QuantizeOptions {
            weights: WeightBits::Int4,
            group,
            ..QuantizeOptions::int8()
        }
    }

    /// Reads the declared [`OPTIONS`] (checked when the pipeline was parsed).
    pub fn from_options(o: &PassOptions) -> QuantizeOptions {
        QuantizeOptions {
            weights: match o.str("weights") {
                "int4" => WeightBits::Int4,
                _ => WeightBits::Int8,
            },
            group: o.count("group"),
            glus: match o.str("glus") {
                "split" => Glus::Split,
                "keep" => Glus::Keep,
                _ => Glus::Fuse,
            },
            keep_lm_head: o.str("keep") == "lm-head",
            activations: match o.str("activations") {
                "f32" => QActivations::F32,
                _ => QActivations::Int8,
            },
            method: match o.str("method") {
                "gptq" => Method::Gptq,
                _ => Method::Rtn,
            },
            smooth: match o.str("smooth") {
                "smoothquant" => Some(Smooth::SmoothQuant {
                    alpha_percent: o.int("alpha") as u8,
                }),
                "awq" => Some(Smooth::Awq),
                _ => None,
            },
            fallback_percent: o.int("fallback") as u8,
        }
    }

    /// The pipeline entry, options at their default left out:
    /// `quantize{weights=int4,group=64}`.
    pub fn entry(&self) -> String {
        let weights = match self.weights {
            WeightBits::Int8 => "int8",
            WeightBits::Int4 => "int4",
        };
        let glus = match self.glus {
            Glus::Fuse => "fuse",
            Glus::Split => "split",
            Glus::Keep => "keep",
        };
        let mut values = vec![
            ("weights", weights.to_string()),
            ("glus", glus.to_string()),
            (
                "keep",
                if self.keep_lm_head { "lm-head" } else { "none" }.to_string(),
            ),
            (
                "activations",
                match self.activations {
                    QActivations::Int8 => "int8",
                    QActivations::F32 => "f32",
                }
                .to_string(),
            ),
        ];
        if self.weights == WeightBits::Int4 {
            values.push(("group", self.group.to_string()));
        }
        if self.method == Method::Gptq {
            values.push(("method", "gptq".to_string()));
        }
        match self.smooth {
            None => {}
            Some(Smooth::SmoothQuant { alpha_percent }) => {
                values.push(("smooth", "smoothquant".to_string()));
                values.push(("alpha", alpha_percent.to_string()));
            }
            Some(Smooth::Awq) => values.push(("smooth", "awq".to_string())),
        }
        if self.fallback_percent > 0 {
            values.push(("fallback", self.fallback_percent.to_string()));
        }
        crate::options::render_entry("quantize", OPTIONS, &values)
    }

    fn config(&self) -> Config {
        Config {
            bits: match self.weights {
                WeightBits::Int8 => 8,
                WeightBits::Int4 => 4,
            },
            group: match self.weights {
                WeightBits::Int8 => 0,
                WeightBits::Int4 => self.group,
            },
            glus: self.glus,
            keep_lm_head: self.keep_lm_head,
            activations: self.activations,
            method: self.method,
        }
    }
}

/// The options as the quantizer uses them.
#[derive(Clone)]
struct Config {
    bits: u8,
    /// 0: per output channel (the whole of `K`).
    group: usize,
    glus: Glus,
    keep_lm_head: bool,
    activations: QActivations,
    method: Method,
}

impl Config {
    /// The bits and group asked for.
    fn rounding(&self) -> Rounding {
        Rounding {
            bits: self.bits,
            group: self.group,
        }
    }

    /// The mixed-precision fallback's precision: 4-bit weights at 8 bits
    /// (per output channel); `None` for 8-bit ones, which stay `f32`.
    fn higher(&self) -> Option<Config> {
        (self.bits == 4).then(|| Config {
            bits: 8,
            group: 0,
            ..self.clone()
        })
    }
}

/// A weight already quantized: the new weights' names and the op.
struct Done {
    q: (String, TensorType),
    scale: (String, TensorType),
    op: QMatMul,
}

impl Quantize {
    pub fn from_options(o: &PassOptions) -> Quantize {
        Quantize {
            options: QuantizeOptions::from_options(o),
        }
    }
}

impl Pass for Quantize {
    fn name(&self) -> &'static str {
        "quantize"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let cfg = self.options.config();
        stats.add("weight-bytes-before", weight_bytes(&module.weights));
        if let Some(how) = self.options.smooth {
            let done = smooth::smooth(module, how, cfg.rounding(), cfg.keep_lm_head)
                .map_err(|e| failed("quantize", format!("smoothing: {e}")))?;
            stats.add("sites-smoothed", done.sites);
            stats.add("sites-not-smoothed", done.skipped);
        }
        let high = match self.options.fallback_percent {
            0 => fallback::Chosen::default(),
            p => fallback::choose(module, &cfg, p)
                .map_err(|e| failed("quantize", format!("mixed precision: {e}")))?,
        };
        let cfg_high = cfg.higher();
        let mut done: HashMap<String, Done> = HashMap::new();
        let mut count = Counts::default();
        for g in &mut module.graphs {
            let mut changed = false;
            let mut split: HashMap<usize, (Glu, Vec<QWeight>)> = HashMap::new();
            for i in 0..g.nodes.len() {
                if let Op::Glu(glu) = g.nodes[i].op {
                    let Some(ws) = glu_weights(g, i).filter(|_| cfg.glus != Glus::Keep) else {
                        count.glus_kept += 1;
                        continue;
                    };
                    let wcfg = match ws.iter().any(|w| high.weights.contains(w)) {
                        false => &cfg,
                        true => match &cfg_high {
                            Some(c) => c,
                            None => {
                                count.glus_kept += 1;
                                continue;
                            }
                        },
                    };
                    let mut qs = Vec::new();
                    for w in ws {
                        let d = quantized(&mut done, &mut module.weights, &w, wcfg)
                            .map_err(|e| at(g, i, &e))?;
                        qs.push(d.values(g));
                    }
                    let same_op = qs.iter().all(|w| w.op == qs[0].op);
                    if cfg.glus == Glus::Fuse && glu.kind == GluKind::SwiGlu && same_op {
                        let node = &mut g.nodes[i];
                        node.op = Op::QSwiGlu(QSwiGlu::from(qs[0].op));
                        let x = node.inputs[0];
                        node.inputs = std::iter::once(x)
                            .chain(qs.iter().flat_map(|w| [w.q, w.scale]))
                            .collect();
                        count.glus_fused += 1;
                        changed = true;
                    } else {
                        split.insert(i, (glu, qs));
                        count.glus_split += 1;
                    }
                    continue;
                }
                let Some(w) = weight_operand(g, i) else {
                    continue;
                };
                if kept_in_f32(g, i, cfg.keep_lm_head) {
                    count.kept += 1;
                    continue;
                }
                let wcfg = match (high.weights.contains(&w), &cfg_high) {
                    (false, _) => &cfg,
                    (true, Some(c)) => c,
                    (true, None) => {
                        count.kept += 1;
                        continue;
                    }
                };
                let d = quantized(&mut done, &mut module.weights, &w, wcfg)
                    .map_err(|e| at(g, i, &e))?;
                let QWeight { q, scale, op } = d.values(g);
                let node = &mut g.nodes[i];
                node.op = Op::QMatMul(op);
                node.inputs = vec![node.inputs[0], q, scale];
                count.quantized += 1;
                changed = true;
            }
            if !split.is_empty() {
                let old = std::mem::take(&mut g.nodes);
                for (i, node) in old.into_iter().enumerate() {
                    match split.remove(&i) {
                        Some((glu, qs)) => glu::expand(g, &node, glu, &qs)
                            .map_err(|e| failed("quantize", format!("graph @{}: {e}", g.name)))?,
                        None => g.nodes.push(node),
                    }
                }
                changed = true;
            }
            if changed {
                g.compact();
            }
        }
        let originals: BTreeSet<&String> = done.keys().collect();
        for w in originals {
            if module.graphs.iter().all(|g| g.find_weight(w).is_none()) {
                module.weights.remove(w);
            }
        }
        // Calibration statistics are the pass's input only.
        let hessians: Vec<String> = module
            .weights
            .iter()
            .map(|(n, _)| n)
            .filter(|n| n.ends_with(HESSIAN_SUFFIX) || n.ends_with(ABSMAX_SUFFIX))
            .map(str::to_string)
            .collect();
        for h in hessians {
            if module.graphs.iter().all(|g| g.find_weight(&h).is_none()) {
                module.weights.remove(&h);
            }
        }
        let changed = count.quantized + count.glus_split + count.glus_fused > 0;
        stats.add("matmuls-quantized", count.quantized);
        stats.add("matmuls-kept", count.kept);
        stats.add("glus-fused", count.glus_fused);
        stats.add("glus-split", count.glus_split);
        stats.add("glus-kept", count.glus_kept);
        stats.add("groups-narrowed", count_narrowed(&done, &cfg));
        stats.add("products-at-higher-precision", high.units);
        stats.add("fallback-bytes", high.extra_bytes);
        stats.add("weight-bytes-after", weight_bytes(&module.weights));
        Ok(changed)
    }
}

#[derive(Default)]
struct Counts {
    quantized: u64,
    kept: u64,
    glus_fused: u64,
    glus_split: u64,
    glus_kept: u64,
}

impl Done {
    /// The quantized weight's operands as values of `g`.
    fn values(&self, g: &mut Graph) -> QWeight {
        QWeight {
            q: g.weight(&self.q.0, self.q.1.clone()),
            scale: g.weight(&self.scale.0, self.scale.1.clone()),
            op: self.op,
        }
    }
}

/// Weight `w` quantized, once per module.
fn quantized<'a>(
    done: &'a mut HashMap<String, Done>,
    store: &mut WeightStore,
    w: &str,
    cfg: &Config,
) -> Result<&'a Done, String> {
    if !done.contains_key(w) {
        let d = quantize_weight(store, w, cfg)?;
        done.insert(w.to_string(), d);
    }
    Ok(&done[w])
}

/// Weights quantized with a smaller group than asked (see [`Quantize`]).
fn count_narrowed(done: &HashMap<String, Done>, cfg: &Config) -> u64 {
    // Weights at the fallback's precision are per output channel by choice.
    let narrowed =
        |d: &&Done| d.op.bits == cfg.bits && cfg.group != 0 && (d.op.group as usize) < cfg.group;
    done.values().filter(narrowed).count() as u64
}

/// For a `swiglu`/`geglu` node of a float operand by 2-D float module
/// weights, the weights' names.
fn glu_weights(g: &Graph, i: usize) -> Option<Vec<String>> {
    let node = &g.nodes[i];
    if !g.ty(node.inputs[0]).dtype.is_float() {
        return None;
    }
    node.inputs[1..]
        .iter()
        .map(|&w| {
            let ValueDef::Weight(name) = &g.value(w).def else {
                return None;
            };
            let wt = g.ty(w);
            let ok = wt.dtype.is_float() && wt.rank() == 2 && wt.shape.as_fixed().is_some();
            ok.then(|| name.clone())
        })
        .collect()
}

/// Whether the weight `matmul` node `i` stays unquantized: the LM head (a
/// graph output) under `keep_lm_head`, or a product of a vector.
fn kept_in_f32(g: &Graph, i: usize, keep_lm_head: bool) -> bool {
    let node = &g.nodes[i];
    (keep_lm_head && g.outputs.contains(&node.outputs[0])) || g.ty(node.inputs[0]).rank() < 2
}

/// For a `matmul` node, the name of its second operand when that is a 2-D
/// float module weight (and the first a float operand).
fn weight_operand(g: &Graph, i: usize) -> Option<String> {
    let node = &g.nodes[i];
    if !matches!(node.op, Op::MatMul(_)) || node.inputs.len() != 2 {
        return None;
    }
    let (x, w): (ValueId, ValueId) = (node.inputs[0], node.inputs[1]);
    let ValueDef::Weight(name) = &g.value(w).def else {
        return None;
    };
    let (xt, wt) = (g.ty(x), g.ty(w));
    let float_2d = wt.dtype.is_float() && wt.rank() == 2 && wt.shape.as_fixed().is_some();
    (float_2d && xt.dtype.is_float()).then(|| name.clone())
}

/// Quantizes module weight `name` and adds the results to the store.
fn quantize_weight(store: &mut WeightStore, name: &str, cfg: &Config) -> Result<Done, String> {
    let no_data = || format!("weight @{name} has no data (quantize needs the weights file loaded)");
    let k = store
        .get(name)
        .and_then(|w| w.ty.shape.as_fixed())
        .and_then(|s| s.first().copied())
        .unwrap_or(0);
    if k == 0 {
        return Err(format!("weight @{name} has no rows"));
    }
    let scheme = cfg.rounding().scheme(k);
    let group = scheme.group;
    let qw =
        match cfg.method {
            // Read in place when mapped (see `WeightStore::with_f32`).
            Method::Rtn => store
                .with_f32(name, |shape, values| {
                    Rtn.quantize_values(shape, values, scheme)
                })
                .map_err(|e| e.to_string())?
                .ok_or_else(no_data)?
                .map_err(|e| format!("weight @{name} ({}): {e}", Rtn.name()))?,
            Method::Gptq => {
                if !store.get(name).is_some_and(|w| w.has_data()) {
                    return Err(no_data());
                }
                let hname = format!("{name}{HESSIAN_SUFFIX}");
                let h = store.tensor(&hname).map_err(|e| e.to_string())?.ok_or_else(|| {
                format!("weight @{name} has no calibration Hessian @{hname} (gptq needs --calib)")
            })?;
                let hessian = h
                    .as_f32()
                    .ok_or_else(|| format!("@{hname} is {}, not f32", h.dtype()))?;
                let gptq = Gptq { hessian };
                // Read in place when mapped, as for RTN.
                store
                    .with_f32(name, |shape, values| {
                        gptq.quantize_values(shape, values, scheme)
                    })
                    .map_err(|e| e.to_string())?
                    .ok_or_else(no_data)?
                    .map_err(|e| format!("weight @{name} ({}): {e}", gptq.name()))?
            }
        };
    let op = QMatMul {
        activations: cfg.activations,
        ..QMatMul::new(cfg.bits as i64, group as i64).map_err(|e| e.to_string())?
    };
    let q_name = fresh_weight_name(store, &format!("{name}.q"));
    let q_ty = fixed_type(qw.q.dtype(), qw.q.shape());
    store.insert(q_name.clone(), qw.q);
    let s_name = fresh_weight_name(store, &format!("{name}.scale"));
    let s_ty = fixed_type(DType::F32, qw.scale.shape());
    store.insert(s_name.clone(), qw.scale);
    Ok(Done {
        q: (q_name, q_ty),
        scale: (s_name, s_ty),
        op,
    })
}

fn fixed_type(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::fixed(dtype, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>())
}

/// The bytes of every module weight with a static shape.
fn weight_bytes(store: &WeightStore) -> u64 {
    store
        .iter()
        .filter_map(|(_, w)| {
            let n: usize = w.ty.shape.as_fixed()?.iter().product();
            Some(w.ty.dtype.bytes_for(n) as u64)
        })
        .sum()
}

fn at(g: &Graph, i: usize, msg: &str) -> PassError {
    failed(
        "quantize",
        format!("graph @{}, node {}: {msg}", g.name, node_label(g, i)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transforms::test_eval::run_main;
    use slmcc_ir::text::{parse_module, print_module};
    use slmcc_ir::{verify_module, EvalCtx, OpDef, Tensor};

    const SRC: &str = "module @m {
  weight @w : f32[4, 2]
  weight @head : f32[2, 3]

  graph @main(%x: f32[1, 4]) -> (f32[1, 3]) {
    %h = matmul %x, @w : f32[1, 2]
    %g = matmul %x, @w : f32[1, 2]
    %s = add %h, %g : f32[1, 2]
    %y = matmul %s, @head : f32[1, 3]
    return %y
  }
}
";

    fn module() -> Module {
        let mut m = parse_module(SRC).unwrap();
        let w: Vec<f32> = (0..8).map(|i| i as f32 * 0.25 - 1.0).collect();
        m.weights.insert("w", Tensor::from_f32(vec![4, 2], w));
        m.weights
            .insert("head", Tensor::from_f32(vec![2, 3], vec![0.5; 6]));
        m
    }

    /// The pass a pipeline entry builds (options checked as the pipeline
    /// parser checks them).
    fn entry(text: &str) -> Result<Box<dyn Pass>, PassError> {
        crate::registry::create_pass(&crate::pipeline::parse_pipeline(text)?[0])
    }

    fn run(weights: &str, group: i64, keep: &str) -> Result<(Module, Statistics), PassError> {
        let mut m = module();
        let mut stats = Statistics::default();
        let mut pass = entry(&format!(
            "quantize{{weights={weights},group={group},glus=split,keep={keep}}}"
        ))?;
        pass.run(&mut m, &mut stats)?;
        verify_module(&m).unwrap();
        Ok((m, stats))
    }

    #[test]
    fn quantizes_shared_weight_once_and_drops_the_original() {
        let (m, stats) = run("int4", 2, "lm-head").unwrap();
        let text = print_module(&m);
        assert!(
            text.contains("%h = qmatmul %x, @w.q, @w.scale {bits = 4, group = 2} : f32[1, 2]"),
            "{text}"
        );
        assert!(text.contains("weight @w.q : i4[4, 2]"), "{text}");
        assert!(text.contains("weight @w.scale : f32[2, 2]"), "{text}");
        assert!(text.contains("matmul %s, @head"), "{text}");
        assert!(m.weights.get("w").is_none());
        assert_eq!(stats.get("matmuls-quantized"), 2);
        assert_eq!(stats.get("matmuls-kept"), 1);
        // 32 + 24 bytes of f32 before; 4 (i4) + 16 + 24 after.
        assert_eq!(stats.get("weight-bytes-before"), 56);
        assert_eq!(stats.get("weight-bytes-after"), 44);
    }

    #[test]
    fn int8_is_per_channel_and_reproduces_the_op() {
        let (m, stats) = run("int8", 128, "none").unwrap();
        assert_eq!(stats.get("matmuls-quantized"), 3);
        assert_eq!(stats.get("matmuls-kept"), 0);
        let g = &m.graphs[0];
        let Op::QMatMul(op) = g.nodes[0].op else {
            panic!("not quantized")
        };
        assert_eq!((op.bits, op.group), (8, 4));
        let q = m.weights.tensor("w.q").unwrap().unwrap();
        let s = m.weights.tensor("w.scale").unwrap().unwrap();
        // Column 0 of w is [-1, -0.5, 0, 0.5]: scale 1/127, q = ±127, ±63.5
        // rounded half to even (64), 0.
        assert_eq!(s.as_f32().unwrap()[0], 1.0 / 127.0);
        let col0: Vec<i64> = q.to_i64_vec().iter().step_by(2).copied().collect();
        assert_eq!(
            col0,
            vec![-127, (-0.5f32 * 127.0).round_ties_even() as i64, 0, 64]
        );
        let x = Tensor::from_f32(vec![1, 4], vec![1.0, -2.0, 0.5, 3.0]);
        let y = op.eval(&[&x, &q, &s], &EvalCtx::default()).unwrap();
        // x · w[:, 0] = -1 + 1 + 0 + 1.5 in f32.
        assert!((y[0].as_f32().unwrap()[0] - 1.5).abs() < 0.05);
    }

    #[test]
    fn later_passes_keep_qmatmul() {
        let (mut m, _) = run("int8", 128, "lm-head").unwrap();
        let options = crate::RunOptions {
            verify_each: true,
            ..crate::RunOptions::default()
        };
        crate::PassManager::parse("canonicalize,eqsat-fuse,cse,dce,quantize", options)
            .unwrap()
            .run(&mut m, &mut std::io::sink())
            .unwrap();
        let text = print_module(&m);
        assert!(
            text.contains("qmatmul %x, @w.q, @w.scale {bits = 8, group = 4}"),
            "{text}"
        );
    }

    #[test]
    fn bad_options_and_missing_data_are_errors() {
        let e = |r: Result<(Module, Statistics), PassError>| r.err().unwrap().to_string();
        // Bad options are refused when the pipeline is parsed.
        assert!(e(run("int3", 128, "lm-head")).contains("one of int8, int4"));
        assert!(e(run("int8", 128, "all")).contains("one of lm-head, none"));
        assert!(e(run("int4", -1, "lm-head")).contains("<int in 0..=65536>"));
        let msg = entry("quantize{glus=merge}").err().unwrap().to_string();
        assert!(msg.contains("one of fuse, split, keep"), "{msg}");
        let mut m = parse_module(SRC).unwrap();
        let mut pass = entry("quantize{glus=split}").unwrap();
        let msg = pass
            .run(&mut m, &mut Statistics::default())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("weight @w has no data"), "{msg}");
    }

    #[test]
    fn a_group_not_dividing_k_narrows_to_the_gcd() {
        let (m, stats) = run("int4", 6, "none").unwrap();
        let Op::QMatMul(op) = m.graphs[0].nodes[0].op else {
            panic!("not quantized")
        };
        // K = 4 for @w: gcd(4, 6) = 2; K = 2 for @head: gcd(2, 6) = 2.
        assert_eq!(op.group, 2);
        assert_eq!(stats.get("groups-narrowed"), 2);
    }

    const GLU_SRC: &str = "module @m {
  weight @wg : f32[4, 3]
  weight @wu : f32[4, 3]
  weight @wgu : f32[4, 6]

  graph @main(%x: f32[2, 4]) -> (f32[2, 3], f32[2, 3]) {
    %m = swiglu %x, @wg, @wu : f32[2, 3]
    %n = geglu %x, @wgu {approximate = \"tanh\"} : f32[2, 3]
    return %m, %n
  }
}
";

    #[test]
    fn gated_mlps_split_into_qmatmuls_and_stay_close() {
        let mut m = parse_module(GLU_SRC).unwrap();
        let data = |n: usize, k: f32| (0..n).map(|i| ((i as f32) * k).sin()).collect();
        m.weights
            .insert("wg", Tensor::from_f32(vec![4, 3], data(12, 0.7)));
        m.weights
            .insert("wu", Tensor::from_f32(vec![4, 3], data(12, 1.3)));
        m.weights
            .insert("wgu", Tensor::from_f32(vec![4, 6], data(24, 0.9)));
        let x = Tensor::from_f32(vec![2, 4], data(8, 2.1));
        let before = run_main(&m, &[("x", x.clone())]);
        let mut stats = Statistics::default();
        let mut pass = entry("quantize{weights=int8,glus=split,keep=none}").unwrap();
        pass.run(&mut m, &mut stats).unwrap();
        verify_module(&m).unwrap();
        let text = print_module(&m);
        assert_eq!(stats.get("glus-split"), 2, "{text}");
        assert!(
            !text.contains("swiglu") && !text.contains("geglu"),
            "{text}"
        );
        assert!(text.contains("= qmatmul %x, @wg.q, @wg.scale"), "{text}");
        assert!(text.contains("= split %"), "{text}");
        assert!(text.contains("%m = mul %"), "{text}");
        assert!(m.weights.get("wgu").is_none());
        let after = run_main(&m, &[("x", x)]);
        for (a, b) in before.iter().zip(&after) {
            for (p, q) in a.as_f32().unwrap().iter().zip(b.as_f32().unwrap()) {
                assert!((p - q).abs() < 0.05, "{p} vs {q}");
            }
        }
    }

    const FUSE_SRC: &str = "module @m {
  weight @wg : f32[8, 3]
  weight @wu : f32[8, 3]
  weight @wgu : f32[8, 6]

  graph @main(%x: f32[1, 3, 8]) -> (f32[1, 3, 3], f32[1, 3, 3], f32[1, 3, 3]) {
    %m = swiglu %x, @wg, @wu : f32[1, 3, 3]
    %n = swiglu %x, @wgu : f32[1, 3, 3]
    %e = geglu %x, @wg, @wu : f32[1, 3, 3]
    return %m, %n, %e
  }
}
";

    fn quantized_glus(weights: &str, glus: &str) -> (Module, Statistics) {
        let mut m = parse_module(FUSE_SRC).unwrap();
        let data = |n: usize, k: f32| (0..n).map(|i| ((i as f32) * k).sin()).collect();
        m.weights
            .insert("wg", Tensor::from_f32(vec![8, 3], data(24, 0.7)));
        m.weights
            .insert("wu", Tensor::from_f32(vec![8, 3], data(24, 1.3)));
        m.weights
            .insert("wgu", Tensor::from_f32(vec![8, 6], data(48, 0.9)));
        let mut stats = Statistics::default();
        let mut pass = entry(&format!(
            "quantize{{weights={weights},group=4,glus={glus},keep=none}}"
        ))
        .unwrap();
        pass.run(&mut m, &mut stats).unwrap();
        verify_module(&m).unwrap();
        (m, stats)
    }

    #[test]
    fn swiglus_fuse_into_qswiglu_bit_for_bit_with_the_split_form() {
        let data = |n: usize, k: f32| -> Vec<f32> {
            (0..n).map(|i| ((i as f32) * k).cos() * 2.0).collect()
        };
        let mut x = data(24, 2.1);
        x[8..16].fill(0.0); // a row of zeros: the quantization's special case
        let x = Tensor::from_f32(vec![1, 3, 8], x);
        for weights in ["int8", "int4"] {
            let (fused, stats) = quantized_glus(weights, "fuse");
            let text = print_module(&fused);
            assert_eq!(stats.get("glus-fused"), 2, "{text}");
            assert_eq!(stats.get("glus-split"), 1, "{text}");
            let bits = if weights == "int8" {
                "bits = 8, group = 8"
            } else {
                "bits = 4, group = 4"
            };
            assert!(
                text.contains(&format!(
                    "%m = qswiglu %x, @wg.q, @wg.scale, @wu.q, @wu.scale {{{bits}}} : f32[1, 3, 3]"
                )),
                "{text}"
            );
            assert!(
                text.contains(&format!(
                    "%n = qswiglu %x, @wgu.q, @wgu.scale {{{bits}}} : f32[1, 3, 3]"
                )),
                "{text}"
            );
            // geglu has no quantized fused form: split.
            assert!(
                !text.contains("= swiglu") && !text.contains("geglu"),
                "{text}"
            );
            assert!(text.contains("= gelu %"), "{text}");
            assert!(fused.weights.get("wgu").is_none());
            let (split, stats) = quantized_glus(weights, "split");
            assert_eq!(stats.get("glus-fused"), 0);
            assert_eq!(stats.get("glus-split"), 3);
            let a = run_main(&fused, &[("x", x.clone())]);
            let b = run_main(&split, &[("x", x.clone())]);
            for (p, q) in a.iter().zip(&b) {
                let bits = |t: &Tensor| -> Vec<u32> {
                    t.as_f32().unwrap().iter().map(|v| v.to_bits()).collect()
                };
                assert_eq!(bits(p), bits(q), "{weights}");
            }
        }
        let (kept, stats) = quantized_glus("int8", "keep");
        assert_eq!(stats.get("glus-kept"), 3);
        assert_eq!(stats.get("glus-fused"), 0);
        assert!(print_module(&kept).contains("%n = swiglu %x, @wgu"));
    }
}
