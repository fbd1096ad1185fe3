"""A tiny byte-level BPE tokenizer whose ids are valid for every test decoder.

Writes, from the repository root (needs `tokenizers` and `onnx`, pinned in
testdata/requirements-gen.txt; no torch):

    python testdata/tokenizers/make_tiny_bpe.py      # testdata/tokenizers/tiny-bpe.json

A Hugging Face `tokenizers` BPE model trained on testdata/tokenizers/corpus.txt (a few
paragraphs of plain English written for this purpose), GPT-2 style byte-level:

* pre-tokenizer `ByteLevel(add_prefix_space=False, use_regex=True)`: the GPT-2 split
  regex, then every byte mapped to a printable character (a space becomes `Ġ`, a newline
  `Ċ`), so any text encodes and nothing is unknown;
* vocabulary: the special tokens `<pad>`, `<s>`, `</s>` (ids 0, 1, 2, matching the
  pad/bos/eos ids of the phi3 and gpt2 configs), the 256 byte characters (ids 3-258), then
  one token per merge learned from the corpus (`min_frequency=2`), up to a vocabulary of
  exactly the smallest vocab among the decoders (the last dim of the `logits` output of
  testdata/models/{llama,qwen2,phi3,gpt2}.onnx: 512 for all four), i.e. 253 merges;
* no normalizer; post-processor `ByteLevel(add_prefix_space=False, trim_offsets=False)`
  (adds no tokens, only fixes offsets) and
  decoder `ByteLevel`, so decode(encode(text)) == text.

The script checks the vocabulary size, the round trip on the corpus and the examples,
and prints the examples recorded in testdata/tokenizers/README.md ("Hello world", ...). Reruns give the same
bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "testdata" / "tokenizers"
CORPUS = HERE / "corpus.txt"
OUT = HERE / "tiny-bpe.json"
DECODERS = ["llama", "qwen2", "phi3", "gpt2"]
SPECIAL = ["<pad>", "<s>", "</s>"]
EXAMPLES = ["Hello world", " Hello world", "The village sat\n", "café, naïve"]


def decoder_vocab() -> int:
    """The smallest vocab among the decoders: the static last dim of their `logits`."""
    sizes = {}
    for name in DECODERS:
        graph = onnx.load(str(ROOT / "testdata" / "models" / f"{name}.onnx"),
                          load_external_data=False).graph
        (logits,) = [o for o in graph.output if o.name == "logits"]
        sizes[name] = logits.type.tensor_type.shape.dim[-1].dim_value
    assert all(sizes.values()), sizes
    print("decoder vocab sizes:", sizes)
    return min(sizes.values())


def main() -> None:
    vocab = decoder_vocab()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = CORPUS.read_text(encoding="utf-8")
    tok.train_from_iterator(text.splitlines(keepends=True), trainer)
    assert tok.get_vocab_size() == vocab, (tok.get_vocab_size(), vocab)
    assert [tok.token_to_id(t) for t in SPECIAL] == list(range(len(SPECIAL)))
    assert tok.decode(tok.encode(text).ids) == text
    tok.save(str(OUT), pretty=True)

    print(f"wrote {OUT.relative_to(ROOT)}: vocab {tok.get_vocab_size()}, "
          f"{OUT.stat().st_size / 1e3:.1f} kB; corpus {len(text.split())} words -> "
          f"{len(tok.encode(text).ids)} tokens")
    saved = Tokenizer.from_file(str(OUT))
    for example in EXAMPLES:
        enc = saved.encode(example)
        assert saved.decode(enc.ids) == example
        print(f"{example!r} -> ids {enc.ids}, tokens {enc.tokens}")


if __name__ == "__main__":
    sys.exit(main())
