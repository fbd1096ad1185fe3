//! The NPU lowering: the W8A8 products that the placement
//! ([`slmcc_ir::placement::place`]) puts on the NPU become register-command
//! tasks, and their weights are stored once, at compile time, in the
//! NPU's own layout, so that a board loads them as they are.
//!
//! Contract:
//!
//! - [`store_weights`] gives every weight of an NPU product a K block:
//!   among the multiples of 32 that divide its group, the one whose tile
//!   plans ([`TilePlan::with_k_block`]) take the least estimated time,
//!   summed over the rows of every graph that reads the weight (one per
//!   bucket; a one-row decode graph counts as often as the largest rows). It permutes
//!   the weight into [`QLayout::Rk3588`] and marks every product that
//!   reads it so. It returns, per weight, the K block and the column sums
//!   per group (`Σ q`, the factor of the zero-point correction), which
//!   the runtime would otherwise compute at load. What every graph
//!   computes stays the same bit for bit: the layout only moves elements
//!   and every kernel reads through it. Shapes and sizes do not change,
//!   so memory plans stay valid. A weight already stored keeps its K
//!   block, so storing twice changes nothing.
//! - [`lower_graph`] gives each NPU product of a bucket graph its
//!   [`ProductProgram`]. The graph must have static shapes and weights
//!   stored as above. A program holds the tile plan, the feature cubes
//!   that the CPU packs the quantized rows into, and each task's command
//!   list, whose three addresses are offsets into the task's buffers:
//!   features, the operand's weights and outputs. A loader relocates them
//!   ([`MatmulTask::relocate`]). On each core the tasks run operand by
//!   operand, in the plan's weight-stationary order.
//! - The results are protobuf messages (`prost`): an rk3588 package's
//!   manifest stores them as they are (their tags are part of its
//!   schema: fields only ever added under new tags).
//! - [`ProductProgram::check`] is what a loader runs on a stored program
//!   before trusting it. Every command list must decode to the matmul
//!   task its entry describes, and every cube, task and address must lie
//!   inside the node's shapes and the program's buffers. So the CPU's part
//!   (packing the features, adding up the partial sums) can index by the
//!   entries without further checks.

use std::collections::{BTreeMap, BTreeSet};

use slmcc_ir::ops::qlayout::QLayout;
use slmcc_ir::placement::{place, Device, Placement};
use slmcc_ir::{DType, Graph, Module, Op, OpDef, Tensor, TensorData, ValueDef};

use super::regcmd::tiling::{Tile, TilePlan};
use super::regcmd::{decode_buffer, encode_buffer, MatmulPrecision, MatmulTask, WORD_BYTES};
use super::Target;

/// NPU cores the tasks are spread over.
pub const CORES: u32 = 3;

/// Why a module or graph cannot be lowered, naming the weight or node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LowerError(pub String);

fn fail(message: impl Into<String>) -> LowerError {
    LowerError(message.into())
}

/// A weight stored in the NPU's layout, and what the runtime needs of it
/// besides its bytes.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct NpuWeight {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub k_block: u32,
    #[prost(uint32, tag = "3")]
    pub k: u32,
    #[prost(uint32, tag = "4")]
    pub n: u32,
    #[prost(uint32, tag = "5")]
    pub group: u32,
    /// `Σ q` per group and column, `[K / group][N]`.
    #[prost(sint32, repeated, tag = "6")]
    pub column_sums: Vec<i32>,
}

/// One quantized product node's facts, read off its types.
struct Product {
    rows: u32,
    k: u32,
    group: u32,
    layout: QLayout,
    /// The `q` operands' weight names and column counts.
    weights: Vec<(String, u32)>,
    swiglu: bool,
}

