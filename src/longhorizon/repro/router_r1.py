"""Router-R1: a cost-weighted reward traces an accuracy-cost frontier of a routing agent.

Claim checked: with the reward ``r = format + outcome - w * cost`` (Router-R1), raising the cost
weight ``w`` lowers the trained router's cost per question (and its accuracy): the reward's weight
moves the policy along an accuracy-cost frontier.

Protocol (:mod:`longhorizon.repro.agent_common`): the router environment (questions of three
domains, four priced scripted models of uneven skill, tools ``route`` and ``answer``), a tiny agent
warm-started on the threshold expert's episodes (30% of its calls random, so the warm start is no
fixed point of the frontier), then one RL arm per ``w`` in :data:`WEIGHTS` from that same warm start
with equal steps, tasks and episodes; the arms differ only in the learning reward,
``CreditConfig(reward_weights=(("format", 1), ("outcome", 1), ("cost", -w)))``. Each arm is scored
greedily on held-out questions: accuracy (exact match) and mean cost (the sum of the prices paid).
The reference frontier is the scripted expert's threshold sweep (cheapest model whose accuracy in
the question's domain is at least the threshold) on the same questions. The paper trains
Qwen2.5-3B routing among real LLMs on QA benchmarks; here the agent is a 2-layer byte-level model
and the models are scripted.

Rules (:func:`judge`, :mod:`longhorizon.repro.claims`): each claim is a fitted slope over ``w`` of the per-seed
held-out cost (accuracy), its Student-t 95% interval over seeds (>= 3 to decide). The cost claim needs routers that
do the task (held-out accuracy >= 0.1 at every ``w``), the accuracy claim arms that learned (held-out accuracy off
the warm start, a rising training reward, GRPO groups with a signal); else ``no signal``.
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

PAPER = "Router-R1"

SETUP = common.AgentRepro(env="router", agent=AgentConfig(tool_format="tags", describe_tools=False, max_turns=3,
                                                          max_action_tokens=40, max_context_tokens=1024,
                                                          length_bucket=256),
                          demos=128, warm_steps=200, steps=16, seeds=1, eval_tasks=32)
QUICK = dataclasses.replace(SETUP, demos=8, warm_steps=10, train_tasks=4, eval_tasks=2, steps=1, prompts_per_step=2,
                            num_generations=2, seeds=1, warm_batch=4)
WEIGHTS = (0.0, 0.5, 1.5)
THRESHOLDS = (0.0, 0.5, 0.7, 0.85, 0.9, 0.95, 0.97, 0.99)
CLAIMS = ("raising the cost weight lowers the trained router's cost", "raising the cost weight lowers its accuracy")


def credit(w: float) -> CreditConfig:
    """Router-R1's reward with cost weight ``w`` as the learning reward."""
    return CreditConfig(reward_weights=(("format", 1.0), ("outcome", 1.0), ("cost", -float(w))))


def scores(policy, params, setup: common.AgentRepro, rows) -> dict:
    """Greedy held-out episodes: per-episode ``outcome`` (exact match) and ``cost`` lists, and the calls made."""
    import jax

    from longhorizon.lm.agents.rollout import MultiTurnRollout
    from longhorizon.lm.agents.spec import environment_class

    agent = dataclasses.replace(setup.agent, temperature=0.0)
    rollout = MultiTurnRollout(policy.model_cfg, policy.tokenizer, environment_class(setup.env), agent)
    trajs = rollout.run(params, list(rows), 1, jax.random.PRNGKey(0))
    return {"outcome": [float(t.reward_terms.get("outcome", 0.0)) for t in trajs],
            "cost": [float(t.reward_terms.get("cost", 0.0)) for t in trajs],
            "format": [float(t.reward_terms.get("format", 0.0)) for t in trajs]}


def expert_frontier(rows) -> dict:
    """The scripted expert's accuracy and mean cost for each threshold in :data:`THRESHOLDS`."""
    from longhorizon.lm.agents import envs
    from longhorizon.lm.agents.envs.router import Expert

    out = {}
    for th in THRESHOLDS:
        played = [envs.expert_episode("router", row, Expert(row, threshold=th))[0] for row in rows]
        out[f"{th:g}"] = {"accuracy": float(np.mean([e.reward_terms["outcome"] for e in played])),
                          "cost": float(np.mean([e.reward_terms["cost"] for e in played]))}
    return out


def run(out_dir: str, quick: bool = False, setup: common.AgentRepro | None = None) -> dict:
    setup, t0 = setup or (QUICK if quick else SETUP), time.perf_counter()
    out = Path(out_dir)
    held = setup.rows(setup.eval_tasks, 10_000)
    warm: dict = {"outcome": [], "cost": [], "format": []}
    arms = {w: {"outcome": [], "cost": [], "format": [], "rows": []} for w in WEIGHTS}
    for seed in range(setup.seeds):
        policy = common.warm_policy(setup, seed)
        for k, v in scores(policy, policy.params, setup, held).items():
            warm[k] += v
        for w in WEIGHTS:
            r = common.train_arm(out / "runs" / f"w{w:g}-seed{seed}", policy, setup, credit(w), seed=seed, held=held,
                                 keep_params=True)
            for k, v in scores(policy, r["params"], setup, held).items():
                arms[w][k] += v
            arms[w]["rows"].append(r["rows"])
    rows = {f"w={w:g}": a["rows"] for w, a in arms.items()}
    summary = common.finish(out, PAPER, "router-r1", setup, recorded(setup, warm, arms, expert_frontier(held)), judge,
                            lambda s: report(setup, s, quick), quick, rows, time.perf_counter() - t0)
    plot(out / "router_r1.png", summary)
    return summary


