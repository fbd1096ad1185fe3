//! Quantizing a fused gated MLP (`swiglu`/`geglu`): the op multiplies by
//! `f32` weights inside, so `quantize` takes it apart into the products it
//! stands for, each a `qmatmul`, and the gate arithmetic after them:
//!
//! ```text
//! %m = swiglu %x, @wg, @wu          %g = qmatmul %x, @wg.q, @wg.scale
//!                             →     %u = qmatmul %x, @wu.q, @wu.scale
//!                                   %a = sigmoid %g ; %s = mul %g, %a
//!                                   %m = mul %s, %u
//! ```
//!
//! `geglu` gets `gelu` (same `approximate`) in place of `g · sigmoid(g)`;
//! the one-weight form (`[hidden, 2·inter]`, Phi-3's `gate_up_proj`) one
//! `qmatmul` and a `split` of its result in halves. The result keeps the
//! fused op's value, so users do not change.
//!
//! This is what `glus=split` does, and what `glus=fuse` (the default) does
//! to a `geglu`; `glus=fuse` makes a `swiglu` one `qswiglu` instead, which
//! computes what the expansion above computes, bit for bit.

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::gelu::Gelu;
use slmcc_ir::ops::glu::{Glu, GluKind};
use slmcc_ir::ops::qmatmul::QMatMul;
use slmcc_ir::ops::split::Split;
use slmcc_ir::ops::unary::{Unary, UnaryKind};
use slmcc_ir::{Dim, Graph, Node, Op, TensorType, ValueId};

/// A quantized weight's operands as values of the graph.
pub struct QWeight {
    pub q: ValueId,
    pub scale: ValueId,
    pub op: QMatMul,
}

/// Appends to `g.nodes` the nodes that compute `node` (a `swiglu`/`geglu`
/// of `x` by the weights `weights`, already quantized) from `qmatmul`s; the
/// last writes `node`'s result.
pub fn expand(g: &mut Graph, node: &Node, glu: Glu, weights: &[QWeight]) -> Result<(), String> {
    let x = node.inputs[0];
    let out = node.outputs[0];
    let out_ty = g.ty(out).clone();
    let base = g.value(out).name.clone();
    let (gate, up) = match weights {
        [wg, wu] => {
            let gate = push(
                g,
                qop(wg),
                vec![x, wg.q, wg.scale],
                &out_ty,
                &format!("{base}.gate"),
            )?;
            let up = push(
                g,
                qop(wu),
                vec![x, wu.q, wu.scale],
                &out_ty,
                &format!("{base}.up"),
            )?;
            (gate, up)
        }
        [wgu] => {
            let mut both = out_ty.clone();
            let last = both.shape.0.last_mut().ok_or("a rank-0 result")?;
            let inter = last
                .as_fixed()
                .ok_or("a gated MLP width that is not static")?;
            *last = Dim::fixed(2 * inter);
            let inputs = vec![x, wgu.q, wgu.scale];
            let gu = push(g, qop(wgu), inputs, &both, &format!("{base}.gate_up"))?;
            let split = Split {
                axis: -1,
                sizes: vec![Dim::fixed(inter), Dim::fixed(inter)],
            };
            let names = [
                (g.fresh_name(&format!("{base}.gate")), out_ty.clone()),
                (g.fresh_name(&format!("{base}.up")), out_ty.clone()),
            ];
            let r = g
                .add_node(Op::Split(split), vec![gu], names.to_vec())
                .map_err(|e| e.to_string())?;
            (r[0], r[1])
        }
        _ => return Err(format!("{} weight operands", weights.len())),
    };
    let act = match glu.kind {
        GluKind::SwiGlu => {
            let sigmoid = Op::Unary(Unary::new(UnaryKind::Sigmoid));
            let sig = push(g, sigmoid, vec![gate], &out_ty, &format!("{base}.sigmoid"))?;
            let mul = Op::Binary(Binary::new(BinaryKind::Mul));
            push(g, mul, vec![gate, sig], &out_ty, &format!("{base}.act"))?
        }
        GluKind::GeGlu(approximate) => {
            let gelu = Op::Gelu(Gelu { approximate });
            push(g, gelu, vec![gate], &out_ty, &format!("{base}.act"))?
        }
    };
    g.nodes.push(Node {
        op: Op::Binary(Binary::new(BinaryKind::Mul)),
        inputs: vec![act, up],
        outputs: vec![out],
    });
    Ok(())
}

fn qop(w: &QWeight) -> Op {
    Op::QMatMul(w.op)
}

/// Appends `op` of `inputs` with one result of type `ty`, named from `hint`.
fn push(
    g: &mut Graph,
    op: Op,
    inputs: Vec<ValueId>,
    ty: &TensorType,
    hint: &str,
) -> Result<ValueId, String> {
    let name = g.fresh_name(hint);
    let r = g
        .add_node(op, inputs, vec![(name, ty.clone())])
        .map_err(|e| e.to_string())?;
    Ok(r[0])
}
