//! `widen-half`: the computations of a half-precision model made explicit
//! in `f32`, as MLIR's `arith-emulate-unsupported-floats` does.
//!
//! A model exported in `f16` or `bf16` computes every matmul, norm,
//! softmax, attention and fused op in `f32` and rounds the result once to
//! the half type: that is the IR's semantics of those ops on half operands
//! (each op's `eval` converts its operands exactly to `f32`, computes, and
//! casts the result). The cpu backend's kernels for them read and write
//! `f32` only; per-element ops and data movement it runs on half types
//! directly. This pass rewrites the first kind into `cast`s around an `f32`
//! node, which computes the same values bit for bit.

use std::collections::HashMap;

use slmcc_ir::ops::add_layer_norm::AddLayerNorm;
use slmcc_ir::ops::add_rms_norm::AddRmsNorm;
use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::cast::Cast;
use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::{DType, Graph, Module, Node, Op, ValueDef, ValueId, WeightStore};

use crate::options::{OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;
use crate::transforms::{drop_unused_weights, fresh_weight_name};

/// Options of `widen-half` (none).
pub const OPTIONS: &[OptionSpec] = &[];

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("nodes-widened", "half-precision nodes computed in `f32` between casts"),
    Statistic::new("casts-added", "`cast` nodes added around the widened nodes"),
    Statistic::new("weights-widened", "half-precision weights stored in `f32`"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "widen-half",
    summary: "f16/bf16 matmuls, norms, attention and fused ops computed in f32 between casts (bit-exact)",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(WidenHalf::from_options(o))),
};

/// Rewrites every node that computes on `f16`/`bf16` values, other than
/// per-element ops (`unary`, `binary`, `where`, `cast`: one rounding per
/// element, however computed) and data movement (`reshape`, `transpose`,
/// `slice`, `concat`, `gather`, `kv_write`, ...), into the same op on
/// `f32`:
///
/// - each half operand is converted, except `attention`'s keys and values,
///   which it reads as stored: a module weight whose data is loaded
///   becomes the weight `@name.f32`, converted once here (so a step does not
///   convert it again; the original weight leaves the store when no graph
///   reads it any more); any other value gets one `cast {to = f32}` per
///   graph, placed before its first widened use;
/// - each half result is computed as `%name.f32` and rounded back by a
///   `cast` that defines the original value, so users, graph outputs and
///   golden names see the value they saw before;
/// - `add_rms_norm` and `add_layer_norm` first split off their residual
///   sum, which the op rounds to the half type before normalising: `add`
///   stays half, the norm of its result is widened.
///
/// Every op's evaluation on half operands converts them exactly, computes
/// in `f32` and rounds once, so the widened graph computes the same bits
/// (per-element ops computed in `f32` and rounded once equal the half
/// arithmetic, as `f32` has more than twice the half types' precision).
/// Nodes without half operands or results, and `f32` modules, are left as
/// they are; running the pass twice changes nothing the second time.
///
/// Runs after fusion, `quantize`, `kv-cache` and `last-logits` (which
/// match the half graph as exported) and before `bucket-specialize`.
/// Requires: a verified module. Guarantees: graph signatures unchanged;
/// statistics `nodes-widened`, `casts-added`, `weights-widened`.
pub struct WidenHalf;

impl WidenHalf {
    pub fn from_options(_: &PassOptions) -> WidenHalf {
        WidenHalf
    }
}

impl Pass for WidenHalf {
    fn name(&self) -> &'static str {
        "widen-half"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut count = Counts::default();
        let mut widened_weights = HashMap::new();
        for g in &mut module.graphs {
            let before = count.nodes;
            let mut w = Widen {
                g,
                store: &mut module.weights,
                weights: &mut widened_weights,
                casts: HashMap::new(),
                count: &mut count,
            };
            w.graph()
                .map_err(|e| failed("widen-half", format!("graph @{}: {e}", g.name)))?;
            if count.nodes > before {
                g.compact();
            }
        }
        if count.weights > 0 {
            drop_unused_weights(module);
        }
        stats.add("nodes-widened", count.nodes);
        stats.add("casts-added", count.casts);
        stats.add("weights-widened", count.weights);
        Ok(count.nodes > 0)
    }
}

#[derive(Default)]
struct Counts {
    nodes: u64,
    casts: u64,
    weights: u64,
}

fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// Ops that compute on half types directly: one rounding per element, or
/// none (data movement and shape bookkeeping).
fn stays_half(op: &Op) -> bool {
    matches!(
        op,
        Op::Constant(_)
            | Op::Cast(_)
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Where(_)
            | Op::Identity(_)
            | Op::Reshape(_)
            | Op::Squeeze(_)
            | Op::Unsqueeze(_)
            | Op::Transpose(_)
            | Op::Expand(_)
            | Op::Slice(_)
            | Op::Concat(_)
            | Op::Split(_)
            | Op::Gather(_)
            | Op::GatherNd(_)
            | Op::GatherElements(_)
            | Op::Trilu(_)
            | Op::ShapeOf(_)
            | Op::Size(_)
            | Op::ConstantOfShape(_)
            | Op::KvWrite(_)
            | Op::KvMask(_)
    )
}

