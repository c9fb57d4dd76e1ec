"""CANOPY: large same-task exploration with a KL anchor to the initial policy, loss on action tokens only.

Claim checked: with a large group of episodes on the same task per step and one update per batch,
a KL anchor ``beta * KL(pi || pi_0)`` to the initial policy keeps the trained agent close to its
start (lower KL to pi_0, entropy preserved) without losing held-out success.

Protocol (:mod:`longhorizon.repro.agent_common`): the search environment (2-hop questions over a
BM25-indexed synthetic knowledge base), a warm-started tiny agent, two RL arms from that same warm
start, ``beta = 0`` and ``beta = 0.05``, each with ``G = 16`` episodes of ONE task per step,
``num_iterations = 1`` and the loss on action tokens only (the agent trainer always masks the
environment's tokens). At the end each arm's policy samples one episode per held-out task at
temperature 1; on their action tokens x ~ pi we measure

    KL(pi || pi_0) ~ mean_x k3(x),   k3 = pi_0(x)/pi(x) - 1 - log(pi_0(x)/pi(x))   (core.kl.kl_k3)

and the policy's mean per-token entropy; the held-out success is greedy. The training curves show
the run rows' per-step ``entropy`` (of the batch's action tokens). The paper trains LLM agents with
large groups on hard tool tasks; here the agent is a 2-layer byte-level model.

Rules (:func:`judge`, paired over seeds, Student-t 95% intervals, >= 3 seeds): "closer to its start": the
anchored arm's per-seed KL to pi_0 below the unanchored arm's (``no signal`` unless the unanchored arm learned and
drifted at least MIN_DRIFT = 1e-3 nats from its start); "no success lost": the anchored arm's per-seed success
minus the unanchored arm's above -0.05 (``no signal`` unless both arms learned).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.policy_drift import policy_drift
from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import agent_common as common
from longhorizon.repro import claims as C

PAPER = "CANOPY"

SETUP = common.AgentRepro(env="search", task_args=(("hops", 2),),
                          agent=AgentConfig(tool_format="tags", describe_tools=False, max_turns=4, max_action_tokens=40,
                                            max_context_tokens=1536, length_bucket=256),
                          demos=128, warm_steps=200, steps=16, prompts_per_step=1, num_generations=16,
                          learning_rate=2e-4, seeds=1, eval_tasks=32)
QUICK = dataclasses.replace(SETUP, demos=8, warm_steps=10, train_tasks=4, eval_tasks=2, steps=1, prompts_per_step=1,
                            num_generations=4, seeds=1, warm_batch=4)
BETAS = (0.0, 0.05)
CLAIMS = ("the KL anchor keeps the policy closer to its start (lower KL to pi_0, entropy preserved)",
          "the KL anchor loses no held-out success")
MIN_DRIFT = 1e-3  # nats of KL(pi || pi_0) per token below which "drift" is numerical noise, not learning


def run(out_dir: str, quick: bool = False, setup: common.AgentRepro | None = None) -> dict:
    setup, t0 = setup or (QUICK if quick else SETUP), time.perf_counter()
    out = Path(out_dir)
    held = setup.rows(setup.eval_tasks, 10_000)
    warm, warm_entropy = [], []
    arms = {b: {"success": [], "kl": [], "entropy": [], "rows": [], "kl_per_seed": []} for b in BETAS}
    for seed in range(setup.seeds):
        policy = common.warm_policy(setup, seed)
        warm.append(common.evaluate(policy, policy.params, setup, held)["success"])
        warm_entropy += policy_drift(policy, policy.params, setup.env, setup.agent, held, seed)["entropy"]
        for b in BETAS:
            r = common.train_arm(out / "runs" / f"beta{b:g}-seed{seed}", policy, dataclasses.replace(setup, beta=b),
                                 CreditConfig(), seed=seed, held=held, keep_params=True)
            arms[b]["success"].append(float(r["summary"]["eval"]["success"]))
            d = policy_drift(policy, r["params"], setup.env, setup.agent, held, seed)
            arms[b]["kl"] += d["kl"]
            arms[b]["kl_per_seed"].append(float(np.mean(d["kl"])))
            arms[b]["entropy"] += d["entropy"]
            arms[b]["rows"].append(r["rows"])
    rows = {f"beta={b:g}": a["rows"] for b, a in arms.items()}
    summary = common.finish(out, PAPER, "canopy", setup, recorded(setup, warm, warm_entropy, arms), judge,
                            lambda s: report(setup, s, quick), quick, rows, time.perf_counter() - t0)
    plot(out / "canopy.png", arms)
    return summary


def recorded(setup, warm, warm_entropy, arms) -> dict:
    curves = {f"{b:g}": {k: [float(np.mean([rs[i].get(k, np.nan) for rs in a["rows"]]))
                             for i in range(min(len(rs) for rs in a["rows"]))] for k in ("entropy", "kl", "reward")}
              for b, a in arms.items()}
    return {"warm_start_success": float(np.mean(warm)), "warm_start_entropy": float(np.mean(warm_entropy)),
            "final_success": {f"{b:g}": a["success"] for b, a in arms.items()},
            "kl_to_start": {f"{b:g}": common.mean_se(a["kl"]) for b, a in arms.items()},
            "kl_to_start_per_seed": {f"{b:g}": a["kl_per_seed"] for b, a in arms.items()},
            "entropy": {f"{b:g}": common.mean_se(a["entropy"]) for b, a in arms.items()},
            "training_curves": curves, "betas": list(BETAS), "setup": dataclasses.asdict(setup),
            "training": common.training({f"beta={b:g}": a["rows"] for b, a in arms.items()})}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (module docstring); a summary without per-seed KLs (one seed)
    uses the pooled mean, which is that seed's."""
    betas = [f"{b:g}" for b in L["betas"]]
    free, anchored = betas[0], betas[-1]
    curve = lambda b: None if "training" in L else [L["training_curves"][b]["reward"]]  # noqa: E731
    signals = {b: common.learned(f"beta={b}", L, L["warm_start_success"], L["final_success"][b], "training reward",
                                 curve=curve(b)) for b in betas}
    kl = L.get("kl_to_start_per_seed") or {b: [v[0] for v in [L["kl_to_start"][b]]] for b in betas}
    drift = {"arm": f"beta={free}", "test": f"KL to pi_0 >= {MIN_DRIFT:g} nats per token", "kl": float(np.mean(kl[free])),
             "moved": float(np.mean(kl[free])) >= MIN_DRIFT,
             "what": f"beta={free}: KL to pi_0 {np.mean(kl[free]):.3g} nats, below {MIN_DRIFT:g} (no drift to hold back)"}
    claims = [C.judge(CLAIMS[0], C.difference(kl[anchored], kl[free], higher_is_better=False), [*signals[free], drift], quick=quick),
              C.judge(CLAIMS[1], C.difference(L["final_success"][anchored], L["final_success"][free], margin=common.NON_INFERIOR),
                      [s for ss in signals.values() for s in ss], quick=quick)]
    return claims, {f"beta={b}": C.arm(L["setup"]["steps"], L["setup"]["seeds"], *signals[b]) for b in betas}


