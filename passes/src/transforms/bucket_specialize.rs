//! `bucket-specialize`: one graph per sequence-length bucket, with the
//! symbolic length bound, and the choice of buckets from a length profile.

use std::collections::{BTreeMap, HashMap};

use slmcc_ir::{BucketInfo, Dim, Graph, Module, TensorType};

use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;
use crate::specialize::substitute_everywhere;
use crate::transforms::const_fold::{self, ConstFold};
use crate::transforms::{dce::Dce, shape_infer::ShapeInfer};

/// Options of `bucket-specialize`.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "buckets",
        kind: OptionKind::IntList,
        default: "128,256,512",
        help: "the sequence-length buckets, e.g. 128,256,512",
    },
    OptionSpec {
        name: "profile",
        kind: OptionKind::Str,
        default: "",
        help: "a histogram of real prompt lengths (lines `LENGTH [COUNT]`); when set, \
               the buckets are chosen from it instead",
    },
    OptionSpec {
        name: "max-buckets",
        kind: OptionKind::POSITIVE,
        default: "3",
        help: "with `profile`: how many buckets to choose",
    },
    OptionSpec {
        name: "symbol",
        kind: OptionKind::Str,
        default: "seq",
        help: "the symbol to bind",
    },
    OptionSpec {
        name: "max-elements",
        kind: OptionKind::COUNT,
        default: "65536",
        help: "largest result (in elements) to fold into a constant once the symbol is bound",
    },
];

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("graphs-specialized", "symbolic graphs specialized"),
    Statistic::new("graphs-created", "bucket graphs created"),
    Statistic::new("nodes-folded", "nodes folded to constants once the length was bound"),
    Statistic::new("nodes-removed", "nodes removed as dead after folding"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "bucket-specialize",
    summary: "one graph per sequence-length bucket (`@main` -> `@main_128`, ...), seq bound and folded",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(BucketSpecialize::from_options(o))),
};

/// Replaces every graph whose inputs mention `symbol` (`seq`) by one graph
/// per bucket: `@G` becomes `@G_128`, `@G_256`, ... (the bucket size after an
/// underscore, in ascending order, where `@G` was). In each, `symbol` is
/// bound to the bucket in the input types, in every result type and in op
/// attributes (symbolic constants, split sizes); then the new graphs are
/// re-inferred (`shape-infer`), what became constant is folded
/// (`const-fold{max-elements}`) and what that left dead is removed (`dce`).
/// Each new graph gets a [`BucketInfo`] in `module.buckets` recording the
/// base graph's symbolic signature, which a runtime uses to pad inputs and
/// slice outputs. The symbolic graph is not kept: it cannot be memory-planned,
/// and inputs longer than the largest bucket are refused by the runtime.
/// Graphs whose inputs do not mention the symbol are left alone.
///
/// The buckets are `buckets`, or, when `profile` names a file, the
/// `max-buckets` buckets [`choose_buckets`] picks from its histogram.
///
/// Requires: a graph that verifies. Guarantees: graphs that verify, no
/// graph input mentions `symbol`; fails, naming the graph and node, when an
/// op rejects its operands at some bucket. Statistics: `graphs-specialized`,
/// `graphs-created`, `nodes-folded`, `nodes-removed`.
pub struct BucketSpecialize {
    /// Ascending, without repeats.
    buckets: Vec<usize>,
    profile: String,
    max_buckets: i64,
    symbol: String,
    max_elements: i64,
}

impl BucketSpecialize {
    pub fn from_options(o: &PassOptions) -> BucketSpecialize {
        BucketSpecialize {
            buckets: {
                let mut b: Vec<usize> = o.ints("buckets").iter().map(|&v| v as usize).collect();
                b.sort_unstable();
                b.dedup();
                b
            },
            profile: o.str("profile").to_string(),
            max_buckets: o.int("max-buckets"),
            symbol: o.str("symbol").to_string(),
            max_elements: o.int("max-elements"),
        }
    }

