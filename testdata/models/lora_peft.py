"""PEFT LoRA adapters for the test decoders, and the logits of PEFT's own merge.

What `slmcc compile --lora` is checked against (compiler/tests/lora.rs). From the
repository root, with the pins of testdata/requirements-gen.txt plus peft==0.21.2
(accelerate 1.16.0 resolved beside it):

    python testdata/models/lora_peft.py

Rebuilds the base models of testdata/models/generate.py (same configs and seeds),
checks that they still compute what the committed ONNX files compute (onnxruntime,
max |diff| < 1e-4), adds seeded LoRA adapters with PEFT, saves them as PEFT does
(`save_pretrained`: adapter_config.json + adapter_model.safetensors), and records
the logits of `merge_and_unload()` for one input. Writes testdata/lora/:

    qwen2_attn/   r 4, alpha 8, on q/k/v/o_proj
    qwen2_mlp/    r 8, alpha 4, use_rslora, on gate/up/down_proj and lm_head, with
                  rank_pattern {down_proj: 2} and alpha_pattern {lm_head: 16}
    gpt2_conv/    r 4, alpha 16, fan_in_fan_out (GPT-2's Conv1D), on c_attn, c_proj, c_fc
    input_ids.npy                 int64 [1, 9]
    qwen2_attn.logits.npy         qwen2 + qwen2_attn, merged
    qwen2_attn1_mlp0.5.logits.npy qwen2 + qwen2_attn (weight 1) + qwen2_mlp (weight 0.5),
                                  both merged (PEFT's LoraLayer.set_scale for the weight)
    gpt2_conv.logits.npy          gpt2 + gpt2_conv, merged

A's entries are N(0, 1/in), B's N(0, 0.02^2), seeded: PEFT initialises B to zero, which
would make every merge a no-op. Each merged model's logits must differ from the base
model's by more than 1e-2, so that a test comparing at 1e-5 sees the merge.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "testdata" / "lora"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import generate  # noqa: E402  (the base models' recipe)

SEED = 7

ADAPTERS = {
    "qwen2_attn": ("qwen2", dict(r=4, lora_alpha=8,
                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])),
    "qwen2_mlp": ("qwen2", dict(r=8, lora_alpha=4, use_rslora=True,
                                target_modules=["gate_proj", "up_proj", "down_proj", "lm_head"],
                                rank_pattern={"down_proj": 2}, alpha_pattern={"lm_head": 16})),
    "gpt2_conv": ("gpt2", dict(r=4, lora_alpha=16, fan_in_fan_out=True,
                               target_modules=["c_attn", "c_proj", "c_fc"])),
}


def seeded_factors(model, seed: int) -> None:
    """Draws every lora_A / lora_B of `model` (a PeftModel) from a seeded generator."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if ".lora_A." in name:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p.shape[1]))
            elif ".lora_B." in name:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def logits(model, ids) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.from_numpy(ids)).logits.numpy()


def check_base(name: str, model, ids) -> np.ndarray:
    """The base model's logits, checked against the committed ONNX export."""
    import onnxruntime as ort

    base = logits(model, ids)
    sess = ort.InferenceSession(str(ROOT / "testdata" / "models" / f"{name}.onnx"),
                                providers=["CPUExecutionProvider"])
    (got,) = sess.run(["logits"], {"input_ids": ids})
    diff = float(np.abs(got - base).max())
    assert diff < 1e-4, f"{name}: the rebuilt model differs from {name}.onnx by {diff}"
    return base


def make_adapter(adapter: str, seed: int) -> None:
    from peft import LoraConfig, get_peft_model

    base_name, cfg = ADAPTERS[adapter]
    model = get_peft_model(generate.build(base_name), LoraConfig(**cfg))
    seeded_factors(model, seed)
    model.save_pretrained(str(OUT / adapter), safe_serialization=True)
    (OUT / adapter / "README.md").unlink()  # PEFT's model-card template
    # PEFT writes target_modules from a set, in hash order: sorted, the file is stable.
    config_path = OUT / adapter / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["target_modules"] = sorted(config["target_modules"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def merged(base_name: str, adapters: list[tuple[str, float]]):
    """PEFT's merge of `adapters` (folder, weight) into a fresh base model."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    model = None
    for adapter, _ in adapters:
        if model is None:
            model = PeftModel.from_pretrained(generate.build(base_name), str(OUT / adapter),
                                              adapter_name=adapter)
        else:
            model.load_adapter(str(OUT / adapter), adapter_name=adapter)
    for module in model.modules():
        if isinstance(module, LoraLayer):
            for adapter, weight in adapters:
                module.set_scale(adapter, weight)
    return model.merge_and_unload(adapter_names=[a for a, _ in adapters]).eval()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, adapter in enumerate(ADAPTERS):
        make_adapter(adapter, SEED + i)
    ids = np.random.default_rng(SEED).integers(0, 512, (1, 9), dtype=np.int64)
    np.save(OUT / "input_ids.npy", ids)
    cases = {
        "qwen2_attn": ("qwen2", [("qwen2_attn", 1.0)]),
        "qwen2_attn1_mlp0.5": ("qwen2", [("qwen2_attn", 1.0), ("qwen2_mlp", 0.5)]),
        "gpt2_conv": ("gpt2", [("gpt2_conv", 1.0)]),
    }
    for case, (base_name, adapters) in cases.items():
        base = check_base(base_name, generate.build(base_name), ids)
        out = logits(merged(base_name, adapters), ids)
        change = float(np.abs(out - base).max())
        assert change > 1e-2, f"{case}: the merge changes the logits by only {change}"
        np.save(OUT / f"{case}.logits.npy", out.astype(np.float32))
        print(f"{case}: max |merged - base| = {change:.3f}")


if __name__ == "__main__":
    main()
