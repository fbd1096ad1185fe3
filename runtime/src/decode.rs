//! Token-by-token decoding over a static KV cache.
//!
//! A [`Decoder`] runs a graph that the `kv-cache` pass made: inputs
//! `input_ids [1, seq]`, `cache_pos []` and the caches `past.L.key/value`;
//! outputs `logits [1, seq, vocab]` first, then `present.L.key/value`. Each
//! [`Decoder::step`] feeds new tokens at the current position and returns
//! the logits of the last one; the position then advances. A graph that
//! the `last-logits` pass rewrote takes the input `logits_row [1]` too (the
//! row of the chunk's last token, which the decoder sets) and gives
//! `logits [1, 1, vocab]`.
//!
//! Two engines:
//!
//! - **reference**: the interpreter over the symbolic graph, the caches
//!   carried from `present` to `past` as tensors (allocates per step; the
//!   numeric reference);
//! - **planned**: one [`Executor`] per bucket graph (`bucket-specialize`
//!   with a bucket of 1 for decode, larger ones for prefill; `plan-memory`
//!   placed every cache in the `kv_cache` region, written in place), all
//!   sharing one weights region and one KV cache region, so a prefill
//!   bucket writes the cache the decode graph reads, with no copy and no
//!   allocation per step.
//!
//! Chunking: a chunk of `n` tokens at position `p` runs in one bucket only
//! if every layer's cache takes it: `p + bucket <= capacity` (the bucket's
//! padding is written to the cache too, and must neither wrap a
//! StreamingLLM ring nor overflow the context), and for a layer whose ring
//! is sized for the model's sliding window `w`, `bucket <= capacity - w +
//! 1` (no key a query of the chunk needs is overwritten by the chunk's own
//! writes); otherwise the planned engine takes the largest bucket that
//! fits and, with a StreamingLLM window, falls back to one token at a time
//! (the ring wraps safely with no padding). Without a window, a step past
//! the capacity fails: the context is full.

use slmcc_ir::ops::kv_cache::KvLayout;
use slmcc_ir::{DType, Graph, Module, Op, Tensor};

use crate::exec::{ExecError, Executor, KernelSet};
use crate::interp::run_graph;
use crate::Capture;

/// The input that takes the new tokens.
pub const INPUT_IDS: &str = "input_ids";
/// The input that takes the position of the step's first token (the
/// `kv-cache` pass's name).
pub const CACHE_POS: &str = "cache_pos";

/// A decoding failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Graph(String),
    #[error("the context is full: {capacity} cache slots hold positions 0..{capacity}, position {pos} asked (use a larger max context, or a window)")]
    ContextFull { capacity: i64, pos: i64 },
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("{0}")]
    Run(String),
}

/// One layer's cache, read off its `kv_write`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerCache {
    /// Slots.
    pub capacity: i64,
    pub layout: KvLayout,
}

impl LayerCache {
    /// A ring sized for the model's sliding window (`span`), which stays
    /// exact for steps of up to `capacity - span + 1` tokens at any position.
    fn is_span_ring(&self) -> bool {
        let l = &self.layout;
        l.window > 0 && l.span > 0 && l.sinks == 0
    }

    /// Whether a chunk of `n` tokens (padding included) may run at `pos`:
    /// it must neither overflow the context nor, in a ring, overwrite a
    /// key a query of the chunk needs or (StreamingLLM ring) wrap with
    /// padding.
    fn fits(&self, pos: i64, n: usize) -> bool {
        if self.is_span_ring() {
            n as i64 <= self.capacity - self.layout.span + 1
        } else {
            pos + n as i64 <= self.capacity
        }
    }

    /// Whether one token may always run (any ring).
    fn rings(&self) -> bool {
        self.layout.window > 0
    }
}

/// What the caches of a graph look like: one entry per `kv_write`. Layers
/// may differ (Gemma 2's sliding-window layers keep a ring, its global
/// layers the whole context).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheShape {
    pub layers: Vec<LayerCache>,
}

