"""Latent MDPs with the context revealed in hindsight, and an exact planner over beliefs.

An LMDP (Kwon et al. 2021; Zhou, Wang & Du 2023) is M tabular MDPs over the same S states, A actions
and horizon H. Each episode a context m ~ w is drawn and kept hidden; the agent starts in state 0 and
plays MDP m: s_{h+1} ~ P_m(. | s_h, a_h), reward R_m(s_h, a_h). Rewards are normalised so that an
episode's total is at most 1 (H * max R <= 1). At the episode's end the context is revealed (learning
uses it, acting cannot). The agent observes states and actions; rewards count towards the return but
carry no information during the episode (they are revealed with the context), so the optimal policy
is a function of the state-action history, through the posterior over contexts (the belief)

    b_{h+1}(m) = b_h(m) P_m(s' | s, a) / sum_n b_h(n) P_n(s' | s, a)                     (Bayes)

**Belief-grid planner (M = 2).** The belief is one number b = P(m = 0) in [0, 1], kept on the grid
b_g = g / G, g = 0..G (resolution 1/G). Backward DP over (h, s, g) with the next belief snapped to the
nearest grid point,

    Q_h(s, g, a) = sum_m b_g(m) [R_m(s, a) + sum_s' P_m(s' | s, a) V_{h+1}(s', snap(b'(g, s, a, s')))],
    V_h(s, g) = max_a Q_h(s, g, a),  V_{H+1} = 0,

is within H / (2G) of the optimal value over all history-dependent policies: V*_h(s, .) is a maximum of
functions linear in b with slopes in [-1, 1] (returns lie in [0, 1]), so each snap costs at most
1 / (2G) and H of them (the start belief included) add up. Acting with the DP's greedy actions while
tracking the snapped belief is a finite-state controller over (s, g); its exact value is a forward
pass over (s, g) per context (:func:`controller_value`). :func:`optimal_value_by_enumeration` and
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
    """The DP's result (a pytree, so it vmaps). ``value`` [H_max+1, S, G+1], ``actions`` [H_max, S, G+1]
    (greedy; rows h >= H unused), ``next_index`` [S, A, S', G+1] (the controller's belief transition),
    ``start`` [] (the start belief's grid index)."""

    value: jnp.ndarray
    actions: jnp.ndarray
    next_index: jnp.ndarray
    start: jnp.ndarray

    def start_value(self) -> jnp.ndarray:
        """V_1(s = 0, start belief)."""
        return self.value[0, 0, self.start]


Bonus = Callable[[jnp.ndarray], jnp.ndarray]  # variance of the next value [2, S, A, G+1] -> bonus [2, S, A, G+1]


def plan(transitions, rewards, weights, horizon, grid: int, max_horizon: int, bonus: Bonus | None = None) -> BeliefPlan:
    """Backward DP over (h, s, belief grid) for two contexts (module docstring); jittable, ``horizon``
    may be traced (arrays are sized by the static ``max_horizon``).

    ``transitions`` [2, S, A, S], ``rewards`` [2, S, A], ``weights`` [2]. ``bonus``, given the
    per-context variance of the next value under ``transitions``, returns an optimism bonus added per
    context; Q is then clipped at 1 (no return exceeds 1). Without it this is the plain planner."""
    P = jnp.asarray(transitions)
    if P.ndim != 4 or P.shape[0] != 2:
        raise UsageError(f"the belief-grid planner takes two contexts (transitions [2, S, A, S]), got shape "
                         f"{P.shape}; use optimal_value_by_enumeration for other context counts.")
    _, S, A, _ = P.shape
    beliefs = grid_beliefs(grid).astype(P.dtype)
    next_index = belief_transitions(P, grid)
    flat = (jnp.arange(S)[None, None, :, None] * (grid + 1) + next_index).reshape(-1)

    def backward(i, carry):
        value, actions = carry
        h = horizon - 1 - i
        u = value[h + 1].reshape(-1)[flat].reshape(S, A, S, grid + 1)  # u[s, a, s', g] = V_{h+1}(s', g')
        mean = jnp.einsum("msat,satg->msag", P, u)
        per_context = rewards[..., None] + mean
        if bonus is not None:
            variance = jnp.maximum(jnp.einsum("msat,satg->msag", P, u * u) - mean * mean, 0.0)
            per_context = per_context + bonus(variance)
        q = jnp.einsum("gm,msag->sga", beliefs, per_context)
        if bonus is not None:
            q = jnp.minimum(q, 1.0)
        return value.at[h].set(q.max(-1)), actions.at[h].set(q.argmax(-1).astype(jnp.int32))

    init = (jnp.zeros((max_horizon + 1, S, grid + 1), P.dtype), jnp.zeros((max_horizon, S, grid + 1), jnp.int32))
    value, actions = jax.lax.fori_loop(0, horizon, backward, init)
    return BeliefPlan(value, actions, next_index, snap(jnp.asarray(weights)[0], grid))


def controller_value(transitions, rewards, plan_: BeliefPlan, horizon) -> jnp.ndarray:
    """[M]: the exact expected return, per true context, of acting by ``plan_`` (its greedy actions at
    the tracked, snapped belief) in the MDPs ``transitions`` [M, S, A, S], ``rewards`` [M, S, A].
    A forward pass over the distribution of (s, g) per context; jittable."""
    M, S = transitions.shape[:2]
    G1 = plan_.value.shape[-1]
    states, grid_points = jnp.arange(S)[:, None], jnp.arange(G1)[None, :]

    def forward(h, carry):
        dist, total = carry  # dist [M, S, G+1]
        a = plan_.actions[h]  # [S, G+1]
        total = total + (dist * rewards[:, states, a]).sum((1, 2))
        step = transitions[:, states, a]  # [M, S, G+1, S']
        nxt = plan_.next_index[states[..., None], a[..., None], jnp.arange(S), grid_points[..., None]]
        target = jnp.arange(S) * G1 + nxt  # [S, G+1, S']: flat (s', g')
        dist = jnp.zeros((M, S * G1), dist.dtype).at[:, target].add(dist[..., None] * step).reshape(M, S, G1)
        return dist, total

    dist = jnp.zeros((M, S, G1), transitions.dtype).at[:, 0, plan_.start].set(1.0)
    return jax.lax.fori_loop(0, horizon, forward, (dist, jnp.zeros(M, transitions.dtype)))[1]


@functools.partial(jax.jit, static_argnames=("grid", "max_horizon"))
def _plan_and_value(transitions, rewards, weights, horizon, grid: int, max_horizon: int):
    result = plan(transitions, rewards, weights, horizon, grid, max_horizon)
    return result, controller_value(transitions, rewards, result, horizon) @ weights


def plan_true(lmdp: LMDP, grid: int, max_horizon: int | None = None) -> tuple[BeliefPlan, float]:
    """The plain planner on the true model (float64) and its controller's exact value sum_m w_m V_m:
    a real history-dependent policy's value, within H / G of the optimum on the instances tested."""
    with jax.enable_x64(True):
        result, value = _plan_and_value(lmdp.transitions, lmdp.rewards, lmdp.weights, lmdp.horizon, grid,
                                        max_horizon or lmdp.horizon)
        return jax.tree.map(np.asarray, result), float(value)


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
