//! `kv-cache`: turns a fused decoder graph into a step over a static KV
//! cache, so one graph serves prefill (a bucket of new tokens) and decode
//! (`bucket-specialize` to length 1).

use slmcc_ir::ops::attention::Attention;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::kv_cache::{KvLayout, KvMask, KvWrite, Q8_SCALE_BYTES};
use slmcc_ir::{DType, Dim, Graph, Module, Node, Op, Shape, TensorType, ValueId};

use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// Options of `kv-cache`.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "max-context",
        kind: OptionKind::POSITIVE,
        default: "1024",
        help: "cache slots per layer without a window: the longest context",
    },
    OptionSpec {
        name: "window",
        kind: OptionKind::COUNT,
        default: "0",
        help: "keep only the last WINDOW tokens (plus the sinks): a ring, memory stays flat",
    },
    OptionSpec {
        name: "max-chunk",
        kind: OptionKind::COUNT,
        default: "0",
        help: "the most tokens one step feeds (the largest bucket; 0: max-context): sizes a sliding-window layer's ring",
    },
    OptionSpec {
        name: "sinks",
        kind: OptionKind::COUNT,
        default: "0",
        help: "with a window: the first SINKS tokens stay in the cache for good",
    },
    OptionSpec {
        name: "dtype",
        kind: OptionKind::Enum(&["f32", "f16", "i8"]),
        default: "f32",
        help: "the cache's element type: f32, f16 or i8 (INT8 per head and token, with the row's scale: the q8 rows of `kv_write`)",
    },
    OptionSpec {
        name: "symbol",
        kind: OptionKind::Str,
        default: "seq",
        help: "the sequence-length symbol of the graph inputs",
    },
];

/// The name of the step's first position input.
pub const POSITION_INPUT: &str = "cache_pos";

/// The cache input of layer `l` (`key` or `value`) and the result that is
/// the cache after the step (a graph output).
pub fn cache_names(l: usize, which: &str) -> (String, String) {
    (format!("past.{l}.{which}"), format!("present.{l}.{which}"))
}

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("graphs-cached", "graphs made a step over the KV cache"),
    Statistic::new("layers-cached", "attentions reading and writing the cache"),
    Statistic::new("positions-shifted", "position ranges of length `seq` shifted to start at `%cache_pos`"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "kv-cache",
    summary: "a step over a static KV cache: cache inputs/outputs, kv_write + kv_mask, positions from %cache_pos",
    options: OPTIONS,
    requires: Requires::Symbolic,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: false,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(KvCache::from_options(o)?)),
};

/// For every graph with a causal, maskless fused `attention`:
///
/// - adds the input `%cache_pos : i64[]`, the absolute position of the
///   step's first token, and per attention `l` the inputs `%past.l.key`,
///   `%past.l.value` (`[b, kv_heads, C, head_dim]`, `C` = `max-context`,
///   or `sinks + window` with a window; `dtype`, except that `f16` keys
///   and values, from a half-precision model, get an `f16` cache rather
///   than an `f32` one: wider slots would hold the same values; an `i8`
///   cache is `[b, kv_heads, C, head_dim + 4]`, in `kv_write`'s q8 rows,
///   one scale per head and token); a layer whose attention
///   has the model's own sliding window `w` (Mistral, Gemma 2's local
///   layers) gets a ring of `w + max-chunk - 1` slots when that is smaller,
///   and its `kv_mask` keeps only the last `w` positions (`span = w`);
/// - writes the step's keys and values into them (`kv_write`), appends
///   the written caches as the outputs `%present.l.key`/`%present.l.value`
///   (after the existing outputs), and makes the attention read the cache
///   under `kv_mask` (its `causal` flag replaced by the mask; the
///   attention reads an `f16` cache as it is stored, with no conversion
///   of the whole cache per step);
/// - shifts every `range` of length `symbol` (the position ids that RoPE
///   tables and position embeddings are built from) by `%cache_pos`, so
///   positions continue from the cache.
///
/// Exports that already carry the cache (`past_key_values.L.key` inputs of
/// length `past`, attention over `concat(past, new)` whose results are the
/// `present.*` outputs) are accepted too: each `concat` becomes the
/// in-place `kv_write` of the new entries (keeping its output's place and
/// name), the `past_key_values` inputs give way to the static caches, the
/// value of the `past` symbol (the exporter's position offset) becomes
/// `%cache_pos`, and ranges are not shifted again. A graph must use one
/// form for all its layers.
///
/// Requires: a verified graph whose attention is fused (`eqsat-fuse`) with
/// static head counts. Guarantees: a graph that verifies; run with
/// `%cache_pos = 0` and zeroed caches, its first outputs equal the
/// original's, for steps of at most `max-chunk` tokens. Fails, naming the
/// node, on attention with a mask operand or without the causal rule, or
/// when no attention is fused. The memory planner keeps
/// each `past`/`present` pair in one place of the `kv_cache` region (the
/// write is in place), so a runtime carries the cache across steps without
/// copying. Statistics: `graphs-cached`, `layers-cached`,
/// `positions-shifted`.
pub struct KvCache {
    options: KvCacheOptions,
}

