//! `quantize`: weight-only quantization of the linear layers to `qmatmul`
//! (INT8 per output channel, or INT4 per group), activations quantized per
//! token at run time by the op itself.

pub mod rtn;

use std::collections::{BTreeSet, HashMap};

use slmcc_ir::ops::qmatmul::QMatMul;
use slmcc_ir::verify::node_label;
use slmcc_ir::{DType, Graph, Module, Op, TensorType, ValueDef, ValueId, WeightStore};

use self::rtn::{Rtn, Scheme, WeightQuantizer};
use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{failed, Pass, PassError, Statistics};

/// Options of `quantize`.
pub const OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "weights",
        kind: OptionKind::Str,
        default: "int8",
        help: "int8 (per output channel) or int4 (per group of `group` rows)",
    },
    OptionSpec {
        name: "group",
        kind: OptionKind::Int,
        default: "128",
        help: "int4: rows of K sharing a scale; 0 = one group (per output channel)",
    },
    OptionSpec {
        name: "keep",
        kind: OptionKind::Str,
        default: "lm-head",
        help: "linear layers kept in f32: lm-head (a matmul producing a graph output) or none",
    },
];

/// Replaces every `matmul %x, @w` whose `@w` is a 2-D `f32` module weight
/// and `%x` an `f32` operand of rank >= 2 by `qmatmul %x, @w.q, @w.scale`
/// (see the `qmatmul` op for the exact semantics), with `@w.q`/`@w.scale`
/// new module weights held in memory, computed from `@w`'s data by
/// round-to-nearest ([`rtn::Rtn`]): `weights=int8` gives `i8` weights with
/// one scale per output channel, `weights=int4` gives `i4` weights with one
/// scale per `group` rows of `K` and output column (`group=0`: per output
/// channel). A weight used by several matmuls (or graphs) is quantized once.
///
/// Kept in `f32`: with `keep=lm-head` (the default) every matmul whose result
/// is a graph output (the LM head); the embedding (`gather`), norms and
/// residual adds are not matmuls and are never touched; the fused gated
/// MLPs (`swiglu`/`geglu`) stay in `f32` for now and are counted. Original
/// weights that no graph references any more are removed from the module,
/// so a package holds only the quantized form. Memory plans are dropped
/// (the weights region changed): plan again after this pass.
///
/// Requires: a verified module whose quantized weights have data loaded,
/// and `K` a multiple of `group` for int4. Fails, naming the graph and
/// node, otherwise. Guarantees: a module that verifies; graph signatures
/// unchanged. Statistics: `matmuls-quantized`, `matmuls-kept` (weight
/// matmuls left in `f32`), `glus-kept`, `weight-bytes-before`,
/// `weight-bytes-after` (all module weights).
pub struct Quantize {
    weights: String,
    group: i64,
    keep: String,
}

/// The checked options.
struct Config {
    bits: u8,
    /// 0: per output channel (the whole of `K`).
    group: usize,
    keep_lm_head: bool,
}

/// A weight already quantized: the new weights' names and the op.
struct Done {
    q: (String, TensorType),
    scale: (String, TensorType),
    op: QMatMul,
}

impl Quantize {
    pub fn from_options(o: &PassOptions) -> Quantize {
        Quantize {
            weights: o.str("weights").to_string(),
            group: o.int("group"),
            keep: o.str("keep").to_string(),
        }
    }

    fn config(&self) -> Result<Config, PassError> {
        let bits = match self.weights.as_str() {
            "int8" => 8,
            "int4" => 4,
            w => {
                return Err(failed(
                    "quantize",
                    format!("weights `{w}` is not supported (valid: int8, int4)"),
                ))
            }
        };
        if self.group < 0 || self.group > slmcc_ir::ops::qmatmul::MAX_GROUP {
            return Err(failed(
                "quantize",
                format!(
                    "group must be in 0..={}, got {}",
                    slmcc_ir::ops::qmatmul::MAX_GROUP,
                    self.group
                ),
            ));
        }
        let keep_lm_head = match self.keep.as_str() {
            "lm-head" => true,
            "none" => false,
            k => {
                return Err(failed(
                    "quantize",
                    format!("keep `{k}` is not supported (valid: lm-head, none)"),
                ))
            }
        };
        Ok(Config {
            bits,
            group: if bits == 8 { 0 } else { self.group as usize },
            keep_lm_head,
        })
    }
}

