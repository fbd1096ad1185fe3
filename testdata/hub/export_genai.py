"""Tiny decoders as onnxruntime-genai's model builder writes them, with
onnxruntime-genai's greedy tokens as the expected output.

    python testdata/hub/export_genai.py   # testdata/hub/from_genai/<family>_<precision>/
                                          # + the from_genai entries of testdata/hub/expected.json

For each family (llama, qwen2, phi3) the model of testdata/models/generate.py's `build`
(same config, seed and weights) is saved as a transformers checkpoint, with the tiny BPE
tokenizer of testdata/tokenizers (the builder insists on one), and converted as
`python -m onnxruntime_genai.models.builder -i DIR -o OUT -p PRECISION -e cpu` does, for
the precisions fp32 and int4 (MatMulNBits, 4 bits, blocks of 32, no zero points). Each
output folder keeps the builder's model.onnx, model.onnx.data and genai_config.json
(opset 22 plus com.microsoft: GroupQueryAttention with packed QKV and rotary caches,
SkipSimplifiedLayerNormalization, MatMulNBits; inputs input_ids, attention_mask and
past_key_values.N.key/value with the head size declared as the symbol `kv_cache_dim`).

The expected tokens are onnxruntime-genai's greedy search over PROMPT for NEW_TOKENS
tokens, run on a copy whose genai_config.json names no end-of-sequence token (so that
token neither ends the search nor is masked out of it) and whose MatMulNBits have
`accuracy_level` 0: the activations stay float32, as slmcc keeps them at every level.
The builder writes level 4 for the CPU, where onnxruntime quantizes the activations to
int8 in blocks; for int4 models those tokens are recorded too, as `tokens_as_built`,
and each int4 folder keeps onnxruntime's logits for the prompt (empty past) at level 0
and as built (`logits_level0.npy`, `logits_as_built.npy`).

The builder needs onnx-ir, which it does not declare, and a transformers that knows
the families: it runs in a venv with testdata/hub/requirements-genai.txt next to the
pins of testdata/requirements-gen.txt.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAMILIES = ["llama", "qwen2", "phi3"]
PRECISIONS = ["fp32", "int4"]
PROMPT = [1, 5, 7, 9, 11, 13, 17, 19]
NEW_TOKENS = 32
HEAD_SIZE = 16  # of every family's config in testdata/models/generate.py
EXPECTED = HERE / "expected.json"
KEEP = ["model.onnx", "model.onnx.data", "genai_config.json"]
TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "pad_token": "<pad>",
    "model_max_length": 128,
}


def checkpoint(family: str, work: Path) -> Path:
    spec = importlib.util.spec_from_file_location("generate", ROOT / "testdata/models/generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    model = gen.build(family)
    model.config.use_cache = True
    if family == "phi3":
        # Phi-3-mini's own setting (4096 = 4096); the builder takes any other value for the
        # LongRoPE variant, which needs rope scaling factors this model does not have.
        model.config.original_max_position_embeddings = model.config.max_position_embeddings
    ckpt = work / family
    model.save_pretrained(ckpt)
    shutil.copyfile(ROOT / "testdata/tokenizers/tiny-bpe.json", ckpt / "tokenizer.json")
    (ckpt / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG))
    return ckpt


def build(ckpt: Path, precision: str, out: Path, cache: Path) -> None:
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt),
           "-o", str(out), "-p", precision, "-e", "cpu", "-c", str(cache)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def copy_at_level(folder: Path, run: Path, level: int | None) -> None:
    """`folder` copied to `run`, its genai_config naming no end-of-sequence token (the
    search neither stops at it nor, as `min_length` would, masks it out of the argmax),
    and its MatMulNBits at accuracy `level` (None: as built)."""
    import onnx

    shutil.copytree(folder, run)
    config = json.loads((run / "genai_config.json").read_text())
    config["model"]["eos_token_id"] = []
    (run / "genai_config.json").write_text(json.dumps(config))
    if level is not None:
        model = onnx.load(run / "model.onnx", load_external_data=False)
        for node in model.graph.node:
            for a in node.attribute:
                if node.op_type == "MatMulNBits" and a.name == "accuracy_level":
                    a.i = level
        onnx.save(model, run / "model.onnx")


def prefill_logits(folder: Path, prompt: list[int], level: int | None) -> np.ndarray:
    """onnxruntime's logits for the prompt with an empty past."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / folder.name
        copy_at_level(folder, run, level)
        sess = ort.InferenceSession(str(run / "model.onnx"), providers=["CPUExecutionProvider"])
        ids = np.array([prompt], np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        for i in sess.get_inputs():
            if i.name.startswith("past_key_values."):
                feeds[i.name] = np.zeros((1, i.shape[1], 0, HEAD_SIZE), np.float32)
        return sess.run(["logits"], feeds)[0]


def greedy(folder: Path, prompt: list[int], new_tokens: int, level: int | None) -> list[int]:
    import onnxruntime_genai as og

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / folder.name
        copy_at_level(folder, run, level)
        model = og.Model(str(run))
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + new_tokens)
        generator = og.Generator(model, params)
        generator.append_tokens(prompt)
        while not generator.is_done():
            generator.generate_next_token()
        return [int(t) for t in generator.get_sequence(0)[len(prompt):]]


def main() -> None:
    dest = HERE / "from_genai"
    dest.mkdir(exist_ok=True)
    expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for family in FAMILIES:
            ckpt = checkpoint(family, tmp)
            for precision in PRECISIONS:
                name = f"{family}_{precision}"
                out = tmp / name
                build(ckpt, precision, out, tmp / "cache")
                target = dest / name
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir()
                for f in KEEP:
                    shutil.copyfile(out / f, target / f)
                tokens = greedy(target, PROMPT, NEW_TOKENS, level=0)
                entry = {"prompt": PROMPT, "tokens": tokens}
                if precision == "int4":
                    entry["tokens_as_built"] = greedy(target, PROMPT, NEW_TOKENS, level=None)
                    for level, f in [(0, "logits_level0.npy"), (None, "logits_as_built.npy")]:
                        np.save(target / f, prefill_logits(target, PROMPT, level))
                expected[f"from_genai/{name}/model.onnx"] = entry
                size = sum(f.stat().st_size for f in target.iterdir())
                print(f"{target.relative_to(ROOT)}: {size} bytes, {tokens}")
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main())
