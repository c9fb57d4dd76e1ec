"""Batched sampling under jit with a KV cache.

``generate`` prefills each (left-padded) prompt once into a cache of its own, then decodes one
token per step inside a ``lax.while_loop`` that stops as soon as every sequence has emitted one of
its stop ids (``eos_ids``: an instruct model ends its turn with e.g. ``<|im_end|>`` as well as EOS);
a group's rows read their prompt's single cached copy and keep a cache of ``max_new_tokens``
slots for their own tokens. A finished sequence emits PAD with ``valid = False`` from then on.

Per-token log-probabilities are exact: ``log softmax(logits / temperature)[token]`` of the
distribution the token was drawn from *before* top-p truncation (TRL's convention, so that
importance ratios compare the sampler with the trainer's teacher-forced pass,
:func:`longhorizon.lm.model.token_logprobs`). With ``temperature == 0`` decoding is greedy and
the log-probabilities are those of the untempered distribution.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from longhorizon.core.distributions import categorical_sample_inverse_cdf
from longhorizon.lm.model import KVCache, ModelConfig, cached_prefix_attention, positions_from_valid, prefill_prompts
from longhorizon.lm.tokenizer import EOS, PAD


class Generation(NamedTuple):
    tokens: jax.Array  # [B, N] int32 (EOS included, PAD after it)
    logprobs: jax.Array  # [B, N] float32 (0 where not valid)
    valid: jax.Array  # [B, N] bool: generated tokens, EOS included
    steps: jax.Array  # scalar: decoding steps actually run


def top_p_filter(logits: jax.Array, top_p: float) -> jax.Array:
    """Nucleus filter: keep the smallest set of most likely tokens whose mass reaches ``top_p``.

    A token is kept iff the mass of the tokens strictly more likely than it is below ``top_p``
    (so the most likely token is always kept); the rest get ``-inf``.
    """
    if top_p >= 1.0:
        return logits
    sorted_logits = jnp.sort(logits, axis=-1)[..., ::-1]
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep = mass_before < top_p
    threshold = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits >= threshold, logits, -jnp.inf)


def sample_token(key, logits, temperature: float, top_p: float):
    """One token per row and its log-probability (see the module docstring)."""
    if temperature <= 0:
        token = jnp.argmax(logits, axis=-1)
        logz = jax.nn.log_softmax(logits, axis=-1)
    else:
        scaled = logits / temperature
        logz = jax.nn.log_softmax(scaled, axis=-1)
        token = categorical_sample_inverse_cdf(key, top_p_filter(scaled, top_p))
    logp = jnp.take_along_axis(logz, token[:, None], axis=-1)[:, 0]
    return token.astype(jnp.int32), logp


@functools.partial(
    jax.jit, static_argnames=("cfg", "max_new_tokens", "temperature", "top_p", "eos_ids", "pad_id", "group_size")
)
def generate(
    params,
    prompt: jax.Array,
    prompt_valid: jax.Array,
    key: jax.Array,
    *,
    cfg: ModelConfig,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    eos_ids: tuple[int, ...] = (EOS,),
    pad_id: int = PAD,
    group_size: int = 1,
) -> Generation:
    """Sample up to ``max_new_tokens`` after each left-padded prompt (every row needs >= 1 valid token).

    With ``group_size = S`` each of the ``G`` prompts is prefilled once and continued by ``S`` rows
    (a GRPO group): the result has ``G * S`` rows, rows ``g*S .. g*S+S-1`` continuing prompt ``g``.
    ``cfg`` is any model config (:class:`ModelConfig`, :class:`longhorizon.lm.llama.LlamaConfig`).
    """
    model = cfg.module()
    stops = jnp.asarray(eos_ids, jnp.int32)
    n = max_new_tokens
    logits, prompt_cache, next_pos = prefill_prompts(params, cfg, prompt, prompt_valid)
    logits, next_pos = jnp.repeat(logits, group_size, axis=0), jnp.repeat(next_pos, group_size)
    b = logits.shape[0]
    cache = KVCache.zeros(cfg, b, n)  # the rows' own tokens; the prompts' keys stay in prompt_cache

    def cond(carry):
        t, done = carry[0], carry[4]
        return (t < n) & ~jnp.all(done)

    def body(carry):
        t, logits, cache, kv_valid, done, out_tok, out_lp, out_valid, key = carry
        key, sub = jax.random.split(key)
        token, logp = sample_token(sub, logits, temperature, top_p)
        valid = ~done
        token = jnp.where(valid, token, pad_id)
        out_tok = out_tok.at[:, t].set(token)
        out_lp = out_lp.at[:, t].set(jnp.where(valid, logp, 0.0))
        out_valid = out_valid.at[:, t].set(valid)
        done = done | jnp.isin(token, stops)
        kv_valid = kv_valid.at[:, t].set(valid)
        attend = cached_prefix_attention(prompt_cache, prompt_valid, kv_valid, group_size)
        new_logits, cache = model.apply(
            {"params": params}, token[:, None], (next_pos + t)[:, None], None, cache, t, attend=attend
        )
        return (t + 1, new_logits[:, -1], cache, kv_valid, done, out_tok, out_lp, out_valid, key)

    carry = (
        jnp.int32(0),
        logits,
        cache,
        jnp.zeros((b, n), bool),
        jnp.zeros((b,), bool),
        jnp.full((b, n), pad_id, jnp.int32),
        jnp.zeros((b, n), jnp.float32),
        jnp.zeros((b, n), bool),
        key,
    )
    t, _, _, _, _, tokens, logprobs, valid, _ = jax.lax.while_loop(cond, body, carry)
    return Generation(tokens, logprobs, valid, t)


@functools.partial(jax.jit, static_argnames=("cfg", "max_new_tokens", "eos_ids", "pad_id"))
def greedy_no_cache(params, prompt, prompt_valid, *, cfg: ModelConfig, max_new_tokens: int,
                    eos_ids: tuple[int, ...] = (EOS,), pad_id: int = PAD):
    """Reference greedy decoder that re-runs the full forward pass each step (no cache).

    Quadratic and slow: it exists to test :func:`generate` against.
    """
    model = cfg.module()
    b, p = prompt.shape
    seq = jnp.concatenate([prompt, jnp.full((b, max_new_tokens), pad_id, jnp.int32)], axis=1)
    valid = jnp.concatenate([prompt_valid.astype(bool), jnp.zeros((b, max_new_tokens), bool)], axis=1)

    def step(carry, t):
        seq, valid, done = carry
        logits, _ = model.apply({"params": params}, seq, positions_from_valid(valid), valid)
        token = jnp.argmax(logits[:, p + t - 1], axis=-1).astype(jnp.int32)
        ok = ~done
        token = jnp.where(ok, token, pad_id)
        seq = seq.at[:, p + t].set(token)
        valid = valid.at[:, p + t].set(ok)
        return (seq, valid, done | jnp.isin(token, jnp.asarray(eos_ids, jnp.int32))), None

    (seq, valid, _), _ = jax.lax.scan(step, (seq, valid, jnp.zeros((b,), bool)), jnp.arange(max_new_tokens))
    return seq[:, p:], valid[:, p:]
