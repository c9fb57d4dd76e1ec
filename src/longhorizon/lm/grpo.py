"""Group-relative policy optimisation (GRPO and its family) with TRL's names and semantics.

For each query, ``G`` completions ``o_1..o_G`` are sampled from ``pi_old`` and scored ``r_i``.

Advantages (``scale_rewards``)::

    A_i = r_i - mean_group(r)                                  "none"   (Dr. GRPO)
    A_i = (r_i - mean_group(r)) / (std_group(r) + 1e-4)        "group"  (GRPO)
    A_i = (r_i - mean_group(r)) / (std_batch(r) + 1e-4)        "batch"  (batch std, PPO-Lite)

with unbiased (n - 1) standard deviations, as ``torch.std`` computes them in TRL. Groups may
have different sizes (sGPO); a group of one has advantage 0.

Per-token loss, with the importance weight ``rho`` of ``importance_sampling_level``::

    l_t = -min(rho_t A_t, clip(rho_t, 1 - epsilon, 1 + epsilon_high) A_t) + beta k3_t
    k3_t = exp(log pi_ref - log pi_theta) - (log pi_ref - log pi_theta) - 1

    "token"     rho_t = pi_theta(o_t | .) / pi_old(o_t | .)                            (GRPO)
    "sequence"  rho_t = s_i = exp( sum_t M_it log(pi_theta / pi_old)_it / T_i )        (GSPO)

Reduction (``loss_type``), over the optimiser batch split into ``gradient_accumulation_steps``
micro-batches m (``M_t`` the token mask, ``T_i = sum_t M_it``, ``L`` = max_completion_length)::

    grpo     mean over micro-batches of  mean_i (sum_t M_it l_it / T_i)
    bnpo     mean over micro-batches of  sum_{i in m,t} M l / sum_{i in m,t} M
    dr_grpo  mean over micro-batches of  sum_{i in m,t} M l / (|m| L)
    dapo     sum_{all i,t} M l / sum_{all i,t} M          (tokens of the whole optimiser batch)

Each generation batch is split into ``steps_per_generation`` micro-batches (TRL's meaning: the
generation batch holds ``steps_per_generation`` per-device batches; default
``gradient_accumulation_steps``), every ``gradient_accumulation_steps`` of them one optimiser
step, and replayed ``num_iterations`` times; ``pi_old`` is the sampler's own log-probabilities (exact for the
parameters that generated the batch, see :mod:`longhorizon.lm.generate`). Dynamic sampling
(DAPO) drops groups whose rewards are all equal before the update and reports how many.
Low-precision rollouts (``rollout_dtype="bfloat16"``): the completions are sampled by a bfloat16 copy of the
weights (``mu``), so the sampler's log-probabilities are not ``pi_old``'s. The learner recomputes ``pi_old`` with
its own weights (one teacher-forced pass) and weights each token's loss by the truncated importance ratio
(TIS, Yao et al. 2025: "Your efficient RL framework secretly brings you off-policy RL training")::

    l_t <- min(pi_old(o_t | .) / mu(o_t | .), C) l_t          C = rollout_is_cap

which makes the objective's expectation under ``mu`` that under ``pi_old`` for every token whose ratio is
below ``C`` (the cap bounds the variance, at a bias where the copies disagree most). Asynchronous rollout
workers (:mod:`longhorizon.lm.grpo_workers`) correct a batch sampled by an older policy version the same way
(AReaL's decoupled objective: ``pi_old`` is the current, proximal policy and ``mu`` the one that sampled).
``kl`` (the k3 mean over completion tokens) is logged whenever the reference is kept: beta > 0, or
``reference_kl`` at beta = 0 (the loss is then unchanged).
``reward_std`` is TRL's: the mean over groups of the within-group (unbiased) standard deviation.

The trainer runs any model config with a ``module()`` (:class:`longhorizon.lm.model.ModelConfig`,
:class:`longhorizon.lm.llama.LlamaConfig`) and any tokenizer with ``encode_prompts``,
``decode_batch``, ``eos_ids`` and ``pad_id`` (the character :class:`Tokenizer`, or
:class:`longhorizon.lm.hf_tokenizer.HFTokenizer` for pretrained models).
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

from longhorizon.core.kl import kl_k3
from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.lm.generate import generate
from longhorizon.lm.model import ModelConfig, ScoringStream, logp_entropy, positions_from_valid, shared_prompt_stream
from longhorizon.lm.protocols import Trainer
from longhorizon.lm.tasks import Problem, score, segment_ids, segment_rewards
from longhorizon.lm.tokenizer import Tokenizer

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")
IMPORTANCE_LEVELS = ("token", "sequence")
SCALE_REWARDS = ("group", "batch", "none")
ADVANTAGES = ("sequence", "segment")
LR_SCHEDULERS = ("linear", "constant")
ROLLOUT_DTYPES = ("float32", "bfloat16")
STD_EPS = 1e-4


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    num_generations: int = 8
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float | None = None  # None means epsilon (symmetric clipping)
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    num_iterations: int = 1
    steps_per_generation: int | None = None  # micro-batches per generation batch; None: gradient_accumulation_steps
    gradient_accumulation_steps: int = 1
    importance_sampling_level: str = "token"  # "sequence": GSPO's length-normalised sequence ratio
    learning_rate: float = 1e-6  # TRL's default
    lr_scheduler_type: str = "linear"  # TRL's default: decays linearly to 0 over max_steps; or "constant"
    max_steps: int = 0  # optimiser steps the linear schedule spans (lm rl sets it from --steps); 0: not known
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    temperature: float = 1.0
    top_p: float = 1.0
    max_prompt_length: int = 64
    max_completion_length: int = 48
    mask_truncated_completions: bool = False
    dynamic_sampling: bool = False
    advantage: str = "sequence"  # "segment": SLCA per-statement advantages
    batch_multiple: int = 16  # rollout batches are padded up to a multiple of this (stable shapes)
    # Run each prompt once per group (generation's prefill and the update's prompt positions) when
    # every group has the same size: the same function, at 1/num_generations of the prompt's cost.
    share_prompts: bool = True
    # The update runs on the batch's longest completion rounded up to a power of two (>= 16, at most
    # max_completion_length) instead of max_completion_length columns: the same loss on fewer padded
    # tokens, at a handful of compiled lengths.
    bucket_completions: bool = True
    # Keep the reference at beta = 0 too, only to log ``kl`` (k3 to it, per token): a teacher-forced pass
    # of each batch through a second copy of the weights (540 MB for SmolLM2); beta > 0 keeps it anyway.
    reference_kl: bool = False
    # Generate with a low-precision copy of the weights ("bfloat16"; "float32": the policy itself), refreshed before
    # every rollout. The learner then scores the sampled tokens with its own weights (pi_old) and weights each
    # token's loss by the truncated importance ratio min(pi_old / pi_rollout, rollout_is_cap) (module docstring).
    rollout_dtype: str = "float32"
    rollout_is_cap: float = 2.0

    @property
    def keeps_reference(self) -> bool:
        """Whether the reference is kept and scored (the KL term needs it, or ``reference_kl`` asks for it)."""
        return self.beta != 0.0 or self.reference_kl

    def __post_init__(self):
        if self.num_generations < 2:
            raise UsageError(f"num_generations={self.num_generations} must be at least 2 for group-relative advantages.")
        if self.loss_type not in LOSS_TYPES:
            raise UsageError(f"loss_type={self.loss_type!r} is unknown; use one of {LOSS_TYPES}.")
        if self.scale_rewards not in SCALE_REWARDS:
            raise UsageError(f"scale_rewards={self.scale_rewards!r} is unknown; use one of {SCALE_REWARDS}.")
        if self.importance_sampling_level not in IMPORTANCE_LEVELS:
            raise UsageError(f"importance_sampling_level={self.importance_sampling_level!r} is unknown; use one of "
                             f"{IMPORTANCE_LEVELS}.")
        if self.advantage not in ADVANTAGES:
            raise UsageError(f"advantage={self.advantage!r} is unknown; use one of {ADVANTAGES}.")
        if self.beta < 0 or self.epsilon < 0 or (self.epsilon_high is not None and self.epsilon_high < 0):
            raise UsageError("beta, epsilon and epsilon_high must be non-negative; fix the negative value.")
        for name in ("num_iterations", "generation_micro_batches", "gradient_accumulation_steps", "max_prompt_length",
                     "max_completion_length", "batch_multiple"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name}={getattr(self, name)} must be a positive integer.")
        if self.generation_micro_batches % self.gradient_accumulation_steps:
            raise UsageError(
                f"steps_per_generation={self.steps_per_generation} is not a multiple of gradient_accumulation_steps="
                f"{self.gradient_accumulation_steps}, so an optimiser step would mix two generation batches; "
                "make it a multiple (or leave it unset).")
        if self.learning_rate <= 0:
            raise UsageError(f"learning_rate={self.learning_rate} must be positive.")
        if self.lr_scheduler_type not in LR_SCHEDULERS:
            raise UsageError(f"lr_scheduler_type={self.lr_scheduler_type!r} is unknown; use one of {LR_SCHEDULERS}.")
        if self.max_steps < 0:
            raise UsageError(f"max_steps={self.max_steps} must be 0 (not known) or positive.")
        if self.temperature <= 0:
            raise UsageError(f"temperature={self.temperature} must be positive for RL sampling; use e.g. 1.0.")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top_p={self.top_p} must be in (0, 1].")
        if self.rollout_dtype not in ROLLOUT_DTYPES:
            raise UsageError(f"rollout_dtype={self.rollout_dtype!r} is unknown; use one of {ROLLOUT_DTYPES}.")
        if self.rollout_is_cap < 1:
            raise UsageError(f"rollout_is_cap={self.rollout_is_cap} must be at least 1 (a cap below 1 would shrink "
                             "every token's weight); TIS uses 2.")

    @property
    def eps_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def generation_micro_batches(self) -> int:
        """Micro-batches a generation batch is split into (TRL's ``steps_per_generation``)."""
        return self.gradient_accumulation_steps if self.steps_per_generation is None else self.steps_per_generation

    @property
    def optimizer_steps_per_generation(self) -> int:
        return self.generation_micro_batches // self.gradient_accumulation_steps

    def for_run(self, generation_batches: int) -> GRPOConfig:
        """This config with ``max_steps`` set for a run of ``generation_batches`` steps (if not set already):
        each batch makes ``optimizer_steps_per_generation`` optimiser steps, ``num_iterations`` times."""
        if self.max_steps:
            return self
        return dataclasses.replace(self, max_steps=generation_batches * self.optimizer_steps_per_generation
                                   * self.num_iterations)


# ----------------------------------------------------------------------------- advantages


def group_advantages(rewards, group_ids, scale_rewards: str = "group") -> np.ndarray:
    """Group-relative advantages (module docstring); ``group_ids[i]`` names the query of sample i.

    A NaN reward (every reward function returned None: none applies) leaves its completion out of
    its group's mean and standard deviation and gives it advantage 0; a group counts its scored
    completions only."""
    rewards = np.asarray(rewards, np.float64)
    scored = np.isfinite(rewards)
    r = np.where(scored, rewards, 0.0)
    _, inverse = np.unique(np.asarray(group_ids), return_inverse=True)
    counts = np.bincount(inverse, scored.astype(np.float64))
    sums = np.bincount(inverse, r)
    mean = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)[inverse]
    centred = np.where(scored, r - mean, 0.0)
    if scale_rewards == "none":
        adv = centred
    elif scale_rewards == "group":
        sq = np.bincount(inverse, centred**2)
        std = np.sqrt(np.divide(sq, counts - 1, out=np.zeros_like(sq), where=counts > 1))[inverse]
        adv = centred / (std + STD_EPS)
    elif scale_rewards == "batch":
        std = rewards[scored].std(ddof=1) if scored.sum() > 1 else 0.0
        adv = centred / (std + STD_EPS)
    else:
        raise UsageError(f"scale_rewards={scale_rewards!r} is unknown; use one of {SCALE_REWARDS}.")
    adv[(counts[inverse] < 2) | ~scored] = 0.0
    return adv.astype(np.float32)


