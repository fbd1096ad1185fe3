"""Lists the ONNX node tests whose ops all lie in the set our IR supports.

    python testdata/onnx_conformance/generate.py            # first, writes the tests
    python testdata/onnx_conformance/candidates.py [DIR]    # default testdata/generated/onnx-node
    python testdata/onnx_conformance/candidates.py --opsets-22-24 DIR

Reads every DIR/test_*/model.onnx and keeps a test when
  * its only opset is the default domain (`""` / `ai.onnx`) at version <= 21,
    or with --opsets-22-24 (DIR made by the onnx of testdata/requirements-ci-new.txt)
    at version 22 to 24,
  * every node (including nodes in subgraphs) has an op type in SUPPORTED (with
    --opsets-22-24 also the language-model ops of those opsets: LM_OPS),
  * every tensor type it mentions (graph inputs/outputs/value_info, initializers, tensor
    attributes, `to`/`dtype` attributes) is float32, float16, a signed or unsigned
    integer, or bool, and no input/output is a sequence, optional or map.
Tests are grouped by the op they test: the op of the single-node test, also for its
`_expanded` variants (an op's function body, e.g. a Softmax written with ReduceMax/Exp/...);
an expanded test of an op outside the set is listed under that op, marked "expanded".

Prints the groups with counts, the total and the skip reasons, and writes
testdata/onnx_conformance/candidates.txt (one test name per line, a `# Op (n), opsets ...`
comment heading each group: the default-domain opsets its models import), or with
--opsets-22-24 candidates-opset22-24.txt. Needs only onnx.
"""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import onnx
from onnx import TensorProto

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / "testdata" / "generated" / "onnx-node"
OUTPUT = Path(__file__).resolve().parent / "candidates.txt"
MIN_OPSET, MAX_OPSET = 1, 21

# The ops of opsets 22-24 that language-model exports use (opset 23's transformer ops,
# opset 24's Swish) and the activations that got a new version at opset 22.
LM_OPS = {
    "Attention", "RMSNormalization", "RotaryEmbedding", "Swish", "Softplus", "Elu", "Mish",
    "HardSigmoid", "HardSwish", "Gelu", "LeakyRelu", "PRelu",
}

SUPPORTED = {
    "MatMul", "Gemm", "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Sqrt", "Reciprocal", "Exp",
    "Log", "Erf", "Tanh", "Sigmoid", "Cos", "Sin", "Abs", "Relu", "Floor", "Ceil", "Sign",
    "Not", "Softmax", "LayerNormalization", "ReduceMean", "ReduceSum", "ReduceMax",
    "ReduceMin", "ReduceProd", "Gather", "GatherND", "GatherElements", "Reshape", "Transpose",
    "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Expand", "Flatten", "Shape", "Size",
    "ConstantOfShape", "Range", "CumSum", "Trilu", "Cast", "Where", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "IsNaN", "IsInf", "Max",
    "Min", "Mod", "Identity", "Constant",
}

ALLOWED_DTYPES = {
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL,
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
}


def dtype_reason(dtype: int) -> str:
    name = TensorProto.DataType.Name(dtype).lower()
    if name.startswith("float8"):
        return "float8"
    if name in ("int4", "uint4", "float4e2m1", "int2", "uint2"):
        return "4-bit / 2-bit types"
    return name  # double, string, bfloat16, complex64, complex128, ...


def walk_nodes(graph: onnx.GraphProto):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from walk_nodes(attr.g)
            for g in attr.graphs:
                yield from walk_nodes(g)


def value_types(model: onnx.ModelProto):
    """(kind, elem_type) for every typed value: kind is 'tensor' or sequence/optional/map."""
    graph = model.graph
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        t = vi.type
        while True:
            kind = t.WhichOneof("value")
            if kind == "tensor_type":
                yield "tensor", t.tensor_type.elem_type
                break
            if kind == "sparse_tensor_type":
                yield "sparse tensor", t.sparse_tensor_type.elem_type
                break
            yield kind.replace("_type", ""), None
            if kind == "sequence_type":
                t = t.sequence_type.elem_type
            elif kind == "optional_type":
                t = t.optional_type.elem_type
            else:
                break
    for init in graph.initializer:
        yield "tensor", init.data_type
    for node in walk_nodes(graph):
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield "tensor", attr.t.data_type
            elif attr.name in ("to", "dtype") and attr.type == onnx.AttributeProto.INT:
                yield "tensor", attr.i