fn product(g: &Graph, node: usize) -> Result<Product, String> {
    let n = &g.nodes[node];
    let (group, layout, swiglu) = match &n.op {
        Op::QMatMul(op) => (op.group, op.layout, false),
        Op::QSwiGlu(op) => (op.group, op.layout, true),
        _ => return Err(format!("`{}` is not a quantized product", n.op.mnemonic())),
    };
    let x = g
        .ty(n.inputs[0])
        .shape
        .as_fixed()
        .ok_or("activations of symbolic shape")?;
    let (&k, lead) = x.split_last().ok_or("rank-0 activations")?;
    let rows: usize = lead.iter().product();
    let mut weights = Vec::new();
    for &q in n.inputs[1..].iter().step_by(2) {
        let ValueDef::Weight(name) = &g.value(q).def else {
            return Err("quantized weights computed at run time".into());
        };
        let cols = match g.ty(q).shape.as_fixed().as_deref() {
            Some(&[wk, wn]) if wk == k => wn,
            _ => return Err(format!("weight @{name} is not [{k}, N]")),
        };
        weights.push((name.clone(), small(cols, "N")?));
    }
    Ok(Product {
        rows: small(rows, "rows")?,
        k: small(k, "K")?,
        group: u32::try_from(group).map_err(|_| format!("group {group}"))?,
        layout,
        weights,
        swiglu,
    })
}

fn small(v: usize, what: &str) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{what} = {v} does not fit the NPU's 32-bit fields"))
}

/// Nodes the placement puts on the NPU, per graph.
fn npu_nodes(g: &Graph) -> impl Iterator<Item = usize> + '_ {
    place(g)
        .into_iter()
        .enumerate()
        .filter(|(_, p)| p.device == Device::Npu)
        .map(|(i, _)| i)
}

/// The K block of `(k, n, group)` whose plans take the least estimated
/// time over `rows` (the rows of each graph that reads the weight), a
/// one-row graph (decode) counting as many times as the largest rows: a
/// reply as long as the longest prompt. Only K blocks whose buffers stay
/// within the NPU's 32-bit addresses count.
fn choose_k_block(k: u32, n: u32, group: u32, rows: &BTreeSet<u32>) -> Option<u32> {
    let target = Target::rk3588();
    let longest = rows.last().copied().unwrap_or(1);
    let mut best: Option<(f64, u32)> = None;
    for kt in (32..=group)
        .step_by(32)
        .filter(|kt| group.is_multiple_of(*kt))
    {
        let seconds: Option<f64> = rows
            .iter()
            .map(|&m| {
                // The outputs buffer (partial sums of every K block, for
                // up to two operands) must stay within 32-bit addresses.
                let outputs = u64::from(m) * u64::from(n) * 4 * u64::from(k / kt) * 2;
                if outputs > u64::from(u32::MAX) {
                    return None;
                }
                let plan = TilePlan::with_k_block(MatmulPrecision::Int8, (m, k, n), kt, CORES)?;
                let times = if m == 1 { f64::from(longest) } else { 1.0 };
                Some(times * plan.estimate(&target).seconds)
            })
            .sum();
        if let Some(s) = seconds {
            if best.is_none_or(|(b, _)| s < b) {
                best = Some((s, kt));
            }
        }
    }
    best.map(|(_, kt)| kt)
}

/// One weight for [`store_weights`] to put into the NPU's layout.
struct StoreJob {
    name: String,
    /// K, N, group.
    shape: (u32, u32, u32),
    k_block: u32,
    /// The weight is in the layout already (stored by an earlier call).
    already_stored: bool,
    tensor: std::sync::Arc<Tensor>,
}

