"""`longhorizon evolve drift`: meta-train an LPO / TA-LPO drift with PPO inner runs on an environment.

The drift it writes (``DIR/drift.npz``, saved after every generation) is what ``longhorizon train ppo
--drift DIR/drift.npz`` trains with. Heavy modules are imported inside the command so that
``longhorizon --help`` stays fast.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import UsageError

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
    ctx: typer.Context,
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
    resume: Optional[Path] = typer.Option(None, help="Continue the run in this results folder from its last saved "
                                          "generation (no other setting may be given)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the options and print the plan as JSON; "
                                 "compile and write nothing."),
) -> None:
    """Meta-train a drift with evosax's OpenES; writes drift.npz (every generation) and a results folder
    (metrics.jsonl, checkpoints, curve.png, summary.json)."""
    from longhorizon.envs.registry import make
    from longhorizon.evolution import meta, meta_ppo
    from longhorizon.evolution import train as drift_train
    from longhorizon.runner.command_line import given_options
    from longhorizon.runner.loop import check_folder
    from longhorizon.runner.results import read_json

    if resume is not None:
        given = [name for name in given_options(ctx) if name not in ("resume", "dry_run")]
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} cannot be changed when resuming; resume with the saved "
                             "config only (--dry-run may be added).")
        if not (resume / "config.json").is_file():
            raise UsageError(f"--resume {resume} has no config.json; pass a folder written by `longhorizon evolve drift`.")
        plan = read_json(resume / "config.json")
        if plan.get("command") != "evolve drift":
            raise UsageError(f"{resume} holds no `evolve drift` run; pass a folder written by `longhorizon evolve drift`.")
        plan["out"] = str(resume)
        folder = resume
    else:
        make(env)  # an unknown id fails here, in one sentence
        inner = meta_ppo.InnerPPO(env=env, lifetimes=_lifetimes(lifetimes), seeds=seeds)
        meta.ESConfig(population=population, sigma=sigma, learning_rate=learning_rate)  # validates
        if generations < 1:
            raise UsageError(f"--generations {generations} must be at least 1.")
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        folder = out if out is not None else Path("runs") / f"drift-{env}-{stamp}"
        if (folder / "drift.npz").exists():
            raise UsageError(f"{folder} already holds a drift; pass --resume {folder} to continue it or another "
                             "--out (nothing was overwritten).")
        plan = {"command": "evolve drift", "env": env, "objective": "TA-LPO" if temporal else "LPO",
                "lifetimes": list(inner.lifetimes), "seeds": seeds, "population": population,
                "generations": generations, "sigma": sigma, "learning_rate": learning_rate, "seed": seed,
                "out": str(folder), "inner_env_steps_per_generation": meta_ppo.inner_env_steps(inner, population)}
    check_folder(folder, resume is not None)
    if dry_run:
        print(json.dumps(plan, indent=2))
        return
    print(f"meta-training {plan['objective']} on {plan['env']}: {plan['generations']} generations x "
          f"{plan['inner_env_steps_per_generation']:,} inner env steps (the first generation compiles)")
    summary = drift_train.train(plan, resume=resume is not None)  # Ctrl-C: the CLI says what was saved
    print(f"wrote {summary['drift']}; train with it: longhorizon train ppo --env {plan['env']} "
          f"--drift {summary['drift']}")
