"""Today's model families, exported the way users export them.

Makes, from the repository root (needs the pins in testdata/requirements-gen.txt):

    python testdata/models/families.py                     # every family x variant
    python testdata/models/families.py --only gemma2       # one family (repeatable)
    python testdata/models/families.py --only gemma2 --variant sdpa

Each family is a `transformers` model class built from a small config (no downloads:
hidden 64, vocab 512, 2 layers, random weights drawn as testdata/models/generate.py
draws them) that keeps the family's distinguishing features: grouped or single KV
heads, QK-norm, partial rotary, rope scaling, soft-capping, sliding-window layers,
parallel attention + MLP, pre- and post-norms, scalar multipliers, tied embeddings,
QKV biases. Every family is exported in these variants, into
`testdata/models/families/<family>[_<variant>].onnx`:

| variant  | attention                     | exporter                          |
| ---      | ---                           | ---                               |
| (none)   | `sdpa` (transformers' default) | dynamo, opset 18                  |
| `eager`  | `eager`                       | dynamo, opset 18                  |
| `ts`     | `sdpa`                        | TorchScript, opset 17             |
| `eager_ts` | `eager`                     | TorchScript, opset 17             |
| `op23`   | `sdpa`                        | dynamo, opset 23                  |

Decoders take `input_ids` (int64 [1, seq]) and give `logits`; the encoder (`bert`)
takes `input_ids` and `attention_mask` and gives `last_hidden_state`. A variant that
torch cannot export is recorded with the exporter's error in
`testdata/models/families/EXPORTS.md` (which also lists what was written) instead of
failing the run. Every file written is checked with onnx.checker and against PyTorch
with onnxruntime for two lengths (<= 1e-4 absolute), and its size is printed. The dynamo
exports keep their node metadata but the Python stack traces (see `strip_stack_traces`).

The variants of one family compute the same function (same config, seed and weights),
so one greedy-generation golden per family serves them all
(generate_goldens.py --families).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
import warnings
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))
import generate  # noqa: E402  (export helpers shared with the original test models)

ROOT = generate.ROOT
FAMILIES_DIR = generate.MODELS_DIR / "families"
SEED = 0
VOCAB = 512
MAX_ABS_DIFF = 1e-4

# Shared by the decoder configs.
COMMON = dict(
    vocab_size=VOCAB,
    max_position_embeddings=128,
    num_hidden_layers=2,
    use_cache=False,
    initializer_range=0.1,
)

# variant -> (attention implementation, exporter, opset)
VARIANTS = {
    "sdpa": ("sdpa", "dynamo", 18),
    "eager": ("eager", "dynamo", 18),
    "ts": ("sdpa", "torchscript", 17),
    "eager_ts": ("eager", "torchscript", 17),
    "op23": ("sdpa", "dynamo", 23),
}


def family_config(name: str, attn: str):
    """(model class, config) of family `name` with attention implementation `attn`."""
    import transformers as T

    c = dict(COMMON, attn_implementation=attn)
    gqa = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               intermediate_size=128)
    if name == "llama3":  # GQA, untied, llama3 rope scaling
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32}
        return T.LlamaForCausalLM, T.LlamaConfig(**gqa, **c, tie_word_embeddings=False,
                                                 rope_parameters=rope)
    if name == "llama3_mha":  # MHA, tied embeddings, linear rope scaling
        rope = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
        cfg = dict(gqa, num_key_value_heads=4)
        return T.LlamaForCausalLM, T.LlamaConfig(**cfg, **c, tie_word_embeddings=True,
                                                 rope_parameters=rope)
    if name == "smollm2":  # Llama architecture, tied, 6 heads over 2 KV heads (groups of 3)
        cfg = dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                   intermediate_size=128)
        return T.LlamaForCausalLM, T.LlamaConfig(**cfg, **c, tie_word_embeddings=True)
    if name == "qwen2":  # MQA (1 KV head), QKV bias, tied
        cfg = dict(gqa, num_key_value_heads=1)
        return T.Qwen2ForCausalLM, T.Qwen2Config(**cfg, **c, tie_word_embeddings=True)
    if name == "qwen3":  # QK-norm (per-head RMSNorm on q and k)
        return T.Qwen3ForCausalLM, T.Qwen3Config(**gqa, **c, tie_word_embeddings=False)
    if name == "mistral":  # sliding window on every layer
        return T.MistralForCausalLM, T.MistralConfig(**gqa, **c, sliding_window=8,
                                                     tie_word_embeddings=False)
    if name == "gemma":  # GeGLU (tanh), RMSNorm (1 + w), embedding scaling, MQA, tied
        cfg = dict(gqa, num_key_value_heads=1)
        return T.GemmaForCausalLM, T.GemmaConfig(**cfg, **c, hidden_activation="gelu_pytorch_tanh")
    if name == "gemma2":  # soft-capping, alternating sliding/global, pre+post norms
        return T.Gemma2ForCausalLM, T.Gemma2Config(
            **gqa, **c, sliding_window=8, query_pre_attn_scalar=16,
            attn_logit_softcapping=5.0, final_logit_softcapping=8.0)
    if name == "phi3":  # fused qkv and gate_up projections
        return T.Phi3ForCausalLM, T.Phi3Config(**gqa, **c, pad_token_id=0, bos_token_id=1,
                                               eos_token_id=2, tie_word_embeddings=False)
    if name == "phi2":  # parallel attention + MLP, one LayerNorm with bias, partial rotary
        cfg = dict(gqa, num_key_value_heads=4)
        return T.PhiForCausalLM, T.PhiConfig(**cfg, **c, hidden_act="gelu_new",
                                             rope_parameters={"rope_type": "default",
                                                              "rope_theta": 10000.0,
                                                              "partial_rotary_factor": 0.5})
    if name == "stablelm":  # partial rotary (0.25), LayerNorm with bias, QKV bias
        cfg = dict(gqa, num_key_value_heads=4)
        return T.StableLmForCausalLM, T.StableLmConfig(
            **cfg, **c, use_qkv_bias=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.25})
    if name == "olmo2":  # QK-norm over the whole projection, post-norms only
        return T.Olmo2ForCausalLM, T.Olmo2Config(**gqa, **c, tie_word_embeddings=False)
    if name == "granite":  # scalar multipliers on embeddings, residuals, attention, logits
        return T.GraniteForCausalLM, T.GraniteConfig(
            **gqa, **c, embedding_multiplier=4.0, residual_multiplier=0.5,
            attention_multiplier=0.125, logits_scaling=2.0, tie_word_embeddings=False)
    if name == "gpt2":  # LayerNorm, gelu_new, learned positions, Conv1D
        return T.GPT2LMHeadModel, T.GPT2Config(
            vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4, n_inner=128,
            activation_function="gelu_new", tie_word_embeddings=False, use_cache=False,
            initializer_range=0.1, bos_token_id=1, eos_token_id=2, attn_implementation=attn)
    if name == "bert":  # bidirectional encoder with a padding mask
        return T.BertModel, T.BertConfig(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=128, initializer_range=0.1,
            attn_implementation=attn)
    raise SystemExit(f"unknown family {name}")


FAMILIES = ["llama3", "llama3_mha", "smollm2", "qwen2", "qwen3", "mistral", "gemma", "gemma2",
            "phi3", "phi2", "stablelm", "olmo2", "granite", "gpt2", "bert"]
ENCODERS = {"bert"}
# Families whose transformers class has no SDPA path (Gemma 2's soft-capping): their
# default attention is eager, and their sdpa variants are recorded as not exported.
SDPA_UNSUPPORTED = {"gemma2"}


def build(name: str, attn: str = "sdpa"):
    """Family `name` with seeded random weights, in eval mode."""
    import torch

    cls, cfg = family_config(name, attn)
    torch.manual_seed(SEED)
    model = cls(cfg) if name not in ENCODERS else cls(cfg, add_pooling_layer=False)
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model.eval()


def file_name(family: str, variant: str) -> str:
    return family if variant == "sdpa" else f"{family}_{variant}"


class EncoderOutput:
    """`forward(input_ids, attention_mask) -> last_hidden_state` for the exporters."""

    @staticmethod
    def wrap(model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                return self.model(input_ids=input_ids,
                                  attention_mask=attention_mask).last_hidden_state

        return Wrapped().eval()


def example_inputs(name: str, seq: int, seed: int) -> dict:
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (1, seq), generator=gen)
    if name in ENCODERS:
        mask = torch.ones((1, seq), dtype=torch.int64)
        mask[:, seq - 2:] = 0  # padding at the end
        return {"input_ids": ids, "attention_mask": mask}
    return {"input_ids": ids}


def export_dynamo(model, path: Path, inputs: dict, outputs: list[str], opset: int):
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model, tuple(inputs.values()), str(path),
        input_names=list(inputs), output_names=outputs,
        dynamic_shapes={n: {1: "seq"} for n in inputs},
        dynamo=True, opset_version=opset, external_data=False, verbose=False,
    )
    proto = onnx.load(str(path))
    strip_stack_traces(proto)
    onnx.save(proto, str(path))


def strip_stack_traces(model: onnx.ModelProto) -> None:
    """Drops the dynamo exporter's per-node Python stack traces (a quarter of a small
    model's bytes, and paths of the machine that exported it); the module scopes
    (`pkg.torch.onnx.name_scopes`) and the rest of the metadata stay."""
    for node in model.graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)


def export_torchscript(model, path: Path, inputs: dict, outputs: list[str], opset: int):
    """TorchScript export with testdata/models/generate.py's fixes (`aten::diff`,
    bool `cumsum`) and forward narrowed to the inputs (decoders: `input_ids -> logits`)."""
    import torch

    generate.register_torchscript_fixes()
    path.parent.mkdir(parents=True, exist_ok=True)
    axes = {n: {1: "seq"} for n in list(inputs) + outputs}
    target, restore = model, None
    if "attention_mask" not in inputs:
        base = type(model)

        class LogitsOnly(base):  # same modules and names; forward without defaulted args
            def forward(self, input_ids):
                return base.forward(self, input_ids=input_ids).logits

        model.__class__ = LogitsOnly
        restore = base
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            torch.onnx.export(target, tuple(inputs.values()), str(path),
                              input_names=list(inputs), output_names=outputs,
                              dynamic_axes=axes, dynamo=False, opset_version=opset,
                              verbose=False)
    finally:
        if restore is not None:
            model.__class__ = restore


def check_against_torch(name: str, model, path: Path) -> float:
    """Max |onnxruntime - torch| of the output for two lengths."""
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for seq in (5, 11):
        inputs = example_inputs(name, seq, SEED + 2 + seq)
        with torch.no_grad():
            ref = model(**inputs)
            ref = (ref.last_hidden_state if name in ENCODERS else ref.logits).numpy()
        (got,) = sess.run(None, {k: v.numpy() for k, v in inputs.items()})
        assert got.shape == ref.shape, (got.shape, ref.shape)
        worst = max(worst, float(np.abs(got - ref).max()))
    return worst


def make(name: str, variant: str) -> dict:
    """Exports one variant; returns its record for EXPORTS.md."""
    attn, exporter, opset = VARIANTS[variant]
    path = FAMILIES_DIR / f"{file_name(name, variant)}.onnx"
    record = {"family": name, "variant": variant, "attention": attn, "exporter": exporter,
              "opset": opset, "file": str(path.relative_to(ROOT))}
    try:
        model = build(name, attn)
        inputs = example_inputs(name, 7, SEED)
        outputs = ["last_hidden_state"] if name in ENCODERS else ["logits"]
        target = EncoderOutput.wrap(model) if name in ENCODERS else model
        if exporter == "dynamo":
            export_dynamo(target, path, inputs, outputs, opset)
        else:
            export_torchscript(target, path, inputs, outputs, opset)
        onnx.checker.check_model(str(path), full_check=True)
        diff = check_against_torch(name, model, path)
        if diff > MAX_ABS_DIFF:
            raise RuntimeError(f"onnxruntime differs from torch by {diff:.3g}")
        record.update(ok=True, bytes=path.stat().st_size, max_abs_diff=float(f"{diff:.3g}"))
        print(f"{record['file']}: {path.stat().st_size / 1e6:.2f} MB, "
              f"max |ort - torch| = {diff:.2e}", flush=True)
    except Exception as e:  # noqa: BLE001  (the exporter's error is the record)
        path.unlink(missing_ok=True)
        lines = [l for l in traceback.format_exception_only(type(e), e)[-1].splitlines() if l]
        record.update(ok=False, error=(lines[0] if lines else type(e).__name__)[:300])
        print(f"{record['file']}: FAILED: {record['error']}", flush=True)
    return record


def write_exports_md(records: list[dict]) -> None:
    """EXPORTS.md from the records of this run merged with the previous run's."""
    state = FAMILIES_DIR / "exports.json"
    old = json.loads(state.read_text()) if state.exists() else []
    key = lambda r: (r["family"], r["variant"])  # noqa: E731
    merged = {key(r): r for r in old}
    merged.update({key(r): r for r in records})
    order = {(f, v): (i, j) for i, f in enumerate(FAMILIES) for j, v in enumerate(VARIANTS)}
    rows = sorted(merged.values(), key=lambda r: order.get(key(r), (99, 99)))
    state.write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# Family exports",
        "",
        "Written by `python testdata/models/families.py`; do not edit by hand.",
        "One row per family x variant: the file, or the exporter's error when torch could",
        "not export that variant.",
        "",
        "| family | variant | attention | exporter | opset | result |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r["ok"]:
            res = (f"`{Path(r['file']).name}` ({r['bytes'] / 1e3:.0f} kB, "
                   f"max abs diff to torch {r['max_abs_diff']:.1e})")
        else:
            res = "not exported: " + r["error"].replace("|", "\\|")
        lines.append(f"| {r['family']} | {r['variant']} | {r['attention']} | {r['exporter']} | "
                     f"{r['opset']} | {res} |")
    (FAMILIES_DIR / "EXPORTS.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=FAMILIES, help="family (repeatable)")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS),
                        help="variant (repeatable)")
    args = parser.parse_args()
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(1)
    records = [make(f, v) for f in (args.only or FAMILIES) for v in (args.variant or VARIANTS)]
    write_exports_md(records)
    failed = [r for r in records if not r["ok"]]
    print(f"{len(records) - len(failed)} exported, {len(failed)} not exported")


if __name__ == "__main__":
    main()
