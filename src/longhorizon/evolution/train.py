"""`evolve drift` as a run of the runner's one training loop: one ES generation per chunk.

:class:`DriftTrainable` meta-trains an LPO / TA-LPO drift with PPO inner runs
(:class:`~longhorizon.evolution.meta_ppo.EnvMetaTrainer`); the loop owns the results folder (lock,
``config.json``, ``metrics.jsonl`` + TensorBoard, checksummed checkpoints, Ctrl-C, exact resume,
``summary.json``, ``curve.png``). The checkpointed state is the ES state and its random key, so a
resumed run draws the same populations as an uninterrupted one. ``drift.npz``, the file ``longhorizon
train ppo --drift`` reads, is rewritten after every generation's checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from longhorizon.runner.loop import Trainable, train_loop
from longhorizon.runner.results import ResultsDir, read_metrics


def plan_settings(plan: dict[str, Any]):
    """``(drift config, inner runs, ES config)`` of a plan (``config.json``)."""
    from longhorizon.evolution import lpo, meta, meta_ppo

    inner = meta_ppo.InnerPPO(env=plan["env"], lifetimes=tuple(plan["lifetimes"]), seeds=plan["seeds"])
    es = meta.ESConfig(population=plan["population"], sigma=plan["sigma"], learning_rate=plan["learning_rate"])
    return lpo.DriftConfig(temporal=plan["objective"] == "TA-LPO"), inner, es


class DriftTrainable(Trainable):
    """An ES meta-training run: chunk ``g`` is generation ``g + 1``; the step axis counts generations."""

    step_key = "step"
    progress_headline = ("fitness", "mean_fitness")
    divergence_advice = "lower --sigma or --learning-rate and start again"

    def __init__(self, plan: dict[str, Any]):
        self.plan = plan
        self.out, self.num_chunks = Path(plan["out"]), plan["generations"]
        self.drift_path = self.out / "drift.npz"
        self.resume_command = f"longhorizon evolve drift --resume {self.out}"
        self.progress_description = f"{plan['objective']} drift · {plan['env']} (generations)"
        self.trainer = None

    def resolved_config(self) -> dict[str, Any]:
        return self.plan

    def init_state(self):
        from longhorizon.evolution import meta_ppo

        drift, inner, es = plan_settings(self.plan)
        self.trainer = meta_ppo.EnvMetaTrainer(drift, inner, es, seed=self.plan["seed"])
        return {"key": self.trainer.key, "es_state": self.trainer.es_state}

    def step_after(self, chunks_done: int) -> int:
        return chunks_done

    def run_chunk(self, state, chunk: int):
        self.trainer.key, self.trainer.es_state = state["key"], state["es_state"]
        fitness = self.trainer.generation()  # the first one compiles
        return {"key": self.trainer.key, "es_state": self.trainer.es_state}, {"finite": np.isfinite(fitness),
                                                                              "mean_fitness": fitness}

    def metrics_row(self, metrics: dict[str, Any], chunk: int, elapsed: float) -> dict[str, Any]:
        return {"mean_fitness": float(metrics["mean_fitness"]),
                "steps_per_second": self.plan["inner_env_steps_per_generation"] / elapsed}

    def saved(self, state, chunk: int) -> None:
        from longhorizon.evolution import lpo

        lpo.save_drift(self.drift_path, self.trainer.params())

    def summary_fields(self, state, chunks_done: int, final_eval, train_seconds: float) -> dict[str, Any]:
        curve = [row["mean_fitness"] for row in read_metrics(self.out)]
        return {**self.plan, "generations_done": chunks_done, "mean_fitness": curve, "drift": str(self.drift_path)}

    def plot(self, results: ResultsDir) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = results.read_metrics()
        fig, ax = plt.subplots(figsize=(5, 3.4))
        ax.plot([r["step"] for r in rows], [r["mean_fitness"] for r in rows], marker="o", ms=3)
        ax.set_xlabel("ES generation")
        ax.set_ylabel("population mean normalised return")
        ax.set_title(f"{self.plan['objective']} drift on {self.plan['env']}", fontsize=9)
        fig.tight_layout()
        fig.savefig(results.curve_path, dpi=110)
        plt.close(fig)


def train(plan: dict[str, Any], resume: bool = False) -> dict[str, Any]:
    """Meta-train the drift ``plan`` describes (or continue it with ``resume``); returns the summary."""
    summary, _ = train_loop(lambda: DriftTrainable(plan), resume)
    return summary
