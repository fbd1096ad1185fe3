"""Node tests for onnxruntime's contrib ops that slmcc imports, in the ONNX
backend test layout (NAME/model.onnx, NAME/test_data_set_0/input_N.pb and
output_N.pb), with onnxruntime's outputs as the expected ones.

    python testdata/contrib/generate.py [OUT]   (default: testdata/contrib/node_tests)

Needs only the CI packages (testdata/requirements-ci.txt: onnx, onnxruntime,
numpy). Deterministic (fixed seeds); `slmcc onnx-test --manifest
testdata/contrib/manifest.txt testdata/contrib/node_tests` runs them, and
compiler/tests/contrib.rs does so on every backend.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
MS = "com.microsoft"


def case(out: Path, name: str, nodes, inputs, outputs, feeds, opsets=((MS, 1),)):
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip(inputs, feeds)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
    )
    imports = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, v) for d, v in opsets]
    model = helper.make_model(graph, opset_imports=imports, producer_name="slmcc-contrib-tests")
    model.ir_version = 8
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    got = sess.run(outputs, dict(zip(inputs, feeds)))
    d = out / name
    data = d / "test_data_set_0"
    data.mkdir(parents=True)
    onnx.save(model, d / "model.onnx")
    for i, (n, a) in enumerate(zip(inputs, feeds)):
        (data / f"input_{i}.pb").write_bytes(numpy_helper.from_array(a, n).SerializeToString())
    for i, (n, a) in enumerate(zip(outputs, got)):
        (data / f"output_{i}.pb").write_bytes(numpy_helper.from_array(a, n).SerializeToString())
    return name


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "node_tests"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    names = []
    # SimplifiedLayerNormalization: onnxruntime registers it in the default
    # domain (the genai builder writes it there).
    for shape, eps, axis in [((2, 8), 1e-6, -1), ((1, 3, 16), 1e-5, 2), ((2, 3, 5), 0.5, -1)]:
        x, g = f(*shape), f(shape[-1])
        attrs = {"epsilon": eps, "axis": axis}
        names.append(case(out, f"test_simplified_layer_norm_{len(shape)}d_eps{eps:g}",
                          [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], **attrs)],
                          ["x", "g"], ["y"], [x, g], opsets=()))
    # SkipSimplifiedLayerNormalization (com.microsoft), with and without the
    # bias, with and without the sum output.
    for bias in [False, True]:
        for with_sum in [False, True]:
            x, s, g, b = f(2, 4, 16), f(2, 4, 16), f(16), f(16)
            ins = ["x", "skip", "g"] + (["b"] if bias else [])
            feeds = [x, s, g] + ([b] if bias else [])
            outs = ["y", "", "", "sum"] if with_sum else ["y"]
            node = helper.make_node("SkipSimplifiedLayerNormalization", ins, outs, domain=MS, epsilon=1e-6)
            names.append(case(out, f"test_skip_simplified_layer_norm{'_bias' if bias else ''}"
                              f"{'_sum' if with_sum else ''}",
                              [node], ins, [o for o in outs if o], feeds))
    # The epsilon default (1e-12) on a 2-D input.
    x, s, g = f(3, 8), f(3, 8), f(8)
    names.append(case(out, "test_skip_simplified_layer_norm_2d_default_eps",
                      [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y"], domain=MS)],
                      ["x", "s", "g"], ["y"], [x, s, g]))
    manifest = HERE / "manifest.txt"
    manifest.write_text(
        "# onnxruntime contrib-op node tests (testdata/contrib/generate.py, onnxruntime "
        f"{ort.__version__}) that `slmcc onnx-test` must pass.\n" + "".join(n + "\n" for n in names)
    )
    print(f"wrote {len(names)} tests under {out} and {manifest}")


if __name__ == "__main__":
    main()