/// The options of `kv-cache`, typed (what the driver's `--max-context`,
/// `--kv-window`, `--kv-sinks`, `--kv-dtype` and buckets build;
/// [`KvCacheOptions::entry`] renders the pipeline text).
#[derive(Clone, Debug, PartialEq)]
pub struct KvCacheOptions {
    /// Cache slots per layer without a window.
    pub max_context: i64,
    /// The most tokens one step feeds (0: `max_context`).
    pub max_chunk: i64,
    /// StreamingLLM: the last `window` tokens (0: none) and the first
    /// `sinks` kept.
    pub window: i64,
    pub sinks: i64,
    /// `f32` or `f16`.
    pub dtype: DType,
    pub symbol: String,
}

impl Default for KvCacheOptions {
    fn default() -> KvCacheOptions {
        KvCacheOptions {
            max_context: 1024,
            max_chunk: 0,
            window: 0,
            sinks: 0,
            dtype: DType::F32,
            symbol: "seq".to_string(),
        }
    }
}

impl KvCacheOptions {
    /// Reads the declared [`OPTIONS`]; fails when they do not go together
    /// (sinks without a window).
    pub fn from_options(o: &PassOptions) -> Result<KvCacheOptions, String> {
        let opts = KvCacheOptions {
            max_context: o.int("max-context"),
            max_chunk: o.int("max-chunk"),
            window: o.int("window"),
            sinks: o.int("sinks"),
            dtype: match o.str("dtype") {
                "f16" => DType::F16,
                "i8" => DType::I8,
                _ => DType::F32,
            },
            symbol: o.str("symbol").to_string(),
        };
        opts.check()?;
        Ok(opts)
    }

    /// Checks what the declarations cannot: sinks need a window.
    pub fn check(&self) -> Result<(), String> {
        if self.sinks > 0 && self.window == 0 {
            return Err(format!(
                "pass `kv-cache`: sinks = {} needs a window > 0",
                self.sinks
            ));
        }
        if !matches!(self.dtype, DType::F32 | DType::F16 | DType::I8) {
            return Err(format!(
                "pass `kv-cache`: dtype {} is not f32, f16 or i8",
                self.dtype
            ));
        }
        Ok(())
    }

    /// The pipeline entry, options at their default left out.
    pub fn entry(&self) -> String {
        let values = [
            ("max-context", self.max_context.to_string()),
            ("max-chunk", self.max_chunk.to_string()),
            ("window", self.window.to_string()),
            ("sinks", self.sinks.to_string()),
            ("dtype", self.dtype.to_string()),
            ("symbol", self.symbol.clone()),
        ];
        crate::options::render_entry("kv-cache", OPTIONS, &values)
    }

    /// The StreamingLLM layout of the layers without their own window.
    fn layout(&self) -> KvLayout {
        KvLayout {
            sinks: self.sinks,
            window: self.window,
            span: 0,
        }
    }

    /// Slots per layer without a window of the model's own.
    fn capacity(&self) -> i64 {
        if self.window > 0 {
            self.sinks + self.window
        } else {
            self.max_context
        }
    }

