//! onnxruntime's contrib ops that its transformer optimizer and
//! onnxruntime-genai's model builder write, mapped onto IR ops (the fusion
//! pass then makes an `add` + `rms_norm` one `add_rms_norm`, as for any
//! export):
//!
//! - `SimplifiedLayerNormalization(X, scale)` (in the default domain, where
//!   onnxruntime registers it, not `com.microsoft`): `X / √(mean(X²) + ε) ·
//!   scale` over the last axis, imported as opset 23's `RMSNormalization`
//!   (`axis` = -1 or rank - 1, `stash_type` 1). The `inv_std_var` output
//!   is not supported.
//! - `SkipSimplifiedLayerNormalization(input, skip, gamma[, bias])`
//!   (`com.microsoft`): the same normalisation of `input + skip (+ bias)`,
//!   whose sum is the optional output 3 (`input_skip_bias_sum`). The
//!   `mean` and `inv_std_var` outputs (1 and 2) are not supported.
//! - `SkipLayerNormalization(input, skip, gamma[, beta, bias])`
//!   (`com.microsoft`): `layer_norm` over the last axis of `input + skip
//!   (+ bias)`, the sum being output 3; outputs 1 and 2 (the statistics)
//!   are not supported.
//! - `FastGelu(X[, bias])` (`com.microsoft`): `gelu` with the tanh
//!   approximation of `X (+ bias)`.
//! - `MatMulNBits(A, B, scales[, zero_points, g_idx, bias])`
//!   (`com.microsoft`): `A` by a block-quantized weight, imported as a
//!   weight-only `qmatmul` (`activations = "f32"`, group = `block_size`)
//!   with no loss: `B`'s `[N, ⌈K / block⌉, block · bits / 8]` bytes (`bits`
//!   4, low nibble first, or 8) minus the zero point are the `i4`/`i8`
//!   weight `q[K, N]`, exactly, and `scales` (`[N, ⌈K / block⌉]`) its scales
//!   transposed; `B` and `scales` are dropped once read. The zero point
//!   is the midpoint, 8 for 4 bits and 128 for 8, when `zero_points` is
//!   absent (what a symmetric quantizer writes). Other whole-number zero
//!   points (onnxruntime's asymmetric quantizer) are subtracted block by
//!   block, exactly: 4-bit weights then span up to 5 bits and are stored
//!   as `i8` (twice the bytes, with a warning); 8-bit weights must keep
//!   the midpoint. `g_idx` is refused. A `K` that is not
//!   a multiple of the block (the last block padded, as the genai builder
//!   writes for an MLP of 176 rows in blocks of 32) becomes groups of
//!   `gcd(K, block)` rows, each with its block's scale. Every `accuracy_level` is accepted: level
//!   4 lets onnxruntime quantize `A` to int8, slmcc keeps `A` in `f32` at
//!   every level. `B`, `scales` and `zero_points` must be initializers.
//!
//! - `GroupQueryAttention`: see `gqa.rs`; `RotaryEmbedding`: see
//!   `contrib_rope.rs`; `MultiHeadAttention`: see `mha.rs`.
//!
//! Other `com.microsoft` ops are refused with their name and domain.

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::fused::gelu::{Gelu, GeluApprox};
use slmcc_ir::ops::layer_norm::LayerNorm;
use slmcc_ir::ops::quantized::qmatmul::{QActivations, QMatMul};
use slmcc_ir::ops::rms_norm::RmsNorm;
use slmcc_ir::{DType, Tensor, TensorData, ValueId};

use super::OpMap;
use crate::onnx::context::{fail, Ctx, R};

/// The `com.microsoft` domain as models name it.
pub const DOMAIN: &str = "com.microsoft";

/// Registers the ops that onnxruntime puts in the default domain.
pub fn register_default(reg: &mut OpMap) {
    // The same op as opset 23's `RMSNormalization`, attributes and all.
    reg.insert("SimplifiedLayerNormalization", super::transformer::rms_norm);
}