impl CacheShape {
    /// The caches of `g`; fails if it has no `kv_write`.
    pub fn of(g: &Graph) -> Result<CacheShape, DecodeError> {
        let mut layers = Vec::new();
        for node in &g.nodes {
            let Op::KvWrite(w) = &node.op else { continue };
            let dims = g.ty(node.inputs[0]).shape.as_fixed().unwrap_or_default();
            let Some(&capacity) = dims.get(2) else {
                return Err(DecodeError::Graph(format!(
                    "graph @{}: a kv_write cache has no static capacity",
                    g.name
                )));
            };
            layers.push(LayerCache {
                capacity: capacity as i64,
                layout: w.layout,
            });
        }
        if layers.is_empty() {
            return Err(DecodeError::Graph(format!(
                "graph @{} has no KV cache (run the kv-cache pass)",
                g.name
            )));
        }
        Ok(CacheShape { layers })
    }

    /// Whether a chunk of `n` tokens (padding included) may run at `pos`.
    fn fits(&self, pos: i64, n: usize) -> bool {
        self.layers.iter().all(|l| l.fits(pos, n))
    }

    /// Whether a single token may run at `pos`: every layer either has
    /// room or is a ring.
    fn one_fits(&self, pos: i64) -> bool {
        self.layers.iter().all(|l| l.fits(pos, 1) || l.rings())
    }

    /// The smallest capacity of a layer that is not a ring (for messages).
    fn context(&self) -> i64 {
        self.layers
            .iter()
            .filter(|l| !l.rings())
            .map(|l| l.capacity)
            .min()
            .unwrap_or_else(|| self.layers.iter().map(|l| l.capacity).min().unwrap_or(0))
    }
}

/// Gives the kernels of one bucket graph (see [`Decoder::planned`]).
pub type KernelsFor<'a> = dyn Fn(&Graph) -> Result<Box<dyn KernelSet>, DecodeError> + 'a;

/// The bucket graphs of `module` as [`Decoder::planned`] takes them
/// (name, size); fails unless one is bucket 1, the decode graph (compile
/// with `--kv-cache`).
pub fn bucket_graphs(module: &Module) -> Result<Vec<(String, usize)>, DecodeError> {
    let graphs: Vec<(String, usize)> = module
        .buckets
        .iter()
        .map(|(g, b)| (g.clone(), b.size as usize))
        .collect();
    if !graphs.iter().any(|(_, size)| *size == 1) {
        return Err(DecodeError::Graph(
            "no decode graph (bucket 1): compile with --kv-cache".into(),
        ));
    }
    Ok(graphs)
}

/// One bucket graph of the planned engine.
struct Bucket {
    size: usize,
    exec: Executor,
    ids: usize,
    pos: usize,
    /// The `logits_row` input, when the graph computes one row of logits.
    row: Option<usize>,
}

/// The optional input naming the row of logits a step computes.
pub const LOGITS_ROW: &str = "logits_row";

enum Engine {
    Reference {
        module: Module,
        graph: String,
        /// `past.*` inputs in graph-input order, with their current values.
        caches: Vec<(String, Tensor)>,
    },
    Planned {
        /// Smallest first.
        buckets: Vec<Bucket>,
    },
}

/// A decoding session (see the module doc).
pub struct Decoder {
    engine: Engine,
    cache: CacheShape,
    pos: i64,
    vocab: usize,
    /// The dtype the graphs write their logits in.
    logits_dtype: DType,
    logits: Vec<f32>,
}

fn input_index(g: &Graph, name: &str) -> Result<usize, DecodeError> {
    g.inputs
        .iter()
        .position(|&v| g.value(v).name == name)
        .ok_or_else(|| DecodeError::Graph(format!("graph @{} has no input %{name}", g.name)))
}

/// The vocabulary size, the last dim of the first output (`logits`), and
/// the logits' dtype (`f32`, or `f16`/`bf16` from a half-precision model).
fn vocab_of(g: &Graph) -> Result<(usize, DType), DecodeError> {
    let ty = g
        .outputs
        .first()
        .map(|&v| g.ty(v))
        .ok_or_else(|| DecodeError::Graph(format!("graph @{} has no outputs", g.name)))?;
    match (ty.dtype, ty.shape.dims().last().and_then(|d| d.as_fixed())) {
        (d, Some(v)) if ty.rank() == 3 && d.is_float() => Ok((v as usize, d)),
        _ => Err(DecodeError::Graph(format!(
            "graph @{}: the first output must be float logits [1, seq, vocab], got {ty}",
            g.name
        ))),
    }
}

