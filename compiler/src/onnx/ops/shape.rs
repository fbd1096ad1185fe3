//! Shape and layout ops: `Shape`, `Size`, `Reshape`, `Flatten`, `Squeeze`,
//! `Unsqueeze`, `Expand`, `Concat`, `Split`, `Slice`, `Transpose`,
//! `ConstantOfShape`, `Range`, `Tile`.
//!
//! Operands the IR takes as attributes (the axes of `Squeeze`/`Unsqueeze`,
//! the sizes of `Split`) must be known at compile time; `Split` without
//! sizes is resolved here (an equal split, or in opset 18 `num_outputs`
//! chunks of `ceil(dim / n)` with a smaller last one). `Flatten` becomes a
//! `reshape` to a (possibly symbolic) constant target; `Transpose` without
//! `perm` reverses the axes; `Tile` with known repeats becomes
//! `unsqueeze` (a 1 before each axis), `expand` (the 1s to the repeats) and
//! `reshape` (each repeat folded into its axis).

use slmcc_ir::ops::concat::Concat;
use slmcc_ir::ops::constant_of_shape::ConstantOfShape;
use slmcc_ir::ops::expand::Expand;
use slmcc_ir::ops::range::Range;
use slmcc_ir::ops::reshape::Reshape;
use slmcc_ir::ops::shape_of::ShapeOf;
use slmcc_ir::ops::size::Size;
use slmcc_ir::ops::slice::Slice;
use slmcc_ir::ops::split::Split;
use slmcc_ir::ops::squeeze::Squeeze;
use slmcc_ir::ops::transpose::Transpose;
use slmcc_ir::ops::unsqueeze::Unsqueeze;
use slmcc_ir::{Dim, Tensor, ValueId};

use super::{one, OpMap};
use crate::onnx::context::{fail, Ctx, R};

pub fn register(reg: &mut OpMap) {
    reg.insert("Shape", shape);
    reg.insert("Size", size);
    reg.insert("Reshape", reshape);
    reg.insert("Flatten", flatten);
    reg.insert("Squeeze", squeeze);
    reg.insert("Unsqueeze", unsqueeze);
    reg.insert("Expand", expand);
    reg.insert("Concat", concat);
    reg.insert("Split", split);
    reg.insert("Slice", slice);
    reg.insert("Transpose", transpose);
    reg.insert("ConstantOfShape", constant_of_shape);
    reg.insert("Range", range);
    reg.insert("Tile", tile);
}

fn shape(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let op = ShapeOf {
        start: ctx.int("start", 0)?,
        end: ctx.opt_int("end")?,
    };
    let x = ctx.input(0)?;
    one(ctx.add1(op, &[x])?)
}

fn size(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let x = ctx.input(0)?;
    one(ctx.add1(Size, &[x])?)
}

fn reshape(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let allow_zero = ctx.int("allowzero", 0)? != 0;
    let (x, s) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add1(Reshape { allow_zero }, &[x, s])?)
}

fn flatten(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let axis = ctx.int("axis", 1)?;
    let x = ctx.input(0)?;
    let dims = ctx.ty(x).shape.0.clone();
    let r = dims.len() as i64;
    if axis < -r || axis > r {
        fail!("axis {axis} is out of range for {}", ctx.ty(x));
    }
    let at = if axis < 0 { axis + r } else { axis } as usize;
    let prod = |ds: &[Dim]| ds.iter().fold(Dim::fixed(1), |a, d| &a * d);
    let target = ctx.const_dims(vec![prod(&dims[..at]), prod(&dims[at..])])?;
    one(ctx.add1(Reshape::default(), &[x, target])?)
}

fn squeeze(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 2)?;
    let x = ctx.input(0)?;
    let axes = if ctx.opt_input(1).is_some() {
        ctx.known_ints(1, "axes")?
    } else {
        // No axes: every dim of size 1, which must be decidable.
        let shape = &ctx.ty(x).shape;
        if shape.0.iter().any(|d| !d.is_fixed()) {
            fail!("without axes, the size-1 dims of {shape} are not known at compile time");
        }
        (0..shape.rank())
            .filter(|&i| shape.0[i].as_fixed() == Some(1))
            .map(|i| i as i64)
            .collect()
    };
    one(ctx.add1(Squeeze { axes }, &[x])?)
}

