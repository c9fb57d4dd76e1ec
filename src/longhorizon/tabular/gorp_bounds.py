"""Appendix C of the NeurIPS 2023 effective-horizon paper: a tight bound on GORP's sample complexity.

GORP's failure probability is computed exactly by backward recursion over the (timestep, state) pairs
optimal policies can occupy,

    fail_t(s) = sum_sigma P(GORP picks sigma at (t, s)) * f_t(s, first(sigma)),
    f_t(s, a) = 1 if a is suboptimal, else fail_{t+1}(s'),

with only bounds ``L_sigma <= P(sigma) <= U_sigma`` known: binomial bins when every return is 0 or the
maximum reward, Bernstein's and Bennett's inequalities otherwise. The worst case over those bounds is
the linear program ``max_p sum p_sigma f_sigma`` s.t. ``L <= p <= U``, ``sum p = 1``, a fractional
knapsack solved in closed form (see :mod:`.choice_bounds`, where HiGHS is kept as the cross-check).
``m_k`` is the smallest ``m`` (geometric bisection to 1%) with ``fail_0(s_0) <= 1/2`` and
``H_k = k + log_A m_k``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable

import numpy as np

from longhorizon.tabular import dp
from longhorizon.tabular.choice_bounds import (  # noqa: F401  (the bounds are re-exported)
    REWARD_PRECISION,
    BernsteinBounds,
    TIE_RTOL,
    bounds_bennett,
    bounds_bernstein,
    bounds_binomial_bins,
    bounds_binomial_exact,
    max_failure,
    max_failure_lp,
)
from longhorizon.tabular.mdp import TabularMDP
LP_GAP = 0.01  # solve the LP only when the simple upper and lower failure bounds differ by more
SPREAD_TOLERANCE = 1e-7  # a state whose actions' failure probabilities differ less fails with their max


def optimal_action_mask(values: dp.Values) -> np.ndarray:
    """[T, S, A] mask of optimal actions: ``Q*_t(s, a) >= V*_t(s) - 1e-4``."""
    return values.q_optimal >= values.v_optimal[..., None] - REWARD_PRECISION


@dataclasses.dataclass(frozen=True)
class TightBoundResult:
    effective_horizon: float
    sample_complexity: float
    k_results: dict[int, dict[str, float]]  # k -> {"effective_horizon", "m", "sample_complexity"}
    lp_solves: int
    seconds: float


def _is_binomial(mdp: TabularMDP, values: dp.Values) -> float | None:
    """The maximum reward ``r`` if every return is 0 or ``r`` (rewards in {0, r}, ``V* <= r``), else None."""
    R = mdp.rewards
    r_max = float(R.max())
    if r_max <= 0 or not np.all((R == 0) | (R == r_max)):
        return None
    if values.v_optimal.max() > r_max * (1 + 1e-9):
        return None
    return r_max


class _TightContext:
    """Per-k precomputation: the states optimal policies visit and their k-step sequence returns."""

    def __init__(self, mdp: TabularMDP, values: dp.Values, k: int, ties: str = "bridge"):
        if ties not in ("bridge", "worst_case"):
            raise ValueError(f"ties must be 'bridge' or 'worst_case', got {ties!r}")
        self.ties = ties
        T = values.horizon
        S, A = mdp.num_states, mdp.num_actions
        self.k, self.A, self.T, self.S = k, A, T, S
        nxt = np.where(mdp.transitions < 0, S, mdp.transitions)
        self.nxt = np.vstack([nxt, np.full((1, A), S)])  # state S = absorbing 'done'
        rew = np.vstack([mdp.deterministic_rewards(), np.zeros((1, A))])
        pad = lambda q: np.concatenate([q, np.zeros((T, 1, A))], axis=1)  # noqa: E731
        q_rand, q_opt, q_worst = pad(values.q_random), pad(values.q_optimal), pad(values.q_worst)
        self.optimal = np.concatenate([optimal_action_mask(values), np.ones((T, 1, A), dtype=bool)], axis=1)
        self.r_scale = _is_binomial(mdp, values)
        self.first_action = np.arange(A**k) // A ** (k - 1)
        self.states: list[np.ndarray] = []
        self.seqs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        current = np.zeros(S + 1, dtype=bool)
        current[0] = True
        for t in range(T):
            idx = np.flatnonzero(current)
            self.states.append(idx[idx < S])  # the done state never fails
            current = np.zeros(S + 1, dtype=bool)
            current[self.nxt[idx][self.optimal[t, idx]]] = True
            self.seqs.append(self._sequences(t, self.states[-1], rew, q_rand, q_opt, q_worst))
        self.row_offset = np.cumsum([0] + [len(s) for s in self.states[:-1]])  # timestep t's first row
        self._bernstein_bounds: BernsteinBounds | None = None

    def _sequences(self, t, states, rew, *qs):
        """Mean, best and worst return of every k-step sequence from each state, random afterwards."""
        A, T = self.A, self.T
        if states.size == 0:
            return tuple(np.zeros((0, A**self.k)) for _ in qs)
        acc = np.zeros((states.size, 1))
        cur = states[:, None]
        for j in range(self.k - 1):
            if t + j < T:
                acc = (acc[..., None] + rew[cur]).reshape(states.size, -1)
                cur = self.nxt[cur].reshape(states.size, -1)
            else:
                acc = np.repeat(acc, A, axis=1)
                cur = np.repeat(cur, A, axis=1)
        tk = t + self.k - 1
        out = []
        for q in qs:
            if tk < T:
                out.append((acc[..., None] + q[tk][cur]).reshape(states.size, -1))
            else:
                out.append(np.repeat(acc, A, axis=1))
        return tuple(out)

    def failure_probability(self, m: int, stats: dict[str, int], bennett_only: bool = False) -> float:
        """Upper bound on the probability that GORP with ``m`` rollouts per sequence is not optimal.

        ``bennett_only``: with Bennett's bound alone (cheap, and a valid but looser bound)."""
        T = self.T
        fail_next = np.zeros(self.S + 1)
        for t in range(T - 1, -1, -1):
            fail_now = np.zeros(self.S + 1)
            idx = self.states[t]
            if idx.size:
                f_action = np.where(self.optimal[t, idx], 0.0 if t == T - 1 else fail_next[self.nxt[idx]], 1.0)
                spread = f_action.max(1) - f_action.min(1)
                fail_now[idx] = f_action.max(1)
                hard = np.flatnonzero(spread > SPREAD_TOLERANCE)
                if hard.size:
                    f = f_action[hard][:, self.first_action]
                    fail_now[idx[hard]] = self._hard_states(t, hard, f, m, stats, bennett_only)
            fail_next = fail_now
        return float(fail_next[0])

    def suffices(self, m: int, stats: dict[str, int]) -> bool:
        """Whether GORP's failure bound with ``m`` rollouts is at most 1/2.

        Bennett's bound alone is tried first: it costs a few percent of the full computation and is a
        valid bound by itself, so where it is already at most 1/2 that settles it. The full computation
        only adds boxes, each of which can only lower a state's value; on the MDPs we checked
        (KeyCorridorS3R1, UnlockPickup) every rollout count the bisection visits gets the same verdict
        either way, so the bisection, and ``m_k``, are unchanged.
        """
        # Worst-case ties with exact binomial probabilities use that box alone: no Bennett to screen with.
        more_than_bennett = self.A**self.k <= 100 and not (self.ties == "worst_case" and self._binomial(m))
        if more_than_bennett and self.failure_probability(m, stats, bennett_only=True) <= 0.5:
            stats["screened"] = stats.get("screened", 0) + 1
            return True
        return self.failure_probability(m, stats) <= 0.5

    def _binomial(self, m: int) -> bool:
        """Whether every return is 0 or the maximum reward and the binomial boxes are affordable at ``m``."""
        return self.r_scale is not None and m <= 1_000_000 and self.A**self.k <= 100

    def _bernstein(self) -> BernsteinBounds:
        """Bernstein's bounds over every (timestep, state) row, laid out once for all ``m``."""
        if self._bernstein_bounds is None:
            self._bernstein_bounds = BernsteinBounds(*(np.concatenate([s[i] for s in self.seqs]) for i in range(3)))
        return self._bernstein_bounds

    def _methods(self, t, hard, m):
        """The bound computations that apply to the hard rows of timestep ``t`` (each returns (L, U) or None)."""
        mu, opt, worst = (a[hard] for a in self.seqs[t])
        n = mu.shape[1]
        binomial = self._binomial(m)
        p = mu / self.r_scale if self.r_scale else None
        if self.ties == "worst_case" and binomial:
            # Exact probabilities: no other box bound can be tighter, so it is the only method.
            exact = _chunked(lambda a, b, c: bounds_binomial_exact(a, m), p, opt, worst, n * 4000)
            if exact is not None:
                return [lambda: exact]
        methods = []
        if binomial and self.ties == "bridge":
            methods.append(lambda: _chunked(lambda a, b, c: bounds_binomial_bins(a, m), p, opt, worst, n * (n + 40) * 101))
        # Bernstein's bins cost up to n^2 * 100 per state and, where the binomial bins apply, change the
        # failure probability by < 1e-5 (measured on KeyCorridorS3R1): use them only otherwise.
        if n <= 100 and not methods:
            methods.append(lambda: self._bernstein().at(float(m), self.row_offset[t] + hard))
        methods.append(lambda: bounds_bennett(mu, opt, worst, float(m)))
        return methods

    def _hard_states(self, t, hard, f, m, stats, bennett_only=False) -> np.ndarray:
        """Worst-case failure probability at states whose actions' failure probabilities differ.

        Each method's bounds give ``fail_lo <= LP value <= fail_hi``; the LP (closed form) is solved
        only where the two differ by more than ``LP_GAP`` and the method could still beat the best
        value, as in the published computation.
        """
        boxes = []
        best = f.max(axis=1)
        if bennett_only:
            methods = [lambda: bounds_bennett(*(a[hard] for a in self.seqs[t]), float(m))]
        else:
            methods = self._methods(t, hard, m)
        for method in methods:
            bounds = method()
            if bounds is None:
                continue
            lower, upper = bounds
            short = 1.0 - upper.sum(axis=1, keepdims=True)
            upper = np.where(short > 0, np.minimum(1.0, upper + short), upper)  # slack left by the bounds
            lower = np.minimum(lower, upper)
            fail_hi = np.minimum((upper * f).sum(1), f.max(1))
            fail_lo = (lower * f).sum(1)
            boxes.append((lower, upper, fail_lo, fail_hi))
            best = np.minimum(best, fail_hi)
        for lower, upper, fail_lo, fail_hi in boxes:
            need = np.flatnonzero((fail_hi - fail_lo > LP_GAP) & (fail_lo < best))
            if need.size:
                stats["lp_solves"] = stats.get("lp_solves", 0) + 1
                stats["lp_rows"] = stats.get("lp_rows", 0) + int(need.size)
                best[need] = np.minimum(best[need], max_failure(f[need], lower[need], upper[need]))
        return best


