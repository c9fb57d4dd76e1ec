"""PQN training throughput on CartPole-v1 at the reference configuration (32 envs x 64 steps,
4 epochs x 16 minibatches, 2x256 LayerNorm MLP), side by side in one run:

* ``raw-env``: the ceiling, ``vmap``-ed gymnax CartPole-v1 stepped with random actions inside one
  ``lax.scan`` (32 copies, no learning);
* ``longhorizon``: longhorizon PQN through its fused engine (one seed, vmapped, one chunk of ``--updates``
  updates), as ``longhorizon train pqn --seeds 1`` runs it;
* ``longhorizon-novmap``: the same updates in one jitted ``lax.scan`` without the seed ``vmap``;
* ``rejax``: rejax's PQN at the same configuration, in its own virtual environment
  (``benchmarks/.venvs/rejax``: rejax needs gymnax < 1.0), built on first use by ``peer_env``.

Compilation is timed separately from execution. Each contender runs ``--seeds`` times, interleaved
(round i runs every contender with seed i), and each round gives a ratio to rejax; we report the median and range of env steps per wall-clock second and per
CPU-second of the process (all threads; steadier than wall-clock on a shared machine).

    .venv/bin/python benchmarks/pqn_throughput.py --seeds 3 [--updates 40] [--only raw-env,longhorizon,longhorizon-novmap,rejax]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES = 32, 64, 4, 16

REJAX_SCRIPT = r"""
import json, sys, time
import flax.linen as nn
import jax
from rejax import PQN
from rejax.networks import DiscreteQNetwork, EpsilonGreedyPolicy

seed, updates, num_envs, num_steps, epochs, minibatches = map(int, sys.argv[1:7])
total = updates * num_envs * num_steps
algo = PQN.create(env="CartPole-v1", num_envs=num_envs, num_steps=num_steps, num_epochs=epochs,
                  num_minibatches=minibatches, learning_rate=1e-4, max_grad_norm=10.0, gamma=0.99, td_lambda=0.95,
                  eps_start=1.0, eps_end=0.2, exploration_fraction=0.2, total_timesteps=total, eval_freq=total,
                  skip_initial_evaluation=True)
# rejax 0.1.3 fixes the Q-network at 64x64; use the reference 2x256 LayerNorm MLP like ours.
agent = EpsilonGreedyPolicy(DiscreteQNetwork)(hidden_layer_sizes=(256, 256), action_dim=2,
                                              activation=lambda x: nn.relu(nn.LayerNorm()(x)))
algo = algo.replace(agent=agent, eval_callback=lambda algo, ts, rng: ())  # time training only
key = jax.random.PRNGKey(seed)
t0 = time.perf_counter()
compiled = jax.jit(algo.train).lower(key).compile()
compile_seconds = time.perf_counter() - t0
t0, c0 = time.perf_counter(), time.process_time()
ts, _ = compiled(key)
jax.block_until_ready(ts)
seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"steps": total, "seconds": seconds, "cpu_seconds": cpu_seconds, "compile_seconds": compile_seconds,
                  "jax": jax.__version__}))
"""


def run_raw_env(seed: int, updates: int) -> dict:
    import jax

    from longhorizon.envs import make

    env = make("CartPole-v1")
    steps = updates * NUM_STEPS

    def rollout(key):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, NUM_ENVS))

        def step(carry, _):
            state, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            action = jax.random.randint(act_key, (NUM_ENVS,), 0, 2)
            obs, state, reward, term, trunc, _ = jax.vmap(env.step)(jax.random.split(step_key, NUM_ENVS), state, action)
            return (state, key), reward.sum()

        _, rewards = jax.lax.scan(step, (state, key), None, steps)
        return rewards.sum()

    key = jax.random.PRNGKey(seed)
    t0 = time.perf_counter()
    compiled = jax.jit(rollout).lower(key).compile()
    compile_seconds = time.perf_counter() - t0
    seconds, cpu_seconds = _timed(lambda: jax.block_until_ready(compiled(key)))
    return {"steps": steps * NUM_ENVS, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "compile_seconds": compile_seconds, "jax": jax.__version__}


def _timed(fn) -> tuple[float, float]:
    """Wall-clock and process CPU seconds (all threads) of ``fn()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _pqn_config():
    from longhorizon.algos import pqn

    config = pqn.default_config("CartPole-v1")
    assert (config.num_envs, config.num_steps, config.update_epochs, config.num_minibatches) == \
        (NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES)
    return config


def run_longhorizon(seed: int, updates: int) -> dict:
    """What ``longhorizon train pqn --seeds 1`` runs: the fused engine (vmapped over one seed)."""
    import jax

    from longhorizon.algos import pqn
    from longhorizon.engine.fused import FusedEngine
    from longhorizon.envs import make

    engine = FusedEngine(pqn, make("CartPole-v1"), _pqn_config(), num_seeds=1, updates_per_chunk=updates)
    state = engine.init(seed)
    compile_seconds = engine.compile(state)
    seconds, cpu_seconds = _timed(lambda: engine.run_chunk(state))  # device_get inside: the chunk has finished
    return {"steps": updates * NUM_ENVS * NUM_STEPS, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "compile_seconds": compile_seconds, "jax": jax.__version__}


