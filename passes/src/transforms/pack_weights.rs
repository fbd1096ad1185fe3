//! `pack-weights`: quantized weights stored in the order the CPU's
//! kernels read them (`qmatmul`/`qswiglu` `layout = "strips16"`), so that
//! a package's weights are used in place, with no repacking at load.
//!
//! A row-major `[K, N]` weight makes the CPU kernel gather four rows of `K`
//! per column into each 32-bit lane with byte and word shuffles, at every
//! call. In `strips16` ([`slmcc_ir::ops::qlayout`]) each 64 bytes are one
//! vector's worth of those lanes already, and an `i4` block's two nibbles
//! are two such blocks: the integer dot products load, mask (for `i4`)
//! and multiply. The weight-only products (`activations = "f32"`) read
//! the same blocks a row at a time, and each strip of 16 columns is one
//! contiguous run, so decode streams the weights in order instead of
//! touching a row `N` bytes apart per step.

use std::collections::{BTreeMap, BTreeSet};

use slmcc_ir::ops::qlayout::{QLayout, STRIP_COLUMNS};
use slmcc_ir::placement::{place, Device};
use slmcc_ir::{Graph, Module, Op, Tensor, TensorData, ValueDef};

use crate::options::{OptionKind, OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;

/// Options of `pack-weights`.
pub const OPTIONS: &[OptionSpec] = &[OptionSpec {
    name: "target",
    kind: OptionKind::Enum(&["cpu", "rk3588"]),
    default: "cpu",
    help: "cpu (every quantized product runs on the CPU) or rk3588 (only those the placement keeps on the CPU; the NPU lowering stores the NPU's own)",
}];

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("weights-packed", "quantized weights stored in the CPU kernels' layout"),
    Statistic::new("nodes-packed", "quantized products reading a packed weight"),
    Statistic::new("nodes-kept", "quantized products left row-major"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "pack-weights",
    summary: "quantized weights of CPU products stored as the CPU kernels read them (layout strips16)",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(PackWeights::from_options(o))),
};

/// Stores the weights of quantized products that run on the CPU in
/// `strips16` and marks those products `layout = "strips16"`.
///
/// A `qmatmul` or `qswiglu` node, with INT8 or weight-only (`f32`)
/// activations, is packed when every one of its weights
/// (`q` operands) is a module weight with data, fits the layout (`N` a
/// multiple of 16, of 32 for a fused gate/up `qswiglu`; `K` a multiple of 4
/// for `i8`, 8 for `i4`), its `group` is a multiple of those 4 or 8 rows
/// (so each block lies in one group), and, with `target=rk3588`, the
/// placement keeps it on the CPU. A weight is packed only when every use
/// of it, in every graph, is such a node (a weight the NPU also reads, or
/// another op, keeps it row-major and its nodes with it).
///
/// Requires: a verified module whose quantized products are row-major or
/// already packed. Guarantees: what every graph computes is unchanged bit
/// for bit (the layout only moves elements; the op reads through it);
/// shapes, dtypes and names are unchanged, so a memory plan stays valid;
/// statistics `weights-packed`, `nodes-packed`, `nodes-kept` (quantized
/// products left row-major).
pub struct PackWeights {
    rk3588: bool,
}

impl PackWeights {
    pub fn from_options(o: &PassOptions) -> PackWeights {
        PackWeights {
            rk3588: o.str("target") == "rk3588",
        }
    }
}

/// A quantized product's `q` operands, group and layout (`None` for other
/// ops). Both kinds of product read `strips16`: INT8 activations and
/// weight-only.
fn quantized(g: &Graph, node: usize) -> Option<(Vec<usize>, i64, QLayout)> {
    let n = &g.nodes[node];
    let (group, layout) = match n.op {
        Op::QMatMul(op) => (op.group, op.layout),
        Op::QSwiGlu(op) => (op.group, op.layout),
        _ => return None,
    };
    Some(((1..n.inputs.len()).step_by(2).collect(), group, layout))
}