impl Pass for Quantize {
    fn name(&self) -> &'static str {
        "quantize"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let cfg = self.config()?;
        stats.add("weight-bytes-before", weight_bytes(&module.weights));
        let mut done: HashMap<String, Done> = HashMap::new();
        let (mut quantized, mut kept, mut glus) = (0, 0, 0);
        for g in &mut module.graphs {
            let mut changed = false;
            for i in 0..g.nodes.len() {
                if matches!(g.nodes[i].op, Op::Glu(_)) {
                    glus += 1;
                }
                let Some(w) = weight_operand(g, i) else {
                    continue;
                };
                let is_output = g.outputs.contains(&g.nodes[i].outputs[0]);
                if (cfg.keep_lm_head && is_output) || g.ty(g.nodes[i].inputs[0]).rank() < 2 {
                    kept += 1;
                    continue;
                }
                if !done.contains_key(&w) {
                    let d =
                        quantize_weight(&mut module.weights, &w, &cfg).map_err(|e| at(g, i, &e))?;
                    done.insert(w.clone(), d);
                }
                let d = &done[&w];
                let q = g.weight(&d.q.0, d.q.1.clone());
                let s = g.weight(&d.scale.0, d.scale.1.clone());
                let node = &mut g.nodes[i];
                node.op = Op::QMatMul(d.op);
                node.inputs = vec![node.inputs[0], q, s];
                quantized += 1;
                changed = true;
            }
            if changed {
                g.compact();
            }
        }
        let originals: BTreeSet<&String> = done.keys().collect();
        for w in originals {
            if module.graphs.iter().all(|g| g.find_weight(w).is_none()) {
                module.weights.remove(w);
            }
        }
        if quantized > 0 {
            module.plans.clear();
        }
        stats.add("matmuls-quantized", quantized);
        stats.add("matmuls-kept", kept);
        stats.add("glus-kept", glus);
        stats.add("weight-bytes-after", weight_bytes(&module.weights));
        Ok(quantized > 0)
    }
}

/// For a `matmul` node, the name of its second operand when that is a 2-D
/// `f32` module weight (and the first an `f32` operand).
fn weight_operand(g: &Graph, i: usize) -> Option<String> {
    let node = &g.nodes[i];
    if !matches!(node.op, Op::MatMul(_)) || node.inputs.len() != 2 {
        return None;
    }
    let (x, w): (ValueId, ValueId) = (node.inputs[0], node.inputs[1]);
    let ValueDef::Weight(name) = &g.value(w).def else {
        return None;
    };
    let (xt, wt) = (g.ty(x), g.ty(w));
    let f32_2d = wt.dtype == DType::F32 && wt.rank() == 2 && wt.shape.as_fixed().is_some();
    (f32_2d && xt.dtype == DType::F32).then(|| name.clone())
}

/// Quantizes module weight `name` and adds the results to the store.
fn quantize_weight(store: &mut WeightStore, name: &str, cfg: &Config) -> Result<Done, String> {
    let data = store
        .tensor(name)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!("weight @{name} has no data (quantize needs the weights file loaded)")
        })?;
    let k = data.shape().first().copied().unwrap_or(0);
    let group = if cfg.group == 0 { k } else { cfg.group };
    if k == 0 || k % group != 0 {
        return Err(format!(
            "weight @{name}: K = {k} is not a multiple of group = {group} (choose a divisor, or group=0 for per output channel)"
        ));
    }
    let scheme = Scheme {
        bits: cfg.bits,
        group,
    };
    let qw = Rtn
        .quantize(&data, scheme)
        .map_err(|e| format!("weight @{name} ({}): {e}", Rtn.name()))?;
    let op = QMatMul::new(cfg.bits as i64, group as i64).map_err(|e| e.to_string())?;
    let q_name = fresh_weight_name(store, &format!("{name}.q"));
    let q_ty = fixed_type(qw.q.dtype(), qw.q.shape());
    store.insert(q_name.clone(), qw.q);
    let s_name = fresh_weight_name(store, &format!("{name}.scale"));
    let s_ty = fixed_type(DType::F32, qw.scale.shape());
    store.insert(s_name.clone(), qw.scale);
    Ok(Done {
        q: (q_name, q_ty),
        scale: (s_name, s_ty),
        op,
    })
}

fn fixed_type(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::fixed(dtype, &shape.iter().map(|&d| d as i64).collect::<Vec<_>>())
}

/// `base`, or `base` with a number appended if the store has that name.
fn fresh_weight_name(store: &WeightStore, base: &str) -> String {
    if store.get(base).is_none() {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}{i}"))
        .find(|n| store.get(n).is_none())
        .expect("an unused name")
}

/// The bytes of every module weight with a static shape.
fn weight_bytes(store: &WeightStore) -> u64 {
    store
        .iter()
        .filter_map(|(_, w)| {
            let n: usize = w.ty.shape.as_fixed()?.iter().product();
            Some(w.ty.dtype.bytes_for(n) as u64)
        })
        .sum()
}

