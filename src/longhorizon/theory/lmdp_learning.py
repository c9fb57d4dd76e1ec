"""Optimistic model-based learning in latent MDPs with the context revealed in hindsight.

After Zhou, Wang & Du (2023), "Horizon-Free and Variance-Dependent RL for Latent MDPs", the
value-optimistic instance of their framework. Episode k:

1. Empirical model from per-context counts (the context is revealed at each episode's end):
   P_hat_m(s' | s, a) = N_m(s, a, s') / N_m(s, a) (uniform where N_m(s, a) = 0), w_hat_m = (n_m + 1) / (k + M).
2. Plan optimistically with the belief-grid planner (:func:`longhorizon.theory.latent_mdp.plan`):
   per context the next alpha vector's empirical mean gets a bonus and each alpha is truncated at 1,
       bernstein (the paper's, variance-aware):  beta = sqrt(2 Var_{P_hat_m}(alpha') iota / N) + iota / N,
       hoeffding (baseline, range only):         beta = sqrt(iota / (2 N)),
   with iota = 2 ln(2 M S A H K / delta) and N = max(N_m(s, a), 1). Var_{P_hat_m}(alpha') is the variance of
   the next alpha vector's values under P_hat_m, so on a deterministic (zero-variance) LMDP the Bernstein
   bonus is iota / N and regret grows only logarithmically; summed over an episode the variances are
   bounded by the return's (<= 1), which removes the polynomial H that the Hoeffding bonus pays.
3. Act with the plan's controller (belief tracked under P_hat, snapped to the grid); record the
   transitions under the revealed context.

The episode loop is one jitted ``scan`` over episodes, vmapped over learners (seeds x bonus kinds),
in float64; the horizon is traced, so every H up to ``Config.max_horizon`` shares one compilation.

Regret: Regret(K) = sum_{k <= K} (V_ref - V^{pi_k}), with V^{pi_k} the exact value of episode k's
controller on the true LMDP (:func:`~longhorizon.theory.latent_mdp.controller_value`) and V_ref the
exact value of the plain planner's controller on the true model at the same grid. Deviations from the
paper: the paper's constants are replaced by the ones above; the context weights are estimated without
a bonus; rewards are known; every context starts in state 0.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError
from longhorizon.theory import latent_mdp as lm

BONUSES = ("bernstein", "hoeffding")


@dataclasses.dataclass(frozen=True)
class Config:
    episodes: int = 1000
    bonus: str = "bernstein"
    grid: int = 20  # belief-grid intervals: resolution 1/grid
    delta: float = 0.1  # confidence level in iota
    seeds: int = 5
    max_horizon: int = 40  # arrays are sized by it; every H <= max_horizon shares one compilation
    chunk: int = 250  # episodes per jitted scan (Python regains control between chunks)
    bonus_scale: float = 1.0  # multiplies either bonus; 1 is the form above (a sensitivity knob, not tuned)

    def __post_init__(self):
        if self.bonus not in BONUSES:
            raise UsageError(f"bonus {self.bonus!r} is unknown; pass one of {', '.join(BONUSES)}.")
        if min(self.episodes, self.seeds, self.grid, self.max_horizon, self.chunk) < 1:
            raise UsageError("episodes, seeds, grid, max_horizon and chunk must each be at least 1; pass positive values.")
        if self.bonus_scale < 0:
            raise UsageError(f"bonus_scale is {self.bonus_scale}; pass a non-negative scale.")
        if not 0 < self.delta < 1:
            raise UsageError(f"delta is {self.delta}; pass a confidence level in (0, 1).")


def log_term(lmdp: lm.LMDP, episodes: int, delta: float) -> float:
    """iota = 2 ln(2 M S A H K / delta)."""
    return float(2 * np.log(2 * lmdp.num_contexts * lmdp.num_states * lmdp.num_actions * lmdp.horizon * episodes
                            / delta))


def bernstein_bonus(counts, variance, iota):
    """sqrt(2 Var iota / N) + iota / N, N = max(count, 1); ``counts`` [..., S, A], ``variance`` [..., S, A, G+1]."""
    n = jnp.maximum(counts, 1)[..., None]
    return jnp.sqrt(2 * variance * iota / n) + iota / n


def hoeffding_bonus(counts, variance, iota):
    """sqrt(iota / (2 N)): the range-only bonus (returns lie in [0, 1]); ``variance`` only sets the shape."""
    return jnp.broadcast_to(jnp.sqrt(iota / (2 * jnp.maximum(counts, 1)))[..., None], variance.shape)


def empirical_model(counts, context_counts):
    """(P_hat [M, S, A, S], w_hat [M]) from ``counts`` [M, S, A, S] and ``context_counts`` [M]."""
    visits = counts.sum(-1, keepdims=True)
    P_hat = jnp.where(visits > 0, counts / jnp.maximum(visits, 1), 1.0 / counts.shape[-1])
    return P_hat, (context_counts + 1) / (context_counts.sum() + context_counts.shape[-1])


def rollout(key, transitions, weights, plan_: lm.BeliefPlan, horizon, counts, context_counts):
    """One episode in the true LMDP acting by ``plan_``; returns the counts with its transitions added
    under the context revealed at its end."""
    M, S = transitions.shape[:2]
    key, pick = jax.random.split(key)
    context = jax.random.choice(pick, M, p=weights)

    def step(h, carry):
        s, g, counts, key = carry
        key, pick = jax.random.split(key)
        a = plan_.actions[h, s, g]
        nxt = jax.random.choice(pick, S, p=transitions[context, s, a])
        return nxt, plan_.next_index[s, a, nxt, g], counts.at[context, s, a, nxt].add(1), key

    counts = jax.lax.fori_loop(0, horizon, step, (0, plan_.start, counts, key))[2]
    return counts, context_counts.at[context].add(1)


def episode(carry, key, *, transitions, rewards, weights, horizon, iota, scale, use_bernstein, grid, max_horizon):
    """Steps 1-3 of the module docstring for one learner; returns the new counts and V^{pi_k}."""
    counts, context_counts = carry
    P_hat, w_hat = empirical_model(counts, context_counts)
    visits = counts.sum(-1)

    def optimism(variance):
        return scale * jnp.where(use_bernstein, bernstein_bonus(visits, variance, iota),
                                 hoeffding_bonus(visits, variance, iota))

    controller = lm.plan(P_hat, rewards, w_hat, horizon, grid, max_horizon, optimism)
    value = lm.controller_value(transitions, rewards, controller, horizon) @ weights
    return rollout(key, transitions, weights, controller, horizon, counts, context_counts), value


@functools.partial(jax.jit, static_argnames=("grid", "max_horizon"))
def _chunk(carry, keys, use_bernstein, transitions, rewards, weights, horizon, iota, scale, grid, max_horizon):
    """Episodes along ``keys`` [L, chunk, 2] for L learners at once: (carry, values [L, chunk])."""

    def one(carry, keys, use_bernstein):
        body = functools.partial(episode, transitions=transitions, rewards=rewards, weights=weights, horizon=horizon,
                                 iota=iota, scale=scale, use_bernstein=use_bernstein, grid=grid, max_horizon=max_horizon)
        return jax.lax.scan(body, carry, keys)

    return jax.vmap(one)(carry, keys, use_bernstein)


def cumulative_regret(reference: float, values) -> np.ndarray:
    """Regret(K) = sum_{k <= K} (reference - values_k) along the last axis."""
    return np.cumsum(reference - np.asarray(values, np.float64), -1)


def learn(lmdp: lm.LMDP, config: Config, kinds: Sequence[str] | None = None, seed: int = 0) -> dict:
    """``config.seeds`` learners per bonus kind (default: ``config.bonus``), all in one vmapped program.

    Returns {"reference": V_ref, "iota": iota, kind: {"values": [seeds, K] (exact V^{pi_k}),
    "regret": [seeds, K] (cumulative)} for each kind}."""
    kinds = tuple(kinds or (config.bonus,))
    for kind in kinds:
        Config(bonus=kind)  # validates the name
    if lmdp.num_contexts != 2:
        raise UsageError(f"the learner plans on a two-context belief grid, the LMDP has {lmdp.num_contexts} "
                         "contexts; pass a two-context LMDP.")
    if lmdp.horizon > config.max_horizon:
        raise UsageError(f"the LMDP's horizon {lmdp.horizon} exceeds max_horizon={config.max_horizon}; "
                         "raise max_horizon.")
    M, S, A = lmdp.num_contexts, lmdp.num_states, lmdp.num_actions
    L, K = len(kinds) * config.seeds, config.episodes
    chunks = -(-K // config.chunk)
    _, reference = lm.plan_true(lmdp, config.grid, config.max_horizon)
    iota = log_term(lmdp, K, config.delta)
    with jax.enable_x64(True):
        use_bernstein = jnp.repeat(jnp.array([kind == "bernstein" for kind in kinds]), config.seeds)
        keys = jax.random.split(jax.random.key(seed), L * chunks * config.chunk).reshape(chunks, L, config.chunk)
        carry = (jnp.zeros((L, M, S, A, S)), jnp.zeros((L, M)))
        values = []
        for c in range(chunks):
            carry, chunk_values = _chunk(carry, keys[c], use_bernstein, lmdp.transitions, lmdp.rewards, lmdp.weights,
                                         lmdp.horizon, iota, config.bonus_scale, config.grid, config.max_horizon)
            values.append(np.asarray(chunk_values))
    values = np.concatenate(values, 1)[:, :K].reshape(len(kinds), config.seeds, K)
    out = {"reference": reference, "iota": iota}
    for kind, v in zip(kinds, values):
        out[kind] = {"values": v, "regret": cumulative_regret(reference, v)}
    return out
