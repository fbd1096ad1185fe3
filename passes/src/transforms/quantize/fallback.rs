//! The mixed-precision fallback of `quantize` (`fallback=P`): the products
//! whose rounding costs the most stay at a higher precision (4-bit weights
//! at 8 bits, 8-bit weights in `f32`), within a stated size budget.
//!
//! Contract: [`choose`] ranks every product `quantize` will quantize (a
//! `matmul` by a weight, or a gated MLP with its weights as one unit) by
//! its sensitivity, the relative output error of rounding its weights as
//! asked, `Σ_w tr(ΔWᵀ H ΔW) / tr(Wᵀ H W)` with the calibration Hessian `H`
//! (`@w.hessian`, from `--calib`), or `‖ΔW‖² / ‖W‖²` without one. Most
//! sensitive first, it keeps each unit at the higher precision whose extra
//! bytes still fit in `P`% of the bytes that all the units take rounded as
//! asked, and returns the kept units' weight names. Nothing in the module
//! changes.

use std::collections::HashSet;

use slmcc_ir::{DType, Module, Op, Tensor};

use super::rtn::{Rtn, Scheme, WeightQuantizer};
use super::smooth::output_error;
use super::{glu_weights, kept_in_f32, weight_operand, Config, Glus, HESSIAN_SUFFIX};

/// What [`choose`] decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chosen {
    /// The weights kept at the higher precision.
    pub weights: HashSet<String>,
    /// The products (units) kept, and the bytes they add.
    pub units: u64,
    pub extra_bytes: u64,
}

/// One product's weights, its sensitivity and sizes.
struct Unit {
    weights: Vec<String>,
    sensitivity: f64,
    low_bytes: u64,
    extra_bytes: u64,
}

/// The units to keep at the higher precision (see the module docs).
pub(super) fn choose(module: &Module, cfg: &Config, percent: u8) -> Result<Chosen, String> {
    let mut units: Vec<Unit> = Vec::new();
    let mut seen: HashSet<Vec<String>> = HashSet::new();
    for g in &module.graphs {
        for i in 0..g.nodes.len() {
            let weights = match g.nodes[i].op {
                Op::Glu(_) if cfg.glus != Glus::Keep => glu_weights(g, i),
                Op::MatMul(_) if !kept_in_f32(g, i, cfg.keep_lm_head) => {
                    weight_operand(g, i).map(|w| vec![w])
                }
                _ => None,
            };
            let Some(weights) = weights else { continue };
            if seen.insert(weights.clone()) {
                units.push(unit(module, cfg, weights)?);
            }
        }
    }
    let budget = units.iter().map(|u| u.low_bytes).sum::<u64>() * u64::from(percent) / 100;
    units.sort_by(|a, b| b.sensitivity.total_cmp(&a.sensitivity));
    let mut chosen = Chosen::default();
    for u in units {
        let taken: HashSet<&String> = chosen.weights.iter().collect();
        if u.weights.iter().any(|w| taken.contains(w)) {
            continue;
        }
        if chosen.extra_bytes + u.extra_bytes <= budget {
            tracing::debug!(
                "fallback: @{} (relative output error {:.3e}) kept at higher precision",
                u.weights[0],
                u.sensitivity
            );
            chosen.extra_bytes += u.extra_bytes;
            chosen.units += 1;
            chosen.weights.extend(u.weights);
        }
    }
    Ok(chosen)
}

fn unit(module: &Module, cfg: &Config, weights: Vec<String>) -> Result<Unit, String> {
    let (mut sensitivity, mut low_bytes, mut extra_bytes) = (0.0, 0, 0);
    for w in &weights {
        let data = module
            .weights
            .tensor(w)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("weight @{w} has no data"))?;
        let data = match data.dtype() {
            DType::F32 => data.as_ref().clone(),
            _ => data.cast(DType::F32),
        };
        let (k, n) = match *data.shape() {
            [k, n] if k > 0 && n > 0 => (k, n),
            _ => return Err(format!("weight @{w} is not a non-empty matrix")),
        };
        let scheme = cfg.rounding().scheme(k);
        let group = scheme.group;
        sensitivity += relative_error(module, w, &data, scheme)?;
        let (k, n) = (k as u64, n as u64);
        let (low, high) = match cfg.bits {
            4 => (k * n / 2 + k / group as u64 * n * 4, k * n + n * 4),
            _ => (k * n + n * 4, k * n * 4),
        };
        low_bytes += low;
        extra_bytes += high - low;
    }
    Ok(Unit {
        weights,
        sensitivity,
        low_bytes,
        extra_bytes,
    })
}

