"""Belief splitting vs CFR+ on Hexner's game, side by side in one run (a script, not a test).

Per round, interleaved over ``--repeats`` rounds: the structured solver (games/cams.py: backward induction
on the belief grid + its equilibrium tree) and CFR+ (games/cfr.py) on the game discretised to ``--actions``
accelerations per player and step for ``--iterations`` iterations (its whole ``solve``: iterations, the
exploitability evaluation and the transfers). CFR+'s compile time is measured once, before the rounds, and
never counted; the structured solver is numpy (nothing to compile). Reported per
round: wall and CPU seconds of each and the ratio CFR+ / structured; then the median and min..max, and the
value of each (CFR+'s differs by its discretisation error). Writes JSON to ``benchmarks/out/cams_cfr.json``.

    python benchmarks/cams_cfr.py --repeats 5 --steps 4 --actions 5 --iterations 500
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--actions", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--beliefs", type=int, default=101)
    parser.add_argument("--positions", type=int, default=401)
    args = parser.parse_args()

    from longhorizon.games import cams, cfr

    game = cams.HexnerGame(steps=args.steps)
    grid = cams.GridConfig(beliefs=args.beliefs, positions=args.positions)
    prior = np.array([0.5, 0.5])
    solution = cams.solve(game, grid)
    levels = cams.equilibrium_tree(game, solution)
    a_max = round(1.2 * max([abs(u) for nodes in levels for n in nodes for _, _, u in n["children"]]
                            + [abs(n["v"]) for nodes in levels for n in nodes]), 2)
    payoff = cams.discretised_payoffs(game, np.linspace(-a_max, a_max, args.actions))
    shape = cfr.TreeShape(2, args.actions, args.actions, args.steps)
    warm = cfr.solve(payoff, prior, shape, 100)  # compiles the 100-iteration chunk used below
    rounds = []
    for r in range(args.repeats):
        sol, s_wall, s_cpu = timed(lambda: cams.equilibrium_tree(game, cams.solve(game, grid)))
        res, c_wall, c_cpu = timed(lambda: cfr.solve(payoff, prior, shape, args.iterations))
        rounds.append({"structured_s": s_wall, "structured_cpu_s": s_cpu, "cfr_s": c_wall, "cfr_cpu_s": c_cpu,
                       "ratio_wall": c_wall / s_wall, "ratio_cpu": c_cpu / s_cpu,
                       "load1": os.getloadavg()[0], "cfr_value": res.value, "cfr_exploitability": res.exploitability})
        print(f"round {r}: structured {s_wall:.2f} s, CFR+ {c_wall:.2f} s, ratio {rounds[-1]['ratio_wall']:.1f} "
              f"(load {rounds[-1]['load1']:.1f})", flush=True)
    med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
    span = {k: (min(x[k] for x in rounds), max(x[k] for x in rounds)) for k in rounds[0]}
    print(f"\nHexner K={args.steps}: structured grid {args.positions} x {args.beliefs}, CFR+ U={args.actions} "
          f"({shape.nodes():,} decision nodes), {args.iterations} iterations; CFR+ compile {warm.compile_seconds:.1f} s\n")
    print("| solver | value | wall s (median, min..max) | CPU s (median) |")
    print("|---|---|---|---|")
    print(f"| structured (belief splitting) | {solution['value']:.5f} | {med['structured_s']:.2f} "
          f"[{span['structured_s'][0]:.2f}, {span['structured_s'][1]:.2f}] | {med['structured_cpu_s']:.2f} |")
    print(f"| CFR+ U={args.actions} | {med['cfr_value']:.5f} (exploitability {med['cfr_exploitability']:.1e}) | "
          f"{med['cfr_s']:.2f} [{span['cfr_s'][0]:.2f}, {span['cfr_s'][1]:.2f}] | {med['cfr_cpu_s']:.2f} |")
    print(f"\nratio CFR+ / structured per round: wall {med['ratio_wall']:.1f}x [{span['ratio_wall'][0]:.1f}, "
          f"{span['ratio_wall'][1]:.1f}], CPU {med['ratio_cpu']:.1f}x [{span['ratio_cpu'][0]:.1f}, {span['ratio_cpu'][1]:.1f}]")
    out = HERE / "out" / "cams_cfr.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "a_max": a_max, "compile_seconds": warm.compile_seconds,
                               "structured_value": solution["value"], "rounds": rounds}, indent=2) + "\n")


if __name__ == "__main__":
    main()
