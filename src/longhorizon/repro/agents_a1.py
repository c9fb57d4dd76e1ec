"""Agents-A1: on-policy distillation from teachers routed by task domain vs one teacher and vs no distillation.

Claim checked: a weak student trained on mixed-domain agent tasks by on-policy distillation, each
task's tokens scored by the teacher of its domain (``A_l = -(log pi_s - log pi_t)`` at the student's
own action tokens, :class:`longhorizon.lm.agents.opd.RoutedDistillation`), reaches a higher held-out
success than the same distillation from a single teacher for every domain, and than RL on the
outcome without distillation (GRPO, trajectory credit).

Protocol (:mod:`longhorizon.repro.agent_common`): two domains of the search environment, 1-hop and
2-hop questions (each row tagged with a ``domain`` column); the student is a weak warm start (few
teacher-forcing steps on noisy expert episodes of both domains); each domain's teacher is a stronger
warm start trained longer on that domain alone; the single-teacher arm uses the 2-hop teacher for
both domains. The three arms train from the same student warm start with equal steps, tasks and
episodes (``beta = 0``), then are scored greedily on held-out tasks of each domain.

Verdict: judged only when an arm's mean success (over the two domains) improves on the student's
warm start by more than two standard errors (binomial over held-out tasks and seeds), else
inconclusive; it holds when the routed arm's mean success exceeds both baselines' by more than one
standard error of the difference, is contradicted when a baseline exceeds it by more than that, and
is "not shown" otherwise.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.distill import Teacher, VocabularyMap
from longhorizon.lm.agents.opd import RoutedDistillation
from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import agent_common as common

DOMAINS = {"1-hop": (("hops", 1),), "2-hop": (("hops", 2),)}


@dataclasses.dataclass(frozen=True)
class MixedDomains(common.AgentRepro):
    """Rows of the variants, each tagged ``domain`` = its variant's name (:data:`DOMAINS`)."""

    def rows(self, n: int, seed: int, **extra) -> list[dict]:
        names = {v: name for name, v in DOMAINS.items()}
        rows = super().rows(n, seed, **extra)
        return [{**r, "domain": names.get((("hops", r["hops"]),), f"{r['hops']}-hop")} for r in rows]


AGENT = AgentConfig(tool_format="tags", describe_tools=False, max_turns=4, max_action_tokens=40, max_context_tokens=1536,
                    length_bucket=256)
# sized for ~20 minutes on a loaded 2-core machine: one seed, 8 steps, 128-episode warm starts
SETUP = MixedDomains(env="search", variants=tuple(DOMAINS.values()), agent=AGENT, demos=128, demo_noise=0.5,
                     warm_steps=60, steps=8, seeds=1, eval_tasks=32)
TEACHER_STEPS, TEACHER_DEMOS = 200, 128
QUICK = dataclasses.replace(SETUP, demos=8, warm_steps=5, train_tasks=4, eval_tasks=2, steps=1, prompts_per_step=2,
                            num_generations=2, seeds=1, warm_batch=4)
QUICK_TEACHER = (10, 8)
ROUTED, SINGLE, NONE = "routed multi-teacher", "single teacher (2-hop)", "no distillation (GRPO)"


def teacher_setup(setup: MixedDomains, domain: str, quick: bool) -> common.AgentRepro:
    steps, demos = QUICK_TEACHER if quick else (TEACHER_STEPS, TEACHER_DEMOS)
    return dataclasses.replace(setup, variants=(DOMAINS[domain],), warm_steps=steps, demos=demos, demo_noise=0.3)


def arms(teachers: dict) -> dict:
    return {ROUTED: {"token_advantages": RoutedDistillation(teachers)},
            SINGLE: {"token_advantages": RoutedDistillation({"all": teachers["2-hop"]}, default="all")},
            NONE: {}}