def segment_advantages(segment_rewards, segment_ids, group_ids, sequence_advantages, scale_rewards: str = "group"):
    """SLCA: token advantages ``[B, N]`` from per-segment rewards ``[B, K]`` and token segment ids ``[B, N]``
    (a segment is one ``x=v;`` statement of a structured output).

    ``A_seg[i, k]`` is the group-relative advantage (same ``scale_rewards`` rule as sequences) of
    segment k's reward among the samples of query i's group; token t of sample i gets
    ``A_seg[i, segment_ids[i, t]]``, or ``sequence_advantages[i]`` where ``segment_ids`` is -1.
    """
    seg_r = np.asarray(segment_rewards, np.float64)
    ids = np.asarray(segment_ids)
    seg_adv = np.stack([group_advantages(seg_r[:, k], group_ids, scale_rewards) for k in range(seg_r.shape[1])], axis=1)
    safe = np.clip(ids, 0, seg_r.shape[1] - 1)
    token_adv = np.take_along_axis(seg_adv, safe, axis=1)
    seq = np.asarray(sequence_advantages, np.float32)[:, None]
    return np.where(ids >= 0, token_adv, seq).astype(np.float32)


def mean_group_std(rewards, group_ids) -> float:
    """TRL's ``reward_std``: the mean over groups of each group's unbiased standard deviation
    (groups of one count as 0; unscored (NaN) completions are left out)."""
    rewards = np.asarray(rewards, np.float64)
    scored = np.isfinite(rewards)
    r = np.where(scored, rewards, 0.0)
    _, inverse = np.unique(np.asarray(group_ids), return_inverse=True)
    counts = np.bincount(inverse, scored.astype(np.float64))
    mean = np.divide(np.bincount(inverse, r), counts, out=np.zeros(counts.shape), where=counts > 0)
    centred = np.where(scored, r - mean[inverse], 0.0)
    sq = np.bincount(inverse, centred**2)
    return float(np.mean(np.sqrt(np.divide(sq, counts - 1, out=np.zeros_like(sq), where=counts > 1))))


