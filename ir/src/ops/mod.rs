//! The closed set of IR ops.
//!
//! Each op is a small struct in its own module holding its typed attributes,
//! with shape/dtype inference ([`OpDef::infer`]) beside its reference
//! evaluation ([`OpDef::eval`]). [`Op`] is the closed enum over them;
//! `define_ops!` below is the one list of every op, and builds the dispatch
//! and the mnemonic table used by the parser.
//!
//! The op modules are grouped by family, as tract groups its ops:
//! [`elementwise`], [`reduction`], [`shape`] (moving and selecting
//! elements), [`linalg`], [`fused`] (what fusion and the KV cache pass
//! introduce) and [`quantized`]. Every op module is also re-exported here,
//! so `ops::binary::Binary` names the op whatever its family.
//!
//! Inference works on [`Fact`]s: a type plus, when known at compile time, the
//! value. Values may be symbolic ([`Known::Dims`]), which is how the shape
//! bookkeeping exporters emit (`Shape` → `Gather` → `Concat` → `Reshape`)
//! resolves while `seq` stays a symbol.

use std::collections::HashMap;
use std::sync::Arc;

use crate::attr::{Attr, AttrError, Attrs};
use crate::dim::Dim;
use crate::shape::TensorType;
use crate::tensor::{ShapeMismatch, Tensor};

pub mod elementwise;
pub mod fused;
pub mod linalg;
pub mod quantized;
pub mod reduction;
pub mod shape;

// Every op module also at `ops::<op>`, whatever its family.
pub use elementwise::{binary, broadcast, cast, unary, where_};
pub use fused::{
    add_layer_norm, add_rms_norm, attention, fused_util, gelu, glu, kv_cache, rope, softcap,
};
pub use linalg::matmul;
pub use quantized::{layout as qlayout, qmatmul, qswiglu};
pub use reduction::{cum_sum, layer_norm, reduce, rms_norm, softmax};
pub use shape::{
    concat, constant, constant_of_shape, expand, gather, gather_elements, gather_nd, identity,
    range, reshape, shape_of, size, slice, split, squeeze, transpose, trilu, unsqueeze,
};

/// Error from building, inferring or evaluating an op.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct OpError(pub String);

impl From<AttrError> for OpError {
    fn from(e: AttrError) -> OpError {
        OpError(e.to_string())
    }
}

impl From<ShapeMismatch> for OpError {
    fn from(e: ShapeMismatch) -> OpError {
        OpError(e.to_string())
    }
}

/// Returns early with an [`OpError`] built from a format string.
#[macro_export]
macro_rules! op_bail {
    ($($arg:tt)*) => { return Err($crate::ops::OpError(format!($($arg)*))) };
}
pub use crate::op_bail as bail;

/// An integer tensor whose elements are (possibly symbolic) dims.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SymTensor {
    pub shape: Vec<usize>,
    pub values: Vec<Dim>,
}

/// A value known at compile time.
#[derive(Clone, Debug, PartialEq)]
pub enum Known {
    /// Fully concrete data.
    Tensor(Arc<Tensor>),
    /// An integer tensor with symbolic elements (shape bookkeeping).
    Dims(SymTensor),
}

impl Known {
    /// The value as dims, when it is an integer tensor.
    pub fn as_dims(&self) -> Option<SymTensor> {
        match self {
            Known::Dims(s) => Some(s.clone()),
            Known::Tensor(t) if t.dtype().is_int() => Some(SymTensor {
                shape: t.shape().to_vec(),
                values: t.to_i64_vec().into_iter().map(Dim::fixed).collect(),
            }),
            Known::Tensor(_) => None,
        }
    }

    /// A concrete tensor when no element is symbolic.
    pub fn as_tensor(&self, dtype: crate::DType) -> Option<Arc<Tensor>> {
        match self {
            Known::Tensor(t) => Some(t.clone()),
            Known::Dims(s) => {
                let v: Option<Vec<i64>> = s.values.iter().map(Dim::as_fixed).collect();
                let t = Tensor::from_i64(s.shape.clone(), v?).cast(dtype);
                Some(Arc::new(t))
            }
        }
    }

    /// Builds the value from dims, concrete when every dim is static.
    pub fn from_dims(shape: Vec<usize>, values: Vec<Dim>) -> Known {
        match values
            .iter()
            .map(Dim::as_fixed)
            .collect::<Option<Vec<i64>>>()
        {
            Some(v) => Known::Tensor(Arc::new(Tensor::from_i64(shape, v))),
            None => Known::Dims(SymTensor { shape, values }),
        }
    }
}

/// What inference knows about a value.
#[derive(Clone, Debug, PartialEq)]
pub struct Fact {
    pub ty: TensorType,
    pub value: Option<Known>,
}

impl Fact {
    pub fn new(ty: TensorType) -> Fact {
        Fact { ty, value: None }
    }

    pub fn with_value(ty: TensorType, value: Known) -> Fact {
        Fact {
            ty,
            value: Some(value),
        }
    }

