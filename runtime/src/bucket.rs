//! Bucket dispatch: run an input of any length on the graph of the smallest
//! sequence-length bucket that holds it.
//!
//! `bucket-specialize` turns `@main` into `@main_64`, `@main_128`, ... and
//! records in `module.buckets` which symbol each binds and the symbolic
//! signature. [`Buckets`] finds the graphs of one base graph, reads the real
//! length from the inputs (the extent of every input axis that is exactly the
//! symbol), picks the smallest bucket `>=` it, pads those axes at the end up
//! to the bucket, runs, and slices the outputs' symbol axes back to the real
//! length.
//!
//! Why padding at the end is exact: in a causal language model position `i`
//! attends only to positions `<= i`, so real tokens never see the padding
//! after them, and per-position ops (norms, MLPs, embeddings) never mix
//! positions. For an encoder (bidirectional attention, e.g. MiniLM), real
//! tokens would attend to the padding unless the model masks it: an input
//! named `attention_mask` is therefore padded with 0 (masked), whatever
//! [`Padding::pad_id`] says. Outputs without a symbol axis (pooled outputs)
//! are returned as the bucket computed them.

use std::collections::HashMap;

use slmcc_ir::{BucketInfo, Graph, Module, Tensor, TensorData};

use crate::interp::{run_graph, Capture, RunError, RunResult};

/// What padded positions hold (by default, token id 0).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Padding {
    /// For every padded input but `attention_mask` (token ids: the pad token).
    pub pad_id: i64,
}

/// The input name whose padding is always 0, so padded keys are masked.
pub const ATTENTION_MASK: &str = "attention_mask";

/// The bucket graphs of one base graph, smallest bucket first.
pub struct Buckets<'m> {
    module: &'m Module,
    base: String,
    graphs: Vec<(&'m Graph, &'m BucketInfo)>,
}

/// A run on a bucket: which bucket, the real length, and the result with
/// outputs sliced back to the real length.
#[derive(Clone, Debug)]
pub struct BucketRun {
    pub bucket: usize,
    pub length: usize,
    pub result: RunResult,
}

fn error(graph: &str, message: String) -> RunError {
    RunError {
        graph: graph.to_string(),
        node: None,
        message,
    }
}