    /// The capacity and layout of a layer whose attention has the model's
    /// own sliding `window` (0: none), given the capacity of the others.
    /// A windowed layer keeps a ring of `window + max-chunk - 1` slots
    /// (every key a step of up to `max-chunk` tokens needs survives its own
    /// writes) when that is smaller than the other layers' cache.
    fn layer(&self, window: i64, capacity: i64) -> (i64, KvLayout) {
        if window == 0 {
            return (capacity, self.layout());
        }
        let chunk = if self.max_chunk > 0 {
            self.max_chunk
        } else {
            self.max_context
        };
        let ring = window + chunk - 1;
        if ring < capacity {
            let layout = KvLayout {
                sinks: 0,
                window: ring,
                span: window,
            };
            (ring, layout)
        } else {
            let layout = KvLayout {
                span: window,
                ..self.layout()
            };
            (capacity, layout)
        }
    }
}

impl KvCache {
    pub fn from_options(o: &PassOptions) -> Result<KvCache, String> {
        Ok(KvCache {
            options: KvCacheOptions::from_options(o)?,
        })
    }
}

impl Pass for KvCache {
    fn name(&self) -> &'static str {
        "kv-cache"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let capacity = self.options.capacity();
        let dtype = self.options.dtype;
        let mut changed = false;
        for g in &mut module.graphs {
            if !g.nodes.iter().any(|n| matches!(n.op, Op::Attention(_))) {
                continue;
            }
            let layers = rewrite_graph(g, &self.options, capacity, dtype)?;
            stats.add("graphs-cached", 1);
            stats.add("layers-cached", layers.attentions as u64);
            stats.add("positions-shifted", layers.ranges as u64);
            changed = true;
        }
        if !changed {
            return Err(failed(
                "kv-cache",
                "no graph has a fused `attention` (run eqsat-fuse first)",
            ));
        }
        Ok(true)
    }
}

struct Rewritten {
    attentions: usize,
    ranges: usize,
}