fn unsqueeze(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let axes = ctx.known_ints(1, "axes")?;
    let x = ctx.input(0)?;
    one(ctx.add1(Unsqueeze { axes }, &[x])?)
}

fn expand(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let (x, s) = (ctx.input(0)?, ctx.input(1)?);
    one(ctx.add1(Expand, &[x, s])?)
}

fn concat(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    let Some(axis) = ctx.opt_int("axis")? else {
        fail!("attribute `axis` is required");
    };
    let xs = ctx.all_inputs()?;
    one(ctx.add1(Concat { axis }, &xs)?)
}

/// The sizes of an ONNX `Split` of `dim` into `n` pieces without an explicit
/// `split`: equal pieces, or (opset 18 `num_outputs`, `uneven_last`) pieces
/// of `ceil(dim / n)` with the remainder last.
pub fn split_sizes(dim: &Dim, n: usize, uneven_last: bool) -> R<Vec<Dim>> {
    if n == 0 {
        fail!("cannot split into 0 pieces");
    }
    let k = n as i64;
    match dim.as_fixed() {
        Some(d) if d % k == 0 => Ok(vec![Dim::fixed(d / k); n]),
        Some(d) if uneven_last => {
            let chunk = (d + k - 1) / k;
            let last = d - chunk * (k - 1);
            if last < 0 {
                fail!("cannot split {d} into {n} pieces of {chunk}");
            }
            let mut v = vec![Dim::fixed(chunk); n - 1];
            v.push(Dim::fixed(last));
            Ok(v)
        }
        Some(d) => fail!("cannot split {d} into {n} equal pieces"),
        None => match dim.div_exact(&Dim::fixed(k)) {
            Some(q) => Ok(vec![q; n]),
            None => fail!("cannot split the symbolic dim {dim} into {n} equal pieces"),
        },
    }
}

fn split(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 2)?;
    let axis = ctx.int("axis", 0)?;
    let num_outputs = if ctx.opset() >= 18 {
        ctx.opt_int("num_outputs")?
    } else {
        None
    };
    let x = ctx.input(0)?;
    let ty = ctx.ty(x).clone();
    let r = ty.rank() as i64;
    if axis < -r || axis >= r {
        fail!("axis {axis} is out of range for {ty}");
    }
    let dim = ty.shape.0[if axis < 0 { axis + r } else { axis } as usize].clone();
    let sizes = match (ctx.opt_input(1), num_outputs) {
        (Some(_), Some(_)) => fail!("takes either the `split` input or `num_outputs`, not both"),
        (Some(_), None) => ctx.known_dims(1, "split")?,
        (None, Some(n)) => {
            if n < 1 || n as usize != ctx.output_count() {
                fail!(
                    "num_outputs = {n} disagrees with the {} outputs",
                    ctx.output_count()
                );
            }
            split_sizes(&dim, n as usize, true)?
        }
        (None, None) if ctx.opset() >= 18 => {
            fail!("needs the `split` input or the `num_outputs` attribute")
        }
        (None, None) => split_sizes(&dim, ctx.output_count(), false)?,
    };
    if sizes.len() != ctx.output_count() {
        fail!(
            "split has {} sizes for {} outputs",
            sizes.len(),
            ctx.output_count()
        );
    }
    ctx.add(Split { axis, sizes }, &[x])
}

