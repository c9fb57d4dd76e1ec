"""`longhorizon evolve drift`: meta-train an LPO / TA-LPO drift with PPO inner runs on an environment.

The drift it writes (``DIR/drift.npz``, saved after every generation) is what ``longhorizon train ppo
--drift DIR/drift.npz`` trains with. Heavy modules are imported inside the command so that
``longhorizon --help`` stays fast.
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import UsageError
from longhorizon.runner.results import write_json_atomic

evolve_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Learning algorithms found by evolution (discovered PPO objectives).")


def register(app: typer.Typer) -> None:
    app.add_typer(evolve_app, name="evolve")


def _lifetimes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--lifetimes {text!r} is not a comma-separated list of update counts; pass e.g. 8,32.") from None


@evolve_app.command()
def drift(
    env: str = typer.Option("CartPole-v1", help="Environment the inner PPO runs train on (a registry id)."),
    temporal: bool = typer.Option(True, "--temporal/--no-temporal", help="TA-LPO (the drift sees n/N and log N) "
                                  "or LPO."),
    lifetimes: str = typer.Option("8,32", help="Comma-separated inner lifetimes, in PPO updates."),
    seeds: int = typer.Option(2, help="Inner PPO runs per population member and lifetime."),
    population: int = typer.Option(8, help="ES population (even: antithetic pairs)."),
    generations: int = typer.Option(30, help="ES generations."),
    sigma: float = typer.Option(0.05, help="ES noise scale."),
    learning_rate: float = typer.Option(0.03, help="Adam step size on the drift's parameters."),
    seed: int = typer.Option(0, help="Seed of the initial drift and of the ES noise."),
    out: Optional[Path] = typer.Option(None, help="Results folder (default: runs/drift-ENV-TIME)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the options and print the plan as JSON; "
                                 "compile and write nothing."),
) -> None:
    """Meta-train a drift with evosax's OpenES; writes drift.npz (every generation), meta_fitness.jsonl, a plot."""
    from longhorizon.envs.registry import make
    from longhorizon.evolution import lpo, meta, meta_ppo

    make(env)  # an unknown id fails here, in one sentence
    inner = meta_ppo.InnerPPO(env=env, lifetimes=_lifetimes(lifetimes), seeds=seeds)
    es = meta.ESConfig(population=population, sigma=sigma, learning_rate=learning_rate)
    drift_config = lpo.DriftConfig(temporal=temporal)
    if generations < 1:
        raise UsageError(f"--generations {generations} must be at least 1.")
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = out if out is not None else Path("runs") / f"drift-{env}-{stamp}"
    if (folder / "drift.npz").exists():
        raise UsageError(f"{folder} already holds a drift; pass another --out (nothing was overwritten).")
    steps = meta_ppo.inner_env_steps(inner, population)
    plan = {"command": "evolve drift", "env": env, "objective": "TA-LPO" if temporal else "LPO",
            "lifetimes": list(inner.lifetimes), "seeds": seeds, "population": population, "generations": generations,
            "sigma": sigma, "learning_rate": learning_rate, "seed": seed, "out": str(folder),
            "inner_env_steps_per_generation": steps}
    if dry_run:
        print(json.dumps(plan, indent=2))
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / "config.json", plan)
    trainer = meta_ppo.EnvMetaTrainer(drift_config, inner, es, seed=seed)
    print(f"meta-training {plan['objective']} on {env}: {generations} generations x {steps:,} inner env steps "
          "(the first generation compiles)")
    curve, status, start = [], "completed", time.perf_counter()
    from longhorizon.runner.interrupts import Interrupted, StopRequest

    # Ctrl-C: the generation in flight finishes (its drift is saved), then the run stops with code 130
    with StopRequest("generation") as stop:
        try:
            with open(folder / "meta_fitness.jsonl", "a") as rows:
                for generation in range(1, generations + 1):
                    if stop.requested:
                        status = "interrupted"
                        break
                    t0 = time.perf_counter()
                    fitness = trainer.generation()
                    curve.append(fitness)
                    lpo.save_drift(folder / "drift.npz", trainer.params())  # after every generation
                    rows.write(json.dumps({"generation": generation, "mean_fitness": fitness,
                                           "seconds": time.perf_counter() - t0}) + "\n")
                    rows.flush()
                    print(f"  generation {generation}/{generations}: mean normalised return {fitness:.3f} "
                          f"({time.perf_counter() - t0:.1f} s)")
        except KeyboardInterrupt:  # a second Ctrl-C: the generation in flight is dropped
            status = "interrupted"
    summary = {**plan, "status": status, "generations_done": len(curve), "mean_fitness": curve,
               "wall_seconds": time.perf_counter() - start, "drift": str(folder / "drift.npz")}
    write_json_atomic(folder / "summary.json", summary)
    if curve:
        _plot(folder / "meta_fitness.png", curve, plan)
    if status == "interrupted":
        raise Interrupted(f"interrupted after {len(curve)} of {generations} generations: "
                          + (f"the drift of generation {len(curve)} is saved in {folder / 'drift.npz'}."
                             if curve else "nothing was saved."))
    print(f"wrote {folder}/drift.npz; train with it: longhorizon train ppo --env {env} --drift {folder}/drift.npz")


def _plot(path: Path, curve: list, plan: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(range(1, len(curve) + 1), curve, marker="o", ms=3)
    ax.set_xlabel("ES generation")
    ax.set_ylabel("population mean normalised return")
    ax.set_title(f"{plan['objective']} drift on {plan['env']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
