"""The ``longhorizon`` command line.

Usage errors (unknown algorithm or environment, bad config field) print one sentence on stderr and
exit with code 2 before anything compiles; no traceback.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import TrainingDiverged, UsageError
from longhorizon.runner.command_line import (check_resolved, given_options, parse_env_args, parse_field_args, print_json,
                                             setup_compilation_cache)
from longhorizon.runner.interrupts import INTERRUPTED_EXIT, NOT_SAVED, Interrupted

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Reinforcement learning over long horizons and at scale, in JAX.")

# Modules that add their own commands with ``register(app)``.
PLUGINS = ("longhorizon.tabular.cli", "longhorizon.lm.cli", "longhorizon.repro.cli", "longhorizon.runner.sweep",
           "longhorizon.offline.cli", "longhorizon.evolution.cli")


# Options of `train` that set a RunSpec field of another name (the rest share their name).
_SPEC_FIELD = {"chunks": "num_chunks", "env_arg": "env_overrides"}
# What a results folder's config.json records besides the settings: derived from them (checked
# against the run they describe) or about the machine (ignored).
_DERIVED = ("num_updates", "updates_per_chunk", "steps_per_chunk")
_RECORDED = ("config_overrides", "longhorizon_version", "jax_version", "devices", "seed_devices")


def read_config_file(path: Path) -> tuple[dict, dict]:
    """``(run settings, algorithm fields)`` from a YAML or JSON file given to ``train --config``.

    Two shapes are accepted: a flat mapping (run options such as ``env`` or ``seeds`` next to
    algorithm fields such as ``learning_rate``), and a results folder's ``config.json``, whose
    algorithm fields sit under ``config`` and whose Ray options sit under ``ray``. Keys may use
    ``-`` or ``_``. Algorithm fields are checked once the algorithm is known.
    """
    import json

    import yaml

    from longhorizon.runner.run import RunSpec

    if not path.is_file():
        raise UsageError(f"--config {path} does not exist; pass a YAML or JSON file of settings.")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        where = f" (line {error.lineno})" if getattr(error, "lineno", None) else \
            f" (line {error.problem_mark.line + 1})" if getattr(error, "problem_mark", None) else ""
        raise UsageError(f"--config {path} is not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}"
                         f"{where}; fix the file or pass another one.") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path} must hold a mapping of settings (key: value), not {type(data).__name__}; "
                         "write e.g. `env: CartPole-v1`.")
    # each run setting's type, from its default (None: optional text; the exceptions follow)
    spec_types = {f.name: str if f.default is None else type(f.default)
                  for f in dataclasses.fields(RunSpec) if f.default is not dataclasses.MISSING}
    spec_types.update(algo=str, env=str, target_return=float, env_overrides=dict)
    spec_types["num_devices"] = None  # a count or "all": checked by engine.fused.resolve_devices
    spec_types.pop("env_params", None)  # a Python object: set from code, not from a file
    settings: dict = {}
    fields: dict = {}
    for raw_key, value in data.items():
        key = str(raw_key).replace("-", "_")
        key = _SPEC_FIELD.get(key, key)
        if key in ("config", "ray") and isinstance(value, dict):
            target = fields if key == "config" else settings
            for inner, inner_value in value.items():
                name = str(inner).replace("-", "_")
                if key == "ray" and name not in spec_types:
                    raise UsageError(f"--config {path} sets ray.{inner}, which is not a Ray option; remove it.")
                target[name] = inner_value
        elif key in ("resume", "config", "dry_run", "ray"):
            raise UsageError(f"--config {path} sets '{raw_key}', which only the command line can give; remove it from the file.")
        elif key in spec_types or key in _RECORDED or key in _DERIVED:
            settings[key] = value
        else:
            fields[key] = value
    for key, value in list(settings.items()):
        kind = spec_types.get(key)
        if kind is None or value is None:
            continue
        if key == "env_overrides" and isinstance(value, list):
            settings[key] = parse_env_args([str(v) for v in value])
            continue
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise UsageError(f"--config {path} sets {key} to {value!r}, which is not of type {kind.__name__}; "
                             f"write e.g. {key}: {_EXAMPLES.get(kind, 'VALUE')}.")
        settings[key] = value
    return settings, {k: _as_text(v) for k, v in fields.items()}


_EXAMPLES = {int: 4, float: 0.5, str: "text", bool: "true", dict: "{KEY: VALUE}"}


def _as_text(value) -> str:
    """An algorithm field from a file, as the text the command line would give (lists become ``a,b``)."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    algo: str = typer.Argument(None, help="Algorithm: ppo, pqn, dqn, sqirl, mbdpo ..."),
    env: Optional[str] = typer.Option(None, help="Environment id (see `longhorizon envs`)."),
    seeds: int = typer.Option(1, help="Independent seeds trained together in one vmapped program."),
    seed: int = typer.Option(0, help="Base random seed."),
    total_steps: Optional[str] = typer.Option(None, help="Environment steps per seed."),
    out: Optional[Path] = typer.Option(None, help="Results folder (default: runs/ALGO-ENV-TIME)."),
    resume: Optional[Path] = typer.Option(None, help="Continue the run in this results folder (no other setting may be given)."),
    chunks: int = typer.Option(25, help="Number of chunks; Python logs/evaluates/checkpoints between chunks."),
    eval_every: int = typer.Option(0, help="Greedy evaluation every N chunks (0: only at the end)."),
    eval_episodes: int = typer.Option(10, help="Episodes per seed in each greedy evaluation."),
    target_return: Optional[float] = typer.Option(None, help="With --eval-every: stop once the mean greedy-eval return reaches this."),
    engine: str = typer.Option("fused", help="fused (one XLA program), host (gymnasium envs; picked for them) or ray."),
    num_devices: str = typer.Option("1", "--devices", help="Local devices the seeds are sharded over: a count or all "
                                    "(a CPU is split into as many devices as it has cores); it must divide --seeds."),
    quiet: bool = typer.Option(False, help="No progress output."),
    actors: int = typer.Option(1, help="--engine ray: actors running collect (sync: whole seeds per actor)."),
    address: str = typer.Option("local", help="--engine ray: local (a private instance), auto, or HOST:PORT of a cluster."),
    mode: str = typer.Option("sync", help="--engine ray: sync (bit-identical to fused) or async (actors run ahead)."),
    max_staleness: int = typer.Option(0, help="--engine ray --mode async: most parameter versions a batch may lag."),
    actor_cpus: float = typer.Option(1.0, help="--engine ray: CPUs each actor declares (Ray places actors by them)."),
    actor_gpus: float = typer.Option(0.0, help="--engine ray: GPUs (or a fraction) each actor declares."),
    wandb: Optional[str] = typer.Option(None, help="Also log to this Weights & Biases project (extra longhorizon[wandb]; "
                                        "WANDB_MODE=offline works without network)."),
    env_arg: Optional[list[str]] = typer.Option(None, "--env-arg", help="Environment setting KEY=VALUE, repeatable "
                                                "(e.g. --env-arg max_steps_in_episode=200, or horizon=100 for an .npz)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML or JSON file setting any option or algorithm field "
                                          "(a run's config.json works too); flags given here override it."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check everything and print the resolved config as JSON; "
                                 "compile and write nothing."),
) -> None:
    """Train ALGO on --env; any algorithm config field can be set as --field value."""
    from longhorizon.runner.run import dry_run as check_run
    from longhorizon.runner.run import spec_from_results, train as run_train

    extra = parse_field_args(list(ctx.args))
    given = given_options(ctx)
    if resume is not None:
        changed = [name for name in given if name not in ("resume", "quiet", "dry_run", "wandb")] + list(extra)
        if changed:
            raise UsageError(f"--{changed[0].replace('_', '-')} cannot be changed when resuming; resume with the saved "
                             "config only (--quiet, --dry-run and --wandb may be added).")
        spec = spec_from_results(resume, quiet=quiet, wandb=wandb)
        request_devices(spec.num_devices)
        from longhorizon.runner.sweep import refuse_resume

        refuse_resume(resume)
    else:
        spec, recorded = _train_spec(ctx, given, extra)
    if spec.eval_every < 0:
        raise UsageError(f"--eval-every must be 0 or more (got {spec.eval_every}); pass 0 to evaluate only at the end.")
    if spec.target_return is not None and not spec.eval_every:
        raise UsageError("--target-return is checked after periodic evaluations only; add --eval-every N "
                         "(chunks between evaluations) or drop --target-return.")
    resolved = check_run(spec, resume=resume is not None)
    if resume is None:
        check_resolved(resolved, recorded)
    if dry_run:
        print_json({**resolved, "quiet": spec.quiet, "wandb": spec.wandb})  # run settings config.json leaves out
        return
    setup_compilation_cache()
    summary = run_train(spec, resume=resume is not None)  # Ctrl-C: main() prints what was saved, exit 130
    _print_summary(summary)


