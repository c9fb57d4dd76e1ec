"""Supervised fine-tuning (teacher forcing) to make base policies.

Loss: the mean, over completion tokens (the target and its EOS; prompt tokens excluded), of
``-log pi(token | prefix)``. Sequences are ``BOS + prompt + target + EOS``, right-padded.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.lm.model import ModelConfig, forward
from longhorizon.lm.tasks import Problem
from longhorizon.lm.tokenizer import PAD, Tokenizer


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    steps: int = 2000
    batch_size: int = 64
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seq_len: int = 64  # padded length of prompt + completion (+ BOS, EOS)

    def __post_init__(self):
        for name in ("steps", "batch_size", "seq_len"):
            if getattr(self, name) < 1:
                raise UsageError(f"SFT {name} must be positive, got {getattr(self, name)}.")
        if self.learning_rate <= 0:
            raise UsageError(f"SFT learning_rate must be positive, got {self.learning_rate}.")


@functools.lru_cache(maxsize=32)
def make_optimizer(learning_rate: float, steps: int, warmup: int, weight_decay: float, max_grad_norm: float):
    warmup = max(1, min(warmup, steps))
    schedule = optax.warmup_cosine_decay_schedule(0.0, learning_rate, warmup, max(steps, warmup + 1), learning_rate * 0.1)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adamw(schedule, weight_decay=weight_decay))


def encode_sft(tokenizer: Tokenizer, problems: Sequence[Problem], seq_len: int):
    """``(tokens [B, L], valid [B, L], loss_mask [B, L-1])``; loss_mask marks targets of the completion."""
    tokens = np.full((len(problems), seq_len), PAD, np.int32)
    loss_mask = np.zeros((len(problems), seq_len - 1), np.float32)
    for b, p in enumerate(problems):
        prompt = tokenizer.encode(p.prompt, bos=True)
        target = tokenizer.encode(p.target, eos=True)
        row = prompt + target
        if len(row) > seq_len:
            raise UsageError(f"a training sequence has {len(row)} tokens but seq_len is {seq_len}; raise seq_len.")
        tokens[b, : len(row)] = row
        loss_mask[b, len(prompt) - 1 : len(row) - 1] = 1.0
    return tokens, tokens != PAD, loss_mask


def sft_loss(params, cfg: ModelConfig, tokens, valid, loss_mask):
    logits = forward(params, cfg, tokens, valid)[:, :-1]
    logz = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logz, tokens[:, 1:, None], axis=-1)[..., 0]
    correct = (jnp.argmax(logits, axis=-1) == tokens[:, 1:]).astype(jnp.float32)
    denom = jnp.maximum(loss_mask.sum(), 1.0)
    return (nll * loss_mask).sum() / denom, {"token_accuracy": (correct * loss_mask).sum() / denom}


@functools.partial(jax.jit, static_argnames=("cfg", "optimizer"), donate_argnums=(0, 1))
def sft_step(params, opt_state, tokens, valid, loss_mask, *, cfg: ModelConfig, optimizer):
    (loss, aux), grads = jax.value_and_grad(sft_loss, has_aux=True)(params, cfg, tokens, valid, loss_mask)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, {"loss": loss, **aux}


def train_sft(
    params,
    model_cfg: ModelConfig,
    tokenizer: Tokenizer,
    problems_for_step: Callable[[int], Sequence[Problem]],
    cfg: SFTConfig,
    *,
    log_every: int = 100,
    on_log: Callable[[dict], None] | None = None,
    start: dict | None = None,
    on_step_end: Callable[[dict], bool] | None = None,
):
    """Run teacher-forced steps up to ``cfg.steps``; ``problems_for_step(i)`` gives batch ``i``.

    Returns ``(params, history)``; ``on_log`` receives a metrics dict every ``log_every`` steps.
    ``start`` (``{"params", "opt_state", "step", "tokens"}``, as given to ``on_step_end``) resumes
    a run; ``on_step_end(state)`` is called after every step with that dict and stops the loop by
    returning True (its arrays are donated to the next step: copy them to the host to keep them).
    """
    optimizer = make_optimizer(cfg.learning_rate, cfg.steps, cfg.warmup_steps, cfg.weight_decay, cfg.max_grad_norm)
    if start is None:
        params = jax.tree_util.tree_map(jnp.array, params)  # private copy: the step donates its inputs
        opt_state, first, tokens_seen = optimizer.init(params), 0, 0
    else:
        params = jax.tree_util.tree_map(jnp.array, start["params"])
        opt_state = jax.tree_util.tree_map(jnp.array, start["opt_state"])
        first, tokens_seen = int(start["step"]), int(start["tokens"])
    history, t0, tokens_before = [], time.perf_counter(), tokens_seen
    for step in range(first, cfg.steps):
        tokens, valid, loss_mask = encode_sft(tokenizer, problems_for_step(step), cfg.seq_len)
        params, opt_state, metrics = sft_step(params, opt_state, tokens, valid, loss_mask, cfg=model_cfg, optimizer=optimizer)
        tokens_seen += int(valid.sum())
        if (step + 1) % log_every == 0 or step + 1 == cfg.steps:
            row = {k: float(v) for k, v in metrics.items()}
            if not np.isfinite(row["loss"]):
                raise TrainingDiverged(f"SFT loss became {row['loss']} at step {step + 1}; lower learning_rate.")
            row.update(step=step + 1, tokens=tokens_seen, tokens_per_s=(tokens_seen - tokens_before) / (time.perf_counter() - t0))
            history.append(row)
            if on_log:
                on_log(row)
        if on_step_end is not None and on_step_end({"params": params, "opt_state": opt_state, "step": step + 1,
                                                    "tokens": tokens_seen}):
            break
    return params, history
