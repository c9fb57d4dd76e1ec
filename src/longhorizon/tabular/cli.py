"""``longhorizon horizon``: diagnose an environment with the effective horizon before training on it."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

import typer

from longhorizon.errors import UsageError

DEFAULT_HORIZON = 100  # BRIDGE's MiniGrid horizon; used when neither --horizon nor the file gives one


def _parse_setting(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise UsageError(f"--set expects KEY=VALUE, got '{text}'; write e.g. --set size=8.")
    key, raw = text.split("=", 1)
    for convert in (int, float):
        try:
            return key.strip(), convert(raw)
        except ValueError:
            pass
    if raw.lower() in ("true", "false"):
        return key.strip(), raw.lower() == "true"
    return key.strip(), raw


def _looks_like_file(target: str) -> bool:
    return target.endswith(".npz") or os.sep in target or os.path.exists(target)


def load_target(target: str, *, horizon: int | None, max_states: int, merge: str, settings: dict[str, Any],
                show_progress: bool):
    """A TabularMDP from an ``.npz`` path or an environment id (MiniGrid or gymnax)."""
    from longhorizon.tabular.mdp import load_npz

    if _looks_like_file(target):
        if settings:
            raise UsageError("--set applies to environment ids, not to .npz files; remove it.")
        mdp = load_npz(target)
        return mdp.with_horizon(horizon or mdp.horizon or DEFAULT_HORIZON)
    from longhorizon.tabular.tabularize import tabularize

    _check_id_settings(target, settings)
    return tabularize(target, horizon=horizon or DEFAULT_HORIZON, max_states=max_states, merge=merge,
                      show_progress=show_progress, **settings)


def _check_id_settings(target: str, settings: dict[str, Any]) -> None:
    """MiniGrid ids are enumerated as registered; only the enumeration's seed can be set."""
    unknown = [key for key in settings if key != "seed"]
    if target.startswith(("MiniGrid-", "BRIDGE/MiniGrid-")) and unknown:
        raise UsageError(f"--set {unknown[0]}=... does not apply to MiniGrid ids (only seed=N does); pick the "
                         "variant by its id instead, e.g. MiniGrid-Empty-8x8-v0.")


def _check_args(horizon: int | None, sticky: float, max_states: int | None, json_path: Path | None,
                save: Path | None = None, merge: str = "observation") -> None:
    """Refuse out-of-range settings and output paths in folders that do not exist."""
    from longhorizon.tabular.tabularize import MERGE_MODES

    if horizon is not None and horizon < 1:
        raise UsageError(f"--horizon must be at least 1, got {horizon}.")
    if not 0.0 <= sticky < 1.0:
        raise UsageError(f"--sticky must be a probability in [0, 1), got {sticky}.")
    if max_states is not None and max_states < 1:
        raise UsageError(f"--max-states must be at least 1, got {max_states}.")
    if merge not in MERGE_MODES:
        raise UsageError(f"--merge must be one of {', '.join(MERGE_MODES)}, got '{merge}'.")
    for flag, path in (("--json", json_path), ("--save", save)):
        if path is not None and not path.resolve().parent.is_dir():
            raise UsageError(f"the folder of {flag} {path} does not exist; create it or choose another path.")


def describe_target(target: str, *, horizon: int | None, settings: dict[str, Any]) -> dict[str, Any]:
    """What ``target`` is, checked without enumerating it: its kind, the horizon used and, for a file, its size."""
    if _looks_like_file(target):
        from longhorizon.tabular.mdp import load_npz

        if settings:
            raise UsageError("--set applies to environment ids, not to .npz files; remove it.")
        mdp = load_npz(target)
        return {"kind": "npz", "horizon": horizon or mdp.horizon or DEFAULT_HORIZON, "states": mdp.num_states,
                "actions": mdp.num_actions}
    if target.startswith(("MiniGrid-", "BRIDGE/MiniGrid-")):
        from longhorizon.tabular.tabularize import _MiniGridSim

        _check_id_settings(target, settings)
        sim = _MiniGridSim(target, **settings)  # unknown ids fail here
        return {"kind": "minigrid", "horizon": horizon or DEFAULT_HORIZON, "actions": sim.num_actions}
    from longhorizon.envs import make

    env = make(target, **{k: v for k, v in settings.items() if k not in _ENUMERATION_SETTINGS})
    return {"kind": "gymnax", "horizon": horizon or DEFAULT_HORIZON, "actions": env.act_info.describe()}


# Settings of the gymnax enumeration itself (passed with --set next to the environment's own).
_ENUMERATION_SETTINGS = ("seed", "transition_samples", "batch_size", "keep_time")


