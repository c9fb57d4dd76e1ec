"""Effective-horizon analysis of a tabular MDP (Laidlaw, Russell, Dragan, NeurIPS 2023).

Definitions (``T`` the horizon, ``A`` the number of actions, ``Q^k`` as in :mod:`.dp`):

* **k-QVI-solvable**: every policy that acts greedily on ``Q^k`` is optimal. We check it on the states
  such policies can reach: starting at ``(t=0, s=0)``, every action that ties for ``max_a Q^k_t(s, a)``
  must be optimal (``Q*_t(s, a) >= V*_t(s) - 1e-4``), and all its successors are checked in turn.
  ``min_k`` is the smallest such ``k`` (it exists: ``Q^T = Q*``).
* **Effective planning window** ``W``: the same test on the iteration that starts from ``Q^0 = R`` (the
  immediate reward), i.e. the smallest number of steps of exact lookahead, with zero value beyond
  it, whose greedy policies are all optimal.
* **Effective horizon** ``H = min_k H_k`` with ``H_k = k + log_A m_k``, where ``m_k`` is the number of
  random rollouts per action sequence that GORP needs to find an optimal policy with probability at
  least 1/2 (GORP's sample complexity is then at most ``T^2 A^k m_k``, i.e. ``T^2 A^H``).
* **Simple bound** (Theorem 5.4): on the states greedy-on-``Q^k`` policies reach, with gap
  ``Delta = max_a Q^k - max_{a suboptimal} Q^k`` and ``sigma^2`` the largest variance bound of the
  rollout return, ``m_k <= ceil(16 sigma^2 / Delta^2 * ln(2 T A^k))``. The variance of a return
  ``G`` in ``[G_worst, G_opt]`` with mean ``Q`` is bounded by ``(Q - G_worst)(G_opt - G_worst)``; the
  rollout of an action sequence ends with the random policy ``k`` steps ahead, so the bound is
  propagated by ``k - 1`` max-backups along with ``Q^k``.
* **Tight bound** (Appendix C): GORP's failure probability computed exactly by backward recursion,
  with the worst case over bounds on GORP's choice probabilities solved as a linear program in
  closed form; see :mod:`longhorizon.tabular.gorp_bounds`.

Both bounds assume deterministic transitions (the NeurIPS setting); for stochastic MDPs (e.g. sticky
actions) they are reported as ``None``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from longhorizon.tabular import dp
from longhorizon.tabular.gorp_bounds import (  # noqa: F401  (re-exported)
    LP_GAP,
    REWARD_PRECISION,
    TIE_RTOL,
    TightBoundResult,
    optimal_action_mask,
    tight_effective_horizon,
)
from longhorizon.tabular.mdp import TabularMDP


def _tied_max(q: np.ndarray) -> np.ndarray:
    """Boolean mask [..., A] of actions that tie for the maximum along the last axis."""
    top = q.max(axis=-1, keepdims=True)
    return q >= top - TIE_RTOL * np.abs(top)


def greedy_is_optimal(mdp: TabularMDP, q: np.ndarray, optimal: np.ndarray) -> bool:
    """True when every policy greedy on ``q`` (all ties) takes only optimal actions where it goes."""
    T = q.shape[0]
    current = np.zeros(mdp.num_states, dtype=bool)
    current[0] = True
    positive = mdp.next_probs > 0
    for t in range(T):
        idx = np.flatnonzero(current)
        if idx.size == 0:
            return True
        greedy = _tied_max(q[t, idx])
        if np.any(greedy & ~optimal[t, idx]):
            return False
        if t == T - 1:
            break
        nxt = mdp.next_states[idx][greedy[..., None] & positive[idx]]
        current = np.zeros(mdp.num_states, dtype=bool)
        current[nxt[nxt >= 0]] = True
    return True


def min_k(mdp: TabularMDP, horizon: int | None = None, *, values: dp.Values | None = None, start: str = "random") -> int:
    """Smallest ``k`` for which the MDP is k-QVI-solvable (``start="rewards"``: the planning window)."""
    T = mdp.resolve_horizon(horizon)
    values = values if values is not None else dp.evaluate(mdp, T)
    optimal = optimal_action_mask(values)
    if start == "random":
        q = values.q_random
    elif start == "rewards":
        q = dp.reward_lookahead_q(mdp, T)
    else:
        raise ValueError(f"start must be 'random' or 'rewards', got {start!r}")
    for k in range(1, T + 1):
        if greedy_is_optimal(mdp, q, optimal):
            return k
        q = dp.bellman_backup(mdp, q)
    return T  # unreachable for exact arithmetic: the last iterate is Q*


def effective_planning_window(mdp: TabularMDP, horizon: int | None = None, *, values: dp.Values | None = None) -> int:
    """The effective planning window ``W`` (greedy on ``W``-step reward lookahead is optimal)."""
    return min_k(mdp, horizon, values=values, start="rewards")


# ----------------------------------------------------------------------------------- simple bound
@dataclasses.dataclass(frozen=True)
class SimpleBoundResult:
    effective_horizon: float
    ks: list[int]  # the k for which greedy-on-Q^k separates optimal actions everywhere it goes
    ms: list[int]
    gaps: list[float]
    variances: list[float]


def simple_effective_horizon(mdp: TabularMDP, horizon: int | None = None, *, values: dp.Values | None = None) -> SimpleBoundResult | None:
    """Theorem 5.4's bound ``min_k k + log_A m_k`` (deterministic MDPs; ``None`` otherwise)."""
    if not mdp.is_deterministic:
        return None
    T = mdp.resolve_horizon(horizon)
    values = values if values is not None else dp.evaluate(mdp, T)
    A = mdp.num_actions
    nxt = mdp.transitions
    optimal = optimal_action_mask(values)
    q = values.q_random.copy()
    var = (values.q_random - values.q_worst) * (values.q_optimal - values.q_worst)
    var = np.maximum(var, 0.0)
    best = float(T)
    ks, ms, gaps, variances = [], [], [], []
    k = 1
    with ThreadPoolExecutor(max_workers=1) as pool:
        while k < best:
            log_term = math.log(2 * T) + k * math.log(A)
            current = np.zeros(mdp.num_states, dtype=bool)
            current[0] = True
            works = True
            worst_m, worst_gap, worst_var = 0.0, math.inf, 0.0
            for t in range(T):
                idx = np.flatnonzero(current)
                if idx.size == 0:
                    break
                qt = q[t, idx]
                max_q = qt.max(axis=1)
                max_sub = np.where(optimal[t, idx], -np.inf, qt).max(axis=1)
                tol = TIE_RTOL * np.abs(max_q)
                if np.any(max_q <= max_sub + tol):
                    works = False
                    break
                gap = max_q - max_sub
                max_var = var[t, idx].max(axis=1)
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    raw = np.where(np.isinf(gap), 0.0, 16.0 * max_var / gap**2 * log_term)
                m_state = np.maximum(1.0, np.ceil(raw))
                j = int(np.argmax(m_state))
                if m_state[j] > worst_m:
                    worst_m, worst_gap, worst_var = m_state[j], float(gap[j]), float(max_var[j])
                if t == T - 1:
                    break
                go = qt > (max_sub + tol)[:, None]
                targets = nxt[idx][go]
                current = np.zeros(mdp.num_states, dtype=bool)
                current[targets[targets >= 0]] = True
            if works:
                m_int = int(worst_m) if math.isfinite(worst_m) else None
                h_k = k + (math.log(worst_m) / math.log(A) if math.isfinite(worst_m) else math.inf)
                ks.append(k)
                ms.append(m_int)
                gaps.append(worst_gap)
                variances.append(worst_var)
                best = min(best, h_k)
            # One max-backup of Q^k and of the variance bound (deterministic transitions); numpy's gathers
            # release the GIL, so the two run side by side on two cores.
            q_next = pool.submit(dp.bellman_backup, mdp, q)
            var = dp.max_backup(mdp, var)  # the variance bound of the leaf k steps ahead
            q = q_next.result()
            k += 1
    return SimpleBoundResult(effective_horizon=best, ks=ks, ms=ms, gaps=gaps, variances=variances)


