"""What the reproductions share: summary statistics, the README + summary.json writer, curve plots, arms saved
as they finish."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

# (mean, standard error) of independent samples; 0.0 SE for a single sample, which has no spread to estimate:
# decision rules that need an SE refuse fewer than 2 seeds themselves. One definition, in core.
from longhorizon.core.stats import mean_se  # noqa: F401  (re-exported for the reproductions)


def resumable(path: Path, setup, compute: Callable[[], dict], log=None) -> tuple[dict, bool]:
    """One arm of a long protocol, saved at ``path`` as it finishes and read back by a rerun of the same ``setup``
    (a dataclass), so that an interrupted protocol resumes arm by arm. Returns ``(result, reused)``: the saved
    result (as recorded) when ``path`` holds one from this setup, else ``compute()``'s, written first (atomically,
    with the setup, as recorded)."""
    from longhorizon.repro.claims import as_recorded
    from longhorizon.runner.results import write_json_atomic

    recorded = as_recorded(dataclasses.asdict(setup))
    if path.exists():
        saved = json.loads(path.read_text())
        if saved.get("setup") == recorded:
            if log is not None:
                log(f"  read back from {path}")
            return saved["result"], True
    result = compute()
    write_json_atomic(path, as_recorded({"setup": recorded, "result": result}))
    return result, False


def block_means(values, points: int = 50) -> tuple[list[int], np.ndarray]:
    """A long curve made short for the committed ``curves/``: the means of ``points`` equal blocks along the last
    axis of ``values`` (a remainder shorter than a block is dropped) and each block's last step (1-based)."""
    v = np.asarray(values, np.float64)
    size = max(1, v.shape[-1] // points)
    count = v.shape[-1] // size
    return [(k + 1) * size for k in range(count)], v[..., :count * size].reshape(*v.shape[:-1], count, size).mean(-1)


def write(out: Path, summary: dict, lines: list[str]) -> None:
    """Write ``summary.json`` and ``README.md`` into ``out``. A summary in the claims schema (it has a
    ``paper`` key: :func:`longhorizon.repro.claims.summary`) is validated first and refused if it departs."""
    from longhorizon.runner.results import write_json_atomic

    if "paper" in summary:
        from longhorizon.repro.claims import validate_summary

        problems = validate_summary(summary)
        if problems:
            raise ValueError("the summary does not follow the claims schema: " + "; ".join(problems))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "summary.json", summary)
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'README.md'}")


def verdict_lines(summary: dict) -> list[str]:
    """The README's verdict block of a claims-schema summary: one line per claim, its verdict and why."""
    lines = []
    for c in summary["claims"]:
        why = c["evidence"].get("did_not_move") or c["evidence"].get("reason")
        why = "; ".join(why) if isinstance(why, list) else why
        lines.append(f"- {c['claim']}: **{c['verdict']}**" + (f" ({why})" if why else ""))
    return lines


def write_run(out: Path, summary: dict, lines: list[str], curves: dict | None = None) -> None:
    """Write a claims-schema run: each arm's training curve (``curves[arm]`` = rows) under ``out/curves/``,
    then ``summary.json`` and ``README.md`` (:func:`write`)."""
    from longhorizon.repro.claims import write_curve

    for arm, rows in (curves or {}).items():
        write_curve(out, arm, rows)
    write(out, summary, lines)


def plot_curves(path: Path, curves: dict, xlabel: str, ylabel: str, title: str) -> None:
    """``curves[label] = (xs, means, ses)`` as lines with shaded standard errors."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for label, (xs, ys, es) in curves.items():
        ys, es = np.asarray(ys), np.asarray(es)
        ax.plot(xs, ys, marker="o", ms=3, label=label)
        ax.fill_between(xs, ys - es, ys + es, alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bootstrap_slope(x, rows, summary=None, resamples: int = 2000, rng=0) -> tuple[float, float, float]:
    """``(slope, low, high)``: the least-squares slope of ``summary(rows)`` on ``x`` and its 95% bootstrap
    interval, seeds (the rows of ``rows [seeds, len(x)]``) resampled with replacement.

    ``summary`` reduces the seeds to one curve (default: their mean); it may return NaN where no curve
    exists (say, the log of a non-positive mean), and then every output is NaN. ``rng``: a seed or a
    ``numpy.random.Generator``."""
    x, rows = np.asarray(x, np.float64), np.asarray(rows, np.float64)
    summary = summary or (lambda r: r.mean(0))
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    def slope(sample):
        curve = summary(sample)
        return float(np.polyfit(x, curve, 1)[0]) if np.all(np.isfinite(curve)) else float("nan")

    draws = np.array([slope(rows[rng.integers(len(rows), size=len(rows))]) for _ in range(resamples)])
    point = slope(rows)
    if np.isnan(point) or np.isnan(draws).any():
        return float("nan"), float("nan"), float("nan")
    low, high = np.percentile(draws, [2.5, 97.5])
    return point, float(low), float(high)