def all_equal_groups(rewards, group_ids) -> np.ndarray:
    """Per sample: True if every scored reward in its group is equal (such a group carries no signal;
    unscored (NaN) completions do not count)."""
    rewards = np.asarray(rewards, np.float64)
    scored = np.isfinite(rewards)
    _, inverse = np.unique(np.asarray(group_ids), return_inverse=True)
    hi = np.full(inverse.max() + 1, -np.inf)
    lo = np.full(inverse.max() + 1, np.inf)
    np.maximum.at(hi, inverse[scored], rewards[scored])
    np.minimum.at(lo, inverse[scored], rewards[scored])
    return (np.isclose(hi, lo) | (hi < lo))[inverse]  # hi < lo: a group with nothing scored


# ----------------------------------------------------------------------------- loss


def log_importance_weights(logp, old_logp, mask, level: str = "token"):
    """``log rho`` ``[B, T]`` (or ``[B, 1]`` for ``"sequence"``, GSPO's ``log s_i``, the masked mean of the
    token log-ratios; module docstring)."""
    log_ratio = logp - old_logp
    if level == "token":
        return log_ratio
    if level == "sequence":
        return (log_ratio * mask).sum(-1, keepdims=True) / jnp.maximum(mask.sum(-1, keepdims=True), 1.0)
    raise UsageError(f"importance_sampling_level={level!r} is unknown; use one of {IMPORTANCE_LEVELS}.")


def per_token_loss(logp, old_logp, ref_logp, advantages, *, epsilon: float, epsilon_high: float, beta: float,
                   mask=None, level: str = "token"):
    """``(l_t, rho_t, k3_t)`` elementwise (module docstring); ``mask`` is needed for ``level="sequence"``."""
    ratio = jnp.exp(log_importance_weights(logp, old_logp, jnp.ones_like(logp) if mask is None else mask, level))
    ratio = jnp.broadcast_to(ratio, logp.shape)
    clipped = jnp.clip(ratio, 1.0 - epsilon, 1.0 + epsilon_high)
    loss = -jnp.minimum(ratio * advantages, clipped * advantages)
    kl = kl_k3(logp, ref_logp) if beta != 0.0 else jnp.zeros_like(logp)
    return loss + beta * kl, ratio, kl


