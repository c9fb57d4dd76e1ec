"""Decoder-only transformer policy (flax linen) with an explicit, functional KV cache.

One forward function serves three uses:

* training / scoring: ``cache=None``, the whole sequence at once with a causal mask;
* prefill: the prompt written into an empty cache at slot 0;
* decoding: one new token per call written at slot ``index``.

A GRPO group's rows share their prompt: an ``attend`` function (``Transformer.__call__``) lets
them read one copy of the prompt's keys and values, in the update
(:func:`shared_prompt_logprobs`) and in decoding (:func:`cached_prefix_attention`).

Sequences in a batch are aligned by *slot* (column). Prompts are left-padded, so padding
slots are masked out as keys through ``kv_valid`` and positions (for rotary or learned
position embeddings) count only valid tokens: ``position = cumsum(valid) - 1``. A padded and
an unpadded copy of the same sequence therefore see the same positions and attend to the same
keys.

Attention of query slot i to key slot j is allowed iff ``j <= i`` and ``kv_valid[b, j]``.
Pre-norm blocks: ``x += Attn(LN(x)); x += MLP(LN(x))``; the output layer is tied to the token
embedding.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError

POSITIONS = ("rope", "learned")
BATCH_AXES = ("data", "fsdp")  # the mesh axes that split batch rows (longhorizon.lm.sharding)


def rows_sharded(x: jax.Array) -> jax.Array:
    """``x`` with its rows (axis 0) split over the batch axes of the mesh set by ``jax.set_mesh`` (the sharded
    update sets it), else ``x`` itself. Without it XLA's partitioner may split activations along the model
    width that FSDP splits the weights by, and gather whole-batch activations (the logits too) on every device."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or not set(BATCH_AXES) <= set(mesh.axis_names):
        return x
    if x.shape[0] % math.prod(mesh.shape[a] for a in BATCH_AXES):
        return x
    return jax.lax.with_sharding_constraint(x, jax.sharding.PartitionSpec(BATCH_AXES))


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 50
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 0  # 0 means 4 * d_model
    max_len: int = 256  # only bounds learned position embeddings
    positions: str = "rope"
    rope_base: float = 10_000.0
    dtype: str = "float32"  # compute dtype ("bfloat16" on accelerators); parameters stay float32

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_len"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"model {name} must be a positive integer, got {getattr(self, name)}; set it to 1 or more.")
        if self.d_model % self.n_heads:
            raise UsageError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; pick n_heads that divides d_model."
            )
        if self.positions not in POSITIONS:
            raise UsageError(f"positions={self.positions!r} is unknown; use one of {POSITIONS}.")
        if self.positions == "rope" and self.head_dim % 2:
            raise UsageError(f"rotary positions need an even head size, got {self.head_dim}; change d_model or n_heads.")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise UsageError(f"dtype={self.dtype!r} is unknown; use float32, bfloat16 or float16.")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads

    @property
    def context_length(self) -> int | None:
        """Tokens a sequence may hold (learned positions end at ``max_len``; rotary ones do not)."""
        return self.max_len if self.positions == "learned" else None

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    def module(self) -> "Transformer":
        """The flax module this config describes (every function here dispatches through it)."""
        return Transformer(self)


class KVCache(NamedTuple):
    """Keys and values of every layer: ``[n_layers, batch, slots, heads, head_dim]`` each."""

    k: jax.Array
    v: jax.Array

    @staticmethod
    def zeros(cfg, batch: int, slots: int) -> KVCache:
        """An empty cache for ``cfg`` (any model config: ``kv_heads`` key/value heads of ``head_dim``)."""
        shape = (cfg.n_layers, batch, slots, cfg.kv_heads, cfg.head_dim)
        return KVCache(jnp.zeros(shape, cfg.dtype), jnp.zeros(shape, cfg.dtype))