    /// The value as a list of dims (rank 0 or 1 integer tensors only).
    pub fn dims_value(&self) -> Option<Vec<Dim>> {
        let s = self.value.as_ref()?.as_dims()?;
        (s.shape.len() <= 1).then_some(s.values)
    }
}

/// Context for reference evaluation: the values bound to symbols.
#[derive(Clone, Debug, Default)]
pub struct EvalCtx {
    pub symbols: HashMap<String, i64>,
}

/// The behaviour every op provides.
pub trait OpDef {
    /// The name in the textual IR.
    fn mnemonic(&self) -> &'static str;
    /// Attributes in print order.
    fn attrs(&self) -> Vec<(&'static str, Attr)>;
    /// Validates the inputs and infers output types (and values, for shape bookkeeping).
    fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError>;
    /// Reference evaluation on concrete tensors.
    fn eval(&self, inputs: &[&Tensor], ctx: &EvalCtx) -> Result<Vec<Tensor>, OpError>;
}

/// How an op struct is built from text: the mnemonics it owns and a constructor.
pub trait OpBuild: Sized {
    const MNEMONICS: &'static [&'static str];
    /// Builds the op for `mnemonic`; `results` are the declared result types
    /// (ops such as `constant` read their dtype from it).
    fn build(mnemonic: &str, attrs: &mut Attrs, results: &[TensorType]) -> Result<Self, OpError>;
}

macro_rules! define_ops {
    ($($variant:ident($ty:ty)),* $(,)?) => {
        /// Every IR op.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Op { $($variant($ty)),* }

        $(impl From<$ty> for Op { fn from(op: $ty) -> Op { Op::$variant(op) } })*

        impl OpDef for Op {
            fn mnemonic(&self) -> &'static str { match self { $(Op::$variant(o) => o.mnemonic()),* } }
            fn attrs(&self) -> Vec<(&'static str, Attr)> { match self { $(Op::$variant(o) => o.attrs()),* } }
            fn infer(&self, inputs: &[&Fact]) -> Result<Vec<Fact>, OpError> {
                match self { $(Op::$variant(o) => o.infer(inputs)),* }
            }
            fn eval(&self, inputs: &[&Tensor], ctx: &EvalCtx) -> Result<Vec<Tensor>, OpError> {
                match self { $(Op::$variant(o) => o.eval(inputs, ctx)),* }
            }
        }

        impl Op {
            /// Every mnemonic the IR knows, sorted.
            pub fn mnemonics() -> Vec<&'static str> {
                let mut all: Vec<&'static str> = Vec::new();
                $(all.extend_from_slice(<$ty as OpBuild>::MNEMONICS);)*
                all.sort_unstable();
                all
            }

            /// Builds an op from its mnemonic and attributes; unknown
            /// mnemonics and unknown or ill-typed attributes are errors.
            pub fn build(mnemonic: &str, mut attrs: Attrs, results: &[TensorType]) -> Result<Op, OpError> {
                $(if <$ty as OpBuild>::MNEMONICS.contains(&mnemonic) {
                    let op = <$ty as OpBuild>::build(mnemonic, &mut attrs, results)?;
                    attrs.finish()?;
                    return Ok(Op::$variant(op));
                })*
                bail!("unknown op `{mnemonic}`")
            }
        }
    };
}

define_ops! {
    Constant(constant::Constant),
    Binary(binary::Binary),
    Unary(unary::Unary),
    Cast(cast::Cast),
    Identity(identity::Identity),
    MatMul(matmul::MatMul),
    QMatMul(qmatmul::QMatMul),
    QSwiGlu(qswiglu::QSwiGlu),
    Reshape(reshape::Reshape),
    ShapeOf(shape_of::ShapeOf),
    Concat(concat::Concat),
    Gather(gather::Gather),
    Unsqueeze(unsqueeze::Unsqueeze),
    Where(where_::Where),
    Softmax(softmax::Softmax),
    LayerNorm(layer_norm::LayerNorm),
    Reduce(reduce::Reduce),
    Transpose(transpose::Transpose),
    Squeeze(squeeze::Squeeze),
    Split(split::Split),
    Slice(slice::Slice),
    Expand(expand::Expand),
    Size(size::Size),
    ConstantOfShape(constant_of_shape::ConstantOfShape),
    Range(range::Range),
    CumSum(cum_sum::CumSum),
    Trilu(trilu::Trilu),
    GatherNd(gather_nd::GatherNd),
    GatherElements(gather_elements::GatherElements),
    RmsNorm(rms_norm::RmsNorm),
    AddRmsNorm(add_rms_norm::AddRmsNorm),
    AddLayerNorm(add_layer_norm::AddLayerNorm),
    Gelu(gelu::Gelu),
    Softcap(softcap::Softcap),
    Glu(glu::Glu),
    Attention(attention::Attention),
    Rope(rope::Rope),
    KvWrite(kv_cache::KvWrite),
    KvMask(kv_cache::KvMask),
}

