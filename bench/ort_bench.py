"""Prefill latency of one ONNX model on onnxruntime, for the slmcc benchmark.

Runs the model on the token ids the benchmark wrote (``ids_<len>.npy``, one
file per prefill length), writes the logits it computed beside them
(``ort_logits_<len>.npy``) so the benchmark can check slmcc's and tract's
against them, and prints one JSON object on stdout::

    {"onnxruntime": "1.32.0", "threads": 1,
     "results": [{"len": 1, "median_ms": ..., "runs": ...}, ...]}

Only ``session.run`` is timed: the session is created (and the graph
optimised, ORT_ENABLE_ALL) once, then each length is run ``--warmup`` times
untimed and at least ``--min-runs`` times and ``--min-time`` seconds timed;
the median is reported. intra_op_num_threads = inter_op_num_threads =
``--threads``; sequential execution mode.

With ``--fold-len L --fold-out PATH`` it times nothing: it writes the model
with its input fixed to ``[1, L]`` after onnxruntime's basic graph
optimisations (constant folding, redundant node elimination; standard ONNX
ops only), for engines that cannot run the exporter's shape arithmetic
themselves (tract).

Run with the project's venv: ``target/pyenv/bin/python bench/ort_bench.py``
(``scripts/bench`` does).
"""

import argparse
import json
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="the .onnx file")
    p.add_argument("--dir",
                   help="folder with ids_<len>.npy; ort_logits_<len>.npy are written there")
    p.add_argument("--lens", default="1,32,128", help="prefill lengths, e.g. 1,32,128")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-runs", type=int, default=10)
    p.add_argument("--min-time", type=float, default=1.0, help="seconds")
    p.add_argument("--max-runs", type=int, default=10000)
    p.add_argument("--fold-len", type=int, help="only write the folded model for this length")
    p.add_argument("--fold-out", help="where --fold-len writes it")
    return p.parse_args()


def fold(args, ort):
    """Writes the model at a fixed length after ORT_ENABLE_BASIC."""
    import onnx
    import tempfile
    if args.fold_len < 1 or not args.fold_out:
        sys.exit("ort_bench.py: --fold-len needs a positive length and --fold-out")
    try:
        m = onnx.load(args.model)
    except Exception as e:
        sys.exit(f"ort_bench.py: {args.model}: cannot load: {e}")
    params = {d.dim_param for d in m.graph.input[0].type.tensor_type.shape.dim if d.dim_param}
    for v in list(m.graph.input) + list(m.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param in params:
                d.ClearField("dim_param")
                d.dim_value = args.fold_len
    del m.graph.value_info[:]  # symbolic shapes of intermediate values
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = args.fold_out
    so.log_severity_level = 3
    with tempfile.TemporaryDirectory() as tmp:
        static = os.path.join(tmp, "static.onnx")
        onnx.save(m, static)
        try:
            ort.InferenceSession(static, so, providers=["CPUExecutionProvider"])
        except Exception as e:
            sys.exit(f"ort_bench.py: {args.model}: cannot fold at length {args.fold_len}: {e}")


def main():
    args = parse_args()
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        sys.exit(f"ort_bench.py: {e} (run with target/pyenv/bin/python; scripts/test or scripts/bench creates it)")
    if args.fold_len is not None:
        fold(args, ort)
        return
    if args.threads < 1:
        sys.exit("ort_bench.py: --threads must be at least 1")
    if not args.dir:
        sys.exit("ort_bench.py: --dir is required")
    try:
        lens = [int(x) for x in args.lens.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"ort_bench.py: bad --lens `{args.lens}` (expected e.g. 1,32,128)")

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = args.threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types
        sys.exit(f"ort_bench.py: {args.model}: cannot load: {e}")
    inputs = sess.get_inputs()
    if len(inputs) != 1:
        sys.exit(f"ort_bench.py: {args.model}: expected one input (token ids), got "
                 f"{[i.name for i in inputs]}")
    in_name = inputs[0].name
    out_name = sess.get_outputs()[0].name

    results = []
    for n in lens:
        path = os.path.join(args.dir, f"ids_{n}.npy")
        try:
            ids = np.load(path)
        except OSError as e:
            sys.exit(f"ort_bench.py: {path}: {e}")
        feed = {in_name: ids}
        logits = sess.run([out_name], feed)[0]
        np.save(os.path.join(args.dir, f"ort_logits_{n}.npy"), logits.astype(np.float32))
        for _ in range(args.warmup):
            sess.run([out_name], feed)
        times = []
        start = time.perf_counter()
        while len(times) < args.max_runs and (
            len(times) < args.min_runs or time.perf_counter() - start < args.min_time
        ):
            t0 = time.perf_counter()
            sess.run([out_name], feed)
            times.append(time.perf_counter() - t0)
        results.append({
            "len": n,
            "median_ms": statistics.median(times) * 1e3,
            "min_ms": min(times) * 1e3,
            "runs": len(times),
        })
    json.dump({"onnxruntime": ort.__version__, "threads": args.threads,
               "results": results}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
