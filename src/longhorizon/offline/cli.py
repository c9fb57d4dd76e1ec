"""`longhorizon offline datasets|make-dataset|inspect`: OGBench datasets generated locally with OGBench's recipe.

Heavy modules (ogbench, MuJoCo, JAX) are imported inside the commands so that ``longhorizon --help``
stays fast. Every command takes ``--dry-run``: check everything, print the plan as JSON, compute nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import UsageError

offline_app = typer.Typer(add_completion=False, no_args_is_help=True,
                          help="Offline goal-conditioned RL on OGBench-format data (datasets made locally).")


def register(app: typer.Typer) -> None:
    app.add_typer(offline_app, name="offline")


def _print_plan(plan: dict) -> None:
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in plan.items()}, indent=2))


# ----------------------------------------------------------------------------- datasets


@offline_app.command()
def datasets(
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the list as JSON (the command only reads)."),
) -> None:
    """List the datasets that can be generated, their default sizes, and which are in the cache."""
    from longhorizon.offline.datagen import RECIPES
    from longhorizon.offline.datasets import cache_dir, cached_path

    rows = [{"name": name, "env": r.env_id, "kind": r.kind, "episodes": r.episodes, "episode_rows": r.length,
             "transitions": r.size, "cached": cached_path(name).exists()} for name, r in RECIPES.items()]
    if dry_run:
        _print_plan({"command": "offline datasets", "cache": cache_dir(), "datasets": rows})
        return
    print(f"OGBench datasets, generated locally with OGBench's recipe (cache: {cache_dir()})")
    print(f"{'name':<30} {'environment':<20} {'behaviour':<9} {'episodes x rows':>15} {'transitions':>12}  cached")
    for row in rows:
        print(f"{row['name']:<30} {row['env']:<20} {row['kind']:<9} {row['episodes']:>6} x {row['episode_rows']:<6} "
              f"{row['transitions']:>12,}  {'yes' if row['cached'] else ''}")
    others = sorted(p.name for p in cache_dir().glob("*-seed*.npz")) if cache_dir().is_dir() else []
    if others:
        print("also cached (other sizes or seeds): " + ", ".join(others))


# ----------------------------------------------------------------------------- make-dataset


@offline_app.command("make-dataset")
def make_dataset(
    name: str = typer.Argument(..., help="Dataset name, e.g. pointmaze-giant-stitch-v0 (`longhorizon offline datasets`)."),
    out: Optional[Path] = typer.Option(None, help="Training file (.npz); the -val file goes beside it. "
                                       "Default: the cache, where --dataset NAME finds it."),
    size: Optional[int] = typer.Option(None, help="Training transitions (whole episodes); default OGBench's (1M for most)."),
    seed: int = typer.Option(0, help="Seed: the same seed gives the same file whatever --workers is."),
    workers: Optional[int] = typer.Option(None, help="Processes (default: every CPU for large datasets)."),
    force: bool = typer.Option(False, "--force", help="Regenerate even if the file exists."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the options, print what would be generated; "
                                 "write nothing."),
) -> None:
    """Generate an OGBench dataset with OGBench's own recipe (and its -val file), in OGBench's .npz format."""
    from longhorizon.offline import datasets as ds

    spec = ds.recipe(name)
    target = out if out is not None else ds.cached_path(name, size=size, seed=seed)
    ds.check_make_args(target, size, seed, workers)
    train, val = spec.episodes_for(size)
    plan = {"command": "offline make-dataset", "name": name, "env": spec.env_id, "kind": spec.kind,
            "episodes": train, "val_episodes": val, "transitions": train * (spec.length - 1),
            "out": target, "val_out": ds.val_path(target), "seed": seed, "workers": workers,
            "exists": target.exists(), "force": force}
    if dry_run:
        _print_plan(plan)
        return
    if target.exists() and not force:
        print(f"{target} exists (pass --force to regenerate)")
        return
    path = ds.make_dataset(name, target, size=size, seed=seed, workers=workers)
    print(f"wrote {path} and {ds.val_path(path)}")


@offline_app.command()
def inspect(
    dataset: str = typer.Argument(..., help="A dataset name (from the cache) or an OGBench .npz file."),
    env: Optional[str] = typer.Option(None, help="Check the sizes against this dataset's environment "
                                      "(default: the one the file name names, if any)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="The same (the command only reads)."),
) -> None:
    """Check a dataset file (keys, lengths, terminals, values, sizes against the environment) and summarise it."""
    from longhorizon.offline import datasets as ds

    if not (dataset.endswith(".npz") or Path(dataset).expanduser().exists()):
        ds.recipe(dataset)  # an unknown name fails here, before anything is generated
        if not ds.cached_path(dataset).exists():
            raise UsageError(f"{dataset} is not in the cache yet; run `longhorizon offline make-dataset {dataset}`.")
    data = ds.load_dataset(dataset, env=env)
    plan = {"command": "offline inspect", "dataset": dataset, "transitions": len(data["observations"]),
            "trajectories": int(data["terminals"].sum()),
            "shapes": {k: list(v.shape[1:]) for k, v in data.items()}, "environment": env}
    _print_plan(plan)


# ----------------------------------------------------------------------------- train


@offline_app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    agent: str = typer.Argument(None, help="Agent: gcbc, gcivl, hiql or ota."),
    dataset: Optional[str] = typer.Option(None, help="Dataset name (generated on first use, see `longhorizon offline "
                                          "datasets`) or an OGBench-format .npz file."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="Agent config field KEY=VALUE, repeatable "
                                             "(e.g. --set option_length=10; or --option-length 10)."),
    preset: str = typer.Option("cpu", help="cpu (networks and batch sized for 2 cores) or paper (512x3, batch 1024)."),
    seeds: int = typer.Option(1, help="Independent seeds trained together in one vmapped program."),
    seed: int = typer.Option(0, help="Base random seed."),
    num_updates: int = typer.Option(100_000, help="Gradient updates per seed."),
    chunks: int = typer.Option(20, help="Number of chunks; Python logs/evaluates/checkpoints between chunks."),
    eval_every: int = typer.Option(0, help="Evaluate every N chunks (0: only at the end, if --eval-episodes)."),
    eval_episodes: int = typer.Option(0, help="Episodes per task in the OGBench environment (0: no evaluation)."),
    eval_env: Optional[str] = typer.Option(None, help="Environment to evaluate in (default: the dataset's)."),
    eval_tasks: str = typer.Option("1,2,3,4,5", help="Comma-separated OGBench task ids to evaluate on."),
    dataset_size: Optional[int] = typer.Option(None, help="Transitions to load/generate (default: the whole dataset)."),
    out: Optional[Path] = typer.Option(None, help="Results folder (default: runs/offline-AGENT-DATASET-TIME)."),
    resume: Optional[Path] = typer.Option(None, help="Continue the run in this results folder (no other setting may be given)."),
    quiet: bool = typer.Option(False, help="No progress output."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check everything and print the resolved config as JSON; "
                                 "read, compile and write nothing."),
) -> None:
    """Train an offline goal-conditioned agent on a dataset; writes a results folder (metrics, curve, checkpoints).

    Any agent config field can also be set as --field value (e.g. --option-length 10), as with --set."""
    from longhorizon.offline import train as offline_train
    from longhorizon.runner.command_line import given_options, parse_field_args

    extra = parse_field_args(list(ctx.args))

    if resume is not None:
        given = [name for name in given_options(ctx) if name not in ("resume", "quiet", "dry_run")
                 and ctx.params[name] not in (None, [], ())]
        given += list(extra)
        if given:
            flag = "AGENT" if given[0] == "agent" else "--" + given[0].rstrip("_").replace("_", "-")
            raise UsageError(f"{flag} cannot be changed when resuming; resume with the saved config only "
                             "(--quiet and --dry-run may be added).")
        spec = offline_train.spec_from_results(resume, quiet=quiet)
    else:
        if agent is None or dataset is None:
            raise UsageError("offline train needs an agent and a dataset, e.g. "
                             "`longhorizon offline train ota --dataset pointmaze-giant-stitch-v0`.")
        try:
            tasks = tuple(int(t) for t in eval_tasks.split(",") if t.strip())
        except ValueError:
            raise UsageError(f"--eval-tasks expects comma-separated task ids such as 1,2,3, got '{eval_tasks}'.") from None
        spec = offline_train.spec_from_cli(
            agent, dataset, [*(set_ or ()), *(f"{k}={v}" for k, v in extra.items())], preset=preset, seeds=seeds, seed=seed, num_updates=num_updates,
            num_chunks=chunks, eval_every=eval_every, eval_episodes=eval_episodes, eval_env=eval_env,
            eval_tasks=tasks, dataset_size=dataset_size, out=None if out is None else str(out), quiet=quiet)
    plan = offline_train.dry_run(spec, resume=resume is not None)
    if dry_run:
        _print_plan({"command": "offline train", **plan, "quiet": spec.quiet})
        return
    from longhorizon.runner.command_line import setup_compilation_cache

    setup_compilation_cache()
    summary = offline_train.train(spec, resume=resume is not None)  # Ctrl-C: the CLI says what was saved
    summary.pop("state", None)
    print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, (list, dict)) or k == "final"},
                     indent=2, default=str))