/// Operands that a widened node reads in their half type: `attention`'s
/// keys and values (`k`, `v`: its kernels convert them as they load, so
/// a half KV cache is not converted whole at every step).
fn read_as_stored(op: &Op, operand: usize) -> bool {
    matches!(op, Op::Attention(_)) && matches!(operand, 1 | 2)
}

/// The rewrite of one graph.
struct Widen<'a> {
    g: &'a mut Graph,
    store: &'a mut WeightStore,
    /// Weight name -> its `f32` copy's name, for every graph of the module.
    weights: &'a mut HashMap<String, String>,
    /// Half value -> the `cast` of it to `f32`, in this graph.
    casts: HashMap<ValueId, ValueId>,
    count: &'a mut Counts,
}

impl Widen<'_> {
    fn graph(&mut self) -> Result<(), String> {
        for node in std::mem::take(&mut self.g.nodes) {
            let g = &*self.g;
            let half = node
                .inputs
                .iter()
                .enumerate()
                .filter(|&(i, _)| !read_as_stored(&node.op, i))
                .map(|(_, v)| v)
                .chain(&node.outputs)
                .any(|&v| is_half(g.ty(v).dtype));
            if !half || stays_half(&node.op) {
                self.g.nodes.push(node);
                continue;
            }
            match split_residual(&node) {
                Some((sum, norm)) => {
                    self.g.nodes.push(sum);
                    self.node(norm)?;
                }
                None => self.node(node)?,
            }
        }
        Ok(())
    }

    /// Appends `node` computing in `f32`, its half results rounded back.
    fn node(&mut self, node: Node) -> Result<(), String> {
        let inputs = node
            .inputs
            .iter()
            .enumerate()
            .map(
                |(i, &v)| match is_half(self.g.ty(v).dtype) && !read_as_stored(&node.op, i) {
                    true => self.wide(v),
                    false => Ok(v),
                },
            )
            .collect::<Result<Vec<_>, _>>()?;
        let results = node
            .outputs
            .iter()
            .map(|&o| {
                let v = self.g.value(o);
                let mut ty = v.ty.clone();
                ty.dtype = DType::F32;
                let hint = format!("{}.f32", v.name);
                (self.g.fresh_name(&hint), ty)
            })
            .collect();
        let wide = self
            .g
            .add_node(node.op, inputs, results)
            .map_err(|e| e.to_string())?;
        self.count.nodes += 1;
        for (i, (&o, w)) in node.outputs.iter().zip(wide).enumerate() {
            let to = self.g.ty(o).dtype;
            if !is_half(to) {
                // Not a half result: the node defines it as before (the
                // fresh value stays unused and is compacted away).
                self.g.nodes.last_mut().expect("just added").outputs[i] = o;
                continue;
            }
            self.g.nodes.push(Node {
                op: Op::Cast(Cast { to }),
                inputs: vec![w],
                outputs: vec![o],
            });
            self.count.casts += 1;
        }
        Ok(())
    }

    /// The `f32` form of half value `v`: a widened weight, or a `cast`.
    fn wide(&mut self, v: ValueId) -> Result<ValueId, String> {
        if let Some(&w) = self.casts.get(&v) {
            return Ok(w);
        }
        let value = self.g.value(v).clone();
        let mut ty = value.ty.clone();
        ty.dtype = DType::F32;
        if let ValueDef::Weight(name) = &value.def {
            if let Some(wide) = self.weight(name)? {
                let w = self.g.weight(&wide, ty);
                self.casts.insert(v, w);
                return Ok(w);
            }
        }
        let hint = format!("{}.f32", value.name);
        let name = self.g.fresh_name(&hint);
        let cast = Cast { to: DType::F32 };
        let w = self
            .g
            .add_node(cast, vec![v], vec![(name, ty)])
            .map_err(|e| e.to_string())?[0];
        self.casts.insert(v, w);
        self.count.casts += 1;
        Ok(w)
    }

    /// The name of weight `name` converted to `f32` (converted on first
    /// use), or `None` when its data is not loaded.
    fn weight(&mut self, name: &str) -> Result<Option<String>, String> {
        if let Some(wide) = self.weights.get(name) {
            return Ok(Some(wide.clone()));
        }
        let Some(data) = self
            .store
            .tensor(name)
            .map_err(|e| format!("@{name}: {e}"))?
        else {
            return Ok(None);
        };
        let wide = fresh_weight_name(self.store, &format!("{name}.f32"));
        self.store.insert(wide.clone(), data.cast(DType::F32));
        self.weights.insert(name.to_string(), wide.clone());
        self.count.weights += 1;
        Ok(Some(wide))
    }
}