impl StoreJob {
    /// The weight's facts, and its values permuted into the layout unless
    /// they already are.
    fn run(self) -> Result<(NpuWeight, Option<(String, Tensor)>), LowerError> {
        let StoreJob {
            name,
            shape: (k, n, group),
            k_block,
            already_stored,
            tensor,
        } = self;
        let layout = QLayout::Rk3588 { k_block };
        let TensorData::I8(values) = tensor.data() else {
            return Err(fail(format!("weight @{name} is not i8")));
        };
        let (ku, nu) = (k as usize, n as usize);
        if values.len() != ku * nu {
            return Err(fail(format!("weight @{name} does not hold [{k}, {n}]")));
        }
        let row_major: std::borrow::Cow<[i8]> = if already_stored {
            layout.row_major(DType::I8, ku, nu, values).into()
        } else {
            values.as_slice().into()
        };
        let mut column_sums = vec![0i32; (k / group) as usize * nu];
        for (kk, row) in row_major.chunks_exact(nu).enumerate() {
            let sums = &mut column_sums[kk / group as usize * nu..][..nu];
            for (s, &q) in sums.iter_mut().zip(row) {
                *s += i32::from(q);
            }
        }
        let packed = (!already_stored).then(|| {
            let packed = layout.pack(DType::I8, ku, nu, &row_major);
            let t = Tensor::new(vec![ku, nu], TensorData::I8(packed)).expect("same size");
            (name.clone(), t)
        });
        let weight = NpuWeight {
            name,
            k_block,
            k,
            n,
            group,
            column_sums,
        };
        Ok((weight, packed))
    }
}

/// Stores every NPU product's weights in the NPU's layout (see the module
/// doc), returning them in name order.
pub fn store_weights(module: &mut Module) -> Result<Vec<NpuWeight>, LowerError> {
    // Per weight: (K, N, group), the rows of every NPU use, and any K
    // block a user already reads it with.
    struct Use {
        shape: (u32, u32, u32),
        rows: BTreeSet<u32>,
        stored: BTreeSet<u32>,
    }
    let mut uses: BTreeMap<String, Use> = BTreeMap::new();
    for g in &module.graphs {
        for i in npu_nodes(g) {
            let at = |m: String| fail(format!("graph @{}, node {i}: {m}", g.name));
            let p = product(g, i).map_err(at)?;
            for (name, n) in &p.weights {
                let u = uses.entry(name.clone()).or_insert_with(|| Use {
                    shape: (p.k, *n, p.group),
                    rows: BTreeSet::new(),
                    stored: BTreeSet::new(),
                });
                if u.shape != (p.k, *n, p.group) {
                    return Err(at(format!(
                        "weight @{name} is read as [{}, {}] in groups of {} here and as \
                         [{}, {}] in groups of {} elsewhere",
                        p.k, n, p.group, u.shape.0, u.shape.1, u.shape.2
                    )));
                }
                u.rows.insert(p.rows);
                if let QLayout::Rk3588 { k_block } = p.layout {
                    u.stored.insert(k_block);
                }
            }
        }
    }
    // Each weight's K block, then its column sums and stored bytes, on all
    // cores (the permuted weights replace the originals as they come).
    let mut jobs = Vec::with_capacity(uses.len());
    for (name, u) in &uses {
        let (k, n, group) = u.shape;
        let k_block = match u.stored.iter().copied().collect::<Vec<_>>()[..] {
            [] => choose_k_block(k, n, group, &u.rows).ok_or_else(|| {
                fail(format!(
                    "weight @{name} ([{k}, {n}], groups of {group}): no K block lets 32 kernels \
                     fit the CBUF beside the features"
                ))
            })?,
            [kb] => kb,
            _ => return Err(fail(format!("weight @{name} is read in two NPU layouts"))),
        };
        let tensor = module
            .weights
            .tensor(name)
            .map_err(|e| fail(e.to_string()))?
            .ok_or_else(|| fail(format!("weight @{name} has no data")))?;
        jobs.push(StoreJob {
            name: name.clone(),
            shape: u.shape,
            k_block,
            already_stored: !u.stored.is_empty(),
            tensor,
        });
    }
    let stored = module.weights.replace_in_parallel(jobs, StoreJob::run)?;
    // Every product that reads a stored weight reads it in its layout; a
    // product's weights share its one layout attribute.
    let layouts: BTreeMap<&str, QLayout> = stored
        .iter()
        .map(|w| {
            let layout = QLayout::Rk3588 { k_block: w.k_block };
            (w.name.as_str(), layout)
        })
        .collect();
    for g in &mut module.graphs {
        for i in 0..g.nodes.len() {
            let names: Vec<&str> = g.nodes[i]
                .inputs
                .iter()
                .skip(1)
                .filter_map(|&v| match &g.value(v).def {
                    ValueDef::Weight(w) => layouts.get_key_value(w.as_str()).map(|(k, _)| *k),
                    _ => None,
                })
                .collect();
            let Some(first) = names.first() else {
                continue;
            };
            let want = layouts[first];
            if names.iter().any(|w| layouts[w] != want) {
                return Err(fail(format!(
                    "graph @{}, node {i}: its weights would need different NPU layouts",
                    g.name
                )));
            }
            let label = g.nodes[i].op.mnemonic();
            match &mut g.nodes[i].op {
                Op::QMatMul(op) => op.layout = want,
                Op::QSwiGlu(op) => op.layout = want,
                _ => {
                    return Err(fail(format!(
                        "graph @{}, node {i}: `{label}` reads an NPU weight",
                        g.name
                    )))
                }
            }
        }
    }
    Ok(stored)
}

