//! Compiling a graph with static shapes into one kernel per node, into any
//! Cranelift module (the JIT's or an object file's).

use std::collections::HashMap;
use std::sync::Arc;

use cranelift_codegen::ir::{types, AbiParam, UserFuncName};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{FuncId, Linkage, Module};
use slmcc_ir::verify::node_label;
use slmcc_ir::{EvalCtx, Graph, Op, OpDef, Tensor, ValueId};

use super::emit::KernelBuilder;
use super::lower::{lower_node, NodeSig, Operand};
use super::{CpuError, CpuOptions};

/// One compiled kernel: the node it runs and its buffers in ABI order.
#[derive(Clone, Debug)]
pub struct KernelSpec {
    /// Index of the node in the graph's schedule.
    pub node: usize,
    /// The symbol of the kernel function.
    pub symbol: String,
    /// The node's operands, then its results.
    pub buffers: Vec<ValueId>,
    /// Whether the node is a `constant` (its result never changes: an
    /// executor runs it once).
    pub is_constant: bool,
}

/// The static shape of a value, or an error naming it.
pub fn static_shape(graph: &Graph, v: ValueId) -> Result<Vec<usize>, CpuError> {
    let val = graph.value(v);
    val.ty.shape.as_fixed().ok_or_else(|| {
        CpuError::Dynamic(format!(
            "graph @{}: %{} has type {}; the cpu backend needs static shapes (bind the symbols first)",
            graph.name, val.name, val.ty
        ))
    })
}

/// Cranelift flags for kernels: optimised for speed, verified.
pub fn flags(pic: bool) -> settings::Flags {
    let mut b = settings::builder();
    let set = |b: &mut settings::Builder, k: &str, v: &str| {
        b.set(k, v).expect("known Cranelift setting");
    };
    set(&mut b, "opt_level", "speed");
    set(&mut b, "use_colocated_libcalls", "false");
    set(&mut b, "is_pic", if pic { "true" } else { "false" });
    settings::Flags::new(b)
}

/// The ISA of the host, for the JIT.
pub fn host_isa() -> Result<OwnedTargetIsa, CpuError> {
    let builder = cranelift_native::builder()
        .map_err(|e| CpuError::Codegen(format!("host ISA not supported: {e}")))?;
    builder
        .finish(flags(false))
        .map_err(|e| CpuError::Codegen(format!("host ISA: {e}")))
}

/// The values of the graph's `constant` nodes, evaluated once.
fn constant_values(graph: &Graph) -> HashMap<ValueId, Arc<Tensor>> {
    let mut known = HashMap::new();
    for node in &graph.nodes {
        if let Op::Constant(c) = &node.op {
            if let Ok(mut v) = c.eval(&[], &EvalCtx::default()) {
                known.insert(node.outputs[0], Arc::new(v.remove(0)));
            }
        }
    }
    known
}

/// The static signature of node `n`.
fn node_sig<'a>(
    graph: &Graph,
    n: usize,
    known: &'a HashMap<ValueId, Arc<Tensor>>,
) -> Result<NodeSig<'a>, CpuError> {
    let node = &graph.nodes[n];
    let operand = |v: &ValueId| -> Result<Operand<'a>, CpuError> {
        Ok(Operand {
            dtype: graph.ty(*v).dtype,
            shape: static_shape(graph, *v)?,
            value: known.get(v).map(|t| &**t),
        })
    };
    Ok(NodeSig {
        inputs: node.inputs.iter().map(operand).collect::<Result<_, _>>()?,
        outputs: node.outputs.iter().map(operand).collect::<Result<_, _>>()?,
    })
}

/// Attaches the graph and node to an error.
fn at_node(graph: &Graph, n: usize, e: CpuError) -> CpuError {
    CpuError::AtNode {
        graph: graph.name.clone(),
        node: format!(
            "{} (`{}`)",
            node_label(graph, n),
            graph.nodes[n].op.mnemonic()
        ),
        source: Box::new(e),
    }
}

/// Compiles every node of `graph` into a kernel of `module`, named
/// `{prefix}_{node index}_{mnemonic}`, in schedule order. With the
/// environment variable `SLMCC_DISASM` set, each kernel's machine code is
/// printed to stderr (to inspect register tiles and spills).
pub fn compile_kernels(
    module: &mut dyn Module,
    graph: &Graph,
    options: &CpuOptions,
    prefix: &str,
    linkage: Linkage,
) -> Result<Vec<(KernelSpec, FuncId)>, CpuError> {
    let known = constant_values(graph);
    let fma = options.fma && module.isa().has_native_fma();
    let ptr = module.isa().pointer_type();
    if ptr != types::I64 {
        return Err(CpuError::Codegen(format!(
            "the cpu backend needs 64-bit pointers, the target has {ptr}"
        )));
    }
    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    let mut out = Vec::with_capacity(graph.nodes.len());
    for (n, node) in graph.nodes.iter().enumerate() {
        let sig = node_sig(graph, n, &known).map_err(|e| at_node(graph, n, e))?;
        let symbol = format!("{prefix}_{n}_{}", node.op.mnemonic());
        let mut fsig = module.make_signature();
        fsig.params.push(AbiParam::new(ptr));
        fsig.returns.push(AbiParam::new(types::I32));
        let id = module
            .declare_function(&symbol, linkage, &fsig)
            .map_err(|e| CpuError::Codegen(format!("declaring {symbol}: {e}")))?;
        ctx.func.signature = fsig;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let nbufs = node.inputs.len() + node.outputs.len();
        let lowered = {
            let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let mut kb = KernelBuilder::new(b, module, nbufs, fma, options.fast_math);
            kb.host_gemm = options.host_gemm;
            kb.host_qgemm = options.host_qgemm;
            kb.threads = options.threads;
            let r = lower_node(&mut kb, &node.op, &sig);
            if r.is_ok() {
                kb.finish();
            }
            r
        };
        if let Err(e) = lowered {
            module.clear_context(&mut ctx);
            return Err(at_node(graph, n, e));
        }
        let disasm = std::env::var_os("SLMCC_DISASM").is_some();
        ctx.set_disasm(disasm);
        module
            .define_function(id, &mut ctx)
            .map_err(|e| at_node(graph, n, CpuError::Codegen(format!("{symbol}: {e:?}"))))?;
        if disasm {
            if let Some(v) = ctx.compiled_code().and_then(|c| c.vcode.as_ref()) {
                eprintln!("{symbol}:\n{v}");
            }
        }
        module.clear_context(&mut ctx);
        let buffers = node.inputs.iter().chain(&node.outputs).copied().collect();
        out.push((
            KernelSpec {
                node: n,
                symbol,
                buffers,
                is_constant: matches!(node.op, Op::Constant(_)),
            },
            id,
        ));
    }
    Ok(out)
}
