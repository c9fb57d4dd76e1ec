"""Llama-family decoder (Llama, Qwen2, Qwen3) in flax linen, loadable from Hugging Face checkpoints.

Pre-norm blocks with RMSNorm, grouped-query attention and a SwiGLU MLP::

    h = x + W_o Attn(rope(W_q n1(x) + b_q), rope(W_k n1(x) + b_k), W_v n1(x) + b_v)
    y = h + W_down (silu(W_gate n2(h)) * W_up n2(h))
    n(x) = w * x / sqrt(mean(x^2) + eps)                       (RMSNorm)

``n_kv_heads`` key/value heads each serve ``n_heads / n_kv_heads`` consecutive query heads
(grouped-query attention); the q/k/v biases are Qwen2's, and Qwen3 RMS-normalises each head of
``q`` and ``k`` (weights of size ``head_dim``) before the rotary embedding. Rotary embeddings use the halves-split
("rotate half") convention of ``transformers``, with its linear and llama3 frequency scaling. The output head is the token embedding (tied) or its
own matrix. Shapes and the cache follow :mod:`longhorizon.lm.model`: slots are columns,
prompts are left-padded, ``positions = cumsum(valid) - 1``, and a :class:`KVCache` holds
``[n_layers, batch, slots, n_kv_heads, head_dim]`` keys and values.

:func:`config_from_hf` reads a ``config.json`` dict (:func:`config_from_gguf_spec` a GGUF file's
spec), :func:`params_from_hf` maps a dict of HF-named arrays (``model.layers.N.self_attn.q_proj.weight``
...) onto this module's parameters; :func:`save_hf_folder` writes them back for ``transformers``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.lm.model import (KVCache, causal_slot_mask, dense_attention, positions_from_valid, rotary,
                                  rows_sharded, write_layer_cache)

FAMILIES = ("llama", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 128
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 128
    head_size: int = 0  # 0 means d_model // n_heads
    rope_base: float = 10_000.0
    rope_type: str = "default"  # "linear" and "llama3" scale the frequencies (see rope_frequencies)
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0  # llama3 only
    rope_high_freq_factor: float = 4.0  # llama3 only
    rope_original_max_len: int = 8192  # llama3 only: the context the model was pretrained with
    rms_eps: float = 1e-6
    qkv_bias: bool = False  # Qwen2
    qk_norm: bool = False  # Qwen3
    tie_embeddings: bool = True
    max_len: int = 2048  # the checkpoint's context length (greedy_generate refuses to run past it)
    dtype: str = "float32"  # compute and parameter dtype

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_len"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"model {name} must be a positive integer, got {getattr(self, name)}; set it to 1 or more.")
        if self.n_heads % self.n_kv_heads:
            raise UsageError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}; "
                "each key/value head must serve the same number of query heads."
            )
        if not self.head_size and self.d_model % self.n_heads:
            raise UsageError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set head_size or pick n_heads that divides d_model."
            )
        if self.head_dim % 2:
            raise UsageError(f"rotary positions need an even head size, got {self.head_dim}; change head_size.")
        if self.rope_type not in ROPE_TYPES:
            raise UsageError(f"rope type {self.rope_type!r} (rotary scaling) is not supported; use one of {ROPE_TYPES}.")
        if self.rope_type == "llama3" and self.rope_high_freq_factor <= self.rope_low_freq_factor:
            raise UsageError("llama3 rope scaling needs high_freq_factor > low_freq_factor; fix rope_parameters in config.json.")
        if self.dtype not in ("float32", "bfloat16"):
            raise UsageError(f"dtype={self.dtype!r} is unknown; use float32 or bfloat16.")

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads

    @property
    def context_length(self) -> int:
        return self.max_len

    def module(self) -> "Llama":
        """The flax module this config describes (so every function of :mod:`longhorizon.lm.model`,
        :mod:`longhorizon.lm.generate` and the GRPO trainer runs it unchanged)."""
        return Llama(self)


def config_from_hf(hf: Mapping, dtype: str = "float32") -> LlamaConfig:
    """A :class:`LlamaConfig` from a ``transformers`` ``config.json`` dict; features this module lacks are refused."""
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise UsageError(f"model_type {family!r} is not supported; use a checkpoint of one of {FAMILIES}.")
    if hf.get("hidden_act", "silu") != "silu":
        raise UsageError(f"hidden_act {hf['hidden_act']!r} is not supported; Llama-family MLPs use 'silu'.")
    # transformers 4 writes rope_theta / rope_scaling at the top level, transformers 5 one rope_parameters dict
    rope = {**(hf.get("rope_scaling") or {}), **(hf.get("rope_parameters") or {})}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if hf.get("mlp_bias"):
        raise UsageError("mlp_bias=true is not supported; use a checkpoint whose MLP has no biases.")
    if family != "qwen2" and hf.get("attention_bias"):
        raise UsageError(f"attention_bias=true (biases on q/k/v/o) is not supported for {family}; use a checkpoint without them.")
    if hf.get("use_sliding_window") or any(t != "full_attention" for t in hf.get("layer_types") or []):
        raise UsageError("sliding-window attention is not supported; use a checkpoint whose layers all use full attention.")
    n_heads = int(hf["num_attention_heads"])
    return LlamaConfig(
        vocab_size=int(hf["vocab_size"]),
        d_model=int(hf["hidden_size"]),
        n_layers=int(hf["num_hidden_layers"]),
        n_heads=n_heads,
        n_kv_heads=int(hf.get("num_key_value_heads") or n_heads),
        d_ff=int(hf["intermediate_size"]),
        head_size=int(hf.get("head_dim") or 0),
        rope_base=float(rope.get("rope_theta", hf.get("rope_theta", 10_000.0))),
        rope_type=rope_type,
        rope_factor=float(rope.get("factor", 1.0)),
        rope_low_freq_factor=float(rope.get("low_freq_factor", 1.0)),
        rope_high_freq_factor=float(rope.get("high_freq_factor", 4.0)),
        rope_original_max_len=int(rope.get("original_max_position_embeddings", 8192)),
        rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        qkv_bias=family == "qwen2",
        qk_norm=family == "qwen3",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_len=int(hf.get("max_position_embeddings", 2048)),
        dtype=dtype,
    )


def config_from_gguf_spec(spec, dtype: str = "float32") -> LlamaConfig:
    """A :class:`LlamaConfig` from a GGUF checkpoint's spec (:class:`longhorizon.lm.checkpoints.gguf_file.CheckpointSpec`)."""
    if spec.architecture not in FAMILIES:
        raise UsageError(f"GGUF architecture {spec.architecture!r} is not supported; use a checkpoint of one of {FAMILIES}.")
    return LlamaConfig(
        vocab_size=spec.vocab_size, d_model=spec.d_model, n_layers=spec.n_layers, n_heads=spec.n_heads,
        n_kv_heads=spec.n_kv_heads, d_ff=spec.ffn_dim, head_size=spec.head_dim, rope_base=spec.rope_base,
        rms_eps=spec.rms_eps, qkv_bias=spec.architecture == "qwen2", qk_norm=spec.architecture == "qwen3",
        tie_embeddings=spec.tied_output, max_len=spec.context_length, dtype=dtype,
    )


