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

Rule (:func:`judge`): the routed arm's per-seed mean success (over the domains) minus each other arm's, paired
over seeds, Student-t 95% intervals above 0 (>= 3 seeds); ``no signal`` unless the teachers do their domain
(success >= 0.1) and every arm learned (held-out success above the warm start or a rising training reward, GRPO
groups with a signal).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.lm.agents.distill import Teacher, VocabularyMap
from longhorizon.lm.agents.opd import RoutedDistillation
from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import CreditConfig
from longhorizon.repro import agent_common as common
from longhorizon.repro import claims as C

PAPER = "Agents-A1"
CLAIM = "routed multi-teacher distillation beats a single teacher and no distillation"

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
    setup, t0 = setup or (QUICK if quick else SETUP), time.perf_counter()
    out = Path(out_dir)
    train_rows: dict = {}
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
            train_rows.setdefault(arm, []).append(result["rows"])
            success.setdefault(arm, []).append(
                {d: common.evaluate(student, result["params"], setup, rows)["success"] for d, rows in held.items()})
    summary = common.finish(out, PAPER, "agents-a1", setup, recorded(setup, held, warm, teacher_success, success, train_rows),
                            judge, lambda s: report(setup, s, quick), quick, train_rows, time.perf_counter() - t0)
    plot(out / "agents_a1.png", summary)
    return summary


def recorded(setup, held, warm, teacher_success, success, rows) -> dict:
    return {"warm_start_success": {d: float(np.mean([w[d] for w in warm])) for d in DOMAINS},
            "warm_start_mean": float(np.mean([np.mean(list(w.values())) for w in warm])),
            "teacher_success": {d: float(np.mean(v)) for d, v in teacher_success.items()}, "success": success,
            "success_per_domain": {arm: {d: float(np.mean([s[d] for s in runs])) for d in DOMAINS} for arm, runs in success.items()},
            "success_mean": {arm: float(np.mean([np.mean(list(s.values())) for s in runs])) for arm, runs in success.items()},
            "held_out_tasks": {d: len(r) for d, r in held.items()}, "setup": dataclasses.asdict(setup),
            "training": common.training(rows)}


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers (module docstring)."""
    teachers = C.task_floor("teachers", list(L["teacher_success"].values()), C.TASK_FLOOR)
    per_seed = {a: [float(np.mean(list(s.values()))) for s in runs] for a, runs in L["success"].items()}
    signals = {a: common.learned(a, L, L["warm_start_mean"], v) for a, v in per_seed.items()}
    routed, *others = list(per_seed)
    ruling = C.combine({f"vs {o}": C.difference(per_seed[routed], per_seed[o]) for o in others}, "baseline")
    claims = [C.judge(CLAIM, ruling, [teachers, *(s for ss in signals.values() for s in ss)], quick=quick)]
    return claims, {a: C.arm(L["setup"]["steps"], L["setup"]["seeds"], *s) for a, s in signals.items()}


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
    lines += ["", "![held-out success per domain](agents_a1.png)", "", "## Verdict", "", *common.verdict_lines(summary), "",
              "Differences from the paper: Agents-A1 distils large LLM teachers into a student across real agent "
              "domains; here the domains are two task families of one environment (1-hop and 2-hop search: one "
              "agent spec has one environment class), the teachers are longer warm starts of the same 2-layer "
              "byte-level model (same tokenizer, so the vocabulary map is the identity), the single-teacher "
              "baseline is the 2-hop teacher, and distillation is pure (no outcome reward in the distilled arms)."]
    return lines
