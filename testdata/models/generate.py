"""Tiny random-weight decoder models exported to ONNX by both PyTorch exporters.

Makes, from the repository root:

    python testdata/models/generate.py           # llama, qwen2, phi3, gpt2 (dynamo),
                                                 # llama_ts, qwen2_ts, phi3_ts, gpt2_ts
                                                 # (TorchScript) + OPS.md
    python testdata/models/generate.py --only gpt2 --only gpt2_ts
    python testdata/models/generate.py --ops-md  # only rewrite OPS.md (no torch needed)
    python testdata/models/generate.py --large   # only testdata/generated/llama_h512.onnx
    python testdata/models/generate.py --large llama_1b   # only testdata/generated/llama_1b.onnx
                                                          # (+ .onnx.data, 4.4 GB)

Each model is built with `transformers` from a config (no downloads), with fixed seeds,
eager attention (MatMul/Softmax, no SDPA op) and no KV cache, then exported with
`torch.onnx.export(..., dynamo=True, opset_version=18)`: one input `input_ids`
(int64 [1, seq], `seq` dynamic), one output `logits` (float32 [1, seq, vocab]),
weights embedded. The export already contains the causal-mask construction
(Range/CumSum/GatherND/LessOrEqual/Where), so no `attention_mask` input is exported.

Weights: 2-D weights are drawn with std `initializer_range` = 0.1 (so attention is not
uniform), and every 1-D parameter (norm weights, biases) gets N(0, 0.1) noise added, so
norms and biases are not trivially 1 / 0 and no two layers share a norm weight.

The `_ts` models are the same models (same configs and seeds) exported by the TorchScript
exporter instead: `torch.onnx.export(..., dynamo=False, opset_version=17,
dynamic_axes={"input_ids": {1: "seq"}, "logits": {1: "seq"}})`. Three things make that
exporter work on these `transformers` models, none of which changes what is computed:

* `forward` is narrowed to `input_ids -> logits` (the model's class is swapped for a
  subclass for the export, so node names keep the module paths `/model/layers.0/...`):
  the TorchScript exporter otherwise turns the default `logits_to_keep=0` into a graph input;
* `aten::diff` (the packed-sequence check of `transformers.masking_utils`) has no
  TorchScript symbolic: it is registered as `Concat(prepend, x)` and `Sub` of two `Slice`s;
* the builtin `aten::cumsum` symbolic passes a bool tensor to `CumSum` (invalid ONNX):
  it is registered again with a `Cast` to int64 first, as torch computes it.

These files carry no node metadata; their node names (`/model/layers.0/Add_1`) name the
module scopes instead (see goldens.py).

Every file is checked with onnx.checker and its logits are compared against PyTorch
with onnxruntime for two sequence lengths. The absolute site-packages paths that the
exporter writes into `pkg.torch.onnx.stack_trace` metadata are made relative, so the
files do not depend on where the venv lives.

Needs the pins in testdata/requirements-gen.txt.
"""

from __future__ import annotations

import argparse
import collections
import logging
import site
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "testdata" / "models"
GENERATED_DIR = ROOT / "testdata" / "generated"
SKELETON_DIR = MODELS_DIR / "skeletons"
SEED = 0
OPSET = 18
TORCHSCRIPT_OPSET = 17
DECODERS = ["llama", "qwen2", "phi3", "gpt2"]
# Benchmark models, written to the git-ignored generated/ folder by `--large NAME`.
# Those whose float32 weights pass protobuf's 2 GB limit keep them in `NAME.onnx.data`
# beside the graph (the exporter's external data: `location` relative to the model).
LARGE = ["llama_h512", "llama_1b"]
EXTERNAL_DATA = {"llama_1b"}
TORCHSCRIPT = "_ts"  # suffix of the TorchScript-exported variants

# Shared by the decoder configs: vocab 512, hidden 64, 2 layers, head_dim 16.
COMMON = dict(
    vocab_size=512,
    max_position_embeddings=128,
    tie_word_embeddings=False,
    use_cache=False,
    initializer_range=0.1,
    attn_implementation="eager",
)


