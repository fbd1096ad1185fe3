//! The memory planner behind `plan-memory`.
//!
//! [`plan_graph`] turns one graph with static shapes into a
//! [`MemoryPlan`]: lifetimes from the schedule
//! ([`slmcc_ir::plan::lifetimes`]), in-place reuse ([`in_place_operand`]),
//! offsets in the arena by greedy-by-size ([`greedy`]), the read-only regions
//! laid out in order, and the lower bound. The plan's own
//! [`MemoryPlan::check`] runs before it is returned.

pub mod greedy;

use std::collections::HashMap;

use slmcc_ir::plan::{align_up, lifetimes, value_bytes};
use slmcc_ir::{Graph, MemoryPlan, Module, Node, Op, Region, TensorPlan, ValueDef, ValueId};

use greedy::{greedy_by_size, Buffer};

/// How to plan.
#[derive(Clone, Copy, Debug)]
pub struct PlanOptions {
    /// Let element-wise and reshaping ops write over a dying operand.
    pub in_place: bool,
    /// Scratch bytes a node's kernel needs during its step. The scratch
    /// region is the largest of these (steps run one at a time).
    pub scratch_bytes: fn(&Graph, &Node) -> u64,
}

impl Default for PlanOptions {
    fn default() -> PlanOptions {
        PlanOptions {
            in_place: true,
            scratch_bytes: no_scratch,
        }
    }
}

/// The scratch model until kernels declare their needs: none. The CPU and
/// NPU backends supply their own.
pub fn no_scratch(_: &Graph, _: &Node) -> u64 {
    0
}

/// The weights region of a module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WeightsLayout {
    /// Weight name -> (offset, aligned size).
    pub places: HashMap<String, (u64, u64)>,
    /// The region's size.
    pub bytes: u64,
}

/// The weights region of a module: every declared weight in name order, each
/// at a 64-byte aligned offset. The same for every graph of the module.
pub fn weights_layout(m: &Module) -> Result<WeightsLayout, String> {
    let mut layout = HashMap::new();
    let mut end = 0u64;
    for (name, w) in m.weights.iter() {
        let bytes = value_bytes(&w.ty)
            .ok_or_else(|| format!("weight @{name} has a non-static type {}", w.ty))?;
        let size = align_up(bytes);
        layout.insert(name.to_string(), (end, size));
        end += size;
    }
    Ok(WeightsLayout {
        places: layout,
        bytes: end,
    })
}

/// The operand positions whose storage a node's single result may reuse:
/// element-wise unary and binary ops (`unary`, `binary`, `cast`, `gelu`
/// write element `i` after reading element `i`), and ops that only
/// reinterpret their data operand's bytes (`identity`, `reshape`,
/// `squeeze`, `unsqueeze`).
pub fn in_place_candidates(op: &Op) -> &'static [usize] {
    match op {
        Op::Binary(_) => &[0, 1],
        Op::Unary(_)
        | Op::Cast(_)
        | Op::Gelu(_)
        | Op::Identity(_)
        | Op::Reshape(_)
        | Op::Squeeze(_)
        | Op::Unsqueeze(_) => &[0],
        _ => &[],
    }
}

/// The operand node `n`'s result may be computed in place of, if any: a
/// candidate operand ([`in_place_candidates`]) in the arena that dies at this
/// node, is not a graph output, has not been reused already, and has exactly
/// the result's byte size and element width (so element `i` sits at the
/// same bytes in both).
pub fn in_place_operand(
    g: &Graph,
    n: usize,
    live: &[Option<(usize, usize)>],
    in_arena: &[bool],
    reused: &[bool],
) -> Option<ValueId> {
    let node = &g.nodes[n];
    let [out] = node.outputs[..] else {
        return None;
    };
    if !in_arena[out.index()] {
        return None;
    }
    let out_ty = g.ty(out);
    in_place_candidates(&node.op)
        .iter()
        .filter_map(|&p| node.inputs.get(p).copied())
        .find(|&x| {
            let x_ty = g.ty(x);
            in_arena[x.index()]
                && !reused[x.index()]
                && live[x.index()].is_some_and(|l| l.1 == n)
                && !g.outputs.contains(&x)
                && x_ty.dtype.bits() == out_ty.dtype.bits()
                && value_bytes(x_ty).is_some()
                && value_bytes(x_ty) == value_bytes(out_ty)
        })
}

/// The KV cache places of `g`: every graph input that a `kv_write` writes
/// (operand 0), laid out in input-name order, and that `kv_write`'s result
/// at the same offset, in place of it: value -> (offset, in place of), and
/// the region's size.
type KvPlaces = HashMap<ValueId, (u64, Option<ValueId>)>;

fn kv_cache_places(g: &Graph, size: &[u64]) -> (KvPlaces, u64) {
    let mut writes: Vec<(ValueId, ValueId)> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::KvWrite(_)))
        .filter(|n| matches!(g.value(n.inputs[0]).def, ValueDef::Input))
        .map(|n| (n.inputs[0], n.outputs[0]))
        .collect();
    writes.sort_by(|a, b| g.value(a.0).name.cmp(&g.value(b.0).name));
    let mut places = HashMap::new();
    let mut end = 0u64;
    for (cache, written) in writes {
        if places.contains_key(&cache) {
            continue; // written twice: the first write's place holds
        }
        places.insert(cache, (end, None));
        places.insert(written, (end, Some(cache)));
        end += size[cache.index()];
    }
    (places, end)
}

