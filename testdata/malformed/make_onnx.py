"""Writes the ONNX inputs of testdata/malformed/ that `slmcc import` must
reject (exit code 2, one line naming the file, node and reason), and one
valid model with external data that it must accept. Checked by
compiler/tests/import.rs.

Made with onnx==1.16.2 and numpy==1.26.4, the versions pinned in
testdata/requirements-ci.txt (any venv outside the repository):

    python3 -m venv /tmp/venv-ci
    /tmp/venv-ci/bin/pip install onnx==1.16.2 numpy==1.26.4
    /tmp/venv-ci/bin/python testdata/malformed/make_onnx.py

The checker is deliberately not run: these models are wrong on purpose.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def model(nodes, initializers=(), opset=17, inputs=None, outputs=None):
    """A small model: x f32[1, seq, 4] -> y f32[1, seq, 4]."""
    inputs = inputs or [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 4])
    ]
    outputs = outputs or [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 4])
    ]
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="slmcc make_onnx.py",
    )
    m.ir_version = 8
    return m


def weight(name="w"):
    return helper.make_tensor(
        name, TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).flatten()
    )


def external(name, location, offset=None, length=None):
    """An f32[4, 4] initializer whose bytes live in another file."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend([4, 4])
    t.data_location = TensorProto.EXTERNAL
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    for k, v in entries:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def matmul(name="mm"):
    return helper.make_node("MatMul", ["x", "w"], ["y"], name=name)


def save(name, m):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(m.SerializeToString())


def main():
    valid = model([matmul()], [weight()]).SerializeToString()
    with open(os.path.join(HERE, "truncated.onnx"), "wb") as f:
        f.write(valid[: len(valid) // 2])

    save(
        "missing_external_data.onnx",
        model([matmul()], [external("w", "missing_weights.bin")]),
    )
    save(
        "external_data_escape.onnx",
        model([matmul()], [external("w", "../../etc/passwd")]),
    )

    short = TensorProto()
    short.name = "w"
    short.data_type = TensorProto.FLOAT
    short.dims.extend([4, 4])
    short.raw_data = np.zeros(2, dtype=np.float32).tobytes()
    save("initializer_size_mismatch.onnx", model([matmul()], [short]))

    # `a` uses `b`, which the node after it computes from `a`.
    save(
        "cycle.onnx",
        model(
            [
                helper.make_node("Add", ["x", "b"], ["a"], name="add_a"),
                helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
                helper.make_node("Identity", ["b"], ["y"], name="out"),
            ]
        ),
    )
    save(
        "unknown_op.onnx",
        model([helper.make_node("Frobnicate", ["x"], ["y"], name="frob")]),
    )
    save(
        "bad_opset.onnx",
        model([helper.make_node("Relu", ["x"], ["y"], name="relu")], opset=7),
    )

    # A valid model whose weight sits at offset 16 of external_data.bin.
    data = b"slmcc-test-pad\0\0" + (np.arange(16, dtype=np.float32) / 8).tobytes()
    with open(os.path.join(HERE, "external_data.bin"), "wb") as f:
        f.write(data)
    save(
        "external_data.onnx",
        model([matmul()], [external("w", "external_data.bin", 16, 64)]),
    )


if __name__ == "__main__":
    main()
