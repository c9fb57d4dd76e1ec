"""Agent-steps per second of the networked Prisoner's Dilemma (a script, not a test).

For N = 100 (10x10 torus) and N = 2,500 (50x50 torus), three jitted ``lax.scan`` programs over
``--steps`` joint steps, interleaved over ``--repeats`` rounds:

* ``env``: ``step_arrays`` with uniformly random actions (the ceiling);
* ``env + act``: the shared DQN's ``collect`` (epsilon-greedy on one shared MLP (32, 32) for all
  agents, the environment step, the replay write);
* ``env + act + learn``: ``collect`` then ``learn`` (one gradient step of batch 32), a training step.

An agent-step is one agent's action in one joint step (N per joint step). Compile time is measured
once per program and never counted in the rates. Prints a markdown table (median and min..max over
rounds, the ratio to ``env`` per round) and writes JSON to ``benchmarks/out/dilemma_speed.json``.

    python benchmarks/dilemma_speed.py --repeats 5 --steps 2000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import jax

from longhorizon.structured import shared_dqn
from longhorizon.structured.dilemma import DilemmaConfig, NetworkedDilemma

HERE = Path(__file__).resolve().parent


def programs(side: int, steps: int) -> dict:
    env = NetworkedDilemma(DilemmaConfig(side=side, max_steps=10 ** 9))
    train = shared_dqn.make_train(env, shared_dqn.Config(sharing="shared", total_steps=steps, learning_starts=1))

    def env_only(key):
        def step(carry, _):
            state, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            actions = jax.random.randint(act_key, (env.num_agents,), 0, 2)
            _, state, rewards, _, _ = env.step_arrays(step_key, state, actions)
            return (state, key), rewards.mean()

        return jax.lax.scan(step, (env.reset_arrays(key)[1], key), None, length=steps)[1]

    def acting(state):
        return jax.lax.scan(lambda s, _: train.collect(s, 0.1), state, None, length=steps)[1]["cooperation"]

    def training(state):
        return jax.lax.scan(lambda s, _: (lambda s2, m: (train.learn(s2), m))(*train.collect(s, 0.1)),
                            state, None, length=steps)[1]["cooperation"]

    key = jax.random.PRNGKey(0)
    state = train.init(key, None)
    return {"env": (jax.jit(env_only), key), "env + act": (jax.jit(acting), state),
            "env + act + learn": (jax.jit(training), state)}, env.num_agents


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--sides", default="10,50")
    args = parser.parse_args()
    rows = []
    for side in map(int, args.sides.split(",")):
        progs, n = programs(side, args.steps)
        compiled, compile_s = {}, {}
        for name, (fn, arg) in progs.items():
            start = time.perf_counter()
            compiled[name] = fn.lower(arg).compile()
            compile_s[name] = time.perf_counter() - start
        rates = {name: [] for name in progs}
        for _ in range(args.repeats):  # interleaved: each round runs every program once
            for name, (_, arg) in progs.items():
                start = time.perf_counter()
                jax.block_until_ready(compiled[name](arg))
                rates[name].append(n * args.steps / (time.perf_counter() - start))
        for name in progs:
            ratios = [r / e for r, e in zip(rates[name], rates["env"])]
            rows.append({"agents": n, "program": name, "median": statistics.median(rates[name]), "min": min(rates[name]),
                         "max": max(rates[name]), "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                         "ratio_max": max(ratios), "compile_s": compile_s[name]})
    print(f"load average {os.getloadavg()[0]:.1f}; {args.steps} joint steps, {args.repeats} rounds\n")
    print("| agents | program | agent-steps/s, median (min..max) | vs env, per round | compile s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['agents']:,} | {r['program']} | {r['median']:,.0f} ({r['min']:,.0f}..{r['max']:,.0f}) | "
              f"{r['ratio_median']:.2f} ({r['ratio_min']:.2f}..{r['ratio_max']:.2f}) | {r['compile_s']:.1f} |")
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "dilemma_speed.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