fn slice(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 5)?;
    let mut operands = vec![ctx.input(0)?, ctx.input(1)?, ctx.input(2)?];
    let axes = ctx.opt_input(3);
    let steps = ctx.opt_input(4);
    match (axes, steps) {
        (Some(a), _) => operands.push(a),
        // The IR cannot skip `axes` and give `steps`: write the default axes.
        (None, Some(_)) => {
            let starts = ctx.ty(operands[1]).clone();
            let n = match starts.shape.0[..] {
                [ref d] => d.as_fixed(),
                _ => None,
            };
            let Some(n) = n else {
                fail!("starts must be a 1-D tensor of static length, got {starts}");
            };
            let axes: Vec<i64> = (0..n).collect();
            let t = Tensor::from_i64(vec![n as usize], axes).cast(starts.dtype);
            operands.push(ctx.constant(t)?);
        }
        (None, None) => {}
    }
    operands.extend(steps);
    one(ctx.add1(Slice, &operands)?)
}

fn transpose(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let x = ctx.input(0)?;
    let perm = match ctx.opt_ints("perm")? {
        Some(p) => p,
        None => (0..ctx.ty(x).rank() as i64).rev().collect(),
    };
    one(ctx.add1(Transpose { perm }, &[x])?)
}

fn constant_of_shape(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 1)?;
    let value = match ctx.opt_tensor("value")? {
        None => Tensor::scalar_f32(0.0),
        Some(t) if t.len() == 1 => t.reshaped(Vec::new()).map_err(|e| e.to_string())?,
        Some(t) => fail!("`value` must hold one element, has {}", t.len()),
    };
    let s = ctx.input(0)?;
    one(ctx.add1(ConstantOfShape { value }, &[s])?)
}

fn range(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 3)?;
    let v = ctx.all_inputs()?;
    one(ctx.add1(Range, &v)?)
}

