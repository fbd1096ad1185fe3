//! Static memory plans: where every tensor of a graph lives while it runs.
//!
//! `plan-memory` computes one [`MemoryPlan`] per graph and stores it in
//! [`Module::plans`](crate::Module) under the graph's name. A plan places
//! each value the graph uses in one of five regions ([`Region`]):
//!
//! - `arena` — activations: graph inputs (the executor writes them there
//!   before the first step), node results and graph outputs (read from there
//!   after the last step). Tensors whose lifetimes intersect never overlap,
//!   except a result computed in place of an operand that dies at that step.
//! - `weights` — module weights, read-only, laid out in name order for the
//!   whole module (every graph of the module sees the same offsets), so the
//!   region can be one memory mapping shared by all buckets.
//! - `constants` — results of `constant` nodes, read-only, filled at load.
//! - `kv_cache` — the KV cache (`kv-cache` pass): each cache input and the
//!   `kv_write` result computed in place of it share one place, laid out in
//!   input-name order, so every graph of a module that has the same caches
//!   (prefill buckets and the decode graph) has them at the same offsets,
//!   and a runtime shares one region between them. No lifetimes: the cache
//!   is state that outlives a step.
//! - `scratch` — per-step workspace of kernels, shared by all steps.
//!
//! Steps are node indices in schedule order. A value's lifetime `[first,
//! last]` is inclusive: it is written at step `first` (graph inputs: before
//! step 0, so `first = 0`) and read for the last time at step `last` (graph
//! outputs: the last step). Offsets and sizes are multiples of [`ALIGN`].
//!
//! The lower bound of an arena is the largest sum of sizes of tensors live
//! at one step, a result computed in place counting once with its operand:
//! any placement needs at least that much. [`MemoryPlan::check`] verifies the
//! plan on its own terms (alignment, bounds, no overlap of simultaneously live
//! tensors, the recorded lower bound).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::fmt;

use crate::graph::{Graph, ValueDef};
use crate::ops::Op;

/// Alignment of every offset and size in a plan, in bytes.
pub const ALIGN: u64 = 64;

/// Rounds `bytes` up to a multiple of [`ALIGN`].
pub fn align_up(bytes: u64) -> u64 {
    bytes.div_ceil(ALIGN) * ALIGN
}

/// A memory region of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Region {
    Arena,
    Weights,
    Constants,
    KvCache,
    Scratch,
}

impl Region {
    pub const ALL: [Region; 5] = [
        Region::Arena,
        Region::Weights,
        Region::Constants,
        Region::KvCache,
        Region::Scratch,
    ];

    /// The name in the textual form and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Region::Arena => "arena",
            Region::Weights => "weights",
            Region::Constants => "constants",
            Region::KvCache => "kv_cache",
            Region::Scratch => "scratch",
        }
    }

    pub fn from_name(name: &str) -> Option<Region> {
        Region::ALL.into_iter().find(|r| r.name() == name)
    }

    /// True for regions whose tensors are written once, before any step.
    pub fn is_read_only(self) -> bool {
        matches!(self, Region::Weights | Region::Constants)
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where one tensor lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// The value's name (`%name`), or the weight's name for [`Region::Weights`] (`@name`).
    pub name: String,
    pub region: Region,
    /// Byte offset in the region.
    pub offset: u64,
    /// Bytes reserved: the tensor's byte size rounded up to [`ALIGN`].
    pub size: u64,
    /// Arena tensors: first and last step, inclusive. `None` elsewhere.
    pub live: Option<(usize, usize)>,
    /// Arena tensors computed in place: the operand whose bytes they reuse
    /// (same offset and size; the operand's last step is this one's first).
    pub in_place: Option<String>,
}

impl TensorPlan {
    /// True when the two tensors' lifetimes intersect (both in the arena).
    pub fn live_with(&self, other: &TensorPlan) -> bool {
        match (self.live, other.live) {
            (Some((a0, a1)), Some((b0, b1))) => a0 <= b1 && b0 <= a1,
            _ => false,
        }
    }

    /// True when the byte ranges intersect (zero-sized tensors never do).
    pub fn overlaps(&self, other: &TensorPlan) -> bool {
        self.size > 0
            && other.size > 0
            && self.offset < other.offset + other.size
            && other.offset < self.offset + self.size
    }

