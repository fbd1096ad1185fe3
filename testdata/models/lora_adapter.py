"""A seeded PEFT LoRA adapter for an ONNX decoder, without torch or peft.

What: an adapter folder as PEFT's `save_pretrained` writes it (adapter_config.json,
adapter_model.safetensors with `base_model.model.<module>.lora_A.weight` [r, in] and
`lora_B.weight` [out, r]), of rank `--rank` on the attention projections q, k, v and o,
for `slmcc compile --lora` (the delta-update benchmark, scripts/bench-delta, makes a
fine-tune of the Qwen2-1.5B-shaped decoder with it). The modules are found as slmcc
finds them: the MatMul nodes whose scope (the dynamo exporter's
`pkg.torch.onnx.name_scopes` metadata, or a TorchScript node name
`/model/layers.0/self_attn/q_proj/MatMul`) ends in `q_proj`, `k_proj`, `v_proj` or
`o_proj`, with a rank-2 initializer as the weight ([in, out]). A's entries are
N(0, 1/in), B's N(0, `--b-std`^2): a small update, as a fine-tune's is (PEFT itself
starts B at zero).

How (from the repository root; onnx + numpy only, the CI venv suffices):

    python testdata/models/lora_adapter.py MODEL.onnx OUT_DIR [--rank 16] [--alpha 32]
        [--seed 1] [--b-std 1e-3]

Prints how many modules and parameters the adapter changes.
"""
import argparse
import ast
import json
import os
import sys

import numpy as np
import onnx

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def module_of(node) -> str | None:
    meta = {p.key: p.value for p in node.metadata_props}
    if "pkg.torch.onnx.name_scopes" in meta and "pkg.torch.onnx.class_hierarchy" in meta:
        scopes = ast.literal_eval(meta["pkg.torch.onnx.name_scopes"])
        classes = ast.literal_eval(meta["pkg.torch.onnx.class_hierarchy"])
        for scope, cls in reversed(list(zip(scopes, classes))):
            if not cls.startswith(("aten.", "prims.")):
                return scope or None
        return None
    if node.name.startswith("/") and node.name.count("/") >= 2:
        return node.name[1:].rsplit("/", 1)[0].replace("/", ".")
    return None


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    header, offset = {}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for t in tensors.values():
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("out_dir")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--b-std", type=float, default=1e-3)
    a = p.parse_args()
    g = onnx.load(a.model, load_external_data=False).graph
    dims = {i.name: list(i.dims) for i in g.initializer if len(i.dims) == 2}
    rng = np.random.default_rng(a.seed)
    tensors, params = {}, 0
    for n in g.node:
        module = module_of(n) if n.op_type == "MatMul" else None
        if module is None or module.rsplit(".", 1)[-1] not in TARGETS or n.input[1] not in dims:
            continue
        k, m = dims[n.input[1]]  # [in, out]
        key = f"base_model.model.{module}"
        tensors[f"{key}.lora_A.weight"] = rng.normal(0, 1 / np.sqrt(k), (a.rank, k)).astype(np.float32)
        tensors[f"{key}.lora_B.weight"] = rng.normal(0, a.b_std, (m, a.rank)).astype(np.float32)
        params += k * m
    if not tensors:
        sys.exit(f"{a.model}: no attention projections with module scopes found")
    os.makedirs(a.out_dir, exist_ok=True)
    write_safetensors(os.path.join(a.out_dir, "adapter_model.safetensors"), tensors)
    config = {"peft_type": "LORA", "r": a.rank, "lora_alpha": a.alpha,
              "target_modules": list(TARGETS), "use_rslora": False, "use_dora": False,
              "bias": "none", "fan_in_fan_out": False}
    with open(os.path.join(a.out_dir, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"adapter for {len(tensors) // 2} modules, {params} parameters, rank {a.rank}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
