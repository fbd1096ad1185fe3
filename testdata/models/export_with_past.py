"""The tiny decoders exported with past key values, for token-by-token decoding.

Writes, from the repository root (needs the pins in testdata/requirements-gen.txt):

    python testdata/models/export_with_past.py           # testdata/models/past/<model>_past.onnx
                                                          # for llama, qwen2, phi3, gpt2
    python testdata/models/export_with_past.py --only gpt2
    python testdata/models/export_with_past.py --large   # testdata/generated/llama_h512_past.onnx
    python testdata/models/export_with_past.py --large llama_1b   # generated/llama_1b_past.onnx
                                                                   # (+ .onnx.data, 4.4 GB)

Each model is rebuilt by testdata/models/generate.py's `build` (same configs, seeds and
weights as testdata/models/<model>.onnx; `--large`: the hidden-512 Llama of
`generate.py --large`, 80 MB; `--large llama_1b`: the TinyLlama-1.1B-shaped Llama of
`generate.py --large llama_1b`) and exported by the dynamo exporter
(`torch.onnx.export(..., dynamo=True, opset_version=18)`, weights embedded, or for
llama_1b in `llama_1b_past.onnx.data` beside the graph; the
stack-trace paths made relative as in generate.py) through a thin wrapper module whose
`forward(input_ids, *past)` takes the past keys and values as plain tensors, fills a
transformers `DynamicCache` with them, runs the model with `use_cache=True` and returns
the logits and the cache's tensors. Inputs and outputs (L layers, batch 1):

    input_ids                   int64   [1, seq]
    past_key_values.{i}.key     float32 [1, kv_heads, past, head_dim]     i = 0 .. L-1
    past_key_values.{i}.value   float32 [1, kv_heads, past, head_dim]
    logits                      float32 [1, seq, vocab]
    present.{i}.key             float32 [1, kv_heads, past + seq, head_dim]
    present.{i}.value           float32 [1, kv_heads, past + seq, head_dim]

(inputs in that order: input_ids, then key and value of layer 0, of layer 1, ...; outputs
likewise). `seq` and `past` are dynamic; `present` is the past with the new tokens' keys
and values appended, ready to be fed back as the next step's past. No `attention_mask` or
`position_ids` input: the positions are `past .. past + seq - 1` and the causal mask is
built inside the graph, as in the no-cache exports. The first step (prefill) feeds the
prompt with past tensors of length 0. past + seq must stay within
`max_position_embeddings` (128 for the tiny models, whose gpt2 has a learned position
table of 128 rows; 512 for llama_h512 and llama_1b).

    model              layers  kv_heads  head_dim  vocab
    llama, qwen2, phi3      2         2        16    512
    gpt2                    2         4        16    512   (no GQA: kv_heads = heads)
    llama_h512              4         4        64   8000
    llama_1b               22         4        64  32000   (TinyLlama-1.1B's shape)

The tiny models' files (0.76-0.93 MB each) are committed in testdata/models/past/
(`slmcc generate` accepts this form: compiler/tests/generate.rs); not in
testdata/models/ itself, whose `*.onnx` the scripts that glob that folder (goldens.py,
OPS.md) take as `input_ids`-only models. llama_h512_past.onnx (80 MB) and
llama_1b_past.onnx go to the git-ignored testdata/generated/ (benchmark inputs).

Check, for every file: a prompt (the prompt of goldens/<model>/generate/ when present,
else 7 ids from `numpy.random.default_rng(0)`) is prefilled with past length 0 and 16
tokens are then decoded one at a time by onnxruntime (greedy, each step feeding back the
`present` outputs); the logits of all 7 + 16 positions must match, within 1e-4 relative
(max|a - b| / max(max|b|, 1e-6)), PyTorch without cache on the whole sequence and
onnxruntime running the no-cache export (testdata/models/<model>.onnx;
testdata/generated/llama_h512.onnx if present), with graph optimizations off and on;
with the generation golden present, the 17 tokens chosen and the logits they were
chosen from must be its first 17 steps.

Reruns give the same bytes. The exporter's stack-trace metadata records the line of the
wrapper's `forward` in this file, so moving that line changes the bytes (not the graph).
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))
import generate  # noqa: E402  (build(), relativize_paths(), DECODERS, paths)

ROOT = generate.ROOT
GOLDENS_DIR = ROOT / "goldens"
OPSET = generate.OPSET
DECODE_STEPS = 16
MAX_REL = 1e-4



PAST_DIR = generate.MODELS_DIR / "past"

def wrapper(model):
    """`forward(input_ids, k0, v0, k1, v1, ...) -> (logits, k0', v0', k1', v1', ...)`."""
    import torch
    from transformers.cache_utils import DynamicCache

    class WithPast(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, *past):
            cache = DynamicCache(config=self.model.config)
            for i, layer in enumerate(cache.layers):
                layer.update(past[2 * i], past[2 * i + 1])
            out = self.model(input_ids=input_ids, cache=cache, use_cache=True)
            present = [t for layer in out.cache.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    return WithPast(model).eval()


def shapes(model) -> tuple[int, int, int]:
    """(layers, kv heads, head dim)."""
    c = model.config
    heads = c.num_attention_heads
    kv = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return c.num_hidden_layers, kv, head_dim


def io_names(layers: int) -> tuple[list[str], list[str]]:
    kv = [(i, k) for i in range(layers) for k in ("key", "value")]
    return (["input_ids"] + [f"past_key_values.{i}.{k}" for i, k in kv],
            ["logits"] + [f"present.{i}.{k}" for i, k in kv])


def export(model, path: Path, external_data: bool) -> onnx.ModelProto:
    import torch

    layers, kv, head_dim = shapes(model)
    inputs, outputs = io_names(layers)
    gen = torch.Generator().manual_seed(generate.SEED)
    # seq 2 and past 3 as examples: neither 0 nor 1, which the exporter would specialize.
    ids = torch.randint(0, model.config.vocab_size, (1, 2), generator=gen)
    past = tuple(torch.randn(1, kv, 3, head_dim, generator=gen) for _ in range(2 * layers))
    path.parent.mkdir(parents=True, exist_ok=True)
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()  # the exporter would append to it
    with warnings.catch_warnings():
        # every past input shares the axis "past": the exporter says it names it once
        warnings.filterwarnings("ignore", "# The axis name")
        torch.onnx.export(
            wrapper(model),
            (ids, *past),
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_shapes=({1: "seq"}, tuple({2: "past"} for _ in past)),
            dynamo=True,
            opset_version=OPSET,
            external_data=external_data,
            verbose=False,
        )
    return generate.finish_export(path)


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-6))


def session(path: Path, optimized: bool):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def decode(path: Path, prompt: np.ndarray, layers: int, kv: int, head_dim: int,
           optimized: bool) -> tuple[np.ndarray, np.ndarray]:
    """Prefill `prompt` (past length 0), then DECODE_STEPS greedy steps of one token.
    Returns (sequence fed [1, P + steps], logits of every fed position [P + steps, vocab])."""
    sess = session(path, optimized)
    inputs, outputs = io_names(layers)
    past = {n: np.zeros((1, kv, 0, head_dim), np.float32) for n in inputs[1:]}
    ids, logits = prompt, []
    for step in range(DECODE_STEPS + 1):
        feed = prompt if step == 0 else ids[:, -1:]
        out = dict(zip(outputs, sess.run(outputs, {"input_ids": feed, **past})))
        for name in outputs[1:]:
            assert out[name].shape == (1, kv, ids.shape[1], head_dim), (name, out[name].shape)
        logits.append(out["logits"][0])
        past = {i: out[o] for i, o in zip(inputs[1:], outputs[1:])}
        if step < DECODE_STEPS:
            ids = np.concatenate([ids, [[out["logits"][0, -1].argmax()]]], axis=1)
    return ids, np.concatenate(logits)


def check(name: str, model, path: Path, nocache: Path) -> dict:
    import torch

    layers, kv, head_dim = shapes(model)
    golden = GOLDENS_DIR / name / "generate"
    if (golden / "prompt_ids.npy").exists():
        prompt = np.load(golden / "prompt_ids.npy")
    else:
        prompt = np.random.default_rng(0).integers(0, model.config.vocab_size, (1, 7), dtype=np.int64)
    errors = {}
    for optimized in (False, True):
        ids, got = decode(path, prompt, layers, kv, head_dim, optimized)
        with torch.no_grad():
            ref = model(input_ids=torch.from_numpy(ids)).logits[0].numpy()
        refs = {"torch": ref}
        if nocache.exists():
            (logits,) = session(nocache, False).run(["logits"], {"input_ids": ids})
            refs[str(nocache.relative_to(ROOT))] = logits[0]
        if (golden / "logits.npy").exists():  # from the last prompt position on
            refs["golden logits"] = np.load(golden / "logits.npy")[:DECODE_STEPS + 1]
        level = "ORT_ENABLE_ALL" if optimized else "ORT_DISABLE_ALL"
        for ref_name, r in refs.items():
            err = rel_error(got[-len(r):], r)
            assert err <= MAX_REL, f"{name} ({level}): cached decode vs {ref_name}: rel error {err}"
            errors[f"{level} vs {ref_name}"] = err
        if (golden / "tokens.npy").exists():
            want = np.load(golden / "tokens.npy")[:DECODE_STEPS + 1]
            chosen = np.append(ids[0, prompt.shape[1]:], got[-1].argmax())
            assert np.array_equal(chosen, want), f"{name}: decoded {chosen}, golden {want}"
            errors[f"{level} tokens == golden[:{DECODE_STEPS + 1}]"] = True
    return errors


def make(name: str) -> Path:
    model = generate.build(name)
    large = name in generate.LARGE
    out_dir = generate.GENERATED_DIR if large else PAST_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}_past.onnx"
    proto = export(model, path, name in generate.EXTERNAL_DATA)
    where = generate.GENERATED_DIR if large else generate.MODELS_DIR
    errors = check(name, model, path, where / f"{name}.onnx")
    print(f"{path.relative_to(ROOT)}: {path.stat().st_size / 1e6:.2f} MB, "
          f"{len(proto.graph.node)} nodes; prefill + {DECODE_STEPS} steps of 1 token:")
    for what, err in errors.items():
        print(f"  {what}: {err if isinstance(err, bool) else f'max rel {err:.2e}'}")
    return path


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=generate.DECODERS,
                        help="model name (repeatable)")
    parser.add_argument("--large", nargs="?", const="llama_h512", choices=generate.LARGE,
                        help="only write testdata/generated/NAME_past.onnx (default llama_h512)")
    args = parser.parse_args()
    # The exporter logs a warning per torchvision op it cannot register; not relevant here.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    for name in [args.large] if args.large else args.only or generate.DECODERS:
        make(name)


if __name__ == "__main__":
    main()
