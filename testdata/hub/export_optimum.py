"""Tiny decoders exported the way Hugging Face Optimum exports them, with onnxruntime's
greedy tokens as the expected output.

    python testdata/hub/export_optimum.py        # testdata/hub/from_optimum/<family>[_past].onnx
                                          # + the optimum entries of testdata/hub/expected.json

For each family (llama, qwen2, phi3) the model of testdata/models/generate.py's `build`
(same config, seed and weights) is saved as a transformers checkpoint with its default
attention (`sdpa`) and `use_cache=True`, then exported by Optimum's own exporter, as
`optimum-cli export onnx --model DIR --task T OUT` does:

    <family>.onnx       task text-generation            inputs input_ids, attention_mask,
                                                        position_ids; output logits
    <family>_past.onnx  task text-generation-with-past  plus past_key_values.N.key/value
                                                        in, present.N.key/value out

(opset 18 as Optimum chose it, symbolic `batch_size`, `sequence_length`,
`past_sequence_length`, and the dim_param `past_sequence_length + sequence_length`.)

The expected tokens are onnxruntime's greedy decoding of PROMPT for NEW_TOKENS tokens,
feeding what Optimum's ORTModelForCausalLM feeds: an all-ones attention_mask and the
positions `past .. past + seq - 1`; with past, the prompt first (past of length 0), then
one token per step with the previous step's present as past; without past, the whole
sequence again every step.

Optimum pins an older transformers than testdata/requirements-gen.txt, so it runs in a
venv of its own (testdata/hub/requirements-optimum.txt says how to make it).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAMILIES = ["llama", "qwen2", "phi3"]
PROMPT = [1, 5, 7, 9, 11, 13, 17, 19]
NEW_TOKENS = 32
EXPECTED = HERE / "expected.json"


def load_generate():
    spec = importlib.util.spec_from_file_location("generate", ROOT / "testdata/models/generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def export(family: str, work: Path) -> dict[str, Path]:
    import torch
    from optimum.exporters.onnx import main_export

    model = load_generate().build(family)
    model.config.use_cache = True
    model.config._attn_implementation = "sdpa"
    ckpt = work / family
    model.save_pretrained(ckpt)
    out = {}
    for task, suffix in [("text-generation", ""), ("text-generation-with-past", "_past")]:
        dest = work / f"{family}{suffix}"
        with torch.no_grad():
            main_export(str(ckpt), output=str(dest), task=task, opset=None, device="cpu")
        out[f"{family}{suffix}"] = dest / "model.onnx"
    return out


def greedy(path: Path, prompt: list[int], new_tokens: int) -> list[int]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    past_inputs = [i for i in sess.get_inputs() if i.name.startswith("past_key_values.")]
    with_past = bool(past_inputs)
    tokens = list(prompt)
    past = {
        i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32) for i in past_inputs
    }
    out = []
    feed_ids = tokens
    for _ in range(new_tokens):
        n_past = len(tokens) - len(feed_ids) if with_past else 0
        ids = np.array([feed_ids], np.int64)
        feeds = {"input_ids": ids}
        if "attention_mask" in names:
            feeds["attention_mask"] = np.ones((1, n_past + ids.shape[1]), np.int64)
        if "position_ids" in names:
            feeds["position_ids"] = np.arange(n_past, n_past + ids.shape[1], dtype=np.int64)[None]
        feeds.update(past)
        results = sess.run(None, feeds)
        logits = results[0]
        nxt = int(np.argmax(logits[0, -1]))
        out.append(nxt)
        tokens.append(nxt)
        if with_past:
            outs = [o.name for o in sess.get_outputs()]
            past = {
                name.replace("present.", "past_key_values."): value
                for name, value in zip(outs, results)
                if name.startswith("present.")
            }
            feed_ids = [nxt]
        else:
            feed_ids = tokens
    return out


def main() -> None:
    dest = HERE / "from_optimum"
    dest.mkdir(exist_ok=True)
    expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in FAMILIES:
            for name, path in export(family, Path(tmp)).items():
                target = dest / f"{name}.onnx"
                shutil.copyfile(path, target)
                tokens = greedy(target, PROMPT, NEW_TOKENS)
                expected[f"from_optimum/{name}.onnx"] = {"prompt": PROMPT, "tokens": tokens}
                print(f"{target.relative_to(ROOT)}: {target.stat().st_size} bytes, {tokens}")
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    sys.exit(main())
