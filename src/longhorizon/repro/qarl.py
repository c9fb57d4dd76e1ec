"""`longhorizon repro qarl`: a bounded-rationality curriculum vs RARL (Reddi et al. 2023), tabular tier.

The paper's claim: training the protagonist against an adversary whose rationality grows by a
curriculum (QARL: the adversary's entropy temperature drawn from a self-paced Gamma distribution that
moves toward ~0) gives a more robust protagonist than training against a fully rational adversary from
the start (RARL). Here, on the adversarial-wind corridor of :mod:`longhorizon.games.qarl`:

1. the exact side: the entropy-regularised game's QRE by soft Shapley iteration at several adversary
   temperatures (fixed-point residual, contraction), and the worst case of each QRE protagonist;
2. three learners (:mod:`longhorizon.games.qarl_learners`: two soft Q-learners learning from samples,
   temperature-conditioned) with the same step budget: RARL, a linear schedule, QARL's teacher; after
   every chunk the protagonist's exact worst-case value (its value against an exact best response).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from longhorizon.games import qarl
from longhorizon.games.qarl_learners import CURRICULA, LearnerConfig, train
from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, verdict_lines
from longhorizon.runner.results import write_json_atomic

LABELS = {"rarl": "RARL (tau = tau_min from the start)", "linear": "linear schedule", "qarl": "QARL (self-paced Gamma)"}


@dataclasses.dataclass(frozen=True)
class Setup:
    game: qarl.WindCorridor
    learner: LearnerConfig
    seeds: int
    threshold_share: float  # the teacher's gate: this share of the best value against a uniformly random wind
    temperatures: tuple[float, ...]  # adversary temperatures of the exact QRE table


FULL = Setup(qarl.WindCorridor(), LearnerConfig(steps=100_000, chunk=5_000), seeds=20, threshold_share=0.3,
             temperatures=(0.01, 0.03, 0.1, 0.3, 1.0, 3.0))
QUICK = Setup(qarl.WindCorridor(width=5, height=3, discount=0.95), LearnerConfig(steps=8_000, chunk=2_000), seeds=2,
              threshold_share=0.3, temperatures=(0.01, 0.3))


def exact_part(setup: Setup) -> dict:
    """QRE per adversary temperature (protagonist at ``alpha_p``), and the references: the worst case
    of the near-rational QRE protagonist and of the best policy against a uniformly random wind."""
    game, alpha_p = setup.game, setup.learner.protagonist_temperature
    arrays = game.arrays()
    rows = []
    for tau in setup.temperatures:
        qre = qarl.soft_shapley(game, alpha_p, tau)
        sweeps = qre.sweeps[qre.sweeps > 1e-13]
        rows.append({"adversary_temperature": tau, "regularised_value": float(qre.values[game.start]),
                     "worst_case_of_qre_protagonist": float(qarl.worst_case_value(game, qre.protagonist, arrays)[0][game.start]),
                     "residual": qre.residual, "sweeps": len(qre.sweeps), "error_bound": qre.error_bound,
                     "max_contraction_ratio": float((sweeps[1:] / sweeps[:-1]).max()) if len(sweeps) > 1 else 0.0})
    random_values = qarl.random_wind_value(game)
    nominal_q = qarl.stage_matrices(arrays, game.discount, random_values).mean(-1)
    nominal = np.eye(len(qarl.MOVES))[nominal_q.argmax(-1)]
    return {"qre": rows, "random_wind_value": float(random_values[game.start]),
            "nominal_worst_case": float(qarl.worst_case_value(game, nominal, arrays)[0][game.start]),
            "robust_reference": rows[0]["worst_case_of_qre_protagonist"]}


CLAIMS = ("the regularised game's QRE is an exact fixed point (stage residual < 1e-10) reached by a gamma-contraction",
          "QARL's protagonist has a better worst-case value than RARL's at equal training budget",
          "a linear temperature schedule's protagonist has a better worst-case value than RARL's")


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded numbers: the exact side as agreements (residual below 1e-10, every
    sweep-to-sweep ratio at most gamma); the learners' final worst-case values, Welch's Student-t 95% interval over
    independent seeds (>= 3), each learner's worst-case curve required to rise (``no signal`` otherwise)."""
    ex, ln = L["exact"], L["learners"]
    gamma = L["setup"]["game"]["discount"]
    worst = {a: np.array(r["worst_case"]) for a, r in ln.items()}  # [seeds, points]
    sig = {a: C.arm_signal(a, w, what="worst-case value over training") for a, w in worst.items()}
    final = {a: w[:, -1] for a, w in worst.items()}
    claims = [
        C.judge(CLAIMS[0], C.combine({"residual": C.agreement(max(q["residual"] for q in ex["qre"]), 0.0, tolerance=1e-10),
                                      "contraction": C.agreement(max(q["max_contraction_ratio"] for q in ex["qre"]), gamma,
                                                                 tolerance=0.0, side="below")}, "check"), quick=quick),
        C.judge(CLAIMS[1], C.difference(final["qarl"], final["rarl"], paired=False), [sig["qarl"], sig["rarl"]], quick=quick),
        C.judge(CLAIMS[2], C.difference(final["linear"], final["rarl"], paired=False), [sig["linear"], sig["rarl"]], quick=quick),
    ]
    steps = ln["rarl"]["steps"][-1]
    return claims, {a: C.arm(steps, len(w), sig[a]) for a, w in worst.items()}


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict:
    setup, t0 = setup or (QUICK if quick else FULL), time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    exact = exact_part(setup)
    teacher = dataclasses.replace(setup.learner.teacher, threshold=setup.threshold_share * exact["random_wind_value"])
    learners = {}
    for name in CURRICULA:
        history = train(setup.game, dataclasses.replace(setup.learner, curriculum=name, teacher=teacher), setup.seeds)
        history.pop("final_weights")
        learners[name] = history
        print(f"[qarl] {name}: final worst case {mean_se([c[-1] for c in history['worst_case']])}")
    recorded = C.as_recorded(
        {"exact": exact, "learners": learners,
         "setup": {"game": dataclasses.asdict(setup.game), "learner": dataclasses.asdict(setup.learner), "seeds": setup.seeds,
                   "threshold_share": setup.threshold_share, "teacher_threshold": teacher.threshold}})
    claims, arms = judge(recorded, quick)
    steps = learners["rarl"]["steps"][-1]
    summary = C.summary(paper="QARL", claims=claims, arms=arms, quick=quick, wall_seconds=time.perf_counter() - t0,
                        scale=f"adversarial-wind corridor, {steps:,} steps per learner, {setup.seeds} seeds",
                        command="longhorizon repro qarl" + (" --quick" if quick else ""), **recorded)
    curves = {a: [{"step": st, "seed": i, "worst_case": r["worst_case"][i][j], "train_return": r["train_return"][i][j]}
                  for i in range(len(r["worst_case"])) for j, st in enumerate(r["steps"])] for a, r in recorded["learners"].items()}
    for arm, rows in curves.items():
        C.write_curve(out, arm, rows)
    plot(out / "qarl.png", summary)
    write_json_atomic(out / "summary.json", summary)
    write_report(out / "README.md", summary)
    return summary