    fn label(&self) -> String {
        let sigil = if self.region == Region::Weights {
            '@'
        } else {
            '%'
        };
        let live = match self.live {
            Some((a, b)) => format!(" live [{a}, {b}]"),
            None => String::new(),
        };
        format!(
            "{sigil}{} ({} {}+{}{live})",
            self.name, self.region, self.offset, self.size
        )
    }
}

/// The size of each region, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionSizes {
    pub arena: u64,
    pub weights: u64,
    pub constants: u64,
    pub kv_cache: u64,
    pub scratch: u64,
}

impl RegionSizes {
    pub fn get(&self, r: Region) -> u64 {
        match r {
            Region::Arena => self.arena,
            Region::Weights => self.weights,
            Region::Constants => self.constants,
            Region::KvCache => self.kv_cache,
            Region::Scratch => self.scratch,
        }
    }

    pub fn set(&mut self, r: Region, bytes: u64) {
        match r {
            Region::Arena => self.arena = bytes,
            Region::Weights => self.weights = bytes,
            Region::Constants => self.constants = bytes,
            Region::KvCache => self.kv_cache = bytes,
            Region::Scratch => self.scratch = bytes,
        }
    }

    /// All regions together: the memory one loaded graph needs.
    pub fn total(&self) -> u64 {
        Region::ALL.into_iter().map(|r| self.get(r)).sum()
    }
}

/// The memory plan of one graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    pub regions: RegionSizes,
    /// The arena's lower bound (see the module doc).
    pub lower_bound: u64,
    /// One entry per value the graph uses, in the graph's value order.
    pub tensors: Vec<TensorPlan>,
}

/// A plan that breaks its own invariants, naming the tensors at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

impl MemoryPlan {
    /// The entry of `%name` (or `@name` when `weight`). A linear search:
    /// a caller that looks up every value uses [`MemoryPlan::by_name`].
    pub fn get(&self, name: &str, weight: bool) -> Option<&TensorPlan> {
        self.tensors
            .iter()
            .find(|t| t.name == name && (t.region == Region::Weights) == weight)
    }

    /// Every entry keyed as [`MemoryPlan::get`] looks it up: `(weight,
    /// name)`.
    pub fn by_name(&self) -> HashMap<(bool, &str), &TensorPlan> {
        self.tensors
            .iter()
            .map(|t| ((t.region == Region::Weights, t.name.as_str()), t))
            .collect()
    }

