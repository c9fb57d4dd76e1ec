"""Hyperparameter sweeps: every grid combination x seed, in as few compiled programs as the grid allows.

``longhorizon sweep ppo --env CartPole-v1 --grid learning_rate=1e-4,3e-4,1e-3 --grid ent_coef=0,0.01 --seeds 3``
trains 3 x 2 combinations x 3 seeds = 18 agents. Grid fields fall in two kinds:

* **numeric**: float fields the algorithm can take as traced values (:func:`longhorizon.config.traceable_fields`).
  Their combinations become rows of one stacked config, and the fused engine trains row
  ``r = c * seeds + i`` (combination ``c``, seed index ``i``) in the same vmapped program as every
  other row, exactly as it trains seeds. Seed index ``i`` gets the key a plain ``train --seeds``
  run gives its seed ``i``, so each row reproduces the plain run of its config and seed.
* **structural**: everything else (integers that set shapes, booleans, strings, tuples, and floats an
  algorithm needs as Python numbers). Each structural combination is its own program and its own
  results folder.

Every program is a normal run of :func:`longhorizon.runner.run.train` (config.json, metrics.jsonl,
summary.json, checkpoints) whose seed axis is combinations x seeds. The sweep adds ``sweep.json``
and ``sweep.md`` (final greedy return per combination: mean, std, min, max over seeds) and
``sweep.png`` (training return per combination, mean over seeds with a min-max band, and the final
greedy returns).
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import math
import re
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer

from longhorizon.config import (AlgoConfig, apply_overrides, config_fields, flag, parse_field, stack_configs,
                                traceable_fields)
from longhorizon.errors import UsageError


# ----------------------------------------------------------------------------- the grid
def parse_grid(items: list[str], config: AlgoConfig) -> dict[str, list[str]]:
    """``["FIELD=v1,v2", ...]`` -> ``{field: [v1, v2]}`` (values as CLI text), checked against ``config``.

    Values of tuple fields use ``x`` between their elements (``hidden=64x64,32x32``), since commas
    separate the grid's values."""
    if not items:
        raise UsageError("the sweep has no grid; add --grid FIELD=V1,V2 (e.g. --grid learning_rate=1e-4,3e-4).")
    fields = config_fields(type(config))
    algo = type(config).__module__.rsplit(".", 1)[-1]
    grid: dict[str, list[str]] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip().lstrip("-").replace("-", "_")
        if not sep or not name:
            raise UsageError(f"--grid '{item}' is not FIELD=V1,V2,...; write e.g. --grid learning_rate=1e-4,3e-4.")
        if name not in fields:
            close = difflib.get_close_matches(name, list(fields), n=1)
            hint = f"did you mean {close[0]}?" if close else f"run `longhorizon train {algo} --help` for the settings."
            raise UsageError(f"--grid {name} is not a setting of {algo}; {hint}")
        if name in grid:
            raise UsageError(f"--grid {name} is given twice; list all its values in one --grid {name}=V1,V2.")
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise UsageError(f"--grid {name} has no values; write --grid {name}=V1,V2.")
        if len(set(values)) < len(values):
            raise UsageError(f"--grid {name} lists a value twice ({raw}); list each value once.")
        for value in values:  # a value of the wrong type fails here; each combination is validated later
            parse_field(config, name, value)
        grid[name] = values
    return grid


def classify(grid: dict[str, list[str]], config: AlgoConfig) -> tuple[list[str], list[str]]:
    """``(numeric, structural)`` grid fields: numeric ones vary inside one program, structural ones do not."""
    traceable = set(traceable_fields(config))
    numeric = [name for name in grid if name in traceable]
    return numeric, [name for name in grid if name not in traceable]


def combinations(grid: dict[str, list[str]], names: list[str]) -> list[dict[str, str]]:
    """Every combination of the values of ``names``, the last name varying fastest."""
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def label(combo: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in combo.items()) or "(defaults)"