/// Registers the `com.microsoft` ops.
pub fn register(reg: &mut OpMap) {
    reg.insert(
        "SkipSimplifiedLayerNormalization",
        skip_simplified_layer_norm,
    );
    reg.insert("SkipLayerNormalization", skip_layer_norm);
    reg.insert("FastGelu", fast_gelu);
    reg.insert("MatMulNBits", matmul_nbits);
    reg.insert("GroupQueryAttention", super::gqa::group_query_attention);
    reg.insert("RotaryEmbedding", super::contrib_rope::rotary_embedding);
    reg.insert("MultiHeadAttention", super::mha::multi_head_attention);
}

fn skip_simplified_layer_norm(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 4)?;
    let eps = ctx.float("epsilon", 1e-12)?;
    let (sum, gamma) = skip_sum(ctx, 3)?;
    let y = ctx.add1(RmsNorm { eps, offset: 0.0 }, &[sum, gamma])?;
    // Outputs 1 and 2 are unnamed here (checked by `skip_sum`): any value
    // binds nothing to them.
    Ok(vec![y, y, y, sum])
}

fn skip_layer_norm(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 5)?;
    let eps = ctx.float("epsilon", 1e-12)?;
    let (sum, gamma) = skip_sum(ctx, 4)?;
    let mut operands = vec![sum, gamma];
    operands.extend(ctx.opt_input(3));
    let y = ctx.add1(LayerNorm { axis: -1, eps }, &operands)?;
    Ok(vec![y, y, y, sum])
}

/// The skip ops' `input + skip (+ bias)`, `bias` being input `bias_at`, and
/// `gamma` (input 2); fails if the statistics outputs (1 and 2) are used.
fn skip_sum(ctx: &mut Ctx, bias_at: usize) -> R<(ValueId, ValueId)> {
    let (x, skip, gamma) = (ctx.input(0)?, ctx.input(1)?, ctx.input(2)?);
    for (i, what) in [(1, "mean"), (2, "inverse standard deviation")] {
        if ctx.output_used(i) {
            fail!("output {i} (the {what}) is not supported");
        }
    }
    ctx.only_outputs(4, "")?;
    let mut sum = ctx.add1(Binary::new(BinaryKind::Add), &[x, skip])?;
    if let Some(bias) = ctx.opt_input(bias_at) {
        sum = ctx.add1(Binary::new(BinaryKind::Add), &[sum, bias])?;
    }
    Ok((sum, gamma))
}

