//! Index functions: integer and boolean tensors known as a function of
//! their own indices, for proving what a mask computes.
//!
//! Exporters build the causal mask from `range`, `unsqueeze`, `slice`,
//! `concat`, `gather_nd` (dynamo) or `gather` from a `[seq, 1]` reshape
//! (TorchScript's `Flatten`), comparisons, `cum_sum`, `where` and fills
//! (`constant_of_shape`: a padding mask known to keep everything) over
//! symbolic lengths, so no constant folding can see it. An [`IndexFn`] describes such
//! a value exactly as pieces: each an affine guard over the index variables
//! `i0, i1, ...` and the shape's symbols (`seq`), and on it an affine integer
//! or a boolean. The pieces partition the index space (`0 <= ik < dim k`,
//! every symbol `>= 1`); pieces whose guard is infeasible are dropped.
//! Infeasibility is decided by Fourier–Motzkin elimination with integer
//! tightening, which is sound for proofs (when it cannot decide it says
//! feasible, and the proof fails).
//!
//! [`infer`] gives the function of an op's result from its operands'; a
//! value the domain cannot describe (a float, an op not listed, too many
//! pieces) has none.

use std::collections::{BTreeMap, HashMap};

use slmcc_ir::ops::binary::BinaryKind;
use slmcc_ir::ops::unary::UnaryKind;
use slmcc_ir::{DType, Dim, Fact, Known, Op};

/// A variable: an index of the value, or a shape symbol.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Var {
    Idx(usize),
    Sym(String),
}

/// `Σ coef · var + c`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Lin {
    terms: BTreeMap<Var, i64>,
    c: i64,
}

impl Lin {
    pub fn constant(c: i64) -> Lin {
        Lin {
            terms: BTreeMap::new(),
            c,
        }
    }

    pub fn var(v: Var) -> Lin {
        Lin {
            terms: BTreeMap::from([(v, 1)]),
            c: 0,
        }
    }

    pub fn idx(k: usize) -> Lin {
        Lin::var(Var::Idx(k))
    }

    /// A dim that is affine in its symbols.
    pub fn of_dim(d: &Dim) -> Option<Lin> {
        let syms: Vec<String> = d.symbols().iter().map(|s| s.to_string()).collect();
        let at = |vals: &[(usize, i64)]| {
            let bind: HashMap<String, i64> = syms
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    (
                        s.clone(),
                        vals.iter().find(|(j, _)| *j == i).map_or(0, |v| v.1),
                    )
                })
                .collect();
            d.eval(&bind)
        };
        let c = at(&[])?;
        let mut lin = Lin::constant(c);
        for (i, s) in syms.iter().enumerate() {
            let coef = at(&[(i, 1)])? - c;
            if at(&[(i, 3)])? != c + 3 * coef {
                return None;
            }
            lin = lin.add(&Lin::var(Var::Sym(s.clone())).scale(coef));
        }
        let all: Vec<(usize, i64)> = (0..syms.len()).map(|i| (i, 2)).collect();
        (at(&all)? == lin.eval_all(2)).then_some(lin)
    }

    fn eval_all(&self, v: i64) -> i64 {
        self.c + self.terms.values().map(|k| k * v).sum::<i64>()
    }

    pub fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.c)
    }

    pub fn add(&self, o: &Lin) -> Lin {
        let mut out = self.clone();
        for (v, k) in &o.terms {
            let e = out.terms.entry(v.clone()).or_insert(0);
            *e += k;
            if *e == 0 {
                out.terms.remove(v);
            }
        }
        out.c += o.c;
        out
    }

    pub fn scale(&self, k: i64) -> Lin {
        if k == 0 {
            return Lin::constant(0);
        }
        Lin {
            terms: self.terms.iter().map(|(v, c)| (v.clone(), c * k)).collect(),
            c: self.c * k,
        }
    }

    pub fn sub(&self, o: &Lin) -> Lin {
        self.add(&o.scale(-1))
    }

    /// Replaces each index variable `ik` by `map(k)`.
    pub fn reindex(&self, map: &dyn Fn(usize) -> Lin) -> Lin {
        let mut out = Lin::constant(self.c);
        for (v, k) in &self.terms {
            let term = match v {
                Var::Idx(i) => map(*i),
                s => Lin::var(s.clone()),
            };
            out = out.add(&term.scale(*k));
        }
        out
    }

    fn coef(&self, v: &Var) -> i64 {
        self.terms.get(v).copied().unwrap_or(0)
    }
}

