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

Verdicts: (1) holds when turns used increase with k and accuracy at k = 4 is below accuracy at
k = 1; (2) holds when the raised budget's accuracy is no lower than the tight one's at every k (within
one standard error) and higher at k = 4; (3) is judged only when the difference exceeds two
standard errors, either way.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import agent_common as common

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
    setup = setup or (QUICK if quick else SETUP)
    out = Path(out_dir)
    held = setup.rows(setup.eval_tasks, 10_000)
    warm, trained = [], []
    for seed in range(setup.seeds):
        policy = common.warm_policy(setup, seed)
        if seed == 0 or not setup.shared_warm_start:  # greedy: a shared warm start scores the same every time
            warm.append(evaluate_by_hops(policy, policy.params, setup))
        arm = common.train_arm(out / "runs" / f"rl-seed{seed}", policy, setup, CreditConfig(), seed=seed, held=held,
                               keep_params=True)
        trained.append(evaluate_by_hops(policy, arm["params"], setup))
    summary = summarise(setup, warm, trained)
    plot(out / "asearcher.png", summary)
    common.write(out, summary, report(setup, summary, quick))
    return summary


def _table(evals: list[dict], key: str) -> dict:
    """``{budget: {k: mean over seeds of summary[key]}}``."""
    return {b: {k: float(np.mean([e[b][k][key] for e in evals])) for k in HOPS} for b in evals[0]}


def summarise(setup, warm, trained) -> dict:
    n = setup.eval_tasks * setup.seeds
    acc, turns, acc_warm = _table(trained, "success"), _table(trained, "turns"), _table(warm, "success")
    tight, raised = list(budgets(1))

    def se(p):
        return float(np.sqrt(max(p * (1 - p), 1 / n) / n))

    t = turns[raised]
    solves = acc[raised][1] > 2 * se(acc[raised][1])
    c1 = (f"inconclusive: the agent solves too few 1-hop questions ({acc[raised][1]:.2f}) for a trend" if not solves else
          f"holds: turns {', '.join(f'{t[k]:.1f}' for k in HOPS)} for k = 1..4; accuracy {acc[raised][1]:.2f} at k=1, "
          f"{acc[raised][4]:.2f} at k=4" if all(b > a for a, b in zip([t[k] for k in HOPS], [t[k] for k in HOPS][1:]))
          and acc[raised][4] < acc[raised][1] else
          f"contradicted: turns {', '.join(f'{t[k]:.1f}' for k in HOPS)}, accuracy {acc[raised][1]:.2f} at k=1 and "
          f"{acc[raised][4]:.2f} at k=4")
    never_lower = all(acc[raised][k] >= acc[tight][k] - se(acc[tight][k]) for k in HOPS)
    c2 = (f"inconclusive: the agent solves too few 1-hop questions ({acc[raised][1]:.2f})" if not solves else
          f"holds: accuracy at k=4 {acc[raised][4]:.2f} (raised) vs {acc[tight][4]:.2f} (tight)"
          if never_lower and acc[raised][4] > acc[tight][4] else
          f"not shown: raised {', '.join(f'{acc[raised][k]:.2f}' for k in HOPS)} vs tight "
          f"{', '.join(f'{acc[tight][k]:.2f}' for k in HOPS)}")
    gain = float(np.mean([acc[raised][k] - acc_warm[raised][k] for k in HOPS]))
    se_gain = float(np.sqrt(2) * np.mean([se(acc_warm[raised][k]) for k in HOPS]) / np.sqrt(len(HOPS)))
    c3 = (f"inconclusive: RL changed mean accuracy by {gain:+.3f} (two standard errors {2 * se_gain:.3f})"
          if abs(gain) <= 2 * se_gain else
          (f"holds: RL raised mean accuracy by {gain:+.3f}" if gain > 0 else f"contradicted: RL lowered it by {gain:.3f}"))
    claims = {"agents use more turns and succeed less as questions need more hops": c1,
              "a larger turn budget never lowers accuracy and raises it on the hardest questions": c2,
              "RL with a generous budget raises accuracy over the warm start": c3}
    verdict = "; ".join(f"({i}) {v.split(':')[0]}" for i, v in enumerate(claims.values(), 1))
    return {"claims": claims, "verdict": verdict, "accuracy": acc, "turns": turns, "warm_start_accuracy": acc_warm,
            "warm_start_turns": _table(warm, "turns"), "rl_gain": gain, "setup": dataclasses.asdict(setup)}


def plot(path: Path, summary) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, b in enumerate(summary["accuracy"]):
        ax1.plot(HOPS, [summary["accuracy"][b][k] for k in HOPS], marker="o", color=f"C{i}", label=f"RL, {b}")
        ax1.plot(HOPS, [summary["warm_start_accuracy"][b][k] for k in HOPS], ls="--", color=f"C{i}",
                 label=f"warm start, {b}")
        ax2.plot(HOPS, [summary["turns"][b][k] for k in HOPS], marker="o", color=f"C{i}", label=f"RL, {b}")
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
            lines.append(f"| {label} | {b} | " + " | ".join(f"{acc[b][k]:.2f} / {turns[b][k]:.1f}" for k in HOPS) + " |")
    lines += ["", "![accuracy and turns](asearcher.png)", "", "**Verdicts**:", ""]
    lines += [f"- {claim}: {verdict}." for claim, verdict in summary["claims"].items()]
    lines += ["", "Differences from the paper: a 2-layer byte-level agent on a synthetic knowledge base with BM25 "
              "instead of 7B-32B models with web search; at most 10 turns instead of 128; synchronous RL here (the "
              "asynchronous engine's speed is measured in docs/benchmarks.md)."]
    return lines
