"""Greedy-generation goldens from PyTorch for the tiny decoder models.

Writes, from the repository root (needs the pins in testdata/requirements-gen.txt):

    python testdata/models/generate_goldens.py             # llama, qwen2, phi3, gpt2
    python testdata/models/generate_goldens.py --only gpt2
    python testdata/models/generate_goldens.py --families [--family gemma2]

With --families, one golden per decoder family of testdata/models/families/ (families.py)
goes to `goldens/families/<family>/generate/`, checked against every variant written
(attention implementations and exporters); the model runs with transformers' default
attention (`sdpa`, or `eager` where the family has no SDPA path: Gemma 2).

Each model is rebuilt exactly as testdata/models/generate.py builds it (its `build`:
same configs, seeds and weight init), then `model.generate` runs greedily (FP32, eager
attention, `do_sample=False`) with the KV cache (`use_cache=True`: transformers'
`DynamicCache`; the configs say `use_cache=False` only for the export) and without an
end-of-sequence token (`eos_token_id=None`), so exactly 64 tokens are generated from a
7-token prompt of seeded random ids (`numpy.random.default_rng(seed).integers(0, vocab)`).

The prompt seed is the first of 0, 1, 2, ... whose generation has no near-tie: its
smallest top-1/top-2 logit gap over the 64 steps, relative to max|logits| of the whole
tensor, is at least MIN_GAP_REL (1e-3), ten times the tolerance, so an error within the
tolerance cannot flip a token. With the pinned versions: llama 0, qwen2 4 (seeds 0-3 have
a gap < 1e-3), phi3 0, gpt2 1 (seed 0: 5.1e-4). generate.json records the seed and the
seeds passed over.

For each model, `goldens/<model>/generate/` is rewritten with:

* `prompt_ids.npy`: int64 [1, 7], the prompt;
* `tokens.npy`: int64 [64], the generated ids;
* `logits.npy`: float32 [64, vocab], step i's logits (`output_logits=True`: the raw
  logits of the last position, from which `tokens[i] = argmax(logits[i])` was chosen;
  step i's input is the prompt followed by `tokens[:i]`);
* `generate.json`: the models the golden belongs to (the dynamo export and its `_ts`
  twin, which share the weights) with their sha256, the generation settings, the
  tolerance, the relative-error measure of the other manifests, the smallest top-1/top-2
  logit gap and the onnxruntime check below.

Checks (the script fails if one does not hold):

* `argmax(logits[i]) == tokens[i]` and the logits equal the processed scores (no logits
  processor is active);
* each ONNX file (`testdata/models/<model>.onnx` and `<model>_ts.onnx`), run by
  onnxruntime (CPU, ORT_DISABLE_ALL, 1 thread) without cache on the whole sequence
  `prompt + tokens[:i]` for every step i, gives the golden's logits of that step (last
  position) within `logits_max_rel` and the same argmax: the golden belongs to the
  committed files;

torch runs with one thread so that reruns give the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import families  # noqa: E402  (the family models: build(), FAMILIES, VARIANTS)
import generate  # noqa: E402  (build(), DECODERS, TORCHSCRIPT)

ROOT = generate.ROOT
MODELS_DIR = generate.MODELS_DIR
GOLDENS_DIR = ROOT / "goldens"
MAX_SEEDS = 32  # prompt seeds tried
PROMPT_LEN = 7
NEW_TOKENS = 64
MAX_REL = 1e-4
MIN_GAP_REL = 1e-3
REL_ERROR = "max|a - b| / max(max|b|, 1e-6) over the whole tensor, b = golden"


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-6))


def greedy(model, prompt: np.ndarray):
    """(tokens int64 [64], logits float32 [64, vocab]) of transformers' greedy generate."""
    import torch

    ids = torch.from_numpy(prompt)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=0,
            output_logits=True,
            output_scores=True,
            return_dict_in_generate=True,
        )
    tokens = out.sequences[0, prompt.shape[1]:].numpy().astype(np.int64)
    logits = torch.cat(out.logits).numpy().astype(np.float32)
    scores = torch.cat(out.scores).numpy()
    assert tokens.shape == (NEW_TOKENS,), tokens.shape
    assert logits.shape == (NEW_TOKENS, model.config.vocab_size), logits.shape
    assert np.array_equal(logits, scores), "a logits processor changed the scores"
    assert np.array_equal(logits.argmax(-1), tokens), "greedy token is not the argmax"
    return tokens, logits


