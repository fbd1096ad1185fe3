//! Running planned buckets: the executor over a memory plan
//! ([`crate::exec::Executor`]) behind bucket dispatch ([`crate::bucket`]).
//!
//! [`PlannedBuckets::load`] loads the bucket graphs of one base graph
//! (`bucket-specialize` then `plan-memory` have run), one [`Executor`] per
//! bucket, each with its regions allocated once and its kernels chosen once.
//! A step ([`PlannedBuckets::step`]) then takes the inputs' bytes at their
//! real length, picks the smallest loaded bucket that holds it, pads the
//! inputs into their arena slots ([`pad_into`]), runs the bucket, and copies
//! the outputs' real positions into the caller's buffers ([`slice_into`]):
//! it allocates nothing (`compiler/tests/alloc_models.rs` counts).
//! [`PlannedBuckets::run`] is the convenient form over named tensors, which
//! allocates the output tensors.
//!
//! Padding follows [`crate::bucket`]: at the end of the `seq` axis, with
//! [`Padding::pad_id`], `attention_mask` with 0. An input or output has at
//! most one `seq` axis here (the decoders' `[1, seq]` ids, `[1, seq, vocab]`
//! logits); one without is copied whole.

use std::collections::HashMap;
use std::sync::Arc;

use slmcc_backends::cpu::CpuOptions;
use slmcc_ir::{BucketInfo, DType, Graph, Module, RegionSizes, Tensor};

use crate::bucket::{pad_into, slice_into, BucketRun, Padding, ATTENTION_MASK};
use crate::exec::{ExecError, Executor, KernelSet};
use crate::interp::{RunError, RunResult};
use crate::jit::JitKernels;

/// A graph input or output as a step sees it.
#[derive(Clone, Debug)]
struct Port {
    name: String,
    dtype: DType,
    /// The base graph's (symbolic) type.
    ty: slmcc_ir::TensorType,
    /// The `seq` axis, if the port has one.
    axis: Option<usize>,
    /// Inputs: the bytes of one padding element.
    pad: Vec<u8>,
}

/// Gives the kernels of one bucket graph (see [`PlannedBuckets::load`]).
pub type KernelsFor<'a> = dyn Fn(&Graph) -> Result<Box<dyn KernelSet>, ExecError> + 'a;

/// One loaded bucket.
pub struct PlannedBucket {
    /// The bucket: the `seq` its graph was specialised to.
    pub size: usize,
    /// The bucket graph's name (`main_64`).
    pub graph: String,
    exec: Executor,
    /// The shapes of the input slots (the bucket's input shapes).
    input_shapes: Vec<Vec<usize>>,
}

impl PlannedBucket {
    /// The bytes of each region of the bucket's plan (allocated at load).
    pub fn region_sizes(&self) -> RegionSizes {
        self.exec.region_sizes()
    }

    /// The executor of the bucket.
    pub fn executor(&self) -> &Executor {
        &self.exec
    }
}

/// The loaded buckets of one base graph, smallest first.
pub struct PlannedBuckets {
    base: String,
    symbol: String,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    buckets: Vec<PlannedBucket>,
}

fn exec_error(graph: &str, message: String) -> ExecError {
    ExecError {
        graph: graph.to_string(),
        node: None,
        message,
    }
}

fn ports(
    g: &Graph,
    info: &BucketInfo,
    values: &[slmcc_ir::ValueId],
    types: &[slmcc_ir::TensorType],
    padding: Option<Padding>,
) -> Result<Vec<Port>, String> {
    values
        .iter()
        .zip(types)
        .map(|(&v, ty)| {
            let name = g.value(v).name.clone();
            let axes = info.symbol_axes(ty);
            if axes.len() > 1 {
                return Err(format!(
                    "`{name}` ({ty}) has {} `{}` axes; planned buckets pad one",
                    axes.len(),
                    info.symbol
                ));
            }
            if ty.dtype.bits() % 8 != 0 {
                return Err(format!("`{name}` ({ty}): sub-byte dtypes are not padded"));
            }
            let pad = match padding {
                Some(p) => {
                    let value = if name == ATTENTION_MASK {
                        0.0
                    } else {
                        p.pad_id as f64
                    };
                    Tensor::from_f64(ty.dtype, vec![1], &[value])
                        .expect("one element")
                        .to_le_bytes()
                }
                None => Vec::new(),
            };
            Ok(Port {
                name,
                dtype: ty.dtype,
                ty: ty.clone(),
                axis: axes.first().copied(),
                pad,
            })
        })
        .collect()
}

