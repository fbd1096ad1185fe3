//! Extraction: the cheapest equivalent of the graph outputs under the
//! target's cost model, counted over the DAG.
//!
//! Summing costs over trees counts a shared value once per use, which grows
//! exponentially with depth (the residual stream is used twice per block)
//! and drowns the local difference a fusion makes. So each class's cost is
//! the sum of the own costs of the distinct classes its choice needs
//! (greedy DAG extraction): a node's set is the union of its children's
//! sets plus itself, iterated to a fixpoint.
//!
//! The sets are bit sets over the classes, kept only where they are read
//! (classes with a choice and those below them), so extraction takes up to
//! classes²/8 bytes (5 GB at 200,000 classes): the node limit bounds it,
//! and [`super::optimize`] does not extract a graph that reaches the limit
//! before any rewrite.
//!
//! Greedy choice still prefers a plain `add` for the sum that an
//! `add_rms_norm` also yields; so once the choice is made, every needed
//! class that holds `(get k t)` of a tuple `t` already computed takes the
//! result from `t` instead, unless that would make a cycle.

use std::collections::{HashMap, HashSet};

use egg::{Id, Language, RecExpr};

use super::analysis::EGraph;
use super::cost::{node_costs, CostModel};
use super::language::Lang;

/// The chosen expression: every node needed by the roots, in dependency order.
pub struct Extracted {
    pub expr: RecExpr<Lang>,
    /// The expression node of each root.
    pub roots: Vec<Id>,
    /// The expression node chosen for each class that was needed.
    pub of_class: HashMap<Id, Id>,
}

/// A class's best node so far, its own cost, the total over the classes
/// it needs, and those classes (a bit set over dense class numbers, the
/// class itself included).
struct Best {
    node: Lang,
    own: f64,
    total: f64,
    dag: Vec<u64>,
}

/// Chooses the cheapest node of each class needed by `roots` under `model`.
pub fn extract(eg: &EGraph, roots: &[Id], model: &dyn CostModel) -> Extracted {
    let best = choose(eg, &node_costs(eg, model));
    let mut choice: HashMap<Id, Lang> = HashMap::new();
    let mut order: Vec<Id> = Vec::new();
    let roots: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    needed(&roots, &mut |c| {
        let node = best[&c].node.clone();
        let kids = node.children().iter().map(|&k| eg.find(k)).collect();
        choice.insert(c, node);
        order.push(c);
        kids
    });
    // Switching a class to `get` of a tuple already needed makes nothing new
    // needed, so one pass over the classes needed at first suffices.
    let needed_first = reach(&roots, &choice, eg);
    for &c in &order {
        if matches!(choice[&c], Lang::Get(_)) {
            continue;
        }
        let switch = eg[c].nodes.iter().find_map(|n| match n {
            Lang::Get([k, t]) => {
                let t = eg.find(*t);
                let usable = needed_first.contains(&t) && !reach(&[t], &choice, eg).contains(&c);
                usable.then(|| (eg.find(*k), n.clone()))
            }
            _ => None,
        });
        if let Some((k, n)) = switch {
            choice.insert(k, best[&k].node.clone());
            choice.insert(c, n);
        }
    }
    let mut nodes = Vec::new();
    let mut of_class = HashMap::new();
    let expr_roots = roots
        .iter()
        .map(|&r| build(r, eg, &choice, &mut nodes, &mut of_class))
        .collect();
    Extracted {
        expr: RecExpr::from(nodes),
        roots: expr_roots,
        of_class,
    }
}

