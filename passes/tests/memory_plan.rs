//! Property tests of the memory planner on random DAGs: no two tensors live
//! at the same step overlap (checked here from scratch, not with the plan's
//! own check), the arena is at least the lower bound, and the greedy
//! placement's quality where it is provable.

use proptest::prelude::*;
use proptest::sample::Index;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::constant::Constant;
use slmcc_ir::ops::matmul::MatMul;
use slmcc_ir::ops::split::Split;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::{
    verify_module, DType, Dim, Fact, Graph, Module, Op, OpDef, Region, Tensor, TensorType, ValueId,
};
use slmcc_passes::memory::greedy::{greedy_by_size, live_peak, Buffer};
use slmcc_passes::memory::{plan_graph, PlanOptions};

/// One step of building a random graph: an op choice and operand picks.
#[derive(Clone, Debug)]
struct Step {
    op: u8,
    a: Index,
    b: Index,
    rows: usize,
    cols: usize,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..8,
        any::<Index>(),
        any::<Index>(),
        1usize..12,
        1usize..40,
    )
        .prop_map(|(op, a, b, rows, cols)| Step {
            op,
            a,
            b,
            rows,
            cols,
        })
}

fn shape(g: &Graph, v: ValueId) -> Vec<usize> {
    g.ty(v).shape.as_fixed().expect("static")
}

/// Appends `op` on `inputs`, typed by inference.
fn add(g: &mut Graph, op: Op, inputs: Vec<ValueId>) -> Vec<ValueId> {
    let facts: Vec<Fact> = inputs.iter().map(|&v| Fact::new(g.ty(v).clone())).collect();
    let refs: Vec<&Fact> = facts.iter().collect();
    let out = op.infer(&refs).expect("the builder only makes valid nodes");
    let base = g.value_count();
    let results = out
        .into_iter()
        .enumerate()
        .map(|(k, f)| (format!("v{}", base + k), f.ty))
        .collect();
    g.add_node(op, inputs, results).expect("fresh names")
}

/// A random DAG of 2-D f32 tensors: element-wise ops (in-place candidates),
/// broadcasts, matmuls, concats, transposes, splits (two results) and
/// constants, with some values returned.
fn build(inputs: &[(usize, usize)], steps: &[Step], outs: &[Index]) -> Module {
    let mut g = Graph::new("main");
    let mut vals: Vec<ValueId> = inputs
        .iter()
        .enumerate()
        .map(|(i, &(r, c))| {
            g.add_input(
                format!("in{i}"),
                TensorType::fixed(DType::F32, &[r as i64, c as i64]),
            )
            .unwrap()
        })
        .collect();
    for s in steps {
        let a = vals[s.a.index(vals.len())];
        let b = vals[s.b.index(vals.len())];
        let (sa, sb) = (shape(&g, a), shape(&g, b));
        let unary = |g: &mut Graph| {
            add(
                g,
                Unary {
                    kind: UnaryKind::Exp,
                }
                .into(),
                vec![a],
            )
        };
        let new = match s.op {
            0 => unary(&mut g),
            1 if sa == sb => add(
                &mut g,
                Binary {
                    kind: BinaryKind::Add,
                }
                .into(),
                vec![a, b],
            ),
            2 if sa[1] == sb[1] && (sb[0] == 1 || sa[0] == sb[0]) => add(
                &mut g,
                Binary {
                    kind: BinaryKind::Mul,
                }
                .into(),
                vec![a, b],
            ),
            3 if sa[1] == sb[0] => add(&mut g, MatMul.into(), vec![a, b]),
            4 if sa[1] == sb[1] => add(&mut g, Concat { axis: 0 }.into(), vec![a, b]),
            5 => add(&mut g, Transpose { perm: vec![1, 0] }.into(), vec![a]),
            6 if sa[0] >= 2 => {
                let h = sa[0] as i64 / 2;
                let sizes = vec![Dim::fixed(h), Dim::fixed(sa[0] as i64 - h)];
                add(&mut g, Split { axis: 0, sizes }.into(), vec![a])
            }
            7 => {
                let t = Tensor::zeros(DType::F32, vec![s.rows, s.cols]);
                add(&mut g, Constant::from_tensor(t).into(), vec![])
            }
            _ => unary(&mut g),
        };
        vals.extend(new);
    }
    let mut outputs: Vec<ValueId> = outs.iter().map(|i| vals[i.index(vals.len())]).collect();
    outputs.push(*vals.last().expect("at least one value"));
    outputs.dedup();
    g.outputs = outputs;
    let mut m = Module::new("m");
    m.graphs.push(g);
    verify_module(&m).expect("the builder makes valid graphs");
    m
}

