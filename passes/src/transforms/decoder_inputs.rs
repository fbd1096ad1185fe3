//! `decoder-inputs`: the interface that Optimum and other exporters give a
//! decoder (`input_ids`, `attention_mask`, `position_ids` and
//! `past_key_values.*`, with a symbolic batch), reduced to the one that
//! slmcc compiles: batch 1, the token ids and the past, nothing else.
//!
//! At batch 1 nothing is padded, so the attention mask is all ones and the
//! positions are `past .. past + seq - 1`; both become computed values, and
//! the mask that the model builds from them folds into the causal rule that
//! `eqsat-fuse` recognises. A user who runs such a model with those inputs
//! gives exactly these values (`slmcc run` checks that, see
//! [`default_value_matches`]).

use std::collections::HashMap;

use slmcc_ir::ops::binary::{Binary, BinaryKind};
use slmcc_ir::ops::constant::Constant;
use slmcc_ir::ops::constant_of_shape::ConstantOfShape;
use slmcc_ir::ops::range::Range;
use slmcc_ir::ops::unsqueeze::Unsqueeze;
use slmcc_ir::ops::Known;
use slmcc_ir::{DType, Dim, Graph, Module, Shape, Tensor, TensorType, ValueId};

use crate::options::{OptionSpec, PassOptions};
use crate::pass::{failed, Invalidates, Pass, PassError, Requires, Statistic, Statistics};
use crate::registry::PassInfo;
use crate::specialize::substitute_everywhere;

/// Options of `decoder-inputs` (none).
pub const OPTIONS: &[OptionSpec] = &[];

/// The token input that marks a decoder's graph.
pub const TOKEN_INPUT: &str = "input_ids";
/// The input that, at batch 1, is all ones.
pub const MASK_INPUT: &str = "attention_mask";
/// The input that, at batch 1, counts from the past length.
pub const POSITIONS_INPUT: &str = "position_ids";
/// The prefix of the exported past keys and values.
pub const PAST_PREFIX: &str = "past_key_values.";
/// The sequence symbol the later passes (`kv-cache`, `bucket-specialize`)
/// work with by default.
pub const SEQ_SYMBOL: &str = "seq";

/// The counters this pass reports.
pub const STATISTICS: &[Statistic] = &[
    Statistic::new("batch-bound", "batch symbols bound to 1"),
    Statistic::new("symbols-renamed", "sequence or total-length symbols renamed to `seq` or bound to `past + seq`"),
    Statistic::new("inputs-defaulted", "`attention_mask` and `position_ids` inputs computed inside the graph"),
];

/// This pass's registry entry.
pub const INFO: PassInfo = PassInfo {
    name: "decoder-inputs",
    summary: "a decoder at batch 1: batch bound, attention_mask and position_ids computed, `seq` named",
    options: OPTIONS,
    requires: Requires::Any,
    invalidates: Invalidates::Plans,
    establishes: None,
    keeps_outputs: true,
    statistics: || STATISTICS.to_vec(),
    create: |o| Ok(Box::new(DecoderInputs::from_options(o))),
};

/// For every graph that is a decoder's (an integer `%input_ids` of rank 2,
/// and a `%position_ids` or `%past_key_values.*` input, which no encoder
/// such as BERT has):
///
/// - binds the batch symbol (dim 0 of `%input_ids`) to 1 everywhere:
///   slmcc decodes one sequence at a time, and a larger batch given later
///   is refused by the input check with the expected `[1, ...]` type;
/// - renames the sequence symbol (dim 1 of `%input_ids`, Optimum's
///   `sequence_length`) to `seq`, unless `seq` names another dim already;
///   a mask length that is a symbol of its own (onnxruntime-genai's
///   `total_sequence_length`, which no other input mentions) becomes
///   `past + seq`, what it counts;
/// - replaces `%attention_mask` (`[1, past + seq]`, integer or boolean) by
///   a `constant_of_shape` of ones, and `%position_ids` (`i64[1, seq]`) by
///   `unsqueeze(range(0, seq, 1) + past, [0])`, where `past` is the
///   length of the `past_key_values` inputs (0 without them). Both keep
///   their names as the computed values.
///
/// Requires: a verified module. Guarantees: a verified module whose
/// outputs keep their names and, for batch 1, an all-ones mask and the
/// positions after the past, compute what they computed before; other
/// graphs are unchanged. Fails, naming the input, when `%attention_mask`
/// does not span the past and the new tokens. Statistics: `batch-bound`,
/// `symbols-renamed`, `inputs-defaulted`.
pub struct DecoderInputs;

