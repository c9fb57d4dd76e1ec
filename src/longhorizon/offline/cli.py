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
    from longhorizon.offline.datasets import RECIPES, cache_dir, cached_path

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
            "exists": target.exists()}
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
# `longhorizon offline train AGENT --dataset NAME_OR_PATH ...` goes here (the agents' part of issue 14):
# it loads data with longhorizon.offline.datasets.load_dataset and evaluates with longhorizon.offline.envs.evaluate.
