"""A Qwen2-1.5B-shaped decoder as ONNX, built with onnx.helper in the dynamo exporter's form.

What: the graph `torch.onnx.export(..., dynamo=True, opset_version=18)` writes for
`transformers.Qwen2ForCausalLM` (eager attention, no KV cache; see generate.py and
`qwen2.onnx`), but at the size of Qwen2-1.5B and with seeded random weights:

    28 layers, hidden 1536, 12 attention heads x head_dim 128, 2 KV heads (GQA, 6 query
    heads per KV head), SwiGLU MLP 8960, vocab 151936, RMSNorm eps 1e-6, RoPE theta 1e6,
    q/k/v biases (no o_proj bias), 1.54 G parameters (1.78 G stored, see LM head below).

One input `input_ids` int64 [1, seq] (`seq` symbolic), one output `logits` float32
[1, seq, 151936]. No torch is needed (only onnx + numpy: runs with the CI venv's
onnx 1.16.2 / numpy 1.26 as well as the generator venv).

How to run (from the repository root):

    python testdata/models/qwen2_1p5b.py               # 28 layers -> generated/qwen2_1p5b/
    python testdata/models/qwen2_1p5b.py --layers 2    # small variant -> generated/qwen2_1p5b_l2/
    python testdata/models/qwen2_1p5b.py --check       # also onnx.checker (+ onnxruntime if
                                                       # --layers <= 4) after writing
    options: --out DIR, --seed N (0), --std S (0.02), --untied

Where it writes: `testdata/generated/qwen2_1p5b/` (git-ignored), or
`testdata/generated/qwen2_1p5b_l<N>/` for `--layers N` != 28: `model.onnx` (the graph
only: 160 KB for 28 layers) and `model.onnx.data` (every tensor of >= 1 KB, float32
little-endian, each at a 4096-byte-aligned offset; `location` is relative to the model's
folder, as slmcc's importer requires).

Memory / time: the weights are drawn and written one tensor at a time straight into the
data file (the TensorProto entries carry only `location`/`offset`/`length`), so the
model proto never holds the weights; peak memory is about twice the largest tensor (the
933 MB embedding and its transposed copy for the tied LM head). Measured for the full
28 layers: 1823 nodes, 1.777 G stored float32 values, 7.1 GB on disk, 50 s wall
clock, 1.9 GB peak RSS. `--layers 2`: 185 nodes (as many as `qwen2.onnx`), 2.2 GB
(the embedding and the LM head dominate), ~16 s. Same bytes from onnx 1.16.2 / numpy
1.26 and onnx 1.23 / numpy 2 (numpy's PCG64 + float32 ziggurat draws are stable).

Checked (`--layers 2`): onnx.checker; onnxruntime logits equal those of
`transformers.Qwen2ForCausalLM` (eager, same config and weights) to 7e-6; slmcc's
`eqsat-fuse` forms the same fusions as for `qwen2.onnx` (attention 2, rope 4, swiglu 2,
rms-norm 1, add-rms-norm 4, every unfused-* counter 0).

LM head: Qwen2-1.5B ties the LM head to the embedding. The dynamo exporter folds the
`linear`'s weight transpose into a new initializer, so even a tied model is written with
the embedding twice: once as `model.embed_tokens.weight` [151936, 1536] for the Gather
and once transposed as a `val_*` [1536, 151936] initializer for the final MatMul. This
script does the same: by default the LM head initializer holds exactly the transposed
embedding values (tied, as Qwen2-1.5B); `--untied` draws it independently instead.

How it mirrors the exporter's form (node for node the pattern of `qwen2.onnx`, checked
against it; value and node names follow the exporter's style: torch op names with
counters for values, `node_<name>` for nodes, `val_<n>` for constants and for transposed
weights, whose `doc_string` names the PyTorch parameter):

* prologue: `Shape(start=1,end=2)`/`Squeeze` for seq, `Gather` embedding, position ids
  from `Range`/`Unsqueeze`, and the causal-mask construction of
  `transformers.masking_utils` exactly as exported (Slice/Sub/Concat/Equal/Not/Cast/
  CumSum packed-sequence check, Max/Shape/Expand/Unsqueeze/Concat index building,
  four `GatherND`, `LessOrEqual`, two `And`, `Where(mask, 0, -3.4028235e38)`);
  RoPE tables as `Unsqueeze`/`Cast`/`Mul(inv_freq)`/`Concat(f, f)`/`Cos`/`Sin`;
* RMSNorm: `Pow(x, 2)`/`ReduceMean(., [-1], keepdims=1)`/`Add(eps)`/`Sqrt`/`Reciprocal`/
  `Mul(x, r)`/`Mul(weight, .)`;
* q/k/v: `MatMul` with the transposed [in, out] weight initializer, `Add` bias,
  `Reshape(allowzero=1)` to [1, -1, heads, 128], `Transpose(0,2,1,3)`;
* RoPE: `Mul(x, cos)`, rotate_half as two `Slice`s on axis 3 / `Neg` / `Concat`,
  `Mul(., sin)`, `Add`; the cos/sin `Unsqueeze(axis 1)` emitted once, in layer 0;
* GQA repeat_kv: `Unsqueeze(axis 2)`/`Expand([1, 2, 6, seq, 128])`/
  `Reshape([1, 12, -1, 128])` (the Expand shape `Concat` emitted once, in layer 0);
* attention: `Transpose(0,1,3,2)` of K, `MatMul`, `Mul(1/sqrt(128))`, `Add(mask)`,
  `Softmax(-1)`, `MatMul` with V, `Transpose(0,2,1,3)`, `Reshape([1, -1, 1536])`,
  `MatMul` o_proj (no bias), residual `Add`;
* MLP: `MatMul` gate / `Sigmoid` / `Mul` (SiLU), `MatMul` up, `Mul`, `MatMul` down,
  residual `Add`; final RMSNorm and the LM-head `MatMul` named `logits`.

Differences from a real export: of the node `metadata_props`, only the linear layers'
MatMuls carry the exporter's module scopes (`pkg.torch.onnx.name_scopes` and
`pkg.torch.onnx.class_hierarchy`, which `slmcc compile --lora` matches adapters by), no
stack traces; no `value_info` (the exporter annotates intermediates with symbolic shapes such as
`seq + 1`; onnx shape inference would only give `unk__N` dims, and slmcc infers shapes
itself); the node and `val_*` numbering differs (the exporter's counts include the FX
nodes it folds away).
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
GENERATED_DIR = ROOT / "testdata" / "generated"
OPSET = 18
ALIGN = 4096  # byte alignment of each tensor in the data file
INLINE_BELOW = 1024  # tensors smaller than this many bytes stay inside model.onnx

# Qwen2-1.5B (Qwen/Qwen2-1.5B config.json)
CONFIG = dict(
    layers=28,
    hidden=1536,
    heads=12,
    kv_heads=2,
    head_dim=128,
    intermediate=8960,
    vocab=151936,
    eps=1e-6,
    rope_theta=1e6,
)

# Other dims in the same graph form (`--shape`): Llama-2-7B's (meta-llama/Llama-2-7b-hf
# config.json: MHA, 32000 vocab, untied head), for compiling a 7B-sized model; the graph
# keeps Qwen2's q/k/v biases, 0.4% more parameters than Llama's.
SHAPES = {
    "qwen2-1.5b": CONFIG,
    "llama2-7b": dict(layers=32, hidden=4096, heads=32, kv_heads=32, head_dim=128,
                      intermediate=11008, vocab=32000, eps=1e-5, rope_theta=1e4),
}


class Writer:
    """Appends tensors to one external data file and makes their TensorProto entries."""

    def __init__(self, data_path: Path):
        self.data_path = data_path
        self.location = data_path.name
        self.file = open(data_path, "wb")
        self.offset = 0
        self.initializers: list[TensorProto] = []

    def add(self, name: str, array: np.ndarray, doc: str = "") -> str:
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make 0-d arrays 1-d)
            array = array.copy(order="C")
        if array.nbytes < INLINE_BELOW:
            t = numpy_helper.from_array(array, name)
        else:
            pad = (-self.offset) % ALIGN
            if pad:
                self.file.write(b"\0" * pad)
                self.offset += pad
            t = TensorProto()
            t.name = name
            t.data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
            t.dims.extend(array.shape)
            data = array.astype(array.dtype.newbyteorder("<"), copy=False)
            self.file.write(memoryview(data).cast("B"))
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", self.location), ("offset", self.offset),
                               ("length", array.nbytes)):
                entry = t.external_data.add()
                entry.key, entry.value = key, str(value)
            self.offset += array.nbytes
        if doc:
            t.doc_string = doc
        self.initializers.append(t)
        return name

    def close(self) -> None:
        self.file.close()


class Builder:
    """Emits nodes with exporter-style names: values `base`, `base_1`, ...; nodes `node_<value>`."""

    def __init__(self, writer: Writer):
        self.w = writer
        self.nodes: list[onnx.NodeProto] = []
        self.counts: collections.Counter = collections.Counter()
        self.val = 0  # counter of `val_<n>` names
        self.taken: set[str] = set()

    def name(self, base: str) -> str:
        while True:
            n = self.counts[base]
            self.counts[base] += 1
            out = base if n == 0 else f"{base}_{n}"
            if out not in self.taken:
                self.taken.add(out)
                return out

    def val_name(self) -> str:
        self.val += 1
        self.taken.add(f"val_{self.val}")
        return f"val_{self.val}"

    def const(self, value, dtype) -> str:
        return self.w.add(self.val_name(), np.array(value, dtype=dtype))

    def op(self, op_type: str, inputs: list[str], base: str | None = None, **attrs) -> str:
        out = self.name(base) if base else self.val_name()
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"node_{out}", **attrs))
        return out


HF = "transformers.models.qwen2.modeling_qwen2."
CLASSES = {"": HF + "Qwen2ForCausalLM", "model": HF + "Qwen2Model", "self_attn": HF + "Qwen2Attention",
           "mlp": HF + "Qwen2MLP"}


def scope(node, module: str) -> None:
    """Gives a linear layer's MatMul the scope metadata the dynamo exporter writes for
    `module` (e.g. `model.layers.0.self_attn.q_proj`): the module path from the root down
    (a ModuleList is no scope), then the ATen op, with their classes."""
    parts = module.split(".")
    scopes = [""] + [".".join(parts[:i + 1]) for i in range(len(parts))
                     if not (i + 1 < len(parts) and parts[i + 1].isdigit())]

    def cls(s: str) -> str:
        last = s.rsplit(".", 1)[-1]
        if last.isdigit():
            return HF + "Qwen2DecoderLayer"
        return CLASSES.get(last, "torch.nn.modules.linear.Linear")

    meta = {"pkg.torch.onnx.name_scopes": repr(scopes + ["linear"]),
            "pkg.torch.onnx.class_hierarchy": repr([cls(s) for s in scopes] + ["aten.linear.default"])}
    for k, v in meta.items():
        entry = node.metadata_props.add()
        entry.key, entry.value = k, v


def rope_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """transformers' default RoPE: 1 / theta ** (arange(0, d, 2).float() / d), in float32."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / np.power(np.float32(theta), exponent, dtype=np.float32)).astype(np.float32)