impl DecoderInputs {
    pub fn from_options(_: &PassOptions) -> DecoderInputs {
        DecoderInputs
    }
}

impl Pass for DecoderInputs {
    fn name(&self) -> &'static str {
        "decoder-inputs"
    }

    fn run(&mut self, module: &mut Module, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut changed = false;
        for g in &mut module.graphs {
            if !is_decoder(g) {
                continue;
            }
            changed |= rewrite(g, stats).map_err(|e| failed(self.name(), e))?;
        }
        Ok(changed)
    }
}

fn input(g: &Graph, name: &str) -> Option<ValueId> {
    g.inputs.iter().copied().find(|&i| g.value(i).name == name)
}

fn is_decoder(g: &Graph) -> bool {
    let Some(ids) = input(g, TOKEN_INPUT) else {
        return false;
    };
    let ty = g.ty(ids);
    ty.dtype.is_int()
        && ty.rank() == 2
        && g.inputs.iter().any(|&i| {
            let name = &g.value(i).name;
            name == POSITIONS_INPUT || name.starts_with(PAST_PREFIX)
        })
}

/// The symbol a dim is, when it is exactly one symbol.
fn plain_symbol(d: &Dim) -> Option<String> {
    match d.symbols()[..] {
        [s] if *d == Dim::sym(s) => Some(s.to_string()),
        _ => None,
    }
}

fn rewrite(g: &mut Graph, stats: &mut Statistics) -> Result<bool, String> {
    let mut changed = false;
    let ids = input(g, TOKEN_INPUT).expect("a decoder has input_ids");
    let dims = g.ty(ids).shape.dims().to_vec();
    let mut subst = HashMap::new();
    if let Some(batch) = plain_symbol(&dims[0]) {
        subst.insert(batch, Dim::fixed(1));
        stats.add("batch-bound", 1);
    }
    if let Some(seq) = plain_symbol(&dims[1]).filter(|s| s != SEQ_SYMBOL) {
        let taken = g.values().any(|(_, v)| {
            v.ty.shape
                .dims()
                .iter()
                .any(|d| d.symbols().contains(&SEQ_SYMBOL))
        });
        if !taken {
            subst.insert(seq, Dim::sym(SEQ_SYMBOL));
            stats.add("symbols-renamed", 1);
        }
    }
    if !subst.is_empty() {
        substitute_everywhere(g, &subst)?;
        changed = true;
    }
    let seq = g.ty(ids).shape.dims()[1].clone();
    let past = past_length(g)?;
    let total = &past + &seq;
    if let Some(own) = own_total_symbol(g, &total) {
        let subst = HashMap::from([(own, total.clone())]);
        substitute_everywhere(g, &subst)?;
        stats.add("symbols-renamed", 1);
        changed = true;
    }
    if let Some(mask) = input(g, MASK_INPUT) {
        let ty = g.ty(mask).clone();
        let expected = [Dim::fixed(1), total.clone()];
        if ty.shape.dims() != expected {
            return Err(format!(
                "graph @{}: %{MASK_INPUT} is {ty}; a batch-1 decoder's mask is [1, {total}] \
                 (the past and the new tokens)",
                g.name
            ));
        }
        replace_input(g, mask, |g, name| all_ones(g, name, &ty))?;
        stats.add("inputs-defaulted", 1);
        changed = true;
    }
    if let Some(pos) = input(g, POSITIONS_INPUT) {
        let ty = g.ty(pos).clone();
        if ty.dtype == DType::I64 && ty.shape.dims() == [Dim::fixed(1), seq.clone()] {
            replace_input(g, pos, |g, name| positions(g, name, &past, &seq))?;
            stats.add("inputs-defaulted", 1);
            changed = true;
        }
    }
    Ok(changed)
}