def request_devices(asked) -> None:
    """Split a CPU host into the devices ``--devices`` asks for (``all``: one per core) while JAX has not
    started yet; the run then refuses a count JAX does not have. GPU hosts keep their own devices."""
    from longhorizon.engine.fused import local_cpu_count, request_cpu_devices

    text = str(asked).strip().lower()
    if text == "all" or (text.isdigit() and int(text) > 1):
        request_cpu_devices(local_cpu_count() if text == "all" else int(text))


def _train_spec(ctx: typer.Context, given: list[str], extra: dict[str, str]):
    """The RunSpec of a new run: the --config file's settings, then the flags given on the command line.

    Returns the spec and what the file recorded about its own run (``_DERIVED`` values) together with
    the settings asked for explicitly, by the file or the flags (``asked``, name -> value).
    """
    from longhorizon.runner.run import RunSpec

    settings, fields = read_config_file(ctx.params["config"]) if ctx.params["config"] is not None else ({}, {})
    recorded = {key: settings.pop(key) for key in _DERIVED if key in settings}
    for key in _RECORDED:
        settings.pop(key, None)
    asked = dict(settings)
    for name in given:
        if name in ("config", "dry_run", "resume", "total_steps"):
            continue
        value = ctx.params[name]
        if name == "env_arg":  # added to the file's environment settings
            value = {**settings.get("env_overrides", {}), **parse_env_args(value or [])}
        elif name == "out" and value is not None:
            value = str(value)
        settings[_SPEC_FIELD.get(name, name)] = value
        asked[_SPEC_FIELD.get(name, name)] = value
    request_devices(settings.get("num_devices", 1))  # before anything below starts JAX
    if fields:
        _check_fields(ctx.params["config"], fields, settings.get("algo"), settings.get("env"))
    fields.update(extra)
    if ctx.params["total_steps"] is not None:
        fields["total_steps"] = ctx.params["total_steps"]
    if not settings.get("algo"):
        raise UsageError("missing algorithm; write `longhorizon train ALGO --env ID`, e.g. `longhorizon train ppo --env CartPole-v1`.")
    if not settings.get("env"):
        raise UsageError("missing --env; pass an environment id such as --env CartPole-v1 (list them with `longhorizon envs`).")
    spec = RunSpec(config_overrides=fields, **settings)
    return spec, {"values": recorded, "asked": asked}


