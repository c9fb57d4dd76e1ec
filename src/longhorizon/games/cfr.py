"""CFR+ for repeated one-sided-information games with simultaneous moves (Tammelin 2014; Bowling et al. 2015).

The game: chance draws a type theta ~ prior [T], seen by player 1 only; then K stages, in each of which
player 1 picks a in [U1] and player 2 picks b in [U2] simultaneously, and both see (a, b) afterwards. A
public history at depth k is h = (a_0, b_0, ..., a_{k-1}, b_{k-1}), flattened row-major (H_k = (U1 U2)^k).
Player 1's information sets are (theta, h), player 2's are h. ``payoff`` [T, H_K] is J(theta, h_K), which
player 1 minimises and player 2 maximises.

CFR+ (alternating updates): with sigma^t from regret matching+ on the cumulative regrets Q,
Q(I, a) <- max(0, Q(I, a) + v(I, a) - sum_a' sigma(I, a') v(I, a')), v the counterfactual value
(the opponent's and chance's reach times the expected payoff below); the average strategy weights
iteration t by t and by the player's own reach. Exploitability: NashConv = max_b J(sigma_bar_1, b) -
min_a J(a, sigma_bar_2) >= 0, zero exactly at an equilibrium; the game value lies between the two.

Everything runs in float64 under ``jax.enable_x64`` (jitted, the K stages unrolled).
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.errors import UsageError


@dataclasses.dataclass(frozen=True)
class TreeShape:
    types: int
    actions1: int
    actions2: int
    steps: int

    def __post_init__(self):
        if min(self.types, self.actions1, self.actions2, self.steps) < 1:
            raise UsageError("types, actions and steps must all be >= 1; pass a non-empty game.")

    def histories(self, k: int) -> int:
        return (self.actions1 * self.actions2) ** k

    def nodes(self) -> int:
        """Decision nodes of the extensive form: per stage, T H_k for player 1 and T H_k U1 for player 2."""
        return sum(self.types * self.histories(k) * (1 + self.actions1) for k in range(self.steps))


def _strategy(regret):
    """Regret matching: sigma(a) = Q+(a) / sum Q+, uniform where every Q+ is 0; [..., U] -> [..., U]."""
    positive = jnp.maximum(regret, 0.0)
    total = positive.sum(-1, keepdims=True)
    return jnp.where(total > 0, positive / jnp.where(total > 0, total, 1.0), 1.0 / regret.shape[-1])


def _reach(shape: TreeShape, sigma1, sigma2):
    """Own reach probabilities per depth: pi1[k] [T, H_k] and pi2[k] [H_k]."""
    T, U1, U2 = shape.types, shape.actions1, shape.actions2
    pi1, pi2 = [jnp.ones((T, 1))], [jnp.ones((1,))]
    for k in range(shape.steps):
        step1 = pi1[-1][:, :, None, None] * sigma1[k][:, :, :, None]  # [T, H, U1, 1]
        pi1.append(jnp.broadcast_to(step1, step1.shape[:3] + (U2,)).reshape(T, -1))
        step2 = pi2[-1][:, None, None] * sigma2[k][:, None, :]  # [H, 1, U2]
        pi2.append(jnp.broadcast_to(step2, (step2.shape[0], U1, U2)).reshape(-1))
    return pi1, pi2


def _action_values(shape: TreeShape, payoff, prior, sigma1, sigma2, pi1):
    """Backward pass: per depth, player 1's q1[k] [T, H, U1] (expected J given theta, a) and player 2's
    counterfactual q2[k] [H, U2] (sum over theta of prior * pi1 * expected J given b)."""
    T, U1, U2 = shape.types, shape.actions1, shape.actions2
    value, q1, q2 = payoff, [None] * shape.steps, [None] * shape.steps
    for k in range(shape.steps - 1, -1, -1):
        child = value.reshape(T, -1, U1, U2)
        q1[k] = jnp.einsum("thab,hb->tha", child, sigma2[k])
        q2[k] = jnp.einsum("t,th,tha,thab->hb", prior, pi1[k], sigma1[k], child)
        value = jnp.einsum("tha,tha->th", sigma1[k], q1[k])
    return q1, q2, value


@partial(jax.jit, static_argnums=(0, 4))
def _iterate(shape: TreeShape, payoff, prior, carry, iterations: int):
    """``iterations`` CFR+ iterations (player 1 then player 2) from carry = (Q1, Q2, S1, S2, t)."""

    def one(carry, _):
        Q1, Q2, S1, S2, t = carry
        sigma1, sigma2 = [_strategy(q) for q in Q1], [_strategy(q) for q in Q2]
        pi1, pi2 = _reach(shape, sigma1, sigma2)
        q1, _, _ = _action_values(shape, payoff, prior, sigma1, sigma2, pi1)
        # player 1 minimises J: its counterfactual value of a is -prior * pi2 * q1
        Q1 = [jnp.maximum(Q1[k] + prior[:, None, None] * pi2[k][None, :, None]
                          * ((sigma1[k] * q1[k]).sum(-1, keepdims=True) - q1[k]), 0.0) for k in range(shape.steps)]
        S1 = [S1[k] + t * pi1[k][:, :, None] * sigma1[k] for k in range(shape.steps)]
        sigma1 = [_strategy(q) for q in Q1]
        pi1, _ = _reach(shape, sigma1, sigma2)
        _, q2, _ = _action_values(shape, payoff, prior, sigma1, sigma2, pi1)
        Q2 = [jnp.maximum(Q2[k] + q2[k] - (sigma2[k] * q2[k]).sum(-1, keepdims=True), 0.0) for k in range(shape.steps)]
        S2 = [S2[k] + t * pi2[k][:, None] * sigma2[k] for k in range(shape.steps)]
        return (Q1, Q2, S1, S2, t + 1.0), None

    carry, _ = jax.lax.scan(one, carry, None, length=iterations)
    return carry


def _normalise(total):
    s = total.sum(-1, keepdims=True)
    return jnp.where(s > 0, total / jnp.where(s > 0, s, 1.0), 1.0 / total.shape[-1])


@partial(jax.jit, static_argnums=(0,))
def _evaluate(shape: TreeShape, payoff, prior, sigma1, sigma2):
    """(J of the profile, max_b J(sigma1, b), min_a J(a, sigma2)): player 2's best reply is
    G_k(h) = max_b sum_a G_{k+1}(h, a, b) with G_K = sum_theta prior pi1 J (it cannot see theta or a);
    player 1's is B_k(theta, h) = min_a sum_b sigma2(h, b) B_{k+1}(theta, h, a, b)."""
    T, U1, U2 = shape.types, shape.actions1, shape.actions2
    pi1, _ = _reach(shape, sigma1, sigma2)
    _, _, value = _action_values(shape, payoff, prior, sigma1, sigma2, pi1)
    reply2 = (prior[:, None] * pi1[shape.steps] * payoff).sum(0)
    reply1 = payoff
    for k in range(shape.steps - 1, -1, -1):
        reply2 = reply2.reshape(-1, U1, U2).sum(1).max(-1)
        reply1 = jnp.einsum("thab,hb->tha", reply1.reshape(T, -1, U1, U2), sigma2[k]).min(-1)
    return (prior * value[:, 0]).sum(), reply2[0], (prior * reply1[:, 0]).sum()