fn fast_gelu(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(1, 2)?;
    ctx.only_outputs(1, "")?;
    let mut x = ctx.input(0)?;
    if let Some(bias) = ctx.opt_input(1) {
        x = ctx.add1(Binary::new(BinaryKind::Add), &[x, bias])?;
    }
    let gelu = Gelu {
        approximate: GeluApprox::Tanh,
    };
    Ok(vec![ctx.add1(gelu, &[x])?])
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn matmul_nbits(ctx: &mut Ctx) -> R<Vec<ValueId>> {
    ctx.expect_inputs(3, 6)?;
    ctx.only_outputs(1, "")?;
    let (k, n) = (ctx.int("K", 0)?, ctx.int("N", 0)?);
    let bits = ctx.int("bits", 4)?;
    let block = ctx.int("block_size", 0)?;
    let level = ctx.int("accuracy_level", 0)?;
    if !(0..=4).contains(&level) {
        fail!("attribute `accuracy_level` = {level} is not in 0..=4");
    }
    if bits != 4 && bits != 8 {
        fail!("attribute `bits` = {bits} is not supported (4 or 8)");
    }
    if block < 16 || !(block as u64).is_power_of_two() {
        fail!("attribute `block_size` = {block} is not a power of two of at least 16");
    }
    if k <= 0 || n <= 0 {
        fail!("K = {k}, N = {n} must be positive");
    }
    if ctx.opt_input(4).is_some() {
        fail!("input 4 (`g_idx`) is not supported");
    }
    let a_ty = ctx.ty(ctx.input(0)?).clone();
    if a_ty.shape.dims().last() != Some(&slmcc_ir::Dim::fixed(k)) {
        fail!("input 0 (`A`) is {a_ty}; its last dim must be K = {k}");
    }
    let (k, n, block) = (k as usize, n as usize, block as usize);
    // The last block may be padded past K.
    let blocks = k.div_ceil(block);
    // `qmatmul` groups divide K: a padded last block is cut into groups
    // of gcd(K, block) rows, each with its block's scale (exact).
    let group = gcd(k, block);
    let per_block = block / group;
    let blob = block * bits as usize / 8;
    let b = ctx
        .input_data(1)?
        .ok_or_else(|| "input 1 (`B`) must be an initializer".to_string())?;
    let TensorData::U8(bytes) = b.data() else {
        fail!("input 1 (`B`) is {}, not uint8", b.dtype());
    };
    if b.shape() != [n, blocks, blob] {
        fail!(
            "input 1 (`B`) has shape {:?}; K = {k}, N = {n} and block_size = {block} need [{n}, {blocks}, {blob}]",
            b.shape()
        );
    }
    let scales = ctx
        .input_data(2)?
        .ok_or_else(|| "input 2 (`scales`) must be an initializer".to_string())?;
    let scales = scales.cast(DType::F32);
    let scales = scales.as_f32().expect("cast to f32");
    if scales.len() != n * blocks {
        fail!(
            "input 2 (`scales`) has {} values, N · ⌈K / block_size⌉ = {} needed",
            scales.len(),
            n * blocks
        );
    }
    let mid: u8 = if bits == 4 { 8 } else { 128 };
    // The zero point of every (row of N, block).
    let zero_points: Vec<f32> =
        match ctx.opt_input(3) {
            None => vec![f32::from(mid); n * blocks],
            Some(_) => {
                let zp = ctx
                    .input_data(3)?
                    .ok_or_else(|| "input 3 (`zero_points`) must be an initializer".to_string())?;
                match zp.data() {
                    // Packed like B, each row of N padded to whole bytes.
                    TensorData::U8(z) if bits == 4 && z.len() == n * blocks.div_ceil(2) => z
                        .chunks_exact(blocks.div_ceil(2))
                        .flat_map(|r| {
                            (0..blocks).map(|blk| f32::from((r[blk / 2] >> (4 * (blk % 2))) & 0xf))
                        })
                        .collect(),
                    TensorData::U8(z) if bits == 8 && z.len() == n * blocks => {
                        z.iter().map(|&b| f32::from(b)).collect()
                    }
                    TensorData::U8(z) => fail!(
                    "input 3 (`zero_points`) has {} bytes; N = {n} rows of {blocks} blocks need {}",
                    z.len(),
                    if bits == 4 { n * blocks.div_ceil(2) } else { n * blocks }
                ),
                    _ => zp.cast(DType::F32).as_f32().expect("cast to f32").to_vec(),
                }
            }
        };
    if zero_points.len() != n * blocks || zero_points.iter().any(|z| z.fract() != 0.0) {
        fail!("input 3 (`zero_points`): {n} × {blocks} whole-number zero points are supported");
    }
    // With the midpoint everywhere the weights keep their bits. Other zero
    // points make `B - zero_point` span up to twice the range: 4-bit weights
    // are stored as exact 8-bit ones (twice the bytes, no rounding).
    let symmetric = zero_points.iter().all(|&z| z == f32::from(mid));
    let stored_bits = if symmetric { bits } else { 8 };
    if !symmetric {
        if bits == 8 {
            fail!(
                "input 3 (`zero_points`): 8-bit weights need the midpoint zero point (128) in \
                 every block (`qmatmul` weights are symmetric, and B - zero_point would not fit \
                 in 8 bits)"
            );
        }
        tracing::warn!(
            "node `{}` (MatMulNBits): zero points other than 8, so its 4-bit weights are \
             stored as exact int8 values (twice the bytes)",
            ctx.label()
        );
    }
    // q[k, n] = B's element k of row n minus its block's zero point, exactly.
    let mut q = vec![0i8; k * n];
    for (row, column) in bytes.chunks_exact(blocks * blob).enumerate() {
        for kk in 0..k {
            let v = match bits {
                4 => (column[kk / 2] >> (4 * (kk % 2))) & 0xf,
                _ => column[kk],
            };
            let z = zero_points[row * blocks + kk / block] as i16;
            q[kk * n + row] = (i16::from(v) - z) as i8;
        }
    }
    let groups = k / group;
    let mut scale = vec![0f32; groups * n];
    for (row, s) in scales.chunks_exact(blocks).enumerate() {
        for g in 0..groups {
            scale[g * n + row] = s[g / per_block];
        }
    }
    let data = match stored_bits {
        4 => TensorData::I4(q),
        _ => TensorData::I8(q),
    };
    let q = Tensor::new(vec![k, n], data).map_err(|e| e.to_string())?;
    let scale = Tensor::from_f32(vec![groups, n], scale);
    // `B`, `scales` and `zero_points` are read into the new weights.
    for i in 1..=3 {
        ctx.supersede(i);
    }
    let a = ctx.input(0)?;
    let (q, scale) = (ctx.new_weight("q", q), ctx.new_weight("scale", scale));
    let op = QMatMul {
        activations: QActivations::F32,
        ..QMatMul::new(stored_bits, group as i64).map_err(|e| e.to_string())?
    };
    let mut y = ctx.add1(op, &[a, q, scale])?;
    if let Some(bias) = ctx.opt_input(5) {
        y = ctx.add1(Binary::new(BinaryKind::Add), &[y, bias])?;
    }
    Ok(vec![y])
}

#[cfg(test)]
mod tests {
    use super::DOMAIN;
    use crate::onnx::testutil::*;

    /// A model of one `com.microsoft` node `op` over inputs `x`, `s`
    /// (`[2, 4]`) and the initializer `g` (`[4]`).
    fn microsoft(op: &str, inputs: &[&str], outputs: &[&str]) -> onnx_protobuf::ModelProto {
        let mut n = node(op, inputs, outputs, vec![]);
        n.domain = DOMAIN.to_string();
        let used: Vec<&str> = outputs.iter().copied().filter(|o| !o.is_empty()).collect();
        let mut m = model(
            17,
            vec![input("x", &["2", "4"]), input("s", &["2", "4"])],
            &used,
            vec![f32_tensor("g", &[4], &[1.0; 4])],
            vec![n],
        );
        import_domain(&mut m, DOMAIN, 1);
        m
    }

    #[test]
    fn statistics_outputs_are_refused_by_name() {
        let op = "SkipSimplifiedLayerNormalization";
        let e = import_err(&microsoft(op, &["x", "s", "g"], &["y", "mean"]));
        assert!(e.contains("output 1 (the mean) is not supported"), "{e}");
        let e = import_err(&microsoft(op, &["x", "s", "g"], &["y", "", "inv"]));
        assert!(
            e.contains("output 2 (the inverse standard deviation)"),
            "{e}"
        );
        let m = model(
            17,
            vec![input("x", &["2", "4"])],
            &["y", "inv"],
            vec![f32_tensor("g", &[4], &[1.0; 4])],
            vec![node(
                "SimplifiedLayerNormalization",
                &["x", "g"],
                &["y", "inv"],
                vec![],
            )],
        );
        let e = import_err(&m);
        assert!(e.contains("output 1 (`inv`) is not supported"), "{e}");
    }

    /// A `MatMulNBits` model: `a: f32[2, 32]` by a 4-bit `[32, 4]` weight
    /// in blocks of 16, with `zero_points` bytes `zp` when given, and more
    /// inputs and attributes.
    fn nbits(
        zp: Option<&[u8]>,
        extra_inputs: &[&str],
        attrs: Vec<onnx_protobuf::AttributeProto>,
    ) -> onnx_protobuf::ModelProto {
        let u8_tensor = |name: &str, dims: &[i64], data: Vec<u8>| {
            let mut t = onnx_protobuf::TensorProto::new();
            t.name = name.to_string();
            t.data_type = onnx_protobuf::tensor_proto::DataType::UINT8 as i32;
            t.dims = dims.to_vec();
            t.raw_data = data;
            t
        };
        let mut inits = vec![
            u8_tensor("B", &[4, 2, 8], vec![0x98; 64]),
            f32_tensor("scales", &[8], &[0.5; 8]),
        ];
        let mut inputs = vec!["a", "B", "scales"];
        if let Some(z) = zp {
            inits.push(u8_tensor("zp", &[4, 1], z.to_vec()));
            inputs.push("zp");
        }
        inputs.extend(extra_inputs);
        let mut attributes = vec![a_int("K", 32), a_int("N", 4), a_int("block_size", 16)];
        attributes.extend(attrs);
        let mut n = node("MatMulNBits", &inputs, &["y"], attributes);
        n.domain = DOMAIN.to_string();
        let mut m = model(17, vec![input("a", &["2", "32"])], &["y"], inits, vec![n]);
        import_domain(&mut m, DOMAIN, 1);
        m
    }

    #[test]
    fn matmul_nbits_imports_b_minus_the_midpoint_times_the_scale() {
        // Each byte 0x98: elements 8 and 9, so q alternates 0 and 1 along K;
        // scale 0.5: y = 0.5 · Σ over odd k of a[k].
        let a: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let y = run1(
            &nbits(Some(&[0x88; 4]), &[], vec![]),
            &[slmcc_ir::Tensor::from_f32(vec![2, 32], a.clone())],
        );
        let want: Vec<f32> = (0..2)
            .flat_map(|r| {
                let s: f32 = (0..32).filter(|k| k % 2 == 1).map(|k| a[r * 32 + k]).sum();
                [0.5 * s; 4]
            })
            .collect();
        assert_close(y.as_f32().unwrap(), &want, 1e-6);
    }

    #[test]
    fn matmul_nbits_with_other_zero_points_subtracts_each_blocks_own() {
        // Column 0's second block has zero point 7 (the high nibble of
        // 0x78), every other block 8: w = 0.5 · (B - zero point).
        let a: Vec<f32> = (0..64).map(|i| i as f32).collect();
        let y = run1(
            &nbits(Some(&[0x78, 0x88, 0x88, 0x88]), &[], vec![]),
            &[slmcc_ir::Tensor::from_f32(vec![2, 32], a.clone())],
        );
        let w = |k: usize, n: usize| {
            let v = if k.is_multiple_of(2) { 8.0 } else { 9.0 };
            let zp = if n == 0 && k >= 16 { 7.0 } else { 8.0 };
            0.5 * (v - zp)
        };
        let want: Vec<f32> = (0..2)
            .flat_map(|r| (0..4).map(move |n| (r, n)))
            .map(|(r, n)| (0..32).map(|k| a[r * 32 + k] * w(k, n)).sum())
            .collect();
        assert_close(y.as_f32().unwrap(), &want, 1e-6);
    }

    #[test]
    fn matmul_nbits_refusals_name_the_input_or_attribute() {
        let e = import_err(&nbits(None, &["", "a"], vec![]));
        assert!(e.contains("`g_idx`"), "{e}");
        let e = import_err(&nbits(None, &[], vec![a_int("bits", 2)]));
        assert!(e.contains("`bits` = 2 is not supported"), "{e}");
        let mut m = nbits(None, &[], vec![]);
        m.graph.as_mut().unwrap().node[0].attribute[0] = a_int("K", 24);
        let e = import_err(&m);
        assert!(e.contains("its last dim must be K = 24"), "{e}");
    }

    #[test]
    fn an_unknown_contrib_op_is_refused_with_its_name_and_domain() {
        let e = import_err(&microsoft("FancyAttention", &["x", "s"], &["y"]));
        assert!(
            e.contains("op `FancyAttention` of domain `com.microsoft` is not supported"),
            "{e}"
        );
    }
}