fn rewrite_graph(
    g: &mut Graph,
    opts: &KvCacheOptions,
    capacity: i64,
    dtype: DType,
) -> Result<Rewritten, PassError> {
    let at = |g: &Graph, node: &Node, msg: &str| {
        let name = node
            .outputs
            .first()
            .map(|&v| g.value(v).name.clone())
            .unwrap_or_default();
        failed(
            "kv-cache",
            format!("graph @{}, node %{name}: {msg}", g.name),
        )
    };
    let seq = Dim::sym(&opts.symbol);
    let pos_ty = TensorType::scalar(DType::I64);
    let pos = g
        .add_input(POSITION_INPUT, pos_ty)
        .map_err(|e| failed("kv-cache", format!("graph @{}: {e}", g.name)))?;
    let old_nodes = std::mem::take(&mut g.nodes);
    let mut shifted: Vec<(ValueId, ValueId)> = Vec::new();
    let mut presents = Vec::new();
    let mut attentions = 0;
    let mut exported_form = false;
    let mut exported_caches: Vec<(PastConcat, ValueId)> = Vec::new();
    for mut node in old_nodes {
        // Operands produced by a shifted range read the shifted one.
        for v in &mut node.inputs {
            if let Some(&(_, new)) = shifted.iter().find(|(old, _)| old == v) {
                *v = new;
            }
        }
        match node.op.clone() {
            Op::Range(_) if is_position_range(g, &node, &seq) => {
                let r = node.outputs[0];
                let ty = g.ty(r).clone();
                g.nodes.push(node);
                let name = g.fresh_name(&format!("{}_at_cache_pos", g.value(r).name));
                let out = add1(g, Binary::new(BinaryKind::Add), vec![r, pos], name, ty)?;
                shifted.push((r, out));
            }
            Op::Attention(a) => {
                if node.inputs.len() > 3 {
                    return Err(at(
                        g,
                        &node,
                        "attention with a mask operand cannot be cached (only causal attention)",
                    ));
                }
                if !a.causal {
                    return Err(at(
                        g,
                        &node,
                        "only causal attention can be cached (this one attends to later keys)",
                    ));
                }
                let (capacity, layout) = opts.layer(a.window, capacity);
                let l = attentions;
                attentions += 1;
                let (mut k, mut v) = (node.inputs[1], node.inputs[2]);
                let exported = (past_concat(g, k), past_concat(g, v));
                let replaced = match exported {
                    (Some(pk), Some(pv)) => {
                        k = pk.new;
                        v = pv.new;
                        Some((pk, pv))
                    }
                    (None, None) => None,
                    _ => {
                        return Err(at(
                            g,
                            &node,
                            "keys and values must both, or neither, come from past_key_values",
                        ))
                    }
                };
                if l > 0 && replaced.is_some() != exported_form {
                    return Err(at(g, &node, "layers mix exported and derived caches"));
                }
                exported_form = replaced.is_some();
                if let Some((pk, pv)) = &replaced {
                    // The concat results give up their names to the writes.
                    for c in [pk.concat, pv.concat] {
                        let fresh = g.fresh_name(&format!("{}.replaced", g.value(c).name));
                        g.rename(c, fresh)
                            .map_err(|e| failed("kv-cache", format!("graph @{}: {e}", g.name)))?;
                    }
                }
                let dtype = match (g.ty(k).dtype, dtype) {
                    (DType::F16, DType::F32) => DType::F16,
                    _ => dtype,
                };
                let kc = write_cache(g, l, "key", k, pos, capacity, dtype, layout)?;
                let vc = write_cache(g, l, "value", v, pos, capacity, dtype, layout)?;
                match &replaced {
                    Some((pk, pv)) => {
                        exported_caches.push((pk.clone(), kc));
                        exported_caches.push((pv.clone(), vc));
                    }
                    None => presents.extend([kc, vc]),
                }
                let mask_ty = TensorType::new(
                    DType::Bool,
                    Shape(vec![
                        Dim::fixed(1),
                        Dim::fixed(1),
                        g.ty(k).shape.dims()[2].clone(),
                        Dim::fixed(capacity),
                    ]),
                );
                let name = g.fresh_name(&format!("kv_mask.{l}"));
                let mask = add1(g, KvMask { layout }, vec![kc, k, pos], name, mask_ty)?;
                node.op = Op::Attention(Attention {
                    causal: false,
                    window: 0,
                    ..a
                });
                node.inputs = vec![node.inputs[0], kc, vc, mask];
                g.nodes.push(node);
            }
            _ => g.nodes.push(node),
        }
    }
    if exported_form {
        undo_shifts(g, &shifted);
        shifted.clear();
        replace_exported_caches(g, &exported_caches, pos)?;
    }
    for (old, new) in &shifted {
        for o in &mut g.outputs {
            if o == old {
                *o = *new;
            }
        }
    }
    g.outputs.extend(presents);
    Ok(Rewritten {
        attentions,
        ranges: shifted.len(),
    })
}

/// An exported cache: `concat(%past, %new)` along the sequence axis, with
/// `%past` a graph input whose length is one symbol.
#[derive(Clone, Debug)]
struct PastConcat {
    concat: ValueId,
    past: ValueId,
    new: ValueId,
    symbol: String,
}

fn past_concat(g: &Graph, v: ValueId) -> Option<PastConcat> {
    let node = g.nodes.iter().find(|n| n.outputs.contains(&v))?;
    let Op::Concat(c) = &node.op else { return None };
    if !(c.axis == 2 || c.axis == -2) || node.inputs.len() != 2 {
        return None;
    }
    let (past, new) = (node.inputs[0], node.inputs[1]);
    if !g.inputs.contains(&past) {
        return None;
    }
    let len = g.ty(past).shape.dims().get(2)?;
    let symbol = match len.symbols()[..] {
        [s] if *len == Dim::sym(s) => s.to_string(),
        _ => return None,
    };
    Some(PastConcat {
        concat: v,
        past,
        new,
        symbol,
    })
}

/// Puts the position ranges back as they were (the exported form offsets
/// positions by `past` itself): the shifting `add`s are dropped.
fn undo_shifts(g: &mut Graph, shifted: &[(ValueId, ValueId)]) {
    for (old, new) in shifted {
        g.replace_all_uses(*new, *old);
    }
    let added: Vec<ValueId> = shifted.iter().map(|(_, n)| *n).collect();
    g.nodes
        .retain(|n| !n.outputs.iter().any(|o| added.contains(o)));
}