/// A feature cube: rows `m0 .. m0 + rows` and channels `k0 .. k0 +
/// channels` of the quantized activations, NC1HWC2 (int8: 16 channels
/// per atom), at `offset` in the features buffer.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct FeatureCube {
    #[prost(uint32, tag = "1")]
    pub m0: u32,
    #[prost(uint32, tag = "2")]
    pub rows: u32,
    #[prost(uint32, tag = "3")]
    pub k0: u32,
    #[prost(uint32, tag = "4")]
    pub channels: u32,
    #[prost(uint64, tag = "5")]
    pub offset: u64,
}

/// One task: the tile it computes and its command list.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ProgramTask {
    /// Which weight operand (0, or 1 for a `qswiglu`'s up projection).
    #[prost(uint32, tag = "1")]
    pub operand: u32,
    #[prost(uint32, tag = "2")]
    pub core: u32,
    #[prost(uint32, tag = "3")]
    pub m0: u32,
    #[prost(uint32, tag = "4")]
    pub rows: u32,
    #[prost(uint32, tag = "5")]
    pub n0: u32,
    #[prost(uint32, tag = "6")]
    pub kernels: u32,
    /// The K block: channels `k0 .. k0 + k_block`.
    #[prost(uint32, tag = "7")]
    pub k0: u32,
    /// Where its int32 partial sums go in the outputs buffer (NC1HWC2,
    /// 4 channels per atom).
    #[prost(uint64, tag = "8")]
    pub output: u64,
    /// The command list, little-endian words, addresses as offsets.
    #[prost(bytes = "vec", tag = "9")]
    pub regcmd: Vec<u8>,
}

/// The NPU program of one product node in one bucket graph.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ProductProgram {
    #[prost(uint32, tag = "1")]
    pub node: u32,
    /// M, K, the quantization group and the K block.
    #[prost(uint32, tag = "2")]
    pub rows: u32,
    #[prost(uint32, tag = "3")]
    pub k: u32,
    #[prost(uint32, tag = "4")]
    pub group: u32,
    #[prost(uint32, tag = "5")]
    pub k_block: u32,
    /// The plan's tile sizes and cores (the K block is `k_block`).
    #[prost(uint32, tag = "6")]
    pub mt: u32,
    #[prost(uint32, tag = "7")]
    pub nt: u32,
    #[prost(uint32, tag = "8")]
    pub cores: u32,
    /// The weight operands' names and columns (the same N for each).
    #[prost(string, repeated, tag = "9")]
    pub weights: Vec<String>,
    #[prost(uint32, tag = "10")]
    pub n: u32,
    /// A `qswiglu`: the epilogue is `(g · sigmoid(g)) · u`.
    #[prost(bool, tag = "11")]
    pub swiglu: bool,
    #[prost(message, repeated, tag = "12")]
    pub features: Vec<FeatureCube>,
    #[prost(uint64, tag = "13")]
    pub features_bytes: u64,
    #[prost(uint64, tag = "14")]
    pub outputs_bytes: u64,
    /// Core by core; on a core, operand by operand.
    #[prost(message, repeated, tag = "15")]
    pub tasks: Vec<ProgramTask>,
}

