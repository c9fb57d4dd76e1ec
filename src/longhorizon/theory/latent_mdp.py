"""Latent MDPs with the context revealed in hindsight, and an exact planner over beliefs.

An LMDP (Kwon et al. 2021; Zhou, Wang & Du 2023) is M tabular MDPs over the same S states, A actions
and horizon H. Each episode a context m ~ w is drawn and kept hidden; the agent starts in state 0 and
plays MDP m: s_{h+1} ~ P_m(. | s_h, a_h), reward R_m(s_h, a_h). Rewards are normalised so that an
episode's total is at most 1 (H * max R <= 1). At the episode's end the context is revealed (learning
uses it, acting cannot). The agent observes states and actions; rewards count towards the return but
carry no information during the episode (they are revealed with the context), so the optimal policy
is a function of the state-action history, through the posterior over contexts (the belief)

    b_{h+1}(m) = b_h(m) P_m(s' | s, a) / sum_n b_h(n) P_n(s' | s, a)                     (Bayes)

**Belief-grid planner (M = 2), over alpha vectors.** The belief is one number b = P(m = 0) in [0, 1],
kept on the grid b_g = g / G, g = 0..G (resolution 1/G); after each transition it is Bayes-updated and
snapped to the nearest grid point, g' = snap(b'(g, s, a, s')). The agent is then a finite-state
controller over (s, g), and the DP keeps its alpha vectors, alpha_{h,m}(s, g) = the controller's
expected remaining return in context m (Zhou et al.'s alpha vectors, here on the grid):

    Q_h(s, g, a) = sum_m b_g(m) [R_m(s, a) + sum_s' P_m(s' | s, a) alpha_{h+1,m}(s', g')],
    a_h(s, g) = argmax_a Q_h(s, g, a),  alpha_{h,m}(s, g) = R_m(s, a_h) + P_m alpha_{h+1,m}(s', g'),

alpha_{H+1} = 0. An optional optimism bonus is added per context and each alpha is truncated at 1.
Grid error: V*_h(s, .) is a maximum of functions linear in b with slopes in [-1, 1] (returns lie in
[0, 1]), so acting at g instead of the true posterior costs at most 1/(2G) per snap, twice per step
(once in the alpha of the next step, once in V*'s Lipschitz bound); by induction the controller's exact
value lies in [V* - H/G, V*]. Its exact value in any true LMDP is the same backward pass with its
actions fixed (:func:`controller_value`). :func:`optimal_value_by_enumeration` and
:func:`history_policy_value` enumerate every history on tiny instances, to test both.

The planner and the controller's value are jittable JAX (float64 under ``jax.enable_x64(True)``);
the enumerations are plain Python over numpy. Shapes: P [M, S, A, S], R [M, S, A], w [M].
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError

TOLERANCE = 1e-9


@dataclasses.dataclass(frozen=True)
class LMDP:
    """M contexts of a tabular MDP: ``transitions`` [M, S, A, S], ``rewards`` [M, S, A], ``weights`` [M]."""

    transitions: np.ndarray
    rewards: np.ndarray
    weights: np.ndarray
    horizon: int
    name: str = "lmdp"

    def __post_init__(self):
        P, R, w = (np.asarray(x, np.float64) for x in (self.transitions, self.rewards, self.weights))
        object.__setattr__(self, "transitions", P)
        object.__setattr__(self, "rewards", R)
        object.__setattr__(self, "weights", w)
        if P.ndim != 4 or P.shape[1] != P.shape[3] or R.shape != P.shape[:3] or w.shape != P.shape[:1]:
            raise UsageError(f"LMDP arrays have shapes {P.shape}, {R.shape}, {w.shape}; pass transitions [M, S, A, S], "
                             "rewards [M, S, A] and weights [M].")
        if self.horizon < 1:
            raise UsageError(f"LMDP horizon is {self.horizon}; pass a horizon of at least 1.")
        if (P < 0).any() or np.abs(P.sum(-1) - 1).max() > TOLERANCE or (w < 0).any() or abs(w.sum() - 1) > TOLERANCE:
            raise UsageError("LMDP transitions or weights are not probability distributions; make each row "
                             "non-negative and sum to 1.")
        if (R < 0).any() or self.horizon * R.max() > 1 + TOLERANCE:
            raise UsageError(f"LMDP rewards reach {R.max():.3g} per step over {self.horizon} steps; scale them into "
                             "[0, 1/H] so an episode's total is at most 1.")

    @property
    def num_contexts(self) -> int:
        return self.transitions.shape[0]

    @property
    def num_states(self) -> int:
        return self.transitions.shape[1]

    @property
    def num_actions(self) -> int:
        return self.transitions.shape[2]


def random_lmdp(states: int, actions: int, horizon: int, seed: int, deterministic: bool = False,
                weights=(0.6, 0.4)) -> LMDP:
    """Two contexts with Dirichlet(1) transitions (or, ``deterministic``, one random next state per
    (m, s, a): zero-variance transitions) and rewards U[0, 1] / H. The same ``seed`` gives the same
    instance at every H up to the 1/H reward scale."""
    rng = np.random.default_rng(seed)
    shape = (len(weights), states, actions)
    if deterministic:
        P = np.eye(states)[rng.integers(states, size=shape)]
    else:
        P = rng.dirichlet(np.ones(states), size=shape)
    R = rng.uniform(size=shape) / horizon
    kind = "deterministic" if deterministic else "stochastic"
    return LMDP(P, R, np.array(weights), horizon, f"{kind} S={states} A={actions} H={horizon} seed={seed}")


def bayes_update(belief, likelihood):
    """b'(m) = b(m) L(m) / sum_n b(n) L(n) over the last axis; where sum_n b(n) L(n) = 0 (the
    transition is impossible under every context the belief allows) the belief is kept."""
    joint = belief * likelihood
    total = joint.sum(-1, keepdims=True)
    return jnp.where(total > 0, joint / jnp.where(total > 0, total, 1.0), belief)


def grid_beliefs(grid: int) -> jnp.ndarray:
    """[G+1, 2]: the grid's beliefs (g/G, 1 - g/G) over the two contexts."""
    if grid < 1:
        raise UsageError(f"belief grid has {grid} intervals; pass at least 1.")
    b = jnp.arange(grid + 1) / grid
    return jnp.stack([b, 1 - b], -1)


