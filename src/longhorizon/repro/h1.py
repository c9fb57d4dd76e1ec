"""h1 (Motwani et al., 2025): a horizon curriculum bootstraps long-horizon reasoning from short problems.

Claim checked, at toy scale on 2 CPU cores:

1. a base policy trained by supervised learning on single problems only (dependency depth 1);
2. RL arms with *equal rollout budgets* (same steps x prompts x generations): curriculum
   h = 1 -> 5, only h = 5, only h = 1, uniform mix of h = 1..5; outcome reward on the final
   answer only;
3. greedy evaluation on held-out chains of h = 1..8.

Claims (:func:`judge`, per-seed held-out accuracy, Student-t 95% intervals over >= 3 seeds): (a) the curriculum
arm is best on long chains (mean accuracy over h >= 4, against the best other arm); (b) it generalises beyond the
longest training horizon (h = 6..8 above the base policy); (c) h = 5 alone learns little because its rewards are
rare (the curriculum gains more on h >= 4). An arm judged must have learned: GRPO groups with unequal rewards in
at least half of its steps' groups and long-chain accuracy above the base's; else ``no signal``. The development
log of this reproduction is docs/results/h1/NOTES.md.

The task (:mod:`longhorizon.lm.tasks`): ``a=57;b=a+5;c=b+3;...`` -> ``b=62;c=65;...``, values
mod 100 written with two digits. The base is trained on *packed independent* problems (``a=04;b=a+5;c=71;d=c+2;`` ->
``b=09;d=73;``, 1 to 3 per prompt): it learns the atomic skill and the answer format, never a
problem whose input is its own previous answer.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.lm.chain_base import BaseRecipe, base_label, cached_base, task_config
from longhorizon.repro import claims as C
from longhorizon.repro.report import verdict_lines

ARMS = {
    "curriculum": "h = 1 -> 5, equal stages",
    "only_h5": "h = 5 throughout",
    "only_h1": "h = 1 throughout",
    "uniform": "h uniform in 1..5",
}


@dataclasses.dataclass(frozen=True)
class H1Setup:
    seeds: int = 3
    # the supervised base (lm.chain_base.BaseRecipe, its defaults; flat here, as summaries record the setup)
    d_model: int = BaseRecipe.d_model
    n_layers: int = BaseRecipe.n_layers
    n_heads: int = BaseRecipe.n_heads
    sft_steps: int = BaseRecipe.sft_steps
    sft_batch: int = BaseRecipe.sft_batch
    sft_lr: float = BaseRecipe.sft_lr
    sft_packed: tuple[int, ...] = BaseRecipe.sft_packed
    sft_chain_fraction: float = BaseRecipe.sft_chain_fraction  # >0 is a deviation: that share of SFT data are h=2 chains
    rl_steps: int = 60
    prompts_per_step: int = 8
    num_generations: int = 8
    learning_rate: float = 2e-4
    beta: float = 0.0  # KL anchor to the base policy (k3 estimator), as in GRPOConfig
    # None: the curriculum's stages are equal shares of rl_steps (the protocol). A number: a stage
    # ends at the gate `advance_on` (lm.samplers.Gate): "train_reward", once the mean training
    # reward of its last GATE_WINDOW steps reaches it (fresh problems every step, so this is sampled
    # accuracy on unseen chains), or "heldout_accuracy", once held-out accuracy at the stage's
    # horizon does at an evaluation (needs eval_every); stages are then unbounded except by rl_steps.
    advance_at: float | None = None
    advance_on: str = "train_reward"
    eval_every: int = 0  # held-out evaluations during RL (0: after the last step only)
    loss_type: str = "dr_grpo"
    scale_rewards: str = "none"
    train_horizons: tuple[int, ...] = (1, 2, 3, 4, 5)
    eval_horizons: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    eval_per_horizon: int = 64

    @property
    def recipe(self) -> BaseRecipe:
        """The supervised base's recipe (:mod:`longhorizon.lm.chain_base`)."""
        return BaseRecipe(**{f.name: getattr(self, f.name) for f in dataclasses.fields(BaseRecipe)})


