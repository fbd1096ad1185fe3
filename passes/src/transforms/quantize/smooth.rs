//! Smoothing before quantization: SmoothQuant (Xiao et al., 2023) and AWQ
//! (Lin et al., 2024). Both pick a positive scale `s_j` per input channel
//! `j` of the activations `x` that some linear layers read, divide the
//! activations by it and multiply row `j` of every such weight by it. In
//! real arithmetic `(x / s) · (diag(s) W) = x W`, so the model computes the
//! same function; what changes is what quantization loses. SmoothQuant
//! moves the activations' outlier channels into the weights, so per-token
//! INT8 activations lose less (`s_j = max|x_j|^α / max|W_j|^(1-α)`). AWQ
//! protects the weights' rows that meet large activations: it searches
//! `α` in `s_j = rms(x_j)^α` (normalised so that `√(max s · min s) = 1`)
//! for the least expected output error of the rounded weights,
//! `Σ_w tr(ΔWᵀ H ΔW)`, `ΔW = diag(1/s) Q(diag(s) W) − W`, `H = E[xᵀx]` the
//! calibration Hessian; `α = 0` (`s = 1`, plain rounding) is a candidate,
//! so the search never does worse than round-to-nearest on that measure.
//! AWQ takes the activation magnitude from the Hessian's diagonal (the
//! channel's root mean square) where the paper uses its mean absolute
//! value.
//!
//! Contract: [`smooth`] looks at every activation `x` that `quantize`
//! would quantize products of (see `calibration_points`). It smooths the
//! site when `x` is made by a norm whose per-channel parameters are `f32`
//! module weights of `[K]` used by that norm only (`rms_norm`,
//! `add_rms_norm`, `layer_norm` over the last axis, `add_layer_norm`), `x`
//! is read by nothing but products by `f32` module weights of `[K, N]`
//! (as their activations), none of them a kept LM head, and those weights
//! are read by nothing else. The division by `s` is folded into the norm:
//! its scale `w + offset` and bias become `(w + offset) / s` and `b / s`.
//! The weights and the norm parameters are replaced in place (same names);
//! each weight's calibration statistics (`@w.hessian`, `@w.absmax`) are
//! rescaled to describe `x / s`. Other sites are left as they are and
//! counted as skipped. Needs `@w.absmax` (SmoothQuant) or `@w.hessian`
//! (AWQ) for the site's weights, which `--calib` adds.

use std::collections::HashMap;

use slmcc_ir::{DType, Graph, Module, Op, OpDef, Tensor, ValueDef, ValueId};

use super::rtn::{Rounding, Rtn, Scheme, WeightQuantizer};
use super::{calibration_points, ABSMAX_SUFFIX, HESSIAN_SUFFIX};

/// How [`smooth`] chooses the scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Smooth {
    /// SmoothQuant with migration strength `alpha / 100`.
    SmoothQuant { alpha_percent: u8 },
    /// AWQ's search.
    Awq,
}

/// The sites [`smooth`] changed and those it left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Smoothed {
    pub sites: u64,
    pub skipped: u64,
}

/// The candidates of AWQ's search: `α = i / AWQ_GRID` for `i` in
/// `0..=AWQ_GRID`.
pub const AWQ_GRID: usize = 20;

/// The columns of a weight that AWQ's search measures the error on.
pub const AWQ_COLUMNS: usize = 256;

/// Smooths every site of `module` that qualifies (see the module docs).
pub fn smooth(
    module: &mut Module,
    how: Smooth,
    rounding: Rounding,
    keep_lm_head: bool,
) -> Result<Smoothed, String> {
    let mut out = Smoothed::default();
    for gi in 0..module.graphs.len() {
        for site in sites(module, gi, keep_lm_head, &mut out.skipped) {
            let s = scales(module, &site, how, rounding)?;
            apply(module, &site, &s)?;
            out.sites += 1;
        }
    }
    Ok(out)
}

/// One activation to smooth: the norm's parameters and the weights.
struct Site {
    /// Where the division by the scales goes.
    fold: Fold,
    /// The weights of the products that read the activation.
    weights: Vec<String>,
}

/// What makes a smoothed activation, and so absorbs the division.
enum Fold {
    /// A norm: its scale weight, its `offset`, and its bias weight.
    Norm {
        scale: String,
        offset: f32,
        bias: Option<String>,
    },
    /// A gated MLP (`swiglu`, `geglu`): `act(x·gate) · (x·up)`, whose output
    /// channel `j` is linear in column `j` of `up`; the weight holding `up`
    /// and its first column (`up` is the second half of a fused weight).
    GluUp { weight: String, first: usize },
}

