//! Layout-only chains: `reshape → transpose → reshape` that only moves
//! whole axes is one `transpose`.
//!
//! PyTorch's decomposition of `scaled_dot_product_attention` transposes
//! the keys' last two axes by folding the batch and head axes into one
//! (`[b, h, t, d]` → `[b·h, t, d]`), transposing (`[b·h, d, t]`) and
//! unfolding again (`[b, h, d, t]`): a `transpose(k, [0, 1, 3, 2])` in
//! disguise. [`chain_permutation`] decides such chains by what they do to
//! the data, not by the exporter's node sequence: the first reshape must
//! only merge consecutive axes of `x` (and add or drop unit axes), the
//! transpose moves the merged groups, and the second reshape must split
//! them back so that every non-unit axis of the result is exactly one
//! non-unit axis of `x`. Then element `[.., a, ..]` of the result is
//! element `[.., a, ..]` of `x` with the axes permuted, which is what a
//! `transpose` computes.

use egg::{rewrite as rw, Id, Subst};
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::{Dim, Op};

use super::{attr_ints, try_add, ty, var, Build, EGraph};
use crate::eqsat::language::Lang;
use crate::eqsat::runner::Rewrite;

#[rustfmt::skip]
pub fn rules() -> Vec<Rewrite> {
    vec![
        rw!("layout-chain"; "(reshape ?z2 (transpose ?p (reshape ?z1 ?x ?s1)) ?s2)" => { as_transpose() }),
    ]
}

/// The non-unit axes of `dims`: `(axis, dim)`.
fn atoms(dims: &[Dim]) -> Vec<(usize, Dim)> {
    let one = Dim::fixed(1);
    dims.iter()
        .enumerate()
        .filter(|(_, d)| **d != one)
        .map(|(a, d)| (a, d.clone()))
        .collect()
}

/// Groups the sequence `atoms` into the consecutive runs whose products are
/// `target`'s dims, in order (a unit dim takes an empty run). Each run is
/// the unique one: every atom is at least 2, so a run's product grows with
/// each atom it takes. `None` when `target` splits an atom.
fn group(atoms: &[(usize, Dim)], target: &[Dim]) -> Option<Vec<Vec<(usize, Dim)>>> {
    let one = Dim::fixed(1);
    let mut rest = atoms.iter();
    let mut groups = Vec::with_capacity(target.len());
    for t in target {
        let mut run = Vec::new();
        let mut product = one.clone();
        while product != *t {
            let atom = rest.next()?;
            product = &product * &atom.1;
            run.push(atom.clone());
        }
        groups.push(run);
    }
    rest.next().is_none().then_some(groups)
}

/// The permutation `q` with `transpose(x, q)` equal to
/// `reshape(transpose(reshape(x, mid), perm), out)`, given the dims of `x`,
/// of the first reshape's result `mid` and of the chain's result `out`;
/// `None` unless the chain only moves whole axes and `x` and `out` have the
/// same rank and the same number of unit axes.
pub fn chain_permutation(x: &[Dim], mid: &[Dim], perm: &[i64], out: &[Dim]) -> Option<Vec<i64>> {
    if perm.len() != mid.len() || x.len() != out.len() {
        return None;
    }
    let groups = group(&atoms(x), mid)?;
    let moved: Vec<(usize, Dim)> = perm
        .iter()
        .map(|&p| groups.get(usize::try_from(p).ok()?).cloned())
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    let split = group(&moved, out)?;
    let one = Dim::fixed(1);
    let mut units = (0..x.len()).filter(|&a| x[a] == one);
    let mut q = Vec::with_capacity(out.len());
    for (d, run) in out.iter().zip(&split) {
        let from = match run.as_slice() {
            [] if *d == one => units.next()?,
            [(axis, _)] => *axis,
            _ => return None,
        };
        q.push(from as i64);
    }
    units.next().is_none().then_some(q)
}

/// `reshape(transpose(reshape(x)))` → `transpose(x, q)` (or `x`) when
/// [`chain_permutation`] proves the chain moves whole axes.
fn as_transpose() -> Build<impl Fn(&mut EGraph, Id, &Subst) -> Option<Id>> {
    Build(|eg: &mut EGraph, id: Id, s: &Subst| {
        let (x, z1, s1) = (s[var("?x")], s[var("?z1")], s[var("?s1")]);
        let inner = eg.lookup(Lang::Reshape(vec![z1, x, s1].into()))?;
        let mid = ty(eg, inner)?.shape.dims().to_vec();
        let perm = attr_ints(eg, s[var("?p")])?;
        let q = chain_permutation(
            ty(eg, x)?.shape.dims(),
            &mid,
            &perm,
            ty(eg, id)?.shape.dims(),
        )?;
        if q.iter().enumerate().all(|(i, &a)| a == i as i64) {
            return Some(x);
        }
        try_add(eg, Op::Transpose(Transpose { perm: q }), &[x])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eqsat::rules::canonical;
    use crate::eqsat::rules::testing::assert_rewrites;

    fn dims(s: &[&str]) -> Vec<Dim> {
        s.iter()
            .map(|d| d.parse::<i64>().map_or_else(|_| Dim::sym(d), Dim::fixed))
            .collect()
    }

    #[test]
    fn sdpa_key_transpose_is_a_transpose_of_the_last_two_axes() {
        // [1, 4, seq, 16] → [4, seq, 16] → [4, 16, seq] → [1, 4, 16, seq].
        let q = chain_permutation(
            &dims(&["1", "4", "seq", "16"]),
            &dims(&["4", "seq", "16"]),
            &[0, 2, 1],
            &dims(&["1", "4", "16", "seq"]),
        );
        assert_eq!(q, Some(vec![0, 1, 3, 2]));
        // Batch and heads merged: [2, 4, seq, 16] → [8, seq, 16] → ... → [2, 4, 16, seq].
        let q = chain_permutation(
            &dims(&["2", "4", "seq", "16"]),
            &dims(&["8", "seq", "16"]),
            &[0, 2, 1],
            &dims(&["2", "4", "16", "seq"]),
        );
        assert_eq!(q, Some(vec![0, 1, 3, 2]));
    }

    #[test]
    fn chains_that_move_data_within_an_axis_are_not_transposes() {
        // Splitting merged axes in another order reorders data: [2, 3] → [6] → [3, 2].
        assert_eq!(
            chain_permutation(&dims(&["2", "3"]), &dims(&["6"]), &[0], &dims(&["3", "2"])),
            None
        );
        // A reshape that splits an axis of x.
        assert_eq!(
            chain_permutation(
                &dims(&["1", "seq", "64"]),
                &dims(&["1", "seq", "4", "16"]),
                &[0, 2, 1, 3],
                &dims(&["1", "4", "seq", "16"]),
            ),
            None
        );
        // Merged axes left merged: the ranks differ.
        assert_eq!(
            chain_permutation(
                &dims(&["2", "4", "seq"]),
                &dims(&["8", "seq"]),
                &[1, 0],
                &dims(&["seq", "8"])
            ),
            None
        );
    }

    #[test]
    fn the_rule_rewrites_the_exported_chain() {
        let mut r = canonical::rules();
        r.extend(rules());
        assert_rewrites(
            &r,
            "%k: f32[1, 4, seq, 16]",
            "(reshape false (transpose (list 0 2 1) (reshape false %k (constant i64[3]=[-1,seq,16]))) \
             (constant i64[4]=[1,4,16,seq]))",
            "(transpose (list 0 1 3 2) %k)",
        );
    }
}
