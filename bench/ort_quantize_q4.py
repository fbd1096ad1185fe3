"""onnxruntime's own 4-bit weight quantization of a model: every MatMul by a constant
weight becomes a ``com.microsoft.MatMulNBits`` (symmetric, blocks of ``--block-size``
along K), made by onnxruntime's ``MatMulNBitsQuantizer`` with its defaults otherwise.

The 4-bit peer of the decode benchmark (``compiler/examples/decode_bench.rs`` runs it
once per model and caches the result)::

    target/pyenv/bin/python bench/ort_quantize_q4.py --model M_past.onnx --out M_past_q4.onnx

A model whose weights are in external data is written the same way
(``--out`` + ``.data`` beside it).

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

    graph_only = onnx.load(a.model, load_external_data=False)
    external = any(t.data_location == onnx.TensorProto.EXTERNAL
                   for t in graph_only.graph.initializer)
    del graph_only
    model = onnx.load(a.model)
    q = MatMulNBitsQuantizer(model, block_size=a.block_size, is_symmetric=True)
    q.process()
    out = q.model.model
    n = sum(1 for node in out.graph.node if node.op_type == "MatMulNBits")
    if n == 0:
        sys.exit(f"ort_quantize_q4.py: {a.model}: no MatMul was quantized")
    tmp = a.out + ".tmp"
    if external:
        # Weights beside the graph, as in the input: the unquantized embedding and
        # norms may still pass protobuf's 2 GB limit. The data file is named after
        # the final path; onnx appends to an existing one, so it goes first.
        data = os.path.basename(a.out) + ".data"
        data_path = os.path.join(os.path.dirname(os.path.abspath(a.out)), data)
        if os.path.exists(data_path):
            os.remove(data_path)
        onnx.save(out, tmp, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=data, size_threshold=1024)
    else:
        onnx.save(out, tmp)
    os.replace(tmp, a.out)
    print(json.dumps({"onnxruntime": onnxruntime.__version__, "block_size": a.block_size,
                      "matmulnbits": n}))


if __name__ == "__main__":
    main()