fn at(g: &Graph, i: usize, msg: &str) -> PassError {
    failed(
        "quantize",
        format!("graph @{}, node {}: {msg}", g.name, node_label(g, i)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::{parse_module, print_module};
    use slmcc_ir::{verify_module, EvalCtx, OpDef, Tensor};

    const SRC: &str = "module @m {
  weight @w : f32[4, 2]
  weight @head : f32[2, 3]

  graph @main(%x: f32[1, 4]) -> (f32[1, 3]) {
    %h = matmul %x, @w : f32[1, 2]
    %g = matmul %x, @w : f32[1, 2]
    %s = add %h, %g : f32[1, 2]
    %y = matmul %s, @head : f32[1, 3]
    return %y
  }
}
";

    fn module() -> Module {
        let mut m = parse_module(SRC).unwrap();
        let w: Vec<f32> = (0..8).map(|i| i as f32 * 0.25 - 1.0).collect();
        m.weights.insert("w", Tensor::from_f32(vec![4, 2], w));
        m.weights
            .insert("head", Tensor::from_f32(vec![2, 3], vec![0.5; 6]));
        m
    }

    fn run(weights: &str, group: i64, keep: &str) -> Result<(Module, Statistics), PassError> {
        let mut m = module();
        let mut stats = Statistics::default();
        let mut pass = Quantize {
            weights: weights.to_string(),
            group,
            keep: keep.to_string(),
        };
        pass.run(&mut m, &mut stats)?;
        verify_module(&m).unwrap();
        Ok((m, stats))
    }

    #[test]
    fn quantizes_shared_weight_once_and_drops_the_original() {
        let (m, stats) = run("int4", 2, "lm-head").unwrap();
        let text = print_module(&m);
        assert!(
            text.contains("%h = qmatmul %x, @w.q, @w.scale {bits = 4, group = 2} : f32[1, 2]"),
            "{text}"
        );
        assert!(text.contains("weight @w.q : i4[4, 2]"), "{text}");
        assert!(text.contains("weight @w.scale : f32[2, 2]"), "{text}");
        assert!(text.contains("matmul %s, @head"), "{text}");
        assert!(m.weights.get("w").is_none());
        assert_eq!(stats.get("matmuls-quantized"), 2);
        assert_eq!(stats.get("matmuls-kept"), 1);
        // 32 + 24 bytes of f32 before; 4 (i4) + 16 + 24 after.
        assert_eq!(stats.get("weight-bytes-before"), 56);
        assert_eq!(stats.get("weight-bytes-after"), 44);
    }

    #[test]
    fn int8_is_per_channel_and_reproduces_the_op() {
        let (m, stats) = run("int8", 128, "none").unwrap();
        assert_eq!(stats.get("matmuls-quantized"), 3);
        assert_eq!(stats.get("matmuls-kept"), 0);
        let g = &m.graphs[0];
        let Op::QMatMul(op) = g.nodes[0].op else {
            panic!("not quantized")
        };
        assert_eq!((op.bits, op.group), (8, 4));
        let q = m.weights.tensor("w.q").unwrap().unwrap();
        let s = m.weights.tensor("w.scale").unwrap().unwrap();
        // Column 0 of w is [-1, -0.5, 0, 0.5]: scale 1/127, q = ±127, ±63.5
        // rounded half to even (64), 0.
        assert_eq!(s.as_f32().unwrap()[0], 1.0 / 127.0);
        let col0: Vec<i64> = q.to_i64_vec().iter().step_by(2).copied().collect();
        assert_eq!(
            col0,
            vec![-127, (-0.5f32 * 127.0).round_ties_even() as i64, 0, 64]
        );
        let x = Tensor::from_f32(vec![1, 4], vec![1.0, -2.0, 0.5, 3.0]);
        let y = op.eval(&[&x, &q, &s], &EvalCtx::default()).unwrap();
        // x · w[:, 0] = -1 + 1 + 0 + 1.5 in f32.
        assert!((y[0].as_f32().unwrap()[0] - 1.5).abs() < 0.05);
    }

    #[test]
    fn later_passes_keep_qmatmul() {
        let (mut m, _) = run("int8", 128, "lm-head").unwrap();
        let options = crate::RunOptions {
            verify_each: true,
            ..crate::RunOptions::default()
        };
        crate::PassManager::parse("canonicalize,eqsat-fuse,cse,dce,quantize", options)
            .unwrap()
            .run(&mut m, &mut std::io::sink())
            .unwrap();
        let text = print_module(&m);
        assert!(
            text.contains("qmatmul %x, @w.q, @w.scale {bits = 8, group = 4}"),
            "{text}"
        );
    }

    #[test]
    fn bad_options_and_missing_data_are_errors() {
        let e = |r: Result<(Module, Statistics), PassError>| r.err().unwrap().to_string();
        assert!(e(run("int3", 128, "lm-head")).contains("valid: int8, int4"));
        assert!(e(run("int8", 128, "all")).contains("valid: lm-head, none"));
        assert!(e(run("int4", -1, "lm-head")).contains("group must be in"));
        let msg = e(run("int4", 3, "lm-head"));
        assert!(
            msg.contains("node %h: weight @w: K = 4 is not a multiple of group = 3"),
            "{msg}"
        );
        let mut m = parse_module(SRC).unwrap();
        let mut pass = Quantize {
            weights: "int8".to_string(),
            group: 128,
            keep: "lm-head".to_string(),
        };
        let msg = pass
            .run(&mut m, &mut Statistics::default())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("weight @w has no data"), "{msg}");
    }
}
