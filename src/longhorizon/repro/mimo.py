"""`longhorizon repro mimo`: MiMo's asynchronous RL pipeline, its speed-up at equal samples and equal accuracy.

The paper's setting: MiMo-7B's RL infrastructure (Xiaomi, 2025) decouples rollout from training (a "seamless
rollout engine": continuous rollouts, asynchronous reward computation, early termination) and reports 2.29x
faster training at no loss of accuracy against a synchronous pipeline. AReaL (Fu et al., 2025) makes the
same claim for fully asynchronous GRPO with bounded staleness and a decoupled objective.

Ours (:class:`Setup`): GRPO on two-digit addition (the measured recipe of docs/lm.md: SmolLM2-135M-Instruct,
4 prompts x 8 generations a step, lr 1e-5 decaying linearly, DAPO's token-mean loss, 32 new tokens) through
the one LM loop, at equal samples per arm: ``sync`` samples in the learner's process with the current policy;
``async-K`` samples on 2 Ray rollout workers (:mod:`longhorizon.lm.grpo_workers`) that run up to K policy
versions ahead, each stale batch corrected by the learner's own log-probabilities and truncated importance
weights. Each finished run is saved under ``partial/`` and read back by a rerun (the protocol spans sittings);
the runs go seed by seed (every arm's seed 0 first), the claim arms (``sync``, ``async-2``) for ``seeds`` seeds,
the staleness sweep (``async-1``, ``async-4``) for ``sweep_seeds``.

Verdicts (:mod:`longhorizon.repro.claims`, rules set before any arm ran): the speed-up is each seed's mean
training-step time of ``sync`` over ``async-2`` (steps 2..N: the first step compiles), a Student-t interval
over seeds above 1; equal accuracy is the held-out greedy accuracy of ``async-2`` minus ``sync`` paired by
seed, above -0.05. Both need both arms to have learned (held-out accuracy above the base model's).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro import real_model as R
from longhorizon.repro.report import resumable, verdict_lines

ARMS = {"sync": None, "async-1": 1, "async-2": 2, "async-4": 4}  # arm -> max staleness (None: in-process)
CLAIM_ARMS = ("sync", "async-2")
ACCURACY_MARGIN = -0.05  # "equal accuracy": async-2 no more than 0.05 below sync (set before the runs)
TRAIN_SEED, HELD_SEED = 5_000_011, 6_000_029


@dataclasses.dataclass(frozen=True)
class Setup:
    model: str = "smollm2"
    dtype: str = "float32"
    seeds: int = 3  # the claim arms
    sweep_seeds: int = 1  # async-1 and async-4
    steps: int = 20
    prompts_per_step: int = 4
    num_generations: int = 8
    learning_rate: float = 1e-5
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    completion_length: int = 32
    actors: int = 2
    train_rows: int = 2000
    eval_rows: int = 100
    checkpoint_every: int = 5


QUICK = Setup(model="tiny-random", seeds=1, sweep_seeds=0, steps=3, prompts_per_step=2, num_generations=2,
              completion_length=4, actors=1, train_rows=8, eval_rows=4, checkpoint_every=1)


def addition_rows(n: int, seed: int) -> list[dict]:
    """``n`` two-digit additions as TRL conversational rows ("What is 52 + 56? Answer with the number only.")."""
    rng = np.random.default_rng(seed)
    rows = []
    for a, b in rng.integers(10, 100, size=(n, 2)):
        rows.append({"prompt": [{"role": "user", "content": f"What is {a} + {b}? Answer with the number only."}],
                     "answer": str(a + b), "horizon": 1})
    return rows


def correct_answer(prompts, completions, answer, **columns):
    """1.0 when the completion's last number is the sum, else 0.0 (a TRL-style reward function)."""
    import re

    out = []
    for completion, want in zip(completions, answer):
        text = completion[-1]["content"] if isinstance(completion, list) else completion
        numbers = re.findall(r"-?\d+", text)
        out.append(1.0 if numbers and numbers[-1] == str(want) else 0.0)
    return out


def _seeds(setup: Setup, arm: str) -> int:
    return setup.seeds if arm in CLAIM_ARMS else setup.sweep_seeds


def step_seconds(curve: list[dict]) -> list[float]:
    """The training steps' wall times, steps 2..N (the first step compiles the programs)."""
    return [float(r["step_s"]) for r in curve[1:] if "step_s" in r]