def build(name: str):
    """Returns the transformers model `name` with seeded random weights, in eval mode."""
    import torch
    import transformers as T

    torch.manual_seed(SEED)
    if name == "llama":  # RMSNorm, RoPE, SwiGLU, GQA 4 heads / 2 kv heads
        cfg = T.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, intermediate_size=176, **COMMON)
        model = T.LlamaForCausalLM(cfg)
    elif name == "qwen2":  # like llama plus q/k/v biases
        cfg = T.Qwen2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, intermediate_size=176, **COMMON)
        model = T.Qwen2ForCausalLM(cfg)
    elif name == "phi3":  # fused qkv_proj and gate_up_proj
        cfg = T.Phi3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=176, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2, **COMMON)
        model = T.Phi3ForCausalLM(cfg)
    elif name == "gpt2":  # LayerNorm, gelu_new (tanh), Conv1D (-> Gemm), learned positions
        cfg = T.GPT2Config(vocab_size=512, n_positions=128, n_embd=64, n_layer=2, n_head=4,
                           n_inner=128, activation_function="gelu_new",
                           tie_word_embeddings=False, use_cache=False, initializer_range=0.1,
                           bos_token_id=1, eos_token_id=2, attn_implementation="eager")
        model = T.GPT2LMHeadModel(cfg)
    elif name == "llama_h512":  # benchmark size, ~20M parameters (~80 MB)
        cfg = T.LlamaConfig(vocab_size=8000, hidden_size=512, num_hidden_layers=4,
                            num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                            intermediate_size=1408, max_position_embeddings=512,
                            tie_word_embeddings=False, use_cache=False,
                            initializer_range=0.02, attn_implementation="eager")
        model = T.LlamaForCausalLM(cfg)
    elif name == "llama_1b":  # TinyLlama-1.1B's shape: 1.1 G parameters, 4.4 GB of float32
        # The decode step of a model this size reads its weights from DRAM, as every
        # model of the 0.5B-3B class does on a board; llama_h512's fit in a large L3.
        cfg = T.LlamaConfig(vocab_size=32000, hidden_size=2048, num_hidden_layers=22,
                            num_attention_heads=32, num_key_value_heads=4, head_dim=64,
                            intermediate_size=5632, max_position_embeddings=512,
                            rms_norm_eps=1e-5, tie_word_embeddings=False, use_cache=False,
                            initializer_range=0.02, attn_implementation="eager")
        model = T.LlamaForCausalLM(cfg)
    else:
        raise SystemExit(f"unknown model {name}")
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model.eval()


def relativize_paths(model: onnx.ModelProto) -> None:
    """Strips site-packages / repo prefixes from node metadata (stack traces)."""
    prefixes = sorted({str(Path(p).resolve()) + "/" for p in site.getsitepackages()}
                      | {str(ROOT) + "/"}, key=len, reverse=True)
    for node in model.graph.node:
        for prop in node.metadata_props:
            for prefix in prefixes:
                prop.value = prop.value.replace(prefix, "")


