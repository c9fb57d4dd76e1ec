"""The real-model reproductions' shared parts (SmolLM2-135M-Instruct on natural-language chains), and sGPO.

The symbolic reproductions (:mod:`longhorizon.repro.h1`, :mod:`longhorizon.repro.sgpo`) train in-house
character models that cannot compose at all. These run the same claims on a real instruct model through the
user's path: TRL-style rows (:mod:`longhorizon.lm.nl_tasks`: word problems whose every step uses the previous
result), TRL-style reward functions, and the one RL loop (:func:`longhorizon.lm.run.run_rl`), Dr. GRPO
(``loss_type="dr_grpo"``, ``scale_rewards="none"``).

* ``h1-smollm2``: :mod:`longhorizon.repro.h1_smollm2`; ``rhorizon-smollm2``: :mod:`longhorizon.repro.rhorizon_smollm2`
  (each with its protocol, arms saved as they finish (:func:`train_arm`) and verdict rule).
* ``sgpo-smollm2`` (here): sGPO (one profiling pass, group size ~ 1/success rate, easy to hard) against GRPO
  from the same model on a pool of h = 1..2 chains. Claim: sGPO reaches GRPO's held-out accuracy with fewer
  training tokens (profiling counted); :func:`judge_sgpo`, Student-t over seeds (>= 3); an arm whose
  held-out accuracy did not rise above the base model's gives ``no signal``.

``--quick`` runs the same code on ``tiny-random`` (a random 2-layer Llama,
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
from longhorizon.repro.report import verdict_lines

ARMS = ("curriculum", "only-short", "only-long", "uniform")
TRAIN_SEED, HELD_SEED, POOL_SEED = 1_000, 2_000_003, 3_000_017  # apart from each other and from nl_tasks' own


@dataclasses.dataclass(frozen=True)
class RealSetup:
    model: str = "smollm2"
    dtype: str = "float32"
    seeds: int = 2
    steps: int = 4
    prompts_per_step: int = 4
    num_generations: int = 4
    learning_rate: float = 1e-5  # 10x TRL's default: a handful of steps must be able to move the model at all
    loss_type: str = "dr_grpo"
    scale_rewards: str = "none"
    max_completion_length: int = 64
    train_horizons: tuple[int, ...] = (1, 2, 3)
    eval_horizons: tuple[int, ...] = (1, 2, 3, 4)
    eval_per_horizon: int = 16
    pool_per_horizon: int = 256  # training draws come from these (with replacement)
    sgpo_pool: int = 16
    sgpo_horizons: tuple[int, ...] = (1, 2)
    profile_samples: int = 4
    max_group: int = 8

    @property
    def long_horizons(self) -> tuple[int, ...]:
        return tuple(h for h in self.eval_horizons if h >= max(self.train_horizons))


QUICK = RealSetup(model="tiny-random", seeds=1, steps=3, prompts_per_step=2, num_generations=2, max_completion_length=8,
                  eval_horizons=(1, 3), eval_per_horizon=2, pool_per_horizon=4,
                  sgpo_pool=4, profile_samples=2, max_group=4)


# ----------------------------------------------------------------------------- shared parts


def _policy(setup: RealSetup):
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


def _grpo(setup: RealSetup, plen: int, completion: int):
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


def _train(out: Path, policy, grpo, sampler, setup: RealSetup, held: tuple, task: str, seed: int) -> dict:
    """One RL run through the spine; its final held-out evaluation."""
    from longhorizon.lm.run import EvalSpec, RLSpec, run_rl

    evaluation = EvalSpec(held, grpo.max_prompt_length, grpo.max_completion_length, every=0, rewards=_rewards(task),
                          at_start=False)  # the base is evaluated once, before the arms
    spec = RLSpec(out=str(out), init=policy, grpo=grpo, sampler=sampler, steps=setup.steps,
                  prompts_per_step=setup.prompts_per_step, evaluation=evaluation, checkpoint_every=setup.steps, seed=seed,
                  rewards=_rewards(task))
    summary = run_rl(spec, quiet=True)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # keep the run's metrics, not ~1.6 GB of weights per arm
    return summary


CURVE_KEYS = ("step", "reward", "reward_std", "groups_all_equal", "groups", "completion_length", "step_s")


def train_arm(run: Path, policy, grpo, sampler, *, steps: int, prompts_per_step: int, held: tuple, eval_new_tokens: int,
              task: str, seed: int, checkpoint_every: int) -> dict:
    """One arm of a protocol, one seed: RL through the one LM loop (:func:`longhorizon.lm.run.run_rl`), continuing
    from ``run``'s checkpoint when an earlier sitting was interrupted; returns what the protocol keeps (accuracy by
    horizon on ``held``, the training-reward curve, the share of groups with a GRPO signal, tokens, wall time) and
    deletes the weights (about 1.6 GB with the optimiser state)."""
    from longhorizon.lm import run_checkpoint
    from longhorizon.lm.run import EvalSpec, RLSpec, run_rl

    evaluation = EvalSpec(held, grpo.max_prompt_length, eval_new_tokens, every=0, rewards=_rewards(task),
                          at_start=False)  # the protocol evaluates its starting policy once, before the arms
    spec = RLSpec(out=str(run), init=policy, grpo=grpo, sampler=sampler, steps=steps, prompts_per_step=prompts_per_step,
                  evaluation=evaluation, checkpoint_every=checkpoint_every, seed=seed, rewards=_rewards(task))
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
            "groups_with_signal": 1 - sum(r.get("groups_all_equal", 0) for r in rows) / max(groups, 1),
            "wall_s": summary["wall_s"]}


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


def _fresh(out: Path) -> Path:
    runs = out / "runs"
    shutil.rmtree(runs, ignore_errors=True)  # this reproduction's own run folders, rewritten each time
    out.mkdir(parents=True, exist_ok=True)
    return runs


def _write(out: Path, summary: dict, lines: list[str]) -> None:
    """summary.json, README.md and each run's training curve (its metrics rows) under ``curves/``."""
    from longhorizon.repro.report import write_run

    runs = out / "runs"
    rows = {"-".join(path.parent.relative_to(runs).parts) or "rl": [json.loads(line) for line in path.read_text().splitlines()
                                                                  if line.strip()]
            for path in sorted(runs.rglob("metrics.jsonl"))}
    write_run(out, summary, lines, rows)