fn sites(module: &Module, gi: usize, keep_lm_head: bool, skipped: &mut u64) -> Vec<Site> {
    let g = &module.graphs[gi];
    let mut by_x: Vec<(ValueId, Vec<String>)> = Vec::new();
    for (x, ws) in calibration_points(g) {
        match by_x.iter_mut().find(|(v, _)| *v == x) {
            Some((_, all)) => all.extend(ws),
            None => by_x.push((x, ws)),
        }
    }
    let uses = weight_uses(module);
    let mut out = Vec::new();
    for (x, mut weights) in by_x {
        weights.sort();
        weights.dedup();
        match site(module, g, x, weights, &uses, keep_lm_head) {
            Ok(s) => out.push(s),
            Err(why) => {
                tracing::debug!("smooth: %{} left as it is: {why}", g.value(x).name);
                *skipped += 1;
            }
        }
    }
    out
}

/// How many node operands read each module weight, over every graph.
fn weight_uses(module: &Module) -> HashMap<String, usize> {
    let mut uses = HashMap::new();
    for g in &module.graphs {
        for node in &g.nodes {
            for &v in &node.inputs {
                if let ValueDef::Weight(name) = &g.value(v).def {
                    *uses.entry(name.clone()).or_insert(0) += 1;
                }
            }
        }
    }
    uses
}

fn site(
    module: &Module,
    g: &Graph,
    x: ValueId,
    weights: Vec<String>,
    uses: &HashMap<String, usize>,
    keep_lm_head: bool,
) -> Result<Site, String> {
    if g.outputs.contains(&x) {
        return Err("a graph output".into());
    }
    let users: Vec<usize> = (0..g.nodes.len())
        .filter(|&i| g.nodes[i].inputs.contains(&x))
        .collect();
    let mut reads = 0;
    for &i in &users {
        let node = &g.nodes[i];
        let product = matches!(node.op, Op::MatMul(_) | Op::Glu(_))
            && node.inputs[0] == x
            && !node.inputs[1..].contains(&x);
        if !product {
            return Err(format!("also read by `{}`", node.op.mnemonic()));
        }
        if keep_lm_head && node.outputs.iter().any(|o| g.outputs.contains(o)) {
            return Err("read by the LM head, which stays f32".into());
        }
        reads += node.inputs.len() - 1;
    }
    let weight_reads: usize = weights
        .iter()
        .map(|w| uses.get(w).copied().unwrap_or(0))
        .sum();
    if weight_reads != reads {
        return Err("its products also have operands computed at run time, or their weights have other readers".into());
    }
    for w in &weights {
        let t = weight_data(module, w)?;
        if t.dtype() != DType::F32 || t.shape().len() != 2 || t.shape().contains(&0) {
            return Err(format!("@{w} is not a non-empty f32 matrix"));
        }
    }
    let Some(p) = g.nodes.iter().position(|n| n.outputs.contains(&x)) else {
        return Err("not made by a node".into());
    };
    let node = &g.nodes[p];
    if let Op::Glu(_) = node.op {
        return glu_site(module, g, node, x, weights, uses);
    }
    let (out, scale, offset, bias) = match &node.op {
        Op::RmsNorm(n) => (0, 1, n.offset, None),
        Op::AddRmsNorm(n) => (1, 2, n.offset, None),
        Op::LayerNorm(n) if n.axis == -1 || n.axis + 1 == g.ty(x).rank() as i64 => {
            (0, 1, 0.0, Some(2))
        }
        Op::AddLayerNorm(_) => (1, 2, 0.0, Some(3)),
        op => {
            return Err(format!(
                "made by `{}`, not a norm or a gated MLP",
                op.mnemonic()
            ))
        }
    };
    if node.outputs[out] != x {
        return Err("not the norm's normalised result".into());
    }
    let k = g.ty(x).shape.dims().last().and_then(|d| d.as_fixed());
    let param = |i: usize| -> Result<Option<String>, String> {
        let Some(&v) = node.inputs.get(i) else {
            return Ok(None);
        };
        let ValueDef::Weight(name) = &g.value(v).def else {
            return Err("norm parameters computed at run time".into());
        };
        let t = weight_data(module, name)?;
        if t.dtype() != DType::F32 || t.shape().len() != 1 || Some(t.shape()[0] as i64) != k {
            return Err(format!("norm parameter @{name} is not f32[K]"));
        }
        if uses.get(name) != Some(&1) {
            return Err(format!("norm parameter @{name} has other readers"));
        }
        Ok(Some(name.clone()))
    };
    let scale = param(scale)?.ok_or("a norm without its scale")?;
    let bias = match bias {
        Some(i) => param(i)?,
        None => None,
    };
    Ok(Site {
        fold: Fold::Norm {
            scale,
            offset,
            bias,
        },
        weights,
    })
}