def rope_frequencies(cfg: LlamaConfig) -> jax.Array:
    """Rotary frequencies ``f_i = base^(-2i/d)``, scaled as the checkpoint asks.

    * linear: ``f_i / factor`` (positions interpolated by ``factor``);
    * llama3: with wavelength ``w_i = 2 pi / f_i`` and pretraining context ``L``, frequencies with
      ``w_i > L / low`` become ``f_i / factor``, those with ``w_i < L / high`` stay, and in between
      ``(1 - s) f_i / factor + s f_i`` with ``s = (L / w_i - low) / (high - low)``.
    """
    d = cfg.head_dim
    freqs = cfg.rope_base ** (-jnp.arange(0, d // 2, dtype=jnp.float32) * 2.0 / d)
    if cfg.rope_type == "linear":
        return freqs / cfg.rope_factor
    if cfg.rope_type == "llama3":
        low, high, context = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor, cfg.rope_original_max_len
        wavelength = 2 * math.pi / freqs
        smooth = (context / wavelength - low) / (high - low)
        medium = (1 - smooth) * freqs / cfg.rope_factor + smooth * freqs
        return jnp.where(wavelength > context / low, freqs / cfg.rope_factor,
                         jnp.where(wavelength < context / high, freqs, medium))
    return freqs


class RMSNorm(nn.Module):
    """``w * x / sqrt(mean(x^2) + eps)``, normalised in float32 then cast back before the weight (as HF does)."""

    eps: float
    dtype: str

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.dtype)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return scale * normed.astype(x.dtype)


class Block(nn.Module):
    cfg: LlamaConfig

    @nn.compact
    def __call__(self, x, positions, mask, kv, index, attend=None, layer=0):
        cfg = self.cfg
        dense = lambda heads, name, bias: nn.DenseGeneral(  # noqa: E731
            (heads, cfg.head_dim), use_bias=bias, dtype=cfg.dtype, param_dtype=cfg.dtype, name=name)
        h = RMSNorm(cfg.rms_eps, cfg.dtype, name="attn_norm")(x)
        q, k = dense(cfg.n_heads, "q", cfg.qkv_bias)(h), dense(cfg.n_kv_heads, "k", cfg.qkv_bias)(h)
        if cfg.qk_norm:
            q, k = RMSNorm(cfg.rms_eps, cfg.dtype, name="q_norm")(q), RMSNorm(cfg.rms_eps, cfg.dtype, name="k_norm")(k)
        freqs = rope_frequencies(cfg)
        q, k = rotary(q, positions, cfg.rope_base, freqs), rotary(k, positions, cfg.rope_base, freqs)
        v = dense(cfg.n_kv_heads, "v", cfg.qkv_bias)(h)
        if kv is not None:
            k, v, (cache_k, cache_v) = write_layer_cache(kv, k, v, index)
        # query heads g*R .. g*R+R-1 read kv head g (R = n_heads / n_kv_heads), in either attention
        attn = dense_attention(q, k, v, mask) if attend is None else attend(q, k, v, layer)
        x = x + nn.DenseGeneral(cfg.d_model, axis=(-2, -1), use_bias=False, dtype=cfg.dtype, param_dtype=cfg.dtype,
                                name="o")(attn)
        h = RMSNorm(cfg.rms_eps, cfg.dtype, name="mlp_norm")(x)
        linear = lambda n, name: nn.Dense(n, use_bias=False, dtype=cfg.dtype, param_dtype=cfg.dtype, name=name)  # noqa: E731
        x = x + linear(cfg.d_model, "down")(jax.nn.silu(linear(cfg.d_ff, "gate")(h)) * linear(cfg.d_ff, "up")(h))
        return x, None if kv is None else (cache_k, cache_v)


class Llama(nn.Module):
    """The decoder. Its blocks' weights are stacked along a leading layer axis (``params["blocks"]``, each leaf
    ``[n_layers, ...]``) and run by one ``lax.scan``: the program holds one block whatever the depth, so
    compilation time does not grow with the number of layers, and the logits equal a layer-by-layer loop's."""

    cfg: LlamaConfig

    @nn.compact
    def __call__(self, tokens, positions, kv_valid, cache: KVCache | None = None, index=0, attend=None, logits_at=None):
        """``tokens, positions: [B, T]``; ``kv_valid: [B, S]`` (S = T without a cache, cache slots with one).

        Query slot ``i`` attends to key slot ``j`` iff ``j <= i`` and ``kv_valid[b, j]``; with a
        cache, the ``T`` tokens occupy slots ``index .. index+T-1``. ``attend(q, k, v, layer)``
        replaces that masked attention as in :class:`longhorizon.lm.model.Transformer` (``q`` has
        ``n_heads`` heads, ``k, v`` ``n_kv_heads``; ``layer`` is a traced index), so a GRPO group reads
        one copy of its prompt. ``logits_at`` computes the head only at those positions, as in the Transformer.
        Returns ``(logits [B, T or K, V] float32, new_cache or None)``.
        """
        cfg = self.cfg
        embed = nn.Embed(cfg.vocab_size, cfg.d_model, dtype=cfg.dtype, param_dtype=cfg.dtype, name="embed")
        x = rows_sharded(embed(tokens))  # the scan carries x split by rows from the start
        blocks = self.param("blocks", init_blocks, cfg)
        mask = causal_slot_mask(tokens.shape[1], kv_valid, cache, index) if attend is None else None
        block = Block(cfg, parent=None)

        def layer_step(carry, layer_in):
            x, kv = carry
            x = rows_sharded(x)  # on a mesh: every layer runs on each device's own rows (a no-op without one)
            weights, layer = layer_in
            x, kv = block.apply({"params": weights}, x, positions, mask, None if kv is None else (*kv, layer), index,
                                attend, layer)
            return (x, kv), None

        # the cache is carried whole and written in place at each layer's index (a scanned output would copy it)
        kv = None if cache is None else (cache.k, cache.v)
        (x, kv), _ = jax.lax.scan(layer_step, (x, kv), (blocks, jnp.arange(cfg.n_layers)))
        x = RMSNorm(cfg.rms_eps, cfg.dtype, name="norm")(rows_sharded(x) if logits_at is None else x[:, logits_at])
        if cfg.tie_embeddings:
            logits = embed.attend(x)
        else:
            logits = nn.Dense(cfg.vocab_size, use_bias=False, dtype=cfg.dtype, param_dtype=cfg.dtype, name="lm_head")(x)
        return logits.astype(jnp.float32), None if kv is None else KVCache(*kv)


def init_blocks(key: jax.Array, cfg: LlamaConfig):
    """Every block's initial weights, stacked: leaves ``[n_layers, ...]`` (each layer from its own key)."""
    x, positions = jnp.zeros((1, 2, cfg.d_model), cfg.dtype), jnp.zeros((1, 2), jnp.int32)
    mask = jnp.ones((1, 2, 2), bool)
    one = lambda k: Block(cfg, parent=None).init(k, x, positions, mask, None, 0)["params"]  # noqa: E731
    return jax.vmap(one)(jax.random.split(key, cfg.n_layers))


def layer(params, i: int):
    """Block ``i``'s weights (the slice of every stacked leaf of ``params["blocks"]``)."""
    return jax.tree_util.tree_map(lambda w: w[i], params["blocks"])


def init_params(key: jax.Array, cfg: LlamaConfig):
    tokens = jnp.zeros((1, 2), jnp.int32)
    return Llama(cfg).init(key, tokens, jnp.zeros((1, 2), jnp.int32), jnp.ones((1, 2), bool))["params"]


def params_from_hf(weights: Mapping[str, np.ndarray], cfg: LlamaConfig):
    """This module's parameters from HF-named arrays (torch ``Linear`` weights are ``[out, in]``).

    A tied checkpoint may omit ``lm_head.weight``; an untied one must have it. Missing or
    misshapen tensors are refused by name.
    """
    h, kvh, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim

    def get(name, shape):
        if name not in weights:
            raise UsageError(f"the checkpoint has no tensor {name!r}; it does not match its config.json ({cfg.n_layers} layers).")
        w = np.asarray(weights[name], np.float32)
        if w.shape != shape:
            raise UsageError(f"tensor {name!r} has shape {w.shape}, the config implies {shape}; the checkpoint does not match its config.json.")
        return w.astype(jnp.dtype(cfg.dtype))  # numpy until the end: the stacking below copies once

    def proj(name, heads):  # [heads*d, d_model] -> kernel [d_model, heads, d]
        out = {"kernel": get(f"{name}.weight", (heads * d, cfg.d_model)).T.reshape(cfg.d_model, heads, d)}
        if cfg.qkv_bias:
            out["bias"] = get(f"{name}.bias", (heads * d,)).reshape(heads, d)
        return out

    params = {"embed": {"embedding": get("model.embed_tokens.weight", (cfg.vocab_size, cfg.d_model))},
              "norm": {"scale": get("model.norm.weight", (cfg.d_model,))}}
    layers = []
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        layers.append({
            "attn_norm": {"scale": get(p + "input_layernorm.weight", (cfg.d_model,))},
            "q": proj(p + "self_attn.q_proj", h),
            "k": proj(p + "self_attn.k_proj", kvh),
            "v": proj(p + "self_attn.v_proj", kvh),
            **({"q_norm": {"scale": get(p + "self_attn.q_norm.weight", (d,))},
                "k_norm": {"scale": get(p + "self_attn.k_norm.weight", (d,))}} if cfg.qk_norm else {}),
            "o": {"kernel": get(p + "self_attn.o_proj.weight", (cfg.d_model, h * d)).T.reshape(h, d, cfg.d_model)},
            "mlp_norm": {"scale": get(p + "post_attention_layernorm.weight", (cfg.d_model,))},
            "gate": {"kernel": get(p + "mlp.gate_proj.weight", (cfg.d_ff, cfg.d_model)).T},
            "up": {"kernel": get(p + "mlp.up_proj.weight", (cfg.d_ff, cfg.d_model)).T},
            "down": {"kernel": get(p + "mlp.down_proj.weight", (cfg.d_model, cfg.d_ff)).T},
        })
    params["blocks"] = jax.tree_util.tree_map(lambda *ws: np.stack(ws), *layers)
    del layers
    if not cfg.tie_embeddings:
        params["lm_head"] = {"kernel": get("lm_head.weight", (cfg.vocab_size, cfg.d_model)).T}
    return jax.tree_util.tree_map(jnp.asarray, params)


def load_hf_folder(folder: str | Path, dtype: str = "float32"):
    """``(config, params)`` from a Hugging Face model folder: ``config.json`` and one or more ``*.safetensors`` shards."""
    from safetensors.numpy import load_file  # the `lm` extra

    folder = Path(folder)
    shards = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not (folder / "config.json").is_file() or not shards:
        raise UsageError(f"{folder} is not a Hugging Face checkpoint folder; give a folder with config.json and *.safetensors files.")
    cfg = config_from_hf(json.loads((folder / "config.json").read_text()), dtype=dtype)
    weights = {}
    for shard in shards:
        weights.update(load_file(shard))
    return cfg, params_from_hf(weights, cfg)


def params_to_hf(params, cfg: LlamaConfig) -> dict[str, np.ndarray]:
    """The inverse of :func:`params_from_hf`: HF-named float32 arrays (``lm_head.weight`` only when untied)."""
    h, kvh, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    f32 = lambda x: np.ascontiguousarray(np.asarray(x, np.float32))  # noqa: E731
    out = {"model.embed_tokens.weight": f32(params["embed"]["embedding"]), "model.norm.weight": f32(params["norm"]["scale"])}
    for i in range(cfg.n_layers):
        p, b = f"model.layers.{i}.", layer(params, i)
        out[p + "input_layernorm.weight"] = f32(b["attn_norm"]["scale"])
        out[p + "post_attention_layernorm.weight"] = f32(b["mlp_norm"]["scale"])
        for name, heads in (("q", h), ("k", kvh), ("v", kvh)):
            out[p + f"self_attn.{name}_proj.weight"] = f32(b[name]["kernel"].reshape(cfg.d_model, heads * d).T)
            if cfg.qkv_bias:
                out[p + f"self_attn.{name}_proj.bias"] = f32(b[name]["bias"].reshape(heads * d))
        if cfg.qk_norm:
            out[p + "self_attn.q_norm.weight"] = f32(b["q_norm"]["scale"])
            out[p + "self_attn.k_norm.weight"] = f32(b["k_norm"]["scale"])
        out[p + "self_attn.o_proj.weight"] = f32(b["o"]["kernel"].reshape(h * d, cfg.d_model).T)
        for name in ("gate", "up", "down"):
            out[p + f"mlp.{name}_proj.weight"] = f32(b[name]["kernel"].T)
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = f32(params["lm_head"]["kernel"].T)
    return out


def config_to_hf(cfg: LlamaConfig) -> dict:
    """A ``config.json`` dict that :func:`config_from_hf` reads back to ``cfg`` (transformers 4 key names, which 5 also reads)."""
    family = "qwen3" if cfg.qk_norm else "qwen2" if cfg.qkv_bias else "llama"
    architecture = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[family]
    scaling = None
    if cfg.rope_type == "linear":
        scaling = {"rope_type": "linear", "factor": cfg.rope_factor}
    elif cfg.rope_type == "llama3":
        scaling = {"rope_type": "llama3", "factor": cfg.rope_factor, "low_freq_factor": cfg.rope_low_freq_factor,
                   "high_freq_factor": cfg.rope_high_freq_factor,
                   "original_max_position_embeddings": cfg.rope_original_max_len}
    return {
        "architectures": [architecture], "model_type": family, "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "intermediate_size": cfg.d_ff,
        **({"head_dim": cfg.head_size} if cfg.head_size else {}), "hidden_act": "silu", "rope_theta": cfg.rope_base, "rope_scaling": scaling, "rms_norm_eps": cfg.rms_eps,
        "tie_word_embeddings": cfg.tie_embeddings, "max_position_embeddings": cfg.max_len,
        "torch_dtype": "float32",
    }


def save_hf_folder(folder: str | Path, params, cfg: LlamaConfig) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (float32) that ``transformers`` ``from_pretrained`` loads."""
    from safetensors.numpy import save_file  # the `lm` extra

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config_to_hf(cfg), indent=2) + "\n")
    save_file(params_to_hf(params, cfg), folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def forward(params, cfg: LlamaConfig, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """Causal logits ``[B, T, V]`` of left-padded ``tokens`` (``valid`` marks real tokens), no cache."""
    logits, _ = Llama(cfg).apply({"params": params}, tokens, positions_from_valid(valid), valid)
    return logits


def forward_layer_by_layer(params, cfg: LlamaConfig, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """:func:`forward` with the Blocks applied one after another in Python (an unrolled program, as the model was
    before its layers were stacked): the reference the scanned model is checked against, bit for bit."""
    x = params["embed"]["embedding"][tokens].astype(cfg.dtype)
    positions, mask = positions_from_valid(valid), causal_slot_mask(tokens.shape[1], valid, None, 0)
    for i in range(cfg.n_layers):
        x, _ = Block(cfg).apply({"params": layer(params, i)}, x, positions, mask, None, 0)
    x = RMSNorm(cfg.rms_eps, cfg.dtype).apply({"params": params["norm"]}, x)
    head = params["embed"]["embedding"].T if cfg.tie_embeddings else params["lm_head"]["kernel"]
    return (x @ head).astype(jnp.float32)


def greedy_generate(params, cfg: LlamaConfig, prompt: jax.Array, valid: jax.Array, new_tokens: int) -> jax.Array:
    """``new_tokens`` argmax tokens after each left-padded prompt ``[B, P]``, decoded with a KV cache.

    The prompt fills slots ``0 .. P-1`` in one call; each new token is written to the next slot
    at the next position. No stop token: exactly ``new_tokens`` columns come back.
    """
    b, p = prompt.shape
    if p + new_tokens > cfg.max_len:
        raise UsageError(
            f"{p} prompt slots + {new_tokens} new tokens exceed the model's context of {cfg.max_len}; shorten the prompt or generate fewer tokens."
        )
    model = Llama(cfg)
    slots_valid = jnp.concatenate([valid.astype(bool), jnp.ones((b, new_tokens), bool)], axis=1)
    positions = positions_from_valid(valid)
    logits, cache = model.apply({"params": params}, prompt, positions, slots_valid,
                                KVCache.zeros(cfg, b, p + new_tokens), 0)
    token = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)

    def step(carry, i):
        token, cache = carry
        pos = positions[:, -1:] + 1 + i
        logits, cache = model.apply({"params": params}, token[:, None], pos, slots_valid, cache, p + i)
        nxt = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)
        return (nxt, cache), token

    (_, _), out = jax.lax.scan(step, (token, cache), jnp.arange(new_tokens))
    return out.T