def run_longhorizon_no_vmap(seed: int, updates: int) -> dict:
    """The same collect -> learn updates in one jitted scan without the seed vmap (like rejax's program)."""
    import jax

    from longhorizon.algos import pqn
    from longhorizon.engine.fused import make_update
    from longhorizon.envs import make

    update = make_update(pqn)
    state = pqn.init(jax.random.PRNGKey(seed), make("CartPole-v1"), _pqn_config())
    t0 = time.perf_counter()
    compiled = jax.jit(lambda s: jax.lax.scan(update, s, None, updates)).lower(state).compile()
    compile_seconds = time.perf_counter() - t0
    seconds, cpu_seconds = _timed(lambda: jax.block_until_ready(compiled(state)))
    return {"steps": updates * NUM_ENVS * NUM_STEPS, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "compile_seconds": compile_seconds, "jax": jax.__version__}


def run_rejax(seed: int, updates: int) -> dict:
    from peer_env import peer_python

    python = peer_python("rejax", ["rejax==0.1.3", "gymnax<1.0"])
    out = subprocess.run([str(python), "-c", REJAX_SCRIPT, str(seed), str(updates), str(NUM_ENVS), str(NUM_STEPS),
                          str(EPOCHS), str(MINIBATCHES)], capture_output=True, text=True,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    if out.returncode:
        raise RuntimeError(f"rejax run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


RUNNERS = {"raw-env": run_raw_env, "longhorizon": run_longhorizon, "longhorizon-novmap": run_longhorizon_no_vmap,
           "rejax": run_rejax}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=40, help="updates (of 2048 env steps) timed per run")
    parser.add_argument("--only", default="raw-env,longhorizon,longhorizon-novmap,rejax")
    parser.add_argument("--out", default=str(HERE / "out" / "pqn_throughput.json"))
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    names = args.only.split(",")
    for name in names:
        if name not in RUNNERS:
            raise SystemExit(f"unknown contender {name}; choose from {', '.join(RUNNERS)}")
    # Interleaved: every round runs each contender once, so a change in the machine's load hits all of them.
    results: dict[str, list[dict]] = {}
    for seed in range(args.seeds):
        for name in names:
            row = RUNNERS[name](seed, args.updates)
            row.update(seed=seed, load_average=os.getloadavg()[0], steps_per_second=row["steps"] / row["seconds"],
                       steps_per_cpu_second=row["steps"] / row["cpu_seconds"])
            results.setdefault(name, []).append(row)
            print(json.dumps({"contender": name, **row}), flush=True)

    def spread(values):
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    summary = {name: {"steps_per_second": spread([r["steps_per_second"] for r in rows]),
                      "steps_per_cpu_second": spread([r["steps_per_cpu_second"] for r in rows]),
                      "compile_seconds": spread([r["compile_seconds"] for r in rows]), "jax": rows[0]["jax"]}
               for name, rows in results.items()}
    ratios = {}
    if "rejax" in results:
        for name in results:
            if name.startswith("longhorizon"):
                pairs = list(zip(results[name], results["rejax"]))
                ratios[f"{name}/rejax"] = {
                    "wall": spread([a["steps_per_second"] / b["steps_per_second"] for a, b in pairs]),
                    "cpu": spread([a["steps_per_cpu_second"] / b["steps_per_cpu_second"] for a, b in pairs])}
    report = {"config": {"num_envs": NUM_ENVS, "num_steps": NUM_STEPS, "epochs": EPOCHS, "minibatches": MINIBATCHES,
                         "updates_timed": args.updates},
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg()},
              "runs": results, "summary": summary, "ratios_per_round": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"\nCartPole-v1 PQN throughput, {NUM_ENVS} envs x {NUM_STEPS} steps, {EPOCHS}x{MINIBATCHES} minibatches, "
          f"{args.updates} updates per run, {args.seeds} seeds")
    print(f"{'contender':19} {'env steps/s median [min, max]':>32} {'per CPU-second median [min, max]':>34} "
          f"{'compile s':>10} {'jax':>7}")
    for name, s in summary.items():
        st, cpu = s["steps_per_second"], s["steps_per_cpu_second"]
        print(f"{name:19} {st['median']:>12,.0f} [{st['min']:,.0f}, {st['max']:,.0f}]".ljust(53) +
              f"{cpu['median']:>12,.0f} [{cpu['min']:,.0f}, {cpu['max']:,.0f}]".ljust(35) +
              f"{s['compile_seconds']['median']:>10.1f} {s['jax']:>7}")
    for name, r in ratios.items():
        print(f"per-round ratio {name}: wall {r['wall']['median']:.2f} [{r['wall']['min']:.2f}, {r['wall']['max']:.2f}], "
              f"per CPU-second {r['cpu']['median']:.2f} [{r['cpu']['min']:.2f}, {r['cpu']['max']:.2f}]")

if __name__ == "__main__":
    main()
