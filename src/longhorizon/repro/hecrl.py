"""`longhorizon repro hecrl`: factored subgoal diffusion on a multi-block push world (Haramati et al., ICLR 2026).

The paper's claim: composing a value-based GCRL agent with a factored subgoal diffusion model (sample
subgoals over entity tokens, keep those the value deems reachable, pick the one closest to the goal)
raises success on long-horizon multi-entity tasks where the flat value-based agent fails.

Protocol, at CPU scale: for each number of blocks n in {1, 2, 3}, a scripted single-block dataset of
the JAX push world (:mod:`longhorizon.offline.pushworld`: every trajectory pushes one block toward random
targets, so goals that move several blocks need stitching); GCIVL (the project's agent) trained on it
by the offline loop, seeds vmapped; the entity-token diffusion model (:mod:`longhorizon.offline.subgoal_diffusion`)
trained on (s_t, g, s_{t+k}) triples by the same loop; evaluation on tasks that move m = 1..n blocks
(the horizon grows with m), the same tasks for every seed and method: GCIVL toward the goal (flat),
GCIVL toward HECRL-selected subgoals, and HIQL (its own high-level policy) as the hierarchical baseline.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.offline import agents, pushworld
from longhorizon.offline import subgoal_diffusion as sd
from longhorizon.offline.hecrl import make_rollout, train_diffusion
from longhorizon.offline.train import OfflineRun, OfflineSpec, train
from longhorizon.repro import claims as C
from longhorizon.repro.report import verdict_lines
from longhorizon.runner.results import write_json_atomic

METHODS = ("flat", "hecrl", "hiql", "hiql-hecrl")
LABELS = {"flat": "GCIVL (flat)", "hecrl": "GCIVL + subgoal diffusion (HECRL)", "hiql": "HIQL",
          "hiql-hecrl": "HIQL + subgoal diffusion"}
BASE = {"flat": "gcivl", "hecrl": "gcivl", "hiql": "hiql", "hiql-hecrl": "hiql"}  # the value-based agent of each method
WITH_SUBGOALS = ("hecrl", "hiql-hecrl")


@dataclasses.dataclass(frozen=True)
class Setup:
    blocks: tuple[int, ...] = (1, 2, 3)
    size: int = 6  # grid side
    seeds: int = 3
    trajectories: int = 1000
    length: int = 50
    noise: float = 0.2
    updates: int = 6000  # per agent and for the diffusion model
    hidden: str = "128,128"
    batch_size: int = 256
    tasks_per_cell: int = 20
    steps_per_block: int = 40  # episode length = steps_per_block * n
    chunks: int = 4  # training chunks per agent: the points of its loss curve
    diffusion: tuple[tuple[str, Any], ...] = ()  # overrides of subgoal_diffusion.Config
    methods: tuple[str, ...] = METHODS


# 4x4 grid, two blocks: a grid where the flat agent does one-move tasks, so subgoals have a skill to hand over
# (on the 6x6 grid it did not; docs/offline.md, HECRL)
FULL = Setup(blocks=(2,), size=4, updates=4000, tasks_per_cell=24, diffusion=(("batch_size", 128),))
QUICK = Setup(blocks=(2,), seeds=2, trajectories=150, length=40, updates=300, hidden="32,32", batch_size=64,
              tasks_per_cell=8, diffusion=(("d_model", 32), ("layers", 1), ("num_candidates", 8), ("sample_steps", 5),
                                           ("batch_size", 64)), methods=("flat", "hecrl"))


def run_blocks(n: int, setup: Setup, runs: str, log=print, curves: dict | None = None) -> list[dict[str, Any]]:
    """Train the agents (and the diffusion model) on ``n`` blocks and evaluate every method on tasks that move
    1..n blocks: one row per (n, moved). Each agent's training-loss curve is added to ``curves``."""
    curves = {} if curves is None else curves
    env = pushworld.PushWorld(n, setup.size)
    data = pushworld.make_dataset(n, setup.trajectories, setup.length, setup.noise, size=setup.size, seed=n)
    k = 8
    overrides = {"hidden": setup.hidden, "batch_size": str(setup.batch_size), "discount": "0.99"}
    trained = {}
    for name in sorted({BASE[m] for m in setup.methods}):
        extra = {"subgoal_steps": str(k)} if name == "hiql" else {}
        spec = OfflineSpec(name, data, {**overrides, **extra}, seeds=setup.seeds, num_updates=setup.updates, num_chunks=setup.chunks,
                           out=f"{runs}/{name}-{n}", quiet=True)
        summary = train(spec)
        trained[name] = (agents.get(name), OfflineRun(spec).config, summary["state"].params, summary["updates_per_second"])
        curves[f"{name}, {n} block{'s' if n > 1 else ''}"] = [
            {k: v for k, v in json.loads(line).items() if k == "step" or k.endswith("loss")}
            for line in Path(f"{runs}/{name}-{n}/metrics.jsonl").read_text().splitlines() if line.strip()]
        log(f"[hecrl] n={n}: {name} trained ({summary['updates_per_second']:.0f} updates/s over seeds)")
    dconfig = sd.Config(**{"subgoal_steps": k, "reach_steps": k, "batch_size": setup.batch_size, **dict(setup.diffusion)})
    dparams, dloss = (None, None)
    if any(m in WITH_SUBGOALS for m in setup.methods):
        dparams, dloss = train_diffusion(data, dconfig, setup.seeds, setup.updates, seed=n)
        log(f"[hecrl] n={n}: diffusion model trained (mean loss {dloss:.3f})")
    episode_len = setup.steps_per_block * n
    rollouts = {m: make_rollout(env, *trained[BASE[m]][:2], dconfig if m in WITH_SUBGOALS else None, episode_len)
                for m in setup.methods}
    rows = []
    for moved in range(1, n + 1):
        tasks = pushworld.make_tasks(n, moved, setup.tasks_per_cell, size=setup.size, seed=1000 * n + moved)
        starts = jnp.asarray(np.stack([t.start for t in tasks]))
        goals = jnp.asarray(np.stack([t.goal for t in tasks]))
        row = {"blocks": n, "moved": moved, "tasks": len(tasks), "episode_len": episode_len,
               "script_steps_mean": float(np.mean([t.script_steps for t in tasks]))}
        for m in setup.methods:
            params = trained[BASE[m]][2]
            per_seed, sub_rate = [], []
            for s in range(setup.seeds):
                p = jax.tree.map(lambda x: x[s], params)
                dp = jax.tree.map(lambda x: x[s], dparams) if dparams is not None else None
                keys = jax.random.split(jax.random.PRNGKey(7 * s + moved), len(tasks))
                success, used = rollouts[m](p, dp, starts, goals, keys)
                per_seed.append(float(np.mean(success))), sub_rate.append(float(np.mean(used)))
            row[m] = {"success_mean": float(np.mean(per_seed)), "success_per_seed": per_seed,
                      "subgoal_rate": float(np.mean(sub_rate))}
        rows.append(row)
        log(f"[hecrl] n={n} moved={moved}: " + ", ".join(f"{m} {row[m]['success_mean']:.2f} (subgoals "
                                                         f"{row[m]['subgoal_rate']:.2f})" for m in setup.methods))
    for row in rows:
        row["updates_per_second"] = {name: t[3] for name, t in trained.items()}
        row["diffusion_loss"] = dloss
    return rows