/// The site of the output `x` of gated MLP `node`: its `up` columns take
/// the division.
fn glu_site(
    module: &Module,
    g: &Graph,
    node: &slmcc_ir::Node,
    x: ValueId,
    weights: Vec<String>,
    uses: &HashMap<String, usize>,
) -> Result<Site, String> {
    let &up = node.inputs.last().expect("a glu has operands");
    let ValueDef::Weight(name) = &g.value(up).def else {
        return Err("a gated MLP by weights computed at run time".into());
    };
    let t = weight_data(module, name)?;
    let inter = g.ty(x).shape.dims().last().and_then(|d| d.as_fixed());
    let cols = t.shape().get(1).map(|&c| c as i64);
    let first = match node.inputs.len() {
        3 => 0,
        _ => inter.ok_or("a symbolic width")? as usize,
    };
    if t.dtype() != DType::F32 || t.shape().len() != 2 || cols != inter.map(|n| n + first as i64) {
        return Err(format!(
            "the gated MLP's @{name} is not an f32 matrix of its width"
        ));
    }
    if uses.get(name) != Some(&1) {
        return Err(format!("the gated MLP's @{name} has other readers"));
    }
    Ok(Site {
        fold: Fold::GluUp {
            weight: name.clone(),
            first,
        },
        weights,
    })
}

fn weight_data(module: &Module, name: &str) -> Result<std::sync::Arc<Tensor>, String> {
    module
        .weights
        .tensor(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("@{name} has no data"))
}

/// The statistic `@{weight}{suffix}` of the site's first weight.
fn statistic(module: &Module, site: &Site, suffix: &str) -> Result<Vec<f32>, String> {
    let name = format!("{}{suffix}", site.weights[0]);
    let t = weight_data(module, &name).map_err(|_| {
        format!(
            "@{} has no calibration statistics @{name} (smoothing needs --calib)",
            site.weights[0]
        )
    })?;
    t.as_f32()
        .map(<[f32]>::to_vec)
        .ok_or_else(|| format!("@{name} is not f32"))
}

/// Per channel, the largest magnitude over every weight's row.
fn weight_row_max(module: &Module, site: &Site, k: usize) -> Result<Vec<f32>, String> {
    let mut m = vec![0f32; k];
    for w in &site.weights {
        let t = weight_data(module, w)?;
        let n = t.shape()[1];
        let data = t.as_f32().ok_or("not f32")?;
        for (j, row) in data.chunks_exact(n.max(1)).enumerate() {
            m[j] = row.iter().fold(m[j], |a, v| a.max(v.abs()));
        }
    }
    Ok(m)
}

fn scales(
    module: &Module,
    site: &Site,
    how: Smooth,
    rounding: Rounding,
) -> Result<Vec<f32>, String> {
    let k = weight_data(module, &site.weights[0])?.shape()[0];
    let wmax = weight_row_max(module, site, k)?;
    match how {
        Smooth::SmoothQuant { alpha_percent } => {
            let alpha = f32::from(alpha_percent) / 100.0;
            let amax = statistic(module, site, ABSMAX_SUFFIX)?;
            if amax.len() != k {
                return Err(format!("@{}{ABSMAX_SUFFIX} is not [{k}]", site.weights[0]));
            }
            Ok(amax
                .iter()
                .zip(&wmax)
                .map(|(&a, &w)| {
                    let s = a.powf(alpha) / w.powf(1.0 - alpha);
                    if a > 0.0 && w > 0.0 && s.is_finite() {
                        s.clamp(1e-4, 1e4)
                    } else {
                        1.0
                    }
                })
                .collect())
        }
        Smooth::Awq => awq_search(module, site, k, rounding),
    }
}