def _folder_name(combo: dict[str, str]) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", "_".join(f"{k}={v}" for k, v in combo.items()))


# ----------------------------------------------------------------------------- the plan
@dataclasses.dataclass
class Program:
    """One compiled program: a structural combination, its numeric combinations and its results folder."""

    structural: dict[str, str]
    numeric: list[dict[str, str]]
    out: Path


@dataclasses.dataclass
class Plan:
    spec: Any  # RunSpec: the options every program shares (its ``seeds`` is seeds per combination)
    grid: dict[str, list[str]]
    numeric_fields: list[str]
    structural_fields: list[str]
    programs: list[Program]

    def to_dict(self) -> dict[str, Any]:
        return {"algo": self.spec.algo, "env": str(self.spec.env), "seeds": self.spec.seeds, "seed": self.spec.seed,
                "grid": self.grid, "numeric_fields": self.numeric_fields, "structural_fields": self.structural_fields,
                "fixed": self.spec.config_overrides, "out": self.spec.out,
                "programs": [{"out": str(p.out), "structural": p.structural, "combinations": p.numeric,
                              "rows": len(p.numeric) * self.spec.seeds} for p in self.programs]}


def plan(spec, grid_items: list[str]) -> Plan:
    """Check the whole sweep (every combination's config is built and validated) before compiling anything."""
    from longhorizon.runner.run import Run, default_out_dir

    if spec.engine != "fused":
        raise UsageError(f"a sweep runs on the fused engine only (got --engine {spec.engine}); drop --engine.")
    if spec.target_return is not None:
        raise UsageError("--target-return would stop every combination at once; drop it from the sweep.")
    if spec.seeds < 1:
        raise UsageError(f"--seeds must be at least 1 (got {spec.seeds}); pass --seeds 1 or more.")
    run = Run(spec)  # the algorithm, environment and fixed settings, checked as `train` checks them
    algo, env, base = run.algo, run.env, run.config
    # By the engine's name, not isinstance: the host engine subclasses the fused one, and its rows would
    # step host environments that a stacked-config program does not drive (no episode would ever end).
    if run.engine.name != "fused":
        run.engine.close()
        raise UsageError(f"a sweep needs an environment that runs inside XLA and {spec.env} is stepped on the host "
                         f"({run.engine.name} engine); train each setting with `longhorizon train` instead.")
    grid = parse_grid(grid_items, base)
    fixed = sorted(set(grid) & set(spec.config_overrides))
    if fixed:
        raise UsageError(f"{flag(fixed[0])} is both fixed and in the grid; keep one of them.")
    for combo in combinations(grid, list(grid)):
        config = apply_overrides(base, combo)  # validates each combination (e.g. a minibatch count that divides)
        algo.check_env(env, config)
    numeric, structural = classify(grid, base)
    # A field is numeric for the algorithm's base config; a structural value may change that (e.g. PPO's
    # gamma is static once rewards are normalised), so each program checks its own config again.
    root = Path(spec.out) if spec.out else default_out_dir(f"sweep-{spec.algo}", env.id)
    programs = []
    structural_combos = combinations(grid, structural)
    for combo in structural_combos:
        config = apply_overrides(base, combo)
        still = [n for n in numeric if n not in traceable_fields(config)]
        if still:
            raise UsageError(f"{flag(still[0])} cannot vary inside one program when {label(combo)}; "
                             f"sweep it in a separate sweep with that setting fixed.")
        out = root if len(structural_combos) == 1 else root / _folder_name(combo)
        programs.append(Program(combo, combinations(grid, numeric), out))
    return Plan(dataclasses.replace(spec, out=str(root)), grid, numeric, structural, programs)


def program_spec(sweep_plan: Plan, program: Program):
    """The RunSpec of one program: its structural values fixed, one seed row per combination x seed."""
    base = sweep_plan.spec
    return dataclasses.replace(base, config_overrides={**base.config_overrides, **program.structural},
                               seeds=len(program.numeric) * base.seeds, out=str(program.out))