/// The value on a piece.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Int(Lin),
    Bool(bool),
}

/// A guard (every `lin >= 0`) and the value where it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub guard: Vec<Lin>,
    pub val: Val,
}

/// A tensor as a function of its indices (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexFn {
    pub pieces: Vec<Piece>,
}

/// Guarded values: what a piece splits into.
type Split = Vec<(Vec<Lin>, Val)>;

/// How [`product`] combines the values of one piece of each operand,
/// given the piece's guard.
type Combine<'a> = dyn Fn(&[Lin], &[&Val]) -> Option<Split> + 'a;

/// More pieces than this and the value is not tracked.
const MAX_PIECES: usize = 64;

/// `0 <= ik < dim k` for a shape, and `s >= 1` for its symbols.
pub fn domain(shape: &[Dim]) -> Vec<Lin> {
    let mut out = Vec::new();
    for (k, d) in shape.iter().enumerate() {
        out.push(Lin::idx(k));
        if let Some(d) = Lin::of_dim(d) {
            out.push(d.sub(&Lin::idx(k)).add(&Lin::constant(-1)));
        }
        for s in d.symbols() {
            out.push(Lin::var(Var::Sym(s.to_string())).add(&Lin::constant(-1)));
        }
    }
    out
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

/// Whether `cons` (each `lin >= 0`, integer variables) may have a solution:
/// `false` is a proof that it has none.
pub fn feasible(mut cons: Vec<Lin>) -> bool {
    loop {
        let mut next = Vec::with_capacity(cons.len());
        for mut l in cons {
            if l.terms.is_empty() {
                if l.c < 0 {
                    return false;
                }
                continue;
            }
            let g = l.terms.values().fold(0, |g, &k| gcd(g, k));
            if g > 1 {
                l.terms.values_mut().for_each(|k| *k /= g);
                l.c = l.c.div_euclid(g);
            }
            next.push(l);
        }
        cons = next;
        let Some(v) = cons.iter().find_map(|l| l.terms.keys().next().cloned()) else {
            return true;
        };
        let (mut lower, mut upper, mut rest) = (Vec::new(), Vec::new(), Vec::new());
        for l in cons {
            match l.coef(&v) {
                k if k > 0 => lower.push(l),
                k if k < 0 => upper.push(l),
                _ => rest.push(l),
            }
        }
        for lo in &lower {
            for up in &upper {
                let (a, b) = (lo.coef(&v), -up.coef(&v));
                rest.push(lo.scale(b).add(&up.scale(a)));
            }
        }
        if rest.len() > 400 {
            return true;
        }
        cons = rest;
    }
}

impl IndexFn {
    pub fn constant(val: Val) -> IndexFn {
        IndexFn {
            pieces: vec![Piece {
                guard: Vec::new(),
                val,
            }],
        }
    }

    /// The same function read through `map` (index `k` of the old value is
    /// `map(k)` in terms of the new value's indices).
    pub fn reindex(&self, map: &dyn Fn(usize) -> Lin) -> IndexFn {
        let pieces = self
            .pieces
            .iter()
            .map(|p| Piece {
                guard: p.guard.iter().map(|g| g.reindex(map)).collect(),
                val: match &p.val {
                    Val::Int(l) => Val::Int(l.reindex(map)),
                    b => b.clone(),
                },
            })
            .collect();
        IndexFn { pieces }
    }
}

/// Combines the pieces of `fs` pairwise into the pieces `f` gives (each an
/// extra guard and a value, from the combined guard and the values),
/// keeping the feasible ones within `dom`.
fn product(fs: &[&IndexFn], dom: &[Lin], f: &Combine<'_>) -> Option<IndexFn> {
    let mut combos: Vec<(Vec<Lin>, Vec<&Val>)> = vec![(Vec::new(), Vec::new())];
    for g in fs {
        let mut next = Vec::new();
        for (guard, vals) in &combos {
            for p in &g.pieces {
                let mut guard = guard.clone();
                guard.extend(p.guard.iter().cloned());
                let all: Vec<Lin> = guard.iter().chain(dom).cloned().collect();
                if feasible(all) {
                    let mut vals = vals.clone();
                    vals.push(&p.val);
                    next.push((guard, vals));
                }
            }
        }
        combos = next;
        if combos.len() > MAX_PIECES {
            return None;
        }
    }
    let mut pieces = Vec::new();
    for (guard, vals) in combos {
        for (extra, val) in f(&guard, &vals)? {
            let mut g = guard.clone();
            g.extend(extra);
            let all: Vec<Lin> = g.iter().chain(dom).cloned().collect();
            if feasible(all) {
                pieces.push(Piece { guard: g, val });
            }
        }
    }
    (pieces.len() <= MAX_PIECES).then_some(IndexFn { pieces })
}

/// `a <= b` split into its true and false pieces.
fn le(a: &Lin, b: &Lin) -> Split {
    vec![
        (vec![b.sub(a)], Val::Bool(true)),
        (vec![a.sub(b).add(&Lin::constant(-1))], Val::Bool(false)),
    ]
}

/// `a == b` split into its true and false pieces.
fn eq(a: &Lin, b: &Lin) -> Split {
    let one = Lin::constant(-1);
    vec![
        (vec![b.sub(a), a.sub(b)], Val::Bool(true)),
        (vec![a.sub(b).add(&one)], Val::Bool(false)),
        (vec![b.sub(a).add(&one)], Val::Bool(false)),
    ]
}

/// Reads an operand of type `from` broadcast to `to` (NumPy rules).
fn broadcast(f: &IndexFn, from: &[Dim], to: &[Dim]) -> IndexFn {
    let shift = to.len() - from.len();
    let one = Dim::fixed(1);
    f.reindex(&|k| {
        if from[k] == one && to[k + shift] != one {
            Lin::constant(0)
        } else {
            Lin::idx(k + shift)
        }
    })
}

/// The value known for a constant whose elements are all equal.
fn of_known(f: &Fact) -> Option<IndexFn> {
    let v = f.value.as_ref()?;
    if f.ty.dtype == DType::Bool {
        let t = v.as_tensor(DType::Bool)?;
        let first = *t.as_bool()?.first()?;
        let all = t.as_bool()?.iter().all(|&b| b == first);
        return all.then(|| IndexFn::constant(Val::Bool(first)));
    }
    let dims = match v {
        Known::Tensor(t) if t.dtype().is_int() => v.as_dims()?.values,
        Known::Dims(s) => s.values.clone(),
        _ => return None,
    };
    let first = dims.first()?;
    let all = dims.iter().all(|d| d == first);
    all.then(|| Lin::of_dim(first).map(|l| IndexFn::constant(Val::Int(l))))?
}

/// The single integer of a known operand (`[1]` or scalar), as a `Lin`.
fn scalar(f: &Fact) -> Option<Lin> {
    match f.value.as_ref()?.as_dims()?.values.as_slice() {
        [d] => Lin::of_dim(d),
        _ => None,
    }
}

/// The index function of `op`'s result `out`, from its operands' facts and
/// functions.
pub fn infer(op: &Op, ins: &[(&Fact, Option<&IndexFn>)], out: &Fact) -> Option<IndexFn> {
    if !(out.ty.dtype.is_int() || out.ty.dtype == DType::Bool) {
        return None;
    }
    if out.value.is_some() {
        if let Some(f) = of_known(out) {
            return Some(f);
        }
    }
    let shape = out.ty.shape.dims();
    let dom = domain(shape);
    let f = |i: usize| ins.get(i).and_then(|x| x.1);
    let dims = |i: usize| ins[i].0.ty.shape.dims();
    match op {
        Op::Range(_) => {
            let (start, delta) = (scalar(ins[0].0)?, scalar(ins[2].0)?.as_const()?);
            Some(IndexFn::constant(Val::Int(
                start.add(&Lin::idx(0).scale(delta)),
            )))
        }
        Op::Identity(_) if dims(0) == shape => f(0).cloned(),
        // A reshape that only adds or drops unit dims (`[1, seq]` → `[seq, 1]`,
        // TorchScript's `Flatten`) keeps every other index.
        Op::Reshape(_) => {
            let (from, one) = (dims(0), Dim::fixed(1));
            let old: Vec<usize> = (0..from.len()).filter(|&k| from[k] != one).collect();
            let new: Vec<usize> = (0..shape.len()).filter(|&k| shape[k] != one).collect();
            let same =
                old.len() == new.len() && old.iter().zip(&new).all(|(&i, &j)| from[i] == shape[j]);
            same.then_some(())?;
            Some(f(0)?.reindex(&|k| match old.iter().position(|&i| i == k) {
                Some(p) => Lin::idx(new[p]),
                None => Lin::constant(0),
            }))
        }
        Op::Unsqueeze(u) => {
            let rank = shape.len() as i64;
            let mut axes: Vec<usize> = u
                .axes
                .iter()
                .map(|&a| (if a < 0 { a + rank } else { a }) as usize)
                .collect();
            axes.sort_unstable();
            let kept: Vec<usize> = (0..shape.len()).filter(|k| !axes.contains(k)).collect();
            Some(f(0)?.reindex(&|k| Lin::idx(kept[k])))
        }
        Op::Squeeze(q) => {
            let rank = dims(0).len() as i64;
            let axes: Vec<usize> = q
                .axes
                .iter()
                .map(|&a| (if a < 0 { a + rank } else { a }) as usize)
                .collect();
            let mut map = Vec::new();
            for k in 0..dims(0).len() {
                let kept = map.iter().filter(|l: &&Lin| l.as_const().is_none()).count();
                map.push(if axes.contains(&k) {
                    Lin::constant(0)
                } else {
                    Lin::idx(kept)
                });
            }
            Some(f(0)?.reindex(&|k| map[k].clone()))
        }
        Op::Expand(_) => Some(broadcast(f(0)?, dims(0), shape)),
        Op::Slice(_) => {
            let x = dims(0);
            let (starts, axes) = (
                ins[1].0.value.as_ref()?.as_dims()?.values,
                ins[3].0.value.as_ref()?.as_dims()?.values,
            );
            let steps = match ins.get(4) {
                Some(s) => s.0.value.as_ref()?.as_dims()?.values,
                None => vec![Dim::fixed(1); axes.len()],
            };
            let mut map: Vec<Lin> = (0..x.len()).map(Lin::idx).collect();
            for ((s, a), st) in starts.iter().zip(&axes).zip(&steps) {
                let a = a.as_fixed()?;
                let a = if a < 0 { a + x.len() as i64 } else { a } as usize;
                let step = st.as_fixed().filter(|&st| st > 0)?;
                let start = match s.as_fixed() {
                    Some(v) if v < 0 => Lin::of_dim(&x[a])?.add(&Lin::constant(v)),
                    Some(v) if v >= i32::MAX as i64 => return None,
                    _ => Lin::of_dim(s)?,
                };
                map[a] = start.add(&Lin::idx(a).scale(step));
            }
            Some(f(0)?.reindex(&|k| map[k].clone()))
        }
        Op::Concat(c) => {
            let rank = shape.len() as i64;
            let a = (if c.axis < 0 { c.axis + rank } else { c.axis }) as usize;
            let mut pieces = Vec::new();
            let mut offset = Lin::constant(0);
            for (i, _) in ins.iter().enumerate() {
                let len = Lin::of_dim(&dims(i)[a])?;
                let off = offset.clone();
                let part = f(i)?.reindex(&|k| {
                    if k == a {
                        Lin::idx(a).sub(&off)
                    } else {
                        Lin::idx(k)
                    }
                });
                let lo = Lin::idx(a).sub(&off);
                let hi = off.add(&len).sub(&Lin::idx(a)).add(&Lin::constant(-1));
                for mut p in part.pieces {
                    p.guard.push(lo.clone());
                    p.guard.push(hi.clone());
                    if feasible(p.guard.iter().chain(&dom).cloned().collect()) {
                        pieces.push(p);
                    }
                }
                offset = offset.add(&len);
            }
            (pieces.len() <= MAX_PIECES).then_some(IndexFn { pieces })
        }
        Op::Gather(g) => {
            let (data, idx) = (dims(0), dims(1));
            let rank = data.len() as i64;
            let a = (if g.axis < 0 { g.axis + rank } else { g.axis }) as usize;
            let q = idx.len();
            // The index read at the result's indices `a .. a + q`.
            let at = f(1)?.reindex(&|k| Lin::idx(a + k));
            let (d, bound) = (f(0)?, Lin::of_dim(data.get(a)?)?);
            product(&[&at], &dom, &|guard, vals| {
                let Val::Int(l) = vals[0] else { return None };
                in_range(l, &bound, guard, &dom).then_some(())?;
                let read = |k: usize| match k.cmp(&a) {
                    std::cmp::Ordering::Less => Lin::idx(k),
                    std::cmp::Ordering::Equal => l.clone(),
                    std::cmp::Ordering::Greater => Lin::idx(k + q - 1),
                };
                Some(pieces_of(d.reindex(&read)))
            })
        }
        Op::GatherNd(g) if g.batch_dims == 0 => {
            let (data, idx) = (dims(0), dims(1));
            let m = idx.last()?.as_fixed()? as usize;
            let q = idx.len() - 1;
            // Component j of the index at the result's leading indices.
            let comps: Vec<IndexFn> = (0..m)
                .map(|j| {
                    f(1).map(|fi| {
                        fi.reindex(&|k| {
                            if k == q {
                                Lin::constant(j as i64)
                            } else {
                                Lin::idx(k)
                            }
                        })
                    })
                })
                .collect::<Option<_>>()?;
            let fs: Vec<&IndexFn> = comps.iter().collect();
            let d = f(0)?;
            let data_dims: Vec<Dim> = data.to_vec();
            product(&fs, &dom, &|guard, vals| {
                let idx: Vec<Lin> = vals[..m]
                    .iter()
                    .map(|v| match v {
                        Val::Int(l) => Some(l.clone()),
                        Val::Bool(_) => None,
                    })
                    .collect::<Option<_>>()?;
                // Indices must provably be in range (no negative wrap-around).
                for (k, l) in idx.iter().enumerate() {
                    in_range(l, &Lin::of_dim(&data_dims[k])?, guard, &dom).then_some(())?;
                }
                let read = |k: usize| {
                    if k < m {
                        idx[k].clone()
                    } else {
                        Lin::idx(q + k - m)
                    }
                };
                // The data's pieces, their guards read at the gathered indices.
                Some(pieces_of(d.reindex(&read)))
            })
        }
        // A fill of symbolic shape (an all-ones `attention_mask` at batch 1).
        Op::ConstantOfShape(c) => Some(IndexFn::constant(match out.ty.dtype {
            DType::Bool => Val::Bool(c.value.get_i64(0) != 0),
            _ => Val::Int(Lin::constant(c.value.get_i64(0))),
        })),
        Op::CumSum(_) => {
            let zero = f(0)?
                .pieces
                .iter()
                .all(|p| p.val == Val::Int(Lin::constant(0)));
            zero.then(|| IndexFn::constant(Val::Int(Lin::constant(0))))
        }
        Op::Cast(_) => {
            let from = ins[0].0.ty.dtype;
            let g = broadcast(f(0)?, dims(0), shape);
            product(&[&g], &dom, &|_, v| match (v[0], out.ty.dtype) {
                (Val::Bool(b), d) if d.is_int() => {
                    Some(vec![(vec![], Val::Int(Lin::constant(*b as i64)))])
                }
                (Val::Int(l), d) if d.is_int() && from.is_int() => {
                    Some(vec![(vec![], Val::Int(l.clone()))])
                }
                (Val::Int(l), DType::Bool) => Some(
                    eq(l, &Lin::constant(0))
                        .into_iter()
                        .map(|(g, v)| (g, not(&v)))
                        .collect(),
                ),
                (Val::Bool(b), DType::Bool) => Some(vec![(vec![], Val::Bool(*b))]),
                _ => None,
            })
        }
        Op::Unary(u) if u.kind == UnaryKind::Not || u.kind == UnaryKind::Neg => {
            product(&[f(0)?], &dom, &|_, v| match v[0] {
                Val::Bool(b) => Some(vec![(vec![], Val::Bool(!b))]),
                Val::Int(l) => Some(vec![(vec![], Val::Int(l.scale(-1)))]),
            })
        }
        Op::Binary(b) => {
            let (x, y) = (
                broadcast(f(0)?, dims(0), shape),
                broadcast(f(1)?, dims(1), shape),
            );
            let kind = b.kind;
            product(&[&x, &y], &dom, &|_, v| binary(kind, v[0], v[1]))
        }
        Op::Where(_) => {
            let c = broadcast(f(0)?, dims(0), shape);
            let (x, y) = (
                broadcast(f(1)?, dims(1), shape),
                broadcast(f(2)?, dims(2), shape),
            );
            product(&[&c, &x, &y], &dom, &|_, v| match v[0] {
                Val::Bool(true) => Some(vec![(vec![], v[1].clone())]),
                Val::Bool(false) => Some(vec![(vec![], v[2].clone())]),
                Val::Int(_) => None,
            })
        }
        _ => None,
    }
}

/// Whether `0 <= l < bound` wherever `guard` holds within `dom`.
fn in_range(l: &Lin, bound: &Lin, guard: &[Lin], dom: &[Lin]) -> bool {
    let below = l.scale(-1).add(&Lin::constant(-1));
    let above = l.sub(bound);
    [below, above]
        .into_iter()
        .all(|bad| !feasible(guard.iter().chain(dom).chain([&bad]).cloned().collect()))
}

/// The pieces of `f` as the guarded values [`product`]'s combination gives.
fn pieces_of(f: IndexFn) -> Split {
    f.pieces.into_iter().map(|p| (p.guard, p.val)).collect()
}

fn not(v: &Val) -> Val {
    match v {
        Val::Bool(b) => Val::Bool(!b),
        i => i.clone(),
    }
}

fn binary(kind: BinaryKind, a: &Val, b: &Val) -> Option<Split> {
    use BinaryKind::*;
    let one = |v: Val| Some(vec![(vec![], v)]);
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => match kind {
            Add => one(Val::Int(x.add(y))),
            Sub => one(Val::Int(x.sub(y))),
            Mul => match (x.as_const(), y.as_const()) {
                (Some(k), _) => one(Val::Int(y.scale(k))),
                (_, Some(k)) => one(Val::Int(x.scale(k))),
                _ => None,
            },
            Max | Min => {
                let ge = vec![x.sub(y)];
                let lt = vec![y.sub(x).add(&Lin::constant(-1))];
                let (hi, lo) = if kind == Max { (x, y) } else { (y, x) };
                Some(vec![(ge, Val::Int(hi.clone())), (lt, Val::Int(lo.clone()))])
            }
            LessOrEqual => Some(le(x, y)),
            Less => Some(le(&x.add(&Lin::constant(1)), y)),
            GreaterOrEqual => Some(le(y, x)),
            Greater => Some(le(&y.add(&Lin::constant(1)), x)),
            Equal => Some(eq(x, y)),
            _ => None,
        },
        (Val::Bool(x), Val::Bool(y)) => match kind {
            And => one(Val::Bool(*x && *y)),
            Or => one(Val::Bool(*x || *y)),
            Xor => one(Val::Bool(x != y)),
            Equal => one(Val::Bool(x == y)),
            _ => None,
        },
        _ => None,
    }
}

