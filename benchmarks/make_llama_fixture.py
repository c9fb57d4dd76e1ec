"""Make the tiny random Llama (plain and with llama3 rotary scaling), Qwen2 and Qwen3 checkpoints that ``tests/lm/test_lm_llama.py`` checks against.

``transformers`` builds each model from a fixed torch seed and writes, under
``tests/fixtures/hf/<name>/``: ``config.json`` + ``model.safetensors`` (``save_pretrained``, fp32)
and ``reference.npz`` with

* ``input_ids [N, P]`` left-padded prompts of different lengths and ``valid [N, P]`` their mask;
* ``logits [N, P, V]`` float32: each prompt run alone, unpadded, right-aligned in the row (zeros on padding);
* ``greedy [N, 8]``: the argmax continuation of each prompt, one full forward per token.

Runs in its own venv (torch is not a longhorizon dependency)::

    python3 benchmarks/make_llama_fixture.py            # creates /tmp/lh-hf-venv on first use
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

VENV = Path("/tmp/lh-hf-venv")
ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf"
PROMPTS = [[1, 17, 42, 99, 5, 63, 120], [3, 88, 7], [64, 2, 31, 127, 12]]
NEW_TOKENS = 8
COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rope_theta=1e5, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
# tied head for Llama, untied for Qwen2, so both output paths are covered; Qwen3 (q/k norms) with a
# head size of 32 that is not hidden / heads
MODELS = {"tiny-llama": ("LlamaForCausalLM", "LlamaConfig", dict(tie_word_embeddings=True), 0),
          "tiny-qwen2": ("Qwen2ForCausalLM", "Qwen2Config", dict(tie_word_embeddings=False), 1),
          "tiny-qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(tie_word_embeddings=True, head_dim=32), 2),
          # llama3 rotary scaling with a pretraining context of 32, so the 6.3 .. 1.5e5-token wavelengths of
          # head size 16 fall in all three bands (kept, smoothed, divided by the factor)
          "tiny-llama-rope-llama3": ("LlamaForCausalLM", "LlamaConfig", dict(tie_word_embeddings=True, rope_parameters=dict(
              rope_type="llama3", rope_theta=1e5, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=32)), 3)}


def ensure_venv() -> None:
    """Re-run this script inside the benchmark venv (built on first use; the CPU torch wheel is local)."""
    if Path(sys.prefix) == VENV:
        return
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torch==2.13.0", "transformers", "safetensors",
                        "numpy"], check=True)
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def make(name: str, model_cls: str, config_cls: str, extra: dict, seed: int) -> None:
    import numpy as np
    import torch
    import transformers

    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**COMMON, **extra)
    model = getattr(transformers, model_cls)(config).float().eval()
    with torch.no_grad():  # the default init (std 0.02) gives near-uniform logits; widen it and make norms and biases non-trivial
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.normal_(1.0, 0.1)
            elif pname.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:
                p.normal_(0.0, 0.2)
    out = ROOT / name
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)

    width = max(map(len, PROMPTS))
    ids = np.zeros((len(PROMPTS), width), np.int32)
    valid = np.zeros((len(PROMPTS), width), bool)
    logits = np.zeros((len(PROMPTS), width, config.vocab_size), np.float32)
    greedy = np.zeros((len(PROMPTS), NEW_TOKENS), np.int32)
    with torch.no_grad():
        for i, prompt in enumerate(PROMPTS):
            ids[i, width - len(prompt):] = prompt
            valid[i, width - len(prompt):] = True
            x = torch.tensor([prompt])
            logits[i, width - len(prompt):] = model(x).logits[0].numpy()
            for j in range(NEW_TOKENS):
                nxt = model(x).logits[0, -1].argmax()
                greedy[i, j] = int(nxt)
                x = torch.cat([x, nxt.view(1, 1)], dim=1)
    np.savez_compressed(out / "reference.npz", input_ids=ids, valid=valid, logits=logits, greedy=greedy)
    print(f"{out}: torch {torch.__version__}, transformers {transformers.__version__}, greedy {greedy.tolist()}")


if __name__ == "__main__":
    ensure_venv()
    for name, spec in MODELS.items():
        make(name, *spec)