/// The symbol of the mask's length when it is one of its own (the genai
/// builder's `total_sequence_length`), which no other input mentions and
/// which is therefore free to be what it means: `past + seq`.
fn own_total_symbol(g: &Graph, total: &Dim) -> Option<String> {
    let mask = input(g, MASK_INPUT)?;
    let ty = g.ty(mask);
    let len = ty.shape.dims().get(1).filter(|d| *d != total)?;
    let symbol = plain_symbol(len)?;
    let elsewhere = g.inputs.iter().any(|&i| {
        i != mask
            && g.ty(i)
                .shape
                .dims()
                .iter()
                .any(|d| d.symbols().contains(&symbol.as_str()))
    });
    (!elsewhere).then_some(symbol)
}

/// The length (axis 2) of the `past_key_values` inputs, all the same; 0
/// without them.
fn past_length(g: &Graph) -> Result<Dim, String> {
    let mut len: Option<Dim> = None;
    for &i in &g.inputs {
        let v = g.value(i);
        if !v.name.starts_with(PAST_PREFIX) {
            continue;
        }
        let Some(d) = v.ty.shape.dims().get(2) else {
            return Err(format!(
                "graph @{}: %{} is {}; past keys and values are [batch, heads, past, head_dim]",
                g.name, v.name, v.ty
            ));
        };
        match &len {
            Some(l) if l != d => {
                return Err(format!(
                    "graph @{}: %{} has past length {d}, the others {l}",
                    g.name, v.name
                ))
            }
            _ => len = Some(d.clone()),
        }
    }
    Ok(len.unwrap_or(Dim::fixed(0)))
}

/// Replaces the input `old` by the value `build` computes (named as the
/// input was), its nodes placed first.
fn replace_input(
    g: &mut Graph,
    old: ValueId,
    build: impl FnOnce(&mut Graph, String) -> Result<ValueId, String>,
) -> Result<(), String> {
    let name = g.value(old).name.clone();
    let parked = g.fresh_name(&format!("{name}.input"));
    g.rename(old, parked).map_err(|e| e.to_string())?;
    let first_new = g.nodes.len();
    let new = build(g, name)?;
    let added = g.nodes.len() - first_new;
    g.nodes.rotate_right(added);
    g.replace_all_uses(old, new);
    g.inputs.retain(|&i| i != old);
    g.compact();
    Ok(())
}

fn add1(
    g: &mut Graph,
    op: impl Into<slmcc_ir::Op>,
    inputs: Vec<ValueId>,
    name: String,
    ty: TensorType,
) -> Result<ValueId, String> {
    let graph = g.name.clone();
    Ok(g.add_node(op, inputs, vec![(name, ty)])
        .map_err(|e| format!("graph @{graph}: {e}"))?[0])
}

/// A constant of dims (a scalar when `shape` is empty).
fn dims_constant(
    g: &mut Graph,
    hint: &str,
    values: Vec<Dim>,
    scalar: bool,
) -> Result<ValueId, String> {
    let shape: Vec<usize> = if scalar { vec![] } else { vec![values.len()] };
    let ty = TensorType::fixed(
        DType::I64,
        &shape.iter().map(|&d| d as i64).collect::<Vec<_>>(),
    );
    let c = Constant::from_known(ty.clone(), Known::from_dims(shape, values));
    let name = g.fresh_name(hint);
    add1(g, c, vec![], name, ty)
}