    /// The buckets this instance specializes for, ascending.
    fn buckets(&self) -> Result<Vec<usize>, String> {
        if self.profile.is_empty() {
            return Ok(self.buckets.clone());
        }
        let text = std::fs::read_to_string(&self.profile)
            .map_err(|e| format!("cannot read profile {}: {e}", self.profile))?;
        let hist = parse_profile(&text).map_err(|e| format!("{}: {e}", self.profile))?;
        let buckets = choose_buckets(&hist, self.max_buckets as usize);
        if buckets.is_empty() {
            return Err(format!(
                "{}: the profile has no prompt lengths",
                self.profile
            ));
        }
        Ok(buckets)
    }
}

/// Parses `128,256,512`: positive sizes, returned sorted without repeats.
pub fn parse_buckets(text: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        match item.parse::<usize>() {
            Ok(n) if n > 0 && n <= i64::MAX as usize => out.push(n),
            _ => {
                return Err(format!(
                    "bad bucket `{item}` in `{text}` (expected positive integers, e.g. 128,256,512)"
                ))
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Parses a prompt-length profile: one entry per line, `LENGTH COUNT` (or
/// `LENGTH,COUNT`), or `LENGTH` alone for one prompt; `#` starts a comment.
/// Repeated lengths add up.
pub fn parse_profile(text: &str) -> Result<Vec<(usize, u64)>, String> {
    let mut hist: BTreeMap<usize, u64> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|f| !f.is_empty())
            .collect();
        let bad = || format!("line {}: expected `LENGTH [COUNT]`, got `{line}`", i + 1);
        let (len, count) = match fields[..] {
            [l] => (l.parse().map_err(|_| bad())?, 1),
            [l, c] => (l.parse().map_err(|_| bad())?, c.parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        let e = hist.entry(len).or_insert(0u64);
        *e = e.saturating_add(count);
    }
    Ok(hist.into_iter().collect())
}

/// The buckets, at most `max_buckets` of them, that minimise the expected
/// number of padded tokens when each prompt of `histogram` (`(length,
/// count)` pairs) is padded to the smallest bucket that holds it. The largest
/// length is always a bucket, so every prompt fits.
///
/// Some optimal choice uses only lengths that occur (lowering a bucket to the
/// longest prompt it serves never costs more), so this is a dynamic program
/// over the sorted distinct lengths: `best[k][j]` is the cheapest cover of
/// the `j` shortest lengths with `k` buckets, the last at length `j`,
/// `O(max_buckets · n²)`. Among equally cheap choices the one with fewer
/// buckets wins. Lengths with a zero count are ignored; returns the buckets
/// ascending (empty for an empty histogram or `max_buckets == 0`).
pub fn choose_buckets(histogram: &[(usize, u64)], max_buckets: usize) -> Vec<usize> {
    let mut merged: BTreeMap<usize, u128> = BTreeMap::new();
    for &(len, count) in histogram {
        if count > 0 {
            *merged.entry(len).or_insert(0) += u128::from(count);
        }
    }
    let lens: Vec<usize> = merged.keys().copied().collect();
    let counts: Vec<u128> = merged.values().copied().collect();
    let n = lens.len();
    if n == 0 || max_buckets == 0 {
        return Vec::new();
    }
    let k_max = max_buckets.min(n);
    let mut prefix = vec![0u128; n + 1];
    for j in 0..n {
        prefix[j + 1] = prefix[j] + counts[j];
    }
    // Padded tokens when lengths i..j (exclusive) share bucket lens[j - 1].
    let cost = |i: usize, j: usize| lens[j - 1] as u128 * (prefix[j] - prefix[i]);
    const INF: u128 = u128::MAX;
    let mut best = vec![vec![INF; n + 1]; k_max + 1];
    let mut parent = vec![vec![0usize; n + 1]; k_max + 1];
    best[0][0] = 0;
    for k in 1..=k_max {
        for j in k..=n {
            for i in (k - 1)..j {
                if best[k - 1][i] == INF {
                    continue;
                }
                let c = best[k - 1][i] + cost(i, j);
                if c < best[k][j] {
                    best[k][j] = c;
                    parent[k][j] = i;
                }
            }
        }
    }
    let k = (1..=k_max)
        .min_by_key(|&k| (best[k][n], k))
        .expect("k_max >= 1");
    let mut out = Vec::with_capacity(k);
    let (mut k, mut j) = (k, n);
    while k > 0 {
        out.push(lens[j - 1]);
        j = parent[k][j];
        k -= 1;
    }
    out.reverse();
    out
}

/// Total tokens after padding every prompt of `histogram` to the smallest
/// bucket that holds it; `None` when a prompt is longer than every bucket.
pub fn padded_tokens(histogram: &[(usize, u64)], buckets: &[usize]) -> Option<u128> {
    let mut sorted = buckets.to_vec();
    sorted.sort_unstable();
    histogram.iter().try_fold(0u128, |acc, &(len, count)| {
        let b = sorted.iter().find(|&&b| b >= len)?;
        Some(acc + *b as u128 * u128::from(count))
    })
}

/// True when a type mentions the symbol.
fn mentions(ty: &TensorType, symbol: &str) -> bool {
    ty.shape
        .dims()
        .iter()
        .any(|d| d.symbols().contains(&symbol))
}

/// `g` with `symbol` bound to `size` in every value type and op attribute;
/// types are re-inferred by the caller.
fn bind_graph(g: &Graph, symbol: &str, size: usize, name: String) -> Result<Graph, String> {
    let subst: HashMap<String, Dim> = [(symbol.to_string(), Dim::fixed(size as i64))].into();
    let mut out = g.clone();
    out.name = name;
    substitute_everywhere(&mut out, &subst)?;
    Ok(out)
}

impl Pass for BucketSpecialize {
    fn name(&self) -> &'static str {
        "bucket-specialize"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let name = self.name();
        let buckets = self.buckets().map_err(|e| failed(name, e))?;
        let symbol = self.symbol.as_str();
        let mut specialized = Module {
            name: module.name.clone(),
            weights: module.weights.clone(),
            ..Module::default()
        };
        // Which new graphs replace which original, by position.
        let mut made: Vec<(usize, BucketInfo)> = Vec::new();
        for (gi, g) in module.graphs.iter().enumerate() {
            if !g.inputs.iter().any(|&v| mentions(g.ty(v), symbol)) {
                continue;
            }
            stats.add("graphs-specialized", 1);
            for &b in &buckets {
                let new_name = format!("{}_{b}", g.name);
                let taken = module.graphs.iter().any(|o| o.name == new_name)
                    || specialized.graphs.iter().any(|o| o.name == new_name);
                if taken {
                    return Err(failed(
                        name,
                        format!("graph @{}: bucket graph @{new_name} already exists", g.name),
                    ));
                }
                specialized
                    .graphs
                    .push(bind_graph(g, symbol, b, new_name).map_err(|e| failed(name, e))?);
                made.push((
                    gi,
                    BucketInfo {
                        base: g.name.clone(),
                        symbol: symbol.to_string(),
                        size: b as i64,
                        inputs: g.inputs.iter().map(|&v| g.ty(v).clone()).collect(),
                        outputs: g.outputs.iter().map(|&v| g.ty(v).clone()).collect(),
                    },
                ));
            }
        }
        if made.is_empty() {
            return Ok(false);
        }
        let wrap = |e: PassError| match e {
            PassError::Failed { message, .. } => failed(name, message),
            other => other,
        };
        let mut inner = Statistics::default();
        ShapeInfer.run(&mut specialized, &mut inner).map_err(wrap)?;
        let fold = PassOptions::resolve(
            "const-fold",
            const_fold::OPTIONS,
            &[("max-elements".to_string(), self.max_elements.to_string())],
        )?;
        ConstFold::from_options(&fold)
            .run(&mut specialized, &mut inner)
            .map_err(wrap)?;
        Dce.run(&mut specialized, &mut inner).map_err(wrap)?;
        stats.add("graphs-created", specialized.graphs.len() as u64);
        stats.add("nodes-folded", inner.get("nodes-folded"));
        stats.add("nodes-removed", inner.get("nodes-removed"));

        let mut new_graphs = specialized.graphs.into_iter();
        let mut out = Vec::with_capacity(module.graphs.len() + made.len());
        for (gi, g) in std::mem::take(&mut module.graphs).into_iter().enumerate() {
            let here: Vec<&BucketInfo> = made
                .iter()
                .filter(|(i, _)| *i == gi)
                .map(|(_, b)| b)
                .collect();
            if here.is_empty() {
                out.push(g);
                continue;
            }
            module.buckets.remove(&g.name);
            for info in here {
                let ng = new_graphs.next().expect("one new graph per bucket record");
                module.buckets.insert(ng.name.clone(), info.clone());
                out.push(ng);
            }
        }
        module.graphs = out;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_buckets() {
        assert_eq!(
            parse_buckets("512, 128,256,128").unwrap(),
            vec![128, 256, 512]
        );
        assert!(parse_buckets("128,0").is_err());
        assert!(parse_buckets("12x").unwrap_err().contains("`12x`"));
    }

    #[test]
    fn parses_profiles() {
        let h = parse_profile("# lengths\n45 3\n100,2\n45\n\n7 # one\n").unwrap();
        assert_eq!(h, vec![(7, 1), (45, 4), (100, 2)]);
        assert_eq!(
            parse_profile("1 2 3").unwrap_err(),
            "line 1: expected `LENGTH [COUNT]`, got `1 2 3`"
        );
    }

    #[test]
    fn one_bucket_is_the_longest_prompt() {
        assert_eq!(choose_buckets(&[(10, 5), (300, 1), (40, 2)], 1), vec![300]);
        assert!(choose_buckets(&[], 3).is_empty());
        assert!(choose_buckets(&[(10, 1)], 0).is_empty());
        assert_eq!(choose_buckets(&[(10, 0), (20, 1)], 2), vec![20]);
    }

    #[test]
    fn picks_the_cheapest_split() {
        // Many short prompts and a few long ones: {60, 500} pads 60·110 + 500·2
        // = 7600 tokens, {30, 500} 30·100 + 500·12 = 9000.
        let h = [(30, 100), (60, 10), (500, 2)];
        let b = choose_buckets(&h, 2);
        assert_eq!(b, vec![60, 500]);
        assert_eq!(padded_tokens(&h, &b), Some(7600));
        assert_eq!(padded_tokens(&h, &[30, 500]), Some(9000));
        assert_eq!(padded_tokens(&h, &[30, 60]), None);
        // With enough buckets every length gets its own, and no token is padded.
        assert_eq!(choose_buckets(&h, 5), vec![30, 60, 500]);
        // Fewer buckets win ties.
        assert_eq!(choose_buckets(&[(64, 1), (64, 1)], 3), vec![64]);
    }

    #[test]
    fn dynamic_program_matches_brute_force() {
        // Every subset of lengths that contains the longest, on small histograms.
        let cases: &[&[(usize, u64)]] = &[
            &[(3, 7), (5, 1), (8, 4), (13, 2), (21, 9), (34, 1)],
            &[(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
            &[(100, 1), (101, 50), (400, 3), (401, 1), (1000, 20)],
        ];
        for h in cases {
            let lens: Vec<usize> = h.iter().map(|e| e.0).collect();
            for k in 1..=lens.len() {
                let mut best = u128::MAX;
                for mask in 0u32..(1 << lens.len()) {
                    let set: Vec<usize> = (0..lens.len())
                        .filter(|i| mask & (1 << i) != 0)
                        .map(|i| lens[i])
                        .collect();
                    if set.len() <= k {
                        if let Some(c) = padded_tokens(h, &set) {
                            best = best.min(c);
                        }
                    }
                }
                let got = choose_buckets(h, k);
                assert!(got.len() <= k);
                assert_eq!(padded_tokens(h, &got), Some(best), "{h:?} k={k}");
            }
        }
    }
}
