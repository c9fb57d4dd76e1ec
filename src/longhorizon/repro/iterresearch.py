"""IterResearch: a reconstructed workspace keeps the context bounded; EAPO's discount of the outcome.

Claims checked:

1. *Mechanism.* With the workspace strategy (each round's context rebuilt from the question, the
   evolving report and the last action and observation) the context no longer grows with the number
   of rounds, while the full history grows linearly. Measured on expert episodes of the research
   environment (``items`` lookups and one answer) for 2 to 16 items: the longest context of an
   episode, in tokens. Deterministic; no learning involved.
2. *Learning.* At equal RL budget from warm starts of equal quality, the workspace agent is no
   worse than the full-history agent (the paper: better, at long horizons).
3. *EAPO.* Giving round t of T the reward gamma^(T-t) R_T (efficiency-aware policy optimisation)
   instead of R_T on every round keeps success and shortens episodes.

Protocol (:mod:`longhorizon.repro.agent_common`): research tasks with ``items`` cities (max
population), a tiny warm-started agent per context strategy (its expert writes a synthesised
report in workspace mode), three RL arms (full / trajectory credit, workspace / trajectory,
workspace / EAPO with gamma 0.9), held-out success and turns, greedy. The paper trains 30B models
on deep-research benchmarks with real web search over up to 2048 rounds; here rounds are <= 17.

Rules (:func:`judge`): (1) an agreement on the measured growth from 2 to 16 items, thresholds stated before the
run: the workspace's longest context grows at most 1.25x, the full history's at least 2x. (2) the workspace arm's
per-seed success minus the full arm's, paired over seeds, its Student-t 95% interval above -0.05 (>= 3 seeds).
(3) both: EAPO's success non-inferior by the same margin, and its held-out episodes shorter. (2) and (3) need
both arms compared to have learned (held-out success above their warm start or a rising training reward, GRPO
groups with a signal), else ``no signal``.
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

PAPER = "IterResearch"
CLAIMS = ("the workspace keeps the context bounded while the full history grows",
          "the workspace agent learns no worse than the full-history agent", "EAPO keeps success and shortens episodes")

AGENT = AgentConfig(tool_format="tags", describe_tools=False, max_turns=7, max_action_tokens=64, max_context_tokens=1536,
                    length_bucket=256)
SETUP = common.AgentRepro(env="research", task_args=(("items", 4),), agent=AGENT, shared_warm_start=True)
QUICK = dataclasses.replace(SETUP, demos=8, warm_steps=10, train_tasks=4, eval_tasks=2, steps=1, prompts_per_step=2,
                            num_generations=2, seeds=1, warm_batch=4)
ITEMS = (2, 4, 8, 16)
ARMS = {"full history": ("full", CreditConfig()),
        "workspace": ("workspace", CreditConfig()),
        "workspace + EAPO (gamma 0.9)": ("workspace", CreditConfig(credit="eapo", gamma=0.9))}


def context_lengths(n_tasks: int = 8) -> dict:
    """Longest context of expert episodes per number of items, full history vs workspace (claim 1)."""
    from longhorizon.lm.agents import envs
    from longhorizon.lm.agents.demos import demonstrations
    from longhorizon.lm.policy import tiny_random

    tiny, spec = tiny_random(), envs.get("research")
    out: dict = {"full": {}, "workspace": {}, "success": {}}
    for items in ITEMS:
        rows = spec.make_tasks(n_tasks, seed=0, items=items)
        for context in ("full", "workspace"):
            agent = dataclasses.replace(AGENT, context=context, max_turns=items + 2, max_context_tokens=2048)
            trajs = demonstrations(tiny.cfg, tiny.tokenizer, spec.cls, spec.expert, rows, agent)
            out[context][items] = int(np.mean([max(len(s) for s in t.sequences) for t in trajs]))
            out["success"][f"{context}-{items}"] = float(np.mean([t.reward for t in trajs]))
    return out


def run(out_dir: str, quick: bool = False, setup: common.AgentRepro | None = None) -> dict:
    setup, t0 = setup or (QUICK if quick else SETUP), time.perf_counter()
    out = Path(out_dir)
    lengths = context_lengths(2 if quick else 8)
    held = setup.rows(setup.eval_tasks, 10_000)
    warm = {c: [] for c in ("full", "workspace")}
    results = {arm: [] for arm in ARMS}
    for seed in range(setup.seeds):
        policies = {}
        for context in warm:
            agent = dataclasses.replace(setup.agent, context=context)
            policies[context] = common.warm_policy(setup, seed, agent=agent)
            if seed == 0 or not setup.shared_warm_start:  # greedy: a shared warm start scores the same every time
                warm[context].append(common.evaluate(policies[context], policies[context].params, setup, held,
                                                     agent=agent))
        for i, (arm, (context, credit)) in enumerate(ARMS.items()):
            agent = dataclasses.replace(setup.agent, context=context)
            results[arm].append(common.train_arm(out / "runs" / f"arm{i}-seed{seed}", policies[context], setup, credit,
                                                 seed=seed, held=held, agent=agent))
    rows = {arm: [r["rows"] for r in rs] for arm, rs in results.items()}
    summary = common.finish(out, PAPER, "iterresearch", setup, recorded(setup, lengths, warm, results), judge,
                            lambda s: report(setup, s, quick), quick, rows, time.perf_counter() - t0)
    plot(out / "iterresearch.png", lengths, summary)
    return summary


def recorded(setup, lengths, warm, results) -> dict:
    success = {arm: [r["summary"]["eval"]["success"] for r in rs] for arm, rs in results.items()}
    turns = {arm: [r["summary"]["eval"]["turns"] for r in rs] for arm, rs in results.items()}
    return {"context_tokens": {c: {str(k): v for k, v in lengths[c].items()} for c in ("full", "workspace")},
            "expert_success": lengths["success"],
            "warm_start_success": {c: float(np.mean([w["success"] for w in ws])) for c, ws in warm.items()},
            "final_success": success, "final_success_mean": {arm: float(np.mean(v)) for arm, v in success.items()},
            "held_out_turns": {arm: float(np.mean(v)) for arm, v in turns.items()}, "held_out_turns_per_seed": turns,
            "setup": dataclasses.asdict(setup), "training": common.training({a: [r["rows"] for r in rs] for a, rs in results.items()})}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (module docstring); a summary without per-seed turns uses the
    mean turns (one value: the episode-length part is then undecided)."""
    ctx, final, warm = L["context_tokens"], L["final_success"], L["warm_start_success"]
    full, work, eapo = list(ARMS)
    start = {a: warm["full" if a == full else "workspace"] for a in ARMS}
    signals = {a: common.learned(a, L, start[a], final[a]) for a in ARMS}
    turns = L.get("held_out_turns_per_seed") or {a: [t] for a, t in L["held_out_turns"].items()}
    growth = C.combine({"workspace grows at most 1.25x": C.agreement(ctx["workspace"]["16"] / ctx["workspace"]["2"], 1.25, 0.0, "below"),
                        "full history grows at least 2x": C.agreement(ctx["full"]["16"] / ctx["full"]["2"], 2.0, 0.0, "above")}, "part")
    claims = [C.judge(CLAIMS[0], growth, quick=quick),
              C.judge(CLAIMS[1], C.difference(final[work], final[full], margin=common.NON_INFERIOR),
                      signals[work] + signals[full], quick=quick),
              C.judge(CLAIMS[2], C.combine({"success kept": C.difference(final[eapo], final[work], margin=common.NON_INFERIOR),
                                            "episodes shorter": C.difference(turns[eapo], turns[work], higher_is_better=False)},
                                           "part"), signals[eapo] + signals[work], quick=quick)]
    return claims, {a: C.arm(L["setup"]["steps"], L["setup"]["seeds"], *s) for a, s in signals.items()}


