"""ASearcher: search agents need more turns as questions need more hops; a larger turn budget pays off.

Claims checked (ASearcher, Gao et al. 2025: "long-horizon search" with up to 128 turns per
trajectory, trained with fully asynchronous RL):

1. As questions need more lookups (k hops), the agent uses more turns and its accuracy falls.
2. Raising the turn budget (2k + 2 turns instead of k + 1, the least an error-free agent needs)
   does not lower accuracy, and raises it on the hardest questions.
3. RL with a generous turn budget raises accuracy over the warm start (over k = 1..4).

The asynchronous-vs-synchronous wall-clock claim is measured by ``benchmarks/agent_async_rollouts.py``
(docs/benchmarks.md), not here: at this scale a wall-clock difference comes from environment latency,
which the benchmark controls.

Protocol (:mod:`longhorizon.repro.agent_common`): the search environment (multi-hop questions over a
BM25-indexed synthetic knowledge base), a tiny agent warm-started on expert episodes of 1-3 hops,
RL on 1-3 hops with 8 turns, held-out questions of k = 1..4 hops played greedily with each budget.

Rules (:func:`judge`, per seed, Student-t 95% intervals over >= 3 seeds): (1) both fitted slopes over k, turns
rising and accuracy falling; (2) with the raised budget, accuracy at k = 4 above the tight budget's and at no k
below it by more than 0.05 (paired over seeds); (3) the RL agent's mean accuracy over k above the warm start's.
(1) and (2) need an RL agent that learned and does the task (held-out accuracy >= 0.1), else ``no signal``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import agent_common as common
from longhorizon.repro import claims as C

PAPER = "ASearcher"
CLAIMS = ("agents use more turns and succeed less as questions need more hops",
          "a larger turn budget never lowers accuracy and raises it on the hardest questions",
          "RL with a generous budget raises accuracy over the warm start")
RL = "RL (raised budget)"

HOPS = (1, 2, 3, 4)
AGENT = AgentConfig(tool_format="tags", describe_tools=False, max_turns=8, max_action_tokens=40,
                    max_context_tokens=2048, length_bucket=256)
SETUP = common.AgentRepro(env="search", variants=((("hops", 1),), (("hops", 2),), (("hops", 3),)), agent=AGENT,
                          eval_tasks=48, shared_warm_start=True)
QUICK = dataclasses.replace(SETUP, demos=8, warm_steps=10, train_tasks=4, eval_tasks=2, steps=1, prompts_per_step=2,
                            num_generations=2, seeds=1, warm_batch=4)


def budgets(k: int) -> dict[str, int]:
    return {"tight (k+1)": k + 1, "raised (2k+2)": 2 * k + 2}


def evaluate_by_hops(policy, params, setup) -> dict:
    """``{budget: {k: summary}}`` of greedy held-out episodes."""
    out: dict = {}
    for k in HOPS:
        rows = setup.rows(setup.eval_tasks, 20_000 + k, hops=k)
        for name, turns in budgets(k).items():
            agent = dataclasses.replace(setup.agent, max_turns=turns)
            out.setdefault(name, {})[k] = common.evaluate(policy, params, setup, rows, agent=agent)
    return out


def run(out_dir: str, quick: bool = False, setup: common.AgentRepro | None = None) -> dict:
    setup, t0 = setup or (QUICK if quick else SETUP), time.perf_counter()
    out = Path(out_dir)
    held = setup.rows(setup.eval_tasks, 10_000)
    warm, trained, rows = [], [], []
    for seed in range(setup.seeds):
        policy = common.warm_policy(setup, seed)
        if seed == 0 or not setup.shared_warm_start:  # greedy: a shared warm start scores the same every time
            warm.append(evaluate_by_hops(policy, policy.params, setup))
        arm = common.train_arm(out / "runs" / f"rl-seed{seed}", policy, setup, CreditConfig(), seed=seed, held=held,
                               keep_params=True)
        trained.append(evaluate_by_hops(policy, arm["params"], setup))
        rows.append(arm["rows"])
    summary = common.finish(out, PAPER, "asearcher", setup, recorded(setup, warm, trained, rows), judge,
                            lambda s: report(setup, s, quick), quick, {RL: rows}, time.perf_counter() - t0)
    plot(out / "asearcher.png", summary)
    return summary


def _table(evals: list[dict], key: str, per_seed: bool = False) -> dict:
    """``{budget: {k: mean over seeds of summary[key]}}`` (``per_seed``: the list over seeds)."""
    reduce = list if per_seed else (lambda v: float(np.mean(v)))
    return {b: {str(k): reduce([float(e[b][k][key]) for e in evals]) for k in HOPS} for b in evals[0]}


def recorded(setup, warm, trained, rows) -> dict:
    return {"accuracy": _table(trained, "success"), "turns": _table(trained, "turns"),
            "accuracy_per_seed": _table(trained, "success", True), "turns_per_seed": _table(trained, "turns", True),
            "warm_start_accuracy": _table(warm, "success"), "warm_start_turns": _table(warm, "turns"),
            "setup": dataclasses.asdict(setup), "training": common.training({RL: rows})}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (module docstring); a summary without per-seed numbers uses the
    means over seeds (one value each: undecided)."""
    tight, raised = list(L["accuracy"])
    hops = list(L["accuracy"][raised])
    acc = L.get("accuracy_per_seed") or {b: {k: [v] for k, v in t.items()} for b, t in L["accuracy"].items()}
    turns = L.get("turns_per_seed") or {b: {k: [v] for k, v in t.items()} for b, t in L["turns"].items()}
    rows = lambda table, b: np.array([table[b][k] for k in hops]).T  # noqa: E731  [seeds, hops]
    start = float(np.mean(list(L["warm_start_accuracy"][raised].values())))
    end = rows(acc, raised).mean(1)
    gates = common.learned(RL, L, start, end, "held-out accuracy") + [C.task_floor(RL, end, C.TASK_FLOOR)]
    x = [int(k) for k in hops]
    budget = {f"k={k} not lower": C.difference(acc[raised][k], acc[tight][k], margin=common.NON_INFERIOR) for k in hops}
    claims = [C.judge(CLAIMS[0], C.combine({"turns rise with k": C.trend(x, rows(turns, raised)),
                                            "accuracy falls with k": C.trend(x, rows(acc, raised), direction="decreasing")},
                                           "part"), gates, quick=quick),
              C.judge(CLAIMS[1], C.combine({f"k={hops[-1]} higher": C.difference(acc[raised][hops[-1]], acc[tight][hops[-1]]),
                                            **budget}, "part"), gates, quick=quick),
              C.judge(CLAIMS[2], C.difference(end, start), quick=quick)]
    return claims, {RL: C.arm(L["setup"]["steps"], L["setup"]["seeds"], *gates)}