/// `constant_of_shape(ty's shape) {value = 1}` of `ty`'s dtype.
fn all_ones(g: &mut Graph, name: String, ty: &TensorType) -> Result<ValueId, String> {
    let shape = dims_constant(g, &format!("{name}.shape"), ty.shape.dims().to_vec(), false)?;
    let one = match ty.dtype {
        DType::Bool => Tensor::from_bool(Vec::new(), vec![true]),
        d => Tensor::scalar_i64(1).cast(d),
    };
    add1(
        g,
        ConstantOfShape { value: one },
        vec![shape],
        name,
        ty.clone(),
    )
}

/// `unsqueeze(range(0, seq, 1) + past, [0])`: `i64[1, seq]` (the form
/// `kv-cache` finds: the range of length `seq`, offset by the past).
fn positions(g: &mut Graph, name: String, past: &Dim, seq: &Dim) -> Result<ValueId, String> {
    let start = dims_constant(g, &format!("{name}.start"), vec![Dim::fixed(0)], true)?;
    let limit = dims_constant(g, &format!("{name}.limit"), vec![seq.clone()], true)?;
    let delta = dims_constant(g, &format!("{name}.delta"), vec![Dim::fixed(1)], true)?;
    let range_ty = TensorType::new(DType::I64, Shape(vec![seq.clone()]));
    let range_name = g.fresh_name(&format!("{name}.range"));
    let mut range = add1(
        g,
        Range,
        vec![start, limit, delta],
        range_name,
        range_ty.clone(),
    )?;
    if *past != Dim::fixed(0) {
        let offset = dims_constant(g, &format!("{name}.past"), vec![past.clone()], true)?;
        let shifted = g.fresh_name(&format!("{name}.shifted"));
        let add = Binary::new(BinaryKind::Add);
        range = add1(g, add, vec![range, offset], shifted, range_ty)?;
    }
    let ty = TensorType::new(DType::I64, Shape(vec![Dim::fixed(1), seq.clone()]));
    add1(g, Unsqueeze { axes: vec![0] }, vec![range], name, ty)
}

/// The value the graph computes for `name` at batch 1, for `seq` new
/// tokens after `past`: ones `i64[1, past + seq]` for the mask, the
/// positions `past ..` as `i64[1, seq]`; `None` for other inputs.
pub fn default_value(name: &str, seq: usize, past: usize) -> Option<Tensor> {
    match name {
        MASK_INPUT => Some(Tensor::from_i64(vec![1, past + seq], vec![1; past + seq])),
        POSITIONS_INPUT => Some(Tensor::from_i64(
            vec![1, seq],
            (past..past + seq).map(|p| p as i64).collect(),
        )),
        _ => None,
    }
}