def judge_sgpo(L: dict, quick: bool = False) -> tuple[list, dict]:
    """sgpo-smollm2: per seed, sGPO's accuracy non-inferior to GRPO's (within 0.05) and its training tokens fewer."""
    setup, res = L["setup"], L["results"]
    sig = {a: C.arm_signal(a, eval_start=L["base_accuracy"], eval_end=[r[a]["accuracy"] for r in res], what="held-out accuracy")
           for a in ("grpo", "sgpo")}
    per = lambda a, k: [r[a][k] for r in res]  # noqa: E731
    ruling = C.combine({"accuracy": C.difference(per("sgpo", "accuracy"), per("grpo", "accuracy"), margin=-0.05),
                        "tokens": C.difference(per("sgpo", "tokens"), per("grpo", "tokens"), higher_is_better=False)}, "part")
    claims = [C.judge("sGPO reaches GRPO's accuracy (within 0.05) with fewer training tokens", ruling, list(sig.values()),
                      quick=quick)]
    return claims, {a: C.arm(setup["steps"], setup["seeds"], sig[a]) for a in sig}


def _summary(name: str, paper: str, judge, recorded: dict, setup: "RealSetup", quick: bool, t0: float) -> dict:
    recorded = C.as_recorded({**recorded, "setup": dataclasses.asdict(setup)})
    claims, arms = judge(recorded, quick)
    return C.summary(paper=paper, claims=claims, arms=arms, scale=_scale(setup, quick), quick=quick,
                     command=f"longhorizon repro {name}" + (" --quick" if quick else ""),
                     wall_seconds=time.perf_counter() - t0, **recorded)


def _step_times(runs: Path) -> str:
    """The measured RL step times of a reproduction's runs (``runs/**/metrics.jsonl``), for its README."""
    import json

    first, rest = [], []
    for metrics in sorted(runs.rglob("metrics.jsonl")):
        times = [json.loads(line)["step_s"] for line in metrics.read_text().splitlines()]
        first.append(times[0])
        rest.extend(times[1:])
    if not first:
        return ""
    return (f"Measured here: an RL step took {np.median(rest):.0f} s (median; range {min(rest):.0f}-{max(rest):.0f} s) "
            f"after the first, which took {max(first):.0f} s at most (compilation included)." if rest else "")


def _scale(setup: RealSetup, quick: bool) -> str:
    budget = setup.steps * setup.prompts_per_step * setup.num_generations
    return (f"{'QUICK smoke test on a random tiny model (numbers mean nothing). ' if quick else ''}Model {setup.model} "
            f"({setup.dtype}); {setup.steps} RL steps x {setup.prompts_per_step} prompts x {setup.num_generations} "
            f"generations = {budget} sampled completions per run; lr {setup.learning_rate:g}, {setup.loss_type}, "
            f"scale_rewards={setup.scale_rewards}; {setup.eval_per_horizon} held-out problems per horizon, greedy.")


# ----------------------------------------------------------------------------- h1 arms