def build(out_dir: Path, config: dict, seed: int, std: float, tied: bool) -> tuple[Path, dict]:
    c = config
    layers = c["layers"]
    H, KV, D, E, F, V = c["heads"], c["kv_heads"], c["head_dim"], c["hidden"], c["intermediate"], c["vocab"]
    n_rep = H // KV
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "model.onnx"
    w = Writer(out_dir / "model.onnx.data")
    rng = np.random.default_rng(seed)
    f32 = np.float32
    i64 = np.int64

    def normal(shape, scale=std) -> np.ndarray:
        a = rng.standard_normal(shape, dtype=f32)
        a *= f32(scale)
        return a

    def weight_t(param: str, fan_in: int, fan_out: int, b: Builder) -> str:
        """A Linear weight [out, in] as the exporter stores it: transposed, [in, out]."""
        return w.add(b.val_name(), normal((fan_in, fan_out)),
                     doc=f"{param} transposed ([in, out] = [{fan_in}, {fan_out}])")

    b = Builder(w)
    # Parameters the exporter keeps under their PyTorch names.
    embed = normal((V, E))
    w.add("model.embed_tokens.weight", embed)
    lm_head = np.ascontiguousarray(embed.T) if tied else None
    del embed

    # Shared constants (the exporter deduplicates constants by value).
    c0 = b.const(0, i64)          # scalar 0
    c1 = b.const(1, i64)          # scalar 1
    a0 = b.const([0], i64)        # [0]
    a1 = b.const([1], i64)        # [1]
    am1 = b.const([-1], i64)      # [-1]
    ones11 = b.const([1, 1], i64)
    u3 = w.add(b.name("unsqueeze_3"), np.zeros((1, 1, 1, 1), i64))
    new_ones = w.add(b.name("new_ones"), np.array(True))
    zeros = w.add(b.name("zeros"), np.array(0.0, f32))
    sm1 = b.const(-1, i64)        # scalar -1 (CumSum axis)
    a2 = b.const([2], i64)        # [2]: Unsqueeze axis 2, and also num_kv_heads (= 2)
    a01 = b.const([0, 1], i64)
    neg_big = b.const(np.finfo(f32).min, f32)
    two = b.const(2.0, f32)
    eps = b.const(c["eps"], f32)
    shape_q = b.const([1, -1, H, D], i64)
    shape_kv = b.const([1, -1, KV, D], i64)
    half = b.const([D // 2], i64)
    a3 = b.const([3], i64)
    i64max = b.const([np.iinfo(i64).max], i64)
    hd = b.const([D], i64)
    rep = a2 if n_rep == 2 else b.const([n_rep], i64)
    kvh = a2 if KV == 2 else b.const([KV], i64)
    shape_rep = b.const([1, H, -1, D], i64)
    scale = b.const(1.0 / np.sqrt(D), f32)
    shape_o = b.const([1, -1, E], i64)
    inv_freq = w.add("model.rotary_emb.inv_freq", rope_inv_freq(D, c["rope_theta"]))

    # Prologue: seq length, embedding, position ids, causal mask, RoPE tables.
    val_0 = b.op("Shape", ["input_ids"], start=1, end=2)
    seq = b.op("Squeeze", [val_0], "sym_size_int_2")
    h = b.op("Gather", ["model.embed_tokens.weight", "input_ids"], "embedding", axis=0)
    arange = b.op("Range", [c0, seq, c1], "arange")
    unsq = b.op("Unsqueeze", [arange, a0], "unsqueeze")
    s1 = b.op("Slice", [unsq, a0, a1, a1, a1], "slice_1")
    sub = b.op("Sub", [s1, c1], "sub")
    cat = b.op("Concat", [sub, unsq], "cat", axis=-1)
    add20 = b.op("Add", [c1, seq], "add_20")
    s2 = b.op("Slice", [cat, a0, val_0, am1, a1], "slice_2")
    r34 = b.op("Reshape", [add20, am1], allowzero=0)
    s3 = b.op("Slice", [cat, a1, r34, am1, a1], "slice_3")
    sub4 = b.op("Sub", [s3, s2], "sub_4")
    eq = b.op("Equal", [sub4, c1])
    ne = b.op("Not", [eq], "ne")
    cvt = b.op("Cast", [ne], "convert_element_type_default", to=TensorProto.INT64)
    cumsum = b.op("CumSum", [cvt, sm1], "cumsum", reverse=0, exclusive=0)
    expand = b.op("Expand", [unsq, ones11], "expand")
    unsq8 = b.op("Unsqueeze", [arange, a01], "unsqueeze_8")
    unsq9 = b.op("Unsqueeze", [unsq8, a3], "unsqueeze_9")
    unsq12 = b.op("Unsqueeze", [unsq8, a2], "unsqueeze_12")

    def index(col: str) -> str:
        mx = b.op("Max", [u3, col])
        shp = b.op("Shape", [mx], start=0)
        ex = b.op("Expand", [u3, shp])
        ua = b.op("Unsqueeze", [ex, am1])
        ub = b.op("Unsqueeze", [col, am1])
        return b.op("Concat", [ua, ub], axis=-1)

    idx_kv = index(unsq9)
    g_kv = b.op("GatherND", [expand, idx_kv], batch_dims=0)
    idx_q = index(unsq12)
    g_q = b.op("GatherND", [expand, idx_q], batch_dims=0)
    le = b.op("LessOrEqual", [g_q, g_kv], "le_4")
    and0 = b.op("And", [new_ones, le], "bitwise_and")
    c_kv = b.op("GatherND", [cumsum, idx_kv], batch_dims=0)
    c_q = b.op("GatherND", [cumsum, idx_q], batch_dims=0)
    eq1 = b.op("Equal", [c_kv, c_q], "eq_1")
    and1 = b.op("And", [and0, eq1], "bitwise_and")
    mask = b.op("Where", [and1, zeros, neg_big], "where")
    unsq13 = b.op("Unsqueeze", [unsq, a2], "unsqueeze")
    pos = b.op("Cast", [unsq13], "_to_copy", to=TensorProto.FLOAT)
    freqs = b.op("Mul", [pos, inv_freq], "mul")
    emb = b.op("Concat", [freqs, freqs], "cat", axis=-1)
    cos = b.op("Cos", [emb], "cos")
    sin = b.op("Sin", [emb], "sin")

    def rms_norm(x: str, weight: str) -> str:
        p = b.op("Pow", [x, two], "pow")
        m = b.op("ReduceMean", [p, am1], "mean", noop_with_empty_axes=0, keepdims=1)
        a = b.op("Add", [m, eps], "add")
        s = b.op("Sqrt", [a])
        r = b.op("Reciprocal", [s], "rsqrt")
        y = b.op("Mul", [x, r], "mul")
        return b.op("Mul", [weight, y], "mul")

    def rope(x: str, cos_u: str, sin_u: str) -> str:
        m1 = b.op("Mul", [x, cos_u], "mul")
        lo = b.op("Slice", [x, a0, half, a3, a1], "slice")
        hi = b.op("Slice", [x, half, i64max, a3, a1], "slice")
        ng = b.op("Neg", [hi], "neg")
        rot = b.op("Concat", [ng, lo], "cat", axis=-1)
        m2 = b.op("Mul", [rot, sin_u], "mul")
        return b.op("Add", [m1, m2], "add")

    cos_u = sin_u = expand_shape = None
    for i in range(layers):
        p = f"model.layers.{i}"
        ln1 = w.add(f"{p}.input_layernorm.weight", 1.0 + normal((E,)))
        ln2 = w.add(f"{p}.post_attention_layernorm.weight", 1.0 + normal((E,)))
        x = rms_norm(h, ln1)
        proj = {}
        for name, heads, shape in (("q", H, shape_q), ("k", KV, shape_kv), ("v", KV, shape_kv)):
            wt = weight_t(f"{p}.self_attn.{name}_proj.weight", E, heads * D, b)
            bias = w.add(f"{p}.self_attn.{name}_proj.bias", normal((heads * D,)))
            mm = b.op("MatMul", [x, wt])
            scope(b.nodes[-1], f"{p}.self_attn.{name}_proj")
            lin = b.op("Add", [mm, bias], "linear")
            view = b.op("Reshape", [lin, shape], "view", allowzero=1)
            proj[name] = b.op("Transpose", [view], "transpose", perm=[0, 2, 1, 3])
        if cos_u is None:
            cos_u = b.op("Unsqueeze", [cos, a1], "unsqueeze")
            sin_u = b.op("Unsqueeze", [sin, a1], "unsqueeze")
        q = rope(proj["q"], cos_u, sin_u)
        k = rope(proj["k"], cos_u, sin_u)
        k5 = b.op("Unsqueeze", [k, a2], "unsqueeze")
        if expand_shape is None:
            expand_shape = b.op("Concat", [a1, kvh, rep, val_0, hd], axis=0)
        k_rep = b.op("Reshape", [b.op("Expand", [k5, expand_shape], "expand"), shape_rep],
                     "_unsafe_view", allowzero=1)
        v5 = b.op("Unsqueeze", [proj["v"], a2], "unsqueeze")
        v_rep = b.op("Reshape", [b.op("Expand", [v5, expand_shape], "expand"), shape_rep],
                     "_unsafe_view", allowzero=1)
        kt = b.op("Transpose", [k_rep], "transpose", perm=[0, 1, 3, 2])
        scores = b.op("MatMul", [q, kt], "matmul")
        scaled = b.op("Mul", [scores, scale], "mul")
        masked = b.op("Add", [scaled, mask], "add")
        probs = b.op("Softmax", [masked], axis=-1)
        ctx = b.op("MatMul", [probs, v_rep], "matmul")
        ctx_t = b.op("Transpose", [ctx], "transpose", perm=[0, 2, 1, 3])
        ctx_2d = b.op("Reshape", [ctx_t, shape_o], "view", allowzero=1)
        wo = weight_t(f"{p}.self_attn.o_proj.weight", H * D, E, b)
        o = b.op("MatMul", [ctx_2d, wo], "linear")
        scope(b.nodes[-1], f"{p}.self_attn.o_proj")
        h = b.op("Add", [h, o], "add")
        x = rms_norm(h, ln2)
        wg = weight_t(f"{p}.mlp.gate_proj.weight", E, F, b)
        gate = b.op("MatMul", [x, wg], "linear")
        scope(b.nodes[-1], f"{p}.mlp.gate_proj")
        sig = b.op("Sigmoid", [gate])
        silu = b.op("Mul", [gate, sig], "silu")
        wu = weight_t(f"{p}.mlp.up_proj.weight", E, F, b)
        up = b.op("MatMul", [x, wu], "linear")
        scope(b.nodes[-1], f"{p}.mlp.up_proj")
        act = b.op("Mul", [silu, up], "mul")
        wd = weight_t(f"{p}.mlp.down_proj.weight", F, E, b)
        down = b.op("MatMul", [act, wd], "linear")
        scope(b.nodes[-1], f"{p}.mlp.down_proj")
        h = b.op("Add", [h, down], "add")

    norm_w = w.add("model.norm.weight", 1.0 + normal((E,)))
    x = rms_norm(h, norm_w)
    if tied:
        head = w.add(b.val_name(), lm_head, doc="lm_head.weight (tied to model.embed_tokens.weight) "
                     f"transposed ([in, out] = [{E}, {V}])")
        del lm_head
    else:
        head = weight_t("lm_head.weight", E, V, b)
    b.nodes.append(helper.make_node("MatMul", [x, head], ["logits"], name="node_logits"))
    scope(b.nodes[-1], "lm_head")
    w.close()

    graph = helper.make_graph(
        b.nodes,
        "main_graph",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", V])],
        initializer=w.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="slmcc testdata/models/qwen2_1p5b.py",
                              ir_version=10)
    model.doc_string = (f"Qwen2-1.5B-shaped decoder, {layers} layers, random weights "
                        f"(seed {seed}, std {std}, {'tied' if tied else 'untied'} LM head), "
                        "in the form of PyTorch's dynamo ONNX exporter (opset 18)")
    onnx.save(model, str(model_path))
    stats = dict(
        nodes=len(b.nodes),
        params=sum(int(np.prod(t.dims)) for t in w.initializers if t.data_type == TensorProto.FLOAT),
        bytes=model_path.stat().st_size + w.data_path.stat().st_size,
    )
    return model_path, stats


def check(model_path: Path, layers: int, seq: int = 4) -> None:
    onnx.checker.check_model(str(model_path))
    print(f"onnx.checker: ok ({model_path})")
    if layers > 4:
        return
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    vocab = sess.get_outputs()[0].shape[-1]
    ids = np.random.default_rng(1).integers(0, vocab, size=(1, seq), dtype=np.int64)
    (logits,) = sess.run(["logits"], {"input_ids": ids})
    assert logits.shape == (1, seq, vocab), logits.shape
    assert np.isfinite(logits).all(), "non-finite logits"
    print(f"onnxruntime: logits {logits.shape} finite, std {logits.std():.4f}, "
          f"argmax {logits[0].argmax(-1).tolist()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2-1.5b",
                    help="the dims (default qwen2-1.5b)")
    ap.add_argument("--layers", type=int, help="layers (default: the shape's)")
    ap.add_argument("--out", type=Path, help="output folder (default testdata/generated/"
                    "qwen2_1p5b[_l<N>])")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--untied", action="store_true", help="independent LM head weights")
    ap.add_argument("--check", action="store_true", help="run onnx.checker (and onnxruntime "
                    "with seq 4 if --layers <= 4) on the result")
    args = ap.parse_args()
    config = dict(SHAPES[args.shape])
    if args.layers is not None:
        if args.layers < 1:
            raise SystemExit("--layers must be >= 1")
        config["layers"] = args.layers
    suffix = "" if args.layers in (None, SHAPES[args.shape]["layers"]) else f"_l{args.layers}"
    stem = "qwen2_1p5b" if args.shape == "qwen2-1.5b" else args.shape.replace("-", "_") + "_shape"
    out = args.out or GENERATED_DIR / f"{stem}{suffix}"
    t0 = time.monotonic()
    path, stats = build(out, config, args.seed, args.std, tied=not args.untied)
    print(f"wrote {path} (+ {path.name}.data): {stats['nodes']} nodes, "
          f"{stats['params'] / 1e9:.3f} G float32 values stored, "
          f"{stats['bytes'] / 2**30:.2f} GiB, {time.monotonic() - t0:.1f} s")
    if args.check:
        check(path, config["layers"])


if __name__ == "__main__":
    main()
