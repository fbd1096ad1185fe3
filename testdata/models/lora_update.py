"""A LoRA-merged fine-tune of an ONNX decoder, for the delta-update tests.

What: PEFT's `merge_and_unload` leaves W + (alpha / r) * B @ A in each adapted
linear layer. This writes that model for an ONNX decoder exported by PyTorch
(either exporter), without torch or peft: a rank-`r` update, seeded, on the
attention projections q, k, v and o, found by what they are in the graph (the
2-D MatMul weights of shape [hidden, n] with n <= hidden: the MLP's are wider
or narrower than hidden on one side, the LM head is [hidden, vocab]), since the
dynamo exporter names them `val_N`. A's entries are N(0, 1/sqrt(hidden)),
B's N(0, `--b-std`): a small update, as a fine-tune's is.

How (from the repository root; onnx + numpy only, the CI venv suffices):

    python testdata/models/lora_update.py IN.onnx OUT.onnx [--rank 16] [--alpha 32] [--seed 1]

A model with external data (`IN.onnx.data`, as testdata/models/qwen2_1p5b.py
writes) is copied with its data file and updated in place in the copy, one
tensor at a time; an inline one is rewritten whole. Prints how many weights
and parameters the update touched.
"""
import argparse
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def main():
    p = argparse.ArgumentParser()
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--b-std", type=float, default=1e-3)
    a = p.parse_args()
    model = onnx.load(a.input, load_external_data=False)
    g = model.graph
    embed = [i for i in g.initializer if len(i.dims) == 2 and i.name.endswith("embed_tokens.weight")]
    hidden = embed[0].dims[1] if embed else None
    matmul_b = {n.input[1] for n in g.node if n.op_type == "MatMul"}
    targets = [
        i for i in g.initializer
        if i.name in matmul_b and len(i.dims) == 2 and i.dims[0] == hidden and i.dims[1] <= hidden
    ]
    if not targets:
        sys.exit(f"{a.input}: no attention projections found (hidden {hidden})")
    rng = np.random.default_rng(a.seed)
    in_dir, out_dir = os.path.dirname(os.path.abspath(a.input)), os.path.dirname(os.path.abspath(a.output))
    os.makedirs(out_dir, exist_ok=True)
    copied = {}
    params = 0
    for t in targets:
        k, n = t.dims
        lora_a = rng.normal(0, 1 / np.sqrt(k), (k, a.rank)).astype(np.float32)
        lora_b = rng.normal(0, a.b_std, (a.rank, n)).astype(np.float32)
        delta = (a.alpha / a.rank) * (lora_a @ lora_b)
        params += k * n
        if t.data_location == onnx.TensorProto.EXTERNAL:
            info = {e.key: e.value for e in t.external_data}
            loc = info["location"]
            if loc not in copied:
                shutil.copyfile(os.path.join(in_dir, loc), os.path.join(out_dir, loc))
                copied[loc] = np.memmap(os.path.join(out_dir, loc), dtype=np.uint8, mode="r+")
            data = copied[loc]
            off = int(info.get("offset", 0))
            w = data[off:off + k * n * 4].view(np.float32).reshape(k, n)
            w += delta
        else:
            w = numpy_helper.to_array(t).astype(np.float32) + delta
            t.CopyFrom(numpy_helper.from_array(w, t.name))
    for m in copied.values():
        m.flush()
    onnx.save(model, a.output)
    print(f"updated {len(targets)} weights, {params} parameters, rank {a.rank}", file=sys.stderr)


if __name__ == "__main__":
    main()