def export(model, path: Path, inputs: dict, output_names: list[str],
           external_data: bool = False) -> onnx.ModelProto:
    """dynamo-exports `model` called with `inputs` (name -> tensor) to `path`, dim 1 = seq.
    With `external_data` the weights go to `path` + ".data" (the returned proto then
    holds only references to them)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()  # the exporter would append to it
    torch.onnx.export(
        model,
        tuple(inputs.values()),
        str(path),
        input_names=list(inputs),
        output_names=output_names,
        dynamic_shapes={name: {1: "seq"} for name in inputs},
        dynamo=True,
        opset_version=OPSET,
        external_data=external_data,
        verbose=False,
    )
    return finish_export(path)


def finish_export(path: Path) -> onnx.ModelProto:
    """Makes the stack-trace paths of the exported `path` relative and checks it. Weights
    in external data stay where the exporter wrote them."""
    proto = onnx.load(str(path), load_external_data=False)
    relativize_paths(proto)
    onnx.save(proto, str(path))
    onnx.checker.check_model(str(path), full_check=True)
    return proto


def register_torchscript_fixes() -> None:
    """Symbolics the TorchScript exporter lacks (`aten::diff`) or gets wrong for bool
    input (`aten::cumsum`: ONNX CumSum takes no bool; torch sums bools as int64)."""
    import torch
    from torch.onnx import symbolic_helper as sh
    from torch.onnx._internal.torchscript_exporter import symbolic_opset11

    def const(g, v):
        return g.op("Constant", value_t=torch.tensor([v], dtype=torch.int64))

    @sh.parse_args("v", "i", "i", "v", "v")
    def diff(g, x, n, dim, prepend, append):
        if n != 1:
            raise NotImplementedError("diff with n != 1")
        parts = [t for t in (prepend, x, append) if not sh._is_none(t)]
        full = g.op("Concat", *parts, axis_i=dim) if len(parts) > 1 else x
        upper = g.op("Slice", full, const(g, 1), const(g, 2**62), const(g, dim))
        lower = g.op("Slice", full, const(g, 0), const(g, -1), const(g, dim))
        return g.op("Sub", upper, lower)

    def cumsum(g, x, dim, dtype=None):
        if sh._is_bool(x):
            x = g.op("Cast", x, to_i=onnx.TensorProto.INT64)
        return symbolic_opset11.cumsum(g, x, dim, dtype)

    torch.onnx.register_custom_op_symbolic("aten::diff", diff, 9)
    torch.onnx.register_custom_op_symbolic("aten::cumsum", cumsum, 11)


def export_torchscript(model, path: Path, input_ids) -> onnx.ModelProto:
    """TorchScript-exports `model` (input `input_ids`, dim 1 = seq; output `logits`)."""
    import torch

    register_torchscript_fixes()
    base = type(model)

    class LogitsOnly(base):  # same modules and names; forward without defaulted args
        def forward(self, input_ids):
            return base.forward(self, input_ids=input_ids).logits

    path.parent.mkdir(parents=True, exist_ok=True)
    model.__class__ = LogitsOnly
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "You are using the legacy TorchScript", DeprecationWarning)
            torch.onnx.export(
                model,
                (input_ids,),
                str(path),
                input_names=["input_ids"],
                output_names=["logits"],
                dynamic_axes={"input_ids": {1: "seq"}, "logits": {1: "seq"}},
                dynamo=False,
                opset_version=TORCHSCRIPT_OPSET,
                verbose=False,
            )
    finally:
        model.__class__ = base
    proto = onnx.load(str(path))
    onnx.checker.check_model(str(path), full_check=True)
    return proto


def check_against_torch(model, path: Path, vocab: int) -> float:
    """Max |onnxruntime - torch| of the logits for seq 5 and 11."""
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    gen = torch.Generator().manual_seed(SEED + 2)
    for seq in (5, 11):
        ids = torch.randint(0, vocab, (1, seq), generator=gen)
        with torch.no_grad():
            ref = model(input_ids=ids).logits.numpy()
        (got,) = sess.run(["logits"], {"input_ids": ids.numpy()})
        assert got.shape == ref.shape, (got.shape, ref.shape)
        worst = max(worst, float(np.abs(got - ref).max()))
    return worst


def make_decoder(name: str, out_dir: Path) -> Path:
    import torch

    torchscript = name.endswith(TORCHSCRIPT)
    model = build(name.removesuffix(TORCHSCRIPT) if torchscript else name)
    vocab = model.config.vocab_size
    path = out_dir / f"{name}.onnx"
    example = torch.randint(0, vocab, (1, 7), generator=torch.Generator().manual_seed(SEED))
    if torchscript:
        export_torchscript(model, path, example)
    else:
        export(model, path, {"input_ids": example}, ["logits"], name in EXTERNAL_DATA)
    diff = check_against_torch(model, path, vocab)
    assert diff < 1e-3, f"{name}: onnxruntime differs from torch by {diff}"
    print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1e6:.2f} MB, "
          f"max |ort - torch| = {diff:.2e}")
    return path


# ---------------------------------------------------------------- OPS.md

def op_counts(model: onnx.ModelProto) -> collections.Counter:
    """Op types (with domain prefix when not the default domain), counted over the
    main graph and any subgraphs / local functions."""
    counts: collections.Counter = collections.Counter()

    def walk(nodes):
        for node in nodes:
            default = node.domain in ("", "ai.onnx")
            counts[node.op_type if default else f"{node.domain}::{node.op_type}"] += 1
            for attr in node.attribute:
                if attr.g.node:
                    walk(attr.g.node)
                for g in attr.graphs:
                    walk(g.node)

    walk(model.graph.node)
    for fn in model.functions:
        walk(fn.node)
    return counts


def describe_io(values) -> str:
    def dims(vi):
        return ",".join(d.dim_param or str(d.dim_value) for d in vi.type.tensor_type.shape.dim)
    return ", ".join(
        f"`{vi.name}` {onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name}"
        f"[{dims(vi)}]" for vi in values)


def write_ops_md() -> Path:
    """Writes testdata/models/OPS.md from the .onnx files present (and the MiniLM skeleton)."""
    entries = [(p.stem, p, p.relative_to(ROOT)) for p in sorted(MODELS_DIR.glob("*.onnx"))]
    skeleton = SKELETON_DIR / "minilm.onnx"
    if skeleton.exists():
        entries.append(("minilm", skeleton, "testdata/generated/minilm.onnx"))
    models = {name: (onnx.load(str(p), load_external_data=False), where)
              for name, p, where in entries}
    counts = {name: op_counts(m) for name, (m, _) in models.items()}
    all_ops = sorted(set().union(*counts.values()))
    names = list(models)

    lines = [
        "# ONNX ops in the test models",
        "",
        "Generated by `python testdata/models/generate.py` (or `--ops-md`); do not edit by hand.",
        "Counts are nodes per op type (these exports have no subgraphs or local functions).",
        "All: eager attention, no KV cache, batch 1, `seq` dynamic; exported by PyTorch's",
        "dynamo exporter, or by its TorchScript exporter for the `_ts` models (whose counts",
        "include `Constant` nodes: that exporter writes small constants as nodes).",
        "minilm's graph is read from its committed skeleton (see minilm.py).",
        "",
        "| model | file | exporter | producer | opset | nodes | inputs | outputs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, (m, where) in models.items():
        opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in m.opset_import)
        exporter = "TorchScript" if name.endswith(TORCHSCRIPT) else "dynamo"
        lines.append(f"| {name} | `{where}` | {exporter} | {m.producer_name} {m.producer_version} | "
                     f"{opsets} | {sum(counts[name].values())} | "
                     f"{describe_io(m.graph.input)} | {describe_io(m.graph.output)} |")
    lines += ["", "| op | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for op in all_ops:
        lines.append(f"| {op} | " + " | ".join(str(counts[n].get(op, "")) for n in names) + " |")
    lines += ["", f"Distinct op types over all models: {len(all_ops)}.", ""]
    out = MODELS_DIR / "OPS.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out.relative_to(ROOT)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="model name (repeatable)")
    parser.add_argument("--large", nargs="?", const="llama_h512", choices=LARGE,
                        help="only write testdata/generated/NAME.onnx (git-ignored; "
                             "default llama_h512)")
    parser.add_argument("--ops-md", action="store_true", help="only rewrite OPS.md")
    args = parser.parse_args()

    if args.ops_md:
        write_ops_md()
        return
    # The exporter logs a warning per torchvision op it cannot register; not relevant here.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    if args.large:
        make_decoder(args.large, GENERATED_DIR)
        return
    for name in args.only or DECODERS + [d + TORCHSCRIPT for d in DECODERS]:
        make_decoder(name, MODELS_DIR)
    write_ops_md()


if __name__ == "__main__":
    sys.exit(main())