def throughput(curve: list[dict]) -> float:
    """Generated tokens per second of training wall time over steps 2..N."""
    tokens = curve[-1]["generated_tokens"] - curve[0]["generated_tokens"]
    return float(tokens / max(sum(step_seconds(curve)), 1e-9))


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """The two claims from the recorded numbers ``L``: ``base`` (the base model's held-out accuracy) and
    ``results[arm]`` (per seed: ``accuracy``, the training ``curve`` and ``rewards``)."""
    base, results, setup = L["base"]["accuracy"], L["results"], L["setup"]
    acc = {a: [r["accuracy"] for r in results[a]] for a in results}
    sig = {a: C.arm_signal(a, [r["rewards"] for r in results[a]], eval_start=base, eval_end=acc[a],
                           what="training reward") for a in results if results[a]}
    n = min(len(results["sync"]), len(results["async-2"]))
    mean_step = {a: [float(np.mean(step_seconds(r["curve"]))) for r in results[a][:n]] for a in CLAIM_ARMS}
    speedup = [s / a for s, a in zip(mean_step["sync"], mean_step["async-2"])]
    claims = [
        C.judge("at equal samples, asynchronous GRPO (2 rollout workers, staleness <= 2) trains faster in wall time "
                "than synchronous GRPO (speed-up = sync / async mean step time, above 1)",
                C.difference(speedup, 1.0), [sig["sync"], sig["async-2"]], quick=quick),
        C.judge(f"at equal samples, asynchronous GRPO reaches synchronous GRPO's held-out accuracy (async - sync above "
                f"{ACCURACY_MARGIN})",
                C.difference(acc["async-2"][:n], acc["sync"][:n], margin=ACCURACY_MARGIN), [sig["sync"], sig["async-2"]],
                quick=quick),
    ]
    arms = {a: C.arm(setup["steps"], len(results[a]), sig[a]) for a in results if results[a]}
    return claims, arms


def _train(out: Path, policy, arm: str, seed: int, pool: tuple, held: tuple, plen: int, setup: Setup) -> dict:
    from longhorizon.lm import samplers
    from longhorizon.lm.agents.async_rollout import Config
    from longhorizon.lm.data import RewardFunctions

    staleness = ARMS[arm]
    workers = None if staleness is None else Config(actors=setup.actors, mode="async", max_staleness=staleness)
    result = R.train_arm(out / "runs" / f"{arm}-seed{seed}", policy, R._grpo(setup, plen, setup.completion_length),
                         samplers.FixedMix(samplers.PoolSource({1: pool}, seed=seed), (1,)), steps=setup.steps,
                         prompts_per_step=setup.prompts_per_step, held=held, eval_new_tokens=setup.completion_length,
                         task="addition", seed=seed, checkpoint_every=setup.checkpoint_every,
                         rewards=RewardFunctions([correct_answer]), workers=workers)
    curve = result["curve"]
    return {**result, "accuracy": result.pop("by_h")[1], "mean_step_s": float(np.mean(step_seconds(curve))),
            "tokens_per_s": throughput(curve),
            "staleness_mean": float(np.mean([r.get("staleness", 0) for r in curve]))}


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    from longhorizon.lm.data import RewardFunctions, prepare
    from longhorizon.lm.evaluate import evaluate_dataset

    setup = setup or (QUICK if quick else Setup())
    out, t0 = Path(out_dir), time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    policy = R._policy(setup)
    pool = tuple(prepare(addition_rows(setup.train_rows, TRAIN_SEED), policy.tokenizer))
    held = tuple(prepare(addition_rows(setup.eval_rows, HELD_SEED), policy.tokenizer))
    plen = R._prompt_length(policy.tokenizer, {1: pool}, {1: held})

    def evaluate_base():
        r = evaluate_dataset(policy.params, policy.model_cfg, policy.tokenizer, list(held),
                             RewardFunctions([correct_answer]), max_prompt_length=plen,
                             max_new_tokens=setup.completion_length, batch_size=16)
        return {"accuracy": float(r["accuracy"])}

    base, _ = resumable(out / R.PARTIAL / "base.json", setup, evaluate_base, print)
    print(f"mimo base model: held-out accuracy {base['accuracy']:.2f}", flush=True)
    results = {arm: [] for arm in ARMS}
    for seed in range(max(setup.seeds, setup.sweep_seeds)):
        for arm in ARMS:
            if seed >= _seeds(setup, arm):
                continue
            result, _ = resumable(out / R.PARTIAL / f"{arm}-seed{seed}.json", setup,
                                  lambda arm=arm, seed=seed: _train(out, policy, arm, seed, pool, held, plen, setup), print)
            results[arm].append(result)
            print(f"mimo {arm} seed {seed}: accuracy {result['accuracy']:.2f}, {result['mean_step_s']:.1f} s a step, "
                  f"{result['tokens_per_s']:.0f} generated tokens/s", flush=True)
    return R.finish(out, name="mimo", paper="MiMo", setup=setup, quick=quick, t0=t0, judge=judge,
                    recorded={"base": base, "results": {a: r for a, r in results.items() if r}},
                    scale=_scale(setup, quick), plot=lambda L: _plot(out / "curves.png", L, setup),
                    readme=lambda summary, L: _readme(summary, L, setup, quick))