impl PlannedBuckets {
    /// Loads the bucket graphs made from `base` whose size `select` accepts,
    /// each with its memory plan and the kernels `kernels` gives for it.
    /// Fails when no bucket graph of `base` is selected, a graph has no plan,
    /// or a kernel is missing (naming the node).
    pub fn load(
        module: &Module,
        base: &str,
        padding: Padding,
        select: &dyn Fn(usize) -> bool,
        kernels: &KernelsFor<'_>,
    ) -> Result<PlannedBuckets, ExecError> {
        let mut graphs: Vec<(&Graph, &BucketInfo)> = module
            .buckets
            .iter()
            .filter(|(_, b)| b.base == base && select(b.size as usize))
            .filter_map(|(g, b)| Some((module.graph(g)?, b)))
            .collect();
        graphs.sort_by_key(|(_, b)| b.size);
        let Some(&(first, info)) = graphs.first() else {
            return Err(exec_error(
                base,
                "no bucket graphs selected (run bucket-specialize)".to_string(),
            ));
        };
        let inputs = ports(first, info, &first.inputs, &info.inputs, Some(padding))
            .map_err(|m| exec_error(&first.name, format!("input {m}")))?;
        let outputs = ports(first, info, &first.outputs, &info.outputs, None)
            .map_err(|m| exec_error(&first.name, format!("output {m}")))?;
        let mut buckets = Vec::with_capacity(graphs.len());
        for (g, b) in graphs {
            if b.inputs != info.inputs || b.outputs != info.outputs || b.symbol != info.symbol {
                return Err(exec_error(
                    &g.name,
                    format!("its bucket record disagrees with @{}'s", first.name),
                ));
            }
            let ks = kernels(g)?;
            let exec = Executor::load(module, &g.name, ks.as_ref())?;
            let input_shapes = exec.inputs().iter().map(|s| s.shape.clone()).collect();
            buckets.push(PlannedBucket {
                size: b.size as usize,
                graph: g.name.clone(),
                exec,
                input_shapes,
            });
        }
        Ok(PlannedBuckets {
            base: base.to_string(),
            symbol: info.symbol.clone(),
            inputs,
            outputs,
            buckets,
        })
    }

    /// [`PlannedBuckets::load`] with the cpu backend's JIT kernels
    /// ([`JitKernels`]), compiled once per bucket.
    pub fn load_jit(
        module: &Module,
        base: &str,
        padding: Padding,
        select: &dyn Fn(usize) -> bool,
        options: &CpuOptions,
    ) -> Result<PlannedBuckets, ExecError> {
        let compile = |g: &Graph| -> Result<Box<dyn KernelSet>, ExecError> {
            let k = JitKernels::compile(g, options)
                .map_err(|e| exec_error(&g.name, format!("cpu backend: {e}")))?;
            Ok(Box::new(k))
        };
        PlannedBuckets::load(module, base, padding, select, &compile)
    }

    /// The loaded buckets, smallest first.
    pub fn buckets(&self) -> &[PlannedBucket] {
        &self.buckets
    }

    /// The index of the smallest loaded bucket that holds `len` positions.
    pub fn pick(&self, len: usize) -> Option<usize> {
        self.buckets.iter().position(|b| b.size >= len)
    }

    /// The graph inputs' names, in the order [`PlannedBuckets::step`] takes them.
    pub fn input_names(&self) -> impl Iterator<Item = &str> {
        self.inputs.iter().map(|p| p.name.as_str())
    }

    /// The graph outputs' names, in the order [`PlannedBuckets::step`] writes them.
    pub fn output_names(&self) -> impl Iterator<Item = &str> {
        self.outputs.iter().map(|p| p.name.as_str())
    }