def reduce_loss(token_loss, mask, loss_type: str, *, max_completion_length: int, total_tokens, n_micro: int = 1,
                rows=None):
    """One micro-batch's share of the optimiser-batch loss (module docstring).

    ``mask`` is ``[B, T]``; ``rows`` ``[B]`` is 1 for the batch's real completions and 0 for the
    padding rows that keep shapes stable (default: the rows with a masked token). As in TRL, a real
    completion whose tokens are all masked (``mask_truncated_completions``) still counts in the
    ``grpo`` and ``dr_grpo`` averages, contributing 0. ``total_tokens`` is the masked-token count of
    the whole optimiser batch (used by ``dapo``).
    """
    masked = (token_loss * mask).sum()
    rows = (mask.sum(-1) > 0).astype(token_loss.dtype) if rows is None else rows.astype(token_loss.dtype)
    n_rows = jnp.maximum(rows.sum(), 1.0)
    if loss_type == "grpo":
        per_seq = (token_loss * mask).sum(-1) / jnp.maximum(mask.sum(-1), 1.0)
        return (per_seq * rows).sum() / n_rows / n_micro
    if loss_type == "bnpo":
        return masked / jnp.maximum(mask.sum(), 1.0) / n_micro
    if loss_type == "dr_grpo":
        return masked / (n_rows * max_completion_length) / n_micro
    if loss_type == "dapo":
        return masked / jnp.maximum(total_tokens, 1.0)
    raise UsageError(f"loss_type={loss_type!r} is unknown; use one of {LOSS_TYPES}.")


def completion_stream(batch, temperature: float) -> ScoringStream:
    """How a batch's completions are scored, in either layout: ``prompt, prompt_valid [G, P]`` +
    ``completion, completion_valid [G*S, N]`` (groups share their prompt), or ``tokens, valid [B, P+N]``
    (each row carries its prompt); ``scores`` returns ``(logp, entropy) [B, N]``."""
    if "prompt" in batch:
        return shared_prompt_stream(batch["prompt"], batch["prompt_valid"], batch["completion"], batch["completion_valid"],
                                    temperature)
    tokens, valid = batch["tokens"], batch["valid"]
    p = tokens.shape[1] - batch["mask"].shape[1]

    def scores(logits):
        logp, entropy = logp_entropy(logits[:, :-1], tokens[:, 1:], temperature)
        return logp[:, p - 1 :], entropy[:, p - 1 :]

    return ScoringStream(tokens, positions_from_valid(valid), valid, None, None, scores)


def completion_logprobs_of(params, batch, model_cfg: ModelConfig, temperature: float):
    """Teacher-forced ``(logp, entropy) [B, N]`` of a batch's completions (either layout, :func:`completion_stream`)."""
    return completion_stream(batch, temperature).logprobs(params, model_cfg)


def grpo_loss(params, batch, total_tokens, *, model_cfg: ModelConfig, cfg: GRPOConfig, n_micro: int):
    """Loss of one micro-batch: its completions' tokens (either layout, see :func:`completion_logprobs_of`),
    mask, old_logp, ref_logp, advantages."""
    logp, entropy = completion_logprobs_of(params, batch, model_cfg, cfg.temperature)
    return completion_loss(logp, entropy, batch, total_tokens, cfg=cfg, n_micro=n_micro)


def completion_loss(logp, entropy, batch, total_tokens, *, cfg: GRPOConfig, n_micro: int):
    """``(loss, sums)`` of one micro-batch from its completions' ``logp, entropy [B, N]`` (module docstring)."""
    mask = batch["mask"]
    tok, ratio, kl = per_token_loss(
        logp, batch["old_logp"], batch["ref_logp"], batch["advantages"],
        epsilon=cfg.epsilon, epsilon_high=cfg.eps_high, beta=cfg.beta, mask=mask, level=cfg.importance_sampling_level,
    )
    if "rollout_weight" in batch:  # low-precision rollouts: the truncated importance weight of each token
        tok = tok * batch["rollout_weight"]
    loss = reduce_loss(tok, mask, cfg.loss_type, max_completion_length=cfg.max_completion_length, total_tokens=total_tokens,
                       n_micro=n_micro, rows=batch.get("rows"))
    adv = batch["advantages"]
    low = ((ratio < 1 - cfg.epsilon) & (adv < 0)).astype(jnp.float32)
    high = ((ratio > 1 + cfg.eps_high) & (adv > 0)).astype(jnp.float32)
    if cfg.beta == 0.0 and cfg.reference_kl:  # logged only: the loss has no KL term
        kl = kl_k3(logp, batch["ref_logp"])
    sums = {
        "tokens": mask.sum(),
        **({"kl": (kl * mask).sum()} if cfg.keeps_reference else {}),  # no reference, no KL to report
        "entropy": (entropy * mask).sum(),
        "clip_low": (low * mask).sum(),
        "clip_high": (high * mask).sum(),
        "ratio": (ratio * mask).sum(),
    }
    return loss, sums