def _verdict(report: dict[str, Any]) -> str:
    """One plain sentence on what the analysis predicts for PPO/DQN-style training."""
    T, A = report["horizon"], report["num_actions"]
    k, epw = report["min_k"], report["epw"]
    bounds = [b for b in (report["effective_horizon_tight"], report["effective_horizon_simple"]) if b is not None]
    H = min(bounds) if bounds else None
    if report["optimal_return"] <= report["random_return"] + 1e-12:
        return "Every policy is as good as random here (optimal return = random return): there is nothing to learn."
    greedy = (
        "acting greedily on the random policy's Q-values is already optimal (k = 1)"
        if k == 1 else f"acting greedily on the random policy's Q-values is not enough: {k} steps of value iteration are needed"
    )
    if H is None:
        return (
            f"In this stochastic MDP {greedy}, and planning {epw} steps ahead suffices; the effective-horizon "
            f"bounds assume deterministic transitions, so judge PPO/DQN by k: small k (1-2) predicts that "
            f"random exploration plus a few steps of Q-iteration (e.g. SQIRL) will work."
        )
    steps = T * T * A ** H
    if steps <= 1e7:
        outlook = "PPO/DQN-style training with random exploration should find an optimal policy within a typical budget"
    elif steps <= 1e9:
        outlook = "PPO/DQN-style training may succeed but needs a large budget; reward shaping or a pretrained exploration policy would help"
    else:
        outlook = "PPO/DQN-style training is likely to fail within practical budgets; reshape the reward or explore better"
    loose = "" if report["effective_horizon_tight"] is not None else " (simple bound only, which is loose: drop --no-tight for a sharper one)"
    return (
        f"With effective horizon H <= {H:.2f}{loose} at horizon {T}, {greedy}; GORP's bound T^2 A^H = {steps:.2g} "
        f"environment steps predicts that {outlook}."
    )


def _transitions_text(report: dict[str, Any]) -> str:
    if report["deterministic"]:
        return "deterministic"
    if report.get("sticky"):
        return f"stochastic (sticky actions, p = {report['sticky']})"
    if report.get("estimated_transitions"):
        return f"stochastic (estimated from {report.get('transition_samples', '?')} samples per state-action pair)"
    return "stochastic"


def _render(report: dict[str, Any], console) -> None:
    from rich.table import Table

    def fmt(x, digits=6):
        if x is None:
            return "not computed"
        if isinstance(x, float):
            return f"{x:.{digits}g}"
        return f"{x:,}" if isinstance(x, int) else str(x)

    table = Table(title=f"Effective-horizon analysis: {report['name']}", show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    states = fmt(report["num_states"])
    if report.get("num_states_tabular") not in (None, report["num_states"]):
        states += f" (BRIDGE count; {report['num_states_tabular']:,} in our tabular form)"
    rows = [
        ("states", states),
        ("actions", fmt(report["num_actions"])),
        ("horizon T", fmt(report["horizon"])),
        ("transitions", _transitions_text(report)),
        ("optimal return", fmt(report["optimal_return"])),
        ("random return", fmt(report["random_return"])),
        ("min k (k-QVI-solvable)", fmt(report["min_k"])),
        ("effective planning window", fmt(report["epw"])),
        ("effective horizon, simple bound (Thm 5.4)", fmt(report["effective_horizon_simple"], 5)),
        ("effective horizon, tight bound (App. C)", fmt(report["effective_horizon_tight"], 5)),
    ]
    if report.get("gorp_sample_complexity_bound"):
        rows.append(("GORP sample-complexity bound", f"{report['gorp_sample_complexity_bound']:.4g} steps"))
    if report.get("gorp_empirical"):
        g = report["gorp_empirical"]
        value = "no m within budget" if g["median_sample_complexity"] is None else (
            f"{g['median_sample_complexity']:.4g} steps (m = {g['m']}, median of {g['runs']} runs)")
        rows.append(("GORP empirical sample complexity", value))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    console.print(report["verdict"], soft_wrap=True)


def _json_ready(value):
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run_horizon(target: str, *, horizon: int | None = None, sticky: float = 0.0, json_path: Path | None = None,
                max_states: int | None = None, tight: bool = True, max_k: int | None = None, merge: str = "observation",
                settings: dict[str, Any] | None = None, save: Path | None = None, gorp: bool = False,
                gorp_runs: int = 9, gorp_budget: int = 5_000_000, quiet: bool = False) -> dict[str, Any]:
    """Load or tabularize ``target``, analyse it, print the report (unless quiet) and return it."""
    from rich.console import Console

    from longhorizon.tabular import horizon as hz
    from longhorizon.tabular.mdp import bridge_sticky_state_count, save_npz
    from longhorizon.tabular.mdp import sticky as make_sticky
    from longhorizon.tabular.tabularize import DEFAULT_MAX_STATES

    _check_args(horizon, sticky, max_states, json_path, save, merge)
    console = Console(stderr=True, quiet=quiet)
    out = Console(quiet=quiet)
    mdp = load_target(target, horizon=horizon, max_states=max_states or DEFAULT_MAX_STATES, merge=merge,
                      settings=settings or {}, show_progress=not quiet)
    T = mdp.resolve_horizon(horizon)
    base = mdp
    if sticky > 0:
        if not base.is_deterministic:
            raise UsageError("--sticky needs a deterministic MDP to start from; this one is already stochastic.")
        mdp = make_sticky(base, sticky)
    if save is not None:
        save_npz(mdp.with_horizon(T), save)
    with console.status("analysing") as status:
        report = hz.analyze(mdp, T, tight=tight, tight_max_k=max_k, progress=lambda msg: status.update(msg))
    report["source"] = target
    if sticky > 0:
        report["num_states_tabular"] = report["num_states"]
        report["num_states"] = bridge_sticky_state_count(base, T)
    info = base.info
    if "enumerated_states" in info:
        report["enumerated_states"] = info["enumerated_states"]
        report["tabularize_seconds"] = info.get("seconds")
        report["tabularize_states_per_second"] = info.get("states_per_second")
        if info.get("estimated_transitions"):
            report["estimated_transitions"] = True
            report["transition_samples"] = info.get("transition_samples")
    if gorp:
        from longhorizon.tabular.gorp import gorp_sample_complexity

        with console.status("running GORP") as status:
            result = gorp_sample_complexity(mdp, T, k=1, runs=gorp_runs, max_steps=gorp_budget,
                                            progress=lambda msg: status.update(msg))
        report["gorp_empirical"] = {
            "k": 1, "m": result.m, "runs": gorp_runs, "budget": gorp_budget,
            "median_sample_complexity": result.median_sample_complexity if math.isfinite(result.median_sample_complexity) else None,
        }
    report["verdict"] = _verdict(report)
    report = _json_ready(report)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2) + "\n")
    _render(report, out)
    return report


