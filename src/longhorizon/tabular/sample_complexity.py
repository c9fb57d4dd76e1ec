"""Empirical sample complexity of an RL run on an exact MDP: the environment steps until its greedy policy is optimal.

Read from a runner's ``metrics.jsonl`` rows (:func:`longhorizon.runner.results.read_metrics`) with a greedy
evaluation in every chunk: a seed's sample complexity is the step count at the end of the first chunk whose
evaluation return is within :data:`SUCCESS_TOLERANCE` of the optimal return (from dynamic programming,
:mod:`longhorizon.tabular.horizon`). Steps are the runner's ``env_steps``, or, for an algorithm that simulates
past an episode's end (SQIRL), the sum of its ``sample_steps`` metric. Over seeds the median is reported, a seed
that never got there counting as above the budget (censored). Across MDPs, :func:`complexity_correlation` ranks
those medians against a measure of difficulty (a censored one above every found one) and :func:`log_slope` fits
how fast they grow with it.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from longhorizon.core.stats import spearman
from longhorizon.errors import UsageError

SUCCESS_TOLERANCE = 1e-4  # BRIDGE's reward precision: a return this close to the optimum is optimal


def step_counts(rows: Sequence[dict[str, Any]], count: str = "env_steps", updates_per_chunk: int = 1) -> list[float]:
    """Cumulative steps at the end of each chunk: ``env_steps`` as logged, or (``count="sample_steps"``)
    the running sum of the per-update ``sample_steps`` metric times the updates in a chunk (the row's
    ``updates``; ``updates_per_chunk`` for rows written before rows carried it)."""
    if count == "env_steps":
        return [float(r["env_steps"]) for r in rows]
    if count == "sample_steps":
        total, out = 0.0, []
        for r in rows:
            if r.get("sample_steps") is None:
                raise UsageError(f"metrics row of chunk {r.get('chunk')} has no sample_steps; count env_steps instead.")
            total += float(r["sample_steps"]) * r.get("updates", updates_per_chunk)
            out.append(total)
        return out
    raise UsageError(f"unknown step count '{count}'; choose env_steps or sample_steps.")


def first_success_steps(rows: Sequence[dict[str, Any]], target: float, num_seeds: int, *, count: str = "env_steps",
                        updates_per_chunk: int = 1, tolerance: float = SUCCESS_TOLERANCE) -> dict[str, Any]:
    """Per seed, the step count of the first chunk whose greedy evaluation return is at least
    ``target - tolerance`` (``None``: never within the run), and the steps the run used in all."""
    steps = step_counts(rows, count, updates_per_chunk)
    first: list[float | None] = [None] * num_seeds
    for row, n in zip(rows, steps):
        per_seed = row.get("eval_return_per_seed")
        if per_seed is None:
            continue
        if len(per_seed) != num_seeds:
            raise UsageError(f"chunk {row.get('chunk')} has {len(per_seed)} evaluation returns, expected {num_seeds}.")
        for i, ret in enumerate(per_seed):
            if first[i] is None and ret is not None and ret >= target - tolerance:
                first[i] = n
    return {"first_success": first, "steps_used": steps[-1] if steps else 0.0}


def summarise_seeds(first: Sequence[float | None], steps_used: float) -> dict[str, Any]:
    """Median, min and max over seeds, a seed that never succeeded counting as above the budget
    (``inf``); ``censored`` when the median itself lies above it."""
    values = np.array([math.inf if v is None else float(v) for v in first])
    median = float(np.median(values)) if len(values) else math.inf
    found = [float(v) for v in first if v is not None]
    return {"median": None if not math.isfinite(median) else median, "censored": not math.isfinite(median),
            "min": min(found) if found else None, "max": None if len(found) < len(first) else max(found),
            "found": len(found), "seeds": len(first), "steps_used": float(steps_used)}


def format_complexity(s: dict[str, Any]) -> str:
    """``median [min, max]``; ``> budget`` for what was not found within it."""
    def num(x):
        return f"{x:,.0f}"

    above = f">{num(s['steps_used'])}"
    median = above if s["censored"] else num(s["median"])
    lo = above if s["min"] is None else num(s["min"])
    hi = above if s["max"] is None else num(s["max"])
    return f"{median} [{lo}, {hi}] ({s['found']}/{s['seeds']})"


def complexity_correlation(xs: Sequence[float | None], ys: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Spearman's rho (:func:`longhorizon.core.stats.spearman`) between ``xs`` and median sample complexities,
    with its two-sided p-value (Student-t on n - 2 degrees of freedom, as SciPy reports it); a censored
    median ranks above every found one (all censored medians tie)."""
    from scipy import stats

    pairs = [(x, s) for x, s in zip(xs, ys) if x is not None]
    censored = sum(s["censored"] for _, s in pairs)
    if len(pairs) < 3:
        return {"rho": None, "p_value": None, "n": len(pairs), "censored": censored}
    top = max([s["steps_used"] for _, s in pairs] + [s["median"] or 0.0 for _, s in pairs])
    x = [p[0] for p in pairs]
    y = [2.0 * top if s["censored"] else s["median"] for _, s in pairs]
    if len(set(y)) < 2 or len(set(x)) < 2:
        return {"rho": None, "p_value": None, "n": len(pairs), "censored": censored, "why": "constant input"}
    rho, dof = spearman(x, y), len(pairs) - 2
    t = rho * math.sqrt(dof / max((1.0 + rho) * (1.0 - rho), 0.0)) if abs(rho) < 1 else math.copysign(math.inf, rho)
    return {"rho": rho, "p_value": float(2 * stats.t.sf(abs(t), dof)), "n": len(pairs), "censored": censored}


def log_slope(xs: Sequence[float | None], ys: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Least-squares slope of log10(median sample complexity) on ``xs`` (an effective horizon, or the log10 of a
    bound), found medians only; with the intercept and Pearson's r of the fitted points."""
    pts = [(x, math.log10(s["median"])) for x, s in zip(xs, ys) if x is not None and not s["censored"] and s["median"]]
    if len(pts) < 3 or len({p[0] for p in pts}) < 2:
        return {"slope": None, "n": len(pts)}
    x, y = np.array(pts).T
    slope, intercept = np.polyfit(x, y, 1)
    return {"slope": float(slope), "intercept": float(intercept), "n": len(pts),
            "pearson_r": float(np.corrcoef(x, y)[0, 1])}
