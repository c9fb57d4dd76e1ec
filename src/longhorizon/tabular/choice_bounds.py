"""Bounds on GORP's choice probabilities and the worst case over them (Appendix C of the effective-horizon paper).

At a state, GORP estimates every ``k``-step action sequence ``sigma`` from ``m`` rollouts and picks the
best estimate; ``P(sigma)`` is only known to lie in ``[L_sigma, U_sigma]``. The functions here give
those boxes (binomial, Bernstein, Bennett; arrays [rows, n] over rows of states and their ``n``
sequences) and the worst failure probability over a box,

    max_p sum_sigma p_sigma f_sigma   s.t.   L <= p <= U,  sum_sigma p_sigma = 1,

which is a fractional knapsack: give every sigma its ``L``, then fill the largest ``f`` first up to ``U``
(:func:`max_failure`). HiGHS solves the same LP in :func:`max_failure_lp`, kept as the cross-check.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

REWARD_PRECISION = 1e-4  # an action is optimal when Q* is within this of V* (BRIDGE's convention)
TIE_RTOL = 1e-9  # Q values within this relative distance of the maximum count as tied


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


def _bernstein_deviation(m, bound, var, log_inv_delta):
    """The deviation ``t`` at which Bernstein's tail ``exp(-m t^2 / (2 (var + bound t / 3)))`` equals
    ``delta`` (given as ``log(1/delta)``; inf for ``delta = 0``, 0 for a constant return)."""
    L = log_inv_delta
    t = (bound * L / m + jnp.sqrt(18.0 * var / m * L + (bound * L / m) ** 2)) / 3.0
    t = jnp.where((bound == 0) | (var == 0), 0.0, t)
    return jnp.where(jnp.isinf(L), jnp.inf, t)


def _bernstein_exponent(m, bound, var, t):
    """``x`` with ``P(mean - mu >= t) <= exp(-x)`` by Bernstein; 0 where ``t <= 0`` (no information).

    A constant return (``var = bound = 0``) cannot deviate at all: ``x = inf`` for ``t > 0``.
    """
    t = jnp.maximum(t, 0.0)
    den = var + bound * t / 3.0
    x = jnp.where(den > 0, t * t * (0.5 * m) / jnp.where(den > 0, den, 1.0), jnp.inf)
    return jnp.where(t == 0, 0.0, x)


def _bernstein_upper(m, log_inv_delta, res, mu, bound, var, above_mu, above_bound, above_var, above_count):
    """``U`` of a block of classes [B] from the classes above each one [B, K] (``K`` of them, weighted by
    their sizes): ``res * sum_q exp(-sum_rho c_rho x_rho(hi_q))``, ``hi_q = mu + t(1 - q)``."""
    hi = mu[:, None] + _bernstein_deviation(m, bound[:, None], var[:, None], log_inv_delta[None])  # [B, Q]
    x = above_count[..., None] * _bernstein_exponent(m, above_bound[..., None], above_var[..., None],
                                                     above_mu[..., None] - hi[:, None, :])  # [B, K, Q]
    return jnp.minimum(res * jnp.exp(-x.sum(1)).sum(-1), 1.0)


def _bernstein_lower(m, log_inv_delta, res, mu, bound, var, other_mu, other_bound, other_var):
    """``L`` of a block of strict row maxima [B] from the row's other sequences [B, n - 1]:
    ``res * sum_q prod_rho (1 - exp(-x_rho(lo_q)))``, ``lo_q = mu - t(q - res)``."""
    lo = mu[:, None] - _bernstein_deviation(m, bound[:, None], var[:, None], log_inv_delta[None])  # [B, Q]
    x = _bernstein_exponent(m, other_bound[..., None], other_var[..., None], lo[:, None, :] - other_mu[..., None])
    return res * (-jnp.expm1(-x)).prod(1).sum(-1)


_bernstein_upper_jit = jax.jit(_bernstein_upper)
_bernstein_lower_jit = jax.jit(_bernstein_lower)
BLOCK = 512  # classes per call: one compiled program per number of classes above


def _padded(index: np.ndarray) -> list[np.ndarray]:
    """``index`` [N] cut into blocks of ``BLOCK``, the last one padded with its first entry (dropped later)."""
    out = []
    for start in range(0, index.size, BLOCK):
        block = index[start : start + BLOCK]
        out.append(np.concatenate([block, np.full(BLOCK - block.size, block[0])]))
    return out


def sequence_classes(mu, opt, worst):
    """Group each row's sequences into classes of equal ``(mu, opt, worst)``, which get equal bounds.

    Returns ``(class_of [rows, n], row [C], mu, opt, worst, count [C])`` with classes numbered row by
    row in increasing ``mu`` (ties broken by ``opt``, ``worst``), so a row's last class has the largest mean.
    """
    rows, n = mu.shape
    order = np.lexsort((worst, opt, mu))  # along the last axis
    s_mu, s_opt, s_worst = (np.take_along_axis(a, order, axis=1) for a in (mu, opt, worst))
    new = np.ones((rows, n), dtype=bool)
    new[:, 1:] = (s_mu[:, 1:] != s_mu[:, :-1]) | (s_opt[:, 1:] != s_opt[:, :-1]) | (s_worst[:, 1:] != s_worst[:, :-1])
    flat_id = np.cumsum(new.ravel()).reshape(rows, n) - 1  # classes numbered across rows in order
    class_of = np.empty((rows, n), dtype=np.int64)
    np.put_along_axis(class_of, order, flat_id, axis=1)
    first = new.ravel()
    count = np.bincount(flat_id.ravel(), minlength=int(first.sum()))
    row = np.repeat(np.arange(rows), n)[first]
    return class_of, row, s_mu.ravel()[first], s_opt.ravel()[first], s_worst.ravel()[first], count


class BernsteinBounds:
    """Bernstein's bounds on GORP's choice probabilities for fixed sequences, at any number of rollouts.

    In the bin of ``X_sigma`` between its ``q - res`` and ``q`` quantiles, ``X_sigma`` lies in
    ``[mu - t(q - res), mu + t(1 - q)]`` with ``t(delta)`` the Bernstein deviation at level delta;
    sigma wins at most when every other estimate is below the bin's top and surely when all are
    below its bottom:

        U_sigma = res sum_q prod_{rho != sigma} P(X_rho <= hi_q) <= res sum_q exp(-sum_rho x_rho(hi_q)),
        L_sigma = res sum_q prod_{rho != sigma} P(X_rho < lo_q) >= res sum_q prod_rho (1 - exp(-x_rho(lo_q))).

    Variances use Bhatia-Davis: ``Var <= (G_opt - mu)(mu - G_worst)``. Since ``hi_q >= mu_sigma``, only
    sequences with a larger mean lower ``U``; since ``lo_q <= mu_sigma``, ``L`` is zero unless sigma is
    its row's strict maximum. Sequences of a row with equal ``(mu, opt, worst)`` have equal bounds, so
    ``U`` is computed once per class of equal sequences from the classes above it: on MiniGrid, where
    many actions tie, about 6 (class, class above) pairs per row instead of ``n^2``. The layout
    depends only on the sequences; :meth:`at` evaluates it for one ``m`` (float64, in JAX).
    ``mu, opt, worst`` [rows, n].
    """

    def __init__(self, mu, opt, worst, resolution: float = 0.01):
        mu, opt, worst = (np.asarray(a, np.float64) for a in (mu, opt, worst))
        self.shape, self.resolution = mu.shape, resolution
        rows, n = mu.shape
        nq = int(round(1 / resolution))
        qs = np.arange(1, nq + 1) * resolution
        qs[-1] = 1.0
        with np.errstate(divide="ignore"):
            self.log_inv_hi = -np.log(np.clip(1.0 - qs, 0.0, 1.0))  # the bin top's level 1 - q
            self.log_inv_lo = -np.log(np.clip(qs - resolution, 0.0, 1.0))  # the bin bottom's level q - res
        var_of = lambda o, u, w: np.maximum((o - u) * (u - w), 0.0)  # noqa: E731
        self.class_of, self.class_row, c_mu, c_opt, c_worst, count = sequence_classes(mu, opt, worst)
        C = self.class_row.size
        self.classes = np.stack([c_mu, c_opt - c_worst, var_of(c_opt, c_mu, c_worst), count.astype(np.float64)], 1)
        # Classes are sorted by (row, mu): the classes above one are a contiguous run up to its row's end.
        row = self.class_row
        row_end = np.append(np.searchsorted(row, np.arange(1, rows)), C)[row]
        same = np.append((row[1:] == row[:-1]) & (c_mu[1:] == c_mu[:-1]), False)
        self.above_start = np.minimum.accumulate(np.where(~same, np.arange(C), C)[::-1])[::-1] + 1
        self.above = row_end - self.above_start  # how many classes lie above each class
        self.class_first = np.searchsorted(row, np.arange(rows + 1))  # row r's classes: [first[r], first[r + 1])
        # Each row's strict maximum: its top class holds one sequence and no other class ties its mean.
        self.top_col = mu.argmax(axis=1)
        top_mu = mu[np.arange(rows), self.top_col]
        others = ~np.eye(n, dtype=bool)[self.top_col]  # [rows, n]: the columns of the other sequences
        self.other_col = np.nonzero(others)[1].reshape(rows, n - 1)
        self.strict = (mu[others].reshape(rows, n - 1) < top_mu[:, None]).all(axis=1)
        self.sequences = np.stack([mu, opt - worst, var_of(opt, mu, worst)], -1)  # [rows, n, 3]

    def at(self, m: float, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(L, U)`` [len(rows), n] for the given rows (sorted; default: all) with ``m`` rollouts per sequence."""
        rows = np.arange(self.shape[0]) if rows is None else np.asarray(rows)
        n = self.shape[1]
        # The classes of these rows (each row's classes are a contiguous run).
        first, size = self.class_first[rows], self.class_first[rows + 1] - self.class_first[rows]
        chosen = np.repeat(first - np.cumsum(size) + size, size) + np.arange(size.sum())
        upper_c = np.ones(chosen.size)  # a class with nothing above wins every bin
        lower = np.zeros((rows.size, n))
        strict = np.flatnonzero(self.strict[rows])  # positions in rows
        with jax.enable_x64(True):
            m_, res = np.float64(m), np.float64(self.resolution)
            pending = []
            for K in range(1, n):
                for block in _padded(np.flatnonzero(self.above[chosen] == K)):
                    own, src = chosen[block], self.above_start[chosen[block], None] + np.arange(K)[None]
                    pending.append((block, _bernstein_upper_jit(
                        m_, self.log_inv_hi, res, *self.classes[own, :3].T, *np.moveaxis(self.classes[src], -1, 0))))
            pending_lo = []
            for block in _padded(strict):
                r = rows[block]
                own, other = self.sequences[r, self.top_col[r]], self.sequences[r[:, None], self.other_col[r]]
                pending_lo.append((block, _bernstein_lower_jit(
                    m_, self.log_inv_lo, res, *own.T, *np.moveaxis(other, -1, 0))))
            for block, values in pending:  # padded entries repeat a real one: writing them is harmless
                upper_c[block] = np.asarray(values)
            for block, values in pending_lo:
                lower[block, self.top_col[rows[block]]] = np.asarray(values)
        position = np.searchsorted(chosen, self.class_of[rows])
        return lower, upper_c[position]