    /// Arena size over lower bound (1.0 for an empty arena).
    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.regions.arena as f64 / self.lower_bound as f64
        }
    }

    /// Number of steps the lifetimes span (one past the largest last step).
    pub fn steps(&self) -> usize {
        self.tensors
            .iter()
            .filter_map(|t| t.live.map(|(_, b)| b + 1))
            .max()
            .unwrap_or(0)
    }

    /// The largest sum of sizes of arena tensors live at one step, a tensor
    /// computed in place counted once with the operand it reuses.
    pub fn live_peak(tensors: &[TensorPlan]) -> u64 {
        let steps = tensors
            .iter()
            .filter_map(|t| t.live.map(|(_, b)| b + 1))
            .max()
            .unwrap_or(0);
        // Difference array: +size at `first`, -size after `last`.
        let mut delta = vec![0i128; steps + 1];
        for t in tensors {
            if let Some((a, b)) = t.live {
                delta[a] += i128::from(t.size);
                delta[b + 1] -= i128::from(t.size);
                if t.in_place.is_some() {
                    // Shares its bytes with the operand during step `a`.
                    delta[a] -= i128::from(t.size);
                    delta[a + 1] += i128::from(t.size);
                }
            }
        }
        let (mut cur, mut peak) = (0i128, 0i128);
        for d in &delta[..steps] {
            cur += d;
            peak = peak.max(cur);
        }
        peak as u64
    }

    /// Checks the plan on its own terms: names unique per namespace; offsets
    /// and sizes aligned; every tensor inside its region; lifetimes exactly
    /// on arena tensors; every `in_place` names a tensor of the same region
    /// (the arena or the KV cache) with the same bytes that, in the arena,
    /// dies at the step this one is born; no two arena tensors
    /// live at the same time overlap (an in-place pair excepted); read-only
    /// tensors never overlap; the recorded lower bound is the live peak and
    /// the arena is at least that.
    pub fn check(&self) -> Result<(), PlanError> {
        let fail = |m: String| Err(PlanError(m));
        let mut names = HashSet::new();
        let mut by_name: HashMap<&str, &TensorPlan> = HashMap::new();
        for t in &self.tensors {
            let weight = t.region == Region::Weights;
            if !names.insert((weight, t.name.as_str())) {
                return fail(format!("{} is planned twice", t.label()));
            }
            if !weight {
                by_name.insert(&t.name, t);
            }
            if t.offset % ALIGN != 0 || t.size % ALIGN != 0 {
                return fail(format!("{} is not {ALIGN}-byte aligned", t.label()));
            }
            let end = t.offset.checked_add(t.size);
            if end.is_none_or(|e| e > self.regions.get(t.region)) {
                return fail(format!(
                    "{} ends past the {} region ({} bytes)",
                    t.label(),
                    t.region,
                    self.regions.get(t.region)
                ));
            }
            match (t.region, t.live) {
                (Region::Arena, None) => {
                    return fail(format!("{} is in the arena without a lifetime", t.label()))
                }
                (Region::Arena, Some((a, b))) if a > b => {
                    return fail(format!("{} has an empty lifetime", t.label()))
                }
                (r, Some(_)) if r != Region::Arena => {
                    return fail(format!("{} has a lifetime outside the arena", t.label()))
                }
                _ => {}
            }
            if t.in_place.is_some() && !matches!(t.region, Region::Arena | Region::KvCache) {
                return fail(format!(
                    "{} is in place outside the arena and the KV cache",
                    t.label()
                ));
            }
        }
        let mut in_place_pairs = HashSet::new();
        for t in &self.tensors {
            let Some(src) = &t.in_place else { continue };
            let Some(s) = by_name.get(src.as_str()) else {
                return fail(format!("{} is in place of unplanned %{src}", t.label()));
            };
            let ok = s.region == t.region
                && s.offset == t.offset
                && s.size == t.size
                && s.live.map(|l| l.1) == t.live.map(|l| l.0);
            if !ok {
                return fail(format!(
                    "{} is in place of {}, which does not have the same bytes or does not die where it is born",
                    t.label(),
                    s.label()
                ));
            }
            in_place_pairs.insert((src.as_str(), t.name.as_str()));
        }
        // Sweep by offset: only pairs whose byte ranges intersect are compared.
        for region in Region::ALL {
            let mut ts: Vec<&TensorPlan> = self
                .tensors
                .iter()
                .filter(|t| t.region == region && t.size > 0)
                .collect();
            let paired = |a: &TensorPlan, b: &TensorPlan| {
                in_place_pairs.contains(&(a.name.as_str(), b.name.as_str()))
                    || in_place_pairs.contains(&(b.name.as_str(), a.name.as_str()))
            };
            if region == Region::Arena {
                if let Some((a, b)) = arena_conflict(&ts, paired) {
                    return fail(format!("{} overlaps {}", a.label(), b.label()));
                }
                continue;
            }
            // Read-only regions and the KV cache: no two tensors share bytes
            // (a cache and its in-place update excepted), so the sweep by
            // offset stops at the first tensor past the end.
            ts.sort_by_key(|t| (t.offset, t.size));
            for (i, a) in ts.iter().enumerate() {
                for b in &ts[i + 1..] {
                    if b.offset >= a.offset + a.size {
                        break;
                    }
                    if region != Region::KvCache || !paired(a, b) {
                        return fail(format!("{} overlaps {}", a.label(), b.label()));
                    }
                }
            }
        }
        let peak = MemoryPlan::live_peak(&self.tensors);
        if self.lower_bound != peak {
            return fail(format!(
                "the recorded lower bound {} is not the live peak {peak}",
                self.lower_bound
            ));
        }
        if self.regions.arena < peak {
            return fail(format!(
                "the arena ({} bytes) is smaller than the live peak {peak}",
                self.regions.arena
            ));
        }
        Ok(())
    }
}

