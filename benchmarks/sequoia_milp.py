"""The Q-network MILP's solve time: cold vs myopic warm start vs brute force, side by side (a script, not a test).

Per round, interleaved over ``--repeats`` rounds and for each N in ``--arms`` (budget family, 2 N action bits,
budget N // 3 cost units, a ReLU network ``--hidden`` at init): the same ``--states`` states are solved by
``milp_q.solve_q`` without a warm start (cold), with the myopic MILP's action as HiGHS's first incumbent (warm,
the myopic solve included) and, for 2 N <= 16, by enumerating every action in numpy (brute force; the MILP's
value is checked against it). Reported per N: median wall and CPU seconds per solve of each and the per-round ratio
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


def timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def one_round(env, net, states) -> dict:
    """Mean wall and CPU seconds per state of each way to compute max_a Q(s, a)."""
    sums = {k: 0.0 for k in ("cold", "warm", "brute", "cold_cpu", "warm_cpu", "brute_cpu")}
    for obs in states:
        cons = env.constraints(obs)
        exact, wall, cpu = timed(lambda: milp_q.solve_q(net, obs, cons))
        sums["cold"], sums["cold_cpu"] = sums["cold"] + wall, sums["cold_cpu"] + cpu
        _, wall, cpu = timed(lambda: milp_q.solve_q(net, obs, cons, warm=milp_q.solve_linear(cons, env.expected_gain(obs))))
        sums["warm"], sums["warm_cpu"] = sums["warm"] + wall, sums["warm_cpu"] + cpu
        if env.n_actions <= 16:
            best, wall, cpu = timed(lambda: brute_force(env, net, obs, cons))
            sums["brute"], sums["brute_cpu"] = sums["brute"] + wall, sums["brute_cpu"] + cpu
            assert abs(best - exact.value) < 1e-6, (best, exact.value)
    out = {k: v / len(states) for k, v in sums.items()}
    if env.n_actions > 16:
        out["brute"] = out["brute_cpu"] = None
    return out


def brute_force(env, net, obs, cons) -> float:
    actions = np.array(list(itertools.product([0.0, 1.0], repeat=env.n_actions)))
    rows = actions @ cons.matrix.T
    ok = np.all((rows >= cons.lb) & (rows <= cons.ub), axis=1)
    return float(milp_q.forward(net, obs, actions[ok])[0].max())


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
        row = {"n_arms": n, "action_bits": env.n_actions,
               **{k: statistics.median(r[k] for r in rs) if rs[0][k] is not None else None for k in rs[0]},
               "warm_over_cold": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
        report.append(row)
        brute = f"{row['brute']:.4f} ({row['brute_cpu']:.4f})" if row["brute"] is not None else "-"
        print(f"N={n:3d} bits={env.n_actions:3d}  wall (CPU) s per solve: cold {row['cold']:.4f} ({row['cold_cpu']:.4f})  "
              f"warm {row['warm']:.4f} ({row['warm_cpu']:.4f})  brute {brute}  "
              f"warm/cold {row['warm_over_cold']:.2f} [{row['ratio_min']:.2f}, {row['ratio_max']:.2f}]")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "sequoia_milp.json").write_text(json.dumps({"args": vars(args), "rows": report}, indent=2) + "\n")


if __name__ == "__main__":
    main()
