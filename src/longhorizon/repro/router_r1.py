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

Verdict (per claim, on held-out episodes pooled over seeds; SE = the standard error of the
per-episode values): judged only when some arm's cost or accuracy differs from the warm start's by
more than two SE; "raising w lowers cost" holds when the cost at the largest ``w`` is below the cost
at ``w = 0`` by more than two SE of their difference and no step up in ``w`` raises the cost by more
than two SE; contradicted when the cost at the largest ``w`` is not lower; otherwise not shown.
"raising w lowers accuracy" is judged the same way on accuracy.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import agent_common as common

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
    setup = setup or (QUICK if quick else SETUP)
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
    summary = summarise(setup, warm, arms, expert_frontier(held))
    plot(out / "router_r1.png", summary)
    common.write(out, summary, report(setup, summary, quick))
    return summary


def _trend(what: str, values: dict, warm: list) -> str:
    """The verdict rule of the module docstring on per-episode ``values[w]`` (``what``: cost or accuracy)."""
    ws = sorted(values)
    m = {w: common.mean_se(values[w]) for w in ws}
    w_mean, w_se = common.mean_se(warm)
    moved = any(abs(m[w][0] - w_mean) > 2 * np.hypot(m[w][1], w_se) for w in ws)
    lo, hi = ws[0], ws[-1]
    drop = m[lo][0] - m[hi][0]
    se_drop = np.hypot(m[lo][1], m[hi][1])
    rises = [(a, b) for a, b in zip(ws, ws[1:]) if m[b][0] - m[a][0] > 2 * np.hypot(m[a][1], m[b][1])]
    tail = ", ".join(f"w={w:g}: {m[w][0]:.3f}" for w in ws) + f" (warm start {w_mean:.3f})"
    if not moved:
        return (f"inconclusive: no arm's {what} moved off the warm start's by more than two standard errors at "
                f"this scale; {tail}")
    if drop > 2 * se_drop and not rises:
        return f"holds: {what} falls as w rises; {tail}"
    if drop <= 0:
        return f"contradicted: {what} at w={hi:g} is not below {what} at w={lo:g}; {tail}"
    return (f"not shown: {what} falls by {drop:.3f}, within two standard errors ({2 * se_drop:.3f}) or not "
            f"monotone; {tail}")


def summarise(setup, warm, arms, frontier) -> dict:
    cost = _trend("cost", {w: a["cost"] for w, a in arms.items()}, warm["cost"])
    acc = _trend("accuracy", {w: a["outcome"] for w, a in arms.items()}, warm["outcome"])
    stats = {f"{w:g}": {"accuracy": common.mean_se(a["outcome"]), "cost": common.mean_se(a["cost"]),
                        "answered": float(np.mean(a["format"])),
                        "train_cost_last": float(np.mean([rs[-1].get("reward_cost", 0.0) for rs in a["rows"]]))}
             for w, a in arms.items()}
    curves = {f"{w:g}": [float(np.mean([rs[i].get("reward_cost", 0.0) for rs in a["rows"]]))
                         for i in range(min(len(rs) for rs in a["rows"]))] for w, a in arms.items()}
    verdict = f"cost: {cost.split(':')[0]}; accuracy: {acc.split(':')[0]}"
    return {"claims": {CLAIMS[0]: cost, CLAIMS[1]: acc}, "verdict": verdict,
            "warm_start": {"accuracy": common.mean_se(warm["outcome"]), "cost": common.mean_se(warm["cost"]),
                           "answered": float(np.mean(warm["format"]))},
            "arms": stats, "train_cost_curves": curves, "expert_frontier": frontier, "weights": list(WEIGHTS),
            "setup": dataclasses.asdict(setup)}


def plot(path: Path, summary) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    ex = summary["expert_frontier"]
    ax.plot([v["cost"] for v in ex.values()], [v["accuracy"] for v in ex.values()], "k--", marker="s", ms=3,
            label="scripted expert, threshold sweep")
    for w, s in summary["arms"].items():
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
    for w, s in summary["arms"].items():
        lines.append(f"| RL, w={w} | {s['accuracy'][0]:.3f} ± {s['accuracy'][1]:.3f} | {s['cost'][0]:.3f} ± "
                     f"{s['cost'][1]:.3f} | {s['answered']:.2f} | {s['train_cost_last']:.3f} |")
    lines += ["", "Reference: the scripted expert's threshold sweep on the same questions.", "",
              "| threshold | accuracy | mean cost |", "|---|---|---|"]
    lines += [f"| {th} | {v['accuracy']:.3f} | {v['cost']:.3f} |" for th, v in summary["expert_frontier"].items()]
    lines += ["", "![accuracy vs cost](router_r1.png)", ""]
    lines += [f"- **{claim}**: {verdict}" for claim, verdict in summary["claims"].items()]
    lines += ["", f"**Verdict**: {summary['verdict']}.", "",
              "Differences from the paper: a 2-layer byte-level router over four scripted models (prices 0.02-0.8, "
              "accuracies by domain) instead of Qwen2.5 routing among real LLMs; one route-then-answer round is "
              "enough here, so multi-round routing is possible but not needed; ± is the standard error over held-out "
              "episodes pooled over seeds."]
    return lines