def judge(L: dict[str, Any], quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded rows (per-seed success per (blocks, moved) cell): differences of
    per-seed success on multi-block tasks (moved >= 2) and the flat agent's fitted slope over blocks moved (3
    blocks), Student-t 95% intervals over seeds (>= 3). Subgoals hand one-move tasks to the base agent, so a base
    agent below 0.1 success on one-move tasks with 2 or more blocks gives ``no signal``."""
    setup, rows = L["setup"], L["rows"]
    methods, floor = setup["methods"], C.TASK_FLOOR
    multi = [r for r in rows if r["moved"] >= 2]
    if not multi:
        return [], {}
    succ = {m: np.mean([r[m]["success_per_seed"] for r in multi], 0) for m in methods}
    short = [r for r in rows if r["moved"] == 1 and r["blocks"] >= 2]
    low = {m: C.task_floor(f"{m} on one-move tasks with 2 or more blocks", [r[m]["success_per_seed"] for r in short], floor)
           for m in ("flat", "hiql") if m in methods}
    claims = []
    if "hecrl" in methods:
        claims.append(C.judge("subgoal diffusion raises the flat agent's success on multi-block tasks (moved >= 2); it hands "
                              "subgoals to the flat agent, which must do one-move tasks",
                              C.difference(succ["hecrl"], succ["flat"]), [low["flat"]], quick=quick))
    top = max(r["blocks"] for r in rows)
    longest = {r["moved"]: r["flat"]["success_per_seed"] for r in rows if r["blocks"] == top}
    if len(longest) > 1:
        claims.append(C.judge(f"the flat agent's success falls with the horizon ({top} blocks, moved 1 -> {top})",
                              C.trend(sorted(longest), np.array([longest[k] for k in sorted(longest)]).T, direction="decreasing"),
                              [C.task_floor(f"flat on one-move tasks with {top} blocks", longest[1], floor)], quick=quick))
    if {"hiql", "hiql-hecrl"} <= set(methods):
        claims.append(C.judge("subgoal diffusion raises HIQL's success on multi-block tasks (moved >= 2)",
                              C.difference(succ["hiql-hecrl"], succ["hiql"]), [low["hiql"]], quick=quick))
        claims.append(C.judge("GCIVL + subgoal diffusion beats HIQL on multi-block tasks (moved >= 2)",
                              C.difference(succ["hecrl"], succ["hiql"]), [low["flat"], low["hiql"]], quick=quick))
    arms = {m: C.arm(setup["updates"], setup["seeds"], low.get(m) or C.task_floor(m, succ[m], floor)) for m in methods}
    return claims, arms


def plot(path: Path, rows: list[dict[str, Any]], setup: Setup) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(setup.blocks), figsize=(4.2 * len(setup.blocks), 3.4), squeeze=False)
    for ax, n in zip(axes[0], setup.blocks):
        cells = [r for r in rows if r["blocks"] == n]
        x = [r["moved"] for r in cells]
        for m in setup.methods:
            mean = np.array([r[m]["success_mean"] for r in cells])
            per = np.array([r[m]["success_per_seed"] for r in cells])
            ax.plot(x, mean, marker="o", label=LABELS[m])
            ax.fill_between(x, per.min(1), per.max(1), alpha=0.2)
        ax.set_title(f"{n} block{'s' if n > 1 else ''}")
        ax.set_xlabel("blocks to move (horizon)")
        ax.set_xticks(x)
        ax.set_ylim(-0.03, 1.03)
    axes[0][0].set_ylabel("success rate (mean, min-max over seeds)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(out_dir: str, quick: bool = False, setup: Setup | None = None, log=print) -> dict[str, Any]:
    setup, t0 = setup or (QUICK if quick else FULL), time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, curves = [], {}
    with tempfile.TemporaryDirectory() as runs:
        for n in setup.blocks:
            rows += run_blocks(n, setup, runs, log, curves)
    recorded = C.as_recorded({"setup": dataclasses.asdict(setup), "rows": rows})
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper="HECRL", claims=claims, arms=arms, quick=quick, wall_seconds=time.perf_counter() - t0,
                        scale=f"{setup.size}x{setup.size} push world with {list(setup.blocks)} blocks, {setup.trajectories} trajectories, {setup.updates} "
                              f"updates, {setup.seeds} seeds, {setup.tasks_per_cell} tasks per cell",
                        command="longhorizon repro hecrl" + (" --quick" if quick else ""), **recorded)
    plot(out / "hecrl.png", rows, setup)
    for arm_name, curve in curves.items():
        C.write_curve(out, arm_name, curve)
    write_json_atomic(out / "summary.json", summary)
    write_report(out / "README.md", summary, setup)
    return summary


def write_report(path: Path, summary: dict[str, Any], setup: Setup) -> None:
    lines = ["# HECRL: factored subgoal diffusion on a multi-block push world (`longhorizon repro hecrl`)", "",
             "Claim (Haramati et al., ICLR 2026): a value-based GCRL agent composed at test time with a conditional "
             "diffusion model over entity tokens (sample N subgoals, keep those with V(s, subgoal) above a "
             "reachability threshold, take the one with the highest V(subgoal, g)) succeeds on long-horizon "
             "multi-entity tasks where the flat agent fails (paper: over 150% higher success on its hardest task).", ""]
    if summary["quick"]:
        lines += ["**This is a `--quick` run** (one world size, tiny networks, few updates): a smoke test, not a result.", ""]
    d = sd.Config(**dict(setup.diffusion))
    lines += ["## Setup", "",
              f"- World: {setup.size}x{setup.size} grid, agent + n blocks (n in {list(setup.blocks)}), 4 push directions, blocks pushed one "
              "at a time (walls and other blocks stop a push). Success: every block on its goal cell.",
              f"- Data per n: {setup.trajectories} scripted trajectories x {setup.length} steps, action noise "
              f"{setup.noise}; each trajectory pushes **one** block to random targets, so tasks that move m >= 2 blocks "
              "never appear within a trajectory (stitching).",
              f"- Agents: GCIVL and HIQL of `longhorizon.offline.agents` ({setup.hidden} networks, batch {setup.batch_size}, "
              f"{setup.updates} updates, discount 0.99), {setup.seeds} seeds vmapped.",
              f"- Diffusion: entity-token transformer (d_model {d.d_model}, {d.layers} layers, {d.heads} heads), "
              f"cosine schedule T = {d.diffusion_steps}, DDPM noise loss on (s_t, g, s_min(t+8, t_g)), {setup.updates} updates; "
              f"test time: {d.num_candidates} DDIM samples ({d.sample_steps} steps) snapped to grid cells, reachability "
              f"threshold V >= -(1 - 0.99^{d.reach_steps}) / 0.01, re-plan every {d.replan_every} steps.",
              f"- Tasks: {setup.tasks_per_cell} per (n, m), goals made by the noise-free script (so solvable), episode "
              f"length {setup.steps_per_block} x n; the same tasks for every seed and method.", "",
              "![success vs blocks moved](hecrl.png)", "",
              "| blocks | moved | script steps | " + " | ".join(LABELS[m] for m in setup.methods) + " | subgoal used |",
              "|---|---|---|" + "---|" * len(setup.methods) + "---|"]
    for r in summary["rows"]:
        cells = [f"{r[m]['success_mean']:.2f} ({', '.join(f'{v:.2f}' for v in r[m]['success_per_seed'])})"
                 for m in setup.methods]
        used = ", ".join(f"{r[m]['subgoal_rate']:.2f}" for m in setup.methods if m in WITH_SUBGOALS) or "-"
        lines += [f"| {r['blocks']} | {r['moved']} | {r['script_steps_mean']:.1f} | " + " | ".join(cells) + f" | {used} |"]
    lines += ["", "Success: mean over seeds (per seed in parentheses). *subgoal used*: for each composed method in "
              "column order, the fraction of re-plans that pursued a diffusion subgoal rather than the goal itself.", "",
              "## Verdict", "", *verdict_lines(summary), "",
              "Rules (`longhorizon.repro.hecrl.judge`): per-seed differences and slopes, Student-t 95% intervals over "
              "seeds (>= 3); a base agent below 0.1 success on one-move tasks with 2 or more blocks gives no signal "
              "(subgoals hand one-move tasks to it).", "",
              f"Command: `{summary['command']}`; wall time {summary['wall_seconds']:.0f} s on the shared 2-core machine. "
              "Each agent's training-loss curve is in `curves/`.", ""]
    long = [r for r in summary["rows"] if r["moved"] >= 2]
    best = max((r[m]["success_mean"] for r in long for m in setup.methods), default=None)
    gates = [c for c in summary["claims"] if c["verdict"] != C.NO_SIGNAL]
    if best is not None and best < 0.05 and gates and not summary["quick"]:
        one = {m: np.mean([r[m]["success_mean"] for r in summary["rows"] if r["moved"] == 1 and r["blocks"] >= 2])
               for m in setup.methods if m in ("flat", "hiql")}
        used = {m: np.mean([r[m]["subgoal_rate"] for r in long]) for m in setup.methods if m in WITH_SUBGOALS}
        lines += ["The base agents do one-move tasks among two or more blocks ("
                  + ", ".join(f"{LABELS[m]} {v:.2f}" for m, v in one.items()) + f", above the {C.TASK_FLOOR:g} floor), "
                  f"but no method solves a task that moves two or more blocks (best success {best:.2f}), with or without "
                  "subgoals (pursued in " + ", ".join(f"{v:.0%}" for v in used.values()) + " of the re-plans on those "
                  "tasks): at this scale the diffusion subgoals do not compose the one-move skill into multi-move tasks.", ""]
    elif best is not None and best < 0.05:
        single = {r["blocks"]: max(r[m]["success_mean"] for m in setup.methods) for r in summary["rows"] if r["moved"] == 1}
        lines += [f"At this scale every method is at the floor on multi-block tasks (best success {best:.2f}), and the "
                  "base agents are weak even when one block moves (best single-block success per n: "
                  + ", ".join(f"n={n}: {v:.2f}" for n, v in single.items()) + "), so the claim is not tested here: "
                  "subgoals cannot help an agent that cannot reach nearby subgoals either. More data and updates "
                  "for the low-level agent are the first thing to change.", ""]
    lines += ["## How this differs from the paper", "",
              f"- A {setup.size}x{setup.size} grid push world with state tokens (positions), not image observations through "
              "Deep Latent Particles; the paper's tasks (PushCube, PPP-Cube, Stacking) are continuous robot manipulation.",
              "- The low-level agent is GCIVL on flat state vectors, not the paper's entity-centric transformer IQL agent.",
              "- Far smaller networks, datasets and training; the fallback when no candidate is reachable (the most "
              "reachable candidate) and the snapping of samples onto grid cells are ours.", ""]
    path.write_text("\n".join(lines))
