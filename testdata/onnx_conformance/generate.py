"""Writes the ONNX backend node tests of the installed `onnx` package into a directory.

    python testdata/onnx_conformance/generate.py [DIR]   # default testdata/generated/onnx-node

The onnx wheel does not ship `onnx/backend/test/data/node/` (and its
`python -m onnx.backend.test.cmd_tools generate-data` only writes the model tests), so
this runs the node test generators in `onnx.backend.test.case.node` itself and writes,
like the onnx repository's data/node folder:

    DIR/test_x/model.onnx
    DIR/test_x/test_data_set_0/input_K.pb, output_K.pb   (TensorProto, or Sequence/Optional/Map)

Use the onnx of testdata/requirements-ci.txt (onnx 1.16.2, the last release whose newest
opset is 21, with numpy 1.26.4, which its generators were written for) for manifest.txt:
newer onnx releases generate each test at the op's newest opset, so e.g. the Reshape,
Transpose, Cast, Shape and Unsqueeze tests of onnx 1.23 are at opset 24-28, past what we
import, and numpy 2 changes the dtypes of a few generated outputs. The tests of opsets
22-24 (manifest-opset22-24.txt: opset 23's Attention, RMSNormalization and
RotaryEmbedding, opset 24's Swish, ...) come from testdata/requirements-ci-new.txt's
onnx 1.23.2 with numpy 2, into a directory of their own. numpy's global RNG is seeded
first, so the data are the same on every run with the same versions. DIR is deleted
and rewritten if it holds a previous run's output (marked by a GENERATED file), and left
alone otherwise unless it is empty.
"""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / "testdata" / "generated" / "onnx-node"
MARKER = "GENERATED"


def serialize(value, type_proto: onnx.TypeProto, name: str) -> bytes:
    """One input/output value as the .pb bytes the ONNX test runners read."""
    if type_proto.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if isinstance(value, onnx.TensorProto):
        return value.SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR
    out = out.resolve()
    if out.exists():
        if (out / MARKER).exists():
            shutil.rmtree(out)
        elif any(out.iterdir()):
            raise SystemExit(f"{out} is not empty and not ours (no {MARKER} file); not touching it")
    out.mkdir(parents=True, exist_ok=True)

    if onnx.defs.onnx_opset_version() > 21:
        print(f"note: onnx {onnx.__version__} writes tests at opsets up to "
              f"{onnx.defs.onnx_opset_version()}: manifest.txt lists tests of "
              "testdata/requirements-ci.txt's onnx (opsets <= 21), manifest-opset22-24.txt "
              "those of testdata/requirements-ci-new.txt's (opsets 22 to 24).")
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # generators divide by zero etc. on purpose
        import onnx.backend.test.case.node as node_cases

        cases = node_cases.collect_testcases(None)  # None: all ops

    for case in cases:
        test_dir = out / case.name
        if test_dir.exists():  # older onnx versions have a few duplicate names: last one wins,
            shutil.rmtree(test_dir)  # as with onnx's own generate-data
        test_dir.mkdir()
        (test_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            data_dir = test_dir / f"test_data_set_{i}"
            data_dir.mkdir()
            for j, value in enumerate(inputs):
                vi = graph.input[j]
                (data_dir / f"input_{j}.pb").write_bytes(serialize(value, vi.type, vi.name))
            for j, value in enumerate(outputs):
                vi = graph.output[j]
                (data_dir / f"output_{j}.pb").write_bytes(serialize(value, vi.type, vi.name))
    (out / MARKER).write_text(f"onnx {onnx.__version__} node tests, "
                              f"written by testdata/onnx_conformance/generate.py\n")
    n_tests = sum(1 for p in out.iterdir() if p.is_dir())
    print(f"{n_tests} node tests (onnx {onnx.__version__}) in {out}")


if __name__ == "__main__":
    main()