@functools.partial(jax.jit, static_argnames=("model_cfg", "cfg", "optimizer"), donate_argnums=(0, 1))
def update(params, opt_state, batch, *, model_cfg: ModelConfig, cfg: GRPOConfig, optimizer):
    """One optimiser step on ``batch`` (leading dim B), accumulated over micro-batches."""
    n_micro = cfg.gradient_accumulation_steps
    total_tokens = batch["mask"].sum()
    micro = jax.tree_util.tree_map(lambda x: x.reshape((n_micro, x.shape[0] // n_micro) + x.shape[1:]), batch)
    grad_fn = jax.value_and_grad(grpo_loss, has_aux=True)

    def body(acc, mb):
        (loss, sums), grads = grad_fn(params, mb, total_tokens, model_cfg=model_cfg, cfg=cfg, n_micro=n_micro)
        grads_acc, loss_acc = acc
        return (jax.tree_util.tree_map(jnp.add, grads_acc, grads), loss_acc + loss), sums

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    (grads, loss), sums = jax.lax.scan(body, (zeros, jnp.float32(0.0)), micro)
    sums = jax.tree_util.tree_map(jnp.sum, sums)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, update_metrics(sums, loss, optax.tree.norm(grads))


def batch_shapes(rows: int, prompt: int, completion: int) -> dict:
    """The shapes of an update batch of ``rows`` unshared prompts of ``prompt`` tokens and completions of ``completion``
    (``jax.ShapeDtypeStruct`` leaves: to compile the update, or measure its memory, without data)."""
    spec = jax.ShapeDtypeStruct
    per_token = {name: spec((rows, completion), jnp.float32) for name in ("mask", "advantages", "old_logp", "ref_logp")}
    return {"tokens": spec((rows, prompt + completion), jnp.int32), "valid": spec((rows, prompt + completion), jnp.bool_),
            "rows": spec((rows,), jnp.float32), **per_token}


def update_metrics(sums, loss, grad_norm) -> dict:
    """One optimiser step's metrics: the per-token means of ``sums``, the loss and the gradient's global norm."""
    denom = jnp.maximum(sums["tokens"], 1.0)
    return {**{k: v / denom for k, v in sums.items() if k != "tokens"}, "loss": loss, "grad_norm": grad_norm}


@functools.partial(jax.jit, static_argnames=("model_cfg", "temperature"))
def completion_logprobs(params, batch, *, model_cfg: ModelConfig, temperature: float):
    """Teacher-forced log-probs ``[B, N]`` of a batch's completions, used for the reference model."""
    return completion_logprobs_of(params, batch, model_cfg, temperature)[0]


# ----------------------------------------------------------------------------- trainer


@functools.lru_cache(maxsize=32)
def rl_optimizer(learning_rate: float, weight_decay: float, max_grad_norm: float, max_steps: int = 0):
    """AdamW after global-norm clipping (cached: same args, same object). ``max_steps`` > 0: the learning
    rate decays linearly from ``learning_rate`` at the first step to 0 after ``max_steps`` (TRL's
    ``lr_scheduler_type="linear"`` without warm-up: ``lr_t = lr (1 - t / max_steps)``); 0: constant."""
    rate = optax.linear_schedule(learning_rate, 0.0, max_steps) if max_steps else learning_rate
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adamw(rate, weight_decay=weight_decay))


def optimizer_for(cfg: GRPOConfig):
    """The optimiser ``cfg`` asks for; a linear schedule needs the run's length (``cfg.max_steps``)."""
    if cfg.lr_scheduler_type == "linear" and not cfg.max_steps:
        raise UsageError("lr_scheduler_type='linear' decays the learning rate to 0 over max_steps optimiser steps, and "
                         "max_steps is not set; set it (GRPOConfig.for_run(steps) does; `lm rl` sets it from --steps) "
                         "or use lr_scheduler_type='constant'.")
    return rl_optimizer(cfg.learning_rate, cfg.weight_decay, cfg.max_grad_norm,
                        cfg.max_steps if cfg.lr_scheduler_type == "linear" else 0)


def _round_up(n: int, m: int) -> int:
    return max(m, -(-n // m) * m)


def rollout_weights(old_logp, behaviour_logp, mask, cap: float) -> tuple[np.ndarray, dict]:
    """TIS weights ``min(pi_old / mu, cap)`` per token (1 outside ``mask``) and what they say about the rollout
    copy: the mean weight, the share of tokens truncated at the cap and the mean ``|log pi_old - log mu|``, over
    the masked tokens."""
    log_ratio = np.asarray(old_logp, np.float64) - np.asarray(behaviour_logp, np.float64)
    ratio = np.exp(log_ratio)
    on = np.asarray(mask) > 0
    weights = np.where(on, np.minimum(ratio, cap), 1.0).astype(np.float32)
    tokens = max(int(on.sum()), 1)
    return weights, {"rollout_is_weight": float(weights[on].sum() / tokens),
                     "rollout_is_truncated": float((ratio[on] > cap).sum() / tokens),
                     "rollout_logp_gap": float(np.abs(log_ratio[on]).sum() / tokens)}


def bucket_width(longest: int, cap: int, smallest: int = 16) -> int:
    """The update's completion width for a batch whose longest completion has ``longest`` columns: the next
    power of two from ``smallest``, at most ``cap`` (so a run compiles the update for at most log2(cap / 16) + 2
    widths)."""
    width = smallest
    while width < longest:
        width *= 2
    return min(width, cap)


def sample_completions(params, model_cfg, tokenizer, cfg: GRPOConfig, problems: Sequence[Problem],
                       group_sizes: Sequence[int] | None, key) -> dict:
    """Sample ``group_sizes[i]`` completions of each problem with ``params`` (the generation half of a rollout:
    what a rollout worker runs); returns a dict of host arrays, unscored."""
    sizes = [cfg.num_generations] * len(problems) if group_sizes is None else [int(g) for g in group_sizes]
    rows = [(q, p) for q, (p, g) in enumerate(zip(problems, sizes)) for _ in range(g)]
    if not rows:
        raise UsageError("a rollout needs at least one problem with a positive group size.")
    # Equal groups share their prompt: prefilled once, continued by every row of the group.
    group_size = sizes[0] if cfg.share_prompts and len(set(sizes)) == 1 and sizes[0] > 1 else 1
    units = problems if group_size > 1 else [p for _, p in rows]
    b = _round_up(len(units), max(1, cfg.batch_multiple // group_size))
    ptok, pvalid = tokenizer.encode_prompts([p.prompt for p in units] + [""] * (b - len(units)), cfg.max_prompt_length)
    gen = generate(params, ptok, pvalid, key, cfg=model_cfg, max_new_tokens=cfg.max_completion_length,
                   temperature=cfg.temperature, top_p=cfg.top_p, group_size=group_size,
                   eos_ids=tuple(tokenizer.eos_ids), pad_id=tokenizer.pad_id)
    ctok, cvalid, clp = (np.asarray(x)[: len(rows)] for x in (gen.tokens, gen.valid, gen.logprobs))
    prompt_tokens = int(pvalid[: len(units)].sum())  # a shared prompt is run (and counted) once
    ptok, pvalid = (np.repeat(x, group_size, axis=0) if group_size > 1 else x for x in (ptok, pvalid))
    return {
        "rows": rows, "texts": tokenizer.decode_batch(ctok), "group_ids": np.array([q for q, _ in rows]),
        "prompt_tokens": ptok[: len(rows)], "prompt_valid": pvalid[: len(rows)],
        "tokens": ctok, "valid": cvalid, "logprobs": clp, "prompt_tokens_run": prompt_tokens,
        "truncated": ~(np.isin(ctok, tokenizer.eos_ids) & cvalid).any(axis=1),
        "group_size": group_size if group_size > 1 else 0,  # > 0: rows g*S .. g*S+S-1 are group g
    }


class GRPOTrainer(Trainer):
    """Holds policy, reference and optimiser; :meth:`step` runs one generation batch end to end.

    ``token_weights(problem, text, n)`` (optional) returns an array of ``n`` 0/1 weights over a
    completion's tokens that multiplies the loss mask (to exclude segments from the loss).
    ``reward_fn(problem, text)`` defaults to the task's verifier, :func:`longhorizon.lm.tasks.score`;
    ``batch_rewards(problems, texts, completion_ids) -> (rewards [n], metrics)`` (optional, e.g.
    :class:`longhorizon.lm.data.RewardFunctions`) scores a whole rollout at once instead.
    Problems are any objects with a ``prompt`` string. ``updater`` (optional, e.g.
    :class:`longhorizon.lm.offload.LayerStreamedUpdate`) replaces :func:`update`: it keeps the
    parameters where it wants them (``updater.to_store``), makes the optimiser state
    (``updater.init(params)``) and runs ``updater(params, opt_state, batch) -> (params, opt_state, metrics)``.
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        params,
        tokenizer: Tokenizer,
        cfg: GRPOConfig,
        *,
        ref_params=None,
        seed: int = 0,
        token_weights: Callable[[Problem, str, int], np.ndarray] | None = None,
        reward_fn: Callable[[Problem, str], float] = score,
        batch_rewards: Callable | None = None,
        updater=None,
    ):
        context = model_cfg.context_length
        if context is not None and cfg.max_prompt_length + cfg.max_completion_length > context:
            raise UsageError(
                f"max_prompt_length {cfg.max_prompt_length} + max_completion_length {cfg.max_completion_length} exceed the "
                f"model's context of {context} tokens; shorten the prompts or lower max_completion_length.")
        self.model_cfg, self.cfg, self.tokenizer = model_cfg, cfg, tokenizer
        store = jnp.array if updater is None else updater.to_store
        self.params = jax.tree_util.tree_map(store, params)
        # The KL term is the reference's only reader here: with beta = 0 no copy is kept unless one is
        # given (trainers that read it otherwise, e.g. preference games, pass ``ref_params``).
        keep = cfg.keeps_reference or ref_params is not None
        self.ref_params = jax.tree_util.tree_map(store, self.params if ref_params is None else ref_params) if keep else None
        self.optimizer = optimizer_for(cfg)
        self.opt_state = (self.optimizer if updater is None else updater).init(self.params)
        self.updater = updater or functools.partial(update, model_cfg=model_cfg, cfg=cfg, optimizer=self.optimizer)
        self.key = jax.random.PRNGKey(seed)
        self.token_weights = token_weights
        self.reward_fn = reward_fn
        self.batch_rewards = batch_rewards
        self.rollout_stats = {}  # low-precision or stale rollouts: the last batch's importance weights (rollout_weights)
        self.workers = None  # lm.grpo_workers.GRPOWorkers: completions sampled on Ray rollout workers
        self.counters = {"generations": 0, "rollout_tokens": 0, "generated_tokens": 0, "update_tokens": 0,
                         "ref_tokens": 0, "optimizer_steps": 0, "groups_dropped": 0}

    # -- rollout -----------------------------------------------------------------------
    @property
    def low_precision_rollouts(self) -> bool:
        """Whether a lower-precision copy of the weights samples (``rollout_dtype`` below the policy's own)."""
        return self.cfg.rollout_dtype == "bfloat16" and self.model_cfg.dtype == "float32"

    def rollout_policy(self):
        """``(params, model_cfg)`` that sample: the policy itself, or its low-precision copy, made afresh from the
        current weights (so it is refreshed after every update)."""
        if not self.low_precision_rollouts:
            return self.params, self.model_cfg
        low = jnp.dtype(self.cfg.rollout_dtype)
        params = jax.tree_util.tree_map(lambda w: w.astype(low) if jnp.issubdtype(w.dtype, jnp.floating) else w,
                                        self.params)
        return params, self.rollout_model_cfg

    @property
    def rollout_model_cfg(self):
        """The model config the completions are sampled with (the low-precision copy's, or the policy's own)."""
        if not self.low_precision_rollouts:
            return self.model_cfg
        return dataclasses.replace(self.model_cfg, dtype=self.cfg.rollout_dtype)

    def rollout(self, problems: Sequence[Problem], group_sizes: Sequence[int] | None = None):
        """Sample ``group_sizes[i]`` completions of each problem (here, or on the rollout workers) and score them;
        returns a dict of host arrays."""
        self.key, sub = jax.random.split(self.key)
        if self.workers is not None:
            ro = self.workers.run(self, problems, group_sizes, sub)
        else:
            sampler_params, sampler_cfg = self.rollout_policy()
            ro = sample_completions(sampler_params, sampler_cfg, self.tokenizer, self.cfg, problems, group_sizes, sub)
        return self.score(ro)

    def score(self, ro: dict) -> dict:
        """Add the rewards of a rollout's completions (and count its tokens)."""
        rows, texts = ro["rows"], ro["texts"]
        reward_metrics = {}
        if self.batch_rewards is not None:
            completion_ids = [row[v].tolist() for row, v in zip(ro["tokens"], ro["valid"])]
            rewards, reward_metrics = self.batch_rewards([p for _, p in rows], texts, completion_ids)
            rewards = np.asarray(rewards, np.float64)
        else:
            rewards = np.array([self.reward_fn(p, t) for (_, p), t in zip(rows, texts)], np.float64)
        generated = int(ro["valid"].sum())
        self.counters["generations"] += len(rows)
        self.counters["generated_tokens"] += generated
        self.counters["rollout_tokens"] += generated + ro.pop("prompt_tokens_run")
        return {**ro, "rewards": rewards, "reward_metrics": reward_metrics}

    def advantages(self, ro) -> np.ndarray:
        """Token-level advantages ``[B, N]`` (sequence-level broadcast, or SLCA per segment)."""
        cfg = self.cfg
        seq_adv = group_advantages(ro["rewards"], ro["group_ids"], cfg.scale_rewards)
        n = ro["tokens"].shape[1]
        if cfg.advantage == "sequence":
            return np.repeat(seq_adv[:, None], n, axis=1)
        k = max(len(p.answers) for _, p in ro["rows"])
        seg_r = np.zeros((len(ro["rows"]), k), np.float64)
        seg_ids = np.full((len(ro["rows"]), n), -1, np.int32)
        for i, ((_, p), text) in enumerate(zip(ro["rows"], ro["texts"])):
            r = segment_rewards(p, text)
            seg_r[i, : len(r)] = r
            ids = segment_ids(text, len(p.answers))[:n]
            seg_ids[i, : len(ids)] = ids
        return segment_advantages(seg_r, seg_ids, ro["group_ids"], seq_adv, cfg.scale_rewards)

    @property
    def samples_itself(self) -> bool:
        """True with asynchronous rollout workers: they draw their problems from the sampler ahead of the steps."""
        return self.workers is not None and self.workers.samples_itself

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()

    # -- one generation batch ------------------------------------------------------------
    def step(self, problems: Sequence[Problem], group_sizes: Sequence[int] | None = None) -> dict:
        cfg = self.cfg
        t0 = time.perf_counter()
        ro = self.rollout(problems, group_sizes)
        t_gen = time.perf_counter() - t0
        adv = self.advantages(ro)
        mask = ro["valid"].astype(np.float32)
        if cfg.mask_truncated_completions:
            mask[ro["truncated"]] = 0.0
        if self.token_weights is not None:
            for i, ((_, p), text) in enumerate(zip(ro["rows"], ro["texts"])):
                mask[i] *= np.asarray(self.token_weights(p, text, mask.shape[1]), np.float32)[: mask.shape[1]]
        degenerate = all_equal_groups(ro["rewards"], ro["group_ids"])
        n_groups = len(np.unique(ro["group_ids"]))
        dropped = len(np.unique(ro["group_ids"][degenerate])) if cfg.dynamic_sampling else 0
        keep = ~degenerate if cfg.dynamic_sampling else np.ones(len(ro["rows"]), bool)
        self.counters["groups_dropped"] += dropped
        metrics = {
            "reward": float(ro["rewards"].mean()),
            "reward_std": mean_group_std(ro["rewards"], ro["group_ids"]),
            **ro["reward_metrics"],
            "groups": n_groups,
            "groups_all_equal": int(len(np.unique(ro["group_ids"][degenerate]))),
            "groups_dropped": dropped,
            "completion_length": float(ro["valid"].sum(1).mean()),
            "truncated_fraction": float(ro["truncated"].mean()),
            **ro.get("worker_metrics", {}),
        }
        train_metrics = []
        if keep.any():
            batch = self._train_batch(ro, adv, mask, keep)
            metrics.update(self.rollout_stats)
            n_opt = cfg.optimizer_steps_per_generation
            prompts_run = ro["prompt_valid"][keep][:: ro["group_size"]] if ro["group_size"] else ro["prompt_valid"][keep]
            kept_tokens = int(ro["valid"][keep].sum() + prompts_run.sum())  # a shared prompt is run once
            for _ in range(cfg.num_iterations):
                for s in range(n_opt):
                    mb = {k: v[s * (len(v) // n_opt) : (s + 1) * (len(v) // n_opt)] for k, v in batch.items()}
                    self.params, self.opt_state, m = self.updater(self.params, self.opt_state, mb)
                    train_metrics.append(m)
                    self.counters["optimizer_steps"] += 1
                self.counters["update_tokens"] += kept_tokens
        if train_metrics:
            host = jax.device_get(train_metrics)
            for k in host[0]:
                metrics[k] = float(np.mean([m[k] for m in host]))
            if not np.isfinite(metrics["loss"]):
                raise TrainingDiverged(f"GRPO loss became {metrics['loss']}; lower learning_rate or raise max_grad_norm clipping.")
        elapsed = time.perf_counter() - t0
        metrics.update(
            generation_s=t_gen, step_s=elapsed,
            tokens_per_s=float(ro["valid"].sum() + ro["prompt_valid"].sum()) / max(elapsed, 1e-9),
            **{k: v for k, v in self.counters.items()},
        )
        return metrics

    def _train_batch(self, ro, adv, mask, keep):
        cfg = self.cfg
        group_size = ro.get("group_size", 0)
        steps = cfg.generation_micro_batches
        # Shuffle once per generation batch (TRL shuffles rows before splitting into steps; groups that
        # share their prompt are shuffled as wholes).
        rng = np.random.default_rng(self.counters["optimizer_steps"])
        if group_size:
            groups = np.unique(ro["group_ids"][keep])  # dynamic sampling keeps or drops whole groups
            groups = groups[rng.permutation(len(groups))]
            idx = (groups[:, None] * group_size + np.arange(group_size)).reshape(-1)
            n_groups = _round_up(len(groups), max(1, cfg.batch_multiple // group_size) * steps)
            pad = n_groups * group_size - len(idx)
        else:
            idx = np.flatnonzero(keep)
            idx = idx[rng.permutation(len(idx))]
            pad = _round_up(len(idx), cfg.batch_multiple * steps) - len(idx)

        width = ro["tokens"].shape[1]
        if cfg.bucket_completions:  # drop the columns past the batch's longest completion (none is valid there)
            used = np.flatnonzero(ro["valid"][idx].any(0))
            width = bucket_width(int(used[-1]) + 1 if len(used) else 1, width)

        def take(x, fill=0, rows=None):
            x = x[idx if rows is None else rows]
            n = pad if rows is None else pad // group_size
            return np.concatenate([x, np.full((n,) + x.shape[1:], fill, x.dtype)]) if n else x

        completion_tokens, completion_valid = ro["tokens"][:, :width], ro["valid"][:, :width]
        old_logp = take(ro["logprobs"][:, :width])
        batch = {"mask": take(mask[:, :width]), "old_logp": old_logp, "advantages": take(adv[:, :width]), "ref_logp": old_logp,
                 "rows": take(np.ones(len(ro["rows"]), np.float32))}  # 0: a padding row, counted nowhere
        if group_size:
            first = groups * group_size  # each group's prompt, from its first row
            pad_id = self.tokenizer.pad_id
            batch.update(prompt=take(ro["prompt_tokens"], pad_id, first), prompt_valid=take(ro["prompt_valid"], False, first),
                         completion=take(completion_tokens, pad_id), completion_valid=take(completion_valid, False))
            batch["prompt_valid"][len(groups):, -1] = True  # padding groups: one valid token, zero loss mask
        else:
            pad_id = self.tokenizer.pad_id
            batch["tokens"] = np.concatenate([take(ro["prompt_tokens"], pad_id), take(completion_tokens, pad_id)], axis=1)
            batch["valid"] = np.concatenate([take(ro["prompt_valid"], False), take(completion_valid, False)], axis=1)
            batch["valid"][len(idx):, cfg.max_prompt_length - 1] = True  # padding rows: one valid token, zero loss mask
        self.rollout_stats = {}
        # pi_old from the policy's own weights when another policy sampled (a low-precision copy, or an older version on
        # asynchronous rollout workers); the sampler's log-probs give mu
        if self.low_precision_rollouts or ro.get("lag_max", 0) > 0:
            behaviour = batch["old_logp"]
            batch["old_logp"] = np.asarray(completion_logprobs(self.params, batch, model_cfg=self.model_cfg,
                                                               temperature=cfg.temperature))
            batch["ref_logp"] = batch["old_logp"]
            batch["rollout_weight"], self.rollout_stats = rollout_weights(batch["old_logp"], behaviour, batch["mask"],
                                                                          cfg.rollout_is_cap)
        if cfg.keeps_reference:
            batch["ref_logp"] = np.asarray(completion_logprobs(self.ref_params, batch, model_cfg=self.model_cfg,
                                                               temperature=cfg.temperature))
            self.counters["ref_tokens"] += int(ro["valid"][idx].sum() + ro["prompt_valid"][idx].sum())
        return {k: jnp.asarray(v) for k, v in batch.items()}