/// What a boolean keep-mask over `[.., s, t]` scores computes, the `s`
/// queries being the last `s` positions of the `t` keys (`past = t - s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskKind {
    /// Every key is kept (bidirectional attention, no padding).
    Full,
    /// `key <= query + past`, and with `window > 0` also
    /// `key > query + past - window` (a sliding window of `window` keys,
    /// the query's own included).
    Causal { window: i64 },
}

impl Lin {
    /// The value with each index `ik` at `idx[k]` and each symbol at `sym`.
    fn at(&self, idx: &[i64], sym: i64) -> Option<i64> {
        let mut v = self.c;
        for (var, k) in &self.terms {
            let x = match var {
                Var::Idx(i) => *idx.get(*i)?,
                Var::Sym(_) => sym,
            };
            v = v.checked_add(k.checked_mul(x)?)?;
        }
        Some(v)
    }
}

impl IndexFn {
    /// The value at the indices `idx` with every symbol at `sym`.
    fn at(&self, idx: &[i64], sym: i64) -> Option<&Val> {
        let holds = |p: &&Piece| {
            p.guard
                .iter()
                .all(|g| g.at(idx, sym).is_some_and(|v| v >= 0))
        };
        self.pieces.iter().find(holds).map(|p| &p.val)
    }
}