def _chunked(fn, mu, opt, worst, per_row: int, budget: int = 4_000_000):
    """Apply a bounds function to row chunks so that intermediate arrays stay small."""
    rows = mu.shape[0]
    step = max(1, budget // max(per_row, 1))
    lowers, uppers = [], []
    for i in range(0, rows, step):
        out = fn(mu[i : i + step], opt[i : i + step], worst[i : i + step])
        if out is None:
            return None
        lowers.append(out[0])
        uppers.append(out[1])
    return np.concatenate(lowers), np.concatenate(uppers)


LARGE_MDP_STATES = 10_000


def default_tight_max_k(mdp: TabularMDP) -> int:
    """The largest ``k`` with ``A^k <= 1000`` (BRIDGE's default), but only ``k = 1`` above 10,000 states.

    The cost grows with the states optimal policies visit times ``A^k``; on UnlockPickup (17,225
    states) ``k = 1`` alone takes about 40 s.
    """
    A = mdp.num_actions
    if A < 2 or mdp.num_states > LARGE_MDP_STATES:
        return 1
    return max(1, int(math.floor(math.log(1000) / math.log(A) + 1e-9)))


def tight_effective_horizon(
    mdp: TabularMDP,
    horizon: int | None = None,
    *,
    values: dp.Values | None = None,
    max_k: int | None = None,
    ties: str = "bridge",
    progress: Callable[[str], None] | None = None,
) -> TightBoundResult | None:
    """Appendix C's bound on the effective horizon via GORP's failure probability (deterministic only).

    ``max_k`` defaults to :func:`default_tight_max_k`; ``k`` stops early once ``k`` reaches
    the best bound so far (``H_k >= k``). The result never exceeds ``T`` (``H_T = T``: with ``k = T``
    one rollout per sequence is exact). ``ties="bridge"`` follows the published computation (binomial
    bins over positive counts, Bernstein and Bennett bounds, the best of the three per state);
    ``ties="worst_case"`` uses exact binomial probabilities with every tie resolved against GORP,
    a strictly rigorous and larger bound.
    """
    if not mdp.is_deterministic:
        return None
    start = time.perf_counter()
    T = mdp.resolve_horizon(horizon)
    values = values if values is not None else dp.evaluate(mdp, T)
    A = mdp.num_actions
    if max_k is None:
        max_k = default_tight_max_k(mdp)
    k_results: dict[int, dict[str, float]] = {}
    best_h, best_n = math.inf, math.inf
    stats: dict[str, int] = {}
    for k in range(1, max_k + 1):
        if k >= min(best_h, T):
            break
        ctx = _TightContext(mdp, values, k, ties)
        # k = 1 starts from 1e100 like the published computation. A larger k only matters if it beats
        # the best bound so far (H_k < H), i.e. if m_k < A^(H - k): start the bisection there.
        m_max, m_min = 10**100, 0
        if k > 1 and A > 1 and (min(best_h, T) - k) * math.log10(A) < 100:
            m_max = max(1, math.ceil(A ** (min(best_h, T) - k)))
        if progress:
            progress(f"tight bound k={k}: m={m_max:.4g}")
        if not ctx.suffices(m_max, stats):
            pruned = m_max < 10**100
            k_results[k] = {"effective_horizon": math.inf, "m": math.inf, "sample_complexity": math.inf,
                            "not_below": min(best_h, T) if pruned else math.inf}
            continue
        while m_max > m_min + 1 and (m_max - m_min) / m_max > 1e-2:
            mid = math.isqrt(m_max * (m_min + 1))
            if progress:
                progress(f"tight bound k={k}: m={mid:.4g}")
            if ctx.suffices(mid, stats):
                m_max = mid
            else:
                m_min = mid
        h_k = k + math.log(m_max) / math.log(A) if A > 1 else float(k)
        n_k = float(A**k * m_max * T**2)
        k_results[k] = {"effective_horizon": h_k, "m": float(m_max), "sample_complexity": n_k}
        best_h, best_n = min(best_h, h_k), min(best_n, n_k)
    if best_h > T:  # k = T: Q^T = Q*, so one rollout per sequence suffices and H_T = T
        best_h, best_n = float(T), min(best_n, float(A**T * T**2))
    return TightBoundResult(
        effective_horizon=best_h, sample_complexity=best_n, k_results=k_results,
        lp_solves=stats.get("lp_solves", 0), seconds=time.perf_counter() - start,
    )
