//! Calibration: the statistics of a model's activations over sample
//! inputs, which the calibrated quantization methods read (`--calib`).
//!
//! Contract: [`add_hessians`] takes a fused module (the `quantize` pass's
//! input) and windows of token ids. It runs the entry graph on each
//! window with the Cranelift CPU kernels, keeping the activation operand
//! of every product that `quantize` may quantize
//! ([`calibration_points`]). Per operand it accumulates `xᵀx` over every
//! row (token) in f64, and stores the mean as the module weight
//! `@<weight>.hessian` (`f32[K, K]`) of each weight that multiplies it,
//! which `quantize{method=gptq}` reads and then drops. The graphs are not
//! changed.

use std::collections::{HashMap, HashSet};

use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::{Module, Tensor};
use slmcc_passes::transforms::quantize::{calibration_points, HESSIAN_SUFFIX};
use slmcc_runtime::Capture;

use crate::unplanned::run_graph_jit;

/// What calibration saw.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationSummary {
    pub windows: usize,
    /// Rows (tokens) per activation.
    pub rows: usize,
    /// Weights given a Hessian.
    pub weights: usize,
}

/// Adds `@<weight>.hessian` for every quantizable weight of `module`'s
/// graph `graph`, from `windows` of token ids fed as `input_ids` (see the
/// module docs).
pub fn add_hessians(
    module: &mut Module,
    graph: &str,
    windows: &[Vec<i64>],
    options: &CpuOptions,
) -> Result<CalibrationSummary, String> {
    let g = module
        .graph(graph)
        .ok_or_else(|| format!("no graph @{graph}"))?;
    let points: Vec<(String, Vec<String>)> = calibration_points(g)
        .into_iter()
        .map(|(x, ws)| (g.value(x).name.clone(), ws))
        .collect();
    let names: HashSet<String> = points.iter().map(|(x, _)| x.clone()).collect();
    let mut sums: HashMap<String, (usize, Vec<f64>)> = HashMap::new();
    let mut rows = 0;
    for (i, w) in windows.iter().enumerate() {
        let inputs = [(
            "input_ids".to_string(),
            Tensor::from_i64(vec![1, w.len()], w.clone()),
        )];
        let result = run_graph_jit(module, g, &inputs, &Capture::Names(names.clone()), options)
            .map_err(|e| format!("calibration window {i}: {e}"))?;
        rows += w.len();
        for name in &names {
            let x = result
                .captured
                .get(name)
                .ok_or_else(|| format!("calibration: %{name} was not computed"))?;
            let k = *x.shape().last().ok_or("a rank-0 activation")?;
            let data = x.to_f32_vec();
            let (kk, h) = sums
                .entry(name.clone())
                .or_insert_with(|| (k, vec![0f64; k * k]));
            if *kk != k {
                return Err(format!("%{name} changed width: {kk} then {k}"));
            }
            accumulate_gram(h, &data, k);
        }
        tracing::info!("calibration: window {}/{}", i + 1, windows.len());
    }
    let mut weights = 0;
    for (name, ws) in &points {
        let Some((k, h)) = sums.get(name) else {
            continue;
        };
        let per_row = (rows as f64).max(1.0);
        let mean: Vec<f32> = h.iter().map(|v| (v / per_row) as f32).collect();
        for w in ws {
            module.weights.insert(
                format!("{w}{HESSIAN_SUFFIX}"),
                Tensor::from_f32(vec![*k, *k], mean.clone()),
            );
            weights += 1;
        }
    }
    Ok(CalibrationSummary {
        windows: windows.len(),
        rows,
        weights,
    })
}

/// `h += Σ_r x_rᵀ x_r` over the rows of `x` (`[rows, k]`, row-major);
/// `h` is `[k, k]`.
fn accumulate_gram(h: &mut [f64], x: &[f32], k: usize) {
    for row in x.chunks_exact(k) {
        let r: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        for (i, &a) in r.iter().enumerate() {
            if a == 0.0 {
                continue;
            }
            for (hv, &b) in h[i * k..(i + 1) * k].iter_mut().zip(&r) {
                *hv += a * b;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gram_of_two_rows() {
        let mut h = vec![0f64; 4];
        accumulate_gram(&mut h, &[1.0, 2.0, 3.0, 0.0], 2);
        assert_eq!(h, [10.0, 2.0, 2.0, 4.0]);
    }
}
