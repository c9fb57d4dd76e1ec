"""h1, sGPO and R-HORIZON on a real pretrained model: SmolLM2-135M-Instruct on natural-language chains.

The symbolic reproductions (:mod:`longhorizon.repro.h1`, :mod:`longhorizon.repro.sgpo`) train
in-house character models that cannot compose at all. These three run the same claims on a real
instruct model through the user's path: TRL-style rows (:mod:`longhorizon.lm.nl_tasks`: word
problems whose every step uses the previous result), TRL-style reward functions, and the one RL
loop (:func:`longhorizon.lm.run.run_rl`), Dr. GRPO (``loss_type="dr_grpo"``, ``scale_rewards="none"``).

* ``h1-smollm2`` (h1, "composition curriculum"): arms ``curriculum`` (h = 1, 2, 3 in equal stages),
  ``only-short`` (h = 1), ``only-long`` (h = 3) and ``uniform`` (h ~ U{1, 2, 3}) at equal rollout
  budget (same steps x prompts x generations); greedy final-answer accuracy by horizon 1..4.
  Claim: the curriculum beats every fixed-horizon arm at the long horizons (h >= 3).
* ``sgpo-smollm2``: sGPO (one profiling pass, group size ~ 1/success rate, easy to hard) against
  GRPO from the same model on a pool of h = 1..2 chains. Claim: sGPO reaches GRPO's held-out
  accuracy with fewer training tokens (profiling counted).
* ``rhorizon-smollm2`` (R-HORIZON) has its own module, :mod:`longhorizon.repro.rhorizon_smollm2`, built on the
  shared parts here.

Verdicts (:func:`judge_h1`, :func:`judge_sgpo`, :mod:`longhorizon.repro.claims`): per-seed
differences with Student-t 95% intervals over seeds (>= 3); an arm whose held-out accuracy did not rise above the
base model's gives ``no signal`` (training did not move it, so the arms cannot be told apart). Scale: what 2 shared CPU cores allow (``RealSetup``); the module
docstrings of the entries and each README give the full-protocol GPU command. ``--quick`` runs
the same code on ``tiny-random`` (a random 2-layer Llama, :func:`longhorizon.lm.policy.tiny_random`),
a smoke test whose numbers mean nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
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


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))


def _mean_at(by_h: dict, horizons) -> float:
    return float(np.mean([by_h[int(h)] for h in horizons]))


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


def _long(by_h: dict, horizons) -> float:
    return float(np.mean([by_h[str(h)] for h in horizons]))


def judge_h1(L: dict, quick: bool = False) -> tuple[list, dict]:
    """h1-smollm2: per seed, the curriculum's accuracy at the long horizons against the best other arm's (by mean)."""
    setup = L["setup"]
    longs = [h for h in setup["eval_horizons"] if h >= max(setup["train_horizons"])]
    base = _long(L["base_by_horizon"], longs)
    long = {a: [_long(r[a]["by_horizon"], longs) for r in L["results"]] for a in L["results"][0]}
    sig = {a: C.arm_signal(a, eval_start=base, eval_end=long[a], what="long-chain accuracy") for a in long}
    best = max((a for a in long if a != "curriculum"), key=lambda a: np.mean(long[a]))
    claims = [C.judge("h1: a composition curriculum (h = 1 -> 3) beats fixed-horizon training on long chained problems",
                      C.difference(long["curriculum"], long[best]), [sig["curriculum"], sig[best]], quick=quick)]
    return claims, {a: C.arm(setup["steps"], setup["seeds"], sig[a]) for a in long}


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


def _signal(run: Path) -> str:
    """The share of a run's groups whose rewards differed (the only ones GRPO learns from), from its metrics."""
    import json

    if not (run / "metrics.jsonl").exists():
        return "-"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    groups = sum(r["groups"] for r in rows)
    return f"{1 - sum(r['groups_all_equal'] for r in rows) / max(groups, 1):.2f}"


def _scale(setup: RealSetup, quick: bool) -> str:
    budget = setup.steps * setup.prompts_per_step * setup.num_generations
    return (f"{'QUICK smoke test on a random tiny model (numbers mean nothing). ' if quick else ''}Model {setup.model} "
            f"({setup.dtype}); {setup.steps} RL steps x {setup.prompts_per_step} prompts x {setup.num_generations} "
            f"generations = {budget} sampled completions per run; lr {setup.learning_rate:g}, {setup.loss_type}, "
            f"scale_rewards={setup.scale_rewards}; {setup.eval_per_horizon} held-out problems per horizon, greedy.")


def _by_h(d: dict) -> dict:
    return {int(k): float(v) for k, v in d.items()}


# ----------------------------------------------------------------------------- h1