/// The first two arena tensors that share bytes while both are live and
/// are not an in-place pair. Sweeps the tensors in order of birth, keeping
/// the live ones by offset, so the cost is O(n log n) however many tensors
/// reuse the same bytes over time (a sweep by offset alone compares every
/// pair placed at one offset). The live set holds only tensors already
/// accepted, which are disjoint or, as in-place pairs, identical in bytes;
/// so their ends rise with their offsets, and the walk down from a new
/// tensor's offset stops at the first one that ends before it.
fn arena_conflict<'a>(
    tensors: &[&'a TensorPlan],
    paired: impl Fn(&TensorPlan, &TensorPlan) -> bool,
) -> Option<(&'a TensorPlan, &'a TensorPlan)> {
    let mut by_birth: Vec<(usize, usize, &TensorPlan)> = tensors
        .iter()
        .filter_map(|t| t.live.map(|(born, last)| (born, last, *t)))
        .collect();
    by_birth.sort_by_key(|&(born, last, t)| (born, last, t.offset));
    let mut live: BTreeMap<(u64, usize), &TensorPlan> = BTreeMap::new();
    let mut deaths: BinaryHeap<Reverse<(usize, u64, usize)>> = BinaryHeap::new();
    for (key, &(born, last, t)) in by_birth.iter().enumerate() {
        while let Some(&Reverse((died, offset, k))) = deaths.peek() {
            if died >= born {
                break;
            }
            deaths.pop();
            live.remove(&(offset, k));
        }
        let end = t.offset + t.size;
        let starting_inside = live.range((t.offset, 0)..(end, 0)).map(|(_, o)| *o);
        let reaching_in = live
            .range(..(t.offset, 0))
            .rev()
            .map(|(_, o)| *o)
            .take_while(|o| o.offset + o.size > t.offset);
        if let Some(o) = starting_inside.chain(reaching_in).find(|o| !paired(o, t)) {
            return Some(if o.offset <= t.offset { (o, t) } else { (t, o) });
        }
        live.insert((t.offset, key), t);
        deaths.push(Reverse((last, t.offset, key)));
    }
    None
}

impl MemoryPlan {
    /// A plan in which no two tensors share bytes: every value `g` uses
    /// gets its own place (the arena and the constants region in value
    /// order, arena tensors with the graph's lifetimes; weights in name
    /// order in the weights region). Larger than a planned arena, but
    /// every value can be read after a run: what running a graph unplanned
    /// and capturing its values needs. Fails on a value without a static
    /// shape.
    pub fn unshared(g: &Graph) -> Result<MemoryPlan, PlanError> {
        let live = lifetimes(g);
        let mut constant = vec![false; g.value_count()];
        for node in &g.nodes {
            if matches!(node.op, Op::Constant(_)) {
                node.outputs.iter().for_each(|v| constant[v.index()] = true);
            }
        }
        let used: Vec<(crate::ValueId, &crate::graph::Value)> = g
            .values()
            .filter(|(id, _)| live[id.index()].is_some())
            .collect();
        let size_of = |v: &crate::graph::Value| {
            value_bytes(&v.ty)
                .map(align_up)
                .ok_or_else(|| PlanError(format!("%{} has no static shape: {}", v.name, v.ty)))
        };
        // Weights in name order, as plan-memory lays them out.
        let mut weights: Vec<&crate::graph::Value> = used
            .iter()
            .filter(|(_, v)| matches!(v.def, ValueDef::Weight(_)))
            .map(|(_, v)| *v)
            .collect();
        weights.sort_by(|a, b| a.name.cmp(&b.name));
        let mut regions = RegionSizes::default();
        let mut weight_at = HashMap::new();
        for v in weights {
            weight_at.insert(v.name.as_str(), regions.weights);
            regions.weights += size_of(v)?;
        }
        let mut tensors = Vec::with_capacity(used.len());
        for (id, v) in used {
            let size = size_of(v)?;
            let (region, offset) = match v.def {
                ValueDef::Weight(_) => (Region::Weights, weight_at[v.name.as_str()]),
                _ => {
                    let r = if constant[id.index()] {
                        Region::Constants
                    } else {
                        Region::Arena
                    };
                    let at = regions.get(r);
                    regions.set(r, at + size);
                    (r, at)
                }
            };
            tensors.push(TensorPlan {
                name: v.name.clone(),
                region,
                offset,
                size,
                live: (region == Region::Arena)
                    .then(|| live[id.index()])
                    .flatten(),
                in_place: None,
            });
        }
        let lower_bound = MemoryPlan::live_peak(&tensors);
        let plan = MemoryPlan {
            regions,
            lower_bound,
            tensors,
        };
        check_against(&plan, g)?;
        Ok(plan)
    }
}

