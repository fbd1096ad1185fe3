"""onnxruntime's own 4-bit weight quantization of a model: every MatMul by a constant
weight becomes a ``com.microsoft.MatMulNBits`` (symmetric, blocks of ``--block-size``
along K), made by onnxruntime's ``MatMulNBitsQuantizer`` with its defaults otherwise.

The 4-bit peer of the decode benchmark (``compiler/examples/decode_bench.rs`` runs it
once per model and caches the result)::

    target/pyenv/bin/python bench/ort_quantize_q4.py --model M_past.onnx --out M_past_q4.onnx

Prints one JSON line: the onnxruntime version, the block size and how many MatMuls
became MatMulNBits.
"""

import argparse
import json
import os
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--block-size", type=int, default=32)
    a = p.parse_args()
    import onnx
    import onnxruntime
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(a.model)
    q = MatMulNBitsQuantizer(model, block_size=a.block_size, is_symmetric=True)
    q.process()
    out = q.model.model
    n = sum(1 for node in out.graph.node if node.op_type == "MatMulNBits")
    if n == 0:
        sys.exit(f"ort_quantize_q4.py: {a.model}: no MatMul was quantized")
    tmp = a.out + ".tmp"
    onnx.save(out, tmp)
    os.replace(tmp, a.out)
    print(json.dumps({"onnxruntime": onnxruntime.__version__, "block_size": a.block_size,
                      "matmulnbits": n}))


if __name__ == "__main__":
    main()