def _check_fields(path: Path, fields: dict, algo: str | None, env: str | None) -> None:
    """Name the first key of a --config file that is neither a run option nor a field of the algorithm's config."""
    import difflib

    from longhorizon import algos as algo_registry
    from longhorizon.config import config_fields
    from longhorizon.runner.run import RunSpec

    if not algo or not env:
        return  # the missing algorithm or environment is reported next
    known = config_fields(type(algo_registry.get(algo).default_config(env)))
    for key in fields:
        if key not in known:
            options = [*known, *(f.name for f in dataclasses.fields(RunSpec))]
            close = difflib.get_close_matches(key, options, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "see `longhorizon train --help` and the algorithm's Config."
            raise UsageError(f"--config {path} sets '{key}', which is neither a run option nor a setting of {algo}; {hint}")


def _print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['algo']} on {summary['env']}: {summary['status']}", show_header=False)
    rows = [("results", summary["results"]), ("env steps per seed", f"{summary['total_env_steps']:,}"),
            ("final greedy eval (per seed)", ", ".join(f"{r:.1f}" for r in summary["final_eval_return"] or [])),
            ("steps/s (all seeds, compile excluded)", f"{summary['steps_per_second']:,.0f}" if summary["steps_per_second"] else "-"),
            ("compile s", f"{summary['compile_seconds']:.1f}"), ("wall s", f"{summary['wall_seconds']:.1f}")]
    for key, value in rows:
        table.add_row(key, str(value))
    Console().print(table)