def skip_reason(model: onnx.ModelProto) -> str | None:
    """None if the test is a candidate, else the first reason it is not."""
    ops = {(n.domain, n.op_type) for n in walk_nodes(model.graph)}
    if any(domain not in ("", "ai.onnx") for domain, _ in ops):
        return "non-default domain"
    unsupported = sorted(op for _, op in ops if op not in SUPPORTED)
    if unsupported:
        return "op outside the set"
    for opset in model.opset_import:
        if opset.domain not in ("", "ai.onnx"):
            return "non-default domain"
        if opset.version > MAX_OPSET:
            return f"opset > {MAX_OPSET}"
        if opset.version < MIN_OPSET:
            return f"opset < {MIN_OPSET}"
    for kind, dtype in value_types(model):
        if kind != "tensor":
            return f"{kind} type"
        if dtype not in ALLOWED_DTYPES and dtype != TensorProto.UNDEFINED:
            return dtype_reason(dtype)
    return None


def default_opset(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def base_op(name: str, single_ops: dict[str, str]) -> tuple[str, bool]:
    """(op tested, is an expanded variant) for test `name`."""
    base = re.sub(r"_expanded(_ver\d+)?$", "", name)
    return single_ops.get(base, "?"), base != name


def main() -> None:
    global MIN_OPSET, MAX_OPSET, OUTPUT
    args = sys.argv[1:]
    if "--opsets-22-24" in args:
        args.remove("--opsets-22-24")
        MIN_OPSET, MAX_OPSET = 22, 24
        SUPPORTED.update(LM_OPS)
        OUTPUT = OUTPUT.with_name("candidates-opset22-24.txt")
    root = Path(args[0]) if args else DEFAULT_DIR
    tests = sorted(p.parent for p in root.glob("test_*/model.onnx"))
    if not tests:
        raise SystemExit(f"no tests in {root}: run testdata/onnx_conformance/generate.py first")
    models = {t.name: onnx.load(str(t / "model.onnx")) for t in tests}
    single_ops = {name: m.graph.node[0].op_type for name, m in models.items()
                  if len(m.graph.node) == 1}

    groups: dict[str, list[str]] = collections.defaultdict(list)
    skipped = collections.Counter()
    uses_uint = 0
    for name, model in models.items():
        reason = skip_reason(model)
        if reason:
            skipped[reason] += 1
            continue
        op, expanded = base_op(name, single_ops)
        key = op if op in SUPPORTED else f"{op} (expanded)"
        groups[key].append(name)
        uses_uint += any(dtype in (TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32,
                                   TensorProto.UINT64) for _, dtype in value_types(model))

    total = sum(len(v) for v in groups.values())
    marker = root / "GENERATED"
    source = f"onnx {onnx.__version__}"
    if marker.exists():  # the onnx version that generated DIR
        source = marker.read_text().split(" node tests")[0]
    lines = [f"# ONNX node tests ({source}) whose ops all lie in the IR's op set,",
             "# written by testdata/onnx_conformance/candidates.py; grouped by the op tested.",
             f"# {total} tests in {len(groups)} groups.", ""]
    for key in sorted(groups, key=str.lower):
        opsets = sorted({default_opset(models[name]) for name in groups[key]})
        lines.append(f"# {key} ({len(groups[key])}), opsets {', '.join(map(str, opsets))}")
        lines += sorted(groups[key])
        lines.append("")
    OUTPUT.write_text("\n".join(lines))

    for key in sorted(groups, key=str.lower):
        print(f"{len(groups[key]):4d}  {key}")
    print(f"{total} candidates of {len(models)} node tests ({uses_uint} use unsigned ints); "
          f"written to {OUTPUT.relative_to(ROOT)}")
    missing = sorted(SUPPORTED - {k for k in groups})
    print(f"supported ops with no candidate test of their own: {', '.join(missing) or 'none'}")
    print("skipped (first reason): " + ", ".join(f"{r}: {n}" for r, n in skipped.most_common()))


if __name__ == "__main__":
    main()
