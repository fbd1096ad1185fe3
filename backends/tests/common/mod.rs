//! Helpers of the cpu backend tests: one-node graphs run on the JIT and
//! compared with the op's reference evaluation.

#![allow(dead_code)]

use std::sync::Arc;

use proptest::prelude::*;

use slmcc_backends::cpu::{CpuError, CpuOptions};
use slmcc_ir::ops::constant::Constant;
use slmcc_ir::ops::{static_dims, Fact, Known};
use slmcc_ir::{DType, EvalCtx, Graph, Module, Op, OpDef, Tensor, TensorType};
use slmcc_runtime::jit::{run_static, JitKernels};
use slmcc_runtime::Capture;

/// How an operand enters the one-node graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Input,
    /// A `constant` node (its value is known to the lowering).
    Const,
    /// A module weight.
    Weight,
}

/// How close the JIT result must be to the reference.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// Equal element by element (NaN equals NaN, `-0.0` equals `0.0`).
    Exact,
    /// `max|a - b| / max(max|b|, 1e-6)` at most this (the goldens'
    /// measure; equal infinities and NaN against NaN pass).
    Rel(f64),
    /// Element by element, `|a - b| <= tol · |b|` (plus `1e-37` absolute
    /// for subnormal and zero results).
    ElemRel(f64),
}

/// A seeded generator (64-bit LCG, MMIX constants).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    /// Uniform in `[-1, 1)`.
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 29) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn tensor(&mut self, shape: &[usize], scale: f32) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_f32(shape.to_vec(), (0..n).map(|_| self.f32() * scale).collect())
    }

    pub fn ints(&mut self, shape: &[usize], lo: i64, hi: i64) -> Tensor {
        let n = shape.iter().product();
        let span = (hi - lo + 1) as u64;
        Tensor::from_i64(
            shape.to_vec(),
            (0..n).map(|_| lo + self.below(span) as i64).collect(),
        )
    }

    pub fn bools(&mut self, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_bool(shape.to_vec(), (0..n).map(|_| self.below(2) == 1).collect())
    }
}

fn ty_of(t: &Tensor) -> TensorType {
    TensorType::new(t.dtype(), static_dims(t.shape()))
}

/// Builds a module with one graph holding one `op` node over `operands`.
pub fn one_node(op: &Op, operands: &[(Tensor, Kind)]) -> Result<Module, String> {
    let mut module = Module::new("t");
    let mut g = Graph::new("main");
    let mut ids = Vec::new();
    let mut facts = Vec::new();
    for (i, (t, kind)) in operands.iter().enumerate() {
        let name = format!("x{i}");
        let id = match kind {
            Kind::Input => g.add_input(&name, ty_of(t)).unwrap(),
            Kind::Const => g
                .add_node(
                    Constant::from_tensor(t.clone()),
                    vec![],
                    vec![(name, ty_of(t))],
                )
                .unwrap()[0],
            Kind::Weight => {
                module.weights.insert(name.clone(), t.clone());
                g.weight(&name, ty_of(t))
            }
        };
        ids.push(id);
        facts.push(match kind {
            Kind::Const => Fact::with_value(ty_of(t), Known::Tensor(Arc::new(t.clone()))),
            _ => Fact::new(ty_of(t)),
        });
    }
    let refs: Vec<&Fact> = facts.iter().collect();
    let results = op.infer(&refs).map_err(|e| e.to_string())?;
    let named = results
        .iter()
        .enumerate()
        .map(|(i, f)| (format!("y{i}"), f.ty.clone()))
        .collect();
    let outs = g.add_node(op.clone(), ids, named).unwrap();
    g.outputs = outs;
    module.graphs.push(g);
    Ok(module)
}

/// Runs `op` on the JIT.
pub fn run_jit(
    op: &Op,
    operands: &[(Tensor, Kind)],
    options: CpuOptions,
) -> Result<Vec<Tensor>, CpuError> {
    let module = one_node(op, operands).map_err(CpuError::Run)?;
    let inputs: Vec<(String, Tensor)> = operands
        .iter()
        .enumerate()
        .filter(|(_, (_, k))| *k == Kind::Input)
        .map(|(i, (t, _))| (format!("x{i}"), t.clone()))
        .collect();
    Ok(run_module(&module, &inputs, &options)?
        .into_iter()
        .map(|(_, t)| t)
        .collect())
}

