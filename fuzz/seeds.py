"""Seed corpora of the fuzz targets, from testdata/ (run by scripts/fuzz).

    seeds.py OUT_DIR [ONNX_NODE_TESTS_DIR]

Writes OUT_DIR/<target>/<name> for every target, in the input format each
target's doc describes (a mode byte first where it takes one; the parts of
a multi-file input joined by the separator of fuzz/src/lib.rs). Packages
are compiled by scripts/fuzz from OUT_DIR/package-models/*.onnx, which this
writes: a tiny two-layer MLP over a `seq` axis, small enough that the
package target runs thousands of times a second.
"""
import glob
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SEP = b"\n--slmcc-fuzz-part--\n"
out = sys.argv[1]
node_tests = sys.argv[2] if len(sys.argv) > 2 else None


def put(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def rel(*parts):
    return os.path.join(ROOT, *parts)


# onnx_import: the malformed models, the external-data case with its data,
# the MiniLM skeleton, and the ONNX backend tests' node models when present.
for p in sorted(glob.glob(rel("testdata/malformed/*.onnx"))):
    put("onnx_import", os.path.basename(p), read(p))
put("onnx_import", "external_data_with_data",
    read(rel("testdata/malformed/external_data.onnx")) + SEP
    + read(rel("testdata/malformed/external_data.bin")))
put("onnx_import", "minilm_skeleton.onnx", read(rel("testdata/models/skeletons/minilm.onnx")))
if node_tests:
    for p in sorted(glob.glob(os.path.join(node_tests, "*/model.onnx")))[::4]:
        put("onnx_import", os.path.basename(os.path.dirname(p)) + ".onnx", read(p))

# ir_text and passes: every committed IR file.
for p in sorted(glob.glob(rel("**/*.slm"), recursive=True)):
    if "/target/" in p:
        continue
    for target in ("ir_text", "passes"):
        put(target, p[len(ROOT) + 1:].replace("/", "_"), read(p))

# npu_regcmd: the public generator's command lists (testdata/npu), as bytes.
base = {}
for line in open(rel("testdata/npu/regcmd_mtx512.txt")):
    if line.startswith("#") or not line.strip():
        continue
    head, sep, rest = line.partition(" = ") if " = " in line else line.partition(" : ")
    prec, m, k, n = head.split()
    if sep == " = ":
        words = [int(w, 16) for w in rest.split()]
        base[prec] = words
    else:
        words = list(base[prec])
        for item in rest.split():
            i, w = item.split(":")
            words[int(i)] = int(w, 16)
    put("npu_regcmd", f"{prec}_{m}_{k}_{n}", b"".join(w.to_bytes(8, "little") for w in words))

# tensor_readers: mode 0 + .npy (the goldens' inputs and small outputs),
# mode 1 + TensorProto (the node tests' inputs), and one with external data.
for p in sorted(glob.glob(rel("goldens/*/*/*.npy")))[:40]:
    if os.path.getsize(p) <= 4096:
        put("tensor_readers", "npy_" + p.split("goldens/")[1].replace("/", "_"), b"\0" + read(p))
t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "x")
put("tensor_readers", "pb_x", b"\1" + t.SerializeToString())
ext = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "x")
ext.ClearField("raw_data")
ext.data_location = TensorProto.EXTERNAL
for k, v in (("location", "data.bin"), ("offset", "0"), ("length", "24")):
    ext.external_data.add(key=k, value=v)
put("tensor_readers", "pb_external", b"\1" + ext.SerializeToString() + SEP
    + np.arange(6, dtype=np.float32).tobytes())
if node_tests:
    for p in sorted(glob.glob(os.path.join(node_tests, "*/test_data_set_0/input_0.pb")))[::8]:
        put("tensor_readers", "pb_" + p.split("/")[-3], b"\1" + read(p))

# tokenizer: mode 0 + prompts (lines of the held-out text, non-ASCII,
# empty), mode 1 + the committed tokenizer.json files.
lines = [l for l in open(rel("testdata/models/trained/heldout.txt"), encoding="utf-8") if l.strip()]
for i, l in enumerate(lines[:20]):
    put("tokenizer", f"text_{i}", b"\0" + l.encode())
put("tokenizer", "text_unicode", "\0déjà vu — 東京 🙂 \t\r\n".encode())
put("tokenizer", "text_empty", b"\0")
for p in sorted(glob.glob(rel("testdata/**/tokenizer*.json"), recursive=True)) + \
        sorted(glob.glob(rel("testdata/tokenizers/*.json"))):
    put("tokenizer", "json_" + os.path.basename(os.path.dirname(p)) + "_" + os.path.basename(p),
        b"\1" + read(p))

# package-models: the tiny MLP scripts/fuzz compiles into package seeds.
rng = np.random.default_rng(0)
w1 = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) * 0.1, "w1")
w2 = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32) * 0.1, "w2")
g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w1"], ["h"]),
     helper.make_node("Relu", ["h"], ["r"]),
     helper.make_node("MatMul", ["r", "w2"], ["y"])],
    "tiny_mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 32])],
    [w1, w2])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
os.makedirs(os.path.join(out, "package-models"), exist_ok=True)
onnx.save(m, os.path.join(out, "package-models", "tiny_mlp.onnx"))