def _arm_sampler(arm: str, source, setup: RealSetup):
    from longhorizon.lm import samplers

    hs = setup.train_horizons
    if arm == "curriculum":
        return samplers.Curriculum(source, hs, max(1, setup.steps // len(hs)), samplers.Gate("steps"))
    return samplers.FixedMix(source, {"only-short": (min(hs),), "only-long": (max(hs),), "uniform": hs}[arm])


# ----------------------------------------------------------------------------- sGPO


def run_sgpo(out_dir: str, quick: bool = False, setup: RealSetup | None = None) -> dict:
    from longhorizon.lm import samplers
    from longhorizon.lm.curricula import SGPOConfig

    setup = setup or (QUICK if quick else dataclasses.replace(RealSetup(), seeds=1))
    out, t0 = Path(out_dir), time.perf_counter()
    runs = _fresh(out)
    policy = _policy(setup)
    held = _flat(_pools(policy.tokenizer, "chain", setup.sgpo_horizons, setup.eval_per_horizon, HELD_SEED))
    pool = _flat(_pools(policy.tokenizer, "chain", setup.sgpo_horizons, setup.sgpo_pool // len(setup.sgpo_horizons),
                        POOL_SEED))
    plen = _prompt_length(policy.tokenizer, {0: held}, {0: pool})
    grpo = _grpo(setup, plen, setup.max_completion_length)
    base = _evaluate(policy, policy.params, held, "chain", plen, setup.max_completion_length)["reward"]
    rows = []
    for seed in range(setup.seeds):
        samples = setup.prompts_per_step * setup.num_generations
        methods = {"grpo": samplers.ShuffledPool(pool, seed=seed),
                   "sgpo": samplers.SGPO(pool, SGPOConfig(profile_samples=setup.profile_samples, min_group=2,
                                                          max_group=setup.max_group),
                                         samples_per_step=samples, profile_batch=setup.prompts_per_step, seed=seed)}
        row = {}
        for name, sampler in methods.items():
            s = _train(runs / f"seed{seed}" / name, policy, grpo, sampler, setup, held, "chain", seed)
            row[name] = {"accuracy": s["eval"]["reward"], "tokens": s["training_tokens"],
                         "profile": s.get("sampler")}
            print(f"sgpo-smollm2 seed {seed} {name}: {row[name]['accuracy']:.3f} ({row[name]['tokens']:,} tokens)", flush=True)
        rows.append(row)
    summary = _summary("sgpo-smollm2", "sGPO", judge_sgpo, {"base_accuracy": base, "results": rows}, setup, quick, t0)
    _plot_points(out / "accuracy_vs_tokens.png", base, [(f"{m} s{i}", r[m]["tokens"], r[m]["accuracy"], m)
                                                       for i, r in enumerate(rows) for m in ("grpo", "sgpo")],
                 "training tokens (profiling included)", f"sGPO vs GRPO on {setup.model}")
    lines = ["# sGPO vs GRPO on a real pretrained model (SmolLM2-135M-Instruct)", "",
             f"Command: `{summary['command']}` (wall {summary['wall_seconds']:.0f} s).", "",
             _scale(setup, quick) + " " + _step_times(runs), f" Pool: {len(pool)} chains of h = {list(setup.sgpo_horizons)}; sGPO profiles each "
             f"with {setup.profile_samples} samples, groups of 2..{setup.max_group}.", "",
             "![accuracy vs tokens](accuracy_vs_tokens.png)", "",
             "| seed | base acc | GRPO acc | GRPO tokens | sGPO acc | sGPO tokens (profiling incl.) |", "|---|---|---|---|---|---|"]
    for i, r in enumerate(rows):
        lines.append(f"| {i} | {base:.3f} | {r['grpo']['accuracy']:.3f} | {r['grpo']['tokens']:,} | "
                     f"{r['sgpo']['accuracy']:.3f} | {r['sgpo']['tokens']:,} |")
    lines += ["", "## Verdict", "", *verdict_lines(summary), "", "Both methods run the same number of steps; sGPO's steps hold at most "
              "the samples of a GRPO step. Full protocol on one GPU (an estimate, not run): pool 512, 3 seeds, 300 steps "
              "of 16 x 8, about 2 h."]
    _write(out, summary, lines)
    return summary


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


def _plot_points(path: Path, base: float, points, xlabel: str, title: str) -> None:
    def draw(ax):
        ax.axhline(base, color="k", ls="--", label="base")
        for label, x, y, method in points:
            ax.plot([x], [y], "o" if method == "grpo" else "s", color="C0" if method == "grpo" else "C1", label=label)

    _figure(path, xlabel, title, draw)