/// Replaces each exported `concat` by its `kv_write` (uses and output place),
/// drops the concats, the `past_key_values` inputs and the constants that
/// held the `past` symbol's value (their uses read `%cache_pos`). Fails if
/// `past` is still used anywhere else.
fn replace_exported_caches(
    g: &mut Graph,
    caches: &[(PastConcat, ValueId)],
    pos: ValueId,
) -> Result<(), PassError> {
    let mut symbols: Vec<&str> = caches.iter().map(|(p, _)| p.symbol.as_str()).collect();
    symbols.dedup();
    if symbols.len() != 1 {
        return Err(failed(
            "kv-cache",
            format!(
                "graph @{}: the past caches differ in length symbols {symbols:?}",
                g.name
            ),
        ));
    }
    let past = Dim::sym(symbols[0]);
    for (p, write) in caches {
        g.replace_all_uses(p.concat, *write);
    }
    let concats: Vec<ValueId> = caches.iter().map(|(p, _)| p.concat).collect();
    let pasts: Vec<ValueId> = caches.iter().map(|(p, _)| p.past).collect();
    let mut offsets = Vec::new();
    for node in &g.nodes {
        if let Op::Constant(c) = &node.op {
            if c.value
                .as_dims()
                .is_some_and(|d| d.values == [past.clone()])
                && c.ty.rank() == 0
            {
                offsets.push(node.outputs[0]);
            }
        }
    }
    for &o in &offsets {
        g.replace_all_uses(o, pos);
    }
    g.nodes.retain(|n| {
        !n.outputs
            .iter()
            .any(|o| concats.contains(o) || offsets.contains(o))
    });
    g.inputs.retain(|i| !pasts.contains(i));
    g.compact();
    let name = &symbols[0];
    for node in &g.nodes {
        for &o in &node.outputs {
            if g.ty(o)
                .shape
                .dims()
                .iter()
                .any(|d| d.symbols().contains(name))
            {
                return Err(failed(
                    "kv-cache",
                    format!(
                        "graph @{}: %{} still depends on the past length `{name}`",
                        g.name,
                        g.value(o).name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A `range` whose result is the positions `0 ..` of the sequence: rank 1,
/// integer, of length `seq`.
fn is_position_range(g: &Graph, node: &Node, seq: &Dim) -> bool {
    let ty = g.ty(node.outputs[0]);
    ty.dtype.is_int() && ty.rank() == 1 && &ty.shape.dims()[0] == seq
}

/// Adds a one-result node.
fn add1(
    g: &mut Graph,
    op: impl Into<Op>,
    inputs: Vec<ValueId>,
    name: String,
    ty: TensorType,
) -> Result<ValueId, PassError> {
    let graph = g.name.clone();
    Ok(g.add_node(op, inputs, vec![(name, ty)])
        .map_err(|e| failed("kv-cache", format!("graph @{graph}: {e}")))?[0])
}

/// Adds `%past.l.which`, and the `kv_write` of `new` into it named
/// `%present.l.which`; returns the written cache.
#[allow(clippy::too_many_arguments)]
fn write_cache(
    g: &mut Graph,
    l: usize,
    which: &str,
    new: ValueId,
    pos: ValueId,
    capacity: i64,
    dtype: DType,
    layout: KvLayout,
) -> Result<ValueId, PassError> {
    let nd = g.ty(new).shape.dims().to_vec();
    if nd.len() != 4 || nd[1].as_fixed().is_none() || nd[3].as_fixed().is_none() {
        return Err(failed(
            "kv-cache",
            format!(
                "graph @{}: attention {which}s {} need static heads and head dim",
                g.name,
                g.ty(new)
            ),
        ));
    }
    // A q8 row holds the row's scale after its values.
    let row = match dtype {
        DType::I8 => &nd[3] + &Dim::fixed(Q8_SCALE_BYTES as i64),
        _ => nd[3].clone(),
    };
    let ty = TensorType::new(
        dtype,
        Shape(vec![
            nd[0].clone(),
            nd[1].clone(),
            Dim::fixed(capacity),
            row,
        ]),
    );
    let (past, present) = cache_names(l, which);
    let graph = g.name.clone();
    let cache = g
        .add_input(past, ty.clone())
        .map_err(|e| failed("kv-cache", format!("graph @{graph}: {e}")))?;
    add1(g, KvWrite { layout }, vec![cache, new, pos], present, ty)
}
