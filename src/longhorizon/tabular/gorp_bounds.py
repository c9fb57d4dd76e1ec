"""Appendix C of the NeurIPS 2023 effective-horizon paper: a tight bound on GORP's sample complexity.

GORP's failure probability is computed exactly by backward recursion over the (timestep, state) pairs
optimal policies can occupy,

    fail_t(s) = sum_sigma P(GORP picks sigma at (t, s)) * f_t(s, first(sigma)),
    f_t(s, a) = 1 if a is suboptimal, else fail_{t+1}(s'),

with only bounds ``L_sigma <= P(sigma) <= U_sigma`` known: binomial bins when every return is 0 or the
maximum reward, Bernstein's and Bennett's inequalities otherwise. The worst case over those bounds is
the linear program ``max_p sum p_sigma f_sigma`` s.t. ``L <= p <= U``, ``sum p = 1``, solved with HiGHS.
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
from longhorizon.tabular.mdp import TabularMDP

REWARD_PRECISION = 1e-4  # an action is optimal when Q* is within this of V* (BRIDGE's convention)
TIE_RTOL = 1e-9  # Q values within this relative distance of the maximum count as tied
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


def _inv_bernstein(m: float, bound: np.ndarray, var: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """The deviation ``t`` at which the Bernstein tail equals ``delta`` (inf for ``delta = 0``)."""
    with np.errstate(divide="ignore"):
        L = -np.log(delta)
    with np.errstate(invalid="ignore"):
        t = (bound * L / m + np.sqrt(18.0 * var / m * L + (bound * L / m) ** 2)) / 3.0
    t = np.where((bound == 0) | (var == 0), 0.0, t)
    return np.where(np.isinf(L), np.inf, t)


def _bennett_tail(m: float, bound: np.ndarray, var: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Bennett: ``P(mean - mu >= t) <= exp(-m v / b^2 h(b t / v))``, ``h(u) = (1+u) ln(1+u) - u``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        u = bound * t / var
        h = (1.0 + u) * np.log1p(u) - u
        out = np.exp(-m * var / bound**2 * h)
    out = np.where((var <= 0) | np.isnan(out), 0.0, out)
    return np.where(t <= 0, 1.0, out)


def _others_product(x: np.ndarray) -> np.ndarray:
    """``out[..., i, :] = prod_{j != i} x[..., j, :]`` along axis -2, without division."""
    n = x.shape[-2]
    ones = np.ones_like(x[..., :1, :])
    prefix = np.concatenate([ones, np.cumprod(x, axis=-2)[..., :-1, :]], axis=-2)
    suffix = np.concatenate([np.cumprod(x[..., ::-1, :], axis=-2)[..., ::-1, :][..., 1:, :], ones], axis=-2)
    assert prefix.shape[-2] == n
    return prefix * suffix


def _binomial_grid(p: np.ndarray, m: int, max_grid: int):
    """pmf and cdf of Binomial(m, p) on a window of counts ``lo..hi`` holding all but ~1e-30 of the mass.

    Returns ``(lo, pmf, cdf)`` with arrays [..., hi - lo + 1], or None when the window is too wide.
    """
    from scipy.special import gammaln, xlog1py, xlogy

    std = np.sqrt(m * p * (1 - p))
    lo = int(max(0, np.floor((m * p - 12 * std).min()) - 30))
    hi = int(min(m, np.ceil((m * p + 12 * std).max()) + 30))
    if hi - lo + 1 > max_grid:
        return None
    x = np.arange(lo, hi + 1, dtype=np.float64)
    log_binom = gammaln(m + 1.0) - gammaln(x + 1.0) - gammaln(m - x + 1.0)
    pmf = np.exp(log_binom + xlogy(x, p[..., None]) + xlog1py(m - x, -p[..., None]))
    return lo, pmf, np.minimum(np.cumsum(pmf, axis=-1), 1.0)


def bounds_binomial_exact(p: np.ndarray, m: int, max_grid: int = 20000) -> tuple[np.ndarray, np.ndarray] | None:
    """Exact bounds on GORP's choice when every return is Bernoulli(``p[row, sigma]``), worst-case ties.

    The estimate of sequence ``sigma`` is ``X_sigma ~ Binomial(m, p_sigma) / m``, independent across
    sequences. ``L = P(X_sigma > X_rho for all rho != sigma)`` and ``U = P(X_sigma >= X_rho for all
    rho)``: a tie may be resolved against us. Mass outside the summation window is added to ``U``.
    Returns None when the window would exceed ``max_grid`` counts.
    """
    m = int(m)
    p = np.clip(p, 0.0, 1.0)
    grid = _binomial_grid(p, m, max_grid)
    if grid is None:
        return None
    _, pmf, cdf_le = grid
    missing = np.clip(1.0 - pmf.sum(axis=-1), 0.0, 1.0)
    cdf_lt = cdf_le - pmf
    upper = (pmf * _others_product(np.minimum(cdf_le + missing[..., None], 1.0))).sum(-1) + missing
    lower = (pmf * _others_product(cdf_lt)).sum(-1)
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)


def bounds_binomial_bins(p: np.ndarray, m: int, resolution: float = 0.01, max_grid: int = 20000):
    """Appendix C's binomial bounds: bins of positive counts between quantiles of ``X_sigma``.

    The count ``m X_sigma`` is cut at its quantiles ``q = 0, res, ..., 1`` (normal approximation,
    rounded down, for ``m >= 30``; exact binomial quantiles below), and in the bin ``(e_j, e_{j+1}]``

        L += P(e_j < m X_sigma <= e_{j+1}) * prod_rho P(m X_rho <= e_j),
        U += P(e_j < m X_sigma <= e_{j+1}) * prod_rho P(m X_rho <= e_{j+1}).

    As in the published computation, the count 0 lies below the first bin, so the event that every
    rollout of every sequence returns 0 enters only through the normalisation of ``U`` (the caller
    spreads ``1 - sum U`` over all sequences); see :func:`bounds_binomial_exact` for worst-case ties.
    """
    from scipy.stats import norm

    m = int(m)
    p = np.clip(p, 0.0, 1.0)
    grid = _binomial_grid(p, m, max_grid)
    if grid is None:
        return None
    lo, pmf, cdf = grid
    width = cdf.shape[-1]
    qs = np.linspace(0.0, 1.0, int(round(1 / resolution)) + 1)
    if m >= 30:
        mean = m * p
        std = np.sqrt(m * p * (1 - p))
        with np.errstate(invalid="ignore"):
            edges = mean[..., None] + std[..., None] * norm.ppf(qs)
        edges = np.where(std[..., None] == 0, mean[..., None], edges)  # a constant count has no spread
        edges = np.floor(np.clip(np.nan_to_num(edges, nan=0.0, posinf=m, neginf=0.0), 0, m))
    else:
        # Smallest count whose cdf reaches q.
        edges = lo + (cdf[..., None, :] < qs[:, None] - 1e-12).sum(-1).astype(np.float64)
        edges = np.minimum(edges, m)
    pos = np.clip(edges.astype(np.int64) - lo, -1, width - 1)  # window index of each edge

    def cdf_at(c, index):  # c: [rows, n, W]; index: [rows, n_edges...] -> cdf of every sequence there
        flat = index.reshape(index.shape[0], -1)
        vals = np.take_along_axis(c[:, :, None, :], np.maximum(flat, 0)[:, None, :, None], axis=-1)[..., 0]
        vals = np.where(flat[:, None, :] < 0, 0.0, vals)
        return vals.reshape((c.shape[0], c.shape[1]) + index.shape[1:])

    rows, n = p.shape
    own = cdf_at(cdf, pos)  # [rows, n(seq whose cdf), n(edge owner), Q]
    own_cdf = own[:, np.arange(n), np.arange(n), :]  # [rows, n, Q]
    mass = np.diff(own_cdf, axis=-1)  # P(e_j < count <= e_{j+1})  [rows, n, Q-1]
    others = np.moveaxis(own, 1, -1)  # [rows, owner, Q, n(other)]
    eye = np.eye(n, dtype=bool)[None, :, None, :]
    others = np.where(eye, 1.0, others).prod(axis=-1)  # [rows, owner, Q]
    lower = (mass * others[..., :-1]).sum(-1)
    upper = (mass * others[..., 1:]).sum(-1)
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)


def _bernstein_exponent(m: float, bound: np.ndarray, var: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``x`` with ``P(mean - mu >= t) <= exp(-x)`` by Bernstein; 0 where ``t <= 0`` (no information).

    A constant return (``var = bound = 0``) cannot deviate at all: ``x = inf`` for ``t > 0``.
    """
    t = np.maximum(t, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        num = t * t * (0.5 * m)
        den = var + bound * t / 3.0
        x = np.full(np.broadcast_shapes(num.shape, den.shape), np.inf)
        np.divide(num, den, out=x, where=den > 0)
    x[np.broadcast_to(t, x.shape) == 0] = 0.0
    return x


def bounds_bernstein(mu, opt, worst, m: float, resolution: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Bounds on ``P(GORP picks sigma)`` from Bernstein's inequality, by quantile bins of ``X_sigma``.

    In the bin of ``X_sigma`` between its ``q - res`` and ``q`` quantiles, ``X_sigma`` lies in
    ``[mu - t(q - res), mu + t(1 - q)]`` with ``t(delta)`` the Bernstein deviation at level delta;
    sigma wins at most when every other estimate is below the bin's top and surely when all are
    below its bottom. Variances use Bhatia-Davis: ``Var <= (G_opt - mu)(mu - G_worst)``.
    """
    bound = opt - worst
    var = np.maximum((opt - mu) * (mu - worst), 0.0)
    nq = int(round(1 / resolution))
    qs = np.arange(1, nq + 1) * resolution
    qs[-1] = 1.0
    B, V, MU = bound[..., None], var[..., None], mu[..., None]  # [rows, n, 1]
    hi = MU + _inv_bernstein(m, B, V, np.clip(1.0 - qs, 0.0, 1.0))  # [rows, n, Q]
    lo = MU - _inv_bernstein(m, B, V, np.clip(qs - resolution, 0.0, 1.0))
    n = mu.shape[-1]
    not_self = ~np.eye(n, dtype=bool)[None, :, None, :]
    Bo, Vo, MUo = bound[:, None, None, :], var[:, None, None, :], mu[:, None, None, :]
    # prod_j P(X_j <= hi) <= exp(-sum_j x_j) for the downward deviations mu_j - hi.
    with np.errstate(over="ignore"):  # huge exponents (m up to 1e100) sum to inf: probability 0
        x_hi = np.where(not_self, _bernstein_exponent(m, Bo, Vo, MUo - hi[..., None]), 0.0).sum(-1)
    upper = np.minimum(resolution * np.exp(-x_hi).sum(-1), 1.0)
    # prod_j P(X_j < lo) >= prod_j (1 - exp(-x_j)) for the upward deviations lo - mu_j.
    x_lo = _bernstein_exponent(m, Bo, Vo, lo[..., None] - MUo)
    lt_lo = np.where(not_self, -np.expm1(-x_lo), 1.0).prod(-1)
    lower = resolution * lt_lo.sum(-1)
    return lower, upper


def bounds_bennett(mu, opt, worst, m: float) -> tuple[np.ndarray, np.ndarray]:
    """Upper bounds from Bennett's inequality around a threshold between the best and the runner-up.

    With ``tau`` halfway between the best mean and the best mean below it, sigma can be picked only
    if ``X_sigma >= tau`` or every best sequence's estimate is below ``tau``.
    """
    rows, n = mu.shape
    top = mu.max(axis=1, keepdims=True)
    is_top = mu >= top - TIE_RTOL * np.abs(top)
    below = np.where(mu < top - REWARD_PRECISION, mu, -np.inf).max(axis=1, keepdims=True)
    informative = np.isfinite(below)[:, 0]
    threshold = (top + np.where(np.isfinite(below), below, top)) / 2.0
    bound = opt - worst
    var = np.maximum((opt - mu) * (mu - worst), 0.0)
    drop = _bennett_tail(m, bound, var, mu - threshold)  # P(X_rho < tau) for the best rho
    all_top_below = np.where(is_top, drop, 1.0).prod(axis=1, keepdims=True)
    above = _bennett_tail(m, bound, var, threshold - mu)
    upper = 1.0 - (1.0 - above) * (1.0 - all_top_below)
    upper = np.where(informative[:, None], upper, 1.0)
    return np.zeros_like(upper), upper


_HIGHS = None


def _highs():
    """One reusable, silent HiGHS instance (its banner goes to the C-level stdout, so mute fd 1)."""
    global _HIGHS
    if _HIGHS is None:
        import os
        import sys

        import highspy

        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 1)
                _HIGHS = highspy.Highs()
                _HIGHS.setOptionValue("output_flag", False)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _HIGHS.setOptionValue("presolve", "off")
    return _HIGHS


def max_failure_lp(f: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Solve ``max_p sum_sigma p_sigma f_sigma`` s.t. ``lower <= p <= upper``, ``sum p = 1``, per row.

    All rows go to HiGHS (highspy) as one block-diagonal LP. Rows whose bounds cannot sum to 1
    (only possible through rounding) get ``max f``.
    """
    import highspy

    rows, n = f.shape
    lower = np.minimum(lower, upper)
    feasible = (lower.sum(1) <= 1.0 + 1e-12) & (upper.sum(1) >= 1.0 - 1e-12)
    out = f.max(axis=1).astype(np.float64)
    idx = np.flatnonzero(feasible)
    if idx.size == 0:
        return out
    lo = lower[idx]
    lo = lo / np.maximum(lo.sum(1, keepdims=True), 1.0)  # remove rounding overshoot
    r = idx.size
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = r * n, r
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.ascontiguousarray(f[idx].ravel(), dtype=np.float64)
    lp.col_lower_ = np.ascontiguousarray(lo.ravel(), dtype=np.float64)
    lp.col_upper_ = np.ascontiguousarray(upper[idx].ravel(), dtype=np.float64)
    lp.row_lower_ = np.ones(r)
    lp.row_upper_ = np.ones(r)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.arange(r * n + 1, dtype=np.int32)  # column j has one entry: row j // n
    lp.a_matrix_.index_ = np.repeat(np.arange(r, dtype=np.int32), n)
    lp.a_matrix_.value_ = np.ones(r * n)
    h = _highs()
    h.clearModel()
    h.passModel(lp)
    h.run()
    if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
        p = np.asarray(h.getSolution().col_value).reshape(r, n)
        out[idx] = np.minimum((p * f[idx]).sum(1), out[idx])
    return out


def max_failure_greedy(f: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Closed-form solution of the same LP (fill the largest ``f`` first); used to test the LP."""
    out = np.empty(f.shape[0])
    for i in range(f.shape[0]):
        p = lower[i].copy()
        left = 1.0 - p.sum()
        for j in np.argsort(-f[i], kind="stable"):
            add = min(upper[i, j] - p[j], max(left, 0.0))
            p[j] += add
            left -= add
        out[i] = p @ f[i]
    return out


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

    def failure_probability(self, m: int, stats: dict[str, int]) -> float:
        """Upper bound on the probability that GORP with ``m`` rollouts per sequence is not optimal."""
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
                    mu, opt, worst = (a[hard] for a in self.seqs[t])
                    f = f_action[hard][:, self.first_action]
                    fail_now[idx[hard]] = self._hard_states(mu, opt, worst, f, m, stats)
            fail_next = fail_now
        return float(fail_next[0])

    def _methods(self, mu, opt, worst, m):
        """The bound computations that apply to these sequences (each returns (L, U) or None)."""
        n = mu.shape[1]
        binomial = self.r_scale is not None and m <= 1_000_000 and n <= 100
        p = mu / self.r_scale if self.r_scale else None
        if self.ties == "worst_case" and binomial:
            # Exact probabilities: no other box bound can be tighter, so it is the only method.
            exact = _chunked(lambda a, b, c: bounds_binomial_exact(a, m), p, opt, worst, n * 4000)
            if exact is not None:
                return [lambda: exact]
        methods = []
        if binomial and self.ties == "bridge":
            methods.append(lambda: _chunked(lambda a, b, c: bounds_binomial_bins(a, m), p, opt, worst, n * (n + 40) * 101))
        # Bernstein's bins cost n^2 * 100 per state and, where the binomial bins apply, change the
        # failure probability by < 1e-5 (measured on KeyCorridorS3R1): use them only otherwise.
        if n <= 100 and not methods:
            methods.append(lambda: _chunked(lambda a, b, c: bounds_bernstein(a, b, c, float(m)), mu, opt, worst, n * n * 100))
        methods.append(lambda: bounds_bennett(mu, opt, worst, float(m)))
        return methods

    def _hard_states(self, mu, opt, worst, f, m, stats) -> np.ndarray:
        """Worst-case failure probability at states whose actions' failure probabilities differ.

        Each method's bounds give ``fail_lo <= LP value <= fail_hi``; the LP (HiGHS) is solved only
        where the two differ by more than ``LP_GAP`` and the method could still beat the best value.
        """
        boxes = []
        best = f.max(axis=1)
        for method in self._methods(mu, opt, worst, m):
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
                best[need] = np.minimum(best[need], max_failure_lp(f[need], lower[need], upper[need]))
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
    states) ``k = 1`` alone takes about 15 CPU minutes.
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
        if ctx.failure_probability(m_max, stats) > 0.5:
            pruned = m_max < 10**100
            k_results[k] = {"effective_horizon": math.inf, "m": math.inf, "sample_complexity": math.inf,
                            "not_below": min(best_h, T) if pruned else math.inf}
            continue
        while m_max > m_min + 1 and (m_max - m_min) / m_max > 1e-2:
            mid = math.isqrt(m_max * (m_min + 1))
            if progress:
                progress(f"tight bound k={k}: m={mid:.4g}")
            if ctx.failure_probability(mid, stats) <= 0.5:
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