def rotary(x: jax.Array, positions: jax.Array, base: float, freqs: jax.Array | None = None) -> jax.Array:
    """Rotary embedding (RoFormer): rotate feature pairs (x1_i, x2_i) by angle pos * base^(-2i/d).

    ``x`` is ``[B, T, H, D]``, ``positions`` is ``[B, T]``; halves-split convention. ``freqs``
    (``[D/2]``) replaces ``base^(-2i/d)`` for scaled rotary embeddings.
    """
    d = x.shape[-1]
    if freqs is None:
        freqs = base ** (-jnp.arange(0, d // 2, dtype=jnp.float32) * 2.0 / d)
    angles = positions[..., None].astype(jnp.float32) * freqs  # [B, T, D/2]
    sin, cos = jnp.sin(angles)[:, :, None, :], jnp.cos(angles)[:, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.astype(x.dtype)


def causal_slot_mask(t: int, kv_valid: jax.Array, cache: "KVCache | None", index) -> jax.Array:
    """``[B, T, S]``: query slot ``i`` sees key slot ``j`` iff ``j <= i`` and ``kv_valid[b, j]``. Without a
    cache the ``T`` tokens are slots ``0 .. T-1``; with one they occupy ``index .. index+T-1`` of its slots."""
    if cache is None:
        q_slots, k_slots = jnp.arange(t), jnp.arange(t)
    else:
        q_slots, k_slots = index + jnp.arange(t), jnp.arange(cache.k.shape[2])
    return (k_slots[None, :] <= q_slots[:, None])[None] & kv_valid[:, None, :].astype(bool)


def write_layer_cache(kv, k, v, index):
    """Write one layer's new keys/values ``[B, T, Hk, D]`` at slot ``index`` of the whole cache (in place
    under jit); ``kv = (cache_k, cache_v, layer)``. Returns ``(k, v, (cache_k, cache_v))`` with ``k, v``
    the layer's whole updated cache, what attention then reads."""
    cache_k, cache_v, layer = kv
    cache_k = jax.lax.dynamic_update_slice(cache_k, k[None].astype(cache_k.dtype), (layer, 0, index, 0, 0))
    cache_v = jax.lax.dynamic_update_slice(cache_v, v[None].astype(cache_v.dtype), (layer, 0, index, 0, 0))
    return cache_k[layer], cache_v[layer], (cache_k, cache_v)


def _masked_softmax(scores: jax.Array, mask: jax.Array, dtype) -> jax.Array:
    """Softmax over the last axis of float32 ``scores`` where ``mask`` holds (a fully masked row is uniform, never NaN)."""
    return jax.nn.softmax(jnp.where(mask, scores, jnp.finfo(jnp.float32).min), axis=-1).astype(dtype)


def _grouped(q: jax.Array, kv_heads: int) -> jax.Array:
    """``[..., H, D] -> [..., Hk, H/Hk, D]``: query heads ``g*R .. g*R+R-1`` read key/value head ``g``
    (grouped-query attention; ``R = 1`` is multi-head attention)."""
    return q.reshape(q.shape[:-2] + (kv_heads, q.shape[-2] // kv_heads, q.shape[-1]))


def dense_attention(q, k, v, mask):
    """``softmax(q k^T / sqrt(d), masked) v`` for ``q [B, T, H, D]``, ``k, v [B, S, Hk, D]``, ``mask [B, T, S]``.

    ``Hk`` divides ``H``; each key/value head serves ``H / Hk`` consecutive query heads without being copied.
    """
    b, t, h, d = q.shape
    qg = _grouped(q, k.shape[2])  # [B, T, Hk, R, D]
    scores = jnp.einsum("btgrd,bsgd->bgrts", qg, k).astype(jnp.float32) / math.sqrt(d)
    out = jnp.einsum("bgrts,bsgd->btgrd", _masked_softmax(scores, mask[:, None, None], v.dtype), v)
    return out.reshape(b, t, h, d)


def prefix_attention(q, prefix_k, prefix_v, own_k, own_v, mask):
    """Attention of grouped rows to their group's shared prefix and to their own keys.

    ``q [G, S, T, H, D]``; ``prefix_k, prefix_v [G, P, Hk, D]`` (one copy per group, read by its
    ``S`` rows); ``own_k, own_v [G, S, K, Hk, D]``; ``mask [G, S, 1, T, P + K]`` (prefix keys
    first). One softmax over both key sets: the attention of the concatenated rows
    ``[prefix_g, own]`` without a per-row copy of the prefix. ``Hk`` divides ``H`` (grouped-query
    attention, as in :func:`dense_attention`).
    """
    p = prefix_k.shape[1]
    g, s, t, h, d = q.shape
    qg = _grouped(q, prefix_k.shape[2])  # [G, S, T, Hk, R, D]
    scores = jnp.concatenate(
        [jnp.einsum("gsqhrd,gkhd->gshrqk", qg, prefix_k), jnp.einsum("gsqhrd,gskhd->gshrqk", qg, own_k)], axis=-1
    ).astype(jnp.float32) / math.sqrt(d)
    weights = _masked_softmax(scores, mask[:, :, :, None], own_v.dtype)
    out = jnp.einsum("gshrqk,gkhd->gsqhrd", weights[..., :p], prefix_v) + jnp.einsum(
        "gshrqk,gskhd->gsqhrd", weights[..., p:], own_v
    )
    return out.reshape(g, s, t, h, d)


def shared_prefix_attention(groups: int, group_size: int, prompt_valid, completion_valid):
    """Attention for one flat stream ``[G prompts of P tokens | G*S completions of N tokens]``.

    Prompt ``g``'s tokens attend causally to its valid tokens; each of its ``S`` completions
    attends to the whole prompt ``g`` (its keys and values are computed once, never repeated per
    row) and causally to its own valid tokens. This is the attention of the ``G*S`` concatenated
    rows ``[prompt_g, completion]``, restricted to distinct work.
    """
    g, s = groups, group_size
    p, n = prompt_valid.shape[1], completion_valid.shape[1]
    prompt_mask = jnp.tril(jnp.ones((p, p), bool))[None] & prompt_valid[:, None, :].astype(bool)  # [G, P, P]
    own_mask = jnp.tril(jnp.ones((n, n), bool))[None, None] & completion_valid.reshape(g, s, 1, n).astype(bool)
    to_prompt_mask = jnp.broadcast_to(prompt_valid.reshape(g, 1, 1, p).astype(bool), (g, s, n, p))
    completion_mask = jnp.concatenate([to_prompt_mask, own_mask], axis=-1)[:, :, None]  # [G, S, 1, N, P+N]

    def attend(q, k, v, layer):
        h, hk, d = q.shape[2], k.shape[2], q.shape[3]
        split = g * p
        qp, (kp, vp) = q[0, :split].reshape(g, p, h, d), (x[0, :split].reshape(g, p, hk, d) for x in (k, v))
        qc, (kc, vc) = q[0, split:].reshape(g, s, n, h, d), (x[0, split:].reshape(g, s, n, hk, d) for x in (k, v))
        prompt_out = dense_attention(qp, kp, vp, prompt_mask)
        completion_out = prefix_attention(qc, kp, vp, kc, vc, completion_mask)
        return jnp.concatenate([prompt_out.reshape(1, g * p, h, d), completion_out.reshape(1, g * s * n, h, d)], axis=1)

    return attend


def cached_prefix_attention(prefix: KVCache, prefix_valid, own_valid, group_size: int):
    """Decoding attention: rows ``g*S .. g*S+S-1`` read prompt ``g``'s cached keys (``prefix``,
    ``[L, G, P, H, D]``, stored once per group) and their own cache (valid slots ``own_valid [G*S, K]``)."""
    g, p = prefix_valid.shape
    s, k_slots = group_size, own_valid.shape[1]
    to_prefix = jnp.broadcast_to(prefix_valid.reshape(g, 1, 1, 1, p).astype(bool), (g, s, 1, 1, p))
    mask = jnp.concatenate([to_prefix, own_valid.reshape(g, s, 1, 1, k_slots).astype(bool)], axis=-1)

    def attend(q, k, v, layer):
        b, t, h, d = q.shape
        own = (x.reshape(g, s, k_slots, k.shape[2], d) for x in (k, v))
        out = prefix_attention(q.reshape(g, s, t, h, d), prefix.k[layer], prefix.v[layer], *own,
                               jnp.broadcast_to(mask, (g, s, 1, t, p + k_slots)))
        return out.reshape(b, t, h, d)

    return attend


class Block(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, x, positions, mask, kv, index, attend=None, layer=0):
        cfg = self.cfg
        h = nn.LayerNorm(dtype=cfg.dtype, name="ln_attn")(x)
        qkv = nn.DenseGeneral((3, cfg.n_heads, cfg.head_dim), dtype=cfg.dtype, name="qkv")(h)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if cfg.positions == "rope":
            q = rotary(q, positions, cfg.rope_base)
            k = rotary(k, positions, cfg.rope_base)
        if kv is not None:
            k, v, (cache_k, cache_v) = write_layer_cache(kv, k, v, index)
        attn = dense_attention(q, k, v, mask) if attend is None else attend(q, k, v, layer)
        x = x + nn.DenseGeneral(cfg.d_model, axis=(-2, -1), dtype=cfg.dtype, name="out")(attn)
        h = nn.LayerNorm(dtype=cfg.dtype, name="ln_mlp")(x)
        h = nn.Dense(cfg.ff_dim, dtype=cfg.dtype, name="up")(h)
        x = x + nn.Dense(cfg.d_model, dtype=cfg.dtype, name="down")(jax.nn.gelu(h))
        return x, None if kv is None else (cache_k, cache_v)


class Transformer(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, tokens, positions, kv_valid, cache: KVCache | None = None, index=0, attend=None, logits_at=None):
        """``tokens, positions: [B, T]``; ``kv_valid: [B, S]`` (S = T without a cache, cache slots with one).

        ``attend(q, k, v, layer) -> [B, T, H, D]`` replaces the masked dense attention (``kv_valid``
        is then unused; with a cache, ``k, v`` are the layer's whole updated cache): it lets one
        call run token streams that attend in other patterns, such as a GRPO group's completions
        reading their shared prompt (:func:`shared_prefix_attention`, :func:`cached_prefix_attention`).
        ``logits_at`` (int indices ``[K]`` into ``T``) computes the output head only at those
        positions (the head is a fifth of a small model's work; scoring needs it only where a
        completion token is predicted). Returns ``(logits [B, T or K, V] float32, new_cache or None)``.
        """
        cfg = self.cfg
        embed = nn.Embed(cfg.vocab_size, cfg.d_model, dtype=cfg.dtype, name="embed")
        x = embed(tokens)
        if cfg.positions == "learned":
            x = x + nn.Embed(cfg.max_len, cfg.d_model, dtype=cfg.dtype, name="pos_embed")(
                jnp.minimum(positions, cfg.max_len - 1)
            )
        t = tokens.shape[1]
        mask = causal_slot_mask(t, kv_valid, cache, index) if attend is None else None  # `attend` brings its own
        kv = None if cache is None else (cache.k, cache.v)
        for i in range(cfg.n_layers):
            x = rows_sharded(x)  # on a mesh: every layer runs on each device's own rows (a no-op without one)
            x, kv = Block(cfg, name=f"block_{i}")(x, positions, mask, None if kv is None else (*kv, i), index, attend, i)
        x = nn.LayerNorm(dtype=cfg.dtype, name="ln_final")(x if logits_at is None else x[:, logits_at])
        logits = embed.attend(x).astype(jnp.float32)
        return logits, None if kv is None else KVCache(*kv)


def positions_from_valid(valid: jax.Array) -> jax.Array:
    """Position of each token counting only valid tokens before it (0 for leading padding)."""
    return jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=-1) - 1, 0)


def init_params(key: jax.Array, cfg: ModelConfig):
    tokens = jnp.zeros((1, 2), jnp.int32)
    return cfg.module().init(key, tokens, jnp.zeros((1, 2), jnp.int32), jnp.ones((1, 2), bool))["params"]


def count_params(params) -> int:
    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))


def forward(params, cfg: ModelConfig, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """Logits ``[B, T, V]`` for a whole (padded) sequence, no cache."""
    logits, _ = cfg.module().apply({"params": params}, tokens, positions_from_valid(valid), valid)
    return logits


def token_logprobs(params, cfg: ModelConfig, tokens: jax.Array, valid: jax.Array, temperature: float = 1.0):
    """Teacher-forced ``log pi(tokens[:, t+1] | tokens[:, :t+1])`` and the entropy of that distribution.

    Logits are divided by ``temperature`` first (the distribution the sampler drew from, before
    top-p truncation), as TRL does. Returns ``(logp [B, T-1], entropy [B, T-1])``.
    """
    return logp_entropy(forward(params, cfg, tokens, valid)[:, :-1], tokens[:, 1:], temperature)


def logp_entropy(logits: jax.Array, targets: jax.Array, temperature: float):
    """``log softmax(logits / temperature)[target]`` and the entropy of that distribution."""
    if temperature > 0:
        logits = logits / temperature
    logz = jax.nn.log_softmax(logits, axis=-1)
    logp = jnp.take_along_axis(logz, targets[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logz) * logz, axis=-1)
    return logp, entropy


def prefill_prompts(params, cfg: ModelConfig, prompt: jax.Array, prompt_valid: jax.Array):
    """Run ``G`` left-padded prompts once: ``(last_logits [G, V], cache [L, G, P, H, D], next_position [G])``.

    A GRPO group's rows then continue their prompt by reading this one copy of its keys and values
    (:func:`cached_prefix_attention`), so the prompt costs ``1/S`` of running it per row.
    """
    g, p = prompt.shape
    positions = positions_from_valid(prompt_valid)
    logits, cache = cfg.module().apply(
        {"params": params}, prompt, positions, prompt_valid.astype(bool), KVCache.zeros(cfg, g, p), 0,
        logits_at=np.array([p - 1]),
    )
    return logits[:, -1], cache, positions[:, -1] + 1


class ScoringStream(NamedTuple):
    """How a model call scores completions: run the module on ``tokens, positions, kv_valid`` with
    ``attend`` and ``logits_at`` (as :meth:`Transformer.__call__` takes them), then ``scores(logits)``
    gives ``(logp, entropy)`` of the completion tokens. The plain call and the layer-streamed one
    (:mod:`longhorizon.lm.offload`) share it, so both score exactly the same tokens."""

    tokens: jax.Array
    positions: jax.Array
    kv_valid: jax.Array | None
    attend: object
    logits_at: np.ndarray | None
    scores: object

    def logprobs(self, params, cfg) -> tuple[jax.Array, jax.Array]:
        logits, _ = cfg.module().apply({"params": params}, self.tokens, self.positions, self.kv_valid,
                                       attend=self.attend, logits_at=self.logits_at)
        return self.scores(logits)


def shared_prompt_stream(prompt, prompt_valid, completion, completion_valid, temperature: float = 1.0) -> ScoringStream:
    """The :class:`ScoringStream` of :func:`shared_prompt_logprobs` (one flat token stream, a shared-prefix ``attend``)."""
    g, p = prompt.shape
    rows, n = completion.shape
    s = rows // g
    prompt_positions = positions_from_valid(prompt_valid)
    completion_positions = jnp.repeat(prompt_positions[:, -1] + 1, s)[:, None] + jnp.arange(n)[None, :]
    tokens = jnp.concatenate([prompt.reshape(1, -1), completion.reshape(1, -1)], axis=1)
    positions = jnp.concatenate([prompt_positions.reshape(1, -1), completion_positions.reshape(1, -1)], axis=1)
    attend = shared_prefix_attention(g, s, prompt_valid, completion_valid)
    # the head runs only where a completion token is predicted: each prompt's last position and
    # every completion position but the last
    prompt_last = np.arange(1, g + 1) * p - 1
    completion_heads = (g * p + np.arange(rows)[:, None] * n + np.arange(n - 1)[None, :]).reshape(-1)

    def scores(logits):
        last = jnp.repeat(logits[0, :g], s, axis=0)
        logits = jnp.concatenate([last[:, None], logits[0, g:].reshape(rows, n - 1, -1)], axis=1)
        return logp_entropy(logits, completion, temperature)

    return ScoringStream(tokens, positions, None, attend, np.concatenate([prompt_last, completion_heads]), scores)


def shared_prompt_logprobs(params, cfg: ModelConfig, prompt, prompt_valid, completion, completion_valid,
                           temperature: float = 1.0):
    """Teacher-forced log-probs and entropies of ``completion [G*S, N]`` after ``prompt [G, P]``.

    Rows ``g*S .. g*S+S-1`` continue prompt ``g`` (a GRPO group). Equal to :func:`token_logprobs` on
    the concatenated ``[prompt_g, completion_row]`` rows restricted to the completion (up to float
    summation order), but each prompt is computed once per group instead of once per row: the
    prompts and completions run as one flat token stream through the dense layers, and
    :func:`shared_prefix_attention` lets every completion read its group's prompt keys directly
    (no per-row copy of them, so none to sum back under the gradient). With 36 prompt and 26
    completion tokens and groups of 8, half the tokens of the update.
    Returns ``(logp [G*S, N], entropy [G*S, N])``; entry ``j`` scores ``completion[:, j]``.
    """
    return shared_prompt_stream(prompt, prompt_valid, completion, completion_valid, temperature).logprobs(params, cfg)