/// Plans graph `g` of module `m` (see the module doc). Fails, naming the
/// value, when a shape is not static.
pub fn plan_graph(g: &Graph, m: &Module, opts: &PlanOptions) -> Result<MemoryPlan, String> {
    let live = lifetimes(g);
    let weights = weights_layout(m)?;
    let mut is_constant = vec![false; g.value_count()];
    for node in &g.nodes {
        if matches!(node.op, Op::Constant(_)) {
            for v in &node.outputs {
                is_constant[v.index()] = true;
            }
        }
    }
    let mut size = vec![0u64; g.value_count()];
    let mut in_arena = vec![false; g.value_count()];
    for (id, v) in g.values() {
        if live[id.index()].is_none() {
            continue;
        }
        let sigil = if matches!(v.def, ValueDef::Weight(_)) {
            '@'
        } else {
            '%'
        };
        let bytes = value_bytes(&v.ty).ok_or_else(|| {
            format!(
                "graph @{}: {sigil}{} has type {} with unbound dims (run bucket-specialize first)",
                g.name, v.name, v.ty
            )
        })?;
        size[id.index()] = align_up(bytes);
        in_arena[id.index()] = !matches!(v.def, ValueDef::Weight(_)) && !is_constant[id.index()];
    }

    // The KV cache: each cache input and its in-place `kv_write`, in
    // input-name order.
    let (kv, kv_bytes) = kv_cache_places(g, &size);
    for (&v, _) in kv.iter() {
        in_arena[v.index()] = false;
    }

    // In-place chains share one buffer; buffer lifetimes span the chain.
    let mut buffer_of: Vec<Option<usize>> = vec![None; g.value_count()];
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut in_place: HashMap<ValueId, ValueId> = HashMap::new();
    let mut reused = vec![false; g.value_count()];
    let new_buffer = |v: ValueId, buffers: &mut Vec<Buffer>, buffer_of: &mut [Option<usize>]| {
        let (first, last) = live[v.index()].expect("planned values are live");
        buffer_of[v.index()] = Some(buffers.len());
        buffers.push(Buffer {
            size: size[v.index()],
            first,
            last,
        });
    };
    for &v in &g.inputs {
        if in_arena[v.index()] && buffer_of[v.index()].is_none() {
            new_buffer(v, &mut buffers, &mut buffer_of);
        }
    }
    for n in 0..g.nodes.len() {
        let src = if opts.in_place {
            in_place_operand(g, n, &live, &in_arena, &reused)
        } else {
            None
        };
        for &out in &g.nodes[n].outputs {
            if !in_arena[out.index()] {
                continue;
            }
            match src {
                Some(x) => {
                    let b = buffer_of[x.index()].expect("operands are placed first");
                    buffer_of[out.index()] = Some(b);
                    buffers[b].last = buffers[b].last.max(live[out.index()].expect("live").1);
                    reused[x.index()] = true;
                    in_place.insert(out, x);
                }
                None => new_buffer(out, &mut buffers, &mut buffer_of),
            }
        }
    }
    let placement = greedy_by_size(&buffers);

    let mut plan = MemoryPlan::default();
    let mut constants_end = 0u64;
    for (id, v) in g.values() {
        let Some(l) = live[id.index()] else { continue };
        let (region, offset, live_range) = match &v.def {
            ValueDef::Weight(w) => {
                let &(offset, _) = weights
                    .places
                    .get(w)
                    .ok_or_else(|| format!("graph @{}: @{w} is not a declared weight", g.name))?;
                (Region::Weights, offset, None)
            }
            _ if kv.contains_key(&id) => {
                let (offset, _) = kv[&id];
                (Region::KvCache, offset, None)
            }
            _ if is_constant[id.index()] => {
                let offset = constants_end;
                constants_end += size[id.index()];
                (Region::Constants, offset, None)
            }
            _ => {
                let b = buffer_of[id.index()].expect("arena values have a buffer");
                (Region::Arena, placement.offsets[b], Some(l))
            }
        };
        plan.tensors.push(TensorPlan {
            name: v.name.clone(),
            region,
            offset,
            size: size[id.index()],
            live: live_range,
            in_place: in_place
                .get(&id)
                .or(kv.get(&id).and_then(|(_, src)| src.as_ref()))
                .map(|x| g.value(*x).name.clone()),
        });
    }
    plan.regions.arena = placement.size;
    plan.regions.kv_cache = kv_bytes;
    plan.regions.weights = weights.bytes;
    plan.regions.constants = constants_end;
    plan.regions.scratch = g
        .nodes
        .iter()
        .map(|n| align_up((opts.scratch_bytes)(g, n)))
        .max()
        .unwrap_or(0);
    plan.lower_bound = MemoryPlan::live_peak(&plan.tensors);
    plan.check()
        .map_err(|e| format!("graph @{}: the planner made a bad plan: {e}", g.name))?;
    Ok(plan)
}
