"""A small Llama with trained weights, for measuring quantization quality.

What it writes (from the repository root, with the venv of testdata/requirements-gen.txt):

    /work/venv-gen/bin/python testdata/models/trained/train.py          # the full recipe
    /work/venv-gen/bin/python testdata/models/trained/train.py --steps 20 --out /tmp/x  # a quick try

into testdata/models/trained/:

* `tokenizer.json`: a byte-level BPE of 4096 tokens (GPT-2 style: the split regex, every
  byte a symbol, so any text encodes), `<|endoftext|>` = id 0, trained on the training split;
* `llama_trained.onnx`: `transformers.LlamaForCausalLM` (4 layers, hidden 256, SwiGLU 704,
  4 query heads of 64 over 2 KV heads, RoPE, RMSNorm, tied embeddings; 4.0 M parameters),
  exported as users do: transformers' default (`sdpa`) attention, `torch.onnx.export(...,
  dynamo=True, opset_version=18)`; one input `input_ids` [1, seq], one output `logits`;
* `heldout.txt`: the held-out split (text), on which `slmcc eval ppl` measures;
* `calib.txt`: calibration text for the quantization methods (`--calib`), about 5% of
  the training documents (`--calib-only` writes just this file, without torch);
* `trained.json`: the recipe's settings, the corpus digest, the loss curve and the FP32
  held-out perplexity of torch and of onnxruntime on the protocol below.

The corpus: the docstrings of CPython 3.11's standard library (module, class and function
docstrings over 80 characters; test packages left out) and the pydoc topics of the
language reference (`pydoc_data.topics`), all from the Python install on this machine:
English technical prose with some code, 1.9 MB, about 4,200 documents, under the PSF
license (Python Software Foundation License Version 2, which allows copying and
redistribution with its notice; `heldout.txt` carries it). The script refuses to run when
the corpus's SHA-256 differs from the one recorded here (another Python version).

Split: a document goes to the held-out split when the first byte of its SHA-256 is below
13 (about 5%). Training: documents joined by `<|endoftext|>` into one token stream, random
windows of 128 tokens, batch 32, AdamW (lr 1e-3, betas 0.9/0.95, weight decay 0.1),
100 warm-up steps then cosine decay to 10%, fp32, seed 0, deterministic algorithms,
2 threads. Perplexity protocol (the same in `slmcc eval ppl`): `heldout.txt` encoded
whole (its documents are joined by a line holding `<|endoftext|>`), cut into consecutive
windows of 128 tokens; every token after the first of a window is predicted; perplexity = exp(mean NLL).

Time on this 2-core machine: 19 minutes of training for the 1000 steps (train loss 8.37 ->
about 3.0), held-out perplexity 48.84 (torch and onnxruntime alike). Seeds, deterministic
algorithms and a fixed thread count make a rerun repeat the run: rerun on 2026-12-03 into
another folder, it wrote the same bytes for every file, and a trained.json that differs
only in `train_seconds`. trained.json records the SHA-256 of every file written.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "testdata" / "models"))

CORPUS_SHA256 = "238e2ec0ef753216a1ad765a86f597f3f50f486b94dcdfbf95ba0d287d850c5f"
VOCAB = 4096
SEQ = 128
EOT = "<|endoftext|>"
PSF_NOTICE = (
    "The text below is taken from the documentation strings of CPython 3.11 and its\n"
    "pydoc topics. Copyright (c) 2001-2023 Python Software Foundation; All Rights\n"
    "Reserved. Distributed under the PSF License Agreement (Python Software Foundation\n"
    "License Version 2): https://docs.python.org/3/license.html\n"
)


def corpus() -> list[str]:
    """The documents, in a fixed order."""
    import pydoc_data.topics as topics

    root = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(("test/", "idlelib/", "lib2to3/", "site-packages/")) or "/test" in rel:
            continue
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) > 80:
                    docs.append(d)
    docs += [v for _, v in sorted(topics.topics.items())]
    return docs


def split(docs: list[str]) -> tuple[list[str], list[str]]:
    train, held = [], []
    for d in docs:
        (held if hashlib.sha256(d.encode()).digest()[0] < 13 else train).append(d)
    return train, held


def calibration_docs(train: list[str]) -> list[str]:
    """The training documents whose SHA-256 starts with a byte in 13..26 (about 5%): the
    calibration text of the quantization methods, from the training split."""
    return [d for d in train if 13 <= hashlib.sha256(d.encode()).digest()[0] < 26]


def make_tokenizer(train: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(train, trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    return tok


def stream(tok, docs: list[str]) -> list[int]:
    """The documents' ids joined by the end-of-text id (0)."""
    out = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(0)
    return out