/// Little-endian logits of `dtype` (a float type) into `out`, as `f32`.
fn read_logits(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let n = dtype.bytes_for(1);
    for (dst, src) in out.iter_mut().zip(bytes.chunks_exact(n)) {
        *dst = match dtype {
            DType::F16 => half::f16::from_le_bytes([src[0], src[1]]).to_f32(),
            DType::BF16 => half::bf16::from_le_bytes([src[0], src[1]]).to_f32(),
            _ => f32::from_le_bytes(src.try_into().expect("4 bytes")),
        };
    }
}

impl Decoder {
    /// The reference engine over graph `graph` of `module` (symbolic `seq`).
    pub fn reference(module: Module, graph: &str) -> Result<Decoder, DecodeError> {
        let g = module
            .graph(graph)
            .ok_or_else(|| DecodeError::Graph(format!("no graph @{graph}")))?;
        let cache = CacheShape::of(g)?;
        input_index(g, INPUT_IDS)?;
        input_index(g, CACHE_POS)?;
        let (vocab, logits_dtype) = vocab_of(g)?;
        let mut caches = Vec::new();
        for &v in &g.inputs {
            let val = g.value(v);
            if val.name.starts_with("past.") {
                let dims = val.ty.shape.as_fixed().ok_or_else(|| {
                    DecodeError::Graph(format!("cache %{} is not static: {}", val.name, val.ty))
                })?;
                caches.push((val.name.clone(), Tensor::zeros(val.ty.dtype, dims)));
            }
        }
        let outputs: Vec<&str> = g
            .outputs
            .iter()
            .map(|&v| g.value(v).name.as_str())
            .collect();
        for (name, _) in &caches {
            let present = format!("present.{}", &name["past.".len()..]);
            if !outputs.contains(&present.as_str()) {
                return Err(DecodeError::Graph(format!(
                    "graph @{graph}: cache input %{name} has no output %{present}"
                )));
            }
        }
        Ok(Decoder {
            engine: Engine::Reference {
                graph: graph.to_string(),
                module,
                caches,
            },
            cache,
            pos: 0,
            vocab,
            logits_dtype,
            logits: vec![0.0; vocab],
        })
    }

    /// The planned engine over the bucket graphs `graphs` of `module`
    /// (planned; `kernels` gives each graph's kernels). One of them should
    /// have bucket size 1 (decode).
    pub fn planned(
        module: &Module,
        graphs: &[(String, usize)],
        kernels: &KernelsFor<'_>,
    ) -> Result<Decoder, DecodeError> {
        let mut sorted = graphs.to_vec();
        sorted.sort_by_key(|(_, size)| *size);
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut shape: Option<(CacheShape, (usize, DType))> = None;
        for (name, size) in sorted {
            let g = module
                .graph(&name)
                .ok_or_else(|| DecodeError::Graph(format!("no graph @{name}")))?;
            let this = (CacheShape::of(g)?, vocab_of(g)?);
            if shape.as_ref().is_some_and(|s| *s != this) {
                return Err(DecodeError::Graph(format!(
                    "graph @{name}: its cache or vocabulary differs from the other buckets'"
                )));
            }
            shape = Some(this);
            let ks = kernels(g)?;
            let exec = Executor::load_sharing(
                module,
                &name,
                ks.as_ref(),
                buckets.first().map(|b| &b.exec),
            )?;
            buckets.push(Bucket {
                size,
                exec,
                ids: input_index(g, INPUT_IDS)?,
                pos: input_index(g, CACHE_POS)?,
                row: input_index(g, LOGITS_ROW).ok(),
            });
        }
        let Some((cache, (vocab, logits_dtype))) = shape else {
            return Err(DecodeError::Graph("no bucket graphs to decode with".into()));
        };
        Ok(Decoder {
            engine: Engine::Planned { buckets },
            cache,
            pos: 0,
            vocab,
            logits_dtype,
            logits: vec![0.0; vocab],
        })
    }

    /// The position the next token takes (tokens seen so far).
    pub fn position(&self) -> i64 {
        self.pos
    }

    pub fn cache(&self) -> &CacheShape {
        &self.cache
    }

    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Forgets the context: the next step starts at position 0.
    pub fn reset(&mut self) {
        self.pos = 0;
        if let Engine::Reference { caches, .. } = &mut self.engine {
            for (_, t) in caches.iter_mut() {
                *t = Tensor::zeros(t.dtype(), t.shape().to_vec());
            }
        }
    }

