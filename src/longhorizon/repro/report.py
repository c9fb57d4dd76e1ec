"""What the reproductions share: summary statistics, the README + summary.json writer, curve plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def mean_se(values) -> tuple[float, float]:
    """``(mean, standard error)`` of independent samples (``std(ddof=1) / sqrt(n)``; 0.0 for a single sample,
    which has no spread to estimate: decision rules that need an SE refuse fewer than 2 seeds themselves)."""
    v = np.asarray(values, np.float64)
    if v.size == 0:
        raise ValueError("mean_se needs at least one value.")
    se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0
    return float(v.mean()), se


def write(out: Path, summary: dict, lines: list[str]) -> None:
    from longhorizon.runner.results import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "summary.json", summary)
    (out / "README.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'README.md'}")


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