def _arm_sampler(arm: str, source, setup: RealSetup):
    from longhorizon.lm import samplers

    hs = setup.train_horizons
    if arm == "curriculum":
        return samplers.Curriculum(source, hs, max(1, setup.steps // len(hs)), samplers.Gate("steps"))
    return samplers.FixedMix(source, {"only-short": (min(hs),), "only-long": (max(hs),), "uniform": hs}[arm])


def run_h1(out_dir: str, quick: bool = False, setup: RealSetup | None = None) -> dict:
    from longhorizon.lm import samplers

    setup = setup or (QUICK if quick else RealSetup())
    out, t0 = Path(out_dir), time.perf_counter()
    runs = _fresh(out)
    policy = _policy(setup)
    held = _pools(policy.tokenizer, "chain", setup.eval_horizons, setup.eval_per_horizon, HELD_SEED)
    train = _pools(policy.tokenizer, "chain", setup.train_horizons, setup.pool_per_horizon, TRAIN_SEED)
    plen = _prompt_length(policy.tokenizer, held, train)
    grpo = _grpo(setup, plen, setup.max_completion_length)
    base = _by_h(_evaluate(policy, policy.params, _flat(held), "chain", plen, setup.max_completion_length)["by_horizon"])
    results = []
    for seed in range(setup.seeds):
        source = samplers.PoolSource(train, seed=seed)
        row = {}
        for arm in ARMS:
            summary = _train(runs / f"seed{seed}" / arm, policy, grpo, _arm_sampler(arm, source, setup), setup,
                             _flat(held), "chain", seed)
            row[arm] = {"by_horizon": _by_h(summary["eval"]["by_horizon"]), "tokens": summary["training_tokens"],
                        "wall_s": summary["wall_s"]}
            print(f"h1-smollm2 seed {seed} {arm}: {row[arm]['by_horizon']}", flush=True)
        results.append(row)
    summary = _summary("h1-smollm2", "h1", judge_h1, {"base_by_horizon": base, "results": results}, setup, quick, t0)
    _plot_h1(out, base, results, setup)
    _write(out, summary, _report_h1(out, summary, base, results, setup, quick))
    return summary


def _plot_h1(out: Path, base: dict, results: list[dict], setup: RealSetup) -> None:
    hs = list(setup.eval_horizons)

    def draw(ax):
        ax.plot(hs, [base[h] for h in hs], "k--", marker="x", label="base")
        for i, arm in enumerate(ARMS):
            acc = np.array([[r[arm]["by_horizon"][h] for h in hs] for r in results])
            ax.plot(hs, acc.mean(0), marker="o", ms=4, color=f"C{i}", label=arm)
            if len(results) > 1:
                ax.fill_between(hs, acc.min(0), acc.max(0), color=f"C{i}", alpha=0.15)

    _figure(out / "accuracy_by_horizon.png", "horizon (chained operations)",
            f"h1 on {setup.model}: arms at equal rollout budget", draw)


def _report_h1(out: Path, summary: dict, base: dict, results: list[dict], setup: RealSetup, quick: bool) -> list[str]:
    hs = list(setup.eval_horizons)
    lines = ["# h1 on a real pretrained model (SmolLM2-135M-Instruct)", "",
             f"Command: `{summary['command']}` (wall {summary['wall_seconds']:.0f} s).", "",
             _scale(setup, quick), _step_times(out / "runs"), "", "![accuracy by horizon](accuracy_by_horizon.png)", "",
             "| seed | arm | " + " | ".join(f"h={h}" for h in hs) + " | training tokens | groups with signal |",
             "|---|---|" + "---|" * len(hs) + "---|---|",
             "| - | base | " + " | ".join(f"{base[h]:.3f}" for h in hs) + " | 0 | - |"]
    for seed, row in enumerate(results):
        for arm in ARMS:
            lines.append(f"| {seed} | {arm} | " + " | ".join(f"{row[arm]['by_horizon'][h]:.3f}" for h in hs)
                         + f" | {row[arm]['tokens']:,} | {_signal(out / 'runs' / f'seed{seed}' / arm)} |")
    lines += ["", "*Groups with signal*: the share of training groups whose completions got different rewards; "
              "a group whose rewards are all equal has zero advantage and teaches GRPO nothing."]
    lines += ["", "## Verdict", "", *verdict_lines(summary), "", *_h1_protocol_notes(setup)]
    return lines


def _h1_protocol_notes(setup: RealSetup) -> list[str]:
    return [
        "## Protocol and deviations from the paper", "",
        "- Tasks: natural-language chains (`lm.nl_tasks`, word style: each operation acts on the previous result), "
        "final answer only (`chain_reward`), prompts through the model's ChatML template.",
        f"- Arms at equal rollout budget; the curriculum spends {max(1, setup.steps // len(setup.train_horizons))} "
        f"steps per stage on h = {list(setup.train_horizons)}; training draws come from a fixed pool of "
        f"{setup.pool_per_horizon} problems per horizon (with replacement), held-out problems from another seed.",
        "- The paper trains for hundreds of steps with large batches; this budget is what 2 shared CPU cores allow "
        "in a session (see the step times above).",
        f"- Learning rate {setup.learning_rate:g} (TRL's default is 1e-6), chosen before running, so that a few "
        "steps can move the model at all; no protocol setting was tuned on these results.",
        "", "Full protocol on one GPU (not run here; no GPU was lent to this session):", "",
        "```", "longhorizon repro h1-smollm2 --out runs/h1-smollm2-gpu  # after editing RealSetup to the values below",
        "# RealSetup(seeds=3, steps=300, prompts_per_step=16, num_generations=8, eval_per_horizon=128,",
        "#           train_horizons=(1, 2, 3, 4), eval_horizons=tuple(range(1, 9)))", "```", "",
        "Expected time: an estimate, not a measurement: a 135M model's GRPO step of 128 completions should take a "
        "few seconds on one H200, so about 4 arms x 3 seeds x 300 steps x ~3 s = 3 h.",
    ]


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


def _plot_lines(path: Path, xs, curves: dict, xlabel: str, title: str) -> None:
    def draw(ax):
        for label, by_x in curves.items():
            ax.plot(xs, [by_x[x] for x in xs], "k--" if label == "base" else "-", marker="o", ms=4, label=label)

    _figure(path, xlabel, title, draw)