impl Pass for PackWeights {
    fn name(&self) -> &'static str {
        "pack-weights"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        // Nodes that could be packed, by (graph, node), with their weights;
        // every weight's users.
        let mut candidates: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
        let mut users: BTreeMap<String, Vec<(usize, usize)>> = BTreeMap::new();
        let mut quantized_nodes = 0;
        for (gi, g) in module.graphs.iter().enumerate() {
            let places = self.rk3588.then(|| place(g));
            for (ni, node) in g.nodes.iter().enumerate() {
                for &v in &node.inputs {
                    if let ValueDef::Weight(w) = &g.value(v).def {
                        users.entry(w.clone()).or_default().push((gi, ni));
                    }
                }
                let Some((qs, group, layout)) = quantized(g, ni) else {
                    continue;
                };
                quantized_nodes += 1;
                if layout != QLayout::RowMajor {
                    continue;
                }
                if places.as_ref().is_some_and(|p| p[ni].device != Device::Cpu) {
                    continue;
                }
                let fused = matches!(node.op, Op::QSwiGlu(_)) && qs.len() == 1;
                let mut names = Vec::new();
                for &i in &qs {
                    let v = node.inputs[i];
                    let ValueDef::Weight(w) = &g.value(v).def else {
                        break;
                    };
                    let ty = g.ty(v);
                    let Some(&[k, n]) = ty.shape.as_fixed().as_deref() else {
                        break;
                    };
                    let rows = QLayout::block_rows(ty.dtype);
                    let columns = if fused {
                        2 * STRIP_COLUMNS
                    } else {
                        STRIP_COLUMNS
                    };
                    let fits = QLayout::Strips16.unfit(ty.dtype, k, n).is_none()
                        && n.is_multiple_of(columns)
                        && (group as usize).is_multiple_of(rows)
                        && module.weights.get(w).is_some_and(|d| d.has_data());
                    if !fits {
                        break;
                    }
                    names.push(w.clone());
                }
                if names.len() == qs.len() {
                    candidates.insert((gi, ni), names);
                }
            }
        }
        // A weight with a user that is not a candidate vetoes its nodes;
        // a vetoed node vetoes its other weights: repeat until stable.
        let mut packed: BTreeSet<String> = candidates.values().flatten().cloned().collect();
        loop {
            let before = candidates.len();
            packed.retain(|w| users[w].iter().all(|user| candidates.contains_key(user)));
            candidates.retain(|_, names| names.iter().all(|w| packed.contains(w)));
            packed = candidates.values().flatten().cloned().collect();
            if candidates.len() == before {
                break;
            }
        }
        // On all cores, each packed weight replacing its original as it
        // comes (`WeightStore::replace_in_parallel`).
        let mut jobs = Vec::with_capacity(packed.len());
        for name in &packed {
            let tensor = module
                .weights
                .tensor(name)
                .map_err(|e| failed("pack-weights", e.to_string()))?
                .ok_or_else(|| failed("pack-weights", format!("weight @{name} has no data")))?;
            jobs.push((name.clone(), tensor));
        }
        module.weights.replace_in_parallel(jobs, |(name, tensor)| {
            let (dtype, shape) = (tensor.dtype(), tensor.shape().to_vec());
            let (k, n) = (shape[0], shape[1]);
            // The values are permuted in their own element type (i4 is one
            // i8 per element in memory), not through a wider copy.
            let data = match tensor.data() {
                TensorData::I8(v) => TensorData::I8(QLayout::Strips16.pack(dtype, k, n, v)),
                TensorData::I4(v) => TensorData::I4(QLayout::Strips16.pack(dtype, k, n, v)),
                _ => {
                    return Err(failed(
                        "pack-weights",
                        format!("weight @{name} is {dtype}, not i8 or i4"),
                    ))
                }
            };
            drop(tensor);
            let packed = Tensor::new(shape, data).expect("a permutation keeps the size");
            Ok(((), Some((name, packed))))
        })?;
        for &(gi, ni) in candidates.keys() {
            match &mut module.graphs[gi].nodes[ni].op {
                Op::QMatMul(op) => op.layout = QLayout::Strips16,
                Op::QSwiGlu(op) => op.layout = QLayout::Strips16,
                _ => unreachable!("candidates are quantized products"),
            }
        }
        stats.add("weights-packed", packed.len() as u64);
        stats.add("nodes-packed", candidates.len() as u64);
        stats.add("nodes-kept", (quantized_nodes - candidates.len()) as u64);
        Ok(!candidates.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;

    const SRC: &str = "module @m {
  weight @a.q : i4[32, 64]
  weight @a.scale : f32[1, 64]
  weight @b.q : i8[32, 16]
  weight @b.scale : f32[1, 16]

  graph @main(%x: f32[1, 2, 32]) -> (f32[1, 2, 64], f32[1, 2, 16], f32[32, 16]) {
    %y = qmatmul %x, @a.q, @a.scale {bits = 4, group = 32} : f32[1, 2, 64]
    %z = qmatmul %x, @b.q, @b.scale {bits = 8, group = 32} : f32[1, 2, 16]
    %e = cast @b.q {to = f32} : f32[32, 16]
    return %y, %z, %e
  }
}
";

