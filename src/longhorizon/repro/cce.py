"""`longhorizon repro cce`: independent learners' mixtures vs Markov and history-dependent deviations.

After Foster, Golowich & Kakade (2023), "Hardness of Independent Learning and Sparse Equilibrium
Computation in Markov Games". The paper proves that no efficient independent (decentralised) learner
reaches no-regret in general-sum Markov games, through the hardness of computing a *sparse* CCE: a
uniform mixture of few product policies that no player can beat by a history-dependent deviation,
while prior work reaches no-regret against Markov deviations. This reproduction illustrates those
definitions on tiny games with exact arithmetic; it does not re-prove the lower bounds.

Per game: the backward-induction Markov CCE (:func:`~longhorizon.games.cce.markov_cce`) and, for each
Hedge step size, the uniform mixture of the first T rounds of independent Hedge learners (exact
Q-values), each measured by :func:`~longhorizon.games.markov_games.deviation_report` against both
deviation classes, T on a log grid.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from longhorizon.games import cce
from longhorizon.games import markov_games as mg
from longhorizon.repro import claims as C
from longhorizon.repro.report import verdict_lines, write_run

RATES = (1.0, 5.0, 20.0)  # Hedge's eta in eta_t = eta / sqrt(t)
EXACT = 1e-8  # a gap below this is zero up to the LP's tolerance
FALLS, STAYS = 0.1, 0.5  # Markov gap at T_max vs at T = 1: below FALLS it fell, above STAYS it did not
APART = 3.0  # the history gap at T_max is "far from a CCE" when it is APART x the Markov gap and >= FALLS x gap(T=1)


def games(quick: bool) -> list[mg.MarkovGame]:
    if quick:
        return [mg.pennies_game(horizon=2, states=1)]
    return [mg.pennies_game(horizon=2, states=1), mg.pennies_game(horizon=3, states=2),
            mg.random_game(horizon=3, states=3, actions=2, seed=0)]


def grid(rounds: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``rounds`` (and ``rounds`` itself)."""
    points = [m * 10**e for e in range(7) for m in (1, 2, 5) if m * 10**e < rounds]
    return points + [rounds]


def markov_outcome(first: float, last: float) -> str:
    """Did the mixture's Markov gap fall as T grew? ``first``: gap at T = 1, ``last``: at T_max."""
    if last <= FALLS * first:
        return "holds"
    return "contradicted" if last >= STAYS * first else "inconclusive"


def history_outcome(first: float, last_history: float, last_markov: float) -> str:
    """Does the history gap stay away from 0 where the Markov one is small? (all at T_max but ``first``)"""
    if last_history >= APART * last_markov and last_history >= FALLS * first:
        return "holds"
    return "contradicted" if last_history <= 1.5 * last_markov + EXACT else "inconclusive"


def measure(game: mg.MarkovGame, rounds: int, log=print) -> dict:
    start = time.perf_counter()
    equilibrium = mg.deviation_report(game, cce.markov_cce(game))
    row = {"game": game.name, "horizon": game.horizon, "states": game.num_states,
           "cce": {"value": equilibrium.value.tolist(), "markov_gap": equilibrium.markov_gap,
                   "history_gap": equilibrium.history_gap},
           "rounds": grid(rounds), "hedge": {}}
    for rate in RATES:
        mixture = cce.independent_hedge(game, cce.HedgeConfig(rounds=rounds, learning_rate=rate))
        reports = [mg.deviation_report(game, mixture.prefix(T)) for T in row["rounds"]]
        row["hedge"][str(rate)] = {"markov_gap": [r.markov_gap for r in reports],
                                   "history_gap": [r.history_gap for r in reports]}
    row["seconds"] = time.perf_counter() - start
    log(f"{game.name}: CCE gaps {equilibrium.markov_gap:.1e} / {equilibrium.history_gap:.1e}, {row['seconds']:.1f} s")
    return row


