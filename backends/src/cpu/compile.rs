//! Compiling a graph with static shapes into one kernel per node, into any
//! Cranelift module (the JIT's or an object file's).

use std::collections::HashMap;
use std::sync::Arc;

use cranelift_codegen::ir::{types, AbiParam, UserFuncName};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::Context;
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

/// What every kernel of a graph shares while it is lowered.
struct Lowering<'g> {
    graph: &'g Graph,
    known: HashMap<ValueId, Arc<Tensor>>,
    options: CpuOptions,
    fma: bool,
    ptr: types::Type,
}

impl<'g> Lowering<'g> {
    fn new(module: &dyn Module, graph: &'g Graph, options: &CpuOptions) -> Result<Self, CpuError> {
        let ptr = module.isa().pointer_type();
        if ptr != types::I64 {
            return Err(CpuError::Codegen(format!(
                "the cpu backend needs 64-bit pointers, the target has {ptr}"
            )));
        }
        Ok(Lowering {
            graph,
            known: constant_values(graph),
            options: *options,
            fma: options.fma && module.isa().has_native_fma(),
            ptr,
        })
    }

    /// Declares node `n`'s kernel `symbol` in `module` and lowers the node
    /// into `ctx.func` (Cranelift IR, not yet compiled). On an error the
    /// context is cleared.
    fn lower(
        &self,
        module: &mut dyn Module,
        ctx: &mut Context,
        fctx: &mut FunctionBuilderContext,
        n: usize,
        symbol: &str,
        linkage: Linkage,
    ) -> Result<FuncId, CpuError> {
        let (graph, node) = (self.graph, &self.graph.nodes[n]);
        let sig = node_sig(graph, n, &self.known).map_err(|e| at_node(graph, n, e))?;
        let mut fsig = module.make_signature();
        fsig.params.push(AbiParam::new(self.ptr));
        fsig.returns.push(AbiParam::new(types::I32));
        let id = module
            .declare_function(symbol, linkage, &fsig)
            .map_err(|e| CpuError::Codegen(format!("declaring {symbol}: {e}")))?;
        ctx.func.signature = fsig;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let nbufs = node.inputs.len() + node.outputs.len();
        let lowered = {
            let b = FunctionBuilder::new(&mut ctx.func, fctx);
            let mut kb = KernelBuilder::new(b, module, nbufs, self.fma, self.options.fast_math);
            kb.host_gemm = self.options.host_gemm;
            kb.host_qgemm = self.options.host_qgemm;
            kb.threads = self.options.threads;
            let r = lower_node(&mut kb, &node.op, &sig);
            if r.is_ok() {
                kb.finish();
            }
            r
        };
        if let Err(e) = lowered {
            module.clear_context(ctx);
            return Err(at_node(graph, n, e));
        }
        Ok(id)
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
    let lowering = Lowering::new(module, graph, options)?;
    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    let mut out = Vec::with_capacity(graph.nodes.len());
    for (n, node) in graph.nodes.iter().enumerate() {
        let symbol = format!("{prefix}_{n}_{}", node.op.mnemonic());
        let id = lowering.lower(module, &mut ctx, &mut fctx, n, &symbol, linkage)?;
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

/// Calls `each` with the Cranelift IR of every node's kernel of `graph`
/// as `compile_kernels` would compile it into `module` (lowered only,
/// nothing compiled or defined), in schedule order.
pub fn for_each_kernel_ir(
    module: &mut dyn Module,
    graph: &Graph,
    options: &CpuOptions,
    mut each: impl FnMut(usize, &cranelift_codegen::ir::Function),
) -> Result<(), CpuError> {
    let lowering = Lowering::new(module, graph, options)?;
    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        let symbol = format!("f_{n}_{}", node.op.mnemonic());
        lowering.lower(module, &mut ctx, &mut fctx, n, &symbol, Linkage::Local)?;
        each(n, &ctx.func);
        module.clear_context(&mut ctx);
    }
    Ok(())
}
