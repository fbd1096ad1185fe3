"""The onnxruntime side of `slmcc golden record` (embedded in slmcc, run with
the Python that --python names; needs onnx, onnxruntime and numpy).

    python -c SCRIPT MODEL CASE_DIR REQUEST_JSON

REQUEST_JSON: {"inputs": {NAME: FILE.npy}, "values": [NAME, ...]}. The
values that are float32 outputs of the model's nodes (or graph outputs) are
added as graph outputs of an in-memory copy, which onnxruntime runs (CPU
execution provider, ORT_DISABLE_ALL, one thread), so that every value is
the unfused reference. Each is written as CASE_DIR/vNNNN.npy; stdout gets
{"onnxruntime": VERSION, "values": [[NAME, FILE, SHAPE], ...]} in request
order, and {"error": MESSAGE} on failure (exit 1).
"""
import json
import sys


def fail(message):
    print(json.dumps({"error": message}))
    sys.exit(1)


try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:
    fail(f"{e} (golden record needs onnx, onnxruntime and numpy: pip install -r testdata/requirements-ci.txt)")

model_path, case_dir, request_path = sys.argv[1:4]
with open(request_path) as f:
    request = json.load(f)
try:
    model = onnx.load(model_path)
except Exception as e:  # noqa: BLE001 - any load failure is the user's file
    fail(f"onnx cannot load the model: {e}")

produced = {o for n in model.graph.node for o in n.output} | {o.name for o in model.graph.output}
known = {vi.name: vi for vi in [*model.graph.value_info, *model.graph.output]}
if any(v in produced and v not in known for v in request["values"]):
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        known.update({vi.name: vi for vi in inferred.graph.value_info})
    except Exception:  # noqa: BLE001 - types stay unknown, the value is skipped
        pass
FLOAT = onnx.TensorProto.FLOAT
wanted = [v for v in request["values"]
          if v in produced and v in known and known[v].type.tensor_type.elem_type == FLOAT]
present = {o.name for o in model.graph.output}
for v in wanted:
    if v not in present:
        model.graph.output.append(onnx.helper.make_tensor_value_info(v, FLOAT, None))
        present.add(v)

opts = ort.SessionOptions()
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
opts.intra_op_num_threads = 1
opts.inter_op_num_threads = 1
try:
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feeds = {name: np.load(path) for name, path in request["inputs"].items()}
    results = session.run(wanted, feeds)
except Exception as e:  # noqa: BLE001 - onnxruntime's message names the problem
    fail(f"onnxruntime: {e}")

values = []
for i, (name, value) in enumerate(zip(wanted, results)):
    file = f"v{i:04}.npy"
    np.save(f"{case_dir}/{file}", np.ascontiguousarray(value, dtype=np.float32))
    values.append([name, file, list(value.shape)])
print(json.dumps({"onnxruntime": ort.__version__, "values": values}))