fn dag() -> impl Strategy<Value = Module> {
    (
        prop::collection::vec((1usize..12, 1usize..40), 1..4),
        prop::collection::vec(step(), 1..40),
        prop::collection::vec(any::<Index>(), 0..3),
    )
        .prop_map(|(i, s, o)| build(&i, &s, &o))
}

/// Lifetimes recomputed by brute force: born at the defining step (inputs
/// at 0), dead at the last reading step, outputs at the last step.
fn brute_lifetimes(g: &Graph) -> Vec<Option<(usize, usize)>> {
    let last = g.nodes.len().saturating_sub(1);
    (0..g.value_count())
        .map(|i| {
            let v = ValueId(i as u32);
            let born = if g.inputs.contains(&v) {
                Some(0)
            } else {
                g.nodes.iter().position(|n| n.outputs.contains(&v))
            };
            let reads = g
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.inputs.contains(&v))
                .map(|(k, _)| k)
                .max();
            let out = g.outputs.contains(&v).then_some(last);
            let born = born.or(reads.map(|_| 0))?;
            Some((born, [Some(born), reads, out].into_iter().flatten().max()?))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn live_tensors_never_overlap(m in dag(), in_place in any::<bool>()) {
        let g = &m.graphs[0];
        let opts = PlanOptions { in_place, ..PlanOptions::default() };
        let plan = plan_graph(g, &m, &opts).unwrap();
        slmcc_ir::plan::check_against(&plan, g).unwrap();
        let live = brute_lifetimes(g);
        let arena: Vec<_> = g
            .values()
            .filter_map(|(id, v)| {
                let t = plan.get(&v.name, false)?;
                (t.region == Region::Arena).then_some((id, t))
            })
            .collect();
        for (i, (va, a)) in arena.iter().enumerate() {
            prop_assert_eq!(a.live, live[va.index()]);
            prop_assert!(a.offset % 64 == 0 && a.offset + a.size <= plan.regions.arena);
            for (vb, b) in &arena[i + 1..] {
                let (la, lb) = (live[va.index()].unwrap(), live[vb.index()].unwrap());
                let together = la.0 <= lb.1 && lb.0 <= la.1;
                let bytes = a.size > 0 && b.size > 0
                    && a.offset < b.offset + b.size && b.offset < a.offset + a.size;
                let paired = a.in_place.as_deref() == Some(&g.value(*vb).name)
                    || b.in_place.as_deref() == Some(&g.value(*va).name);
                prop_assert!(
                    !(together && bytes) || paired,
                    "%{} and %{} overlap while both live", a.name, b.name
                );
                if paired {
                    prop_assert_eq!((a.offset, a.size), (b.offset, b.size));
                }
            }
        }
        prop_assert!(plan.regions.arena >= plan.lower_bound);
        let total: u64 = arena.iter().map(|(_, t)| t.size).sum();
        prop_assert!(plan.regions.arena <= total, "worse than no reuse at all");
        // In-place reuse never raises the lower bound.
        let without = plan_graph(g, &m, &PlanOptions { in_place: false, ..opts }).unwrap();
        prop_assert!(plan.lower_bound <= without.lower_bound);
    }

    #[test]
    fn greedy_places_without_conflicts(
        bufs in prop::collection::vec((1u64..64, 0usize..30, 0usize..10), 0..60)
    ) {
        let bufs: Vec<Buffer> = bufs
            .into_iter()
            .map(|(s, first, len)| Buffer { size: s * 64, first, last: first + len })
            .collect();
        let p = greedy_by_size(&bufs);
        for (i, a) in bufs.iter().enumerate() {
            prop_assert!(p.offsets[i] + a.size <= p.size);
            for (j, b) in bufs.iter().enumerate().skip(i + 1) {
                let together = a.first <= b.last && b.first <= a.last;
                let bytes = p.offsets[i] < p.offsets[j] + b.size
                    && p.offsets[j] < p.offsets[i] + a.size;
                prop_assert!(!(together && bytes), "buffers {i} and {j} overlap");
            }
        }
        prop_assert!(p.size >= live_peak(&bufs));
    }

    /// Quality: with equal sizes greedy-by-size is interval colouring in
    /// order of birth, which is optimal: the arena is the lower bound.
    #[test]
    fn greedy_is_optimal_for_equal_sizes(
        spans in prop::collection::vec((0usize..30, 0usize..10), 0..60)
    ) {
        let bufs: Vec<Buffer> = spans
            .into_iter()
            .map(|(first, len)| Buffer { size: 128, first, last: first + len })
            .collect();
        prop_assert_eq!(greedy_by_size(&bufs).size, live_peak(&bufs));
    }
}