def resolve(sweep_plan: Plan) -> list[dict[str, Any]]:
    """Each program's ``config.json`` as ``train`` would write it, checked as ``train --dry-run`` checks it
    (no folder may hold a run already); nothing is compiled or written."""
    from longhorizon.runner.run import dry_run

    root = Path(sweep_plan.spec.out)
    if (root / "sweep.json").exists():
        raise UsageError(f"{root} already holds a sweep; choose another --out.")
    return [dry_run(program_spec(sweep_plan, program)) for program in sweep_plan.programs]


# ----------------------------------------------------------------------------- running
def run_program(sweep_plan: Plan, program: Program) -> dict[str, Any]:
    """Train one program: rows = numeric combinations x seeds, through the one training loop."""
    from longhorizon.engine.fused import FusedEngine
    from longhorizon.runner.run import Run, train

    seeds = sweep_plan.spec.seeds
    spec = program_spec(sweep_plan, program)
    named_rows = [{**program.structural, **combo, "seed_index": i} for combo in program.numeric for i in range(seeds)]

    class ProgramRun(Run):
        def resolved_config(self) -> dict[str, Any]:  # config.json also names each seed row's combination
            sweep_rows = {"numeric_fields": sweep_plan.numeric_fields, "rows": named_rows}
            return {**super().resolved_config(), "sweep": sweep_rows}

    run = ProgramRun(spec)
    if sweep_plan.numeric_fields:
        configs = [apply_overrides(run.config, combo) for combo in program.numeric for _ in range(seeds)]
        rows = ([i for _ in program.numeric for i in range(seeds)], stack_configs(configs, sweep_plan.numeric_fields))
    else:  # every combination is structural: a plain run of `seeds` seeds
        rows = None
    run.engine = FusedEngine(run.algo, run.env, run.config, spec.seeds, run.updates_per_chunk, rows=rows)
    return train(spec, run=run)


def sweep(spec, grid_items: list[str]) -> dict[str, Any]:
    """Run the sweep and write ``sweep.json``, ``sweep.md`` and ``sweep.png``; returns the sweep record."""
    sweep_plan = plan(spec, grid_items)
    resolve(sweep_plan)
    start = time.perf_counter()
    summaries = [run_program(sweep_plan, program) for program in sweep_plan.programs]
    record = {**sweep_plan.to_dict(), "wall_seconds": time.perf_counter() - start,
              "compile_seconds": sum(s["compile_seconds"] for s in summaries),
              "train_seconds": sum(s["train_seconds"] for s in summaries),
              "results": table(sweep_plan, summaries)}
    root = Path(sweep_plan.spec.out)
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.json").write_text(json.dumps(record, indent=2))
    (root / "sweep.md").write_text(markdown(record))
    plot_sweep(sweep_plan, record["results"], root / "sweep.png")
    return record