/// Runs the first graph of `module` (static shapes) on the JIT kernels,
/// through the runtime's executor ([`run_static`]); returns the outputs in
/// graph order. Compile errors keep their [`CpuError`] (the node at
/// fault); run errors are [`CpuError::Run`].
pub fn run_module(
    module: &Module,
    inputs: &[(String, Tensor)],
    options: &CpuOptions,
) -> Result<Vec<(String, Tensor)>, CpuError> {
    let g = &module.graphs[0];
    let kernels = JitKernels::compile(g, options)?;
    let result = run_static(module, g, inputs, &Capture::Nothing, &kernels)
        .map_err(|e| CpuError::Run(e.to_string()))?;
    Ok(result
        .outputs
        .into_iter()
        .map(|(n, t)| (n, Arc::unwrap_or_clone(t)))
        .collect())
}

/// Asserts that the JIT computes what the reference does.
pub fn check(op: impl Into<Op>, operands: &[(Tensor, Kind)], expect: Expect) {
    check_with(op, operands, expect, CpuOptions::exact())
}

pub fn check_with(
    op: impl Into<Op>,
    operands: &[(Tensor, Kind)],
    expect: Expect,
    options: CpuOptions,
) {
    let op: Op = op.into();
    let refs: Vec<&Tensor> = operands.iter().map(|(t, _)| t).collect();
    let want = op
        .eval(&refs, &EvalCtx::default())
        .unwrap_or_else(|e| panic!("reference `{}`: {e}", op.mnemonic()));
    let got = run_jit(&op, operands, options)
        .unwrap_or_else(|e| panic!("jit `{}` on {:?}: {e}", op.mnemonic(), shapes(operands)));
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_same(
            g,
            w,
            expect,
            &format!("`{}` on {:?}", op.mnemonic(), shapes(operands)),
        );
    }
}

fn shapes(operands: &[(Tensor, Kind)]) -> Vec<(DType, Vec<usize>)> {
    operands
        .iter()
        .map(|(t, _)| (t.dtype(), t.shape().to_vec()))
        .collect()
}

pub fn assert_same(got: &Tensor, want: &Tensor, expect: Expect, what: &str) {
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    if !want.dtype().is_float() {
        assert_eq!(got.to_i64_vec(), want.to_i64_vec(), "{what}");
        return;
    }
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    match expect {
        Expect::Exact => {
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!(
                    a == b || (a.is_nan() && b.is_nan()),
                    "{what}: element {i}: jit {a:e} vs reference {b:e}"
                );
            }
        }
        Expect::Rel(tol) => {
            let scale = w.iter().fold(0f64, |m, b| m.max(b.abs() as f64)).max(1e-6);
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                if a.is_nan() || b.is_nan() {
                    assert!(a.is_nan() && b.is_nan(), "{what}: element {i}: {a} vs {b}");
                    continue;
                }
                if a == b {
                    continue;
                }
                let rel = (*a as f64 - *b as f64).abs() / scale;
                assert!(
                    rel <= tol,
                    "{what}: element {i}: jit {a:e} vs reference {b:e} (rel {rel:e})"
                );
            }
        }
        Expect::ElemRel(tol) => {
            for (i, (a, b)) in g.iter().zip(&w).enumerate() {
                if a == b || (a.is_nan() && b.is_nan()) {
                    continue;
                }
                let err = (*a as f64 - *b as f64).abs();
                assert!(
                    err <= tol * (*b as f64).abs() + 1e-37,
                    "{what}: element {i}: jit {a:e} vs reference {b:e} (rel {:e})",
                    err / (*b as f64).abs()
                );
            }
        }
    }
}

/// A shape of rank `0..=max_rank` with dims in `1..=max_dim`.
pub fn shape(max_rank: usize, max_dim: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1..=max_dim, 0..=max_rank)
}

/// A shape that broadcasts to `s`: some leading axes dropped, some dims 1.
pub fn broadcast_of(s: &[usize], rng: &mut Lcg) -> Vec<usize> {
    let drop = rng.below(s.len() as u64 + 1) as usize;
    s[drop..]
        .iter()
        .map(|&d| if rng.below(3) == 0 { 1 } else { d })
        .collect()
}
