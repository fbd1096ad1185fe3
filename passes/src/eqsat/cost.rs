//! Costs for extraction: the [`CostModel`] a target supplies, and the CPU
//! model used until the targets bring their own.
//!
//! A model estimates one node from its op and the facts of its operands and
//! results. Extraction sums the estimates over the chosen expression, so a
//! fused op wins exactly when its estimate is below the sum over the nodes
//! it replaces; the CPU model makes every fused op strictly cheaper than its
//! decomposition (one kernel launch instead of several, the intermediates
//! never written, no more arithmetic), and every canonicalization rule's
//! right side no worse than its left.

use std::collections::HashMap;

use slmcc_ir::ops::binary::BinaryKind;
use slmcc_ir::ops::unary::UnaryKind;
use slmcc_ir::{Dim, Fact, Op};

use super::analysis::{attr, fact, Data, EGraph};
use super::language::{decode, Lang};

/// A target's estimate of what a node costs (in the target's units).
pub trait CostModel {
    /// The cost of `op` applied to operands `inputs`, producing `outputs`.
    fn node_cost(&self, op: &Op, inputs: &[&Fact], outputs: &[Fact]) -> f64;
}

/// The host CPU: a fixed cost per kernel, memory traffic and arithmetic, in
/// nanoseconds, with every symbolic dim taken as `nominal_dim`.
#[derive(Clone, Copy, Debug)]
pub struct CpuCost {
    pub nominal_dim: i64,
    /// Nanoseconds per kernel launch.
    pub launch: f64,
    /// Bytes per nanosecond.
    pub bandwidth: f64,
    /// Floating-point operations per nanosecond.
    pub flops: f64,
}

impl Default for CpuCost {
    fn default() -> CpuCost {
        CpuCost {
            nominal_dim: 128,
            launch: 200.0,
            bandwidth: 10.0,
            flops: 20.0,
        }
    }
}

impl CpuCost {
    /// A dim with every symbol bound to `nominal_dim`.
    fn dim(&self, d: &Dim) -> f64 {
        let bind: HashMap<String, i64> = d
            .symbols()
            .into_iter()
            .map(|s| (s.to_string(), self.nominal_dim))
            .collect();
        d.eval(&bind).map_or(f64::MAX, |v| v as f64)
    }

    fn elements(&self, f: &Fact) -> f64 {
        f.ty.shape.dims().iter().map(|d| self.dim(d)).product()
    }

    fn bytes(&self, f: &Fact) -> f64 {
        self.elements(f) * f.ty.dtype.bits() as f64 / 8.0
    }

    /// Arithmetic per op, in operations.
    fn arithmetic(&self, op: &Op, inputs: &[&Fact], outputs: &[Fact]) -> f64 {
        let out: f64 = outputs.iter().map(|f| self.elements(f)).sum();
        let first = inputs.first().map_or(0.0, |f| self.elements(f));
        let last_dim = |f: &Fact| f.ty.shape.dims().last().map_or(1.0, |d| self.dim(d));
        match op {
            Op::Constant(_) | Op::ShapeOf(_) | Op::Size(_) => 0.0,
            Op::MatMul(_) | Op::QMatMul(_) => 2.0 * out * last_dim(inputs[0]),
            Op::Glu(_) | Op::QSwiGlu(_) => 4.0 * out * last_dim(inputs[0]) + 8.0 * out,
            Op::Attention(_) => {
                // q [b, h, s, d] against k [b, kv, t, d]: scores, softmax, @ v.
                let (d, dv) = (last_dim(inputs[0]), last_dim(&outputs[0]));
                let scores = out / dv * self.dim(&inputs[1].ty.shape.dims()[2]);
                2.0 * scores * (d + dv) + 5.0 * scores
            }
            Op::Unary(u) => match u.kind {
                UnaryKind::Exp
                | UnaryKind::Log
                | UnaryKind::Erf
                | UnaryKind::Tanh
                | UnaryKind::Sigmoid
                | UnaryKind::Cos
                | UnaryKind::Sin => 8.0 * out,
                UnaryKind::Sqrt | UnaryKind::Reciprocal => 4.0 * out,
                _ => out,
            },
            Op::Binary(b) => match b.kind {
                BinaryKind::Pow => 20.0 * out,
                BinaryKind::Div | BinaryKind::Mod => 4.0 * out,
                _ => out,
            },
            Op::Softmax(_) => 5.0 * out,
            Op::Reduce(_) | Op::CumSum(_) => first,
            Op::LayerNorm(_) => 8.0 * first,
            Op::RmsNorm(_) => 4.0 * first,
            Op::AddRmsNorm(_) => 5.0 * first,
            Op::AddLayerNorm(_) => 9.0 * first,
            Op::Gelu(_) => 10.0 * out,
            Op::Rope(_) => 4.0 * out,
            Op::Reshape(_)
            | Op::Unsqueeze(_)
            | Op::Squeeze(_)
            | Op::Identity(_)
            | Op::Transpose(_)
            | Op::Slice(_)
            | Op::Split(_)
            | Op::Concat(_)
            | Op::Expand(_)
            | Op::Gather(_)
            | Op::GatherNd(_)
            | Op::GatherElements(_) => 0.0,
            _ => out,
        }
    }
}

