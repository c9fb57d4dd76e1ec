"""Optimistic model-based learning in latent MDPs with the context revealed in hindsight.

After Zhou, Wang & Du (2023), "Horizon-Free and Variance-Dependent RL for Latent MDPs", the
value-optimistic instance of their framework, which builds on MVP (Zhang, Ji & Du 2021, "Is RL more
difficult than bandits?"): an empirical model, a Bernstein bonus on the next value, truncation at 1, and
a doubling update schedule. At the start of episode k:

1. If some N_m(s, a) has doubled since the last plan (MVP's trigger: the count reached 1, 2, 4, 8, ...),
   rebuild the empirical model from the per-context counts (the context is revealed at each episode's end),
   P_hat_m(s' | s, a) = N_m(s, a, s') / N_m(s, a) (uniform where N_m(s, a) = 0), w_hat_m = (n_m + 1) / (k + M),
   and plan optimistically with the belief-grid planner (:func:`longhorizon.theory.latent_mdp.plan`): per
   context the next alpha vector's empirical mean gets a bonus and each alpha is truncated at 1,
       bernstein (the paper's, variance-aware):  beta = c1 sqrt(Var_{P_hat_m}(alpha') iota / N) + c2 iota / N,
       hoeffding (baseline):                     beta = c1 sqrt(iota / (4 N)) + c2 iota / N,
   with iota = 2 ln(2 M S A H K / delta), N = max(N_m(s, a), 1) and MVP's constants c1 = 460/9, c2 = 544/9
   (:data:`C1`, :data:`C2`). The baseline is the same bonus with the variance replaced by its largest value
   for returns in [0, 1] (1/4). Otherwise keep the last plan (the schedule bounds the number of plans by
   M S A log2(K H) per learner).
2. Act with the plan's controller (belief tracked under P_hat, snapped to the grid); record the
   transitions under the revealed context.

Var_{P_hat_m}(alpha') is the variance of the next alpha vector's values under P_hat_m, so on a deterministic
(zero-variance) LMDP the Bernstein bonus is c2 iota / N; summed over an episode the variances are bounded
by the return's (<= 1), which removes the polynomial H that a range-only bonus pays.

The episode loop is one jitted ``scan`` over episodes for every learner at once (seeds x bonus kinds),
in float64; the plan is rebuilt under a ``cond`` only in episodes where some learner's trigger fired, so
K = 1e5 episodes cost about as many rollouts plus a few thousand plans; the horizon is traced, so every
H up to ``Config.max_horizon`` shares one compilation.

Regret: Regret(K) = sum_{k <= K} (V_ref - V^{pi_k}), with V^{pi_k} the exact value of episode k's
controller on the true LMDP (:func:`~longhorizon.theory.latent_mdp.controller_value`, computed when the
plan is built) and V_ref the exact value of the plain planner's controller on the true model at the same
grid. Deviations from the paper: the context weights are estimated without a bonus; rewards are known
(so MVP's reward-variance term is absent); every context starts in state 0.
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
C1, C2 = 460 / 9, 544 / 9  # MVP's bonus constants (Zhang, Ji & Du 2021, Algorithm 1), which the paper's solver inherits


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
    c1: float = C1  # the bonus's variance (or range) term
    c2: float = C2  # the bonus's lower-order term

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


def bernstein_bonus(counts, variance, iota, c1=C1, c2=C2):
    """c1 sqrt(Var iota / N) + c2 iota / N, N = max(count, 1); ``counts`` [..., S, A], ``variance`` [..., S, A, G+1]."""
    n = jnp.maximum(counts, 1)[..., None]
    return c1 * jnp.sqrt(variance * iota / n) + c2 * iota / n


def hoeffding_bonus(counts, variance, iota, c1=C1, c2=C2):
    """c1 sqrt(iota / (4 N)) + c2 iota / N: the Bernstein bonus at the largest variance of a value in [0, 1] (1/4);
    ``variance`` only sets the shape."""
    return bernstein_bonus(counts, jnp.full_like(variance, 0.25), iota, c1, c2)


def triggered(visits, planned):
    """MVP's doubling trigger: some N(s, a) reached 1, 2, 4, ..., i.e. at least twice (and at least 1 more than) its
    value at the last plan; ``visits`` and ``planned`` [..., M, S, A] -> [...]."""
    return jnp.any((visits >= jnp.maximum(2 * planned, 1)), axis=(-3, -2, -1))


def empirical_model(counts, context_counts):
    """(P_hat [M, S, A, S], w_hat [M]) from ``counts`` [M, S, A, S] and ``context_counts`` [M]."""
    visits = counts.sum(-1, keepdims=True)
    P_hat = jnp.where(visits > 0, counts / jnp.maximum(visits, 1), 1.0 / counts.shape[-1])
    return P_hat, (context_counts + 1) / (context_counts.sum() + context_counts.shape[-1])


def rollout(key, plan_: lm.BeliefPlan, counts, context_counts, *, transitions, weights, horizon):
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


def replan(counts, context_counts, use_bernstein, *, transitions, rewards, weights, horizon, iota, scale, c1, c2,
           grid, max_horizon):
    """Step 1 of the module docstring for one learner: the optimistic plan and its exact value V^pi on the true LMDP."""
    P_hat, w_hat = empirical_model(counts, context_counts)
    visits = counts.sum(-1)

    def optimism(variance):
        return scale * jnp.where(use_bernstein, bernstein_bonus(visits, variance, iota, c1, c2),
                                 hoeffding_bonus(visits, variance, iota, c1, c2))

    controller = lm.plan(P_hat, rewards, w_hat, horizon, grid, max_horizon, optimism)
    return controller, lm.controller_value(transitions, rewards, controller, horizon) @ weights


def _replan_all(counts, context_counts, use_bernstein, transitions, rewards, weights, horizon, iota, scale, c1, c2, grid,
                max_horizon):
    """:func:`replan` for L learners at once; every argument but the scalars has a leading learner axis."""
    def one(counts, context_counts, use_bernstein, transitions, rewards, weights):
        return replan(counts, context_counts, use_bernstein, transitions=transitions, rewards=rewards, weights=weights,
                      horizon=horizon, iota=iota, scale=scale, c1=c1, c2=c2, grid=grid, max_horizon=max_horizon)

    return jax.vmap(one)(counts, context_counts, use_bernstein, transitions, rewards, weights)


_first_plan = jax.jit(_replan_all, static_argnames=("grid", "max_horizon"))


@functools.partial(jax.jit, static_argnames=("grid", "max_horizon"))
def _chunk(carry, keys, use_bernstein, transitions, rewards, weights, horizon, iota, scale, c1, c2, grid, max_horizon):
    """Episodes along ``keys`` [chunk, L] for L learners at once (``transitions`` [L, M, S, A, S], ``rewards``
    [L, M, S, A], ``weights`` [L, M]: each learner's instance): (carry, values [chunk, L]). ``carry`` = (counts
    [L, M, S, A, S], context counts [L, M], plan [L, ...], value [L], counts at the plan [L, M, S, A])."""
    def act(key, controller, counts, context_counts, transitions, weights):
        return rollout(key, controller, counts, context_counts, transitions=transitions, weights=weights, horizon=horizon)

    def body(carry, key):
        counts, context_counts, controller, value, planned = carry
        visits = counts.sum(-1)
        fire = triggered(visits, planned)  # [L]

        def rebuild(_):
            new, new_value = _replan_all(counts, context_counts, use_bernstein, transitions, rewards, weights, horizon,
                                         iota, scale, c1, c2, grid, max_horizon)
            keep = lambda a, b: jnp.where(fire.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
            return jax.tree.map(keep, new, controller), jnp.where(fire, new_value, value)

        # plans are built only in episodes where some learner's trigger fired (under vmap a cond runs both branches)
        controller, value = jax.lax.cond(fire.any(), rebuild, lambda _: (controller, value), None)
        planned = jnp.where(fire[:, None, None, None], visits, planned)
        counts, context_counts = jax.vmap(act)(key, controller, counts, context_counts, transitions, weights)
        return (counts, context_counts, controller, value, planned), value

    return jax.lax.scan(body, carry, keys)


def cumulative_regret(reference: float, values) -> np.ndarray:
    """Regret(K) = sum_{k <= K} (reference - values_k) along the last axis."""
    return np.cumsum(reference - np.asarray(values, np.float64), -1)


def log_log_fit(x, y) -> dict:
    """OLS slope of log y on log x with its 95% t interval: ``{slope, lo, hi, n}`` (an infinite interval from two points)."""
    from scipy import stats

    lx, ly = np.log(np.asarray(x, np.float64)), np.log(np.asarray(y, np.float64))
    fit = stats.linregress(lx, ly)
    half = stats.t.ppf(0.975, len(lx) - 2) * fit.stderr if len(lx) > 2 else float("inf")
    return {"slope": float(fit.slope), "lo": float(fit.slope - half), "hi": float(fit.slope + half), "n": len(lx)}


def regret_rates(regret: np.ndarray) -> list[float]:
    """The empirical regret rate of each learner (rows of ``regret [..., K]``, cumulative): the slope of log Regret(k)
    on log k over the last decade of k (20 log-spaced points; regret floored at 1e-9); 0.5 is sqrt(K) regret."""
    K = regret.shape[-1]
    ks = np.unique(np.geomspace(max(K // 10, 1), K, 20).astype(int))
    flat = np.asarray(regret).reshape(-1, K)
    return [log_log_fit(ks, np.maximum(r[ks - 1], 1e-9))["slope"] for r in flat]


def learn(lmdp: lm.LMDP | Sequence[lm.LMDP], config: Config, kinds: Sequence[str] | None = None, seed: int = 0) -> dict:
    """``config.seeds`` learners per bonus kind (default: ``config.bonus``) on each LMDP (one, or several with the
    same sizes and horizon), all in one program.

    Returns {"reference": V_ref, "iota": iota, kind: {"values": [seeds, K] (exact V^{pi_k}), "regret": [seeds, K]
    (cumulative)} for each kind}; for a list of LMDPs, "reference" is a list and the arrays are [instances, seeds, K]."""
    many = not isinstance(lmdp, lm.LMDP)
    lmdps = list(lmdp) if many else [lmdp]
    kinds = tuple(kinds or (config.bonus,))
    for kind in kinds:
        Config(bonus=kind)  # validates the name
    for one in lmdps:
        if one.num_contexts != 2:
            raise UsageError(f"the learner plans on a two-context belief grid, the LMDP has {one.num_contexts} "
                             "contexts; pass a two-context LMDP.")
        if one.horizon > config.max_horizon:
            raise UsageError(f"the LMDP's horizon {one.horizon} exceeds max_horizon={config.max_horizon}; "
                             "raise max_horizon.")
        if (one.transitions.shape, one.horizon) != (lmdps[0].transitions.shape, lmdps[0].horizon):
            raise UsageError("the LMDPs learned together must share their sizes and horizon; learn them apart.")
    first_lmdp = lmdps[0]
    M, S, A = first_lmdp.num_contexts, first_lmdp.num_states, first_lmdp.num_actions
    per, K = len(kinds) * config.seeds, config.episodes  # learners per instance; learner = (instance, kind, seed)
    L = len(lmdps) * per
    chunks = -(-K // config.chunk)
    references = [lm.plan_true(one, config.grid, config.max_horizon)[1] for one in lmdps]
    iota = log_term(first_lmdp, K, config.delta)
    with jax.enable_x64(True):
        use_bernstein = jnp.tile(jnp.repeat(jnp.array([kind == "bernstein" for kind in kinds]), config.seeds), len(lmdps))
        keys = jax.random.split(jax.random.key(seed), chunks * config.chunk * L).reshape(chunks, config.chunk, L)
        tables = [jnp.repeat(jnp.stack([jnp.asarray(getattr(one, name)) for one in lmdps]), per, axis=0)
                  for name in ("transitions", "rewards", "weights")]
        scalars = (first_lmdp.horizon, iota, config.bonus_scale, config.c1, config.c2)
        counts, context_counts = jnp.zeros((L, M, S, A, S)), jnp.zeros((L, M))
        first, value = _first_plan(counts, context_counts, use_bernstein, *tables, *scalars, grid=config.grid,
                                   max_horizon=config.max_horizon)  # the plan of episode 1, before any data
        carry = (counts, context_counts, first, value, jnp.zeros((L, M, S, A)))
        values = []
        for c in range(chunks):
            carry, chunk_values = _chunk(carry, keys[c], use_bernstein, *tables, *scalars, config.grid, config.max_horizon)
            values.append(np.asarray(chunk_values).T)
    values = np.concatenate(values, 1)[:, :K].reshape(len(lmdps), len(kinds), config.seeds, K)
    out = {"reference": references if many else references[0], "iota": iota}
    for i, kind in enumerate(kinds):
        v = values[:, i] if many else values[0, i]
        ref = np.asarray(references)[:, None, None] if many else references[0]
        out[kind] = {"values": v, "regret": cumulative_regret(ref, v)}
    return out