# ------------------------------------------------------------------------------------------ report
def analyze(
    mdp: TabularMDP,
    horizon: int | None = None,
    *,
    tight: bool = True,
    tight_max_k: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Everything ``longhorizon horizon`` reports, as a JSON-ready dict (times in seconds)."""
    T = mdp.resolve_horizon(horizon)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if progress:
        progress("dynamic programming")
    values = dp.evaluate(mdp, T)
    timings["dp"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if progress:
        progress("minimum k")
    k_min = min_k(mdp, T, values=values)
    timings["min_k"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if progress:
        progress("effective planning window")
    epw = effective_planning_window(mdp, T, values=values)
    timings["epw"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if progress:
        progress("simple bound")
    simple = simple_effective_horizon(mdp, T, values=values)
    timings["simple_bound"] = time.perf_counter() - t0
    tight_result = None
    if tight:
        tight_result = tight_effective_horizon(mdp, T, values=values, max_k=tight_max_k, progress=progress)
        if tight_result is not None:
            timings["tight_bound"] = tight_result.seconds

    def finite(x):
        return None if x is None or not math.isfinite(x) else float(x)

    report: dict[str, Any] = {
        "name": mdp.name,
        "num_states": mdp.num_states,
        "num_actions": mdp.num_actions,
        "horizon": T,
        "deterministic": mdp.is_deterministic,
        "min_k": k_min,
        "epw": epw,
        "effective_horizon_simple": finite(simple.effective_horizon) if simple else None,
        "effective_horizon_tight": finite(tight_result.effective_horizon) if tight_result else None,
        "optimal_return": values.optimal_return,
        "random_return": values.random_return,
        "worst_return": values.worst_return,
        "gorp_sample_complexity_bound": finite(tight_result.sample_complexity) if tight_result else None,
        "simple_bound_detail": (
            {"ks": simple.ks, "ms": simple.ms, "gaps": [finite(g) for g in simple.gaps], "variances": simple.variances}
            if simple else None
        ),
        "tight_bound_detail": (
            {str(k): {key: finite(v) for key, v in r.items()} for k, r in tight_result.k_results.items()}
            if tight_result else None
        ),
        "seconds": timings,
    }
    if "sticky" in mdp.info:
        report["sticky"] = mdp.info["sticky"]
    return report