impl ProductProgram {
    /// The tile plan of each operand.
    pub fn plan(&self) -> TilePlan {
        TilePlan {
            precision: MatmulPrecision::Int8,
            m: self.rows,
            k: self.k,
            n: self.n,
            mt: self.mt,
            nt: self.nt,
            kt: self.k_block,
            cores: self.cores,
        }
    }

    /// Bytes of one operand's weights (`K · N` int8).
    pub fn weight_bytes(&self) -> u64 {
        u64::from(self.k) * u64::from(self.n)
    }

    /// Words of every command list.
    pub fn words(&self) -> usize {
        self.tasks.iter().map(|t| t.regcmd.len() / WORD_BYTES).sum()
    }

    /// Checks a stored program against node `self.node` of `g`, whose
    /// placement is `placed` (see the module doc).
    pub fn check(&self, g: &Graph, placed: &[Placement]) -> Result<(), String> {
        let node = self.node as usize;
        if placed.get(node).is_none_or(|p| p.device != Device::Npu) {
            return Err(format!("node {node} is not an NPU product of @{}", g.name));
        }
        let p = product(g, node)?;
        let names: Vec<String> = p.weights.iter().map(|(w, _)| w.clone()).collect();
        let want = (p.rows, p.k, p.group, p.layout, &names, p.swiglu);
        let layout = QLayout::Rk3588 {
            k_block: self.k_block,
        };
        let got = (
            self.rows,
            self.k,
            self.group,
            layout,
            &self.weights,
            self.swiglu,
        );
        if want != got || p.weights.iter().any(|&(_, n)| n != self.n) {
            return Err(format!(
                "node {node}: the program is for another product (M {} K {} N {} group {}, \
                 K block {})",
                self.rows, self.k, self.n, self.group, self.k_block
            ));
        }
        let (m, k, n, kb) = (self.rows, self.k, self.n, self.k_block);
        if !(1..=CORES).contains(&self.cores)
            || self.mt == 0
            || self.nt == 0
            || !self.nt.is_multiple_of(32)
            || kb == 0
            || !self.group.is_multiple_of(kb)
        {
            return Err(format!(
                "its tile plan (M tile {}, N tile {}, K block {kb}, {} cores) does not fit",
                self.mt, self.nt, self.cores
            ));
        }
        let plan = self.plan();
        let (tiles_m, k_blocks) = (m.div_ceil(self.mt), k / kb);
        // A grid cell (`m0`, `n0` on the plan's tiles) and its extent.
        let cell = |m0: u32, n0: u32| {
            let fits = m0 < m && n0 < n && m0.is_multiple_of(self.mt) && n0.is_multiple_of(self.nt);
            fits.then(|| (self.mt.min(m - m0), self.nt.min(n - n0)))
        };
        // The feature cubes: every (M tile, K block) once, packed
        // without overlap into exactly `features_bytes = M·K`.
        let mut cubes = BTreeMap::new();
        for c in &self.features {
            let fits = cell(c.m0, 0).is_some_and(|(rows, _)| rows == c.rows)
                && c.channels == kb
                && c.k0.is_multiple_of(kb)
                && c.k0 < k;
            if !fits || cubes.insert((c.m0, c.k0), c.offset).is_some() {
                return Err(format!("feature cube {c:?} is not one of the plan's"));
            }
        }
        let cube_bytes = |c: &FeatureCube| u64::from(c.rows) * u64::from(c.channels);
        let regions = self.features.iter().map(|c| (c.offset, cube_bytes(c)));
        if cubes.len() as u64 != u64::from(tiles_m) * u64::from(k_blocks)
            || self.features_bytes != u64::from(m) * u64::from(k)
            || !disjoint_within(regions, self.features_bytes)
        {
            return Err("the feature cubes do not pack the rows once each".into());
        }
        if self.tasks.windows(2).any(|w| w[0].core > w[1].core) {
            return Err("the tasks are not in core order".into());
        }
        // The tasks: every (operand, M tile, N tile, K block) once, their
        // outputs without overlap in exactly `outputs_bytes`.
        let mut tiles = BTreeSet::new();
        let mut output_bytes = 0u64;
        for (i, t) in self.tasks.iter().enumerate() {
            let bad = |why: &str| format!("task {i}: {why}");
            let fits = cell(t.m0, t.n0).is_some_and(|extent| extent == (t.rows, t.kernels))
                && (t.operand as usize) < self.weights.len()
                && t.core < self.cores
                && t.k0.is_multiple_of(kb)
                && t.k0 < k;
            if !fits || !tiles.insert((t.operand, t.m0, t.n0, t.k0)) {
                return Err(bad("its tile is not one of the plan's"));
            }
            output_bytes += u64::from(t.rows) * u64::from(t.kernels) * 4;
            let words = decode_buffer(&t.regcmd).map_err(|e| bad(&e.to_string()))?;
            let task = MatmulTask::from_words(&words).map_err(|e| bad(&e.to_string()))?;
            let expect = MatmulTask {
                input: u32::try_from(cubes[&(t.m0, t.k0)])
                    .map_err(|_| bad("features past 4 GiB"))?,
                weights: u32::try_from(weight_offset(t.k0, t.n0, n, kb))
                    .map_err(|_| bad("weights past 4 GiB"))?,
                output: u32::try_from(t.output).map_err(|_| bad("outputs past 4 GiB"))?,
                ..plan.task(
                    &Tile {
                        core: t.core,
                        m0: t.m0,
                        rows: t.rows,
                        n0: t.n0,
                        kernels: t.kernels,
                        kb: t.k0 / kb,
                    },
                    0,
                    0,
                    0,
                )
            };
            if task != expect {
                return Err(bad(&format!(
                    "its command list programs {task:?}, not {expect:?}"
                )));
            }
        }
        let want_tiles = self.weights.len() as u64 * plan.task_count();
        let regions = self
            .tasks
            .iter()
            .map(|t| (t.output, u64::from(t.rows) * u64::from(t.kernels) * 4));
        if tiles.len() as u64 != want_tiles
            || self.outputs_bytes != output_bytes
            || !disjoint_within(regions, self.outputs_bytes)
        {
            return Err("the tasks do not compute every tile once".into());
        }
        Ok(())
    }
}

