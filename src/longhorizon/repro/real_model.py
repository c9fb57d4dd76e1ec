"""What the reproductions on a real pretrained model (SmolLM2-135M-Instruct) share.

The symbolic reproductions (:mod:`longhorizon.repro.h1`, :mod:`longhorizon.repro.sgpo`) train in-house character
models that cannot compose at all. The real-model ones run their claims on a real instruct model through the
user's path: TRL-style rows (:mod:`longhorizon.lm.nl_tasks`: word problems whose every step uses the previous
result), TRL-style reward functions, ``lm sft``'s loop for a format phase (:func:`format_policy`) and the one RL
loop for each arm (:func:`train_arm`, Dr. GRPO: ``loss_type="dr_grpo"``, ``scale_rewards="none"``), each arm
saved as it finishes. The protocols and rules: :mod:`~longhorizon.repro.h1_smollm2`,
:mod:`~longhorizon.repro.rhorizon_smollm2`, :mod:`~longhorizon.repro.sgpo_smollm2`,
:mod:`~longhorizon.repro.scaler_smollm2`. Their ``--quick`` runs use ``tiny-random`` (a random 2-layer Llama,
:func:`longhorizon.lm.policy.tiny_random`), a smoke test whose numbers mean nothing.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C

ARMS = ("curriculum", "only-short", "only-long", "uniform")
TRAIN_SEED, HELD_SEED, POOL_SEED = 1_000, 2_000_003, 3_000_017  # apart from each other and from nl_tasks' own


@dataclasses.dataclass(frozen=True)
class Common:
    """The settings every real-model protocol shares (each protocol's ``Setup`` adds its own): the model, the
    seeds, the RL arms' budget and optimiser (the measured recipe of docs/lm.md: lr 1e-5 moves SmolLM2 within 10
    steps of 32 completions), and the format phase (:func:`format_policy`: SFT at TRL's default 2e-5)."""

    model: str = "smollm2"
    dtype: str = "float32"
    seeds: int = 3
    steps: int = 60
    prompts_per_step: int = 4
    num_generations: int = 8
    learning_rate: float = 1e-5
    loss_type: str = "dr_grpo"
    scale_rewards: str = "none"
    format_rows: int = 256  # split equally over format_horizons
    format_horizons: tuple[int, ...] = (1, 2)
    format_steps: int = 32
    format_learning_rate: float = 2e-5
    checkpoint_every: int = 10


# ----------------------------------------------------------------------------- shared parts


def _policy(setup):
    from longhorizon.lm.policy import load_pretrained
    from longhorizon.lm.run import Policy

    loaded = load_pretrained(setup.model, setup.dtype)
    return Policy(loaded.params, loaded.cfg, loaded.tokenizer, f"pretrained:{loaded.source}")


def _pools(tokenizer, task: str, horizons, n: int, seed: int) -> dict:
    """``{h: (Example, ...)}``: ``n`` rendered problems per horizon."""
    from longhorizon.lm import nl_tasks
    from longhorizon.lm.data import prepare

    return {int(h): tuple(prepare(nl_tasks.make_rows(task, [h], n, seed + 97 * int(h)), tokenizer)) for h in horizons}


def _flat(pools: dict) -> tuple:
    return tuple(e for h in sorted(pools) for e in pools[h])


def _prompt_length(tokenizer, *pools) -> int:
    return max(len(tokenizer.encode(e.prompt)) for p in pools for e in _flat(p))


def _grpo(setup, plen: int, completion: int):
    from longhorizon.lm.grpo import GRPOConfig

    return GRPOConfig(num_generations=setup.num_generations, loss_type=setup.loss_type, scale_rewards=setup.scale_rewards,
                      learning_rate=setup.learning_rate, max_prompt_length=plen, max_completion_length=completion,
                      batch_multiple=setup.prompts_per_step * setup.num_generations)


def _rewards(task: str):
    from longhorizon.lm import nl_tasks
    from longhorizon.lm.data import RewardFunctions

    return RewardFunctions([nl_tasks.REWARDS[task]])


def _evaluate(policy, params, held: tuple, task: str, plen: int, completion: int) -> dict:
    from longhorizon.lm.evaluate import evaluate_dataset

    return evaluate_dataset(params, policy.model_cfg, policy.tokenizer, list(held), _rewards(task),
                            max_prompt_length=plen, max_new_tokens=completion, batch_size=16)


CURVE_KEYS = ("step", "reward", "reward_std", "groups_all_equal", "groups", "completion_length", "step_s",
              "generated_tokens", "staleness", "rollout_wait_s")


def train_arm(run: Path, policy, grpo, sampler, *, steps: int, prompts_per_step: int, held: tuple, eval_new_tokens: int,
              task: str, seed: int, checkpoint_every: int, eval_every: int = 0, es=None, rewards=None,
              workers=None) -> dict:
    """One arm of a protocol, one seed: RL through the one LM loop (:func:`longhorizon.lm.run.run_rl`), continuing
    from ``run``'s checkpoint when an earlier sitting was interrupted; returns what the protocol keeps (accuracy by
    horizon on ``held`` after the last step, also every ``eval_every`` steps in the run's metrics; the
    training-reward curve, the share of groups with a GRPO signal, tokens, wall time) and deletes the weights
    (about 1.6 GB with the optimiser state). ``es`` (an :class:`longhorizon.evolution.es_lm.ESLMConfig`): the arm
    is ES fine-tuning instead of GRPO (``grpo`` then only gives the prompt length), through the same loop.
    ``rewards``: the reward functions (default: ``task``'s); ``workers``: rollout workers on Ray
    (:class:`longhorizon.lm.agents.async_rollout.Config`, :mod:`longhorizon.lm.grpo_workers`)."""
    from longhorizon.lm import run_checkpoint
    from longhorizon.lm.run import EvalSpec, RLSpec, run_rl

    rewards = rewards or _rewards(task)
    evaluation = EvalSpec(held, grpo.max_prompt_length, eval_new_tokens, every=eval_every, rewards=rewards,
                          at_start=False)  # the protocol evaluates its starting policy once, before the arms
    if es is None:
        spec = RLSpec(out=str(run), init=policy, grpo=grpo, sampler=sampler, steps=steps,
                      prompts_per_step=prompts_per_step, evaluation=evaluation, checkpoint_every=checkpoint_every,
                      seed=seed, rewards=rewards, workers=workers)
    else:
        from longhorizon.evolution.es_lm import ESSpec

        spec = ESSpec(out=str(run), init=policy, es=es, sampler=sampler, steps=steps, evaluation=evaluation,
                      rewards=rewards, checkpoint_every=checkpoint_every, seed=seed)
    resume = run_checkpoint.latest_step(run / "checkpoints") is not None
    if not resume:
        shutil.rmtree(run, ignore_errors=True)
    summary = run_rl(spec, resume=resume, quiet=True)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [{k: r[k] for k in CURVE_KEYS if k in r} for r in rows if "reward" in r]
    shutil.rmtree(run / "checkpoints", ignore_errors=True)
    groups = sum(r.get("groups", 0) for r in rows)
    return {"by_h": {int(k): float(v) for k, v in summary["eval"]["by_horizon"].items()},
            "rewards": [r["reward"] for r in rows], "curve": rows, "tokens": summary["training_tokens"],
            "groups_with_signal": (1 - sum(r.get("groups_all_equal", 0) for r in rows) / groups) if groups else None,
            "wall_seconds": summary["wall_seconds"]}


def format_policy(out: Path, setup, task: str, seed: int):
    """A format phase's policy (a :class:`longhorizon.lm.run.Policy`): SFT (``lm sft``'s loop) of the pretrained
    model on ``setup.format_rows`` rows of ``task`` with their worked solutions, split equally over
    ``setup.format_horizons``; or its kept weights under ``out/runs/format`` when a finished phase of the same
    settings is there (every arm starts from them). ``setup``: any setup with ``model``, ``dtype`` and the
    ``format_*`` fields."""
    from longhorizon.lm import nl_tasks
    from longhorizon.lm.run import Pretrained, load_policy, run_rl
    from longhorizon.lm.sft import SFTSpec, SFTTrainingConfig

    run = out / "runs" / "format"
    stamp = run / "setup.json"
    wanted = json.dumps({"task": task, "seed": seed, **{k: getattr(setup, k) for k in (
        "model", "dtype", "format_rows", "format_horizons", "format_steps", "format_learning_rate")}}, sort_keys=True)
    if not (stamp.exists() and stamp.read_text() == wanted and (run / "summary.json").exists()):
        shutil.rmtree(run, ignore_errors=True)
        run.parent.mkdir(parents=True, exist_ok=True)
        rows = nl_tasks.make_rows(task, setup.format_horizons, setup.format_rows // len(setup.format_horizons), seed)
        data = nl_tasks.write_jsonl([{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": r["solution"]}]}
                                     for r in rows], run.parent / "format.jsonl")
        run_rl(SFTSpec(out=str(run), init=Pretrained(setup.model, setup.dtype), dataset=str(data),
                       steps=setup.format_steps, checkpoint_every=setup.format_steps,
                       train=SFTTrainingConfig(learning_rate=setup.format_learning_rate)), quiet=True)
        stamp.write_text(wanted)
    return load_policy(run)  # its config names the pretrained model, so the tokenizer and template come back


# ----------------------------------------------------------------------------- a protocol's skeleton

PARTIAL = "partial"  # each finished arm: partial/ARM-seedK.json, read back by a rerun of the same setup


def run_arms(out: Path, setup, arms, train, name: str, shown: str) -> dict:
    """Every seed of every arm through ``train(arm, seed) -> result``, each saved under ``out/partial`` as it
    finishes and read back by a rerun of the same ``setup`` (:func:`longhorizon.repro.report.resumable`), so a
    protocol spans sittings. ``shown``: the result's key printed as each arm finishes. Returns
    ``{arm: [result per seed]}``."""
    from longhorizon.repro.report import resumable

    results = {arm: [] for arm in arms}
    for seed in range(setup.seeds):
        for arm in arms:
            result, _ = resumable(out / PARTIAL / f"{arm}-seed{seed}.json", setup,
                                  lambda arm=arm, seed=seed: train(arm, seed), print)
            results[arm].append(result)
            print(f"{name} {arm} seed {seed}: {result[shown]}", flush=True)
    return results


def finish(out: Path, *, name: str, paper: str, setup, quick: bool, t0: float, recorded: dict, judge, scale: str,
           plot, readme) -> dict:
    """Judge ``recorded`` (made plain JSON first, as a later re-judging sees it), write ``summary.json``, the plot,
    README.md (``readme(summary, recorded)`` lines) and each arm's training curve; return the summary."""
    from longhorizon.repro.report import write_run

    recorded = C.as_recorded({**recorded, "setup": dataclasses.asdict(setup)})
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper=paper, claims=claims, arms=arms, scale=scale, quick=quick,
                        command=f"longhorizon repro {name}" + (" --quick" if quick else ""),
                        wall_seconds=time.perf_counter() - t0, **recorded)
    plot(recorded)
    curves = {f"{arm}-seed{seed}": r["curve"] for arm, rows in recorded["results"].items() for seed, r in enumerate(rows)}
    write_run(out, summary, readme(summary, recorded), curves)
    return summary


def header(title: str, summary: dict, scale: str, results: dict, plot: str) -> list[str]:
    """A README's opening: title, command, scale, the measured step time and the plot."""
    steps = [row["step_s"] for rows in results.values() for r in rows for row in r["curve"][1:]
             if "step_s" in row]  # the first step of each run includes compilation
    return [f"# {title}", "", f"Command: `{summary['command']}` (this sitting's wall time {summary['wall_seconds']:.0f} s; "
            f"finished arms are read back from `{PARTIAL}/`).", "", scale,
            (f"Measured here: an RL step took {np.median(steps):.0f} s (median; range {min(steps):.0f}-{max(steps):.0f} s)."
             if steps else ""), "", f"![{plot}]({plot})", ""]


def accuracy_table(xs, references: dict, results: dict, key: str, label: str) -> list[str]:
    """Held-out accuracy by ``x`` (``label`` = x's name): one row per reference policy (``{name: by_x}``) and per
    arm and seed (``results[arm][seed][key]``), with the training reward's first and last 5 steps and the share of
    groups with a GRPO signal."""
    xs = [str(x) for x in xs]
    lines = ["| policy | seed | " + " | ".join(f"{label}={x}" for x in xs)
             + " | training reward, first -> last 5 steps | groups with signal |", "|---|---|" + "---|" * len(xs) + "---|---|"]
    lines += [f"| {name} | - | " + " | ".join(f"{by_x[x]:.2f}" for x in xs) + " | - | - |" for name, by_x in references.items()]
    for arm, rows in results.items():
        for seed, r in enumerate(rows):
            lines.append(f"| {arm} | {seed} | " + " | ".join(f"{r[key][x]:.2f}" for x in xs)
                         + f" | {np.mean(r['rewards'][:5]):.2f} -> {np.mean(r['rewards'][-5:]):.2f} | "
                         + ("-" if r['groups_with_signal'] is None else f"{r['groups_with_signal']:.2f}") + " |")
    return lines + ["", "*Groups with signal*: the share of training groups whose completions got different rewards; "
                    "a group whose rewards are all equal has zero advantage and teaches GRPO nothing.", ""]


def plot_accuracy(path: Path, xs, references: dict, results: dict, key: str, xlabel: str, title: str) -> None:
    """Held-out accuracy against ``x``: each reference policy dashed, each arm's mean over seeds with its range."""
    xs = [int(x) for x in xs]

    def draw(ax):
        for i, (name, by_x) in enumerate(references.items()):
            ax.plot(xs, [by_x[str(x)] for x in xs], "--" if i == len(references) - 1 else ":",
                    color="k" if i == len(references) - 1 else "grey", marker="x", label=name)
        for i, (arm, rows) in enumerate(results.items()):
            acc = np.array([[r[key][str(x)] for x in xs] for r in rows])
            ax.plot(xs, acc.mean(0), marker="o", ms=4, color=f"C{i}", label=arm)
            if len(rows) > 1:
                ax.fill_between(xs, acc.min(0), acc.max(0), color=f"C{i}", alpha=0.15)

    _figure(path, xlabel, title, draw)


# ----------------------------------------------------------------------------- h1 arms


def _arm_sampler(arm: str, source, setup):
    from longhorizon.lm import samplers

    hs = setup.train_horizons
    if arm == "curriculum":
        return samplers.Curriculum(source, hs, max(1, setup.steps // len(hs)), samplers.Gate("steps"))
    return samplers.FixedMix(source, {"only-short": (min(hs),), "only-long": (max(hs),), "uniform": hs}[arm])


# ----------------------------------------------------------------------------- plots


def _figure(path: Path, xlabel: str, title: str, draw) -> None:
    """One accuracy plot: ``draw(ax)`` adds the lines, this names the axes and saves it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    draw(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("held-out accuracy (greedy)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


