//! GPTQ (Frantar et al., 2022): quantizes a weight row by row of `K`, and
//! after each row moves its rounding error onto the rows not yet
//! quantized, weighted by the inverse of the layer's Hessian `H = E[xᵀx]`
//! over calibration activations `x`. The layer's output error `‖xW −
//! xŴ‖²` is what it minimises, not the weight error that round-to-nearest
//! minimises.
//!
//! Contract: [`Gptq::quantize`] takes `w: f32[K, N]` and `H: [K, K]`
//! (symmetric, positive semi-definite; rows of `K` that never saw a
//! non-zero input have a zero diagonal). It returns `qmatmul` operands
//! of the same form as [`super::rtn::Rtn`]'s: a group's scale is
//! `max |w| / qmax` over the group's rows as they are when the group
//! starts (after the earlier groups' updates), and every value is
//! `clamp(round_half_even(w / scale))`. Rows with a zero diagonal are
//! zeroed (their input is always zero). The Hessian is damped by 1% of
//! its mean diagonal. Rows are taken in order (no act-order: a permuted
//! order would need per-row group indices, which `qmatmul` does not
//! have). Arithmetic in f64.

use super::rtn::{checked, pack, QuantizedWeight, Scheme, WeightQuantizer};

/// Damping: this fraction of the mean diagonal is added to the diagonal.
pub const DAMP: f64 = 0.01;

/// GPTQ with the layer's Hessian.
pub struct Gptq<'a> {
    /// `[K, K]`, row-major.
    pub hessian: &'a [f32],
}

/// See the module docs.
impl WeightQuantizer for Gptq<'_> {
    fn name(&self) -> &'static str {
        "gptq"
    }

    fn quantize_values(
        &self,
        shape: &[usize],
        data: &[f32],
        scheme: Scheme,
    ) -> Result<QuantizedWeight, String> {
        let ((k, n), data, levels) = checked(shape, data, scheme)?;
        let g = scheme.group;
        if self.hessian.len() != k * k {
            return Err(format!(
                "a Hessian of {} values for K = {k}",
                self.hessian.len()
            ));
        }
        if self.hessian.iter().any(|v| !v.is_finite()) {
            return Err("the Hessian has non-finite values".to_string());
        }
        let mut wv: Vec<f64> = data.iter().map(|&v| f64::from(v)).collect();
        let mut h: Vec<f64> = self.hessian.iter().map(|&v| f64::from(v)).collect();
        for i in 0..k {
            if h[i * k + i] == 0.0 {
                h[i * k + i] = 1.0;
                wv[i * n..(i + 1) * n].fill(0.0);
            }
        }
        let mean_diag = (0..k).map(|i| h[i * k + i]).sum::<f64>() / k as f64;
        for i in 0..k {
            h[i * k + i] += DAMP * mean_diag;
        }
        let u = inverse_upper_factor(&h, k)?;
        let mut scale = vec![0f32; k / g * n];
        let mut q = vec![0i8; k * n];
        let mut err = vec![0f64; n];
        for r in 0..k {
            let s = &mut scale[r / g * n..(r / g + 1) * n];
            if r % g == 0 {
                s.fill(0.0);
                for row in wv[r * n..(r + g) * n].chunks_exact(n) {
                    for (m, v) in s.iter_mut().zip(row) {
                        *m = m.max(v.abs() as f32);
                    }
                }
                for m in s.iter_mut() {
                    *m = levels.scale(*m);
                }
            }
            let d = u[r * k + r];
            for c in 0..n {
                let v = wv[r * n + c];
                let qv = levels.round(v as f32, s[c]);
                q[r * n + c] = qv;
                err[c] = (v - f64::from(qv) * f64::from(s[c])) / d;
            }
            for j in r + 1..k {
                let f = u[r * k + j];
                if f != 0.0 {
                    for (x, e) in wv[j * n..(j + 1) * n].iter_mut().zip(&err) {
                        *x -= f * e;
                    }
                }
            }
        }
        pack(levels.dtype, (k, n), q, scale)
    }
}

/// The lower Cholesky factor `L` of symmetric positive-definite `a`
/// (`[k, k]`), `a = L·Lᵀ`.
fn cholesky(a: &[f64], k: usize) -> Result<Vec<f64>, String> {
    let mut l = vec![0f64; k * k];
    for i in 0..k {
        for j in 0..=i {
            let dot: f64 = (0..j).map(|p| l[i * k + p] * l[j * k + p]).sum();
            let v = a[i * k + j] - dot;
            if i == j {
                if v <= 0.0 {
                    return Err(format!("the Hessian is not positive definite (pivot {i})"));
                }
                l[i * k + i] = v.sqrt();
            } else {
                l[i * k + j] = v / l[j * k + j];
            }
        }
    }
    Ok(l)
}

