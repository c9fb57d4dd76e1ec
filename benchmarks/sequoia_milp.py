"""The Q-network MILP's solve time: cold vs myopic warm start vs brute force, side by side (a script, not a test).

Per round, interleaved over ``--repeats`` rounds and for each N in ``--arms`` (budget family, 2 N action bits,
budget N // 3 cost units, a ReLU network ``--hidden`` at init): the same ``--states`` states are solved by
``milp_q.solve_q`` without a warm start (cold), with the myopic MILP's action as HiGHS's first incumbent (warm,
the myopic solve included) and, for 2 N <= 16, by enumerating every action in numpy (brute force; the MILP's
value is checked against it). Reported per N: median seconds per solve of each and the per-round ratio
warm / cold (median, min..max). Nothing is compiled (numpy and HiGHS). Writes ``benchmarks/out/sequoia_milp.json``.

    python benchmarks/sequoia_milp.py --repeats 3 --arms 4,8,12 --states 4 --hidden 16
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import jax
import numpy as np

from longhorizon.structured import milp_q
from longhorizon.structured.restless import RestlessBandit, RestlessConfig

HERE = Path(__file__).resolve().parent


def one_round(env, net, states) -> dict:
    cold = warm = brute = 0.0
    for obs in states:
        cons = env.constraints(obs)
        t0 = time.perf_counter()
        exact = milp_q.solve_q(net, obs, cons)
        t1 = time.perf_counter()
        milp_q.solve_q(net, obs, cons, warm=milp_q.solve_linear(cons, env.expected_gain(obs)))
        t2 = time.perf_counter()
        cold, warm = cold + t1 - t0, warm + t2 - t1
        if env.n_actions <= 16:
            t3 = time.perf_counter()
            actions = np.array(list(itertools.product([0.0, 1.0], repeat=env.n_actions)))
            rows = actions @ cons.matrix.T
            ok = np.all((rows >= cons.lb) & (rows <= cons.ub), axis=1)
            best = milp_q.forward(net, obs, actions[ok])[0].max()
            brute += time.perf_counter() - t3
            assert abs(best - exact.value) < 1e-6, (best, exact.value)
    n = len(states)
    return {"cold": cold / n, "warm": warm / n, "brute": brute / n if env.n_actions <= 16 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arms", default="4,8,12")
    parser.add_argument("--states", type=int, default=4)
    parser.add_argument("--hidden", default="16")
    args = parser.parse_args()
    hidden = tuple(int(h) for h in args.hidden.split(","))
    setups = []
    for n in (int(a) for a in args.arms.split(",")):
        env = RestlessBandit(RestlessConfig(family="budget", n_arms=n, budget=max(2, n // 3)))
        params = milp_q.QNet(hidden).init(jax.random.PRNGKey(n), np.zeros((1, env.obs_dim + env.n_actions)))
        rng = np.random.default_rng(n)
        setups.append((n, env, milp_q.layers(params, hidden), [env.reset(rng) for _ in range(args.states)]))
    rounds = {n: [] for n, *_ in setups}
    for _ in range(args.repeats):
        for n, env, net, states in setups:
            rounds[n].append(one_round(env, net, states))
    report = []
    for n, env, *_ in setups:
        rs = rounds[n]
        ratios = [r["warm"] / r["cold"] for r in rs]
        row = {"n_arms": n, "action_bits": env.n_actions, "cold_s": statistics.median(r["cold"] for r in rs),
               "warm_s": statistics.median(r["warm"] for r in rs),
               "brute_s": statistics.median(r["brute"] for r in rs) if rs[0]["brute"] is not None else None,
               "warm_over_cold": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
        report.append(row)
        brute = f"{row['brute_s']:.4f}" if row["brute_s"] is not None else "-"
        print(f"N={n:3d} bits={env.n_actions:3d}  cold {row['cold_s']:.4f} s  warm {row['warm_s']:.4f} s  "
              f"brute {brute} s  warm/cold {row['warm_over_cold']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}]")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "sequoia_milp.json").write_text(json.dumps({"args": vars(args), "rows": report}, indent=2) + "\n")


if __name__ == "__main__":
    main()