def outcomes(rows: list[dict]) -> list[tuple[str, str, str, float, float, float]]:
    """Per setting: (label, Markov outcome, history outcome, gap at T = 1, Markov and history gaps at T_max)."""
    table = []
    for r in rows:
        for rate, gaps in r["hedge"].items():
            m, h = gaps["markov_gap"], gaps["history_gap"]
            table.append((f"{r['game']} eta={float(rate):g}", markov_outcome(m[0], m[-1]),
                          history_outcome(m[0], h[-1], m[-1]), m[0], m[-1], h[-1]))
    return table


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded gaps (exact computations on known games, so thresholds stated here
    decide, and no arm has to learn): the CCE's gap as an agreement within :data:`EXACT`; per setting, the Markov
    gap's fall (:func:`markov_outcome`) and the history gap's distance (:func:`history_outcome`); the fall claim
    over every setting (holds or contradicted only if all agree), the separation as an existence claim."""
    games_, falls, apart = L["games"], {}, {}
    for g in games_:
        for rate, h in g["hedge"].items():
            label = f"{g['game']} eta={rate}"
            m0, m, hist = h["markov_gap"][0], h["markov_gap"][-1], h["history_gap"][-1]
            falls[label] = C.Claim("", markov_outcome(m0, m), f"exact computation: Markov gap at T_max / at T = 1 holds at "
                                   f"<= {FALLS:g}, contradicted at >= {STAYS:g} (thresholds stated before the run)",
                                   {"value": m / m0, "holds_at_most": FALLS, "contradicted_at_least": STAYS})
            apart[label] = C.Claim("", history_outcome(m0, hist, m), f"exact computation: history gap >= {APART:g} x the Markov "
                                   f"gap and >= {FALLS:g} x its T = 1 value holds; within 1.5 x the Markov gap contradicts",
                                   {"history_gap": hist, "markov_gap": m})
    both = [k for k in falls if falls[k].verdict == apart[k].verdict == C.HOLDS]
    exist = C.Claim("", C.HOLDS if both else C.CONTRADICTED if all(a.verdict == C.CONTRADICTED for a in apart.values())
                    else C.INCONCLUSIVE, "existence: holds if some setting has both parts holding (exact computation)",
                    {"settings": both, "reason": f"{len(both)} of {len(falls)} settings show both"})
    worst = max(max(g["cce"]["markov_gap"], g["cce"]["history_gap"]) for g in games_)
    claims = [
        C.judge("the backward-induction Markov CCE is a CCE against Markov and history-dependent deviations (gap <= 1e-8)",
                C.agreement(worst, 0.0, tolerance=EXACT), quick=quick),
        C.judge("independent Hedge learners' uniform mixture approaches a CCE against Markov deviations as T grows",
                C.combine(falls, "setting", unanimous=True), quick=quick),
        C.judge("independent Hedge learners' mixture can approach a CCE against Markov deviations while staying away from "
                "one against history-dependent deviations", exist, quick=quick),
    ]
    arms = {f"Hedge eta={r}": C.arm(games_[0]["rounds"][-1], len(games_), {"arm": f"Hedge eta={r}", "moved": True,
            "test": "not applicable: exact full-information dynamics on known games"}) for r in games_[0]["hedge"]}
    return claims, arms


def run(out_dir: str, quick: bool = False, log=print) -> dict:
    """Measure every game, write README.md, summary.json and cce.png into ``out_dir``; returns the summary."""
    out, t0 = Path(out_dir), time.perf_counter()
    rounds = 100 if quick else 10_000
    rows = [measure(game, rounds, log) for game in games(quick)]
    recorded = C.as_recorded({"rates": list(RATES), "games": rows})
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper="Sparse CCE", claims=claims, arms=arms, quick=quick, wall_seconds=time.perf_counter() - t0,
                        scale=f"{len(rows)} exact Markov games, Hedge rates {list(RATES)}, T up to {rows[0]['rounds'][-1]:,}",
                        command="longhorizon repro cce" + (" --quick" if quick else ""), **recorded)
    out.mkdir(parents=True, exist_ok=True)
    plot(out / "cce.png", rows)
    write_run(out, summary, [readme(summary)], curves(rows))
    return summary


def curves(rows: list[dict]) -> dict:
    """Each Hedge arm's curve: per game and T (rounds in the mixture), its Markov and history gaps."""
    return {f"Hedge eta={float(rate):g}": [{"game": r["game"], "step": t, "markov_gap": m, "history_gap": h}
                                           for r in rows for t, m, h in zip(r["rounds"], r["hedge"][rate]["markov_gap"],
                                                                            r["hedge"][rate]["history_gap"])]
            for rate in rows[0]["hedge"]}


FLOOR = 1e-5  # the plot's lowest gap; the CCE's ~1e-16 gaps are drawn there and labelled with their value