def plot(path: Path, arms) -> None:
    curves = {}
    for b, a in arms.items():
        values = np.array([[row.get("entropy", np.nan) for row in rs] for rs in a["rows"]])
        es = values.std(0, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else np.zeros(values.shape[1])
        curves[f"beta {b:g}"] = (np.arange(1, values.shape[1] + 1), values.mean(0), es)
    common.plot_curves(path, curves, "RL step", "policy entropy on the batch's action tokens",
                       "search, 2 hops, one task per step: with and without a KL anchor")


def report(setup, summary, quick: bool) -> list[str]:
    lines = ["# canopy: a KL anchor under large same-task exploration (CANOPY)", "",
             ("QUICK smoke test (numbers mean nothing). " if quick else "") + "Scale: " + setup.scale()
             + " One task per step, one update per batch, loss on action tokens only.", "",
             f"Command: `longhorizon repro canopy{' --quick' if quick else ''}`", "",
             "| arm | final held-out success (per seed) | KL(pi, pi_0) per token | entropy per token |",
             "|---|---|---|---|",
             f"| warm start | {summary['warm_start_success']:.3f} | 0 | {summary['warm_start_entropy']:.3f} |"]
    for b in summary["final_success"]:
        kl, ent = summary["kl_to_start"][b], summary["entropy"][b]
        lines.append(f"| beta {b} | {', '.join(f'{v:.3f}' for v in summary['final_success'][b])} | "
                     f"{kl[0]:.3g} ± {kl[1]:.2g} | {ent[0]:.3f} ± {ent[1]:.3f} |")
    lines += ["", "![entropy over training](canopy.png)", "", "## Verdict", "", *common.verdict_lines(summary), "",
              "Differences from the paper: a 2-layer byte-level agent on synthetic 2-hop search instead of LLM "
              f"agents on real tool tasks; G={setup.num_generations} episodes of one task per step; KL and entropy "
              "are measured at the end on one "
              "sampled episode per held-out task (± standard errors over episodes and seeds)."]
    return lines