def recorded(setup, warm, arms, frontier) -> dict:
    """The run's numbers: pooled means +- SE over held-out episodes, and per seed (each seed scores ``eval_tasks``)."""
    n = setup.eval_tasks
    per_seed = lambda v: [float(np.mean(v[i:i + n])) for i in range(0, len(v), n)]  # noqa: E731
    stats = {f"{w:g}": {"accuracy": common.mean_se(a["outcome"]), "cost": common.mean_se(a["cost"]),
                        "accuracy_per_seed": per_seed(a["outcome"]), "cost_per_seed": per_seed(a["cost"]),
                        "answered": float(np.mean(a["format"])),
                        "train_cost_last": float(np.mean([rs[-1].get("reward_cost", 0.0) for rs in a["rows"]]))}
             for w, a in arms.items()}
    curves = {f"{w:g}": [float(np.mean([rs[i].get("reward_cost", 0.0) for rs in a["rows"]]))
                         for i in range(min(len(rs) for rs in a["rows"]))] for w, a in arms.items()}
    return {"warm_start": {"accuracy": common.mean_se(warm["outcome"]), "cost": common.mean_se(warm["cost"]),
                           "accuracy_per_seed": per_seed(warm["outcome"]), "answered": float(np.mean(warm["format"]))},
            "by_weight": stats, "train_cost_curves": curves, "expert_frontier": frontier, "weights": list(WEIGHTS),
            "setup": dataclasses.asdict(setup), "training": common.training({f"w={w:g}": a["rows"] for w, a in arms.items()})}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (module docstring); a summary without per-seed numbers (one
    seed) uses its means, which are that seed's."""
    setup, warm, weights = L["setup"], L["warm_start"], [f"{w:g}" for w in L["weights"]]
    stats = L.get("by_weight") or L["arms"]  # "arms" in a summary written before the claims schema
    seeds = lambda stats, k: stats[f"{k}_per_seed"] if f"{k}_per_seed" in stats else [stats[k][0]]  # noqa: E731
    acc = {w: seeds(stats[w], "accuracy") for w in weights}
    cost = {w: seeds(stats[w], "cost") for w in weights}
    floors = [C.task_floor(f"w={w}", acc[w], C.TASK_FLOOR) for w in weights]
    learned = {w: common.learned(f"w={w}", L, seeds(warm, "accuracy"), acc[w], "held-out accuracy") for w in weights}
    x = [float(w) for w in weights]
    claims = [C.judge(CLAIMS[0], C.trend(x, np.array([cost[w] for w in weights]).T, direction="decreasing"), floors, quick=quick),
              C.judge(CLAIMS[1], C.trend(x, np.array([acc[w] for w in weights]).T, direction="decreasing"),
                      [s for w in weights for s in learned[w]], quick=quick)]
    arms = {f"w={w}": C.arm(setup["steps"], setup["seeds"], f, *learned[w]) for w, f in zip(weights, floors)}
    return claims, arms


def plot(path: Path, summary) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    ex = summary["expert_frontier"]
    ax.plot([v["cost"] for v in ex.values()], [v["accuracy"] for v in ex.values()], "k--", marker="s", ms=3,
            label="scripted expert, threshold sweep")
    for w, s in summary["by_weight"].items():
        ax.errorbar(s["cost"][0], s["accuracy"][0], xerr=s["cost"][1], yerr=s["accuracy"][1], marker="o", capsize=2,
                    label=f"RL, w={w}")
    ws = summary["warm_start"]
    ax.errorbar(ws["cost"][0], ws["accuracy"][0], xerr=ws["cost"][1], yerr=ws["accuracy"][1], marker="x", color="grey",
                capsize=2, label="warm start")
    ax.set_xlabel("mean cost per question (held out)")
    ax.set_ylabel("accuracy (held out, greedy)")
    ax.set_title("router: accuracy-cost frontier as the cost weight w changes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(setup, summary, quick: bool) -> list[str]:
    ws = summary["warm_start"]
    lines = ["# router-r1: the cost weight of Router-R1's reward traces an accuracy-cost frontier", "",
             ("QUICK smoke test (numbers mean nothing). " if quick else "") + "Scale: " + setup.scale(), "",
             f"Command: `longhorizon repro router-r1{' --quick' if quick else ''}`", "",
             "| policy | held-out accuracy | mean cost | answered | last training batch's cost |",
             "|---|---|---|---|---|",
             f"| warm start | {ws['accuracy'][0]:.3f} ± {ws['accuracy'][1]:.3f} | "
             f"{ws['cost'][0]:.3f} ± {ws['cost'][1]:.3f} "
             f"| {ws['answered']:.2f} | |"]
    for w, s in summary["by_weight"].items():
        lines.append(f"| RL, w={w} | {s['accuracy'][0]:.3f} ± {s['accuracy'][1]:.3f} | {s['cost'][0]:.3f} ± "
                     f"{s['cost'][1]:.3f} | {s['answered']:.2f} | {s['train_cost_last']:.3f} |")
    lines += ["", "Reference: the scripted expert's threshold sweep on the same questions.", "",
              "| threshold | accuracy | mean cost |", "|---|---|---|"]
    lines += [f"| {th} | {v['accuracy']:.3f} | {v['cost']:.3f} |" for th, v in summary["expert_frontier"].items()]
    lines += ["", "![accuracy vs cost](router_r1.png)", "", "## Verdict", "", *common.verdict_lines(summary), "",
              "Differences from the paper: a 2-layer byte-level router over four scripted models (prices 0.02-0.8, "
              "accuracies by domain) instead of Qwen2.5 routing among real LLMs; one route-then-answer round is "
              "enough here, so multi-round routing is possible but not needed; ± is the standard error over held-out "
              "episodes pooled over seeds."]
    return lines
