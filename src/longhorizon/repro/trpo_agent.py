"""Mobile-Agent-v3's trajectory-aware relative policy optimisation (TRPO) vs per-turn advantages.

Claim checked: in multi-turn agent RL with a sparse outcome, one group-normalised advantage per
trajectory, spread over all of its turns' action tokens (TRPO), trains at least as well as
turn-level credit, where each turn gets the group-normalised return-to-go of dense per-turn rewards
(milestone rewards, MiRA-style, plus the outcome at the last turn).

Protocol (:mod:`longhorizon.repro.agent_common`): the search environment (multi-hop questions over
a BM25-indexed synthetic knowledge base, ``hops`` lookups each), a warm-started tiny agent, two RL
arms from the same warm start with equal steps, tasks and episodes; held-out success (greedy,
exact match) at the end and during training. The paper trains a 7B GUI agent on real phone and
desktop tasks; here the agent is a 2-layer byte-level model and the tasks are synthetic.

Verdict: the claim is judged only when at least one arm improves on the warm start by more than
two standard errors of the held-out success; it holds when TRPO's final success (mean over seeds)
is no lower than the per-turn arm's minus the standard error of their difference, else it is
contradicted.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import agent_common as common

SETUP = common.AgentRepro(env="search", task_args=(("hops", 2),),
                          agent=AgentConfig(tool_format="tags", describe_tools=False, max_turns=4, max_action_tokens=40,
                                            max_context_tokens=1536, length_bucket=256),
                          shared_warm_start=True)
QUICK = dataclasses.replace(SETUP, demos=8, warm_steps=10, train_tasks=4, eval_tasks=2, steps=1, prompts_per_step=2,
                            num_generations=2, seeds=1, warm_batch=4)
ARMS = {"trajectory (TRPO)": CreditConfig(credit="trajectory"),
        "per-turn (milestones + outcome)": CreditConfig(credit="turn", milestone_bonus=0.5)}


def run(out_dir: str, quick: bool = False, setup: common.AgentRepro | None = None) -> dict:
    setup = setup or (QUICK if quick else SETUP)
    out = Path(out_dir)
    eval_every = max(1, setup.steps // 5)
    arms = {arm: ("trajectory" if arm.startswith("trajectory") else "turn", credit, {}) for arm, credit in ARMS.items()}
    warm, results, _ = common.run_arms(out, setup, arms, eval_every)
    summary = summarise(setup, warm, results, eval_every)
    plot(out / "trpo_agent.png", results, warm, eval_every)
    common.write(out, summary, report(setup, summary, quick))
    return summary


def _final(result: dict) -> float:
    return float(result["summary"]["eval"]["success"])


def summarise(setup, warm, results, eval_every) -> dict:
    n = setup.eval_tasks
    warm_success = float(np.mean([w["success"] for w in warm]))
    finals = {arm: [_final(r) for r in rs] for arm, rs in results.items()}
    means = {arm: float(np.mean(v)) for arm, v in finals.items()}
    se_binom = np.sqrt(max(warm_success * (1 - warm_success), 1 / n) / (n * setup.seeds))
    (a, b) = list(finals)
    diff = np.asarray(finals[a]) - np.asarray(finals[b])
    se_diff = float(np.sqrt(2) * se_binom)
    improved = max(means.values()) - warm_success > 2 * se_binom
    if not improved:
        verdict = (f"inconclusive: neither arm improved on the warm start ({warm_success:.2f}) by more than two standard "
                   f"errors ({2 * se_binom:.2f}) at this scale")
    elif diff.mean() >= -se_diff:
        verdict = f"holds: TRPO {means[a]:.2f} vs per-turn {means[b]:.2f} (warm start {warm_success:.2f})"
    else:
        verdict = f"contradicted: TRPO {means[a]:.2f} < per-turn {means[b]:.2f} by more than {se_diff:.2f}"
    turns = {arm: float(np.mean([r["summary"]["eval"]["turns"] for r in rs])) for arm, rs in results.items()}
    return {"claims": {"trajectory-level advantages train at least as well as per-turn credit": verdict},
            "verdict": verdict, "warm_start_success": warm_success, "final_success": finals, "final_success_mean": means,
            "held_out_turns": turns, "standard_error": float(se_binom), "eval_every": eval_every,
            "setup": dataclasses.asdict(setup)}


def plot(path: Path, results, warm, eval_every) -> None:
    curves = {}
    for arm, rs in results.items():
        steps = [row["step"] for row in rs[0]["rows"] if "eval_success" in row]
        values = np.array([[row["eval_success"] for row in r["rows"] if "eval_success" in row] for r in rs])
        xs = [0] + steps
        ys = np.concatenate([[np.mean([w["success"] for w in warm])], values.mean(0)])
        es = np.concatenate([[0.0], values.std(0, ddof=1) / np.sqrt(len(rs)) if len(rs) > 1 else np.zeros(len(steps))])
        curves[arm] = (xs, ys, es)
    common.plot_curves(path, curves, "RL step", "held-out success (greedy)", "search agent, 2 hops: TRPO vs per-turn")


def report(setup, summary, quick: bool) -> list[str]:
    lines = ["# trpo-agent: trajectory-level vs per-turn advantages (Mobile-Agent-v3's TRPO)", "",
             ("QUICK smoke test (numbers mean nothing). " if quick else "") + "Scale: " + setup.scale(), "",
             f"Command: `longhorizon repro trpo-agent{' --quick' if quick else ''}`", "",
             "| arm | final held-out success (per seed) | mean | held-out turns |", "|---|---|---|---|",
             f"| warm start | | {summary['warm_start_success']:.3f} | |"]
    for arm, values in summary["final_success"].items():
        lines.append(f"| {arm} | {', '.join(f'{v:.3f}' for v in values)} | {summary['final_success_mean'][arm]:.3f} | "
                     f"{summary['held_out_turns'][arm]:.2f} |")
    lines += ["", "![held-out success](trpo_agent.png)", "", f"**Verdict**: {summary['verdict']}.", "",
              "Differences from the paper: a 2-layer byte-level agent on synthetic multi-hop search instead of a 7B GUI "
              "agent on phone/desktop tasks; the per-turn arm uses milestone rewards (one per hop found) as its dense "
              "signal; standard errors are binomial over the held-out tasks and seeds."]
    return lines