/// The best node of every class by DAG cost, iterated to a fixpoint.
fn choose(eg: &EGraph, costs: &HashMap<Lang, f64>) -> HashMap<Id, Best> {
    let number: HashMap<Id, usize> = eg.classes().enumerate().map(|(i, c)| (c.id, i)).collect();
    let words = number.len().div_ceil(64);
    let tracked = cost_sets_read(eg, &number);
    let mut best: Vec<Option<Best>> = (0..number.len()).map(|_| None).collect();
    let mut changed = true;
    while changed {
        changed = false;
        for class in eg.classes() {
            let c = number[&class.id];
            let tracked = tracked[c];
            for node in &class.nodes {
                let kids: Option<Vec<usize>> = node
                    .children()
                    .iter()
                    .map(|&k| number.get(&eg.find(k)).copied())
                    .collect();
                let Some(kids) = kids else { continue };
                let mut dag = vec![0u64; if tracked { words } else { 0 }];
                let mut complete = true;
                for &k in &kids {
                    match &best[k] {
                        Some(_) if !tracked => {}
                        // A child that needs `c` would make a cycle.
                        Some(b) if b.dag[c / 64] & (1 << (c % 64)) == 0 => {
                            dag.iter_mut().zip(&b.dag).for_each(|(d, k)| *d |= k);
                        }
                        _ => complete = false,
                    }
                }
                if !complete {
                    continue;
                }
                let own = costs.get(node).copied().unwrap_or(0.0);
                // Only a class with a choice needs its total; the others
                // follow their children.
                let total = if class.nodes.len() > 1 {
                    own + sum_own(&dag, &best)
                } else {
                    0.0
                };
                if tracked {
                    dag[c / 64] |= 1 << (c % 64);
                }
                let better = match &best[c] {
                    None => true,
                    Some(b) if class.nodes.len() > 1 => total < b.total,
                    Some(b) => b.dag != dag,
                };
                if better {
                    best[c] = Some(Best {
                        node: node.clone(),
                        own,
                        total,
                        dag,
                    });
                    changed = true;
                }
            }
        }
    }
    number
        .into_iter()
        .filter_map(|(id, i)| best[i].take().map(|b| (id, b)))
        .collect()
}

/// Which classes' sets of needed classes are ever read: those with a
/// choice (their totals compare their nodes) and everything below them.
/// Every cycle runs through a class with a choice (a cycle needs a union,
/// and a union leaves two nodes in one class), so the others need no
/// cycle check either: their sets stay empty, and a graph without choices
/// (a long chain of plain ops) is extracted in linear time and memory.
fn cost_sets_read(eg: &EGraph, number: &HashMap<Id, usize>) -> Vec<bool> {
    let mut read = vec![false; number.len()];
    let mut stack: Vec<Id> = eg
        .classes()
        .filter(|c| c.nodes.len() > 1)
        .map(|c| c.id)
        .collect();
    while let Some(id) = stack.pop() {
        let Some(&c) = number.get(&eg.find(id)) else {
            continue;
        };
        if std::mem::replace(&mut read[c], true) {
            continue;
        }
        let class = &eg[id];
        stack.extend(
            class
                .nodes
                .iter()
                .flat_map(|n| n.children().iter().copied()),
        );
    }
    read
}

/// The sum of the own costs of the classes in `dag`.
fn sum_own(dag: &[u64], best: &[Option<Best>]) -> f64 {
    let mut total = 0.0;
    for (w, bits) in dag.iter().enumerate() {
        let mut bits = *bits;
        while bits != 0 {
            let d = w * 64 + bits.trailing_zeros() as usize;
            total += best[d].as_ref().map_or(0.0, |b| b.own);
            bits &= bits - 1;
        }
    }
    total
}

/// Visits each class reachable from `roots` once; `visit` returns its children.
fn needed(roots: &[Id], visit: &mut impl FnMut(Id) -> Vec<Id>) {
    let mut seen = HashSet::new();
    let mut stack: Vec<Id> = roots.to_vec();
    while let Some(c) = stack.pop() {
        if seen.insert(c) {
            stack.extend(visit(c));
        }
    }
}

/// The classes reachable from `from` through the chosen nodes.
fn reach(from: &[Id], choice: &HashMap<Id, Lang>, eg: &EGraph) -> HashSet<Id> {
    let mut seen = HashSet::new();
    needed(from, &mut |c| {
        seen.insert(c);
        choice[&c].children().iter().map(|&k| eg.find(k)).collect()
    });
    seen
}

/// Adds the chosen node of `class` and everything it needs to `expr`
/// (children first), once per class; iterative, so the graph's depth never
/// reaches the stack. The nodes go to a plain vector that becomes the
/// [`RecExpr`]: `RecExpr::add` finds its root by counting its nodes, so
/// unoptimised builds take time quadratic in the nodes through it.
fn build(
    class: Id,
    eg: &EGraph,
    choice: &HashMap<Id, Lang>,
    expr: &mut Vec<Lang>,
    of_class: &mut HashMap<Id, Id>,
) -> Id {
    // (class, whether its children are already built)
    let mut stack = vec![(class, false)];
    while let Some((c, ready)) = stack.pop() {
        if of_class.contains_key(&c) {
            continue;
        }
        let node = &choice[&c];
        if ready {
            let built = node.clone().map_children(|k| of_class[&eg.find(k)]);
            let id = Id::from(expr.len());
            expr.push(built);
            of_class.insert(c, id);
        } else {
            stack.push((c, true));
            for &k in node.children() {
                let k = eg.find(k);
                if !of_class.contains_key(&k) {
                    stack.push((k, false));
                }
            }
        }
    }
    of_class[&class]
}