/// `tr(ΔWᵀ H ΔW) / tr(Wᵀ H W)` by the weight's Hessian, or `‖ΔW‖² / ‖W‖²`
/// when it has none.
fn relative_error(module: &Module, name: &str, w: &Tensor, scheme: Scheme) -> Result<f64, String> {
    let hname = format!("{name}{HESSIAN_SUFFIX}");
    let hessian = match module.weights.get(&hname) {
        Some(_) => module.weights.tensor(&hname).map_err(|e| e.to_string())?,
        None => None,
    };
    let (err, energy) = match hessian.as_ref().and_then(|h| h.as_f32()) {
        Some(h) => output_error(w, None, h, scheme)?,
        None => {
            let q = Rtn.quantize(w, scheme)?;
            let n = w.shape()[1];
            let (qv, sc, data) = (q.q.to_f32_vec(), q.scale.to_f32_vec(), w.to_f32_vec());
            data.iter().enumerate().fold((0.0, 0.0), |(e, s), (i, &v)| {
                let deq = qv[i] * sc[i / n / scheme.group * n + i % n];
                (e + f64::from(deq - v).powi(2), s + f64::from(v).powi(2))
            })
        }
    };
    Ok(err / energy.max(f64::MIN_POSITIVE))
}

#[cfg(test)]
mod tests {
    use crate::pass::Statistics;
    use slmcc_ir::text::{parse_module, print_module};
    use slmcc_ir::{verify_module, Module, Tensor};

    /// Two products of one activation: @a with even values, @b with one
    /// outlier per column, whose 4-bit rounding per channel flattens the
    /// rest to zero (@c and @d, where declared, are @a).
    const SRC: &str = "module @m {
  weight @a : f32[16, 8]
  weight @b : f32[16, 8]

  graph @main(%x: f32[4, 16]) -> (f32[4, 8]) {
    %p = matmul %x, @a : f32[4, 8]
    %q = matmul %x, @b : f32[4, 8]
    %s = add %p, %q : f32[4, 8]
    return %s
  }
}
";

    fn module(src: &str) -> Module {
        let mut m = parse_module(src).unwrap();
        let a: Vec<f32> = (0..128)
            .map(|i| ((i * 37 % 29) as f32 - 14.0) / 14.0)
            .collect();
        let b: Vec<f32> = (0..128)
            .map(|i| {
                if i / 8 == i % 8 {
                    20.0
                } else {
                    ((i * 53 % 31) as f32 - 15.0) / 15.0
                }
            })
            .collect();
        m.weights.insert("a", Tensor::from_f32(vec![16, 8], a));
        m.weights.insert("b", Tensor::from_f32(vec![16, 8], b));
        for c in ["c", "d"] {
            let a = m.weights.tensor("a").unwrap().unwrap();
            m.weights.insert(c, a.as_ref().clone());
        }
        m
    }

    fn quantize(options: &str) -> (String, Statistics) {
        quantize_src(SRC, options)
    }

    fn quantize_src(src: &str, options: &str) -> (String, Statistics) {
        let mut m = module(src);
        let mut stats = Statistics::default();
        let text = format!("quantize{{{options}}}");
        crate::registry::create_pass(&crate::pipeline::parse_pipeline(&text).unwrap()[0])
            .unwrap()
            .run(&mut m, &mut stats)
            .unwrap();
        verify_module(&m).unwrap();
        (print_module(&m), stats)
    }

    #[test]
    fn the_most_sensitive_product_stays_at_8_bits_within_the_budget() {
        // Each product takes 96 bytes at 4 bits and 160 at 8: 40% of 192
        // pays for one.
        let (text, stats) = quantize("weights=int4,group=0,fallback=40");
        assert!(
            text.contains("%q = qmatmul %x, @b.q, @b.scale {bits = 8"),
            "{text}"
        );
        assert!(
            text.contains("%p = qmatmul %x, @a.q, @a.scale {bits = 4"),
            "{text}"
        );
        assert_eq!(stats.get("products-at-higher-precision"), 1);
        assert_eq!(stats.get("fallback-bytes"), 64);
        let (text, stats) = quantize("weights=int4,group=0,fallback=30");
        assert!(!text.contains("bits = 8"), "{text}");
        assert_eq!(stats.get("products-at-higher-precision"), 0);
        let (_, stats) = quantize("weights=int4,group=0,fallback=100");
        assert_eq!(stats.get("products-at-higher-precision"), 2);
    }

    #[test]
    fn at_8_bits_the_fallback_is_f32() {
        // 160 bytes at 8 bits, 512 in f32: 352 more for one, more than
        // 100% of the two products' 320.
        let (text, _) = quantize("weights=int8,fallback=100");
        assert!(!text.contains(" matmul %x"), "{text}");
        // With @a twice more (four products), 100% of 640 pays for one.
        let (text, stats) = quantize_src(
            &SRC.replace(
                "weight @b : f32[16, 8]\n",
                "weight @b : f32[16, 8]\n  weight @c : f32[16, 8]\n  weight @d : f32[16, 8]\n",
            )
            .replace(
                "%s = add %p, %q : f32[4, 8]",
                "%p2 = matmul %x, @c : f32[4, 8]\n    %p3 = matmul %x, @d : f32[4, 8]\n    %s0 = add %p, %q : f32[4, 8]\n    %s1 = add %p2, %p3 : f32[4, 8]\n    %s = add %s0, %s1 : f32[4, 8]",
            ),
            "weights=int8,fallback=100",
        );
        assert!(text.contains("%q = matmul %x, @b"), "{text}");
        assert!(text.contains("%p = qmatmul %x, @a.q"), "{text}");
        assert_eq!(stats.get("matmuls-kept"), 1);
    }
}