def plot(path: Path, lengths, summary) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for context in ("full", "workspace"):
        ax1.plot(ITEMS, [lengths[context][i] for i in ITEMS], marker="o", label=context)
    ax1.set_xlabel("items (rounds - 1)")
    ax1.set_ylabel("longest context (tokens)")
    ax1.set_title("expert episodes: context per strategy")
    ax1.legend(fontsize=8)
    arms = list(summary["final_success_mean"])
    ax2.bar(range(len(arms)), [summary["final_success_mean"][a] for a in arms], color=["C0", "C1", "C2"])
    for c, x in (("full", 0), ("workspace", 1)):
        ax2.plot([x - 0.4, x + 0.4], [summary["warm_start_success"][c]] * 2, "k--")
    ax2.set_xticks(range(len(arms)), [a.replace(" + ", "\n+ ") for a in arms], fontsize=7)
    ax2.set_ylabel("held-out success (greedy)")
    ax2.set_title("after RL (dashed: warm start)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(setup, summary, quick: bool) -> list[str]:
    ctx = summary["context_tokens"]
    lines = ["# iterresearch: reconstructed workspace vs full history; EAPO", "",
             ("QUICK smoke test (numbers mean nothing). " if quick else "") + "Scale: " + setup.scale(), "",
             f"Command: `longhorizon repro iterresearch{' --quick' if quick else ''}`", "",
             "Longest context of expert episodes (tokens, mean over tasks):", "",
             "| items | " + " | ".join(str(i) for i in ITEMS) + " |", "|---|" + "---|" * len(ITEMS),
             "| full history | " + " | ".join(str(ctx["full"][str(i)]) for i in ITEMS) + " |",
             "| workspace | " + " | ".join(str(ctx["workspace"][str(i)]) for i in ITEMS) + " |", "",
             f"RL on {dict(setup.task_args)['items']}-item tasks:", "",
             "| arm | held-out success (per seed) | mean | held-out turns |", "|---|---|---|---|"]
    for c, v in summary["warm_start_success"].items():
        lines.append(f"| warm start ({c}) | | {v:.3f} | |")
    for arm, values in summary["final_success"].items():
        lines.append(f"| {arm} | {', '.join(f'{v:.3f}' for v in values)} | {summary['final_success_mean'][arm]:.3f} | "
                     f"{summary['held_out_turns'][arm]:.2f} |")
    lines += ["", "![context and success](iterresearch.png)", "", "## Verdict", "", *common.verdict_lines(summary)]
    lines += ["", "Differences from the paper: a 2-layer byte-level agent and a synthetic lookup-and-aggregate task "
              "instead of 30B models on deep-research benchmarks; the workspace report of the warm start is the "
              "expert's synthesis (best so far and how many were looked up), which the agent must learn to update; "
              "EAPO is applied as per-round rewards gamma^(T-t) R_T normalised over the group's rounds."]
    return lines