def plot(path: Path, summary) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, b in enumerate(summary["accuracy"]):
        ax1.plot(HOPS, [summary["accuracy"][b][str(k)] for k in HOPS], marker="o", color=f"C{i}", label=f"RL, {b}")
        ax1.plot(HOPS, [summary["warm_start_accuracy"][b][str(k)] for k in HOPS], ls="--", color=f"C{i}",
                 label=f"warm start, {b}")
        ax2.plot(HOPS, [summary["turns"][b][str(k)] for k in HOPS], marker="o", color=f"C{i}", label=f"RL, {b}")
    ax1.set_xlabel("hops k")
    ax1.set_ylabel("held-out accuracy (greedy)")
    ax1.legend(fontsize=7)
    ax2.set_xlabel("hops k")
    ax2.set_ylabel("turns used")
    ax2.legend(fontsize=7)
    fig.suptitle("search agent: accuracy and turns vs hops, two turn budgets")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(setup, summary, quick: bool) -> list[str]:
    lines = ["# asearcher: turns and accuracy vs hops, with a tight and a raised turn budget", "",
             ("QUICK smoke test (numbers mean nothing). " if quick else "") + "Scale: " + setup.scale(), "",
             f"Command: `longhorizon repro asearcher{' --quick' if quick else ''}`", "",
             "| policy | budget | " + " | ".join(f"k={k} acc / turns" for k in HOPS) + " |",
             "|---|---|" + "---|" * len(HOPS)]
    for label, acc, turns in (("warm start", summary["warm_start_accuracy"], summary["warm_start_turns"]),
                              ("after RL", summary["accuracy"], summary["turns"])):
        for b in acc:
            lines.append(f"| {label} | {b} | " + " | ".join(f"{acc[b][str(k)]:.2f} / {turns[b][str(k)]:.1f}" for k in HOPS) + " |")
    lines += ["", "![accuracy and turns](asearcher.png)", "", "## Verdict", "", *common.verdict_lines(summary)]
    lines += ["", "Differences from the paper: a 2-layer byte-level agent on a synthetic knowledge base with BM25 "
              "instead of 7B-32B models with web search; at most 10 turns instead of 128; synchronous RL here (the "
              "asynchronous engine's speed is measured in docs/benchmarks.md)."]
    return lines