/// `add_rms_norm`/`add_layer_norm` as the `add` it rounds and the norm of
/// that sum (the op's own definition); `None` for other nodes.
fn split_residual(node: &Node) -> Option<(Node, Node)> {
    let norm = match &node.op {
        Op::AddRmsNorm(AddRmsNorm { eps, offset }) => Op::RmsNorm(RmsNorm {
            eps: *eps,
            offset: *offset,
        }),
        Op::AddLayerNorm(AddLayerNorm { eps }) => Op::LayerNorm(LayerNorm {
            axis: -1,
            eps: *eps,
        }),
        _ => return None,
    };
    let [x, r, params @ ..] = node.inputs.as_slice() else {
        return None;
    };
    let [sum, y] = node.outputs.as_slice() else {
        return None;
    };
    let add = Node {
        op: Op::Binary(Binary::new(BinaryKind::Add)),
        inputs: vec![*x, *r],
        outputs: vec![*sum],
    };
    let norm = Node {
        op: norm,
        inputs: std::iter::once(*sum)
            .chain(params.iter().copied())
            .collect(),
        outputs: vec![*y],
    };
    Some((add, norm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transforms::test_eval::run_main;
    use slmcc_ir::text::{parse_module, print_module};
    use slmcc_ir::{verify_module, Tensor};

    const SRC: &str = "module @m {
  weight @w : f16[8, 8]
  weight @n : f16[8]

  graph @main(%x: f16[2, 8], %r: f16[2, 8]) -> (f16[2, 8], f16[2, 8], f16[8, 2]) {
    %h = matmul %x, @w : f16[2, 8]
    %s, %y = add_rms_norm %h, %r, @n {eps = 1e-6} : f16[2, 8], f16[2, 8]
    %p = softmax %y {axis = -1} : f16[2, 8]
    %q = mul %p, %s : f16[2, 8]
    %t = transpose %q {perm = [1, 0]} : f16[8, 2]
    return %s, %y, %t
  }
}
";

    /// Values spread over several binades, so that every rounding shows.
    fn data(n: usize, seed: u32) -> Tensor {
        let v = (0..n as u32)
            .map(|i| {
                (i.wrapping_mul(2654435761).wrapping_add(seed * 40503) % 1000) as f32 / 137.0 - 3.5
            })
            .collect();
        Tensor::from_f32(vec![n], v).cast(DType::F16)
    }

    fn shaped(t: Tensor, shape: &[usize]) -> Tensor {
        Tensor::from_le_bytes(t.dtype(), shape.to_vec(), &t.to_le_bytes()).unwrap()
    }

    fn module() -> Module {
        let mut m = parse_module(SRC).unwrap();
        m.weights.insert("w", shaped(data(64, 1), &[8, 8]));
        m.weights.insert("n", data(8, 2));
        m
    }

    fn widen(m: &mut Module) -> Statistics {
        let mut stats = Statistics::default();
        WidenHalf.run(m, &mut stats).unwrap();
        verify_module(m).unwrap();
        stats
    }

    #[test]
    fn computes_the_same_bits() {
        let inputs = [
            ("x", shaped(data(16, 3), &[2, 8])),
            ("r", shaped(data(16, 4), &[2, 8])),
        ];
        let before = run_main(&module(), &inputs);
        let mut m = module();
        let stats = widen(&mut m);
        // matmul, the norm split off add_rms_norm, softmax.
        assert_eq!(stats.get("nodes-widened"), 3);
        assert_eq!(stats.get("weights-widened"), 2);
        let after = run_main(&m, &inputs);
        for (a, b) in before.iter().zip(&after) {
            assert_eq!(a.dtype(), DType::F16);
            assert_eq!(a.to_le_bytes(), b.to_le_bytes());
        }
        let text = print_module(&m);
        assert!(text.contains("weight @w.f32 : f32[8, 8]"), "{text}");
        assert!(!text.contains("weight @w :"), "{text}");
        assert!(text.contains("%s = add %h, %r : f16[2, 8]"), "{text}");
        assert!(text.contains("%y.f32 = rms_norm %s.f32, @n.f32"), "{text}");
        assert!(text.contains("%q = mul %p, %s : f16[2, 8]"), "{text}");
        assert!(text.contains("%t = transpose %q"), "{text}");
        // A second run finds nothing left to widen.
        assert_eq!(widen(&mut m).get("nodes-widened"), 0);
    }

    #[test]
    fn f32_modules_are_unchanged() {
        let src = SRC.replace("f16", "f32");
        let mut m = parse_module(&src).unwrap();
        let before = print_module(&m);
        let mut stats = Statistics::default();
        assert!(!WidenHalf.run(&mut m, &mut stats).unwrap());
        assert_eq!(print_module(&m), before);
    }
}
