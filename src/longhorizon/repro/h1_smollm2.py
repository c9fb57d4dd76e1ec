"""`longhorizon repro h1-smollm2`: h1 (a composition curriculum over chain length) on SmolLM2-135M-Instruct.

The paper's setting: a model that solves atomic problems reliably is trained by RL on chains of them (each
operand derived from the previous answer); a curriculum over the chain length h (short chains first) teaches
long chains, where training on long chains alone gets (almost) no reward and so no signal. Claim: the
curriculum beats fixed-horizon training on long chains at equal budget.

Ours (:class:`Setup`):

1. *Format phase*: SFT (``lm sft``'s loop, :class:`longhorizon.lm.sft.SFTSpec`) on ``format_rows`` chains of
   h = 1 and 2 with their worked solution (``"7 - 4 = 3\\n3 * 2 = 6\\nAnswer: 6"``), so that the atomic step
   is reliable (aim: >= 80% at h = 1). A labelled deviation: SFT on h = 1 alone (measured: greedy accuracy
   1.00 / 0.00 / 0.03 / 0.00 at h = 1..4 after 32 steps) taught the model to stop after one line, leaving
   no chain of h >= 2 solved and so no signal for RL beyond h = 1; h >= 3 is never shown.
2. Four RL arms from the format-phase policy at equal rollout budget (steps x prompts x generations, Dr. GRPO
   through the one LM loop): ``curriculum`` (h = 1, 2, 3 in equal stages), ``only-short`` (h = 1),
   ``only-long`` (h = 3), ``uniform`` (h ~ U{1, 2, 3}); greedy accuracy by h = 1..6 on held-out chains.

The format phase's weights are kept under ``runs/format`` (every arm starts from them; rebuilt if missing) and
each finished arm is saved under ``partial/`` and read back by a rerun, so the protocol spans sittings.

Verdicts (:func:`judge`): per seed, the curriculum's mean accuracy at h >= 3 against the best other arm's (by
mean over seeds), Student-t over seeds. The claim depends on the curriculum arm having learned (training reward
rising, or long-chain accuracy above the start): if it did not, nothing learned and the verdict is ``no
signal``. A comparator that learned nothing is not a reason for ``no signal``: that is what the paper predicts
for ``only-long``, and the second claim measures it (its share of groups with any reward signal).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro import real_model as R
from longhorizon.repro.report import resumable, verdict_lines

ARMS = R.ARMS  # curriculum, only-short, only-long, uniform
PARTIAL = R.PARTIAL
FORMAT_FLOOR = 0.8  # the aim for h = 1 after the format phase, stated before the run


@dataclasses.dataclass(frozen=True)
class Setup(R.Common):
    train_horizons: tuple[int, ...] = (1, 2, 3)
    eval_horizons: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    eval_per_horizon: int = 48
    max_completion_length: int = 96  # a worked h = 3 chain takes about 30 tokens
    eval_new_tokens: int = 128
    pool_per_horizon: int = 256

    @property
    def long_horizons(self) -> tuple[int, ...]:
        return tuple(h for h in self.eval_horizons if h >= max(self.train_horizons))


QUICK = Setup(model="tiny-random", seeds=1, format_horizons=(1,), steps=3, prompts_per_step=2, num_generations=2, eval_horizons=(1, 3),
              eval_per_horizon=2, max_completion_length=8, eval_new_tokens=8, pool_per_horizon=4, format_rows=4,
              format_steps=1, checkpoint_every=1)
FORMAT_SEED = 4_000_037  # the format phase's rows, apart from the training and held-out pools


def _long(by_h: dict, horizons) -> float:
    return float(np.mean([by_h[str(h)] for h in horizons]))


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """The claims from the recorded numbers: ``start`` (the format-phase policy's accuracy by h) and
    ``results[arm]`` (per seed: ``by_h``, ``rewards`` curve, ``groups_with_signal``)."""
    setup, res = L["setup"], L["results"]
    longs = [h for h in setup["eval_horizons"] if h >= max(setup["train_horizons"])]
    start = _long(L["start"]["by_h"], longs)
    long = {a: [_long(r["by_h"], longs) for r in res[a]] for a in res}
    sig = {a: C.arm_signal(a, [r["rewards"] for r in res[a]], eval_start=start, eval_end=long[a]) for a in res}
    best = max((a for a in long if a != "curriculum"), key=lambda a: np.mean(long[a]))
    format_ok = C.task_floor("the format-phase policy at h = 1", L["start"]["by_h"]["1"], FORMAT_FLOOR)
    signal = {a: [r["groups_with_signal"] for r in res[a]] for a in res}
    claims = [
        C.judge(f"h1: a composition curriculum (h = 1 -> {max(setup['train_horizons'])}) beats fixed-horizon training "
                f"on long chains (h >= {min(longs)}; best other arm: {best})",
                C.difference(long["curriculum"], long[best]), [sig["curriculum"], format_ok], quick=quick),
        C.judge("training on long chains only gets fewer groups with a reward signal than the curriculum",
                C.difference(signal["curriculum"], signal["only-long"]), [format_ok], quick=quick),
    ]
    return claims, {a: C.arm(setup["steps"], len(res[a]), sig[a]) for a in res}


def evaluate(policy, held: dict, plen: int, setup) -> dict:
    """Greedy accuracy by horizon of ``policy`` on the chains ``held`` (``{h: examples}``)."""
    r = R._evaluate(policy, policy.params, R._flat(held), "chain", plen, setup.eval_new_tokens)
    return {"by_h": {int(k): float(v) for k, v in r["by_horizon"].items()}}


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    from longhorizon.lm import samplers

    setup = setup or (QUICK if quick else Setup())
    out, t0 = Path(out_dir), time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    base = R._policy(setup)
    held = R._pools(base.tokenizer, "chain", setup.eval_horizons, setup.eval_per_horizon, R.HELD_SEED)
    train = R._pools(base.tokenizer, "chain", setup.train_horizons, setup.pool_per_horizon, R.TRAIN_SEED)
    plen = R._prompt_length(base.tokenizer, held, train)
    base_acc, _ = resumable(out / PARTIAL / "base.json", setup, lambda: evaluate(base, held, plen, setup), print)
    policy = R.format_policy(out, setup, "chain", FORMAT_SEED)
    start, _ = resumable(out / PARTIAL / "format.json", setup, lambda: evaluate(policy, held, plen, setup), print)
    print(f"h1-smollm2 base {base_acc['by_h']}; after the format phase {start['by_h']}", flush=True)
    grpo = R._grpo(setup, plen, setup.max_completion_length)

    def train_arm(arm: str, seed: int) -> dict:
        sampler = R._arm_sampler(arm, samplers.PoolSource(train, seed=seed), setup)
        return R.train_arm(out / "runs" / f"{arm}-seed{seed}", policy, grpo, sampler, steps=setup.steps,
                           prompts_per_step=setup.prompts_per_step, held=R._flat(held),
                           eval_new_tokens=setup.eval_new_tokens, task="chain", seed=seed,
                           checkpoint_every=setup.checkpoint_every)

    results = R.run_arms(out, setup, ARMS, train_arm, "h1-smollm2", "by_h")
    references = lambda L: {"base model": L["base"]["by_h"], "after the format phase": L["start"]["by_h"]}  # noqa: E731
    return R.finish(out, name="h1-smollm2", paper="h1", setup=setup, quick=quick, t0=t0, judge=judge,
                    recorded={"base": base_acc, "start": start, "results": results}, scale=_scale(setup, quick),
                    plot=lambda L: R.plot_accuracy(out / "accuracy_by_horizon.png", setup.eval_horizons, references(L),
                                                   L["results"], "by_h", "horizon h (chained operations)",
                                                   f"h1 on {setup.model}: arms at equal rollout budget"),
                    readme=lambda summary, L: _readme(summary, L, setup, quick, references(L)))


def _scale(setup: Setup, quick: bool) -> str:
    budget = setup.steps * setup.prompts_per_step * setup.num_generations
    return (f"{'QUICK smoke test on a random tiny model (numbers mean nothing). ' if quick else ''}Model {setup.model} "
            f"({setup.dtype}); format phase: SFT on {setup.format_rows} worked chains of h = {list(setup.format_horizons)}, "
            f"{setup.format_steps} steps; "
            f"then {setup.seeds} seeds x {len(ARMS)} arms x {setup.steps} RL steps x {setup.prompts_per_step} prompts x "
            f"{setup.num_generations} generations = {budget} sampled completions per run; lr {setup.learning_rate:g} "
            f"decaying linearly, {setup.loss_type}; {setup.eval_per_horizon} held-out chains per h = "
            f"{list(setup.eval_horizons)}, greedy.")


def _readme(summary: dict, L: dict, setup: Setup, quick: bool, references: dict) -> list[str]:
    lines = R.header("h1 on a real pretrained model (SmolLM2-135M-Instruct)", summary, _scale(setup, quick), L["results"],
                     "accuracy_by_horizon.png")
    lines += R.accuracy_table(setup.eval_horizons, references, L["results"], "by_h", "h")
    lines += ["## Verdict", "", *verdict_lines(summary), "", "## Differences from the paper", "",
              "- The paper composes GSM8K-style problems and trains 3B+ models for hundreds of steps with large batches; "
              "here small-number word problems (`lm.nl_tasks`, `chain`), a 135M model and the budget above.",
              f"- The format phase aims at >= {FORMAT_FLOOR:.0%} at h = 1 (the paper starts from a model that solves "
              "atomic problems); below it the claims are `no signal`. It shows worked chains of h = "
              f"{list(setup.format_horizons)}: SFT on h = 1 alone left greedy accuracy 1.00 / 0.00 / 0.03 / 0.00 at "
              "h = 1..4 (the model stopped after one line), so RL would have had no signal beyond h = 1.",
              "- Learning rates are the measured recipes' (docs/lm.md: RL 1e-5, SFT TRL's 2e-5), set before this run.",
              "", "Full protocol on one GPU (not run: no GPU was lent):", "", "```",
              "longhorizon repro h1-smollm2 --out runs/h1-gpu  # with Setup(seeds=5, steps=300, prompts_per_step=16, "
              "train_horizons=(1, 2, 3, 4), eval_horizons=tuple(range(1, 9)))", "```", "",
              "Expected time: an estimate, not a measurement: about 3 s a GRPO step of 128 SmolLM2 completions on one "
              "H100, so 20 runs x 300 steps x 3 s, about 5 h with the evaluations."]
    return lines