fn tile(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(2, 2)?;
    let reps = ctx.known_ints(1, "repeats")?;
    let x = ctx.input(0)?;
    let dims = ctx.ty(x).shape.0.clone();
    if reps.len() != dims.len() || reps.iter().any(|&r| r < 0) {
        fail!("repeats {reps:?} do not fit {}", ctx.ty(x));
    }
    let axes: Vec<i64> = (0..dims.len() as i64).map(|i| 2 * i).collect();
    let spread = ctx.add1(Unsqueeze { axes }, &[x])?;
    let pairs: Vec<Dim> = reps
        .iter()
        .zip(&dims)
        .flat_map(|(&r, d)| [Dim::fixed(r), d.clone()])
        .collect();
    let target = ctx.const_dims(pairs)?;
    let expanded = ctx.add1(Expand, &[spread, target])?;
    let folded: Vec<Dim> = reps
        .iter()
        .zip(&dims)
        .map(|(&r, d)| &Dim::fixed(r) * d)
        .collect();
    let shape = ctx.const_dims(folded)?;
    one(ctx.add1(Reshape::default(), &[expanded, shape])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(dim: Dim, n: usize, uneven: bool) -> R<String> {
        split_sizes(&dim, n, uneven).map(|v| format!("{v:?}"))
    }

    #[test]
    fn split_sizes_follow_onnx() {
        let d = Dim::fixed;
        assert_eq!(sizes(d(6), 3, false).unwrap(), "[2, 2, 2]");
        assert_eq!(sizes(d(6), 3, true).unwrap(), "[2, 2, 2]");
        // ONNX opset 18 example: 7 into 4 is [2, 2, 2, 1]; 7 into 3 is [3, 3, 1].
        assert_eq!(sizes(d(7), 4, true).unwrap(), "[2, 2, 2, 1]");
        assert_eq!(sizes(d(7), 3, true).unwrap(), "[3, 3, 1]");
        assert!(sizes(d(7), 3, false).unwrap_err().contains("equal pieces"));
        assert!(sizes(d(5), 4, true).unwrap_err().contains("cannot split 5"));
        let two_seq = &Dim::fixed(2) * &Dim::sym("seq");
        assert_eq!(sizes(two_seq, 2, true).unwrap(), "[seq, seq]");
        assert!(sizes(Dim::sym("seq"), 2, true).is_err());
        assert!(sizes(d(4), 0, true).is_err());
    }
}

#[cfg(test)]
mod import_tests {
    use crate::onnx::testutil::*;
    use onnx_protobuf::tensor_proto::DataType;
    use slmcc_ir::Tensor;

    fn split_model(
        opset: i64,
        dims: &[&str],
        outs: &[&str],
        attrs: Vec<onnx_protobuf::AttributeProto>,
        split: Option<&[i64]>,
    ) -> onnx_protobuf::ModelProto {
        let mut inputs = vec!["x"];
        let mut inits = vec![];
        if let Some(s) = split {
            inputs.push("s");
            inits.push(i64_tensor("s", &[s.len() as i64], s));
        }
        model(
            opset,
            vec![input("x", dims)],
            outs,
            inits,
            vec![node("Split", &inputs, outs, attrs)],
        )
    }

    #[test]
    fn split_num_outputs_and_equal_and_given_sizes() {
        let m = split_model(
            18,
            &["2", "7"],
            &["a", "b", "c"],
            vec![a_int("axis", 1), a_int("num_outputs", 3)],
            None,
        );
        let text = import_text(&m);
        assert!(text.contains("%a, %b, %c = split %x {axis = 1, sizes = [3, 3, 1]} : f32[2, 3], f32[2, 3], f32[2, 1]"), "{text}");
        let m = split_model(
            13,
            &["seq", "6"],
            &["a", "b"],
            vec![a_int("axis", -1)],
            None,
        );
        assert!(import_text(&m).contains("sizes = [3, 3]"));
        let m = split_model(
            18,
            &["2", "6"],
            &["a", "b"],
            vec![a_int("axis", 1)],
            Some(&[4, 2]),
        );
        assert!(import_text(&m).contains("sizes = [4, 2]"));
        let m = split_model(18, &["2", "6"], &["a", "b"], vec![a_int("axis", 1)], None);
        assert!(import_err(&m).contains("needs the `split` input or the `num_outputs` attribute"));
        let m = split_model(13, &["2", "7"], &["a", "b"], vec![a_int("axis", 1)], None);
        assert!(import_err(&m).contains("cannot split 7 into 2 equal pieces"));
    }

    #[test]
    fn flatten_reshapes_to_a_symbolic_target() {
        let m = model(
            13,
            vec![input("x", &["2", "seq", "4"])],
            &["y"],
            vec![],
            vec![node("Flatten", &["x"], &["y"], vec![a_int("axis", 2)])],
        );
        let text = import_text(&m);
        assert!(
            text.contains("constant {value = [2*seq, 4]} : i64[2]"),
            "{text}"
        );
        assert!(text.contains(": f32[2*seq, 4]"), "{text}");
        let m = model(
            13,
            vec![input("x", &["2", "3", "4"])],
            &["y"],
            vec![],
            vec![node("Flatten", &["x"], &["y"], vec![])],
        );
        assert!(import_text(&m).contains("%y = reshape %x, %y_constant : f32[2, 12]"));
    }

    #[test]
    fn squeeze_and_unsqueeze_axes() {
        let m = model(
            13,
            vec![input("x", &["1", "3", "1"])],
            &["y"],
            vec![],
            vec![node("Squeeze", &["x"], &["y"], vec![])],
        );
        assert!(import_text(&m).contains("squeeze %x {axes = [0, 2]} : f32[3]"));
        let m = model(
            13,
            vec![input("x", &["1", "seq"])],
            &["y"],
            vec![],
            vec![node("Squeeze", &["x"], &["y"], vec![])],
        );
        assert!(import_err(&m).contains("without axes"));
        let m = model(
            13,
            vec![
                input("x", &["3"]),
                tensor_info("ax", DataType::INT64, &["1"]),
            ],
            &["y"],
            vec![],
            vec![node("Unsqueeze", &["x", "ax"], &["y"], vec![])],
        );
        assert!(
            import_err(&m).ends_with("(Unsqueeze, opset 13): axes must be known at compile time")
        );
    }

    #[test]
    fn slice_with_steps_but_no_axes() {
        let m = model(
            13,
            vec![input("x", &["2", "5"])],
            &["y"],
            vec![
                i64_tensor("st", &[2], &[0, 4]),
                i64_tensor("en", &[2], &[2, 0]),
                i64_tensor("sp", &[2], &[1, -2]),
            ],
            vec![node("Slice", &["x", "st", "en", "", "sp"], &["y"], vec![])],
        );
        let x = Tensor::from_f32(vec![2, 5], (0..10).map(|v| v as f32).collect());
        let y = run1(&m, &[x]);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.as_f32().unwrap(), &[4.0, 2.0, 9.0, 7.0]);
    }

    #[test]
    fn tile_repeats_each_axis() {
        let m = model(
            13,
            vec![input("x", &["2", "2"])],
            &["y"],
            vec![i64_tensor("r", &[2], &[2, 3])],
            vec![node("Tile", &["x", "r"], &["y"], vec![])],
        );
        let y = run1(
            &m,
            &[Tensor::from_f32(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0])],
        );
        assert_eq!(y.shape(), &[4, 6]);
        let row1 = [1.0, 2.0, 1.0, 2.0, 1.0, 2.0];
        let row2 = [3.0, 4.0, 3.0, 4.0, 3.0, 4.0];
        let want: Vec<f32> = [row1, row2, row1, row2].concat();
        assert_eq!(y.as_f32().unwrap(), &want[..]);
    }

    #[test]
    fn transpose_defaults_to_reversed_axes() {
        let m = model(
            13,
            vec![input("x", &["2", "3", "seq"])],
            &["y"],
            vec![],
            vec![node("Transpose", &["x"], &["y"], vec![])],
        );
        assert!(import_text(&m).contains("transpose %x {perm = [2, 1, 0]} : f32[seq, 3, 2]"));
    }

    #[test]
    fn shape_bookkeeping_resolves_at_import() {
        // shape -> gather -> unsqueeze -> concat -> reshape, as exporters write it.
        let m = model(
            18,
            vec![input("x", &["1", "seq", "8"])],
            &["y"],
            vec![
                i64_tensor("one", &[], &[1]),
                i64_tensor("one_d", &[1], &[1]),
                i64_tensor("zero", &[1], &[0]),
                i64_tensor("tail", &[2], &[2, 4]),
            ],
            vec![
                node("Shape", &["x"], &["s"], vec![]),
                node("Gather", &["s", "one"], &["n"], vec![a_int("axis", 0)]),
                node("Unsqueeze", &["n", "zero"], &["un"], vec![]),
                node(
                    "Concat",
                    &["one_d", "un", "tail"],
                    &["t"],
                    vec![a_int("axis", 0)],
                ),
                node("Reshape", &["x", "t"], &["y"], vec![]),
            ],
        );
        let text = import_text(&m);
        assert!(
            text.contains("%y = reshape %x, %t : f32[1, seq, 2, 4]"),
            "{text}"
        );
    }

    #[test]
    fn constant_of_shape_and_range() {
        let mut v = onnx_protobuf::TensorProto::new();
        v.data_type = DataType::INT64 as i32;
        v.dims = vec![1];
        v.int64_data = vec![7];
        let m = model(
            13,
            vec![input("x", &["2", "3"])],
            &["c", "r"],
            vec![
                i64_tensor("a", &[], &[0]),
                i64_tensor("b", &[], &[3]),
                i64_tensor("d", &[], &[1]),
            ],
            vec![
                node("Shape", &["x"], &["s"], vec![]),
                node(
                    "ConstantOfShape",
                    &["s"],
                    &["c"],
                    vec![a_tensor("value", v)],
                ),
                node("Range", &["a", "b", "d"], &["r"], vec![]),
            ],
        );
        let text = import_text(&m);
        assert!(
            text.contains("%c = constant_of_shape %s {value = 7} : i64[2, 3]"),
            "{text}"
        );
        assert!(text.contains("%r = range %a, %b, %d : i64[3]"), "{text}");
    }
}