/// The upper factor `U` of `H⁻¹ = Uᵀ·U` (GPTQ's form of the inverse).
fn inverse_upper_factor(h: &[f64], k: usize) -> Result<Vec<f64>, String> {
    let l = cholesky(h, k)?;
    // L⁻¹ by forward substitution, column by column.
    let mut li = vec![0f64; k * k];
    for c in 0..k {
        li[c * k + c] = 1.0 / l[c * k + c];
        for i in c + 1..k {
            let s: f64 = (c..i).map(|p| l[i * k + p] * li[p * k + c]).sum();
            li[i * k + c] = -s / l[i * k + i];
        }
    }
    // H⁻¹ = L⁻ᵀ·L⁻¹.
    let mut hinv = vec![0f64; k * k];
    for i in 0..k {
        for j in 0..=i {
            let s: f64 = (i..k).map(|p| li[p * k + i] * li[p * k + j]).sum();
            hinv[i * k + j] = s;
            hinv[j * k + i] = s;
        }
    }
    let l2 = cholesky(&hinv, k)?;
    let mut u = vec![0f64; k * k];
    for i in 0..k {
        for j in 0..=i {
            u[j * k + i] = l2[i * k + j];
        }
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::super::rtn::Rtn;
    use super::*;
    use slmcc_ir::Tensor;

    /// A small xorshift generator (no dependency).
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s % 20_000) as f32 / 10_000.0 - 1.0
            })
            .collect()
    }

    fn dequant(qw: &QuantizedWeight, (k, n): (usize, usize), g: usize) -> Vec<f64> {
        let q = qw.q.to_i64_vec();
        let s = qw.scale.as_f32().unwrap();
        (0..k * n)
            .map(|i| q[i] as f64 * f64::from(s[(i / n) / g * n + i % n]))
            .collect()
    }

    /// `‖X·W − X·Ŵ‖²` over the calibration rows.
    fn output_error(x: &[f32], rows: usize, w: &[f32], wq: &[f64], (k, n): (usize, usize)) -> f64 {
        let mut e = 0.0;
        for r in 0..rows {
            for c in 0..n {
                let d: f64 = (0..k)
                    .map(|i| f64::from(x[r * k + i]) * (f64::from(w[i * n + c]) - wq[i * n + c]))
                    .sum();
                e += d * d;
            }
        }
        e
    }

    /// On correlated activations GPTQ's output error is well below
    /// round-to-nearest's, in the same stored form.
    #[test]
    fn beats_round_to_nearest_on_the_layer_output() {
        let (k, n, rows, g) = (64, 24, 256, 32);
        // Activations with a shared component (correlated channels) and
        // a few large channels, as trained models have.
        let base = values(1, rows);
        let noise = values(2, rows * k);
        let x: Vec<f32> = (0..rows * k)
            .map(|i| {
                let ch = i % k;
                let big = if ch % 16 == 3 { 8.0 } else { 1.0 };
                big * (base[i / k] + 0.3 * noise[i])
            })
            .collect();
        let w = values(3, k * n);
        let mut h = vec![0f32; k * k];
        for r in 0..rows {
            for i in 0..k {
                for j in 0..k {
                    h[i * k + j] += x[r * k + i] * x[r * k + j] / rows as f32;
                }
            }
        }
        let wt = Tensor::from_f32(vec![k, n], w.clone());
        for bits in [4u8, 8] {
            let scheme = Scheme { bits, group: g };
            let gq = Gptq { hessian: &h }.quantize(&wt, scheme).unwrap();
            let rq = Rtn.quantize(&wt, scheme).unwrap();
            assert_eq!(gq.q.dtype(), rq.q.dtype());
            assert_eq!(gq.scale.shape(), rq.scale.shape());
            let eg = output_error(&x, rows, &w, &dequant(&gq, (k, n), g), (k, n));
            let er = output_error(&x, rows, &w, &dequant(&rq, (k, n), g), (k, n));
            assert!(eg < 0.7 * er, "{bits} bits: gptq {eg} vs rtn {er}");
        }
    }

    /// With an identity Hessian no error moves between rows: GPTQ is
    /// round-to-nearest.
    #[test]
    fn identity_hessian_is_round_to_nearest() {
        let (k, n) = (8, 5);
        let w = Tensor::from_f32(vec![k, n], values(4, k * n));
        let mut h = vec![0f32; k * k];
        for i in 0..k {
            h[i * k + i] = 1.0;
        }
        let scheme = Scheme { bits: 4, group: 4 };
        let gq = Gptq { hessian: &h }.quantize(&w, scheme).unwrap();
        let rq = Rtn.quantize(&w, scheme).unwrap();
        assert_eq!(gq, rq);
    }

    #[test]
    fn refuses_bad_hessians() {
        let w = Tensor::from_f32(vec![2, 1], vec![0.5, -0.5]);
        let scheme = Scheme { bits: 8, group: 2 };
        let e = |h: &[f32]| Gptq { hessian: h }.quantize(&w, scheme).unwrap_err();
        assert!(e(&[1.0, 0.0, 0.0]).contains("3 values"));
        assert!(e(&[1.0, f32::NAN, 0.0, 1.0]).contains("non-finite"));
        // Dead rows are fine: their weights are zeroed.
        let z = Gptq { hessian: &[0.0; 4] }.quantize(&w, scheme).unwrap();
        assert_eq!(z.q.to_i64_vec(), vec![0, 0]);
    }
}
