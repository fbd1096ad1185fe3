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
//! and the largest magnitude per channel as `@<weight>.absmax` (`f32[K]`).
//! `quantize` reads them (`method=gptq`, `smooth=smoothquant|awq`) and
//! then drops them. The graphs are not changed.

use std::collections::{HashMap, HashSet};

use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::{Module, Tensor};
use slmcc_passes::transforms::quantize::{calibration_points, ABSMAX_SUFFIX, HESSIAN_SUFFIX};
use slmcc_runtime::Capture;

use crate::unplanned::JitRunner;

/// What calibration saw.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrationSummary {
    pub windows: usize,
    /// Rows (tokens) per activation.
    pub rows: usize,
    /// Weights given a Hessian.
    pub weights: usize,
}

/// Adds `@<weight>.hessian` and `@<weight>.absmax` for every quantizable weight of `module`'s
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
    let mut absmax: HashMap<String, Vec<f32>> = HashMap::new();
    let mut rows = 0;
    // Compiled once per window length (the windows are usually all one).
    let mut runners: HashMap<usize, JitRunner> = HashMap::new();
    let capture = Capture::Names(names.clone());
    for (i, w) in windows.iter().enumerate() {
        let inputs = [(
            "input_ids".to_string(),
            Tensor::from_i64(vec![1, w.len()], w.clone()),
        )];
        let runner = match runners.entry(w.len()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(
                JitRunner::new(module, g, &inputs, options)
                    .map_err(|e| format!("calibration: {e}"))?,
            ),
        };
        let result = runner
            .run(&inputs, &capture)
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
            let m = absmax.entry(name.clone()).or_insert_with(|| vec![0f32; k]);
            for row in data.chunks_exact(k.max(1)) {
                for (a, v) in m.iter_mut().zip(row) {
                    *a = a.max(v.abs());
                }
            }
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
            module.weights.insert(
                format!("{w}{ABSMAX_SUFFIX}"),
                Tensor::from_f32(vec![*k], absmax[name].clone()),
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
/// `h` is `[k, k]`. One `Xᵀ·X` product in f64 (the `gemm` crate).
fn accumulate_gram(h: &mut [f64], x: &[f32], k: usize) {
    let rows = x.len() / k.max(1);
    if rows == 0 {
        return;
    }
    let xd: Vec<f64> = x[..rows * k].iter().map(|&v| f64::from(v)).collect();
    assert_eq!(h.len(), k * k, "h is [k, k]");
    // SAFETY: `h` holds k×k values and `xd` rows×k; the strides below
    // address `Xᵀ` (k×rows: element (i, r) at r·k + i), `X` (rows×k) and
    // `h` (k×k, row-major) within them.
    unsafe {
        gemm::gemm(
            k,
            k,
            rows,
            h.as_mut_ptr(),
            1,
            k as isize,
            true,
            xd.as_ptr(),
            k as isize,
            1,
            xd.as_ptr(),
            1,
            k as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gram_of_two_rows_accumulates() {
        let mut h = vec![0f64; 4];
        accumulate_gram(&mut h, &[1.0, 2.0, 3.0, 0.0], 2);
        assert_eq!(h, [10.0, 2.0, 2.0, 4.0]);
        accumulate_gram(&mut h, &[1.0, 1.0], 2);
        assert_eq!(h, [11.0, 3.0, 3.0, 5.0]);
    }

    /// Against the plain sum on a wider, odd-sized input.
    #[test]
    fn gram_equals_the_plain_sum() {
        let (rows, k) = (37, 19);
        let x: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 7919) % 23) as f32 - 11.0)
            .collect();
        let mut h = vec![0f64; k * k];
        accumulate_gram(&mut h, &x, k);
        for i in 0..k {
            for j in 0..k {
                let want: f64 = (0..rows)
                    .map(|r| f64::from(x[r * k + i]) * f64::from(x[r * k + j]))
                    .sum();
                assert_eq!(h[i * k + j], want, "({i}, {j})");
            }
        }
    }
}