def table(sweep_plan: Plan, summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per combination: the final greedy returns of its seeds and their mean, std, min, max."""
    seeds = sweep_plan.spec.seeds
    rows = []
    for program, summary in zip(sweep_plan.programs, summaries):
        returns = summary.get("final_eval_return")
        for c, combo in enumerate(program.numeric):
            values = None if returns is None else [float(v) for v in returns[c * seeds:(c + 1) * seeds]]
            stats = {} if values is None else {"mean": float(np.mean(values)), "std": float(np.std(values)),
                                               "min": float(np.min(values)), "max": float(np.max(values))}
            rows.append({"combination": {**program.structural, **combo}, "program": str(program.out),
                         "rows": list(range(c * seeds, (c + 1) * seeds)), "status": summary["status"],
                         "final_eval_return": values, **stats})
    return rows


def markdown(record: dict[str, Any]) -> str:
    fields = list(record["grid"])
    head = f"| {' | '.join(fields)} | mean | std | min | max |"
    lines = [f"Sweep of {record['algo']} on {record['env']}: {len(record['results'])} combinations x "
             f"{record['seeds']} seeds in {len(record['programs'])} compiled program(s); final greedy return "
             f"over seeds (numeric fields: {', '.join(record['numeric_fields']) or 'none'}; structural: "
             f"{', '.join(record['structural_fields']) or 'none'}).", "", head,
             "|" + "---|" * (len(fields) + 4)]
    best = max((r.get("mean", -math.inf) for r in record["results"]), default=None)
    for row in record["results"]:
        values = [row["combination"][f] for f in fields]
        if "mean" not in row:
            lines.append(f"| {' | '.join(values)} | {row['status']} | | | |")
            continue
        mean = f"**{row['mean']:.1f}**" if row["mean"] == best else f"{row['mean']:.1f}"
        lines.append(f"| {' | '.join(values)} | {mean} | {row['std']:.1f} | {row['min']:.1f} | {row['max']:.1f} |")
    lines += ["", f"Compile {record['compile_seconds']:.1f} s, training {record['train_seconds']:.1f} s, "
                  f"wall {record['wall_seconds']:.1f} s."]
    return "\n".join(lines) + "\n"


def plot_sweep(sweep_plan: Plan, results: list[dict[str, Any]], out: Path) -> Path:
    """Training return per combination (mean over its seeds, min-max band) and the final greedy returns."""
    from longhorizon.runner.plots import plt
    from longhorizon.runner.results import ResultsDir

    seeds = sweep_plan.spec.seeds
    fig, (curves, bars) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=120, gridspec_kw={"width_ratios": [3, 2]})
    index = 0
    for program in sweep_plan.programs:
        metrics = ResultsDir(program.out).read_metrics()
        for c, combo in enumerate(program.numeric):
            color = f"C{index % 10}"
            x, mean, low, high = [], [], [], []
            for row in metrics:
                per_row = row.get("episode_return_per_seed")
                if not per_row:
                    continue
                values = [v for v in per_row[c * seeds:(c + 1) * seeds] if v is not None]
                if values:
                    x.append(row["env_steps"])
                    mean.append(np.mean(values))
                    low.append(np.min(values))
                    high.append(np.max(values))
            name = label({**program.structural, **combo})
            if x:
                curves.plot(x, mean, color=color, label=name)
                curves.fill_between(x, low, high, color=color, alpha=0.15)
            result = results[index]
            if result.get("final_eval_return"):
                spread = [[result["mean"] - result["min"]], [result["max"] - result["mean"]]]
                bars.bar(index, result["mean"], color=color, alpha=0.8)
                bars.errorbar(index, result["mean"], yerr=spread, color="black", capsize=3)
                per_seed = result["final_eval_return"]
                bars.scatter([index] * len(per_seed), per_seed, color="black", s=8, zorder=3)
            index += 1
    curves.set_xlabel("environment steps per agent")
    curves.set_ylabel("training episode return")
    curves.set_title(f"{sweep_plan.spec.algo} on {sweep_plan.spec.env}: mean over {seeds} seeds, min-max band")
    curves.grid(alpha=0.3)
    curves.legend(fontsize=7, loc="best")
    bars.set_xticks(range(index))
    bars.set_xticklabels([label(r["combination"]) for r in results], rotation=35, ha="right", fontsize=7)
    bars.set_ylabel("final greedy return")
    bars.set_title("final greedy return: mean, min-max, seeds")
    bars.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def refuse_resume(run_dir) -> None:
    """A sweep's program cannot be resumed as a plain run: its rows train different settings."""
    from longhorizon.runner.results import read_json

    if "sweep" in read_json(Path(run_dir) / "config.json"):
        raise UsageError(f"{run_dir} is a program of a sweep, whose seed rows train different settings; sweeps "
                         f"cannot be resumed, so run `longhorizon sweep` again with another --out.")


# ----------------------------------------------------------------------------- command line
def register(app) -> None:
    @app.command(name="sweep", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def sweep_command(
        ctx: typer.Context,
        algo: str = typer.Argument(None, help="Algorithm: ppo, pqn, dqn, sqirl ..."),
        env: Optional[str] = typer.Option(None, help="Environment id (see `longhorizon envs`)."),
        grid: Optional[list[str]] = typer.Option(None, "--grid", help="FIELD=V1,V2,... (repeatable); tuple "
                                                 "values as 64x64."),
        seeds: int = typer.Option(1, help="Seeds per combination."),
        seed: int = typer.Option(0, help="Base random seed."),
        total_steps: Optional[str] = typer.Option(None, help="Environment steps per agent."),
        out: Optional[Path] = typer.Option(None, help="Results folder (default: runs/sweep-ALGO-ENV-TIME)."),
        chunks: int = typer.Option(25, help="Number of chunks; Python logs/evaluates/checkpoints between chunks."),
        eval_every: int = typer.Option(0, help="Greedy evaluation every N chunks (0: only at the end)."),
        eval_episodes: int = typer.Option(10, help="Episodes per agent in each greedy evaluation."),
        quiet: bool = typer.Option(False, help="No progress output."),
        env_arg: Optional[list[str]] = typer.Option(None, "--env-arg", help="Environment setting KEY=VALUE, repeatable."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Check the grid and print the programs as JSON; "
                                     "compile and write nothing."),
    ) -> None:
        """Train ALGO on --env for every combination of the --grid values x --seeds, numeric fields in one
        program; any other config field is fixed as --field value."""
        from longhorizon.runner.command_line import (check_resolved, given_options, parse_env_args, parse_field_args,
                                                     print_json, setup_compilation_cache)
        from longhorizon.runner.run import RunSpec

        if not algo:
            raise UsageError("missing algorithm; write e.g. `longhorizon sweep ppo --env CartPole-v1 "
                             "--grid learning_rate=1e-4,3e-4`.")
        if not env:
            raise UsageError("missing --env; pass an environment id such as --env CartPole-v1 "
                             "(list them with `longhorizon envs`).")
        if eval_every < 0:
            raise UsageError(f"--eval-every must be 0 or more (got {eval_every}); pass 0 to evaluate only at the end.")
        extra = parse_field_args(list(ctx.args))
        if total_steps is not None:
            extra["total_steps"] = total_steps
        spec = RunSpec(algo=algo, env=env, config_overrides=extra, env_overrides=parse_env_args(env_arg or []),
                       seeds=seeds, seed=seed, out=str(out) if out else None, num_chunks=chunks,
                       eval_every=eval_every, eval_episodes=eval_episodes, quiet=quiet)
        sweep_plan = plan(spec, grid or [])
        resolved = resolve(sweep_plan)
        given = given_options(ctx)
        asked = {key: value for key, value in (("num_chunks", chunks), ("eval_every", eval_every))
                 if {"num_chunks": "chunks"}.get(key, key) in given}
        for program in resolved:  # the checks `train` makes (e.g. no more chunks than updates)
            check_resolved(program, {"values": {}, "asked": asked})
        if dry_run:
            record = sweep_plan.to_dict()
            for entry, program in zip(record["programs"], resolved):
                entry["config"] = program
            print_json({**record, "quiet": quiet})
            return
        setup_compilation_cache()
        from longhorizon.runner.interrupts import Interrupted

        try:
            record = sweep(spec, grid or [])
        except (KeyboardInterrupt, Interrupted):
            raise Interrupted(f"interrupted: a sweep cannot be resumed, so what finished stays in "
                              f"{sweep_plan.spec.out} as it is; run the sweep again with another --out.") from None
        print(markdown(record))
        print(f"results: {record['out']} (sweep.md, sweep.json, sweep.png)")
