"""Half-precision exports: decoders cast to float16 before export, as users ship them.

Makes, from the repository root (needs the pins in testdata/requirements-gen.txt):

    python testdata/models/half.py

For each family in FAMILIES (testdata/models/families.py builds it: same config, seed
and weights as the float32 variants) the model is cast with `.half()` and exported with
transformers' default attention (sdpa) by the dynamo exporter at opset 18 into
`testdata/models/half/<family>_f16.onnx`. Next to it, the references that
compiler/tests/half.rs compares against, all from onnxruntime on that file:

- `<family>_f16.ids.npy`: a 45-token prompt (int64 [1, 45]);
- `<family>_f16.logits.npy`: onnxruntime's float16 logits for it;
- `<family>_f16.greedy.npy`: onnxruntime's greedy continuation (16 ids), each step the
  argmax of the last row, the model re-run on the grown prompt (no cache).

The float16 model is checked against PyTorch's float16 forward (<= 2e-2 absolute on
logits of magnitude about 3; both round every op to float16, in different orders).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))
import families  # noqa: E402

FAMILIES = ["llama3", "qwen2"]
HALF_DIR = families.generate.MODELS_DIR / "half"
PROMPT = 45
NEW_TOKENS = 16
MAX_ABS_DIFF = 2e-2


def make(name: str) -> None:
    import onnxruntime as ort
    import torch

    model = families.build(name, "sdpa").half()
    path = HALF_DIR / f"{name}_f16.onnx"
    families.export_dynamo(model, path, families.example_inputs(name, 7, families.SEED),
                           ["logits"], 18)
    onnx.checker.check_model(str(path), full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    ids = families.example_inputs(name, PROMPT, families.SEED + 3)["input_ids"]
    (logits,) = sess.run(None, {"input_ids": ids.numpy()})
    assert logits.dtype == np.float16, logits.dtype
    with torch.no_grad():
        ref = model(input_ids=ids).logits.float().numpy()
    diff = float(np.abs(logits.astype(np.float32) - ref).max())
    if diff > MAX_ABS_DIFF:
        raise RuntimeError(f"{name}: onnxruntime differs from torch by {diff:.3g}")

    seq = ids.numpy()
    greedy = []
    for _ in range(NEW_TOKENS):
        (out,) = sess.run(None, {"input_ids": seq})
        nxt = int(out[0, -1].astype(np.float32).argmax())
        greedy.append(nxt)
        seq = np.concatenate([seq, [[nxt]]], axis=1)

    stem = HALF_DIR / f"{name}_f16"
    np.save(f"{stem}.ids.npy", ids.numpy())
    np.save(f"{stem}.logits.npy", logits)
    np.save(f"{stem}.greedy.npy", np.array(greedy, dtype=np.int64))
    print(f"{path.relative_to(families.ROOT)}: {path.stat().st_size} bytes, "
          f"|onnxruntime - torch| <= {diff:.3g}, greedy {greedy}")


def main() -> None:
    for name in FAMILIES:
        make(name)


if __name__ == "__main__":
    main()