/// The symbol value at which [`classify`] probes a mask for its window.
const PROBE: i64 = 4096;

/// Proves what the boolean `f` over a mask of dims `mask`, broadcast to
/// the scores `[.., s, t]`, computes: every piece is checked against the
/// claimed region by Fourier–Motzkin (see [`feasible`]), so `None` means
/// no claim could be proved, not that the mask is none of these. The
/// window is read off the last query row with every symbol at a large value
/// ([`PROBE`]), then proved for all values.
pub fn classify(f: &IndexFn, mask: &[Dim], scores: &[Dim]) -> Option<MaskKind> {
    let r = scores.len();
    if r < 2 || mask.len() > r {
        return None;
    }
    let (s, t) = (Lin::of_dim(&scores[r - 2])?, Lin::of_dim(&scores[r - 1])?);
    let g = broadcast(f, mask, scores);
    let dom = domain(scores);
    let (i, j) = (Lin::idx(r - 2), Lin::idx(r - 1));
    let past = t.sub(&s);
    let never = |p: &Piece, extra: &[Lin]| {
        !feasible(p.guard.iter().chain(&dom).chain(extra).cloned().collect())
    };
    if g.pieces.iter().all(|p| p.val == Val::Bool(true)) {
        return Some(MaskKind::Full);
    }
    // The window: how many keys the last query keeps, counting back from
    // its own position, at the probe.
    let (sv, tv) = (s.at(&[], PROBE)?, t.at(&[], PROBE)?);
    let mut idx = vec![0; r];
    idx[r - 2] = sv - 1;
    let pos = sv - 1 + tv - sv;
    let mut kept = 0;
    for key in (0..=pos).rev() {
        idx[r - 1] = key;
        match g.at(&idx, PROBE)? {
            Val::Bool(true) => kept += 1,
            Val::Bool(false) => break,
            Val::Int(_) => return None,
        }
    }
    let window = if kept > pos { 0 } else { kept };
    // key > query + past, key <= query + past - window, and the region between.
    let after = j.sub(&i).sub(&past).add(&Lin::constant(-1));
    let upto = i.add(&past).sub(&j);
    let before = i.add(&past).sub(&j).add(&Lin::constant(-window));
    let within = j.sub(&i).sub(&past).add(&Lin::constant(window - 1));
    let proved = g.pieces.iter().all(|p| match p.val {
        Val::Bool(true) => {
            never(p, std::slice::from_ref(&after))
                && (window == 0 || never(p, std::slice::from_ref(&before)))
        }
        Val::Bool(false) if window == 0 => never(p, std::slice::from_ref(&upto)),
        Val::Bool(false) => never(p, &[upto.clone(), within.clone()]),
        Val::Int(_) => false,
    });
    proved.then_some(MaskKind::Causal { window })
}

