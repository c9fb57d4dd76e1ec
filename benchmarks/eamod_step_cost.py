"""E-AMoD decision cost per step: graph-RL policy + LPs vs solving the full horizon LP (a script, not a test).

City A of ``longhorizon repro eamod`` (5 regions x 4 charge levels, 40 vehicles, 12-step day). In each
round, interleaved, on the states of one day under the untrained policy (sampled):

* ``forward``: the jitted graph-network forward pass (after compilation; compile time reported apart);
* ``matching LP`` and ``rebalancing LP``: one HiGHS solve each (the model is built once, only bounds change);
* ``horizon LP``: one solve of the full time-expanded LP of the day (what a model-predictive controller
  solves at every step; its model build is timed apart).

Per round: medians over the day's steps; the ratio horizon LP / (forward + rebalancing LP). Prints a
markdown table (median and min..max over rounds) and writes JSON to ``benchmarks/out/eamod_step_cost.json``.

    python benchmarks/eamod_step_cost.py --rounds 5
    python benchmarks/eamod_step_cost.py --rounds 5 --regions 12   # a larger city: how the ratio grows
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_round(net, agent, params, day: int) -> dict:
    import jax
    import numpy as np

    from longhorizon.structured import amod

    demand = net.demand(day)
    x, rows = net.initial_vehicles(), []
    for t in range(len(demand)):
        t0 = time.perf_counter()
        matched = amod.match(net, x, demand[t])
        t1 = time.perf_counter()
        idle = x - matched.sum(-1)
        w, _ = agent.act(params, net, t, idle, jax.random.PRNGKey(t))
        t2 = time.perf_counter()
        moves = amod.rebalance(net, idle, amod.integer_target(w, idle.sum()))
        t3 = time.perf_counter()
        x, _ = amod.advance(net, matched, moves)
        rows.append((t1 - t0, t2 - t1, t3 - t2))
    t0 = time.perf_counter()
    horizon = amod.full_information_optimum(net, demand)
    build = time.perf_counter() - t0 - horizon["seconds"]
    match_s, forward_s, rebalance_s = (float(np.median(c)) for c in zip(*rows))
    return {"forward": forward_s, "matching LP": match_s, "rebalancing LP": rebalance_s,
            "horizon LP": horizon["seconds"], "horizon LP build": build,
            "ratio": horizon["seconds"] / (forward_s + rebalance_s), "load": os.getloadavg()[0]}


def larger_city(regions: int):
    from longhorizon.repro.eamod import CITY_A
    from longhorizon.structured import amod

    edges = tuple((i, (i + 1) % regions) for i in range(regions)) + tuple((i, i + regions // 2) for i in range(regions // 2))
    diameter = int(amod.hop_distances(regions, edges).max())
    return amod.City(regions=regions, charge_levels=diameter + 3, edges=edges, stations=tuple(range(0, regions, 3)),
                     fleet=CITY_A.fleet * regions // CITY_A.regions,
                     demand_scale=CITY_A.demand_scale * CITY_A.regions / regions, steps=CITY_A.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--regions", type=int, default=0,
                        help="0: city A; N: a ring of N regions with chords to the opposite region, the same "
                             "vehicles and requests per region as city A")
    args = parser.parse_args()

    import jax

    from longhorizon.repro.eamod import CITY_A, Setup
    from longhorizon.structured import amod
    from longhorizon.structured import amod_policy as ap

    net = amod.Network(CITY_A if not args.regions else larger_city(args.regions))
    agent = ap.Agent(net.C, Setup().config)
    t0 = time.perf_counter()
    params, _ = agent.init(jax.random.PRNGKey(0), net)
    agent.act(params, net, 0, net.initial_vehicles(), jax.random.PRNGKey(0))
    compile_s = time.perf_counter() - t0
    rounds = [one_round(net, agent, params, day) for day in range(args.rounds)]
    keys = ["forward", "matching LP", "rebalancing LP", "horizon LP", "horizon LP build"]
    print(f"compile (init + act): {compile_s:.2f} s; {net.R} regions x {net.C} levels, horizon LP "
          f"{amod.full_information_optimum(net, net.demand(0))['variables']} variables\n")
    print("| per step | median ms | min..max ms |\n|---|---|---|")
    for k in keys:
        v = [1e3 * r[k] for r in rounds]
        print(f"| {k} | {statistics.median(v):.2f} | {min(v):.2f}..{max(v):.2f} |")
    ratios = [r["ratio"] for r in rounds]
    print(f"| horizon LP / (forward + rebalancing LP) | {statistics.median(ratios):.1f}x | "
          f"{min(ratios):.1f}..{max(ratios):.1f}x |")
    print(f"\nload average per round: {[round(r['load'], 1) for r in rounds]}")
    out = HERE / "out" / "eamod_step_cost.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"compile_seconds": compile_s, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