/// Checks the input count against `min..=max`.
pub fn check_arity(op: &str, inputs: usize, min: usize, max: usize) -> Result<(), OpError> {
    if inputs < min || inputs > max {
        if min == max {
            bail!("`{op}` takes {min} operand(s), got {inputs}");
        }
        bail!("`{op}` takes {min} to {max} operands, got {inputs}");
    }
    Ok(())
}

/// Fails if a shape operand (`what` of `op`) has a dim that may be negative.
pub fn check_nonnegative_dims(op: &str, what: &str, dims: &[Dim]) -> Result<(), OpError> {
    if let Some(d) = dims.iter().find(|d| !d.is_nonnegative()) {
        bail!(
            "`{op}` {what} {} has a negative dim {d}",
            crate::shape::Shape(dims.to_vec())
        );
    }
    Ok(())
}

/// Normalises a possibly negative axis against `rank`.
pub fn norm_axis(axis: i64, rank: usize) -> Result<usize, OpError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        bail!("axis {axis} out of range for rank {rank}");
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Builds the fact for a result whose value is computed from dims when all
/// of `inputs` are known; used by shape-bookkeeping ops.
pub fn fact_maybe_dims(ty: TensorType, values: Option<Vec<Dim>>) -> Fact {
    let shape = ty.shape.as_fixed();
    match (values, shape) {
        (Some(values), Some(shape)) if shape.iter().product::<usize>() == values.len() => {
            let known = Known::from_dims(shape, values);
            let known = match known {
                Known::Tensor(t) => Known::Tensor(Arc::new(t.cast(ty.dtype))),
                k => k,
            };
            Fact::with_value(ty, known)
        }
        _ => Fact::new(ty),
    }
}

/// Row-major strides of a static shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The dims of a static shape.
pub fn static_dims(shape: &[usize]) -> Vec<Dim> {
    shape.iter().map(|&d| Dim::fixed(d as i64)).collect()
}

/// The known value of a fact as dims (integer tensors only).
pub fn known_dims(f: &Fact) -> Option<SymTensor> {
    f.value.as_ref()?.as_dims()
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Helpers shared by the op unit tests.

    use super::*;
    use crate::dtype::DType;

    /// A fact with only a type.
    pub fn fact(dtype: DType, dims: Vec<Dim>) -> Fact {
        Fact::new(TensorType::new(dtype, dims))
    }

    /// An `i64` fact of the given shape with known (possibly symbolic) values.
    pub fn known(shape: &[usize], values: Vec<Dim>) -> Fact {
        let ty = TensorType::new(DType::I64, static_dims(shape));
        Fact::with_value(ty, Known::from_dims(shape.to_vec(), values))
    }

    /// An `i64` fact of the given shape with known static values.
    pub fn known_i64(shape: &[usize], values: &[i64]) -> Fact {
        known(shape, values.iter().map(|&v| Dim::fixed(v)).collect())
    }

    /// A fact holding a concrete tensor.
    pub fn known_tensor(t: Tensor) -> Fact {
        let ty = TensorType::new(t.dtype(), static_dims(t.shape()));
        Fact::with_value(ty, Known::Tensor(Arc::new(t)))
    }

    pub fn sym(name: &str) -> Dim {
        Dim::sym(name)
    }

    pub fn d(v: i64) -> Dim {
        Dim::fixed(v)
    }

    /// Evaluates an op on concrete tensors with no symbols bound.
    pub fn eval(op: &impl OpDef, inputs: &[&Tensor]) -> Result<Vec<Tensor>, OpError> {
        op.eval(inputs, &EvalCtx::default())
    }

    /// Evaluates and checks the result against inference on the same
    /// concrete inputs (types agree; known values agree).
    pub fn eval_checked(op: &impl OpDef, inputs: &[&Tensor]) -> Vec<Tensor> {
        let out = eval(op, inputs).expect("eval");
        let facts: Vec<Fact> = inputs.iter().map(|t| known_tensor((*t).clone())).collect();
        let refs: Vec<&Fact> = facts.iter().collect();
        let inferred = op.infer(&refs).expect("infer");
        assert_eq!(inferred.len(), out.len(), "result count");
        for (f, t) in inferred.iter().zip(&out) {
            assert_eq!(f.ty, TensorType::new(t.dtype(), static_dims(t.shape())));
            if let Some(v) = f.value.as_ref().and_then(|v| v.as_tensor(t.dtype())) {
                assert_eq!(&*v, t, "inferred value");
            }
        }
        out
    }

    /// Printing the attributes and building from them gives the same op.
    pub fn assert_round_trip(op: impl Into<Op>, results: &[TensorType]) {
        let op: Op = op.into();
        let attrs = Attrs::from_pairs(op.attrs().into_iter().map(|(k, v)| (k.to_string(), v)));
        let built = Op::build(op.mnemonic(), attrs, results).expect("build");
        assert_eq!(built, op);
    }
}