/// The lifetime `[first, last]` of every value the graph uses (graph
/// inputs, operands, results, outputs), indexed by value id; `None` for
/// values nothing uses. Inputs are born at step 0, a node's results at its
/// index; a value dies at its last reader, graph outputs at the last step (a
/// result nothing reads dies where it is born).
pub fn lifetimes(g: &Graph) -> Vec<Option<(usize, usize)>> {
    let end = g.nodes.len().saturating_sub(1);
    let mut live: Vec<Option<(usize, usize)>> = vec![None; g.value_count()];
    for &v in &g.inputs {
        live[v.index()] = Some((0, 0));
    }
    for (n, node) in g.nodes.iter().enumerate() {
        for &v in &node.inputs {
            let l = live[v.index()].get_or_insert((0, n));
            l.1 = l.1.max(n);
        }
        for &v in &node.outputs {
            live[v.index()] = Some((n, n));
        }
    }
    for &v in &g.outputs {
        let l = live[v.index()].get_or_insert((0, end));
        l.1 = end;
    }
    live
}

/// The byte size of a value's type, when every dim is static.
pub fn value_bytes(ty: &crate::TensorType) -> Option<u64> {
    tensor_bytes(ty.dtype, &ty.shape.as_fixed()?)
}

/// The byte size of a `dtype` tensor of shape `dims`; `None` when it does
/// not fit in `usize`.
pub fn tensor_bytes(dtype: crate::DType, dims: &[usize]) -> Option<u64> {
    let bits = dims
        .iter()
        .try_fold(dtype.bits(), |a, &d| a.checked_mul(d))?;
    Some(bits.div_ceil(8) as u64)
}