    fn module() -> Module {
        let mut m = parse_module(SRC).unwrap();
        let q = Tensor::from_i64(vec![32, 64], (0..2048).map(|i| i % 16 - 8).collect());
        m.weights.insert("a.q", q.cast(slmcc_ir::DType::I4));
        m.weights
            .insert("a.scale", Tensor::from_f32(vec![1, 64], vec![0.5; 64]));
        let b = Tensor::from_i64(vec![32, 16], (0..512).map(|i| i % 256 - 128).collect());
        m.weights.insert("b.q", b.cast(slmcc_ir::DType::I8));
        m.weights
            .insert("b.scale", Tensor::from_f32(vec![1, 16], vec![0.25; 16]));
        m
    }

    #[test]
    fn packs_weights_only_the_cpu_products_read() {
        let mut m = module();
        let before = m.weights.tensor("a.q").unwrap().unwrap().to_i64_vec();
        let mut stats = Statistics::default();
        assert!(PackWeights { rk3588: false }
            .run(&mut m, &mut stats)
            .unwrap());
        let layouts: Vec<_> = m.graphs[0]
            .nodes
            .iter()
            .filter_map(|n| match n.op {
                Op::QMatMul(op) => Some(op.layout),
                _ => None,
            })
            .collect();
        // @b.q is also read by a cast: it and its qmatmul stay row-major.
        assert_eq!(layouts, [QLayout::Strips16, QLayout::RowMajor]);
        let after = m.weights.tensor("a.q").unwrap().unwrap().to_i64_vec();
        let dt = slmcc_ir::DType::I4;
        assert_eq!(QLayout::Strips16.row_major(dt, 32, 64, &after), before);
        assert_ne!(after, before);
        assert_eq!(stats.get("weights-packed"), 1);
        assert_eq!(stats.get("nodes-kept"), 1);
        // Packed nodes are not packed twice.
        assert!(!PackWeights { rk3588: false }
            .run(&mut m, &mut stats)
            .unwrap());
    }

    #[test]
    fn packs_weight_only_products_too() {
        let src = SRC.replace(
            "{bits = 4, group = 32}",
            "{activations = \"f32\", bits = 4, group = 32}",
        );
        let mut m = parse_module(&src).unwrap();
        m.weights = module().weights;
        let mut stats = Statistics::default();
        assert!(PackWeights { rk3588: false }
            .run(&mut m, &mut stats)
            .unwrap());
        let Op::QMatMul(op) = m.graphs[0].nodes[0].op else {
            panic!("the first node is the weight-only qmatmul");
        };
        assert_eq!(op.activations, slmcc_ir::ops::qmatmul::QActivations::F32);
        assert_eq!(op.layout, QLayout::Strips16);
        assert_eq!(stats.get("nodes-packed"), 1);
    }
}