def run(out_dir: str, quick: bool = False, setup: MixedDomains | None = None) -> dict:
    setup = setup or (QUICK if quick else SETUP)
    out = Path(out_dir)
    held = {d: [r for r in setup.rows(2 * setup.eval_tasks, 10_000) if r["domain"] == d][: setup.eval_tasks // 2 or 1]
            for d in DOMAINS}
    warm, teacher_success = [], {d: [] for d in DOMAINS}
    success = {}
    for seed in range(setup.seeds):
        student = common.warm_policy(setup, seed)
        warm.append({d: common.evaluate(student, student.params, setup, rows)["success"] for d, rows in held.items()})
        teachers = {}
        for d in DOMAINS:
            t = common.warm_policy(teacher_setup(setup, d, quick), seed)
            teacher_success[d].append(common.evaluate(t, t.params, setup, held[d])["success"])
            teachers[d] = Teacher(t.params, t.model_cfg, VocabularyMap(student.tokenizer, t.tokenizer))
        for arm, options in arms(teachers).items():
            slug = {ROUTED: "routed", SINGLE: "single", NONE: "grpo"}[arm]
            # the spine's own evaluation is bookkeeping (one task); the per-domain scores are taken below
            result = common.train_arm(out / "runs" / f"{slug}-seed{seed}", student, setup,
                                      CreditConfig(credit="trajectory"), seed=seed, held=held["1-hop"][:1],
                                      keep_params=True, spec_options=options)
            success.setdefault(arm, []).append(
                {d: common.evaluate(student, result["params"], setup, rows)["success"] for d, rows in held.items()})
    summary = summarise(setup, held, warm, teacher_success, success)
    plot(out / "agents_a1.png", summary)
    common.write(out, summary, report(setup, summary, quick))
    return summary


def summarise(setup, held, warm, teacher_success, success) -> dict:
    n = sum(len(r) for r in held.values())
    per_domain = {arm: {d: float(np.mean([s[d] for s in runs])) for d in DOMAINS} for arm, runs in success.items()}
    mean = {arm: float(np.mean([np.mean(list(s.values())) for s in runs])) for arm, runs in success.items()}
    warm_mean = float(np.mean([np.mean(list(w.values())) for w in warm]))
    se = float(np.sqrt(max(warm_mean * (1 - warm_mean), 1 / n) / (n * setup.seeds)))
    se_diff = float(np.sqrt(2) * se)
    gaps = {arm: mean[ROUTED] - mean[arm] for arm in (SINGLE, NONE)}
    if max(mean.values()) - warm_mean <= 2 * se:
        verdict = (f"inconclusive: no arm improved on the student's warm start ({warm_mean:.2f}) by more than two "
                   f"standard errors ({2 * se:.2f}) at this scale")
    elif min(gaps.values()) > se_diff:
        verdict = (f"holds: routed {mean[ROUTED]:.2f} vs single teacher {mean[SINGLE]:.2f} and no distillation "
                   f"{mean[NONE]:.2f}")
    elif min(gaps.values()) < -se_diff:
        worse = min(gaps, key=gaps.get)
        verdict = f"contradicted: {worse} {mean[worse]:.2f} beats routed {mean[ROUTED]:.2f} by more than {se_diff:.2f}"
    else:
        verdict = (f"not shown: routed {mean[ROUTED]:.2f} vs single teacher {mean[SINGLE]:.2f} and no distillation "
                   f"{mean[NONE]:.2f}, not all apart by one standard error of the difference ({se_diff:.2f})")
    return {"claims": {"routed multi-teacher distillation beats a single teacher and no distillation": verdict},
            "verdict": verdict, "warm_start_success": {d: float(np.mean([w[d] for w in warm])) for d in DOMAINS},
            "warm_start_mean": warm_mean, "teacher_success": {d: float(np.mean(v)) for d, v in teacher_success.items()},
            "success": success, "success_per_domain": per_domain, "success_mean": mean, "standard_error": se,
            "held_out_tasks": {d: len(r) for d, r in held.items()}, "setup": dataclasses.asdict(setup)}


def plot(path: Path, summary) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = {"student warm start": summary["warm_start_success"], **summary["success_per_domain"],
            "its domain's teacher": summary["teacher_success"]}
    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.8 / len(bars)
    for k, (label, values) in enumerate(bars.items()):
        ax.bar(np.arange(len(DOMAINS)) + k * width, [values[d] for d in DOMAINS], width, label=label)
    ax.set_xticks(np.arange(len(DOMAINS)) + 0.4 - width / 2, list(DOMAINS))
    ax.set_ylabel("held-out success (greedy)")
    ax.set_title("Agents-A1: routed multi-teacher distillation, per domain")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(setup, summary, quick: bool) -> list[str]:
    steps, demos = QUICK_TEACHER if quick else (TEACHER_STEPS, TEACHER_DEMOS)
    lines = ["# agents-a1: routed multi-teacher on-policy distillation vs one teacher vs none", "",
             ("QUICK smoke test (numbers mean nothing). " if quick else "") + "Scale: student " + setup.scale()
             + f" Teachers: {steps} teacher-forcing steps on {demos} expert episodes of their domain alone.", "",
             f"Command: `longhorizon repro agents-a1{' --quick' if quick else ''}`", "",
             "| arm | " + " | ".join(f"{d} success" for d in DOMAINS) + " | mean |", "|---|" + "---|" * (len(DOMAINS) + 1),
             "| student warm start | " + " | ".join(f"{summary['warm_start_success'][d]:.3f}" for d in DOMAINS)
             + f" | {summary['warm_start_mean']:.3f} |",
             "| each domain's teacher | " + " | ".join(f"{summary['teacher_success'][d]:.3f}" for d in DOMAINS) + " | |"]
    for arm, values in summary["success_per_domain"].items():
        lines.append(f"| {arm} | " + " | ".join(f"{values[d]:.3f}" for d in DOMAINS)
                     + f" | {summary['success_mean'][arm]:.3f} |")
    lines += ["", "![held-out success per domain](agents_a1.png)", "", f"**Verdict**: {summary['verdict']}.", "",
              "Differences from the paper: Agents-A1 distils large LLM teachers into a student across real agent "
              "domains; here the domains are two task families of one environment (1-hop and 2-hop search: one "
              "agent spec has one environment class), the teachers are longer warm starts of the same 2-layer "
              "byte-level model (same tokenizer, so the vocabulary map is the identity), the single-teacher "
              "baseline is the 2-hop teacher, and distillation is pure (no outcome reward in the distilled arms). "
              "Standard errors are binomial over the held-out tasks and seeds."]
    return lines