/// AWQ's search over [`AWQ_GRID`] + 1 values of `α`.
fn awq_search(
    module: &Module,
    site: &Site,
    k: usize,
    rounding: Rounding,
) -> Result<Vec<f32>, String> {
    let h = statistic(module, site, HESSIAN_SUFFIX)?;
    if h.len() != k * k {
        return Err(format!(
            "@{}{HESSIAN_SUFFIX} is not [{k}, {k}]",
            site.weights[0]
        ));
    }
    let rms: Vec<f32> = (0..k).map(|j| h[j * k + j].max(0.0).sqrt()).collect();
    let weights: Vec<std::sync::Arc<Tensor>> = site
        .weights
        .iter()
        .map(|w| weight_data(module, w))
        .collect::<Result<_, _>>()?;
    let scheme = rounding.scheme(k);
    let mut best: Option<(f64, Vec<f32>)> = None;
    let mut plain = 0.0;
    let mut chosen = 0.0;
    for i in 0..=AWQ_GRID {
        let alpha = i as f32 / AWQ_GRID as f32;
        let s = awq_scales(&rms, alpha);
        let mut loss = 0.0;
        for w in &weights {
            loss += output_error(w, Some(&s), &h, scheme)?.0;
        }
        tracing::trace!("awq: @{} alpha {alpha}: {loss:e}", site.weights[0]);
        if i == 0 {
            plain = loss;
        }
        if best.as_ref().is_none_or(|(l, _)| loss < *l) {
            best = Some((loss, s));
            chosen = alpha;
        }
    }
    let (loss, s) = best.expect("at least one candidate");
    tracing::debug!(
        "awq: @{}: alpha {chosen}, expected output error {:.3} of round-to-nearest's",
        site.weights[0],
        loss / plain.max(f64::MIN_POSITIVE)
    );
    Ok(s)
}