/// Whether a boolean function over `[.., s, t]` scores (aligned to the
/// right) is exactly `key <= query + (t - s)`: the causal mask, the `s`
/// queries being the last `s` of the `t` keys.
pub fn is_causal(f: &IndexFn, mask: &[Dim], scores: &[Dim]) -> bool {
    classify(f, mask, scores) == Some(MaskKind::Causal { window: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fourier_motzkin_proves_integer_infeasibility() {
        let i = Lin::idx(0);
        // 0 <= i <= 0 and i >= 1.
        assert!(!feasible(vec![
            i.clone(),
            i.scale(-1),
            i.add(&Lin::constant(-1))
        ]));
        // 2i = 1 has no integer solution: 2i - 1 >= 0 and 1 - 2i >= 0.
        let two = i.scale(2);
        assert!(!feasible(vec![
            two.add(&Lin::constant(-1)),
            two.scale(-1).add(&Lin::constant(1))
        ]));
        assert!(feasible(vec![i.clone(), Lin::constant(5).sub(&i)]));
    }

    #[test]
    fn lower_triangle_is_causal() {
        let seq = Dim::sym("seq");
        let shape = [Dim::fixed(1), Dim::fixed(1), seq.clone(), seq.clone()];
        let f = IndexFn {
            pieces: le(&Lin::idx(3), &Lin::idx(2))
                .into_iter()
                .map(|(guard, val)| Piece { guard, val })
                .collect(),
        };
        assert!(is_causal(&f, &shape, &shape));
        let strict = IndexFn {
            pieces: le(&Lin::idx(3).add(&Lin::constant(1)), &Lin::idx(2))
                .into_iter()
                .map(|(guard, val)| Piece { guard, val })
                .collect(),
        };
        assert!(!is_causal(&strict, &shape, &shape));
    }

    fn pieces(parts: Vec<(Vec<Lin>, Val)>) -> IndexFn {
        IndexFn {
            pieces: parts
                .into_iter()
                .map(|(guard, val)| Piece { guard, val })
                .collect(),
        }
    }

    /// `a && b` of two comparisons, as the piece product builds it.
    fn and(a: Split, b: Split) -> IndexFn {
        let mut out = Vec::new();
        for (ga, va) in &a {
            for (gb, vb) in &b {
                let v = Val::Bool(va == &Val::Bool(true) && vb == &Val::Bool(true));
                out.push((ga.iter().chain(gb).cloned().collect(), v));
            }
        }
        pieces(out)
    }

    #[test]
    fn sliding_windows_are_classified_with_their_width() {
        let seq = Dim::sym("seq");
        let shape = [Dim::fixed(1), Dim::fixed(1), seq.clone(), seq.clone()];
        let (i, j) = (Lin::idx(2), Lin::idx(3));
        // Mistral: key <= query and key > query - 8.
        let f = and(
            le(&j, &i),
            le(&i.sub(&Lin::constant(8)).add(&Lin::constant(1)), &j),
        );
        assert_eq!(
            classify(&f, &shape, &shape),
            Some(MaskKind::Causal { window: 8 })
        );
        // Keys ahead of the query kept: neither causal nor windowed.
        let f = le(&i.sub(&Lin::constant(8)).add(&Lin::constant(1)), &j);
        assert_eq!(classify(&pieces(f), &shape, &shape), None);
        let all = IndexFn::constant(Val::Bool(true));
        assert_eq!(classify(&all, &shape, &shape), Some(MaskKind::Full));
    }
}
