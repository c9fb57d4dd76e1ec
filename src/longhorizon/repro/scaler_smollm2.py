"""`longhorizon repro scaler-smollm2`: SCALER (adaptive difficulty) on SmolLM2-135M-Instruct.

The paper's setting: SCALER synthesises reasoning environments whose difficulty is a parameter and moves the
difficulty during RL so that the policy's success stays near a target (about half), where a group of samples
mixes successes and failures and so carries a learning signal. Claim: adaptive difficulty trains a better model
than a fixed difficulty distribution at equal budget.

Ours (:class:`Setup`): difficulty is the chain length h of ``lm.nl_tasks``' ``chain`` task (h = 1..6). Both
arms start from h1's format-phase policy (:func:`longhorizon.repro.real_model.format_policy`: SFT on worked
h = 1, 2 chains) and run the same steps x prompts x generations of Dr. GRPO through the one LM loop: ``scaler``
draws h around a level moved toward ``target`` training success after every step
(:class:`longhorizon.lm.samplers.Scaler`, ``level += rate * (success - target)``); ``fixed-mix`` draws h
uniformly from 1..6 throughout. Held-out greedy accuracy at h = 1..6; each finished arm saved under
``partial/`` and read back by a rerun.

Verdict (:func:`judge`): per seed, SCALER's mean held-out accuracy over h = 1..6 minus the fixed mix's,
Student-t over seeds (>= 3); both arms must have learned (training reward rising, or held-out accuracy above
the start), else ``no signal``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro import h1_smollm2 as H1
from longhorizon.repro import real_model as R
from longhorizon.repro.report import resumable, verdict_lines

ARMS = ("scaler", "fixed-mix")
PARTIAL = R.PARTIAL


@dataclasses.dataclass(frozen=True)
class Setup(R.Common):
    horizons: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
    target: float = 0.5  # the paper's: about half the samples succeed
    rate: float = 2.0  # level change per unit of (success - target), per step
    eval_per_horizon: int = 48
    max_completion_length: int = 128  # a worked h = 6 chain takes about 60 tokens
    eval_new_tokens: int = 128
    pool_per_horizon: int = 256


QUICK = Setup(model="tiny-random", seeds=1, format_horizons=(1,), steps=3, prompts_per_step=2, num_generations=2, horizons=(1, 2),
              eval_per_horizon=2, max_completion_length=8, eval_new_tokens=8, pool_per_horizon=4, format_rows=4,
              format_steps=1, checkpoint_every=1)


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """The claim from the recorded numbers: ``start`` (format-phase accuracy by h) and ``results[arm]`` (per seed:
    ``by_h``, ``rewards``)."""
    setup, res = L["setup"], L["results"]
    mean = lambda by_h: float(np.mean([by_h[str(h)] for h in setup["horizons"]]))  # noqa: E731
    start = mean(L["start"]["by_h"])
    acc = {a: [mean(r["by_h"]) for r in res[a]] for a in res}
    sig = {a: C.arm_signal(a, [r["rewards"] for r in res[a]], eval_start=start, eval_end=acc[a]) for a in res}
    claims = [C.judge(f"adaptive difficulty (SCALER, target success {setup['target']:g}) beats a fixed uniform mix of "
                      f"h = {min(setup['horizons'])}..{max(setup['horizons'])} on held-out accuracy at equal budget",
                      C.difference(acc["scaler"], acc["fixed-mix"]), [sig["scaler"], sig["fixed-mix"]], quick=quick)]
    return claims, {a: C.arm(setup["steps"], len(res[a]), sig[a]) for a in res}


def _sampler(arm: str, source, setup: Setup):
    from longhorizon.lm import samplers

    if arm == "scaler":
        return samplers.Scaler(source, min(setup.horizons), max(setup.horizons), target=setup.target, rate=setup.rate)
    return samplers.FixedMix(source, setup.horizons)


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    from longhorizon.lm import samplers

    setup = setup or (QUICK if quick else Setup())
    out, t0 = Path(out_dir), time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    policy = R.format_policy(out, setup, "chain", H1.FORMAT_SEED)
    held = R._pools(policy.tokenizer, "chain", setup.horizons, setup.eval_per_horizon, R.HELD_SEED)
    train = R._pools(policy.tokenizer, "chain", setup.horizons, setup.pool_per_horizon, R.TRAIN_SEED)
    plen = R._prompt_length(policy.tokenizer, held, train)
    start, _ = resumable(out / PARTIAL / "format.json", setup, lambda: H1.evaluate(policy, held, plen, setup), print)
    print(f"scaler-smollm2 start (after the format phase): {start['by_h']}", flush=True)
    grpo = R._grpo(setup, plen, setup.max_completion_length)

    def train_arm(arm: str, seed: int) -> dict:
        return R.train_arm(out / "runs" / f"{arm}-seed{seed}", policy, grpo,
                           _sampler(arm, samplers.PoolSource(train, seed=seed), setup), steps=setup.steps,
                           prompts_per_step=setup.prompts_per_step, held=R._flat(held),
                           eval_new_tokens=setup.eval_new_tokens, task="chain", seed=seed,
                           checkpoint_every=setup.checkpoint_every)

    results = R.run_arms(out, setup, ARMS, train_arm, "scaler-smollm2", "by_h")
    return R.finish(out, name="scaler-smollm2", paper="SCALER", setup=setup, quick=quick, t0=t0, judge=judge,
                    recorded={"start": start, "results": results}, scale=_scale(setup, quick),
                    plot=lambda L: R.plot_accuracy(out / "accuracy_by_horizon.png", setup.horizons,
                                                   {"start (format phase)": L["start"]["by_h"]}, L["results"], "by_h",
                                                   "horizon h (chained operations)",
                                                   f"SCALER on {setup.model}: adaptive vs fixed difficulty"),
                    readme=lambda summary, L: _readme(summary, L, setup, quick))


def _scale(setup: Setup, quick: bool) -> str:
    budget = setup.steps * setup.prompts_per_step * setup.num_generations
    return (f"{'QUICK smoke test on a random tiny model (numbers mean nothing). ' if quick else ''}Model {setup.model} "
            f"({setup.dtype}) after h1's format phase; {setup.seeds} seeds x 2 arms x {setup.steps} RL steps x "
            f"{setup.prompts_per_step} prompts x {setup.num_generations} generations = {budget} sampled completions per "
            f"run; lr {setup.learning_rate:g} decaying linearly, {setup.loss_type}; {setup.eval_per_horizon} held-out "
            f"chains per h = {list(setup.horizons)}, greedy.")


def _readme(summary: dict, L: dict, setup: Setup, quick: bool) -> list[str]:
    lines = R.header("SCALER on a real pretrained model (SmolLM2-135M-Instruct)", summary, _scale(setup, quick),
                     L["results"], "accuracy_by_horizon.png")
    lines += R.accuracy_table(setup.horizons, {"start": L["start"]["by_h"]}, L["results"], "by_h", "h")
    lines += ["## Verdict", "", *verdict_lines(summary), "", "## Differences from the paper", "",
              "- The paper synthesises many environments from programming problems and trains 1.5B+ models; here one "
              "environment (chains of small-number word problems) whose difficulty is the chain length, a 135M model "
              "and the budget above.",
              f"- The controller is SCALER's target-success rule with target {setup.target:g} and rate {setup.rate:g} "
              "(set before the run, not tuned).",
              "", "Full protocol on one GPU (not run: no GPU was lent):", "", "```",
              "longhorizon repro scaler-smollm2 --out runs/scaler-gpu  # with Setup(seeds=5, steps=300, "
              "prompts_per_step=16, horizons=tuple(range(1, 11)))", "```", "",
              "Expected time: an estimate, not a measurement: about 3 s a GRPO step of 128 SmolLM2 completions on one "
              "H100, so 10 runs x 300 steps x 3 s, about 3 h with the evaluations."]
    return lines