/// Offset of the weights of the task over columns `n0 ..` of the K block
/// at row `k0`, in a weight of `n` columns stored in K blocks of `kb`
/// ([`QLayout::Rk3588`]: one contiguous run).
fn weight_offset(k0: u32, n0: u32, n: u32, kb: u32) -> u64 {
    u64::from(k0) * u64::from(n) + u64::from(n0) * u64::from(kb)
}

/// Whether the `(offset, len)` regions lie inside `[0, size)` without
/// overlapping.
fn disjoint_within(regions: impl Iterator<Item = (u64, u64)>, size: u64) -> bool {
    let mut regions: Vec<(u64, u64)> = regions.collect();
    regions.sort_unstable();
    let mut end = 0u64;
    for (offset, len) in regions {
        match offset.checked_add(len) {
            Some(e) if offset >= end && e <= size => end = e,
            _ => return false,
        }
    }
    true
}

/// The program of every NPU product of bucket graph `g`, in node order
/// (see the module doc).
pub fn lower_graph(g: &Graph) -> Result<Vec<ProductProgram>, LowerError> {
    npu_nodes(g)
        .map(|i| lower_node(g, i).map_err(|e| fail(format!("graph @{}, node {i}: {e}", g.name))))
        .collect()
}

fn lower_node(g: &Graph, node: usize) -> Result<ProductProgram, String> {
    let p = product(g, node)?;
    let QLayout::Rk3588 { k_block } = p.layout else {
        return Err("its weights are not stored in the NPU's layout (store_weights)".into());
    };
    let n = p.weights[0].1;
    let plan = TilePlan::with_k_block(MatmulPrecision::Int8, (p.rows, p.k, n), k_block, CORES)
        .ok_or_else(|| format!("no tile plan for K blocks of {k_block}"))?;
    let k_blocks = plan.k_blocks();
    let mut features = Vec::new();
    let mut offset = 0u64;
    for m0 in (0..p.rows).step_by(plan.mt as usize) {
        let rows = plan.mt.min(p.rows - m0);
        for kb in 0..k_blocks {
            features.push(FeatureCube {
                m0,
                rows,
                k0: kb * k_block,
                channels: k_block,
                offset,
            });
            offset += u64::from(rows) * u64::from(k_block);
        }
    }
    let features_bytes = offset;
    let per_core = plan.tiles();
    let mut tasks = Vec::new();
    let mut output = 0u64;
    for (core, tiles) in per_core.iter().enumerate() {
        for operand in 0..p.weights.len() as u32 {
            for t in tiles {
                let cube = (t.m0 / plan.mt * k_blocks + t.kb) as usize;
                let weights = weight_offset(t.kb * k_block, t.n0, n, k_block);
                let addr = |v: u64, what: &str| {
                    u32::try_from(v).map_err(|_| format!("the {what} pass 4 GiB"))
                };
                let task = MatmulTask {
                    input: addr(features[cube].offset, "features")?,
                    weights: addr(weights, "weights")?,
                    output: addr(output, "outputs")?,
                    ..plan.task(t, 0, 0, 0)
                };
                let words = task.regcmd().map_err(|e| e.to_string())?;
                tasks.push(ProgramTask {
                    operand,
                    core: core as u32,
                    m0: t.m0,
                    rows: t.rows,
                    n0: t.n0,
                    kernels: t.kernels,
                    k0: t.kb * k_block,
                    output,
                    regcmd: encode_buffer(&words),
                });
                output += u64::from(t.rows) * u64::from(t.kernels) * 4;
            }
        }
    }
    Ok(ProductProgram {
        node: node as u32,
        rows: p.rows,
        k: p.k,
        group: p.group,
        k_block,
        mt: plan.mt,
        nt: plan.nt,
        cores: plan.cores,
        weights: p.weights.into_iter().map(|(w, _)| w).collect(),
        n,
        swiglu: p.swiglu,
        features,
        features_bytes,
        outputs_bytes: output,
        tasks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;

    const SRC: &str = "module @m {
  weight @a : i8[64, 96]
  weight @as : f32[1, 96]
  weight @g : i8[64, 32]
  weight @gs : f32[1, 32]
  weight @u : i8[64, 32]
  weight @us : f32[1, 32]

  graph @main_1(%x: f32[1, 1, 64]) -> (f32[1, 1, 96], f32[1, 1, 32]) {
    %y = qmatmul %x, @a, @as {bits = 8, group = 64} : f32[1, 1, 96]
    %z = qswiglu %x, @g, @gs, @u, @us {bits = 8, group = 64} : f32[1, 1, 32]
    return %y, %z
  }

  graph @main_40(%x: f32[1, 40, 64]) -> (f32[1, 40, 96]) {
    %y = qmatmul %x, @a, @as {bits = 8, group = 64} : f32[1, 40, 96]
    return %y
  }
}
";

    fn module() -> Module {
        let mut m = parse_module(SRC).unwrap();
        for (name, n, seed) in [("a", 96, 1), ("g", 32, 2), ("u", 32, 3)] {
            let q = (0..64 * n)
                .map(|i| ((i * 7919 + seed * 31) % 255) as i64 - 127)
                .collect();
            let t = Tensor::from_i64(vec![64, n], q).cast(DType::I8);
            m.weights.insert(name, t);
            let s = Tensor::from_f32(vec![1, n], vec![0.01; n]);
            m.weights.insert(format!("{name}s"), s);
        }
        m
    }

    #[test]
    fn weights_are_stored_once_with_their_column_sums() {
        let mut m = module();
        let before = m.weights.tensor("a").unwrap().unwrap().to_i64_vec();
        let stored = store_weights(&mut m).unwrap();
        let names: Vec<&str> = stored.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["a", "g", "u"]);
        let a = &stored[0];
        let sums: Vec<i32> = (0..96)
            .map(|n| (0..64).map(|k| before[k * 96 + n] as i32).sum())
            .collect();
        assert_eq!(a.column_sums, sums);
        let layout = QLayout::Rk3588 { k_block: a.k_block };
        let after = m.weights.tensor("a").unwrap().unwrap().to_i64_vec();
        assert_eq!(layout.row_major(DType::I8, 64, 96, &after), before);
        for g in &m.graphs {
            for n in &g.nodes {
                match &n.op {
                    Op::QMatMul(op) => assert_eq!(op.layout, layout),
                    Op::QSwiGlu(op) => assert!(matches!(op.layout, QLayout::Rk3588 { .. })),
                    _ => {}
                }
            }
        }
        // Storing again changes nothing.
        let text = slmcc_ir::text::print_module(&m);
        assert_eq!(store_weights(&mut m).unwrap(), stored);
        assert_eq!(slmcc_ir::text::print_module(&m), text);
        assert_eq!(m.weights.tensor("a").unwrap().unwrap().to_i64_vec(), after);
    }

    #[test]
    fn programs_check_and_a_changed_one_is_refused() {
        let mut m = module();
        store_weights(&mut m).unwrap();
        for g in &m.graphs {
            let programs = lower_graph(g).unwrap();
            assert_eq!(programs.len(), g.nodes.len());
            for p in &programs {
                p.check(g, &place(g)).unwrap();
                assert!(!p.tasks.is_empty());
            }
        }
        let g = &m.graphs[0];
        let good = lower_graph(g).unwrap().remove(1);
        assert!(good.swiglu && good.weights == ["g", "u"]);
        let refused = |change: &dyn Fn(&mut ProductProgram), why: &str| {
            let mut bad = good.clone();
            change(&mut bad);
            let e = bad.check(g, &place(g)).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        };
        refused(&|p| p.tasks[0].output = p.outputs_bytes, "programs");
        // The entries' outputs swapped: the lists no longer match them.
        refused(
            &|p| {
                let o = p.tasks[0].output;
                p.tasks[0].output = p.tasks[1].output;
                p.tasks[1].output = o;
            },
            "programs",
        );
        refused(&|p| p.tasks[0].regcmd[8] ^= 1, "task 0");
        refused(&|p| p.node = 0, "another product");
        refused(
            &|p| p.tasks[1] = p.tasks[0].clone(),
            "not one of the plan's",
        );
        refused(
            &|p| {
                let t = p.tasks.pop().unwrap();
                p.outputs_bytes -= u64::from(t.rows * t.kernels * 4);
            },
            "every tile once",
        );
        refused(&|p| p.cores = u32::MAX, "tile plan");
        refused(&|p| p.features_bytes = u64::MAX, "feature cubes");
        refused(&|p| p.outputs_bytes = u64::MAX, "every tile once");
        refused(&|p| p.features[0].offset = 1, "feature cubes");
    }

    #[test]
    fn a_row_major_npu_product_is_not_lowered() {
        let m = module();
        let e = lower_graph(&m.graphs[0]).unwrap_err().to_string();
        assert!(e.contains("not stored in the NPU's layout"), "{e}");
    }
}