def plot(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(4.6 * len(rows), 3.9), squeeze=False)
    for ax, r in zip(axes[0], rows):
        for color, (rate, gaps) in zip(("C0", "C1", "C2"), r["hedge"].items()):
            ax.plot(r["rounds"], np.maximum(gaps["markov_gap"], FLOOR), "-o", ms=3, color=color,
                    label=f"Hedge eta={float(rate):g}: Markov dev.")
            ax.plot(r["rounds"], np.maximum(gaps["history_gap"], FLOOR), "--s", ms=3, color=color,
                    label=f"Hedge eta={float(rate):g}: history dev.")
        gap = max(r["cce"]["markov_gap"], r["cce"]["history_gap"])
        ax.axhline(max(gap, FLOOR), color="k", lw=1, label=f"backward-induction CCE (gap {gap:.0e})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("T (rounds in the mixture)")
        ax.set_title(r["game"], fontsize=10)
    axes[0][0].set_ylabel("CCE gap (best deviation gain)")
    axes[0][-1].legend(fontsize=6.5, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def readme(summary: dict) -> str:
    rows, quick = summary["games"], summary["quick"]
    command = "longhorizon repro cce" + (" --quick" if quick else "")
    rounds = rows[0]["rounds"]  # the table shows T = 1, 10, 100, ... and T_max (the plot and summary.json all)
    shown = [i for i, t in enumerate(rounds) if t in {10**e for e in range(7)} or i == len(rounds) - 1]
    lines = ["# Independent learners and CCE in Markov games (Foster, Golowich & Kakade 2023)", ""]
    if quick:
        lines += ["**This is a `--quick` run** (the tiniest game, T <= 100): a smoke test, not the result.", ""]
    lines += [
        "**What the paper claims.** Independent no-regret learning is possible in Markov games when regret is",
        "measured against *Markov* deviations, but no efficient independent learner reaches no-regret against",
        "*history-dependent* deviations (unless PPAD is easy): a uniform mixture of T product policies",
        "(what T rounds of independent learners output, one component drawn per episode) need not be a CCE,",
        "because a deviator who watches the opponent's actions learns which component is playing.",
        "",
        "**What this run does.** It illustrates those definitions with exact arithmetic on tiny two-player",
        "general-sum games; it **does not re-prove the computational lower bounds**. Per game: a Markov CCE",
        "by backward induction over stage-game CCE LPs (HiGHS), and independent Hedge learners (at every",
        "(h, s), exact Q-values against the other's current policy, eta_t = eta / sqrt(t), eta in "
        f"{', '.join(f'{r:g}' for r in summary['rates'])}).",
        "Each is measured against the best Markov deviation (exact: deterministic policies enumerated, the",
        "last step in closed form) and the best history-dependent deviation (exact DP over the tree of",
        "observed states and opponent actions with the posterior over components).",
        "",
        "**Scale and differences from the paper.** The paper's games are constructed for the reduction; these",
        "are a repeated general-sum matching-pennies cycle (1 state, H = 2), the same with 2 states that",
        "record whether the actions matched (H = 3), and a random game (3 states, 2 actions, H = 3, seed 0).",
        "",
        f"Command: `{command}`; wall time {summary['wall_seconds']:.0f} s on a shared CPU. Each Hedge arm's gaps at every "
        "T are in `curves/`.",
        "",
        "| game | play | " + " | ".join(f"T={rows[0]['rounds'][i]}" for i in shown) + " |",
        "|---|---|" + "---|" * len(shown),
    ]
    for r in rows:
        blank = " | ".join("" for _ in shown)
        lines.append(f"| {r['game']} | backward-induction CCE, gap {r['cce']['markov_gap']:.0e} (Markov) / "
                     f"{r['cce']['history_gap']:.0e} (history) | {blank} |")
        for rate, gaps in r["hedge"].items():
            cells = " | ".join(f"{gaps['markov_gap'][i]:.4f} / {gaps['history_gap'][i]:.4f}" for i in shown)
            lines.append(f"| {r['game']} | Hedge eta={float(rate):g}: Markov / history | {cells} |")
    lines += ["", "Cells: the mixture's CCE gap (the best deviation's gain, max over players, at least 0) against",
              "Markov / history-dependent deviations; T = 1 is Hedge's first, uniform, policy. Per-step rewards lie in",
              "[0, 1].", "", "![gaps](cce.png)", "",
              "| setting | gap at T=1 | Markov gap at T_max | history gap at T_max | Markov gap falls "
              "| history gap stays away |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {label} | {first:.4g} | {markov:.4g} | {history:.4g} | {falls} | {apart} |"
              for label, falls, apart, first, markov, history in outcomes(rows)]
    lines += ["", "## Verdict", "", *verdict_lines(summary)]
    lines += ["", "Rules (`longhorizon.repro.cce.judge`): the Markov gap *falls* when its value at T_max is <= "
              f"{FALLS} x its value at T = 1 (*contradicted* at >= {STAYS} x); the history gap *stays away* when at",
              f"T_max it is >= {APART} x the Markov gap and >= {FALLS} x the T = 1 gap (*contradicted* when it is",
              "within 1.5 x the Markov gap). The second claim holds or is contradicted only if every setting agrees;",
              "the third is an existence claim (as the paper's separation is): it holds if one setting shows both."]
    return "\n".join(lines)