def _scale(setup: Setup, quick: bool) -> str:
    budget = setup.steps * setup.prompts_per_step * setup.num_generations
    return (f"{'QUICK smoke test on a random tiny model (numbers mean nothing). ' if quick else ''}Model {setup.model} "
            f"({setup.dtype}) on two-digit addition; {setup.steps} GRPO steps x {setup.prompts_per_step} prompts x "
            f"{setup.num_generations} generations = {budget} sampled completions per run; sync in the learner's "
            f"process, async on {setup.actors} Ray rollout workers with max staleness 1, 2, 4; {setup.seeds} seeds of "
            f"sync and async-2, {setup.sweep_seeds} of async-1 and async-4; {setup.eval_rows} held-out additions, "
            f"greedy; the 2-core CPU machine (workers and learner share its cores).")


def _plot(path: Path, L: dict, setup: Setup) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for arm, rows in L["results"].items():
        for seed, r in enumerate(rows):
            curve = r["curve"]
            samples = [row["step"] * setup.prompts_per_step * setup.num_generations for row in curve]
            kw = {"label": arm} if seed == 0 else {}
            color = f"C{list(ARMS).index(arm)}"
            left.plot(samples, [row["reward"] for row in curve], color=color, alpha=0.8, **kw)
            elapsed = np.cumsum([0.0, *step_seconds(curve)])
            right.plot(elapsed, [row["reward"] for row in curve][: len(elapsed)], color=color, alpha=0.8, **kw)
    left.set_xlabel("sampled completions")
    right.set_xlabel("training wall time from step 2 (s)")
    for ax in (left, right):
        ax.set_ylabel("training reward")
        ax.legend(fontsize=8)
    fig.suptitle(f"GRPO, synchronous vs asynchronous rollouts ({setup.model}, two-digit addition)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _readme(summary: dict, L: dict, setup: Setup, quick: bool) -> list[str]:
    lines = R.header("MiMo / AReaL: asynchronous GRPO against synchronous at equal samples", summary,
                     _scale(setup, quick), L["results"], "curves.png")
    lines += ["| arm | seeds | held-out accuracy | mean step (s) | generated tokens/s | mean staleness |",
              "|---|---|---|---|---|---|",
              f"| base model | - | {L['base']['accuracy']:.2f} | - | - | - |"]
    for arm, rows in L["results"].items():
        cells = [f"{np.mean([r[k] for r in rows]):{f}}" + (f" ({', '.join(f'{r[k]:{f}}' for r in rows)})" if len(rows) > 1 else "")
                 for k, f in (("accuracy", ".2f"), ("mean_step_s", ".1f"), ("tokens_per_s", ".0f"), ("staleness_mean", ".2f"))]
        lines.append(f"| {arm} | {len(rows)} | " + " | ".join(cells) + " |")
    lines += ["", "## Verdict", "", *verdict_lines(summary), "", "## Differences from the paper", "",
              "- MiMo trains a 7B model on thousands of GPUs' worth of rollouts and measures 2.29x faster training; here "
              "a 135M model, 2 CPU cores shared by the learner and the rollout workers (so sampling ahead competes "
              "with the update for the same cores; on separate accelerators it would not), and the budget above.",
              "- The asynchronous arm is AReaL's design (bounded staleness, decoupled objective with truncated "
              "importance weights), not MiMo's partial rollouts; the recipe's settings were fixed before these runs.",
              "", "On one GPU host (not run: no GPU was lent): `longhorizon repro mimo --out runs/mimo-gpu`, with the "
              "workers each given a GPU (`Config(actor_gpus=1)`) to separate sampling from training."]
    return lines