def snap(belief0, grid: int) -> jnp.ndarray:
    """Index of the grid point nearest to P(m = 0) = ``belief0``."""
    return jnp.rint(belief0 * grid).astype(jnp.int32)


def belief_transitions(transitions, grid: int) -> jnp.ndarray:
    """[S, A, S', G+1]: the grid index of snap(b'(g, s, a, s')), Bayes under ``transitions`` [2, S, A, S]
    (the model the agent tracks its belief with)."""
    likelihood = jnp.moveaxis(transitions, 0, -1)[..., None, :]  # [S, A, S', 1, 2]
    return snap(bayes_update(grid_beliefs(grid), likelihood)[..., 0], grid)


class BeliefPlan(NamedTuple):
    """The DP's result (a pytree, so it vmaps). ``alpha`` [H_max+1, 2, S, G+1] (per-context alpha
    vectors under the planning model), ``actions`` [H_max, S, G+1] (greedy; rows h >= H unused),
    ``next_index`` [S, A, S', G+1] (the controller's belief transition), ``start`` [] (the start
    belief's grid index)."""

    alpha: jnp.ndarray
    actions: jnp.ndarray
    next_index: jnp.ndarray
    start: jnp.ndarray

    def start_value(self, weights) -> jnp.ndarray:
        """sum_m w_m alpha_{1,m}(s = 0, start): the value under the planning model with context weights ``weights``."""
        return jnp.asarray(weights) @ self.alpha[0, :, 0, self.start]


Bonus = Callable[[jnp.ndarray], jnp.ndarray]  # variance of the next alpha [2, S, A, G+1] -> bonus [2, S, A, G+1]


def _next_alpha(alpha_next, next_index):
    """u[m, s, a, s', g] = alpha_{h+1,m}(s', g'(s, a, s', g)) from ``alpha_next`` [M, S, G+1]."""
    M, S, G1 = alpha_next.shape
    flat = (jnp.arange(S)[None, None, :, None] * G1 + next_index).reshape(-1)
    return alpha_next.reshape(M, -1)[:, flat].reshape((M,) + next_index.shape)


def plan(transitions, rewards, weights, horizon, grid: int, max_horizon: int, bonus: Bonus | None = None) -> BeliefPlan:
    """Backward DP over (h, s, belief grid) for two contexts (module docstring); jittable, ``horizon``
    may be traced (arrays are sized by the static ``max_horizon``).

    ``transitions`` [2, S, A, S], ``rewards`` [2, S, A], ``weights`` [2] (the start belief). ``bonus``,
    given the per-context variance of the next alpha under ``transitions``, returns an optimism bonus
    added per context; each alpha is then truncated at 1 (no return exceeds 1). Without it this is the
    plain planner."""
    P = jnp.asarray(transitions)
    if P.ndim != 4 or P.shape[0] != 2:
        raise UsageError(f"the belief-grid planner takes two contexts (transitions [2, S, A, S]), got shape "
                         f"{P.shape}; use optimal_value_by_enumeration for other context counts.")
    _, S, A, _ = P.shape
    beliefs = grid_beliefs(grid).astype(P.dtype)
    next_index = belief_transitions(P, grid)

    def backward(i, carry):
        alpha, actions = carry
        h = horizon - 1 - i
        u = _next_alpha(alpha[h + 1], next_index)  # [2, S, A, S', G+1]
        mean = (P[..., None] * u).sum(3)  # [2, S, A, G+1]
        per_context = rewards[..., None] + mean
        if bonus is not None:
            variance = jnp.maximum((P[..., None] * u * u).sum(3) - mean * mean, 0.0)
            per_context = jnp.minimum(per_context + bonus(variance), 1.0)
        best = (beliefs.T[:, None, None, :] * per_context).sum(0).argmax(1)  # [S, G+1]
        chosen = jnp.take_along_axis(per_context, best[None, :, None, :], 2)[:, :, 0]  # [2, S, G+1]
        return alpha.at[h].set(chosen), actions.at[h].set(best.astype(jnp.int32))

    init = (jnp.zeros((max_horizon + 1, 2, S, grid + 1), P.dtype), jnp.zeros((max_horizon, S, grid + 1), jnp.int32))
    alpha, actions = jax.lax.fori_loop(0, horizon, backward, init)
    return BeliefPlan(alpha, actions, next_index, snap(jnp.asarray(weights)[0], grid))