/// `rms^α`, normalised so that `√(max · min) = 1`; channels that never
/// saw a non-zero input get the smallest scale.
fn awq_scales(rms: &[f32], alpha: f32) -> Vec<f32> {
    let floor = rms
        .iter()
        .copied()
        .filter(|&r| r > 0.0)
        .fold(f32::INFINITY, f32::min);
    let floor = if floor.is_finite() { floor } else { 1.0 };
    let s: Vec<f32> = rms.iter().map(|&r| r.max(floor).powf(alpha)).collect();
    let (lo, hi) = s
        .iter()
        .fold((f32::INFINITY, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let norm = (lo * hi).sqrt();
    s.iter().map(|v| (v / norm).clamp(1e-4, 1e4)).collect()
}

/// `tr(ΔWᵀ H ΔW)` for `ΔW = diag(1/s) Q(diag(s) W) − W` (`s = 1` when
/// `None`), and `tr(Wᵀ H W)`, the output's energy, in f64, over at most
/// [`AWQ_COLUMNS`] of `W`'s columns, evenly spaced (each column is rounded
/// on its own, so both are sums over columns and the same columns serve
/// every candidate): `O(K² · AWQ_COLUMNS)`.
pub(super) fn output_error(
    w: &Tensor,
    s: Option<&[f32]>,
    h: &[f32],
    scheme: Scheme,
) -> Result<(f64, f64), String> {
    let (k, all) = (w.shape()[0], w.shape()[1]);
    let full = w.as_f32().ok_or("not f32")?;
    let n = all.min(AWQ_COLUMNS);
    let data: Vec<f32> = full
        .chunks_exact(all)
        .flat_map(|row| (0..n).map(move |c| row[c * all / n]))
        .collect();
    let ones = vec![1f32; k];
    let s = s.unwrap_or(&ones);
    let scaled: Vec<f32> = data
        .chunks_exact(n)
        .zip(s)
        .flat_map(|(row, &sj)| row.iter().map(move |v| v * sj))
        .collect();
    let q = Rtn.quantize(&Tensor::from_f32(vec![k, n], scaled), scheme)?;
    let (qv, sc) = (q.q.to_f32_vec(), q.scale.to_f32_vec());
    let g = scheme.group;
    let delta: Vec<f64> = (0..k * n)
        .map(|idx| {
            let (j, c) = (idx / n, idx % n);
            let deq = qv[idx] * sc[j / g * n + c] / s[j];
            f64::from(deq) - f64::from(data[idx])
        })
        .collect();
    let wide: Vec<f64> = data.iter().map(|&v| f64::from(v)).collect();
    Ok((quadratic(&delta, h, k, n), quadratic(&wide, h, k, n)))
}

/// `tr(Vᵀ H V)` for `V: [K, N]` and symmetric `H: [K, K]`.
fn quadratic(v: &[f64], h: &[f32], k: usize, n: usize) -> f64 {
    let mut total = 0.0;
    for i in 0..k {
        let vi = &v[i * n..(i + 1) * n];
        for j in i..k {
            let hij = f64::from(h[i * k + j]);
            if hij == 0.0 {
                continue;
            }
            let dot: f64 = vi
                .iter()
                .zip(&v[j * n..(j + 1) * n])
                .map(|(a, b)| a * b)
                .sum();
            total += if i == j { hij * dot } else { 2.0 * hij * dot };
        }
    }
    total
}

/// Divides the norm's parameters by `s`, multiplies the weights' rows by
/// it and rescales their statistics.
fn apply(module: &mut Module, site: &Site, s: &[f32]) -> Result<(), String> {
    let map =
        |module: &mut Module, name: &str, f: &dyn Fn(usize, f32) -> f32| -> Result<(), String> {
            let t = weight_data(module, name)?;
            let v: Vec<f32> = t
                .to_f32_vec()
                .iter()
                .enumerate()
                .map(|(i, &x)| f(i, x))
                .collect();
            module
                .weights
                .insert(name.to_string(), Tensor::from_f32(t.shape().to_vec(), v));
            Ok(())
        };
    match &site.fold {
        Fold::Norm {
            scale,
            offset,
            bias,
        } => {
            let offset = *offset;
            map(module, scale, &|j, w| (w + offset) / s[j] - offset)?;
            if let Some(b) = bias {
                map(module, b, &|j, v| v / s[j])?;
            }
        }
        Fold::GluUp { weight, first } => {
            let cols = weight_data(module, weight)?.shape()[1];
            let first = *first;
            map(
                module,
                weight,
                &|i, v| match (i % cols).checked_sub(first) {
                    Some(j) => v / s[j],
                    None => v,
                },
            )?;
        }
    }
    let k = s.len();
    for w in &site.weights {
        let n = weight_data(module, w)?.shape()[1];
        map(module, w, &|i, v| v * s[i / n])?;
        let h = format!("{w}{HESSIAN_SUFFIX}");
        if module.weights.get(&h).is_some() {
            map(module, &h, &|i, v| v / (s[i / k] * s[i % k]))?;
        }
        let a = format!("{w}{ABSMAX_SUFFIX}");
        if module.weights.get(&a).is_some() {
            map(module, &a, &|j, v| v / s[j])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pass::Statistics;
    use crate::transforms::test_eval::run_main;
    use slmcc_ir::text::parse_module;
    use slmcc_ir::verify_module;

    /// A residual add + RMS norm read by two projections and a SwiGLU
    /// (K = 8), their sum and the residual the outputs.
    const SRC: &str = "module @m {
  weight @g : f32[8]
  weight @wq : f32[8, 4]
  weight @wk : f32[8, 4]
  weight @gate : f32[8, 4]
  weight @up : f32[8, 4]

  graph @main(%x: f32[32, 8], %r: f32[32, 8]) -> (f32[32, 4], f32[32, 8]) {
    %s, %y = add_rms_norm %x, %r, @g {eps = 1e-6} : f32[32, 8], f32[32, 8]
    %q = matmul %y, @wq : f32[32, 4]
    %k = matmul %y, @wk : f32[32, 4]
    %m = swiglu %y, @gate, @up : f32[32, 4]
    %a = add %q, %k : f32[32, 4]
    %o = add %a, %m : f32[32, 4]
    return %o, %s
  }
}
";

    const WEIGHTS: [&str; 4] = ["wq", "wk", "gate", "up"];

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// The module, its inputs, and calibration statistics of `%y` on those
    /// inputs; channel 3 of the norm's scale is an outlier (x 40).
    fn setup(src: &str) -> (Module, Vec<(&'static str, Tensor)>) {
        let mut m = parse_module(src).unwrap();
        let mut seed = 7;
        let mut rand =
            |n: usize, a: f32| -> Vec<f32> { (0..n).map(|_| a * lcg(&mut seed)).collect() };
        let mut g: Vec<f32> = rand(8, 0.3).iter().map(|v| 1.0 + v).collect();
        g[3] *= 40.0;
        m.weights.insert("g", Tensor::from_f32(vec![8], g.clone()));
        for w in WEIGHTS {
            m.weights
                .insert(w, Tensor::from_f32(vec![8, 4], rand(32, 0.5)));
        }
        let (x, r) = (rand(256, 1.0), rand(256, 1.0));
        // %y, as add_rms_norm computes it.
        let y: Vec<f32> = x
            .chunks(8)
            .zip(r.chunks(8))
            .flat_map(|(a, b)| {
                let s: Vec<f32> = a.iter().zip(b).map(|(p, q)| p + q).collect();
                let ms = s.iter().map(|v| v * v).sum::<f32>() / 8.0;
                let inv = 1.0 / (ms + 1e-6).sqrt();
                s.iter()
                    .zip(&g)
                    .map(|(v, w)| v * inv * w)
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut h = vec![0f32; 64];
        let mut amax = vec![0f32; 8];
        for row in y.chunks(8) {
            for i in 0..8 {
                amax[i] = amax[i].max(row[i].abs());
                for j in 0..8 {
                    h[i * 8 + j] += row[i] * row[j] / 32.0;
                }
            }
        }
        for w in WEIGHTS {
            m.weights.insert(
                format!("{w}{HESSIAN_SUFFIX}"),
                Tensor::from_f32(vec![8, 8], h.clone()),
            );
            m.weights.insert(
                format!("{w}{ABSMAX_SUFFIX}"),
                Tensor::from_f32(vec![8], amax.clone()),
            );
        }
        let inputs = vec![
            ("x", Tensor::from_f32(vec![32, 8], x)),
            ("r", Tensor::from_f32(vec![32, 8], r)),
        ];
        (m, inputs)
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        let (a, b) = (a.to_f32_vec(), b.to_f32_vec());
        a.iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    fn rms_diff(a: &Tensor, b: &Tensor) -> f64 {
        let (a, b) = (a.to_f32_vec(), b.to_f32_vec());
        let s: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(x - y).powi(2))
            .sum();
        (s / a.len() as f64).sqrt()
    }

    const INT4: Rounding = Rounding { bits: 4, group: 0 };

    /// The outputs before and after smoothing `m`, which smooths `sites`
    /// sites and leaves the first output as it was (to f32 rounding).
    fn smoothed_outputs(
        m: &mut Module,
        inputs: &[(&str, Tensor)],
        how: Smooth,
        sites: u64,
    ) -> (Vec<Tensor>, Vec<Tensor>) {
        let before = run_main(m, inputs);
        let done = smooth(m, how, INT4, true).unwrap();
        assert_eq!(done, Smoothed { sites, skipped: 0 }, "{how:?}");
        verify_module(m).unwrap();
        let after = run_main(m, inputs);
        assert!(max_abs_diff(&before[0], &after[0]) < 1e-3, "{how:?}");
        (before, after)
    }

    #[test]
    fn smoothing_keeps_the_function() {
        for how in [Smooth::SmoothQuant { alpha_percent: 50 }, Smooth::Awq] {
            let (mut m, inputs) = setup(SRC);
            let g0 = m.weights.tensor("g").unwrap().unwrap();
            let (before, after) = smoothed_outputs(&mut m, &inputs, how, 1);
            assert_eq!(
                before[1].to_f32_vec(),
                after[1].to_f32_vec(),
                "the residual is not scaled"
            );
            if how != Smooth::Awq {
                // The outlier channel's scale moved out of the norm.
                let g1 = m.weights.tensor("g").unwrap().unwrap();
                assert!(g1.to_f32_vec()[3] < g0.to_f32_vec()[3] / 2.0);
            }
        }
    }

    /// The gated MLP's output, read by a down projection, is smoothed too:
    /// its division goes into `up`'s columns (separate or fused weights).
    #[test]
    fn a_gated_mlp_output_folds_into_up() {
        let down = SRC
            .replace(
                "weight @up : f32[8, 4]\n",
                "weight @up : f32[8, 4]\n  weight @down : f32[4, 4]\n",
            )
            .replace(
                "%o = add %a, %m : f32[32, 4]",
                "%d = matmul %m, @down : f32[32, 4]\n    %o = add %a, %d : f32[32, 4]",
            );
        let fused = down
            .replace(
                "weight @gate : f32[8, 4]\n  weight @up : f32[8, 4]",
                "weight @gu : f32[8, 8]",
            )
            .replace("swiglu %y, @gate, @up", "swiglu %y, @gu");
        for (src, up) in [(&down, "up"), (&fused, "gu")] {
            for how in [Smooth::SmoothQuant { alpha_percent: 50 }, Smooth::Awq] {
                let (mut m, inputs) = setup(src);
                let mut seed = 3;
                let gu: Vec<f32> = (0..64).map(|_| lcg(&mut seed)).collect();
                m.weights.insert("gu", Tensor::from_f32(vec![8, 8], gu));
                // The fused weight reads %y: the statistics of the others.
                for suffix in [HESSIAN_SUFFIX, ABSMAX_SUFFIX] {
                    let t = m.weights.tensor(&format!("wk{suffix}")).unwrap().unwrap();
                    m.weights.insert(format!("gu{suffix}"), t.as_ref().clone());
                }
                m.weights.insert(
                    "down",
                    Tensor::from_f32(vec![4, 4], (0..16).map(|_| lcg(&mut seed)).collect()),
                );
                let h: Vec<f32> = (0..16)
                    .map(|i| if i % 5 == 0 { (1 + i) as f32 } else { 0.1 })
                    .collect();
                m.weights
                    .insert("down.hessian", Tensor::from_f32(vec![4, 4], h));
                m.weights.insert(
                    "down.absmax",
                    Tensor::from_f32(vec![4], vec![1.0, 9.0, 0.5, 2.0]),
                );
                let up0 = m.weights.tensor(up).unwrap().unwrap().to_f32_vec();
                smoothed_outputs(&mut m, &inputs, how, 2);
                assert_ne!(m.weights.tensor(up).unwrap().unwrap().to_f32_vec(), up0);
            }
        }
    }

    /// Quantizes with `options` after smoothing or not; the output's RMS
    /// error from f32 on the calibration inputs.
    fn quantized_error(options: &str) -> f64 {
        let (mut m, inputs) = setup(SRC);
        let want = run_main(&m, &inputs);
        let mut pass = crate::registry::create_pass(
            &crate::pipeline::parse_pipeline(&format!("quantize{{{options}}}")).unwrap()[0],
        )
        .unwrap();
        pass.run(&mut m, &mut Statistics::default()).unwrap();
        verify_module(&m).unwrap();
        assert!(m
            .weights
            .iter()
            .all(|(n, _)| !n.ends_with(HESSIAN_SUFFIX) && !n.ends_with(ABSMAX_SUFFIX)));
        rms_diff(&run_main(&m, &inputs)[0], &want[0])
    }

    #[test]
    fn smoothquant_lowers_the_w8a8_error_of_an_outlier_channel() {
        let rtn = quantized_error("weights=int8");
        let sq = quantized_error("weights=int8,smooth=smoothquant,alpha=50");
        // 0.064 against 0.140.
        assert!(
            sq < 0.7 * rtn,
            "smoothquant {sq} against round to nearest {rtn}"
        );
    }

    /// AWQ's measure is the expected output error on the calibration rows,
    /// which are these inputs: never above plain rounding's.
    #[test]
    fn awq_does_not_raise_the_weight_only_error() {
        let rtn = quantized_error("weights=int4,group=0,activations=f32");
        let awq = quantized_error("weights=int4,group=0,activations=f32,smooth=awq");
        assert!(
            awq <= rtn * 1.001,
            "awq {awq} against round to nearest {rtn}"
        );
        // And with the outlier channel it protects, far below (0.49 against 3.17).
        assert!(awq < 0.5 * rtn, "awq {awq} against round to nearest {rtn}");
    }

    #[test]
    fn sites_with_other_readers_are_left_alone() {
        // %y also feeds an add; @wq is also read by a second activation.
        for (from, to) in [
            ("return %o, %s", "%t = add %s, %y : f32[32, 8]\n    return %o, %t"),
            ("%o = add %a, %m : f32[32, 4]", "%o0 = add %a, %m : f32[32, 4]\n    %z = matmul %x, @wq : f32[32, 4]\n    %o = add %o0, %z : f32[32, 4]"),
        ] {
            let src = SRC.replace(from, to);
            let (mut m, _) = setup(&src);
            let g0 = m.weights.tensor("g").unwrap().unwrap().to_f32_vec();
            let done = smooth(&mut m, Smooth::SmoothQuant { alpha_percent: 50 }, INT4, true).unwrap();
            assert_eq!(done.sites, 0, "{src}");
            assert_eq!(m.weights.tensor("g").unwrap().unwrap().to_f32_vec(), g0);
        }
    }
}
