"""The ``longhorizon`` command line.

Usage errors (unknown algorithm or environment, bad config field) print one sentence on stderr and
exit with code 2 before anything compiles; no traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from longhorizon.errors import TrainingDiverged, UsageError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Reinforcement learning over long horizons and at scale, in JAX.")

# Modules that add their own commands with ``register(app)``.
PLUGINS = ("longhorizon.tabular.cli", "longhorizon.lm.cli", "longhorizon.repro.cli")


def setup_compilation_cache() -> None:
    """JAX's persistent compilation cache, on by default in the user's cache folder.

    Turn it off with ``LONGHORIZON_COMPILE_CACHE=0``; move it with ``LONGHORIZON_COMPILE_CACHE=/some/dir``.
    """
    import jax

    setting = os.environ.get("LONGHORIZON_COMPILE_CACHE", "1")
    if setting.lower() in ("0", "off", "false", "no"):
        return
    folder = Path(setting) if setting not in ("1", "on", "true", "yes") else \
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "longhorizon" / "jax"
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _parse_extra(args: list[str]) -> dict[str, str]:
    """``--field value`` / ``--field=value`` pairs left over after the known options."""
    overrides: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise UsageError(f"unexpected argument '{arg}'; config fields are given as --field value.")
        name, _, value = arg[2:].partition("=")
        if not value:
            if i + 1 >= len(args) or (args[i + 1].startswith("--") and not _is_number(args[i + 1])):
                raise UsageError(f"--{name} needs a value; write --{name} VALUE.")
            value, i = args[i + 1], i + 1
        overrides[name.replace("-", "_")] = value
        i += 1
    return overrides


def _parse_env_args(items: list[str]) -> dict:
    """``KEY=VALUE`` environment settings; values are read as Python literals where they parse (numbers, booleans)."""
    import ast

    settings = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--env-arg '{item}' is not KEY=VALUE; write e.g. --env-arg max_steps_in_episode=200.")
        try:
            settings[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            settings[key] = value
    return settings


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    algo: str = typer.Argument(None, help="Algorithm: ppo, pqn, dqn, sqirl ..."),
    env: Optional[str] = typer.Option(None, help="Environment id (see `longhorizon envs`)."),
    seeds: int = typer.Option(1, help="Independent seeds trained together in one vmapped program."),
    seed: int = typer.Option(0, help="Base random seed."),
    total_steps: Optional[str] = typer.Option(None, help="Environment steps per seed."),
    out: Optional[Path] = typer.Option(None, help="Results folder (default: runs/ALGO-ENV-TIME)."),
    resume: Optional[Path] = typer.Option(None, help="Continue the run in this results folder."),
    chunks: int = typer.Option(25, help="Number of chunks; Python logs/evaluates/checkpoints between chunks."),
    eval_every: int = typer.Option(0, help="Greedy evaluation every N chunks (0: only at the end)."),
    eval_episodes: int = typer.Option(10, help="Episodes per seed in each greedy evaluation."),
    target_return: Optional[float] = typer.Option(None, help="Stop once the mean greedy-eval return reaches this."),
    engine: str = typer.Option("fused", help="fused (one XLA program) or ray."),
    quiet: bool = typer.Option(False, help="No progress output."),
    actors: int = typer.Option(1, help="--engine ray: actors running collect (sync: whole seeds per actor)."),
    address: str = typer.Option("local", help="--engine ray: local (a private instance), auto, or HOST:PORT of a cluster."),
    mode: str = typer.Option("sync", help="--engine ray: sync (bit-identical to fused) or async (actors run ahead)."),
    max_staleness: int = typer.Option(0, help="--engine ray --mode async: most parameter versions a batch may lag."),
    actor_cpus: float = typer.Option(1.0, help="--engine ray: CPUs each actor declares (Ray places actors by them)."),
    actor_gpus: float = typer.Option(0.0, help="--engine ray: GPUs (or a fraction) each actor declares."),
    env_arg: Optional[list[str]] = typer.Option(None, "--env-arg", help="Environment setting KEY=VALUE, repeatable "
                                                "(e.g. --env-arg max_steps_in_episode=200, or horizon=100 for an .npz)."),
) -> None:
    """Train ALGO on --env; any algorithm config field can be set as --field value."""
    from longhorizon.runner.run import RunSpec, spec_from_results, train as run_train

    extra = _parse_extra(list(ctx.args))
    if resume is not None:
        if extra:
            raise UsageError(f"--{next(iter(extra))} cannot be changed when resuming; resume with the saved config only.")
        spec = spec_from_results(resume, quiet=quiet)
    else:
        if not algo:
            raise UsageError("missing algorithm; write `longhorizon train ALGO --env ID`, e.g. `longhorizon train ppo --env CartPole-v1`.")
        if not env:
            raise UsageError("missing --env; pass an environment id such as --env CartPole-v1 (list them with `longhorizon envs`).")
        if total_steps is not None:
            extra["total_steps"] = total_steps
        spec = RunSpec(algo=algo, env=env, config_overrides=extra, env_overrides=_parse_env_args(env_arg or []),
                       seeds=seeds, seed=seed, out=str(out) if out else None, num_chunks=chunks, eval_every=eval_every,
                       eval_episodes=eval_episodes, target_return=target_return, engine=engine, quiet=quiet,
                       actors=actors, address=address, mode=mode, max_staleness=max_staleness,
                       actor_cpus=actor_cpus, actor_gpus=actor_gpus)
    setup_compilation_cache()
    try:
        summary = run_train(spec, resume=resume is not None)
    except KeyboardInterrupt as stop:
        folder = spec.out
        print(f"interrupted: checkpoint saved; continue with `longhorizon train --resume {folder}`.", file=sys.stderr)
        raise typer.Exit(130) from stop
    _print_summary(summary)


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


@app.command(name="eval")
def eval_command(
    run_dir: Path = typer.Argument(..., help="A results folder written by `longhorizon train`."),
    episodes: int = typer.Option(10, help="Episodes per seed."),
    render: Optional[Path] = typer.Option(None, help="Write a GIF of one greedy episode (seed 0) here."),
    stochastic: bool = typer.Option(False, help="Sample actions instead of acting greedily."),
) -> None:
    """Evaluate the newest checkpoint of a run; optionally render an episode to GIF."""
    from longhorizon.runner.replay import evaluate_run

    setup_compilation_cache()
    returns, gif = evaluate_run(run_dir, episodes=episodes, greedy=not stochastic, render=render)
    print(f"mean return over {episodes} episodes per seed: " + ", ".join(f"{r:.2f}" for r in returns))
    if gif:
        print(f"rendered episode: {gif}")


@app.command()
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="One or more results folders."),
    out: Path = typer.Option(Path("curves.png"), help="Output PNG."),
    title: Optional[str] = typer.Option(None),
) -> None:
    """Plot several runs' learning curves on one figure."""
    from longhorizon.runner.plots import plot_runs

    for run_dir in run_dirs:
        if not (run_dir / "metrics.jsonl").exists():
            raise UsageError(f"{run_dir} has no metrics.jsonl; pass results folders written by `longhorizon train`.")
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
    """Entry point; returns the exit code (2 for usage errors)."""
    try:
        app(args=argv, standalone_mode=False, prog_name="longhorizon")
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except typer.Exit as done:
        return done.exit_code
    except typer.Abort:
        print("aborted.", file=sys.stderr)
        return 130
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