def windows(ids: list[int]) -> list[list[int]]:
    """Consecutive windows of SEQ tokens (the last partial one dropped)."""
    return [ids[i:i + SEQ] for i in range(0, len(ids) - SEQ + 1, SEQ)]


def perplexity(logits_of, ids: list[int]) -> float:
    """exp(mean NLL) over the windows; `logits_of(window)` -> [SEQ, vocab] float64 numpy."""
    import numpy as np

    nll, count = 0.0, 0
    for w in windows(ids):
        logits = logits_of(w).astype(np.float64)
        m = logits.max(axis=-1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))
        nll -= sum(logp[t, w[t + 1]] for t in range(SEQ - 1))
        count += SEQ - 1
    return math.exp(nll / count)


def write_calib(train: list[str], out: Path) -> None:
    text = PSF_NOTICE + "\n" + f"\n{EOT}\n".join(calibration_docs(train))
    out.mkdir(parents=True, exist_ok=True)
    (out / "calib.txt").write_text(text, encoding="utf-8")
    print(f"calib.txt: {len(text)} characters")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--calib-only", action="store_true",
                    help="write only calib.txt (no torch, no training)")
    args = ap.parse_args()
    docs = corpus()
    digest = hashlib.sha256("\x00".join(docs).encode()).hexdigest()
    print(f"corpus: {len(docs)} documents, {sum(map(len, docs))} characters, sha256 {digest}")
    if digest != CORPUS_SHA256:
        sys.exit(f"the corpus differs from the recipe's ({CORPUS_SHA256}): another Python?")
    if args.calib_only:
        write_calib(split(docs)[0], args.out)
        return

    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)

    train, held = split(docs)
    tok = make_tokenizer(train)
    train_ids = torch.tensor(stream(tok, train), dtype=torch.long)
    # What `slmcc eval ppl --text heldout.txt` reads: the file, encoded whole.
    held_text = PSF_NOTICE + "\n" + f"\n{EOT}\n".join(held)
    held_ids = tok.encode(held_text, add_special_tokens=False).ids
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)}")

    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=0, eos_token_id=0, pad_token_id=0, use_cache=False,
    )
    model = LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params} parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = 100

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(1)
    curve = []
    start = time.time()
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, len(train_ids) - SEQ - 1, (32,), generator=gen)
        batch = torch.stack([train_ids[s:s + SEQ] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps - 1:
            curve.append((step, round(loss.item(), 4)))
            print(f"step {step}: loss {loss.item():.4f} ({time.time() - start:.0f} s)", flush=True)
    train_s = time.time() - start
    model.eval()

    def torch_logits(w):
        with torch.no_grad():
            return model(input_ids=torch.tensor([w])).logits[0].numpy()

    ppl_torch = perplexity(torch_logits, held_ids)
    print(f"held-out perplexity (torch): {ppl_torch:.4f}")

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "heldout.txt").write_text(held_text, encoding="utf-8")
    write_calib(train, out)

    from generate import export

    onnx_path = out / "llama_trained.onnx"
    export(model, onnx_path, {"input_ids": torch.tensor([held_ids[:SEQ]])}, ["logits"])
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    ppl_ort = perplexity(lambda w: sess.run(["logits"], {"input_ids": np.array([w])})[0][0],
                         held_ids)
    ppl_ort_1024 = perplexity(
        lambda w: sess.run(["logits"], {"input_ids": np.array([w])})[0][0], held_ids[:1024])
    print(f"held-out perplexity (onnxruntime): {ppl_ort:.4f}; first 1024 tokens {ppl_ort_1024:.4f}")
    record = {
        "corpus_sha256": digest,
        "documents": {"train": len(train), "heldout": len(held)},
        "tokens": {"train": len(train_ids), "heldout": len(held_ids)},
        "parameters": params,
        "steps": args.steps,
        "train_seconds": round(train_s),
        "loss_curve": curve,
        "heldout_ppl": {"torch": round(ppl_torch, 4), "onnxruntime": round(ppl_ort, 4)},
        # What the tests check `slmcc eval ppl --max-tokens 1024` against.
        "heldout_ppl_first_1024_tokens": {"onnxruntime": round(ppl_ort_1024, 4)},
        "sha256": {
            name: hashlib.sha256((out / name).read_bytes()).hexdigest()
            for name in ("tokenizer.json", "llama_trained.onnx", "heldout.txt")
        },
        "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
    }
    (out / "trained.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["heldout_ppl"]))


if __name__ == "__main__":
    main()
