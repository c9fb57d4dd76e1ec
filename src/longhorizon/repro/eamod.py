"""`longhorizon repro eamod`: graph RL with LP layers for electric AMoD vs heuristics and the full LP optimum.

The paper's claims ("Electric Autonomous Mobility-on-Demand via Graph RL", after Gammelli et al.'s graph RL for
AMoD): a graph-network policy that proposes a desired vehicle distribution, turned into feasible matching and
rebalancing flows by LPs, earns up to 89% of the full-information LP optimum, at a decision cost more than
100x below solving the horizon LP (what a model-predictive controller does every step), and transfers to
another city without retraining.

Protocol (:mod:`longhorizon.structured.amod`, :mod:`longhorizon.structured.amod_policy`): city A is trained
on by A2C for ``updates x episodes`` sampled days per seed (the greedy policy scored on validation days along the
way); every method is then scored on the same held-out
days (demand seeds 0..eval_days-1) of city A and of city B (another graph, size, station set and demand
pattern; the policy is not retrained). The full-information optimum of each held-out day is the upper bound;
"% of optimum" is a day's profit over it. Timing is per decision step on the host: the policy's forward pass
plus the rebalancing LP, against one solve of the full horizon LP from the day's start.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from longhorizon.repro import claims as C
from longhorizon.repro.report import mean_se, plot_curves, resumable, verdict_lines, write
from longhorizon.structured import amod
from longhorizon.structured import amod_policy as ap
from longhorizon.structured.amod import CITY_A, CITY_B

QUICK_A = amod.City(regions=3, charge_levels=2, edges=((0, 1), (1, 2), (2, 0)), stations=(0,), fleet=12, steps=6, seed=0)
QUICK_B = amod.City(regions=3, charge_levels=2, edges=((0, 1), (1, 2), (2, 0)), stations=(2,), fleet=12, steps=6,
                    amplitude=0.5, seed=5)
TARGET_FRACTION = 0.80  # "a large fraction" of the optimum, checked at this level (the paper reports up to 0.89)
TARGET_SPEEDUP = 100.0
# A2C budget: many small updates (2 sampled days each) rather than few large ones: a 20-dimensional Dirichlet
# policy gradient needs thousands of steps (the budgets tried: docs/structured.md, the E-AMoD section).
UPDATES, EPISODES, EVAL_EVERY = 4000, 2, 250
VALIDATION_DAYS = (500, 501, 502)  # the greedy policy's profit during training is measured on these (not the test days)
PARTIAL = "partial"


@dataclasses.dataclass(frozen=True)
class Setup:
    city_a: amod.City = CITY_A
    city_b: amod.City = CITY_B
    config: ap.Config = ap.Config(updates=UPDATES, episodes=EPISODES, learning_rate=3e-3, alpha_init=5.0)
    seeds: int = 3
    eval_days: int = 5
    eval_every: int = EVAL_EVERY  # updates between greedy evaluations on the validation days


QUICK = Setup(QUICK_A, QUICK_B, ap.Config(updates=6, episodes=2, hidden=16, learning_rate=3e-3, alpha_init=5.0),
              seeds=2, eval_days=2, eval_every=3)


def measure(setup: Setup, log=print, out: Path | None = None) -> dict[str, Any]:
    """Heuristics and the LP bound per city, then per seed: A2C on city A and the greedy policy on both cities'
    held-out days. With ``out``, each finished seed is saved under ``out/partial/`` and reused by a rerun of the
    same setup (so an interrupted run resumes)."""
    nets = {"A": amod.Network(setup.city_a), "B": amod.Network(setup.city_b)}
    heuristics = {city: amod.score_days(net, setup.eval_days, {"no rebalancing": lambda n=net: amod.no_rebalancing(n),
                                                          "equal distribution": lambda n=net: amod.equal_distribution(n)})
                  for city, net in nets.items()}
    # the heuristics on the validation days too, so the greedy policy's training curve has its reference
    validation = {name: [amod.run_episode(nets["A"], nets["A"].demand(d), make(nets["A"]))["profit"] for d in VALIDATION_DAYS]
                  for name, make in (("no rebalancing", amod.no_rebalancing), ("equal distribution", amod.equal_distribution))}
    seeds, resumed, agent = [], [], ap.Agent(setup.city_a.charge_levels, setup.config)  # one agent: compiled once

    def train_seed(seed: int) -> dict:
        start = time.perf_counter()
        trained = ap.train(nets["A"], dataclasses.replace(setup.config, seed=seed), log=log, agent=agent,
                           evaluate=ap.mean_profit(nets["A"], VALIDATION_DAYS), eval_every=setup.eval_every)
        train_seconds = time.perf_counter() - start
        row = {"seed": seed, "curve": trained["curve"], "eval_curve": trained["eval_curve"],
               "train_seconds": train_seconds, "host_seconds": trained["seconds"]}
        for city, net in nets.items():
            policy = {"graph RL": lambda n=net: ap.policy_fn(trained["agent"], trained["params"], n)}
            rl = amod.score_days(net, setup.eval_days, policy)
            row[city] = {"profit": rl["graph RL"], "seconds_rebalance": rl["graph RL_seconds_rebalance"],
                         "seconds_forward": ap.decision_seconds(trained["agent"], trained["params"], net)}
        row["A"]["lp_seconds"] = heuristics["A"]["optimum_seconds"]  # timed in this invocation, as the decisions
        log(f"[eamod] seed {seed}: city A profit {np.mean(row['A']['profit']):.1f}, B {np.mean(row['B']['profit']):.1f} "
            f"(optimum {np.mean(heuristics['A']['optimum']):.1f}, {np.mean(heuristics['B']['optimum']):.1f})")
        return row

    for seed in range(setup.seeds):
        if out is None:
            row, reused = train_seed(seed), False
        else:
            row, reused = resumable(out / PARTIAL / f"seed-{seed}.json", setup, lambda seed=seed: train_seed(seed))
        seeds.append(C.as_recorded(row))
        if reused:
            resumed.append(seed)
    return {"heuristics": heuristics, "validation": validation, "seeds": seeds, "resumed_seeds": resumed}


def table(measured: dict) -> dict[str, dict[str, Any]]:
    """Per city and method: profit and % of optimum (mean, SE: over seeds for RL, over days for heuristics)."""
    rows = {}
    for city, h in measured["heuristics"].items():
        opt = np.array(h["optimum"])
        per = {"full-information LP (bound)": (opt, opt)}
        per.update({name: (np.array(h[name]), np.array(h[name])) for name in ("no rebalancing", "equal distribution")})
        rl = np.array([s[city]["profit"] for s in measured["seeds"]])  # [seeds, days]
        per["graph RL"] = (rl.mean(1), rl / opt)
        rows[city] = {}
        for name, (profit, share) in per.items():
            share = share.mean(1) if share.ndim == 2 else share / opt
            rows[city][name] = {"profit": mean_se(profit), "percent_of_optimum": mean_se(100 * share)}
    return rows


def judge(L: dict, quick: bool = False) -> tuple[list, dict]:
    """``(claims, arms)`` from the recorded measurements (``measured``: per seed its training curve and held-out
    profits; the heuristics' and the LP's per day), Student-t 95% intervals over training seeds (>= 3). The profit
    claims need a graph-RL policy that learned (its training return rose, or its greedy validation profit rose from
    its start) and is better than no rebalancing on city A's held-out days (a behaviour the policy can represent: one
    that is worse is under-trained), else ``no signal``; the speed-up is a timing, judged whatever the policy learned."""
    m, cfg = L["measured"], L["setup"]["config"]
    seeds, heur = m["seeds"], m["heuristics"]
    curve = np.array([s["curve"] for s in seeds])
    evals = [s.get("eval_curve") for s in seeds]
    start_end = ({"eval_start": [e[0][1] for e in evals], "eval_end": [e[-1][1] for e in evals]}
                 if all(e and len(e) > 1 for e in evals) else {})
    rl = C.arm_signal("graph RL", curve, what="training return", **start_end)
    profit = {c: np.array([np.mean(s[c]["profit"]) for s in seeds]) for c in ("A", "B")}
    trained = C.baseline_signal("graph RL", profit["A"], float(np.mean(heur["A"]["no rebalancing"])),
                                what="no rebalancing on city A (which the policy can represent)")
    optimum = float(np.mean(heur["A"]["optimum"]))
    # each seed's decision time against horizon-LP times of the same invocation (a resumed seed keeps its own)
    speedup = np.array([float(np.median(s["A"].get("lp_seconds", heur["A"]["optimum_seconds"])))
                        / (s["A"]["seconds_rebalance"] + s["A"]["seconds_forward"]) for s in seeds])
    best = {c: max(("no rebalancing", "equal distribution"), key=lambda h: np.mean(heur[c][h])) for c in ("A", "B")}
    claims = [
        C.judge(f"graph RL reaches >= {TARGET_FRACTION:.0%} of the full-information LP optimum (paper: up to 89%)",
                C.difference(100.0 * profit["A"] / optimum, 100.0 * TARGET_FRACTION), [rl, trained], quick=quick),
        C.judge(f"graph RL earns more than the best heuristic ({best['A']})",
                C.difference(profit["A"], float(np.mean(heur["A"][best["A"]]))), [rl, trained], quick=quick),
        C.judge(f"the policy trained on city A beats the best heuristic ({best['B']}) on city B without retraining",
                C.difference(profit["B"], float(np.mean(heur["B"][best["B"]]))), [rl, trained], quick=quick),
        C.judge(f"a graph-RL decision is > {TARGET_SPEEDUP:.0f}x faster than solving the horizon LP (median LP time over the days)",
                C.difference(speedup, TARGET_SPEEDUP), quick=quick),
    ]
    return claims, {"graph RL": C.arm(cfg["updates"], len(seeds), rl, trained)}


def run(out_dir: str, quick: bool = False, setup: Setup | None = None) -> dict[str, Any]:
    setup = setup or (QUICK if quick else Setup())
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    measured = measure(setup, out=out)
    host = measured["seeds"][0]["host_seconds"]
    recorded = C.as_recorded(
        {"table": table(measured), "measured": measured,
         "setup": {"city_a": dataclasses.asdict(setup.city_a), "city_b": dataclasses.asdict(setup.city_b),
                   "config": dataclasses.asdict(setup.config), "seeds": setup.seeds, "eval_days": setup.eval_days,
                   "eval_every": setup.eval_every, "validation_days": VALIDATION_DAYS},
         "lp_share_of_training": host["lp"] / sum(host.values())})
    claims, arms = judge(recorded, quick)
    summary = C.summary(paper="E-AMoD", claims=claims, arms=arms, quick=quick, wall_seconds=time.perf_counter() - start,
                        scale=f"two small cities ({setup.city_a.regions} and {setup.city_b.regions} regions), "
                              f"{setup.config.updates} updates x {setup.config.episodes} episodes, {setup.seeds} seeds, "
                              f"{setup.eval_days} evaluation days",
                        command="longhorizon repro eamod" + (" --quick" if quick else ""), **recorded)
    curves = np.array([s["curve"] for s in measured["seeds"]])
    greedy = [dict(e) for e in (s["eval_curve"] for s in measured["seeds"])]  # per seed: {updates done: profit}
    C.write_curve(out, "graph RL", [{"update": i, "days": i * setup.config.episodes, "seed": k,
                                     "train_return": row[i - 1] if i else "", "greedy_validation_profit": greedy[k].get(i, "")}
                                    for k, row in enumerate(curves) for i in range(len(row) + 1)])
    xs = (np.arange(curves.shape[1]) + 1) * setup.config.episodes
    opt = np.mean(measured["heuristics"]["A"]["optimum"])
    window = max(1, curves.shape[1] // 50)  # a running mean over this many updates: the sampled days are noisy
    smooth = np.array([np.convolve(c, np.ones(window) / window, mode="valid") for c in curves])  # full windows only
    steps = sorted(set.intersection(*(set(g) for g in greedy)))
    g = np.array([[gk[u] for u in steps] for gk in greedy])
    plot_curves(out / "eamod.png", {"graph RL (A2C, sampled days, running mean)": (xs[window - 1:], smooth.mean(0), smooth.std(0) / np.sqrt(len(curves))),
                                    "graph RL (greedy, validation days)": (np.array(steps) * setup.config.episodes, g.mean(0),
                                                                           g.std(0) / np.sqrt(len(g))),
                                    **{f"{name} (held-out days)": (xs, np.full(len(xs), np.mean(measured["heuristics"]["A"][name])),
                                                                   np.zeros(len(xs))) for name in ("no rebalancing", "equal distribution")},
                                    "no rebalancing (validation days)": (xs, np.full(len(xs), np.mean(measured["validation"]["no rebalancing"])),
                                                                         np.zeros(len(xs))),
                                    "full-information LP (bound)": (xs, np.full(len(xs), opt), np.zeros(len(xs)))},
                "training days", "profit per day (city A)", "E-AMoD: A2C training vs heuristics and the LP bound")
    write(out, summary, report(summary, setup))
    shutil.rmtree(out / PARTIAL, ignore_errors=True)  # the finished seeds now live in summary.json
    return summary


def report(summary: dict, setup: Setup) -> list[str]:
    a, b = setup.city_a, setup.city_b
    lines = ["# E-AMoD: graph RL with LP layers vs the full-information optimum", "",
             "Claim (\"Electric Autonomous Mobility-on-Demand via Graph RL\"): a graph-network policy proposing a desired",
             "vehicle distribution, made feasible by matching and rebalancing LPs, reaches up to 89% of the LP optimum,",
             "more than 100x faster than solving it, and transfers to another city.", "",
             f"Scale: city A {a.regions} regions x {a.charge_levels} charge levels ({len(a.edges)} road links, stations "
             f"{a.stations}, fleet {a.fleet}, {a.steps}-step day); city B {b.regions} regions ({len(b.edges)} road links, "
             f"stations {b.stations}, fleet {b.fleet}, another demand pattern). A2C {setup.config.updates} updates x {setup.config.episodes} days per "
             f"seed ({setup.config.updates * setup.config.episodes} sampled days, learning rate {setup.config.learning_rate:g}), "
             f"{setup.seeds} seeds, {setup.eval_days} held-out days. The paper's setting is larger (real trip data, "
             "larger graphs, longer training); here every trip takes one step and demand is synthetic. The budget was "
             "raised from 150 updates x 8 days (150 gradient steps), after which the policy earned less than no "
             "rebalancing; `docs/structured.md` lists the budgets, batch sizes, learning-rate schedule and features "
             "tried.", "",
             "| city | method | profit per day | % of optimum |", "|---|---|---|---|"]
    for city, per in summary["table"].items():
        for name, r in per.items():
            (p, pse), (s, sse) = r["profit"], r["percent_of_optimum"]
            lines.append(f"| {city} | {name} | {p:.1f} +- {pse:.1f} | {s:.1f} +- {sse:.1f} |")
    sig = summary["arms"]["graph RL"]["signal"]["tests"]
    evals = np.array([[v for _, v in s["eval_curve"]] for s in summary["measured"]["seeds"]])
    marks = [u for u, _ in summary["measured"]["seeds"][0]["eval_curve"]]
    lines += ["", "SE: over training seeds for graph RL, over held-out days otherwise. "
              f"LP share of the host training time: {summary['lp_share_of_training']:.0%}.", "",
              "## Training", "",
              f"Greedy policy (the Dirichlet mean) on {len(VALIDATION_DAYS)} validation days of city A (not the held-out "
              "days) during training, mean over seeds. On these days no rebalancing earns "
              f"{np.mean(summary['measured']['validation']['no rebalancing']):.1f} and equal distribution "
              f"{np.mean(summary['measured']['validation']['equal distribution']):.1f} (on the held-out days "
              f"{np.mean(summary['measured']['heuristics']['A']['no rebalancing']):.1f} and "
              f"{np.mean(summary['measured']['heuristics']['A']['equal distribution']):.1f}):", "",
              "| sampled days | " + " | ".join(str(u * setup.config.episodes) for u in marks) + " |",
              "|---|" + "---|" * len(marks),
              "| greedy profit | " + " | ".join(f"{v:.1f}" for v in evals.mean(0)) + " |", "",
              f"Sampled-day training return: first quarter {sig[0]['first_window']:.1f}, last quarter "
              f"{sig[0]['last_window']:.1f} (rise {sig[0]['change']:+.1f}, 95% interval [{sig[0]['interval'][0]:.1f}, "
              f"{sig[0]['interval'][1]:.1f}] over seeds). Per-update curves and the greedy checkpoints are in "
              "`curves/graph_RL.csv`.", "",
              "![training curve](eamod.png)", "", "## Verdict", "", *verdict_lines(summary)]
    lines += ["", "Rules: `longhorizon.repro.eamod.judge` (each claim's rule and numbers are in `summary.json`). The "
              "three profit claims are judged only when the graph-RL policy learned (its training return rose) and "
              "earns more than no rebalancing on city A's held-out days (a behaviour it can represent; a policy "
              "below it is under-trained), else `no signal`.", "",
              f"Command: `{summary['command']}`: A2C training took "
              f"{sum(s['train_seconds'] for s in summary['measured']['seeds']):.0f} s over the seeds on the shared 2-core "
              f"machine; this invocation {summary['wall_seconds']:.0f} s"
              + (f" (seeds {summary['measured']['resumed_seeds']} reused from the same setup's finished seeds under "
                 "`partial/`, as an interrupted run resumes; their held-out profits and per-step decision times are "
                 "from the invocation that trained them, and so are the horizon-LP times the speed-up compares them with; "
                 "the heuristics' profits are from this one)"
                 if summary["measured"]["resumed_seeds"] else "") + "."]
    return lines