def plot(path: Path, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), dpi=110)
    for name, run in summary["learners"].items():
        curves = np.asarray(run["worst_case"])
        mean = curves.mean(0)
        se = curves.std(0, ddof=1) / np.sqrt(len(curves)) if len(curves) > 1 else np.zeros_like(mean)
        left.plot(run["steps"], mean, marker="o", ms=3, label=LABELS[name])
        left.fill_between(run["steps"], mean - se, mean + se, alpha=0.2)
        right.plot(run["steps"], np.asarray(run["temperature_mean"]).mean(0), marker="o", ms=3, label=LABELS[name])
    exact = summary["exact"]
    left.axhline(exact["robust_reference"], color="k", ls="--", lw=1, label="QRE protagonist at tau_min (exact)")
    left.axhline(exact["nominal_worst_case"], color="grey", ls=":", lw=1, label="best vs random wind (exact)")
    left.set(xlabel="environment steps", ylabel="worst-case value (exact best response)",
             title="protagonist's worst case, mean +- SE over seeds")
    right.set(xlabel="environment steps", ylabel="adversary temperature (mean over seeds)", yscale="log",
              title="training temperature")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_report(path: Path, summary: dict) -> None:
    s, exact = summary["setup"], summary["exact"]
    game, learner = s["game"], s["learner"]
    command = "longhorizon repro qarl" + (" --quick" if summary["quick"] else "")
    lines = ["# QARL vs RARL: a bounded-rationality curriculum on an adversarial-wind corridor (`longhorizon repro qarl`)", "",
             "Claim (Reddi et al. 2023): raising the adversary's rationality by a curriculum (its entropy temperature drawn "
             "from a self-paced Gamma distribution that moves toward ~0 when the protagonist performs well) gives a more "
             "robust protagonist than RARL, which faces a fully rational adversary from the start.", ""]
    if summary["quick"]:
        lines += ["**This is a `--quick` run** (a tiny grid, few steps, 2 seeds): a smoke test, not a result.", ""]
    lines += ["## Setup and how it differs from the paper", "",
              f"Game: a corridor of {game['height']} rows x {game['width']} columns, start bottom-left, goal bottom-right "
              f"(+{game['goal_reward']:g}), cliff between them ({game['cliff_reward']:g}, terminal), step cost "
              f"{game['step_cost']:g}, discount {game['discount']:g}; "
              f"after each move the adversary's wind (calm, N, E, S, W) pushes the protagonist one cell with probability "
              f"{game['gust']:g}. The paper uses MuJoCo locomotion with SAC agents; this is the tabular tier: both agents are "
              f"soft Q-learners **learning from samples** (one environment per seed), their values a tabular base plus a "
              f"piecewise-linear function of log tau, updates alternating every {learner['alternate']} steps, "
              f"exploration {learner['exploration']:g}, protagonist temperature {learner['protagonist_temperature']:g}, "
              f"lr {learner['learning_rate']:g}. Budget: {learner['steps']} steps per seed, {s['seeds']} seeds, evaluated "
              f"every {learner['chunk']} steps. RARL: tau = {learner['temperature_min']:g} throughout. Linear: tau from "
              f"{learner['teacher']['init_shape'] * learner['teacher']['init_scale']:g} to {learner['temperature_min']:g} over "
              f"{learner['linear_fraction']:.0%} of the steps. QARL: tau ~ Gamma(shape, scale) per episode from "
              f"Gamma({learner['teacher']['init_shape']:g}, {learner['teacher']['init_scale']:g}) toward the target "
              f"Gamma({learner['teacher']['target_shape']:g}, {learner['teacher']['target_scale']:g}), KL step <= "
              f"{learner['teacher']['max_kl']:g} per chunk, gated on the chunk's mean discounted training return >= "
              f"{s['teacher_threshold']:.3f} ({s['threshold_share']:.0%} of the exact best value against a uniformly "
              "random wind, "
              f"{exact['random_wind_value']:.3f}). Worst-case value: the protagonist's policy at tau = the target's mean, its "
              "exact value at the start against an exact best-response adversary (policy iteration, float64).", "",
              "## Exact side: soft Shapley QRE per adversary temperature", "",
              "| adversary temperature | regularised value V(start) | worst case of the QRE protagonist | residual | sweeps "
              "| sweep ratio max |",
              "|---|---|---|---|---|---|"]
    for r in exact["qre"]:
        lines.append(f"| {r['adversary_temperature']:g} | {r['regularised_value']:.4f} | "
                     f"{r['worst_case_of_qre_protagonist']:.4f} | "
                     f"{r['residual']:.1e} | {r['sweeps']} | {r['max_contraction_ratio']:.3f} |")
    lines += ["", f"The best policy against a uniformly random wind has worst case {exact['nominal_worst_case']:.4f}; the near-"
              f"rational QRE protagonist's is {exact['robust_reference']:.4f} (the ceiling line in the plot). At high adversary "
              "temperature the regularised game pays the adversary its entropy every step, so the QRE protagonist prefers to end "
              "the episode early: its worst case falls.", "",
              "## Learners: worst-case value at the end of training", "",
              "| learner | final worst case (mean +- SE) | mean over the curve | final temperature mean "
              "| teacher updates taken |",
              "|---|---|---|---|---|"]
    for name, run in summary["learners"].items():
        curves = np.asarray(run["worst_case"])
        m, se = mean_se(curves[:, -1])
        updates = int((~np.asarray(run["gated"], bool)).sum()) if name == "qarl" else "-"
        lines.append(f"| {LABELS[name]} | {m:.4f} +- {se:.4f} | {curves.mean():.4f} | "
                     f"{np.mean(np.asarray(run['temperature_mean'])[:, -1]):.3g} | {updates} |")
    lines += ["", "![worst-case value vs steps](qarl.png)", "", "## Verdict", "", *verdict_lines(summary)]
    lines += ["", "Rules (`longhorizon.repro.qarl.judge`): the exact side, agreements with stated tolerances; a learner "
              "is better when the Welch 95% interval of the difference of final worst cases over independent seeds "
              "(>= 3) lies above 0, contradicted below; a learner whose worst-case curve did not rise gives no signal.", "",
              f"Command: `{command}` ({summary['wall_seconds']:.0f} s on a shared CPU). Each learner's curve (worst-case "
              "value and training return per seed and evaluation) is in `curves/`.", ""]
    path.write_text("\n".join(lines))
    print(f"wrote {path}")