def controller_value(transitions, rewards, plan_: BeliefPlan, horizon) -> jnp.ndarray:
    """[M]: the exact expected return, per true context, of acting by ``plan_`` (its greedy actions at
    the tracked, snapped belief) in the MDPs ``transitions`` [M, S, A, S], ``rewards`` [M, S, A]:
    the alpha-vector recursion with the actions fixed; jittable."""
    S = transitions.shape[1]
    states = jnp.arange(S)[:, None]
    plan_ = jax.tree.map(jnp.asarray, plan_)
    transitions, rewards = jnp.asarray(transitions), jnp.asarray(rewards)

    def backward(i, alpha):
        a = plan_.actions[horizon - 1 - i]  # [S, G+1]
        u = _next_alpha(alpha, plan_.next_index)  # [M, S, A, S', G+1]
        u = jnp.take_along_axis(u, a[None, :, None, None, :], 2)[:, :, 0]  # [M, S, S', G+1] at a(s, g)
        step = jnp.moveaxis(transitions[:, states, a], -1, -2)  # [M, S, S', G+1]
        return rewards[:, states, a] + (step * u).sum(2)

    alpha = jnp.zeros(transitions.shape[:2] + plan_.alpha.shape[-1:], transitions.dtype)
    return jax.lax.fori_loop(0, horizon, backward, alpha)[:, 0, plan_.start]


@functools.partial(jax.jit, static_argnames=("grid", "max_horizon"))
def _plan(transitions, rewards, weights, horizon, grid: int, max_horizon: int):
    return plan(transitions, rewards, weights, horizon, grid, max_horizon)


def plan_true(lmdp: LMDP, grid: int, max_horizon: int | None = None) -> tuple[BeliefPlan, float]:
    """The plain planner on the true model (float64) and its controller's exact value sum_m w_m
    alpha_{1,m}(0, start): a real history-dependent policy's value, in [V* - H/G, V*]."""
    with jax.enable_x64(True):
        result = jax.tree.map(np.asarray, _plan(lmdp.transitions, lmdp.rewards, lmdp.weights, lmdp.horizon, grid,
                                                max_horizon or lmdp.horizon))
    return result, float(lmdp.weights @ result.alpha[0, :, 0, result.start])


# ---- exact enumeration of histories (tiny instances: (S A)^H histories) ----


def optimal_value_by_enumeration(lmdp: LMDP) -> float:
    """max over history-dependent policies of E[return], by expectimax over every history.

    With alpha(m) = w_m prod_t P_m(s_{t+1} | s_t, a_t) the unnormalised posterior of a history,
    U(history) = max_a [sum_m alpha(m) R_m(s, a) + sum_s' U(history, a, s')], and V* = U(s_1 = 0)."""
    P, R = lmdp.transitions, lmdp.rewards

    def best(h: int, s: int, alpha: np.ndarray) -> float:
        if h == lmdp.horizon or alpha.sum() == 0:
            return 0.0
        return max(alpha @ R[:, s, a] + sum(best(h + 1, t, alpha * P[:, s, a, t]) for t in range(lmdp.num_states))
                   for a in range(lmdp.num_actions))

    return best(0, 0, lmdp.weights)


def history_policy_value(lmdp: LMDP, policy: Callable[[tuple], int]) -> np.ndarray:
    """[M]: the exact expected return per context of ``policy(history) -> action``, history being
    (s_1, a_1, ..., s_h), by enumeration of every history."""
    P, R = lmdp.transitions, lmdp.rewards

    def value(history: tuple, reach: np.ndarray) -> np.ndarray:
        if len(history) // 2 == lmdp.horizon or reach.sum() == 0:
            return np.zeros(lmdp.num_contexts)
        s = history[-1]
        a = policy(history)
        out = reach * R[:, s, a]
        for t in range(lmdp.num_states):
            out = out + value(history + (a, t), reach * P[:, s, a, t])
        return out

    return value((0,), np.ones(lmdp.num_contexts))


def controller_as_history_policy(plan_: BeliefPlan) -> Callable[[tuple], int]:
    """``plan_``'s controller as a function of the history (s_1, a_1, ..., s_h): replays the snapped belief."""
    actions, next_index = np.asarray(plan_.actions), np.asarray(plan_.next_index)

    def policy(history: tuple) -> int:
        g = int(plan_.start)
        for t in range(0, len(history) - 1, 2):
            g = next_index[history[t], history[t + 1], history[t + 2], g]
        return int(actions[(len(history) - 1) // 2, history[-1], g])

    return policy
