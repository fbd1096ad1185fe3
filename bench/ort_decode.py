"""Decode step latency of one ONNX model exported with past key values, on onnxruntime.

The onnxruntime side of the decode benchmark (``compiler/examples/decode_bench.rs``,
run by ``scripts/bench-decode``), which starts this script and reads the one JSON
object it prints on stdout::

    {"onnxruntime": "1.32.0", "threads": 2, "prompt_len": 32,
     "step_ms": [...],          # one per timed step, in order
     "tokens": [...]}           # greedy token after the prompt, then after each timed step

The model is a ``testdata/models/export_with_past.py`` export: inputs ``input_ids
[1, seq]`` and ``past_key_values.{i}.key/value [1, kv_heads, past, head_dim]``;
outputs ``logits`` and ``present.{i}.key/value`` (the past with the new token's rows
appended). Decoding runs as users run such a model: the prompt is prefilled with past
tensors of length 0, then one token per step (the greedy choice of the previous
logits) is fed with the previous step's ``present`` tensors as its past. onnxruntime
allocates the grown ``present`` tensors anew every step (and copies the past into
them inside the graph's concat); nothing here binds buffers.

Only ``session.run`` of a one-token step is timed. One untimed pass (prefill and
``--warmup`` steps) runs first; then the prefill again and ``--steps`` timed steps,
at positions ``prompt_len .. prompt_len + steps - 1``. Session options:
``intra_op_num_threads = --threads``, ``inter_op_num_threads = 1``, sequential
execution, ``ORT_ENABLE_ALL``.

Run with the project's venv: ``target/pyenv/bin/python bench/ort_decode.py --model
testdata/generated/llama_h512_past.onnx --prompt-ids 1,2,3 --steps 64``.
"""

import argparse
import json
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="the *_past.onnx file")
    p.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    p.add_argument("--steps", type=int, default=64, help="timed one-token steps")
    p.add_argument("--warmup", type=int, default=8, help="untimed steps before")
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args()


def fail(msg):
    sys.exit(f"ort_decode.py: {msg}")


class PastModel:
    """A session over a model with past key values, and its input/output names."""

    def __init__(self, ort, np, path, threads):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        try:
            self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types
            fail(f"{path}: cannot load: {e}")
        self.np = np
        inputs = self.session.get_inputs()
        names = [i.name for i in inputs]
        if not names or names[0] != "input_ids":
            fail(f"{path}: the first input is not input_ids (inputs: {names})")
        self.past = []  # (name, kv_heads, head_dim)
        for i in inputs[1:]:
            if not i.name.startswith("past_key_values."):
                fail(f"{path}: unexpected input {i.name} (expected past_key_values.*)")
            shape = i.shape
            if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
                fail(f"{path}: {i.name} is not [1, kv_heads, past, head_dim]: {shape}")
            self.past.append((i.name, shape[1], shape[3]))
        self.outputs = [o.name for o in self.session.get_outputs()]
        if self.outputs[0] != "logits" or len(self.outputs) != 1 + len(self.past):
            fail(f"{path}: expected outputs logits, present.*; got {self.outputs}")

    def empty_past(self):
        np = self.np
        return [np.zeros((1, h, 0, d), dtype=np.float32) for _, h, d in self.past]

    def feed(self, ids, past):
        f = {"input_ids": self.np.asarray([ids], dtype=self.np.int64)}
        for (name, _, _), t in zip(self.past, past):
            f[name] = t
        return f

    def run(self, feed):
        out = self.session.run(self.outputs, feed)
        return out[0], out[1:]


def decode(model, prompt, steps, timed):
    """Prefill, then `steps` greedy one-token steps; times of the steps if `timed`."""
    np = model.np
    logits, past = model.run(model.feed(prompt, model.empty_past()))
    token = int(np.argmax(logits[0, -1]))
    tokens = [token]
    times = []
    for _ in range(steps):
        feed = model.feed([token], past)
        t0 = time.perf_counter_ns()
        logits, past = model.run(feed)
        t1 = time.perf_counter_ns()
        if timed:
            times.append((t1 - t0) / 1e6)
        token = int(np.argmax(logits[0, -1]))
        tokens.append(token)
    return times, tokens


def main():
    args = parse_args()
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        fail(f"{e} (run with target/pyenv/bin/python; scripts/test or scripts/bench-decode creates it)")
    if args.threads < 1 or args.steps < 1 or args.warmup < 0:
        fail("--threads and --steps must be at least 1, --warmup at least 0")
    try:
        prompt = [int(x) for x in args.prompt_ids.split(",") if x.strip()]
    except ValueError:
        fail(f"bad --prompt-ids `{args.prompt_ids}` (expected e.g. 1,2,3)")
    if not prompt:
        fail("the prompt is empty")

    model = PastModel(ort, np, args.model, args.threads)
    decode(model, prompt, args.warmup, timed=False)
    times, tokens = decode(model, prompt, args.steps, timed=True)
    json.dump(
        {
            "onnxruntime": ort.__version__,
            "threads": args.threads,
            "prompt_len": len(prompt),
            "step_ms": times,
            "tokens": tokens,
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
