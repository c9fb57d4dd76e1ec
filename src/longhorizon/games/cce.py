"""Coarse correlated equilibria: the normal-form LP, Markov CCE by backward induction, independent Hedge.

Following Foster, Golowich & Kakade (2023), "Hardness of Independent Learning and Sparse Equilibrium
Computation in Markov Games". This module illustrates the paper's definitions numerically on tiny
games; it does not re-prove its computational lower bounds.

* **Normal-form CCE.** For payoffs ``u_i(a)``, ``a = (a_1, ..., a_m)``, a distribution ``sigma`` over
  action profiles is a CCE when no player gains by committing to a fixed action beforehand:

      for every i and a_i':   sum_a sigma(a) (u_i(a_i', a_-i) - u_i(a)) <= 0.

  :func:`solve_cce` is that LP (HiGHS, float64) with the welfare ``sum_a sigma(a) sum_i u_i(a)`` as
  the objective (or none); :func:`cce_gap` is the smallest ``eps`` for which ``sigma`` is an eps-CCE.
* **Markov CCE.** Backward induction over stage games: ``V_{i,H} = 0`` and at each ``(h, s)``
  ``sigma_h(. | s)`` is a CCE of the stage game ``Q_{i,h}(s, a) = r_{i,h}(s, a) + E_{s'} V_{i,h+1}(s')``
  with ``V_{i,h}(s) = E_sigma Q_{i,h}(s, a)``. By induction no deviation gains from any ``(h, s)`` on:
  ``V*_h <= max_a E[r + P V*_{h+1}] <= max_a E[r + P V_{h+1}] <= V_h``. Its opponent marginal is
  Markov (a fresh draw each step), so history-dependent deviations gain nothing more.
* **Independent Hedge.** Each player, at every ``(h, s)``, runs Hedge on its exact Q-values against
  the other's current policy, ``pi^{t+1}_i(. | h, s) ∝ exp(eta_{t+1} sum_{tau<=t} Q^tau_{i,h}(s, .))``
  with ``eta_t = eta / sqrt(t)`` (or constant), no sampling. Round ``t`` gives a product policy; the
  uniform mixture of ``T`` rounds is what independent no-regret learners output, and
  :func:`~longhorizon.games.markov_games.deviation_report` measures it against both deviation classes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import linprog

from longhorizon.errors import UsageError
from longhorizon.games.markov_games import CorrelatedPolicy, MarkovGame, ProductMixture, joint_values

OBJECTIVES = ("welfare", "none")


def _check_payoffs(payoffs: np.ndarray) -> np.ndarray:
    payoffs = np.asarray(payoffs, np.float64)
    if payoffs.ndim < 2 or payoffs.shape[0] != payoffs.ndim - 1 or not np.isfinite(payoffs).all():
        raise UsageError(f"payoffs have shape {payoffs.shape}; give finite u_i(a) as an [m, n_1, ..., n_m] array.")
    return payoffs


def deviation_matrix(payoffs: np.ndarray) -> np.ndarray:
    """Rows ``u_i(a_i', a_-i) - u_i(a)`` over flattened profiles ``a``: [sum_i n_i, prod_i n_i], player-major."""
    payoffs = _check_payoffs(payoffs)
    rows = []
    for i, u in enumerate(payoffs):
        for deviation in range(u.shape[i]):
            fixed = np.broadcast_to(np.take(u, [deviation], axis=i), u.shape)
            rows.append((fixed - u).reshape(-1))
    return np.stack(rows)


def deviation_gains(sigma: np.ndarray, payoffs: np.ndarray) -> np.ndarray:
    """``E_sigma[u_i(a_i', a_-i)] - E_sigma[u_i(a)]`` for every (player, a_i'): [sum_i n_i]; sigma [n_1, ..., n_m]."""
    return deviation_matrix(payoffs) @ np.asarray(sigma, np.float64).reshape(-1)


def cce_gap(sigma: np.ndarray, payoffs: np.ndarray) -> float:
    """``max(0, max_{i, a_i'} gain)``: the smallest eps for which ``sigma`` is an eps-CCE."""
    return float(max(0.0, deviation_gains(sigma, payoffs).max()))


def solve_cce(payoffs: np.ndarray, objective: str = "welfare") -> np.ndarray:
    """A CCE ``sigma`` [n_1, ..., n_m] of ``payoffs`` [m, n_1, ..., n_m] from the LP (HiGHS, float64).

    ``objective="welfare"`` maximises ``sum_a sigma(a) sum_i u_i(a)``; ``"none"`` returns any vertex.
    """
    if objective not in OBJECTIVES:
        raise UsageError(f"unknown CCE objective '{objective}'; choose one of: {', '.join(OBJECTIVES)}.")
    payoffs = _check_payoffs(payoffs)
    constraints = deviation_matrix(payoffs)
    cost = -payoffs.sum(0).reshape(-1) if objective == "welfare" else np.zeros(constraints.shape[1])
    result = linprog(cost, A_ub=constraints, b_ub=np.zeros(len(constraints)), A_eq=np.ones((1, len(cost))), b_eq=[1.0],
                     bounds=(0, None), method="highs",
                     options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    if result.status != 0:  # a CCE always exists (every Nash equilibrium is one), so this is a solver failure
        raise RuntimeError(f"HiGHS did not solve the CCE LP: {result.message}")
    sigma = np.clip(result.x, 0.0, None)
    return (sigma / sigma.sum()).reshape(payoffs.shape[1:])


def markov_cce(game: MarkovGame, objective: str = "welfare") -> CorrelatedPolicy:
    """A Markov CCE by backward induction over stage-game CCE LPs (module docstring): joint [H, S, A1, A2]."""
    H, S = game.horizon, game.num_states
    joint = np.zeros((H, S, *game.num_actions))
    values = np.zeros((2, S))
    for h in reversed(range(H)):
        q = game.reward[:, h] + np.einsum("sabt,it->isab", game.transition[h], values)  # [2, S, A1, A2]
        for s in range(S):
            joint[h, s] = solve_cce(q[:, s], objective)
        values = np.einsum("sab,isab->is", joint[h], q)
    return CorrelatedPolicy(joint)


@dataclasses.dataclass(frozen=True)
class HedgeConfig:
    """Independent Hedge at every (h, s): ``rounds`` T, step ``learning_rate`` eta, ``schedule`` of eta_t."""

    rounds: int = 1000
    learning_rate: float = 1.0
    schedule: str = "sqrt"  # eta_t = eta / sqrt(t) (anytime: every prefix of the rounds is a run) or "constant"

    def __post_init__(self):
        if not isinstance(self.rounds, int) or self.rounds < 1:
            raise UsageError(f"rounds={self.rounds!r} is not a positive integer; "
                             "give the number of Hedge rounds T >= 1.")
        if not (np.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise UsageError(f"learning_rate={self.learning_rate!r} must be a positive number; give eta > 0.")
        if self.schedule not in ("sqrt", "constant"):
            raise UsageError(f"unknown schedule '{self.schedule}'; choose 'sqrt' (eta/sqrt(t)) or 'constant'.")

    def step(self, t: int) -> float:
        """eta_t for round t = 1, 2, ..."""
        return self.learning_rate / np.sqrt(t) if self.schedule == "sqrt" else self.learning_rate


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def independent_hedge(game: MarkovGame, config: HedgeConfig = HedgeConfig()) -> ProductMixture:
    """T rounds of independent Hedge learners (exact Q-values), as the uniform mixture of their policies.

    Round t plays ``pi^t = (pi^t_1, pi^t_2)`` (``pi^1`` uniform) and each player observes
    ``Q^t_{i,h}(s, a_i) = E_{a_-i ~ pi^t_-i}[r_{i,h}(s, a) + E_{s'} V^{pi^t}_{i,h+1}(s')]`` [H, S, A_i];
    returns first [T, H, S, A1] and second [T, H, S, A2].
    """
    H, S = game.horizon, game.num_states
    A1, A2 = game.num_actions
    totals = [np.zeros((H, S, A1)), np.zeros((H, S, A2))]
    first, second = np.zeros((config.rounds, H, S, A1)), np.zeros((config.rounds, H, S, A2))
    policy = [np.full((H, S, A1), 1.0 / A1), np.full((H, S, A2), 1.0 / A2)]
    for t in range(config.rounds):
        first[t], second[t] = policy
        values = joint_values(game, np.einsum("hsa,hsb->hsab", *policy))  # [2, H+1, S]
        q = game.reward + np.einsum("hsabt,iht->ihsab", game.transition, values[:, 1:])  # [2, H, S, A1, A2]
        totals[0] += np.einsum("hsab,hsb->hsa", q[0], policy[1])
        totals[1] += np.einsum("hsab,hsa->hsb", q[1], policy[0])
        policy = [_softmax(config.step(t + 2) * total) for total in totals]
    return ProductMixture.uniform(first, second)