/// Whether `value`, given for an input that `decoder-inputs` computes,
/// holds what the graph computes there at batch 1 (`past`: the length of
/// the past given with it): a mask of ones, or the positions `past ..`.
/// `None` for other inputs.
pub fn default_value_matches(name: &str, value: &Tensor, past: i64) -> Option<bool> {
    let shape = value.shape();
    let n = value.len();
    match name {
        MASK_INPUT => {
            Some(shape.len() == 2 && shape[0] == 1 && (0..n).all(|i| value.get_i64(i) != 0))
        }
        POSITIONS_INPUT => Some(
            shape.len() == 2
                && shape[0] == 1
                && value.dtype().is_int()
                && (0..n).all(|i| value.get_i64(i) == past + i as i64),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_pipeline;
    use slmcc_ir::text::parse_module;

    const OPTIMUM_LIKE: &str = r#"
module @m {
  graph @main(%input_ids: i64[batch_size, sequence_length], %attention_mask: i64[batch_size, past_sequence_length+sequence_length], %position_ids: i64[batch_size, sequence_length], %past_key_values.0.key: f32[batch_size, 2, past_sequence_length, 4]) -> (i64[batch_size, past_sequence_length+sequence_length], i64[batch_size, sequence_length], f32[batch_size, 2, past_sequence_length, 4]) {
    %m2 = mul %attention_mask, %attention_mask : i64[batch_size, past_sequence_length+sequence_length]
    %p2 = add %position_ids, %input_ids : i64[batch_size, sequence_length]
    %k = neg %past_key_values.0.key : f32[batch_size, 2, past_sequence_length, 4]
    return %m2, %p2, %k
  }
}
"#;

    #[test]
    fn binds_batch_and_computes_mask_and_positions() {
        let mut m = parse_module(OPTIMUM_LIKE).unwrap();
        let records = run_pipeline(&mut m, "decoder-inputs,shape-infer,verify").unwrap();
        let stats = &records[0].stats;
        assert_eq!(stats.get("batch-bound"), 1);
        assert_eq!(stats.get("symbols-renamed"), 1);
        assert_eq!(stats.get("inputs-defaulted"), 2);
        let g = &m.graphs[0];
        let names: Vec<&str> = g.inputs.iter().map(|&i| g.value(i).name.as_str()).collect();
        assert_eq!(names, ["input_ids", "past_key_values.0.key"]);
        assert_eq!(g.ty(g.inputs[0]).to_string(), "i64[1, seq]");
        let outs: Vec<String> = g.outputs.iter().map(|&o| g.ty(o).to_string()).collect();
        assert_eq!(outs[0], "i64[1, past_sequence_length+seq]");
        let bindings = [
            ("seq".to_string(), 3),
            ("past_sequence_length".to_string(), 2),
        ];
        let bound = crate::specialize(&m, "main", &bindings.into()).unwrap();
        let got = crate::transforms::test_eval::run_main(
            &bound,
            &[
                ("input_ids", Tensor::from_i64(vec![1, 3], vec![10, 20, 30])),
                (
                    "past_key_values.0.key",
                    Tensor::from_f32(vec![1, 2, 2, 4], vec![1.0; 16]),
                ),
            ],
        );
        assert_eq!(got[0], Tensor::from_i64(vec![1, 5], vec![1; 5]));
        assert_eq!(got[1], Tensor::from_i64(vec![1, 3], vec![12, 23, 34]));
    }

    #[test]
    fn leaves_encoders_alone() {
        let text = r#"
module @m {
  graph @main(%input_ids: i64[batch, seq], %attention_mask: i64[batch, seq]) -> (i64[batch, seq]) {
    %y = add %input_ids, %attention_mask : i64[batch, seq]
    return %y
  }
}
"#;
        let mut m = parse_module(text).unwrap();
        let records = run_pipeline(&mut m, "decoder-inputs").unwrap();
        assert!(!records[0].changed);
        assert_eq!(m.graphs[0].inputs.len(), 2);
    }

    #[test]
    fn refuses_a_mask_that_is_not_past_plus_seq() {
        let text = r#"
module @m {
  graph @main(%input_ids: i64[1, seq], %attention_mask: i64[1, 7], %position_ids: i64[1, seq]) -> (i64[1, 7]) {
    %y = neg %attention_mask : i64[1, 7]
    return %y
  }
}
"#;
        let mut m = parse_module(text).unwrap();
        let e = run_pipeline(&mut m, "decoder-inputs")
            .unwrap_err()
            .to_string();
        assert!(e.contains("%attention_mask is i64[1, 7]"), "{e}");
    }

    #[test]
    fn default_values() {
        let ones = Tensor::from_i64(vec![1, 3], vec![1, 1, 1]);
        let padded = Tensor::from_i64(vec![1, 3], vec![0, 1, 1]);
        assert_eq!(default_value_matches(MASK_INPUT, &ones, 0), Some(true));
        assert_eq!(default_value_matches(MASK_INPUT, &padded, 0), Some(false));
        let pos = Tensor::from_i64(vec![1, 2], vec![4, 5]);
        assert_eq!(default_value_matches(POSITIONS_INPUT, &pos, 4), Some(true));
        assert_eq!(default_value_matches(POSITIONS_INPUT, &pos, 0), Some(false));
        assert_eq!(default_value_matches("input_ids", &pos, 0), None);
    }
}