impl<'m> Buckets<'m> {
    /// The bucket graphs made from `base`; fails when there are none.
    pub fn new(module: &'m Module, base: &str) -> Result<Buckets<'m>, RunError> {
        let mut graphs: Vec<(&Graph, &BucketInfo)> = module
            .buckets
            .iter()
            .filter(|(_, b)| b.base == base)
            .filter_map(|(g, b)| Some((module.graph(g)?, b)))
            .collect();
        if graphs.is_empty() {
            return Err(error(
                base,
                "no bucket graphs (run bucket-specialize)".to_string(),
            ));
        }
        graphs.sort_by_key(|(_, b)| b.size);
        Ok(Buckets {
            module,
            base: base.to_string(),
            graphs,
        })
    }

    /// The bucket sizes, ascending.
    pub fn sizes(&self) -> Vec<usize> {
        self.graphs.iter().map(|(_, b)| b.size as usize).collect()
    }

    /// The graph of the smallest bucket that holds `len` tokens.
    pub fn pick(&self, len: usize) -> Option<(&'m Graph, &'m BucketInfo)> {
        self.graphs
            .iter()
            .find(|(_, b)| b.size as usize >= len)
            .copied()
    }

    /// The real length of `inputs`: the extent of every input axis whose
    /// symbolic dim is the bucket symbol (all must agree).
    pub fn length(&self, inputs: &[(String, Tensor)]) -> Result<usize, RunError> {
        let (g, info) = self.graphs[0];
        let mut len: Option<(usize, &str)> = None;
        for (&id, ty) in g.inputs.iter().zip(&info.inputs) {
            let name = &g.value(id).name;
            let Some((_, t)) = inputs.iter().find(|(n, _)| n == name) else {
                continue;
            };
            for axis in info.symbol_axes(ty) {
                let Some(&n) = t.shape().get(axis) else {
                    return Err(error(
                        &self.base,
                        format!("input `{name}` has shape {:?}, expected {ty}", t.shape()),
                    ));
                };
                match len {
                    Some((l, other)) if l != n => {
                        return Err(error(
                            &self.base,
                            format!(
                                "input `{name}` gives {} = {n}, input `{other}` gave {l}",
                                info.symbol
                            ),
                        ))
                    }
                    _ => len = Some((n, name)),
                }
            }
        }
        len.map(|(l, _)| l).ok_or_else(|| {
            error(
                &self.base,
                format!(
                    "no input has a `{}` axis to read the length from",
                    info.symbol
                ),
            )
        })
    }

    /// The smallest bucket that holds `inputs`, and the inputs padded to
    /// it (`padding` at the new positions, 0 in `attention_mask`): the
    /// bucket's graph and record, the padded inputs and the real length.
    #[allow(clippy::type_complexity)]
    pub fn padded(
        &self,
        inputs: &[(String, Tensor)],
        padding: Padding,
    ) -> Result<(&'m Graph, &'m BucketInfo, Vec<(String, Tensor)>, usize), RunError> {
        let len = self.length(inputs)?;
        let (g, info) = self.pick(len).ok_or_else(|| {
            error(
                &self.base,
                format!(
                    "input has {} = {len}, which exceeds the largest bucket ({})",
                    self.graphs[0].1.symbol,
                    self.sizes().last().copied().unwrap_or(0)
                ),
            )
        })?;
        let bucket = info.size as usize;
        let mut padded = Vec::with_capacity(inputs.len());
        for (name, t) in inputs {
            let ty = g
                .inputs
                .iter()
                .position(|&v| g.value(v).name == *name)
                .map(|i| &info.inputs[i]);
            let t = match ty {
                Some(ty) => {
                    let value = if name == ATTENTION_MASK {
                        0.0
                    } else {
                        padding.pad_id as f64
                    };
                    pad(t, &info.symbol_axes(ty), bucket, value)
                        .map_err(|m| error(&g.name, format!("input `{name}`: {m}")))?
                }
                // Not an input: let the interpreter name it.
                None => t.clone(),
            };
            padded.push((name.clone(), t));
        }
        Ok((g, info, padded, len))
    }

    /// Pads `inputs` to the smallest bucket that holds them, runs that
    /// bucket's graph on the reference interpreter, and slices the outputs
    /// back to the real length.
    pub fn run(
        &self,
        inputs: &[(String, Tensor)],
        padding: Padding,
    ) -> Result<BucketRun, RunError> {
        let (g, info, padded, len) = self.padded(inputs, padding)?;
        let bucket = info.size as usize;
        let mut result = run_graph(self.module, g, &padded, &Capture::Nothing)?;
        for ((_, t), ty) in result.outputs.iter_mut().zip(&info.outputs) {
            let axes = info.symbol_axes(ty);
            if !axes.is_empty() {
                *t = std::sync::Arc::new(slice(t, &axes, len));
            }
        }
        result.symbols = HashMap::from([(info.symbol.clone(), len as i64)]);
        Ok(BucketRun {
            bucket,
            length: len,
            result,
        })
    }
}

/// For each element of `dst` (row-major), the flat index of the element at
/// the same multi-index in `src`, or `None` where `dst` reaches past `src`.
fn remap(src: &[usize], dst: &[usize]) -> Vec<Option<usize>> {
    let n: usize = dst.iter().product();
    let mut out = Vec::with_capacity(n);
    let mut idx = vec![0usize; dst.len()];
    for _ in 0..n {
        let inside = idx.iter().zip(src).all(|(i, s)| i < s);
        out.push(inside.then(|| idx.iter().zip(src).fold(0, |acc, (i, s)| acc * s + i)));
        for a in (0..dst.len()).rev() {
            idx[a] += 1;
            if idx[a] < dst[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    out
}

/// `t` with `axes` extended to `to` at the end, new elements `value`.
pub fn pad(t: &Tensor, axes: &[usize], to: usize, value: f64) -> Result<Tensor, String> {
    let mut shape = t.shape().to_vec();
    for &a in axes {
        if shape[a] > to {
            return Err(format!(
                "axis {a} has {} elements, more than {to}",
                shape[a]
            ));
        }
        shape[a] = to;
    }
    let fill = Tensor::from_f64(t.dtype(), vec![1], &[value]).expect("one element");
    let data = TensorData::concat(&[t.data(), fill.data()]).expect("same dtype");
    let pad_at = t.len();
    let map = remap(t.shape(), &shape);
    let data = data.gather(map.into_iter().map(|i| i.unwrap_or(pad_at)));
    Ok(Tensor::new(shape, data).expect("one element per index"))
}

/// `t` with `axes` cut to their first `len` elements.
pub fn slice(t: &Tensor, axes: &[usize], len: usize) -> Tensor {
    let mut shape = t.shape().to_vec();
    for &a in axes {
        shape[a] = shape[a].min(len);
    }
    // Every element of the smaller shape is inside `t`: map the other way.
    let map = remap(&shape, t.shape());
    let mut keep: Vec<usize> = vec![0; shape.iter().product()];
    for (src, dst) in map.into_iter().enumerate() {
        if let Some(d) = dst {
            keep[d] = src;
        }
    }
    let data = t.data().gather(keep.into_iter());
    Tensor::new(shape, data).expect("one element per index")
}

/// Writes `src`, a tensor whose axis `axis` holds `len` elements, into
/// `dst`, the same tensor with that axis `shape[axis]` long (`shape` is the
/// bucket's shape), each new position holding `pad` (one element's bytes).
/// Allocates nothing: this is how inputs go into an executor's arena slots.
pub fn pad_into(dst: &mut [u8], src: &[u8], shape: &[usize], axis: usize, len: usize, pad: &[u8]) {
    let elem = pad.len();
    let bucket = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product::<usize>() * elem;
    let outer: usize = shape[..axis].iter().product();
    assert!(len <= bucket && dst.len() == outer * bucket * inner);
    assert_eq!(src.len(), outer * len * inner);
    for o in 0..outer {
        let d = &mut dst[o * bucket * inner..(o + 1) * bucket * inner];
        d[..len * inner].copy_from_slice(&src[o * len * inner..(o + 1) * len * inner]);
        for chunk in d[len * inner..].chunks_exact_mut(elem) {
            chunk.copy_from_slice(pad);
        }
    }
}

/// The inverse of [`pad_into`]: copies the first `len` positions of axis
/// `axis` of `src` (shaped `shape`, `elem` bytes per element) into `dst`.
pub fn slice_into(
    dst: &mut [u8],
    src: &[u8],
    shape: &[usize],
    axis: usize,
    len: usize,
    elem: usize,
) {
    let bucket = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product::<usize>() * elem;
    let outer: usize = shape[..axis].iter().product();
    assert!(len <= bucket && src.len() == outer * bucket * inner);
    assert_eq!(dst.len(), outer * len * inner);
    for o in 0..outer {
        dst[o * len * inner..(o + 1) * len * inner]
            .copy_from_slice(&src[o * bucket * inner..o * bucket * inner + len * inner]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slmcc_ir::text::parse_module;

    #[test]
    fn pads_and_slices_the_named_axes() {
        let t = Tensor::from_i64(vec![2, 3], vec![1, 2, 3, 4, 5, 6]);
        let p = pad(&t, &[1], 5, 9.0).unwrap();
        assert_eq!(p.shape(), &[2, 5]);
        assert_eq!(p.as_i64().unwrap(), &[1, 2, 3, 9, 9, 4, 5, 6, 9, 9]);
        assert_eq!(slice(&p, &[1], 3), t);
        let q = pad(&t, &[0, 1], 3, 0.0).unwrap();
        assert_eq!(q.as_i64().unwrap(), &[1, 2, 3, 4, 5, 6, 0, 0, 0]);
        assert!(pad(&t, &[1], 2, 0.0).is_err());
        // The byte versions agree with the tensor versions.
        let mut dst = vec![0u8; 2 * 5 * 8];
        pad_into(
            &mut dst,
            &t.to_le_bytes(),
            &[2, 5],
            1,
            3,
            &9i64.to_le_bytes(),
        );
        assert_eq!(dst, p.to_le_bytes());
        let mut back = vec![0u8; 2 * 3 * 8];
        slice_into(&mut back, &dst, &[2, 5], 1, 3, 8);
        assert_eq!(back, t.to_le_bytes());
    }

    const SRC: &str = r#"
module @m {
  graph @main(%ids: i64[1, seq], %attention_mask: i64[1, seq]) -> (i64[1, seq], i64[]) {
    %y = add %ids, %attention_mask : i64[1, seq]
    %s = reduce_sum %y {axes = [1], keep_dims = false} : i64[1]
    %t = squeeze %s {axes = [0]} : i64[]
    return %y, %t
  }
}
"#;

    #[test]
    fn runs_on_the_smallest_bucket_that_fits() {
        let mut m = parse_module(SRC).unwrap();
        let mut pm = slmcc_passes::PassManager::parse(
            "bucket-specialize{buckets=4,8}",
            slmcc_passes::RunOptions::default(),
        )
        .unwrap();
        pm.run(&mut m, &mut std::io::sink()).unwrap();
        let b = Buckets::new(&m, "main").unwrap();
        assert_eq!(b.sizes(), vec![4, 8]);
        let inputs = vec![
            (
                "ids".to_string(),
                Tensor::from_i64(vec![1, 5], vec![1, 2, 3, 4, 5]),
            ),
            (
                "attention_mask".to_string(),
                Tensor::from_i64(vec![1, 5], vec![1; 5]),
            ),
        ];
        let r = b.run(&inputs, Padding { pad_id: 100 }).unwrap();
        assert_eq!((r.bucket, r.length), (8, 5));
        assert_eq!(r.result.outputs[0].1.as_i64().unwrap(), &[2, 3, 4, 5, 6]);
        // The pooled output saw the padding: 3 pad ids of 100, masks of 0.
        assert_eq!(r.result.outputs[1].1.as_i64().unwrap(), &[20 + 300]);
        let long = vec![("ids".to_string(), Tensor::from_i64(vec![1, 9], vec![0; 9]))];
        let e = b.run(&long, Padding::default()).unwrap_err().to_string();
        assert!(e.contains("exceeds the largest bucket (8)"), "{e}");
        let bad = vec![
            ("ids".to_string(), Tensor::from_i64(vec![1, 2], vec![0; 2])),
            (
                "attention_mask".to_string(),
                Tensor::from_i64(vec![1, 3], vec![0; 3]),
            ),
        ];
        let e = b.run(&bad, Padding::default()).unwrap_err().to_string();
        assert!(e.contains("gave 2"), "{e}");
    }
}