/// Checks a plan against its graph: the plan passes [`MemoryPlan::check`];
/// every value the graph uses is planned exactly once and nothing else is;
/// weights are in the weights region, `constant` results in the constants
/// region, every other value in the arena or the KV cache; sizes are the
/// aligned byte sizes of the types; arena lifetimes are [`lifetimes`]; an
/// in-place result is computed by a node reading its operand.
pub fn check_against(plan: &MemoryPlan, g: &Graph) -> Result<(), PlanError> {
    plan.check()?;
    let fail = |msg: String| Err(PlanError(msg));
    let live = lifetimes(g);
    let is_constant = {
        let mut c = vec![false; g.value_count()];
        for node in &g.nodes {
            if matches!(node.op, Op::Constant(_)) {
                for v in &node.outputs {
                    c[v.index()] = true;
                }
            }
        }
        c
    };
    let mut planned = 0;
    let by_name = plan.by_name();
    for (id, v) in g.values() {
        let Some(l) = live[id.index()] else { continue };
        planned += 1;
        let weight = matches!(v.def, ValueDef::Weight(_));
        let sigil = if weight { '@' } else { '%' };
        let Some(t) = by_name.get(&(weight, v.name.as_str())) else {
            return fail(format!("{sigil}{} is not planned", v.name));
        };
        let want_size = value_bytes(&v.ty).map(align_up);
        if want_size != Some(t.size) {
            return fail(format!(
                "{sigil}{} is planned with {} bytes, its type {} needs {}",
                v.name,
                t.size,
                v.ty,
                want_size.map_or("a static shape".to_string(), |s| s.to_string())
            ));
        }
        let region_ok = match (&v.def, t.region) {
            (ValueDef::Weight(_), r) => r == Region::Weights,
            (_, Region::Constants) => is_constant[id.index()],
            (_, Region::Arena | Region::KvCache) => !is_constant[id.index()],
            _ => false,
        };
        if !region_ok {
            return fail(format!(
                "{sigil}{} is planned in the {} region",
                v.name, t.region
            ));
        }
        if t.region == Region::Arena && t.live != Some(l) {
            return fail(format!(
                "%{} is planned live {:?}, the graph has it live {l:?}",
                v.name, t.live
            ));
        }
        if let Some(src) = &t.in_place {
            let reads = g.nodes.get(l.0).is_some_and(|node| {
                node.outputs.contains(&id) && node.inputs.iter().any(|&i| g.value(i).name == *src)
            });
            if !reads {
                return fail(format!(
                    "%{} is planned in place of %{src}, which its node does not read",
                    v.name
                ));
            }
        }
    }
    if planned != plan.tensors.len() {
        return fail(format!(
            "the plan has {} entries for {planned} values the graph uses",
            plan.tensors.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(name: &str, offset: u64, size: u64, live: (usize, usize)) -> TensorPlan {
        TensorPlan {
            name: name.into(),
            region: Region::Arena,
            offset,
            size,
            live: Some(live),
            in_place: None,
        }
    }

    fn plan(tensors: Vec<TensorPlan>, arena: u64) -> MemoryPlan {
        let lower_bound = MemoryPlan::live_peak(&tensors);
        MemoryPlan {
            regions: RegionSizes {
                arena,
                ..RegionSizes::default()
            },
            lower_bound,
            tensors,
        }
    }

    #[test]
    fn disjoint_lifetimes_may_share_bytes() {
        let p = plan(
            vec![arena("a", 0, 128, (0, 1)), arena("b", 0, 128, (2, 3))],
            128,
        );
        p.check().unwrap();
        assert_eq!(p.lower_bound, 128);
    }

    #[test]
    fn live_overlap_is_an_error_naming_both() {
        let p = plan(
            vec![arena("a", 0, 128, (0, 2)), arena("b", 64, 128, (2, 3))],
            192,
        );
        let e = p.check().unwrap_err().to_string();
        assert_eq!(
            e,
            "%a (arena 0+128 live [0, 2]) overlaps %b (arena 64+128 live [2, 3])"
        );
    }

    #[test]
    fn overlaps_are_found_from_either_side_over_long_reuse() {
        // 10,000 tensors taking turns at two offsets: no pair conflicts.
        let n = 10_000;
        let chain = |i: usize| arena(&format!("t{i}"), (i % 2) as u64 * 128, 128, (i, i + 1));
        let p = plan((0..n).map(chain).collect(), 256);
        p.check().unwrap();
        // A tensor live throughout beside them, and one born late that
        // reaches into it from below, or starts inside it.
        for (offset, (a, b)) in [(192, ("late", "long")), (320, ("long", "late"))] {
            let mut p = p.clone();
            p.tensors.push(arena("long", 256, 128, (0, n)));
            p.tensors.push(arena("late", offset, 128, (n - 2, n - 1)));
            p.lower_bound = MemoryPlan::live_peak(&p.tensors);
            p.regions.arena = 512;
            let e = p.check().unwrap_err().0;
            assert!(
                e.starts_with(&format!("%{a} ")) && e.contains(&format!("overlaps %{b} ")),
                "{e}"
            );
            p.tensors.pop();
            p.lower_bound = MemoryPlan::live_peak(&p.tensors);
            p.check().unwrap();
        }
    }

    #[test]
    fn in_place_pairs_share_and_count_once() {
        let mut b = arena("b", 0, 128, (1, 2));
        b.in_place = Some("a".into());
        let p = plan(vec![arena("a", 0, 128, (0, 1)), b], 128);
        assert_eq!(p.lower_bound, 128);
        p.check().unwrap();
        // Without the in-place mark the same bytes overlap.
        let mut q = p.clone();
        q.tensors[1].in_place = None;
        q.lower_bound = MemoryPlan::live_peak(&q.tensors);
        assert_eq!(q.lower_bound, 256);
        assert!(q.check().is_err());
    }

    #[test]
    fn alignment_bounds_and_lower_bound_are_checked() {
        let p = plan(vec![arena("a", 32, 64, (0, 0))], 128);
        assert!(p.check().unwrap_err().0.contains("aligned"));
        let p = plan(vec![arena("a", 64, 128, (0, 0))], 128);
        assert!(p.check().unwrap_err().0.contains("ends past"));
        let mut p = plan(vec![arena("a", 0, 128, (0, 0))], 128);
        p.lower_bound = 64;
        assert!(p.check().unwrap_err().0.contains("lower bound"));
    }

    #[test]
    fn read_only_regions_never_overlap() {
        let w = |name: &str, offset| TensorPlan {
            name: name.into(),
            region: Region::Weights,
            offset,
            size: 128,
            live: None,
            in_place: None,
        };
        let mut p = plan(vec![w("x", 0), w("y", 64)], 0);
        p.regions.weights = 256;
        assert!(p.check().unwrap_err().0.contains("@x"));
        p.tensors[1].offset = 128;
        p.check().unwrap();
    }
}