def bounds_bernstein(mu, opt, worst, m: float, resolution: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """``(L, U)`` [rows, n] of :class:`BernsteinBounds` for sequences ``mu, opt, worst`` [rows, n] at ``m``."""
    if mu.shape[0] == 0:
        return np.zeros(mu.shape), np.zeros(mu.shape)
    return BernsteinBounds(mu, opt, worst, resolution).at(m)


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
    """The LP of :func:`max_failure` solved by HiGHS (highspy): the cross-check of the closed form.

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


def max_failure(f: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``max_p sum_sigma p_sigma f_sigma`` s.t. ``lower <= p <= upper``, ``sum p = 1``, per row, in closed form.

    A fractional knapsack: every sigma gets ``lower``; the mass left, ``1 - sum lower``, goes to the
    largest ``f`` first, each up to its ``upper``. Rows whose bounds cannot sum to 1 (only possible
    through rounding) get ``max f``; lower bounds that overshoot 1 by rounding are rescaled, and the
    value never exceeds ``max f`` (as :func:`max_failure_lp`).
    """
    lower = np.minimum(lower, upper)
    out = f.max(axis=1).astype(np.float64)
    feasible = (lower.sum(1) <= 1.0 + 1e-12) & (upper.sum(1) >= 1.0 - 1e-12)
    if not feasible.any():
        return out
    f_, lo, hi = f[feasible], lower[feasible], upper[feasible]
    lo = lo / np.maximum(lo.sum(1, keepdims=True), 1.0)
    order = np.argsort(-f_, axis=1, kind="stable")
    room = np.take_along_axis(np.maximum(hi - lo, 0.0), order, axis=1)
    left = np.maximum(1.0 - lo.sum(1, keepdims=True), 0.0)
    filled_before = np.cumsum(room, axis=1) - room
    add = np.clip(left - filled_before, 0.0, room)
    value = (lo * f_).sum(1) + (add * np.take_along_axis(f_, order, axis=1)).sum(1)
    out[feasible] = np.minimum(value, out[feasible])
    return out