@app.command()
def envs() -> None:
    """List every environment id with its observation and action spaces."""
    from rich.console import Console
    from rich.table import Table

    from longhorizon.envs import family, list_env_ids, make

    table = Table(title="longhorizon environments")
    for column in ("id", "family", "observation", "action", "episode limit"):
        table.add_column(column)
    for env_id in list_env_ids():
        try:
            env = make(env_id)
            table.add_row(env_id, family(env_id), env.obs_info.describe(), env.act_info.describe(), str(env.max_episode_steps))
        except UsageError as error:
            table.add_row(env_id, family(env_id), "-", "-", f"unavailable: {error}")
    console = Console()
    if not console.is_terminal:  # piped: do not squeeze ids into an 80-column table
        console = Console(width=200)
    console.print(table)
    console.print("Also accepted by --env: gymnasium:ID for any registered gymnasium environment (e.g. "
                  "gymnasium:CartPole-v1; gymnasium:Hopper-v5 with longhorizon[mujoco]), gymnasium:pkg.module:Class, "
                  "pkg.module:factory for your own gymnax-style environment, and a tabular MDP file.npz "
                  "(docs/gymnasium.md).", markup=False)


@app.command(name="eval")
def eval_command(
    run_dir: Path = typer.Argument(..., help="A results folder written by `longhorizon train`."),
    episodes: int = typer.Option(10, help="Episodes per seed."),
    render: Optional[Path] = typer.Option(None, help="Write a GIF of one greedy episode (seed 0) here."),
    stochastic: bool = typer.Option(False, help="Sample actions instead of acting greedily."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the folder and options, print what would run; compile nothing."),
) -> None:
    """Evaluate the newest checkpoint of a run; optionally render an episode to GIF."""
    from longhorizon.runner.replay import evaluate_run

    if dry_run:
        from longhorizon.runner.run import dry_run as check_run
        from longhorizon.runner.run import spec_from_results

        if episodes < 1:
            raise UsageError(f"--episodes must be at least 1 (got {episodes}); pass 10 for example.")
        if render is not None and not render.resolve().parent.is_dir():
            raise UsageError(f"the folder of --render {render} does not exist; create it or choose another path.")
        resolved = check_run(spec_from_results(run_dir, quiet=True), resume=True)  # needs a checkpoint
        print_json({"run": str(run_dir), "algo": resolved["algo"], "env": resolved["env"], "seeds": resolved["seeds"],
                     "episodes": episodes, "greedy": not stochastic, "render": render})
        return
    setup_compilation_cache()
    returns, gif = evaluate_run(run_dir, episodes=episodes, greedy=not stochastic, render=render)
    print(f"mean return over {episodes} episodes per seed: " + ", ".join(f"{r:.2f}" for r in returns))
    if gif:
        print(f"rendered episode: {gif}")


@app.command()
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="One or more results folders."),
    out: Path = typer.Option(Path("curves.png"), help="Output PNG."),
    title: Optional[str] = typer.Option(None, help="Figure title (default: what the curves show)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the folders, print what would be plotted; write nothing."),
) -> None:
    """Plot several runs' learning curves on one figure."""
    for run_dir in run_dirs:
        if not (run_dir / "metrics.jsonl").exists():
            raise UsageError(f"{run_dir} has no metrics.jsonl; pass results folders written by `longhorizon train`.")
    if not out.resolve().parent.is_dir():
        raise UsageError(f"the folder of --out {out} does not exist; create it or choose another path.")
    if dry_run:
        print_json({"runs": run_dirs, "out": out, "title": title})
        return
    from longhorizon.runner.plots import plot_runs

    print(plot_runs(run_dirs, out, title=title))


def _register_plugins() -> None:
    for module_name in PLUGINS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name and error.name.startswith("longhorizon"):
                continue  # that part of the library is not there yet
            raise
        module.register(app)


_register_plugins()


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for usage errors, 130 for Ctrl-C)."""
    try:
        # click hands back a command's typer.Exit code instead of raising it when standalone_mode is off
        code = app(args=argv, standalone_mode=False, prog_name="longhorizon")
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except typer.Exit as done:
        return done.exit_code
    except Interrupted as stop:  # a run stopped by Ctrl-C at a safe point: what was saved, how to continue
        print(stop, file=sys.stderr)
        return INTERRUPTED_EXIT
    except (KeyboardInterrupt, typer.Abort):  # Ctrl-C outside a run's safe points (or a second one)
        print(NOT_SAVED, file=sys.stderr)
        return INTERRUPTED_EXIT
    except typer.TyperException as error:  # typer's own usage errors: keep them to one line
        message = error.format_message() if hasattr(error, "format_message") else str(error)
        if type(error).__name__ == "NoArgsIsHelpError":
            print(message)
            return 0
        print(f"error: {message}", file=sys.stderr)
        return 2
    except TrainingDiverged as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