impl CostModel for CpuCost {
    fn node_cost(&self, op: &Op, inputs: &[&Fact], outputs: &[Fact]) -> f64 {
        match op {
            // Known at compile time: nearly free, never worth recomputing.
            Op::Constant(_) => 1.0,
            // Views: no data moves.
            Op::Reshape(_) | Op::Unsqueeze(_) | Op::Squeeze(_) | Op::Identity(_) => {
                self.launch / 10.0
            }
            _ => {
                let bytes: f64 = inputs.iter().map(|f| self.bytes(f)).sum::<f64>()
                    + outputs.iter().map(|f| self.bytes(f)).sum::<f64>();
                self.launch
                    + bytes / self.bandwidth
                    + self.arithmetic(op, inputs, outputs) / self.flops
            }
        }
    }
}

/// The cost of every node of the e-graph on its own (operands not
/// included): the model's estimate for op nodes, zero for leaves and `get`.
pub fn node_costs(eg: &EGraph, model: &dyn CostModel) -> HashMap<Lang, f64> {
    let mut costs = HashMap::new();
    for class in eg.classes() {
        for node in &class.nodes {
            let cost = if node.is_op() {
                let (op, operands) = decode(node, |c| attr(eg, c)).expect("op node decodes");
                let inputs: Vec<&Fact> = operands
                    .iter()
                    .map(|&i| fact(eg, i).expect("operand is a value"))
                    .collect();
                let outputs: Vec<Fact> = match &class.data {
                    Data::Value(f, _) => vec![f.clone()],
                    Data::Tuple(fs) => fs.to_vec(),
                    Data::Attr(_) => Vec::new(),
                };
                model.node_cost(&op, &inputs, &outputs)
            } else {
                0.0
            };
            costs.insert(node.clone(), cost);
        }
    }
    costs
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::ops::binary::Binary;
    use slmcc_ir::ops::gelu::Gelu;
    use slmcc_ir::ops::unary::Unary;
    use slmcc_ir::{DType, TensorType};

    fn f(dims: &[i64]) -> Fact {
        Fact::new(TensorType::new(
            DType::F32,
            dims.iter().map(|&d| Dim::fixed(d)).collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn a_fused_op_is_cheaper_than_its_decomposition() {
        let cpu = CpuCost::default();
        let x = f(&[1, 128, 512]);
        let c = f(&[]);
        let bin = |k| Op::Binary(Binary::new(k));
        let un = |k| Op::Unary(Unary::new(k));
        // gelu(x) = x * 0.5 * (1 + erf(x * 0.7071)): five element-wise nodes.
        let parts = [
            cpu.node_cost(&bin(BinaryKind::Mul), &[&x, &c], std::slice::from_ref(&x)),
            cpu.node_cost(&un(UnaryKind::Erf), &[&x], std::slice::from_ref(&x)),
            cpu.node_cost(&bin(BinaryKind::Add), &[&x, &c], std::slice::from_ref(&x)),
            cpu.node_cost(&bin(BinaryKind::Mul), &[&x, &c], std::slice::from_ref(&x)),
            cpu.node_cost(&bin(BinaryKind::Mul), &[&x, &x], std::slice::from_ref(&x)),
        ];
        let fused = cpu.node_cost(&Op::Gelu(Gelu::default()), &[&x], std::slice::from_ref(&x));
        assert!(fused < parts.iter().sum::<f64>());
    }
}