def register(app) -> None:
    """Add ``longhorizon horizon`` to the given typer app."""

    @app.command("horizon")
    def horizon_command(
        ctx: typer.Context,
        target: str = typer.Argument(..., metavar="ENV_ID_OR_NPZ",
                                     help="A BRIDGE .npz file, a MiniGrid id (MiniGrid-KeyCorridorS3R1-v0) or a gymnax id (DeepSea-bsuite)."),
        horizon: Optional[int] = typer.Option(None, "--horizon", "-T", help="Episode length T (default: the file's, else 100)."),
        sticky: float = typer.Option(0.0, "--sticky", help="Probability of repeating the previous action (e.g. 0.25)."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the report to this JSON file."),
        max_states: Optional[int] = typer.Option(None, "--max-states", help="Stop enumerating beyond this many states (default 200,000)."),
        tight: bool = typer.Option(True, "--tight/--no-tight", help="Compute the Appendix-C bound (the slow part: about a minute on 17,000 states)."),
        max_k: Optional[int] = typer.Option(None, "--max-k", help="Largest k for the Appendix-C bound (default: A^k <= 1000; 1 above 10,000 states)."),
        merge: str = typer.Option("observation", "--merge", help="Merge states with the same future: observation | future | none."),
        setting: Optional[list[str]] = typer.Option(None, "--set", help="Environment setting KEY=VALUE, e.g. --set size=8 (repeatable)."),
        save: Optional[Path] = typer.Option(None, "--save", help="Write the analysed tabular MDP to this .npz file."),
        gorp: bool = typer.Option(False, "--gorp", help="Also measure GORP's empirical sample complexity (k = 1)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing (with --json or --save)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Check the target and options, print the settings as JSON; "
                                     "enumerate and write nothing."),
    ) -> None:
        """Diagnose an environment: states, returns, min k, planning window and effective-horizon bounds."""
        settings = dict(_parse_setting(s) for s in (setting or []))
        given = {name for name in ctx.params if (src := ctx.get_parameter_source(name)) is not None and src.name == "COMMANDLINE"}
        if _looks_like_file(target):
            for name, flag in (("max_states", "--max-states"), ("merge", "--merge")):
                if name in given:
                    raise UsageError(f"{flag} applies to environment ids (which are enumerated), not to .npz files; remove it.")
        if max_k is not None and not tight:
            raise UsageError("--max-k bounds the Appendix-C (tight) bound, which --no-tight skips; drop one of them.")
        if quiet and json_path is None and save is None:
            raise UsageError("--quiet prints nothing, so without --json or --save the report would be lost; add --json FILE.")
        if dry_run:
            _check_args(horizon, sticky, max_states, json_path, save, merge)
            described = describe_target(target, horizon=horizon, settings=settings)
            print(json.dumps({"target": target, **described, "sticky": sticky, "json": json_path and str(json_path),
                              "max_states": max_states, "tight": tight, "max_k": max_k, "merge": merge,
                              "settings": settings, "save": save and str(save), "gorp": gorp, "quiet": quiet}, indent=2))
            return
        run_horizon(target, horizon=horizon, sticky=sticky, json_path=json_path, max_states=max_states, tight=tight,
                    max_k=max_k, merge=merge, settings=settings, save=save, gorp=gorp, quiet=quiet)
