"""Three models that testdata/ does not hold, for trying the golden workflow as a user.

    python testdata/models/trial_models.py OUT_DIR      # needs testdata/requirements-gen.txt

Writes OUT_DIR/<name>.onnx and OUT_DIR/<name>_inputs/<input>.npy for:

| name          | family  | differs from the committed families/ model                     |
| ---           | ---     | ---                                                            |
| gemma2_trial  | Gemma 2 | hidden 96, 6 heads over 2, 3 layers, window 6, softcaps 20/15  |
| qwen3_trial   | Qwen 3  | hidden 128, 8 heads over 2, 3 layers, tied, rope theta 1e6     |
| bert_trial    | BERT    | hidden 96, 6 heads, 3 layers, the last 3 of 10 tokens padding  |

Each is built from its config with seeded random weights (as families.py draws them),
exported the way a user exports it (dynamo, opset 18, transformers' default attention:
`sdpa`, or `eager` for Gemma 2, whose class has no SDPA path) and checked against torch
with onnxruntime (<= 1e-4 absolute). scripts/golden-trial runs the golden workflow on
them; docs/GOLDENS.md records its output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))
import families  # noqa: E402  (export helpers)

VOCAB = 384
SEED = 7


def configs():
    import transformers as T

    common = dict(vocab_size=VOCAB, max_position_embeddings=64, num_hidden_layers=3,
                  use_cache=False, initializer_range=0.1)
    return {
        "gemma2_trial": (T.Gemma2ForCausalLM, T.Gemma2Config(
            **common, hidden_size=96, num_attention_heads=6, num_key_value_heads=2,
            head_dim=16, intermediate_size=192, sliding_window=6, query_pre_attn_scalar=24,
            attn_logit_softcapping=20.0, final_logit_softcapping=15.0,
            attn_implementation="eager")),
        "qwen3_trial": (T.Qwen3ForCausalLM, T.Qwen3Config(
            **common, hidden_size=128, num_attention_heads=8, num_key_value_heads=2,
            head_dim=16, intermediate_size=256, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            attn_implementation="sdpa")),
        "bert_trial": (T.BertModel, T.BertConfig(
            vocab_size=VOCAB, hidden_size=96, num_hidden_layers=3, num_attention_heads=6,
            intermediate_size=192, max_position_embeddings=64, initializer_range=0.1,
            attn_implementation="sdpa")),
    }


def inputs(name: str, seq: int, seed: int) -> dict:
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (1, seq), generator=gen)
    if name.startswith("bert"):
        mask = torch.ones((1, seq), dtype=torch.int64)
        mask[:, seq - 3:] = 0  # padding at the end
        return {"input_ids": ids, "attention_mask": mask}
    return {"input_ids": ids}


def build(cls, cfg, encoder: bool):
    import torch

    torch.manual_seed(SEED)
    model = cls(cfg, add_pooling_layer=False) if encoder else cls(cfg)
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model.eval()


def main() -> None:
    import onnxruntime as ort
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, (cls, cfg) in configs().items():
        encoder = name.startswith("bert")
        model = build(cls, cfg, encoder)
        target = families.EncoderOutput.wrap(model) if encoder else model
        output = "last_hidden_state" if encoder else "logits"
        path = args.out / f"{name}.onnx"
        families.export_dynamo(target, path, inputs(name, 7, SEED), [output], 18)
        onnx.checker.check_model(str(path), full_check=True)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = inputs(name, 10 if encoder else 9, SEED + 2)
        with torch.no_grad():
            want = target(**feeds)
            want = (want if encoder else want.logits).numpy()
        (got,) = sess.run(None, {k: v.numpy() for k, v in feeds.items()})
        diff = float(np.abs(got - want).max())
        if diff > 1e-4:
            raise SystemExit(f"{path}: onnxruntime differs from torch by {diff:.3g}")
        folder = args.out / f"{name}_inputs"
        folder.mkdir(exist_ok=True)
        for k, v in feeds.items():
            np.save(folder / f"{k}.npy", v.numpy())
        print(f"{path}: {path.stat().st_size / 1e6:.2f} MB, max |ort - torch| = {diff:.2e}",
              flush=True)


if __name__ == "__main__":
    main()