    /// Feeds `ids` (at least one) and returns the logits of the last.
    pub fn step(&mut self, ids: &[i64]) -> Result<&[f32], DecodeError> {
        if ids.is_empty() {
            return Err(DecodeError::Run("a step needs at least one token".into()));
        }
        let mut rest = ids;
        while !rest.is_empty() {
            let n = self.chunk_len(rest.len())?;
            self.run_chunk(&rest[..n])?;
            rest = &rest[n..];
        }
        Ok(&self.logits)
    }

    /// How many of `want` tokens the next chunk takes.
    fn chunk_len(&self, want: usize) -> Result<usize, DecodeError> {
        let (pos, cache) = (self.pos, &self.cache);
        let full = DecodeError::ContextFull {
            capacity: cache.context(),
            pos: pos + want as i64 - 1,
        };
        match &self.engine {
            Engine::Reference { .. } => match (1..=want).rev().find(|&n| cache.fits(pos, n)) {
                Some(n) => Ok(n),
                None if cache.one_fits(pos) => Ok(1),
                None => Err(full),
            },
            Engine::Planned { buckets } => {
                let fits =
                    |b: &&Bucket| cache.fits(pos, b.size) || (b.size == 1 && cache.one_fits(pos));
                let mut usable = buckets.iter().filter(fits);
                if usable.clone().any(|b| b.size >= want) {
                    return Ok(want);
                }
                match usable.next_back() {
                    Some(b) => Ok(b.size.min(want)),
                    None => Err(full),
                }
            }
        }
    }

    fn run_chunk(&mut self, ids: &[i64]) -> Result<(), DecodeError> {
        let pos = self.pos;
        let vocab = self.vocab;
        match &mut self.engine {
            Engine::Reference {
                module,
                graph,
                caches,
            } => {
                let g = module.graph(graph).expect("checked at construction");
                let last = ids.len() as i64 - 1;
                let one_row = input_index(g, LOGITS_ROW).is_ok();
                let mut inputs = vec![
                    (
                        INPUT_IDS.to_string(),
                        Tensor::from_i64(vec![1, ids.len()], ids.to_vec()),
                    ),
                    (CACHE_POS.to_string(), Tensor::scalar_i64(pos)),
                ];
                if one_row {
                    inputs.push((
                        LOGITS_ROW.to_string(),
                        Tensor::from_i64(vec![1], vec![last]),
                    ));
                }
                inputs.extend(caches.iter().cloned());
                let out = run_graph(module, g, &inputs, &Capture::Nothing)
                    .map_err(|e| DecodeError::Run(e.to_string()))?;
                let mut outputs = out.outputs.into_iter();
                let (_, logits) = outputs
                    .next()
                    .ok_or_else(|| DecodeError::Run("no logits".into()))?;
                let l = logits.to_f32_vec();
                let row = if one_row { 0 } else { last as usize };
                self.logits.copy_from_slice(&l[row * vocab..][..vocab]);
                // `present.X` is the cache `past.X` after the step.
                for (name, present) in outputs {
                    let Some(past) = name.strip_prefix("present.") else {
                        continue;
                    };
                    if let Some((_, c)) = caches
                        .iter_mut()
                        .find(|(n, _)| n.strip_prefix("past.") == Some(past))
                    {
                        *c = std::sync::Arc::unwrap_or_clone(present);
                    }
                }
            }
            Engine::Planned { buckets } => {
                let b = buckets
                    .iter_mut()
                    .find(|b| b.size >= ids.len())
                    .expect("chunk_len picked a bucket that holds the chunk");
                let slot = b.exec.input_mut(b.ids);
                slot.fill(0);
                for (dst, id) in slot.chunks_exact_mut(8).zip(ids) {
                    dst.copy_from_slice(&id.to_le_bytes());
                }
                b.exec.input_mut(b.pos).copy_from_slice(&pos.to_le_bytes());
                let last = ids.len() - 1;
                if let Some(r) = b.row {
                    b.exec
                        .input_mut(r)
                        .copy_from_slice(&(last as i64).to_le_bytes());
                }
                b.exec.run()?;
                let at = if b.row.is_some() { 0 } else { last };
                let width = self.logits_dtype.bytes_for(vocab);
                let row = &b.exec.output(0)[at * width..][..width];
                read_logits(self.logits_dtype, row, &mut self.logits);
            }
        }
        self.pos += ids.len() as i64;
        Ok(())
    }
}