GATE_WINDOW = 5  # steps of training reward averaged by H1Setup.advance_at (also a stage's minimum length)
QUICK = H1Setup(seeds=1, rl_steps=10, prompts_per_step=4, eval_per_horizon=16)  # same (cached) base
# The larger base the toy run points to (0.8M parameters, longer SFT and RL). Measured cost on 2 CPU
# cores: about 0.45 CPU-s per SFT step and 1.2 CPU-s per RL step, i.e. roughly 1.5 CPU-hours in all;
# meant for a GPU (see docs/results/h1/README.md for the command).
LARGE = H1Setup(d_model=128, n_layers=4, n_heads=4, sft_steps=3000, rl_steps=200)
# A labelled deviation (`longhorizon repro h1-chain-base`): a quarter of the base's SFT data are
# supervised h=2 chains, so the base composes once (h=2 ~100%) but not twice (h=3 ~2% sampled);
# it tests whether RL and the curriculum bootstrap h=3.. from there, which the protocol's base
# (3% at h=2) cannot.
CHAIN_BASE = H1Setup(sft_chain_fraction=0.25, sft_steps=2000)


def arm_spec(arm: str, policy, setup: H1Setup, seed: int, held, lengths, out):
    """The :class:`longhorizon.lm.run.RLSpec` of one arm and seed (equal budgets: same steps x prompts x generations)."""
    from longhorizon.lm import samplers
    from longhorizon.lm.grpo import GRPOConfig
    from longhorizon.lm.run import EvalSpec, RLSpec
    from longhorizon.lm.tasks import max_lengths

    tcfg = task_config()
    plen, clen = lengths
    cfg = GRPOConfig(num_generations=setup.num_generations, loss_type=setup.loss_type, scale_rewards=setup.scale_rewards,
                     learning_rate=setup.learning_rate, beta=setup.beta, max_prompt_length=plen,
                     max_completion_length=max_lengths("chain", max(setup.train_horizons), tcfg)[1] + 1)
    source = samplers.TaskSource("chain", tcfg, seed * 7919 + list(ARMS).index(arm))
    hs = tuple(setup.train_horizons)
    if arm == "curriculum" and setup.advance_at is None:  # the protocol: equal stages
        sampler = samplers.Curriculum(source, hs, max(1, setup.rl_steps // len(hs)))
    elif arm == "curriculum":  # stages end at the gate, bounded only by the run's length
        sampler = samplers.Curriculum(source, hs, setup.rl_steps,
                                      samplers.Gate(setup.advance_on, setup.advance_at, GATE_WINDOW))
    else:
        sampler = samplers.FixedMix(source, {"only_h5": (max(hs),), "only_h1": (min(hs),), "uniform": hs}[arm])
    return RLSpec(out=str(out), init=policy, grpo=cfg, sampler=sampler, steps=setup.rl_steps,
                  prompts_per_step=setup.prompts_per_step,
                  evaluation=EvalSpec(tuple(held), plen, clen, every=setup.eval_every, at_start=False),
                  checkpoint_every=setup.rl_steps, seed=seed, record={"repro": "h1", "arm": arm, "seed": seed})


CURVE_KEYS = ("step", "horizon", "reward", "groups_all_equal", "groups", "kl", "entropy")


def run_arm(arm: str, policy, setup: H1Setup, seed: int, held, lengths, out):
    """Run one arm (:func:`longhorizon.lm.run.run_rl`, results in ``out``); ``(held-out eval, curve, counters)``."""
    from longhorizon.lm.run import run_rl
    from longhorizon.runner.results import ResultsDir

    summary = run_rl(arm_spec(arm, policy, setup, seed, held, lengths, out), quiet=True)
    curve = [{k: r.get(k) for k in CURVE_KEYS} for r in ResultsDir(out).read_metrics()]
    return summary["eval"], curve, dict(summary["counters"])


def run(out_dir: str, quick: bool = False, setup: H1Setup | None = None) -> dict:
    import shutil

    from longhorizon.lm.evaluate import evaluate
    from longhorizon.lm.run import Policy
    from longhorizon.lm.tasks import HELD_OUT_OFFSET, make_problems, max_lengths
    from longhorizon.runner.results import ResultsDir, write_json_atomic

    setup = setup or (QUICK if quick else H1Setup())
    out = ResultsDir(out_dir)
    out.write_config({"repro": "h1", "quick": quick, "setup": setup, "task": task_config(), "arms": ARMS})
    tcfg = task_config()
    plen, clen = max_lengths("chain", max(setup.eval_horizons), tcfg)
    lengths = (plen + 1, clen + 1)
    t0 = time.perf_counter()
    results: dict[str, list[dict]] = {"base": [], **{a: [] for a in ARMS}}
    curves: dict[str, list] = {a: [] for a in ARMS}
    print("supervised base on packed single problems" + (f" and {setup.sft_chain_fraction:.0%} h=2 chains (a deviation)"
          if setup.sft_chain_fraction else "") + " (shared by every RL seed)")
    params, model_cfg, tokenizer = cached_base(setup.recipe)
    policy = Policy(params, model_cfg, tokenizer, label=base_label(setup.recipe, params))
    shutil.rmtree(Path(out_dir) / "runs", ignore_errors=True)  # one results folder per arm and seed, made afresh
    for seed in range(setup.seeds):
        held = make_problems("chain", setup.eval_horizons, setup.eval_per_horizon * len(setup.eval_horizons),
                             HELD_OUT_OFFSET + seed, tcfg)
        base_ev = evaluate(params, model_cfg, tokenizer, held, max_prompt_length=lengths[0], max_new_tokens=lengths[1])
        results["base"].append(base_ev)
        print(f"seed {seed}\n  base: {_fmt(base_ev['by_horizon'])}")
        for arm in ARMS:
            ev, curve, counters = run_arm(arm, policy, setup, seed, held, lengths,
                                          Path(out_dir) / "runs" / f"seed{seed}" / arm)
            results[arm].append({**ev, "counters": counters})
            curves[arm].append(curve)
            print(f"  {arm:>10}: {_fmt(ev['by_horizon'])}  ({time.perf_counter() - t0:.0f}s)")
        out.append_metrics({"seed": seed, **{k: v[-1]["by_horizon"] for k, v in results.items()}})
    runs = C.as_recorded({"results": results, "curves": curves})  # as recorded (string keys)
    write_json_atomic(Path(out_dir) / "runs.json", runs)
    claims, arms = judge(runs, C.as_recorded(dataclasses.asdict(setup)), quick)
    name = "h1-chain-base" if setup.sft_chain_fraction else "h1"
    summary = C.summary(paper="h1", claims=claims, arms=arms, scale=scale(setup), quick=quick,
                        command=f"longhorizon repro {name}" + (" --quick" if quick else ""),
                        wall_seconds=time.perf_counter() - t0, **tables(results, curves, setup))
    for arm, rows in runs["curves"].items():
        C.write_curve(out_dir, arm, [dict(c, seed=i) for i, seed_rows in enumerate(rows) for c in seed_rows])
    out.write_summary(summary)
    write_report(Path(out_dir), summary, setup, quick)
    return summary


def scale(setup: H1Setup) -> str:
    return (f"character model d={setup.d_model} x {setup.n_layers} layers; {setup.rl_steps} RL steps x "
            f"{setup.prompts_per_step} prompts x {setup.num_generations} generations per arm; {setup.seeds} seeds; "
            f"{setup.eval_per_horizon} held-out chains per horizon")


def _fmt(by_h: dict) -> str:
    return " ".join(f"h{h}={v:.2f}" for h, v in by_h.items())


def tables(results, curves, setup: H1Setup) -> dict:
    """Mean and spread of held-out accuracy per arm and horizon (the per-seed numbers are in runs.json)."""
    hs = list(setup.eval_horizons)
    table = {}
    for arm, runs in results.items():
        acc = np.array([[r["by_horizon"][h] for h in hs] for r in runs])
        table[arm] = {"mean": acc.mean(0).tolist(), "std": acc.std(0).tolist(),
                      "long_mean": float(acc[:, [i for i, h in enumerate(hs) if h >= 4]].mean()),
                      "beyond_mean": float(acc[:, [i for i, h in enumerate(hs) if h > max(setup.train_horizons)]].mean())}
    long = {a: table[a]["long_mean"] for a in ARMS}
    return {"horizons": hs, "table": table, "best_arm_on_long": max(long, key=long.get),
            "only_h5_mean_train_reward": float(np.mean([c["reward"] for runs in curves["only_h5"] for c in runs]))}


def judge(runs: dict, setup: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded runs (``runs.json``: per-seed held-out accuracy by horizon and each
    arm's training curve) and the setup (module docstring)."""
    hs = setup["eval_horizons"]
    cols = lambda pred: [i for i, h in enumerate(hs) if pred(h)]  # noqa: E731
    acc = {a: np.array([[r["by_horizon"][str(h)] for h in hs] for r in rs]) for a, rs in runs["results"].items()}
    long = {a: m[:, cols(lambda h: h >= 4)].mean(1) for a, m in acc.items()}
    beyond = {a: m[:, cols(lambda h: h > max(setup["train_horizons"]))].mean(1) for a, m in acc.items()}
    signals = {}
    for arm, curves in runs["curves"].items():
        equal = np.mean([c["groups_all_equal"] / c["groups"] for seed in curves for c in seed])
        signals[arm] = [C.group_signal(arm, 1.0 - equal),
                        C.arm_signal(arm, eval_start=long["base"], eval_end=long[arm], what="long-chain accuracy (h >= 4)")]
    best = max((a for a in runs["curves"] if a != "curriculum"), key=lambda a: long[a].mean())
    cur = signals["curriculum"]
    claims = [
        C.judge("the curriculum is best on long chains (mean accuracy over h >= 4)",
                C.difference(long["curriculum"], long[best]), [*cur, *signals[best]], quick=quick),
        C.judge("the curriculum generalises beyond the longest training horizon (h = 6..8 above the base)",
                C.difference(beyond["curriculum"], beyond["base"]), cur, quick=quick),
        C.judge("h = 5 alone learns little because its rewards are rare (the curriculum gains more on h >= 4)",
                C.difference(long["curriculum"], long["only_h5"]), cur, quick=quick),
    ]
    return claims, {a: C.arm(setup["rl_steps"], len(runs["results"][a]), *signals[a]) for a in runs["curves"]}


def write_report(out: Path, summary: dict, setup: H1Setup, quick: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hs = summary["horizons"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for arm, row in summary["table"].items():
        mean, std = np.array(row["mean"]), np.array(row["std"])
        ax.errorbar(hs, mean, yerr=std, marker="o", capsize=3, label=arm, linestyle="--" if arm == "base" else "-")
    ax.axvline(max(setup.train_horizons) + 0.5, color="grey", lw=0.8)
    ax.set_xlabel("held-out chain horizon h")
    ax.set_ylabel("final-answer accuracy (greedy)")
    ax.set_title(f"h1 repro ({setup.seeds} seed{'s' if setup.seeds > 1 else ''}{', quick' if quick else ''})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "accuracy_by_horizon.png", dpi=110)
    plt.close(fig)
    deviation = setup.sft_chain_fraction > 0
    name = "h1-chain-base" if deviation else "h1"
    lines = [f"# {name}: horizon curriculum vs fixed-horizon RL", "",
             f"Command: `longhorizon repro {name}{' --quick' if quick else ''}` "
             f"({setup.seeds} seed(s), wall {summary['wall_seconds']:.0f} s).", ""]
    if deviation:
        lines += [f"**Deviation from the h1 protocol:** {setup.sft_chain_fraction:.0%} of the base's supervised "
                  "data are h=2 chains (the protocol's base sees single problems only). The base therefore starts "
                  "with h=2 solved, and the arms test whether RL bootstraps h>=3 from there. The protocol's own "
                  "run is in docs/results/h1/.", ""]
    lines += [
             "Accuracy of the final answer on held-out chains (mean ± std over seeds, greedy decoding):", "",
             "| arm | " + " | ".join(f"h={h}" for h in hs) + " | mean h≥4 |",
             "|---|" + "---|" * (len(hs) + 1)]
    for arm, row in summary["table"].items():
        cells = [f"{m:.2f} ± {s:.2f}" for m, s in zip(row["mean"], row["std"])]
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {row['long_mean']:.3f} |")
    lines += ["", f"Mean training reward of the only-h=5 arm: {summary['only_h5_mean_train_reward']:.3f}.", "",
              "## Verdict", ""]
    lines += verdict_lines(summary)
    lines += ["", "Rules: `longhorizon.repro.h1.judge` (each claim's rule and numbers are in `summary.json`, the "
              "per-seed accuracies in `runs.json`, each arm's training curve in `curves/`).",
              "", "## Setup", "", "```", repr(setup), "```", "",
              "Equal rollout budget per arm: steps x prompts x generations = "
              f"{setup.rl_steps} x {setup.prompts_per_step} x {setup.num_generations}. One supervised base "
              "(cached) is shared by every RL seed; seeds vary the RL sampling and the held-out set.", "",
              f"What was tried before this protocol (a development log): [NOTES.md]({'../h1/' if deviation else ''}NOTES.md)."]
    (out / "README.md").write_text("\n".join(lines))