def top2_gap(logits: np.ndarray) -> dict:
    """Smallest top-1 minus top-2 logit over the steps, absolute and relative to
    max|logits| over the whole tensor (the denominator of the relative error)."""
    top = np.sort(logits, axis=-1)[:, -2:]
    gaps = top[:, 1] - top[:, 0]
    step = int(gaps.argmin())
    scale = max(float(np.abs(logits).max()), 1e-6)
    return {"step": step, "abs": float(f"{gaps[step]:.4g}"),
            "rel": float(f"{gaps[step] / scale:.4g}")}


def ort_check(path: Path, prompt: np.ndarray, tokens: np.ndarray, logits: np.ndarray) -> dict:
    """Runs `path` without cache on prompt + tokens[:i] for every step i and compares the
    last position's logits with the golden's step i."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    got = np.empty_like(logits)
    for i in range(NEW_TOKENS):
        seq = np.concatenate([prompt, tokens[None, :i]], axis=1)
        (out,) = sess.run(["logits"], {"input_ids": seq})
        got[i] = out[0, -1]
    per_step = max(rel_error(got[i], logits[i]) for i in range(NEW_TOKENS))
    return {"max_rel": rel_error(got, logits), "max_rel_per_step": per_step,
            "argmax_equal": bool(np.array_equal(got.argmax(-1), tokens))}


def to_json(obj, indent: int = 0) -> str:
    """JSON indented by one space per level, with every list or object that holds only
    numbers, strings and lists of those on one line."""
    def scalar(x):
        return not isinstance(x, (dict, list))

    def flat(v):
        return all(scalar(x) or (isinstance(x, list) and all(map(scalar, x)))
                   for x in (v.values() if isinstance(v, dict) else v))

    if isinstance(obj, (dict, list)) and obj and not flat(obj):
        pad = " " * (indent + 1)
        if isinstance(obj, dict):
            items = [f"{pad}{json.dumps(k)}: {to_json(v, indent + 1)}" for k, v in obj.items()]
            return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
        items = [pad + to_json(v, indent + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(obj)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_golden(name: str) -> int:
    """The golden of a model of testdata/models/ and its TorchScript twin."""
    paths = [MODELS_DIR / f"{name}.onnx", MODELS_DIR / f"{name}{generate.TORCHSCRIPT}.onnx"]
    note = (f"{name}{generate.TORCHSCRIPT}.onnx is the TorchScript export of the same "
            f"model (same weights) as {name}.onnx: the golden applies to both")
    return write_model_golden(name, generate.build(name), "eager", paths, note,
                              GOLDENS_DIR / name / "generate")


def write_family_golden(family: str) -> int:
    """The golden of a family of testdata/models/families/: every variant written."""
    attn = "eager" if family in families.SDPA_UNSUPPORTED else "sdpa"
    paths = [families.FAMILIES_DIR / f"{families.file_name(family, v)}.onnx"
             for v in families.VARIANTS]
    paths = [p for p in paths if p.exists()]
    note = (f"the variants of {family} (attention implementations and exporters) compute "
            "the same model (same config, seed and weights): the golden applies to all")
    return write_model_golden(family, families.build(family, attn), attn, paths, note,
                              GOLDENS_DIR / "families" / family / "generate")


def write_model_golden(name: str, model, attn: str, paths: list[Path], note: str,
                       out_dir: Path) -> int:
    import torch
    import transformers

    vocab = model.config.vocab_size
    passed_over = []
    for seed in range(MAX_SEEDS):
        prompt = np.random.default_rng(seed).integers(0, vocab, (1, PROMPT_LEN), dtype=np.int64)
        tokens, logits = greedy(model, prompt)
        gap = top2_gap(logits)
        if gap["rel"] >= MIN_GAP_REL:
            break
        passed_over.append({"seed": seed, "min_top2_gap_rel": gap["rel"]})
    else:
        raise SystemExit(f"{name}: every prompt seed < {MAX_SEEDS} has a top-2 gap < {MIN_GAP_REL}")

    # The cached generation against PyTorch without cache, for information.
    with torch.no_grad():
        full = torch.from_numpy(np.concatenate([prompt, tokens[None, :-1]], axis=1))
        nocache = model(input_ids=full).logits[0, PROMPT_LEN - 1:].numpy()
    torch_rel = rel_error(nocache, logits)

    checks = {}
    for path in paths:
        c = ort_check(path, prompt, tokens, logits)
        rel = str(path.relative_to(ROOT))
        if c["max_rel"] > MAX_REL or not c["argmax_equal"]:
            raise SystemExit(f"{name}: {rel} does not reproduce the golden: {c}")
        checks[rel] = {"max_rel": float(f"{c['max_rel']:.3g}"),
                       "max_rel_per_step": float(f"{c['max_rel_per_step']:.3g}"),
                       "argmax_equal": c["argmax_equal"]}

    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    np.save(out_dir / "prompt_ids.npy", prompt)
    np.save(out_dir / "tokens.npy", tokens)
    np.save(out_dir / "logits.npy", logits)
    manifest = {
        "models": [str(p.relative_to(ROOT)) for p in paths],
        "model_sha256": {str(p.relative_to(ROOT)): sha256(p) for p in paths},
        "models_note": note,
        "source": f"transformers {transformers.__version__} generate, greedy, "
                  f"torch {torch.__version__.split('+')[0]}",
        "generation": {
            "max_new_tokens": NEW_TOKENS, "do_sample": False, "use_cache": True,
            "cache": "DynamicCache", "eos_token_id": None, "dtype": "float32",
            "attn_implementation": attn,
        },
        "prompt": f"numpy.random.default_rng({seed}).integers(0, {vocab}, (1, {PROMPT_LEN}))",
        "prompt_seed": seed,
        "prompt_seeds_passed_over": {
            "why": f"smallest top-2 gap below {MIN_GAP_REL} relative (near-tie)",
            "seeds": passed_over,
        },
        "files": {
            "prompt_ids": {"file": "prompt_ids.npy", "dtype": "int64", "shape": list(prompt.shape)},
            "tokens": {"file": "tokens.npy", "dtype": "int64", "shape": list(tokens.shape)},
            "logits": {"file": "logits.npy", "dtype": "float32", "shape": list(logits.shape)},
        },
        "steps": "step i feeds prompt_ids + tokens[:i]; logits[i] are the logits of its last "
                 "position and tokens[i] = argmax(logits[i])",
        "relative_error": REL_ERROR,
        "tolerance": {"logits_max_rel": MAX_REL},
        "min_top2_gap": {**gap, "measure": "min over steps of top1 - top2; rel: divided by "
                                           "max|logits| over the whole tensor"},
        "torch_no_cache_rel_error": float(f"{torch_rel:.3g}"),
        "onnxruntime_no_cache": {
            "run": "CPUExecutionProvider, ORT_DISABLE_ALL, 1 thread; prompt + tokens[:i] "
                   "per step, logits of the last position",
            **checks,
        },
    }
    (out_dir / "generate.json").write_text(to_json(manifest) + "\n")
    total = sum(f.stat().st_size for f in out_dir.iterdir())
    worst = max(c["max_rel"] for c in checks.values())
    print(f"{out_dir.relative_to(ROOT)}: {total / 1e3:.0f} kB, prompt seed {seed}, "
          f"min top-2 gap {gap['abs']:.4g} ({gap['rel']:.3g} rel, step {gap['step']}), "
          f"onnxruntime max rel {worst:.2e}, torch no-cache rel {torch_rel:.2e}")
    return total


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    decoders = [f for f in families.FAMILIES if f not in families.ENCODERS]
    parser.add_argument("--only", action="append", choices=generate.DECODERS,
                        help="model name (repeatable)")
    parser.add_argument("--families", action="store_true",
                        help="the families of testdata/models/families/ instead")
    parser.add_argument("--family", action="append", choices=decoders,
                        help="with --families: one family (repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.families:
        for family in args.family or decoders:
            write_family_golden(family)
        return
    for name in args.only or generate.DECODERS:
        write_golden(name)


if __name__ == "__main__":
    main()
