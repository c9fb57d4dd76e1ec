"""Learning-curve plots: mean over seeds with a min-max band, against environment steps."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from longhorizon.runner.results import ResultsDir, read_json  # noqa: E402


def plot_runs(run_dirs: list[str | os.PathLike], out: str | os.PathLike, title: str | None = None) -> Path:
    """Plot the training return of every run (and its greedy-evaluation points) on one figure."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for i, run_dir in enumerate(run_dirs):
        results = ResultsDir(run_dir)
        rows = [r for r in results.read_metrics() if r.get("episode_return_mean") is not None]
        label = Path(run_dir).name
        if results.config_path.exists():
            cfg = read_json(results.config_path)
            label = f"{cfg.get('algo', '?')} · {cfg.get('env', '?')} ({cfg.get('seeds', '?')} seeds)"
            if len(run_dirs) > 1:
                label += f" · {Path(run_dir).name}"
        color = f"C{i}"
        if rows:
            x = [r["env_steps"] for r in rows]
            ax.plot(x, [r["episode_return_mean"] for r in rows], color=color, label=label)
            ax.fill_between(x, [r["episode_return_min"] for r in rows], [r["episode_return_max"] for r in rows],
                            color=color, alpha=0.2, linewidth=0)
        evals = [r for r in results.read_metrics() if r.get("eval_return_mean") is not None]
        if evals:
            ax.plot([r["env_steps"] for r in evals], [r["eval_return_mean"] for r in evals], "o--", color=color,
                    markersize=3, linewidth=0.8, label=f"{label} (greedy eval)" if len(run_dirs) > 1 else "greedy eval")
    ax.set_xlabel("environment steps (per seed)")
    ax.set_ylabel("episode return")
    ax.set_title(title or "training return: mean over seeds, band = min..max")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