@dataclasses.dataclass(frozen=True)
class CFRResult:
    value: float  # J of the average profile
    upper: float  # player 2's best reply to player 1's average strategy
    lower: float  # player 1's best reply to player 2's average strategy
    exploitability: float  # upper - lower (NashConv)
    iterations: int
    seconds: float  # wall time of the iterations, compile excluded
    compile_seconds: float
    sigma1: list  # average strategies, numpy [T, H_k, U1] and [H_k, U2]
    sigma2: list


def solve(payoff: np.ndarray, prior: np.ndarray, shape: TreeShape, iterations: int, chunk: int = 100) -> CFRResult:
    """Run CFR+ for ``iterations`` (a multiple of ``chunk``) on the game (module docstring)."""
    payoff, prior = np.asarray(payoff, np.float64), np.asarray(prior, np.float64)
    if payoff.shape != (shape.types, shape.histories(shape.steps)):
        raise UsageError(f"payoff must have shape {(shape.types, shape.histories(shape.steps))} (got {payoff.shape}); "
                         "pass J(theta, history) flattened over (a_0, b_0, ..., a_K-1, b_K-1).")
    if iterations < chunk or iterations % chunk:
        raise UsageError(f"iterations must be a positive multiple of chunk={chunk} (got {iterations}); round it.")
    with jax.enable_x64(True):
        payoff_j, prior_j = jnp.asarray(payoff), jnp.asarray(prior)
        T, U1, U2 = shape.types, shape.actions1, shape.actions2
        carry = ([jnp.zeros((T, shape.histories(k), U1)) for k in range(shape.steps)],
                 [jnp.zeros((shape.histories(k), U2)) for k in range(shape.steps)],
                 [jnp.zeros((T, shape.histories(k), U1)) for k in range(shape.steps)],
                 [jnp.zeros((shape.histories(k), U2)) for k in range(shape.steps)], jnp.float64(1.0))
        start = time.perf_counter()
        compiled = _iterate.lower(shape, payoff_j, prior_j, carry, chunk).compile()
        compile_seconds = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(iterations // chunk):
            carry = compiled(payoff_j, prior_j, carry)
        jax.block_until_ready(carry)
        seconds = time.perf_counter() - start
        sigma1, sigma2 = [_normalise(s) for s in carry[2]], [_normalise(s) for s in carry[3]]
        value, upper, lower = _evaluate(shape, payoff_j, prior_j, sigma1, sigma2)
        value, lower, upper = float(value), float(lower), float(upper)
    return CFRResult(value, upper, lower, upper - lower, iterations, seconds, compile_seconds,
                     [np.asarray(s) for s in sigma1], [np.asarray(s) for s in sigma2])


def support_sizes(result: CFRResult, prior: np.ndarray, threshold: float = 0.02, reached: float = 1e-3) -> dict:
    """How many actions the average profile of ``result`` uses (``prior``: the types' prior): the largest number of
    actions with probability >= threshold at a public history reached with probability >= reached: player 1's marginal over types (its prototypes) and player 2's;
    and player 1's largest ``excess`` mass, the probability outside its I most likely actions."""
    pi1, pi2 = np.ones((len(prior), 1)), np.ones(1)
    largest1 = largest2 = 0
    excess = 0.0
    for s1, s2 in zip(result.sigma1, result.sigma2):
        public = (prior @ pi1) * pi2  # [H_k]
        marginal = np.einsum("t,th,tha->ha", prior, pi1, s1) / np.maximum(prior @ pi1, 1e-300)[:, None]
        live = public >= reached
        largest1 = max(largest1, int((marginal[live] >= threshold).sum(-1).max()))
        largest2 = max(largest2, int((s2[live] >= threshold).sum(-1).max()))
        top = np.sort(marginal[live], -1)[:, -len(prior):].sum(-1)
        excess = max(excess, float((1 - top).max(initial=0.0)))
        U1, U2 = s1.shape[-1], s2.shape[-1]
        pi1 = np.broadcast_to((pi1[:, :, None] * s1)[..., None], pi1.shape + (U1, U2)).reshape(len(prior), -1)
        pi2 = np.broadcast_to((pi2[:, None] * s2)[:, None, :], (len(pi2), U1, U2)).reshape(-1)
    return {"player1": largest1, "player2": largest2, "excess1": excess}


def one_stage_lp_value(payoff: np.ndarray, prior: np.ndarray) -> float:
    """Exact value of a one-stage game (K = 1, payoff [T, U1, U2]) by the LP (HiGHS)::

        min_{x >= 0, t} t   s.t.  sum_theta prior_theta sum_a x(theta, a) J(theta, a, b) <= t  for all b,
                                  sum_a x(theta, a) = 1  for all theta.
    """
    from scipy.optimize import linprog

    T, U1, U2 = payoff.shape
    cost = np.zeros(T * U1 + 1)
    cost[-1] = 1.0
    upper = np.hstack([(prior[:, None, None] * payoff).reshape(T * U1, U2).T, -np.ones((U2, 1))])
    equal = np.hstack([np.kron(np.eye(T), np.ones((1, U1))), np.zeros((T, 1))])
    result = linprog(cost, A_ub=upper, b_ub=np.zeros(U2), A_eq=equal, b_eq=np.ones(T),
                     bounds=[(0, None)] * (T * U1) + [(None, None)], method="highs")
    return float(result.fun)
