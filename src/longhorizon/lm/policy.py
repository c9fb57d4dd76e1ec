"""Pretrained policies: a Llama-family model config, its parameters and its tokenizer, from a name or a path.

``--model`` accepts

* ``smollm2`` (the default): SmolLM2-135M-Instruct's GGUF file, fetched into the cache on first use
  (:mod:`longhorizon.lm.checkpoints.fetch`);
* ``tiny-random``: a 2-layer random Llama over a byte-level tokenizer with a ChatML template, built
  in memory (:func:`tiny_random`): the pretrained-model path end to end in seconds, for smoke tests
  and ``--quick`` reproductions; it knows nothing;
* a ``.gguf`` file (Llama, Qwen2, Qwen3; dequantized to float32 on reading);
* a Hugging Face model folder: ``config.json`` + ``*.safetensors`` + ``tokenizer.json`` (with
  ``tokenizer_config.json`` for the chat template and ``generation_config.json`` for the stop ids,
  when present).

Anything else is refused in one sentence that says what a checkpoint looks like.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from longhorizon.errors import UsageError

DEFAULT_MODEL = "smollm2"
TINY_RANDOM = "tiny-random"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
          "'\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@dataclasses.dataclass
class Pretrained:
    cfg: Any  # longhorizon.lm.llama.LlamaConfig
    params: Any
    tokenizer: Any  # longhorizon.lm.hf_tokenizer.HFTokenizer
    source: str  # what --model named, resolved to a path


def resolve(model: str | Path | None) -> tuple[str, Path | None]:
    """``(kind, path)`` of a ``--model`` value: kind is ``"named"``, ``"gguf"`` or ``"hf"``; nothing is read."""
    from longhorizon.lm.checkpoints.fetch import MODELS

    model = DEFAULT_MODEL if model is None else str(model)
    if model in MODELS:
        return "named", None
    if model == TINY_RANDOM:
        return "builtin", None
    path = Path(model)
    if path.is_file() and path.suffix == ".gguf":
        return "gguf", path
    if path.is_dir() and (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        if not (path / "tokenizer.json").is_file():
            raise UsageError(f"{path} has weights but no tokenizer.json; save the tokenizer beside the model "
                             "(tokenizer.save_pretrained) or use its GGUF file.")
        return "hf", path
    if path.is_dir() and (path / "config.json").is_file() and "model" in json.loads((path / "config.json").read_text()):
        raise UsageError(f"{path} is a longhorizon run, not a pretrained checkpoint; pass it as --init, or --model "
                         f"a .gguf file, a Hugging Face folder or one of {sorted(MODELS)}.")
    raise UsageError(f"--model {model} is no checkpoint: give {', '.join(sorted(MODELS))} or {TINY_RANDOM}, a .gguf "
                     "file, or a Hugging Face folder with config.json, *.safetensors and tokenizer.json.")


def load_pretrained(model: str | Path | None = None, dtype: str = "float32", progress=print) -> Pretrained:
    """The policy ``model`` names (module docstring), its parameters in ``dtype`` (float32 or bfloat16)."""
    from longhorizon.lm import llama

    kind, path = resolve(model)
    if kind == "builtin":
        return tiny_random(dtype)
    if kind == "named":
        from longhorizon.lm.checkpoints.fetch import fetch_model, model_path

        path = model_path(str(model or DEFAULT_MODEL))
        if not path.is_file():
            path = fetch_model(str(model or DEFAULT_MODEL), progress=progress)
        kind = "gguf"
    if kind == "gguf":
        from longhorizon.lm.checkpoints.gguf_file import read_gguf
        from longhorizon.lm.hf_tokenizer import from_metadata

        ckpt = read_gguf(path)
        cfg = llama.config_from_gguf_spec(ckpt.spec, dtype=dtype)
        params = llama.params_from_hf(ckpt.tensors, cfg)
        tokenizer = from_metadata(ckpt.metadata, source=str(path))
    else:
        cfg, params = llama.load_hf_folder(path, dtype=dtype)
        tokenizer = tokenizer_from_folder(path)
    if tokenizer.vocab_size > cfg.vocab_size:
        raise UsageError(f"{path}: the tokenizer has {tokenizer.vocab_size} tokens but the model only {cfg.vocab_size} "
                         "embeddings; the tokenizer belongs to another model.")
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, cfg.dtype), params)
    return Pretrained(cfg, params, tokenizer, str(path))


def tokenizer_from_folder(folder: Path):
    """An :class:`HFTokenizer` from a HF folder's ``tokenizer.json`` (+ chat template and stop ids when stated)."""
    from tokenizers import Tokenizer

    from longhorizon.lm.hf_tokenizer import HFTokenizer

    def read(name: str) -> dict:
        file = folder / name
        return json.loads(file.read_text()) if file.is_file() else {}

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    config, generation, model = read("tokenizer_config.json"), read("generation_config.json"), read("config.json")

    def token_id(value) -> int | None:
        if isinstance(value, dict):  # an AddedToken written out: {"content": "<|im_end|>", ...}
            value = value.get("content")
        return None if value is None else tok.token_to_id(value)

    eos = generation.get("eos_token_id", model.get("eos_token_id"))
    eos_ids = [int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None]
    configured = token_id(config.get("eos_token"))
    if configured is not None and configured not in eos_ids:
        eos_ids.append(configured)
    if not eos_ids:
        raise UsageError(f"{folder} states no end-of-sequence token (eos_token_id); add it to generation_config.json.")
    pad = config.get("pad_token")
    return HFTokenizer(tok, token_id(config.get("bos_token")), eos_ids, config.get("chat_template"),
                       add_bos=bool(config.get("add_bos_token", False)), pad_id=token_id(pad))


def tiny_random(dtype: str = "float32", seed: int = 0) -> Pretrained:
    """A random 2-layer Llama (d=64, 4 query and 2 key/value heads) over a byte-level tokenizer: the 256
    byte symbols of GPT-2's alphabet and the ChatML control tokens, no merges (one token per byte), with
    ChatML's chat template; stop ids ``<|im_end|>`` and ``<|endoftext|>``."""
    from tokenizers.pre_tokenizers import ByteLevel

    from longhorizon.lm import llama
    from longhorizon.lm.hf_tokenizer import HFTokenizer, byte_level_bpe

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = special + sorted(ByteLevel.alphabet())
    tokenizer = HFTokenizer(byte_level_bpe(tokens, [], special, split_digits=False), None, [2, 0], CHATML, pad_id=0)
    cfg = llama.LlamaConfig(vocab_size=len(tokens), d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128,
                            max_len=2048, dtype=dtype)
    return Pretrained(cfg, llama.init_params(jax.random.PRNGKey(seed), cfg), tokenizer, TINY_RANDOM)