    fn shape_at(&self, port: &Port, len: usize) -> Vec<usize> {
        let ty = &port.ty;
        let bound = BucketInfo {
            base: String::new(),
            symbol: self.symbol.clone(),
            size: len as i64,
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
        .bind(ty, len as i64);
        bound
            .shape
            .as_fixed()
            .expect("bucket signatures have no other symbols")
    }

    /// The shape of input `i` at length `len`.
    pub fn input_shape(&self, i: usize, len: usize) -> Vec<usize> {
        self.shape_at(&self.inputs[i], len)
    }

    /// The shape of output `i` at length `len` (outputs without a `seq`
    /// axis have the bucket's shape, which is the same for every bucket).
    pub fn output_shape(&self, i: usize, len: usize) -> Vec<usize> {
        self.shape_at(&self.outputs[i], len)
    }

    /// The bytes of a port of `slot_bytes` in a bucket of `bucket`, at `len`.
    fn bytes_at(port: &Port, slot_bytes: usize, bucket: usize, len: usize) -> usize {
        match port.axis {
            Some(_) => slot_bytes / bucket * len,
            None => slot_bytes,
        }
    }

    /// Runs one step at length `len`: `inputs[i]` holds graph input `i`'s
    /// bytes (little-endian, its `seq` axis `len` long), `outputs[i]`
    /// receives output `i`'s (likewise). Returns the index of the bucket
    /// that ran. Allocates nothing unless it fails.
    pub fn step(
        &mut self,
        len: usize,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<usize, ExecError> {
        let Some(b) = self.pick(len) else {
            return Err(exec_error(
                &self.base,
                format!(
                    "input has {} = {len}, which exceeds the largest bucket ({})",
                    self.symbol,
                    self.buckets.last().map_or(0, |b| b.size)
                ),
            ));
        };
        if inputs.len() != self.inputs.len() || outputs.len() != self.outputs.len() {
            return Err(exec_error(
                &self.base,
                format!(
                    "a step takes {} inputs and {} outputs, got {} and {}",
                    self.inputs.len(),
                    self.outputs.len(),
                    inputs.len(),
                    outputs.len()
                ),
            ));
        }
        let bucket = &mut self.buckets[b];
        let size = bucket.size;
        // Check every buffer before touching the arena.
        for (i, (port, src)) in self.inputs.iter().zip(inputs).enumerate() {
            let want = Self::bytes_at(port, bucket.exec.inputs()[i].bytes, size, len);
            if src.len() != want {
                return Err(exec_error(
                    &bucket.graph,
                    format!(
                        "input `{}` has {} bytes, expected {want}",
                        port.name,
                        src.len()
                    ),
                ));
            }
        }
        for (i, (port, dst)) in self.outputs.iter().zip(outputs.iter()).enumerate() {
            let want = Self::bytes_at(port, bucket.exec.outputs()[i].bytes, size, len);
            if dst.len() != want {
                return Err(exec_error(
                    &bucket.graph,
                    format!(
                        "output `{}` has a {}-byte buffer, expected {want}",
                        port.name,
                        dst.len()
                    ),
                ));
            }
        }
        for (i, (port, src)) in self.inputs.iter().zip(inputs).enumerate() {
            match port.axis {
                Some(axis) => {
                    let shape = &bucket.input_shapes[i];
                    pad_into(bucket.exec.input_mut(i), src, shape, axis, len, &port.pad);
                }
                None => bucket.exec.input_mut(i).copy_from_slice(src),
            }
        }
        bucket.exec.run()?;
        for (i, (port, dst)) in self.outputs.iter().zip(outputs.iter_mut()).enumerate() {
            let slot = &bucket.exec.outputs()[i];
            match port.axis {
                Some(axis) => {
                    let elem = port.dtype.bits() / 8;
                    slice_into(dst, bucket.exec.output(i), &slot.shape, axis, len, elem)
                }
                None => dst.copy_from_slice(bucket.exec.output(i)),
            }
        }
        Ok(b)
    }

    /// The length of named `inputs`: the extent of every `seq` axis (all
    /// must agree), after checking each input's name, dtype and other dims.
    pub fn length(&self, inputs: &[(String, Tensor)]) -> Result<usize, RunError> {
        let err = |message: String| RunError {
            graph: self.base.clone(),
            node: None,
            message,
        };
        if let Some((name, _)) = inputs
            .iter()
            .find(|(n, _)| !self.inputs.iter().any(|p| p.name == *n))
        {
            return Err(err(format!("`{name}` is not an input of the graph")));
        }
        let mut len: Option<(usize, &str)> = None;
        for p in &self.inputs {
            let Some((_, t)) = inputs.iter().find(|(n, _)| *n == p.name) else {
                return Err(err(format!("missing input `{}` ({})", p.name, p.ty)));
            };
            let Some(axis) = p.axis else { continue };
            let Some(&n) = t.shape().get(axis) else {
                return Err(err(format!(
                    "input `{}` has shape {:?}, expected {}",
                    p.name,
                    t.shape(),
                    p.ty
                )));
            };
            match len {
                Some((l, other)) if l != n => {
                    return Err(err(format!(
                        "input `{}` gives {} = {n}, input `{other}` gave {l}",
                        p.name, self.symbol
                    )))
                }
                _ => len = Some((n, &p.name)),
            }
        }
        let len = len.map(|(l, _)| l).ok_or_else(|| {
            err(format!(
                "no input has a `{}` axis to read the length from",
                self.symbol
            ))
        })?;
        for (i, p) in self.inputs.iter().enumerate() {
            let (_, t) = inputs
                .iter()
                .find(|(n, _)| *n == p.name)
                .expect("checked above");
            let want = self.input_shape(i, len);
            if t.dtype() != p.dtype || t.shape() != want.as_slice() {
                return Err(err(format!(
                    "input `{}` is {} {:?}, expected {} {want:?}",
                    p.name,
                    t.dtype(),
                    t.shape(),
                    p.dtype
                )));
            }
        }
        Ok(len)
    }

    /// Runs named `inputs` on the smallest loaded bucket that holds them
    /// (see [`PlannedBuckets::step`]) and returns the outputs at the real
    /// length, in the reference interpreter's result form.
    pub fn run(&mut self, inputs: &[(String, Tensor)]) -> Result<BucketRun, RunError> {
        let len = self.length(inputs)?;
        let bytes: Vec<Vec<u8>> = self
            .inputs
            .iter()
            .map(|p| {
                let (_, t) = inputs.iter().find(|(n, _)| *n == p.name).expect("checked");
                t.to_le_bytes()
            })
            .collect();
        let shapes: Vec<Vec<usize>> = (0..self.outputs.len())
            .map(|i| self.output_shape(i, len))
            .collect();
        let mut outs: Vec<Vec<u8>> = self
            .outputs
            .iter()
            .zip(&shapes)
            .map(|(p, s)| vec![0u8; p.dtype.bytes_for(s.iter().product())])
            .collect();
        let ins: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        let mut views: Vec<&mut [u8]> = outs.iter_mut().map(Vec::as_mut_slice).collect();
        let b = self.step(len, &ins, &mut views).map_err(|e| RunError {
            graph: e.graph,
            node: e.node,
            message: e.message,
        })?;
        let outputs = self
            .outputs
            .iter()
            .zip(shapes)
            .zip(&outs)
            .map(|((p, shape), bytes)| {
                let t = Tensor::from_le_bytes(p.dtype, shape, bytes).expect("sized above");
                (p.name.clone(), Arc::new(t))
            })
            .collect();
        Ok(BucketRun {
            bucket: self.buckets[b].size,
            length: len,
            result: RunResult {
                outputs,
                captured: HashMap::new(),
                symbols: HashMap::from([(self.symbol.clone(), len as i64)]),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::Buckets;
    use slmcc_ir::text::parse_module;
    use slmcc_passes::{PassManager, RunOptions};

    const SRC: &str = r#"
module @m {
  graph @main(%ids: i64[1, seq], %attention_mask: i64[1, seq], %x: f32[1, seq, 4]) -> (i64[1, seq], f32[1, seq, 4], f32[1, 4]) {
    %y = add %ids, %attention_mask : i64[1, seq]
    %e = exp %x : f32[1, seq, 4]
    %t = reduce_sum %e {axes = [1], keep_dims = false} : f32[1, 4]
    return %y, %e, %t
  }
}
"#;

    fn planned() -> Module {
        let mut m = parse_module(SRC).unwrap();
        PassManager::parse(
            "bucket-specialize{buckets=4,8},plan-memory",
            RunOptions::default(),
        )
        .unwrap()
        .run(&mut m, &mut std::io::sink())
        .unwrap();
        m
    }

    fn inputs(len: usize) -> Vec<(String, Tensor)> {
        vec![
            (
                "ids".to_string(),
                Tensor::from_i64(vec![1, len], (1..=len as i64).collect()),
            ),
            (
                "attention_mask".to_string(),
                Tensor::from_i64(vec![1, len], vec![1; len]),
            ),
            (
                "x".to_string(),
                Tensor::from_f32(
                    vec![1, len, 4],
                    (0..len * 4).map(|i| i as f32 * 0.25).collect(),
                ),
            ),
        ]
    }

    #[test]
    fn runs_like_the_interpreter_on_buckets() {
        let m = planned();
        let padding = Padding { pad_id: 3 };
        let mut p =
            PlannedBuckets::load_jit(&m, "main", padding, &|_| true, &CpuOptions::exact()).unwrap();
        assert_eq!(
            p.buckets().iter().map(|b| b.size).collect::<Vec<_>>(),
            [4, 8]
        );
        let reference = Buckets::new(&m, "main").unwrap();
        for len in [1, 4, 5, 8] {
            let ins = inputs(len);
            let got = p.run(&ins).unwrap();
            let want = reference.run(&ins, padding).unwrap();
            assert_eq!((got.bucket, got.length), (want.bucket, want.length));
            assert_eq!(got.result.outputs, want.result.outputs, "length {len}");
        }
        let e = p.run(&inputs(9)).unwrap_err().to_string();
        assert!(e.contains("exceeds the largest bucket (8)"), "{e}");
        let mut bad = inputs(3);
        bad[2].1 = Tensor::from_f32(vec![1, 3, 5], vec![0.0; 15]);
        let e = p.run(&bad).unwrap_err().to_string();
        assert!(e.contains("input `x` is f32 [1, 3, 5]"), "{e}");
        bad.pop();
        let e = p.run(&bad).unwrap_err().to_string();
        assert!(e.contains("missing input `x`"), "{e}");
    }

    #[test]
    fn a_step_checks_its_buffers_first() {
        let m = planned();
        let mut p = PlannedBuckets::load_jit(
            &m,
            "main",
            Padding::default(),
            &|_| true,
            &CpuOptions::exact(),
        )
        .unwrap();
        assert_eq!(
            p.input_names().collect::<Vec<_>>(),
            ["ids", "attention_mask", "x"]
        );
        assert_eq!(p.output_shape(2, 3), [1, 4]);
        let ins: Vec<Vec<u8>> = inputs(3).iter().map(|(_, t)| t.to_le_bytes()).collect();
        let ins: Vec<&[u8]> = ins.iter().map(Vec::as_slice).collect();
        let (mut y, mut e, mut t) = (vec![0u8; 24], vec![0u8; 48], vec![0u8; 16]);
        assert_eq!(p.step(3, &ins, &mut [&mut y, &mut e, &mut t]).unwrap(), 0);
        let mut short = vec![0u8; 40];
        let err = p
            .step(3, &ins, &mut [&mut y, &mut short, &mut t])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "graph @main_4: output `e` has a 40-byte buffer, expected 48"
        );
        let err = p.step(3, &ins[..2], &mut [&mut y]).unwrap_err();
        assert!(
            err.to_string().contains("takes 3 inputs and 3 outputs"),
            "{err}"
        );
        let err = p.step(2, &ins, &mut [&mut y, &mut e, &mut t]).unwrap_err();
        assert!(
            err.to_string()
                .contains("input `ids` has 24 bytes, expected 16"),
            "{err}"
        );
    }

    #[test]
    fn loads_only_the_selected_buckets() {
        let m = planned();
        let mut p = PlannedBuckets::load_jit(
            &m,
            "main",
            Padding::default(),
            &|s| s == 8,
            &CpuOptions::default(),
        )
        .unwrap();
        assert_eq!(p.buckets().len(), 1);
        assert_eq!(p.run(&inputs(2)).unwrap().bucket, 8);
        let e = PlannedBuckets::load_jit(
            &m,
            "main",
            Padding::default(),
            &|_| false,
            &CpuOptions::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("no bucket graphs"), "{e}");
    }
}
