"""Evaluation statistics: the mean with its standard error, the unbiased pass@k estimator and Spearman's rho.

**Standard error.** For independent values ``x_1..x_m`` (one per prompt, or one per seed)::

    mean = (1/m) sum_i x_i,    SE = s / sqrt(m),    s^2 = (1/(m-1)) sum_i (x_i - mean)^2

(``s`` is the sample standard deviation, ``ddof=1``). With several completions per prompt the
completions of one prompt are not independent, so the SE is taken over the *per-prompt* means (the
clustered standard error of Miller, "Adding Error Bars to Evals", 2024): ``x_i`` is prompt ``i``'s mean.
A single value has no spread to estimate; its SE is reported as 0.0.

**pass@k** (Chen et al., "Evaluating Large Language Models Trained on Code", 2021; the estimator verl and
TRL users report). With ``n`` samples of a prompt of which ``c`` are correct, the probability that ``k``
samples drawn from those ``n`` without replacement contain at least one correct one is::

    pass@k = 1 - C(n - c, k) / C(n, k)          (1 when n - c < k)

an unbiased estimate of the probability that ``k`` fresh samples solve the prompt; the reported pass@k is
its mean over prompts. pass@1 = c / n, the plain accuracy. Example: n=4, c=1, k=2:
``1 - C(3, 2) / C(4, 2) = 1 - 3/6 = 0.5``.

**Spearman's rank correlation** rho is the Pearson correlation of the two samples' ranks, tied values sharing
the mean of the ranks they span (SciPy's ``spearmanr`` with its default ``rankdata``). Without ties it equals
``1 - 6 sum_i d_i^2 / (m (m^2 - 1))``, ``d_i`` the rank differences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mean_se(values) -> tuple[float, float]:
    """``(mean, standard error)`` of independent values (``std(ddof=1) / sqrt(m)``; 0.0 for a single value)."""
    v = np.asarray(values, np.float64).ravel()
    if v.size == 0:
        raise ValueError("mean_se needs at least one value.")
    se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0
    return float(v.mean()), se


def pass_at_k(n: int, c: int, k: int) -> float:
    """``1 - C(n - c, k) / C(n, k)``: the chance that ``k`` of ``n`` samples (``c`` correct) hold a correct one."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n (got n={n}, c={c}).")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n (got n={n}, k={k}).")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_ks(n: int) -> list[int]:
    """The k reported for ``n`` samples per prompt: the powers of 2 below ``n``, and ``n`` (as verl reports)."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


def pass_at_k_mean_se(n: int, correct: Sequence[int], k: int) -> tuple[float, float]:
    """Mean over prompts of :func:`pass_at_k` (``correct[i]`` correct samples of prompt ``i``, ``n`` each) and its SE."""
    return mean_se([pass_at_k(n, int(c), k) for c in correct])


def ranks(values) -> np.ndarray:
    """1-based ranks of ``values``; tied values share the mean of the ranks they span (``[5, 7, 5]`` -> ``[1.5, 3, 1.5]``)."""
    v = np.asarray(values, np.float64).ravel()
    order = np.argsort(v, kind="stable")
    ordered = v[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])  # where each run of equal values begins
    ends = np.r_[starts[1:], v.size]  # one past where it ends
    out = np.empty(v.size)
    out[order] = np.repeat((starts + ends + 1) / 2, ends - starts)  # mean of the 1-based ranks starts+1 .. ends
    return out


def spearman(x, y) -> float:
    """Spearman's rank correlation of paired samples ``x`` and ``y`` (module docstring); NaN when either side is
    constant or there are fewer than two pairs (no ranking to correlate)."""
    rx, ry = ranks(x), ranks(y)
    if rx.size != ry.size:
        raise ValueError(f"spearman needs paired samples (got {rx.size} and {ry.size} values).")
    if rx.size < 2 or rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])
