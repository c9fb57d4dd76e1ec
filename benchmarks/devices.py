"""Seeds sharded over local devices: 4-seed PPO and PQN on CartPole-v1, side by side (a script, not a test).

Contenders, each in a fresh process (so each compiles cold and sees only its own device setting):

* ``1 device``: the fused engine as ``longhorizon train ALGO --seeds 4`` runs it (4 seeds vmapped);
* ``2 devices``: the same with ``--devices 2`` (2 seeds vmapped on each of 2 devices; on a CPU
  host JAX splits the CPU into 2 devices, ``jax_num_cpu_devices``);
* ``2 devices, 1 Eigen thread`` (with ``--eigen``): the same with ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``,
  so that matrix products do not spread over the thread pool the two devices share;
* ``rejax``: rejax's own multi-seed recipe, ``jit(vmap(algo.train))`` over 4 keys, at the same
  configuration, in its own virtual environment (``peer_env.py``; rejax needs gymnax < 1.0).

Configurations are those of the single-seed benchmarks: PPO as ``ppo_cartpole.py`` (32 envs x 128
steps, 4 epochs x 4 minibatches, 64x64 tanh MLP), PQN as ``pqn_throughput.py`` (32 envs x 64 steps,
4 epochs x 16 minibatches, 2x256 LayerNorm MLP). The whole training is one compiled chunk; compile
time is measured apart and never counted in the rates. Rounds are interleaved (the order reverses
every round); each round gives the ratios of the 2-device run to the 1-device run and to rejax.
Each round also checks that the 1- and 2-device runs trained the same parameters (largest
difference relative to the parameters' scale; float round-off, see ``tests/engine/test_devices.py``).

    .venv/bin/python benchmarks/devices.py --rounds 3 [--algos ppo,pqn] [--ppo-updates 122] [--pqn-updates 100] \\
        [--eigen] [--no-rejax]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pqn_throughput  # noqa: E402  (the PQN reference configuration)
from ppo_cartpole import EPOCHS, MINIBATCHES, NUM_ENVS, NUM_STEPS, REJAX_REQUIREMENTS, TOTAL  # noqa: E402

SEEDS = 4
PPO_OVERRIDES = {"num_envs": str(NUM_ENVS), "num_steps": str(NUM_STEPS), "update_epochs": str(EPOCHS),
                 "num_minibatches": str(MINIBATCHES), "hidden": "64,64", "activation": "tanh"}
SHAPES = {"ppo": (NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES),
          "pqn": (pqn_throughput.NUM_ENVS, pqn_throughput.NUM_STEPS, pqn_throughput.EPOCHS, pqn_throughput.MINIBATCHES)}
CONTENDERS = {"1 device": (1, ""), "2 devices": (2, ""),
              "2 devices, 1 Eigen thread": (2, "--xla_cpu_multi_thread_eigen=false")}

# rejax at the configurations of ppo_cartpole.py and pqn_throughput.py, trained over seeds as rejax
# recommends (vmap of train over keys); its periodic evaluation is replaced by a no-op.
REJAX_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import flax.linen as nn
    import jax, jax.numpy as jnp
    from rejax import PPO, PQN
    from rejax.networks import DiscreteQNetwork, EpsilonGreedyPolicy

    algo_name, updates, seeds, num_envs, num_steps, epochs, minibatches = sys.argv[1], *map(int, sys.argv[2:8])
    total = updates * num_envs * num_steps
    common = dict(env="CartPole-v1", num_envs=num_envs, num_steps=num_steps, num_epochs=epochs,
                  num_minibatches=minibatches, total_timesteps=total, eval_freq=total, skip_initial_evaluation=True)
    if algo_name == "ppo":
        algo = PPO.create(**common, learning_rate=2.5e-4, max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95,
                          clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
                          agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)})
        algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))
    else:
        algo = PQN.create(**common, learning_rate=1e-4, max_grad_norm=10.0, gamma=0.99, td_lambda=0.95,
                          eps_start=1.0, eps_end=0.2, exploration_fraction=0.2)
        agent = EpsilonGreedyPolicy(DiscreteQNetwork)(hidden_layer_sizes=(256, 256), action_dim=2,
                                                      activation=lambda x: nn.relu(nn.LayerNorm()(x)))
        algo = algo.replace(agent=agent, eval_callback=lambda algo, ts, rng: ())
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    t0 = time.perf_counter()
    train = jax.jit(jax.vmap(algo.train)).lower(keys).compile()
    compile_seconds = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(train(keys))
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"steps": total * seeds, "seconds": seconds, "cpu_seconds": cpu_seconds,
                      "compile_seconds": compile_seconds}))
""")


def worker(algo: str, devices: int, updates: int, params_out: str) -> None:
    """One measurement in this (fresh) process: the whole training of 4 seeds as one chunk."""
    from longhorizon.engine.fused import request_cpu_devices

    if devices > 1 and not request_cpu_devices(devices):
        raise SystemExit("JAX started before the device count could be set")
    import jax
    import numpy as np

    from longhorizon.runner.run import Run, RunSpec

    shape = SHAPES[algo]
    overrides = dict(PPO_OVERRIDES if algo == "ppo" else {}, total_steps=str(updates * shape[0] * shape[1]))
    run = Run(RunSpec(algo=algo, env="CartPole-v1", seeds=SEEDS, num_chunks=1, num_devices=devices,
                      config_overrides=overrides, out=str(HERE / "out" / "scratch"), quiet=True))
    assert (run.config.num_envs, run.config.num_steps, run.config.update_epochs, run.config.num_minibatches) == shape
    state = run.engine.init(0)
    jax.block_until_ready(state)
    compile_seconds = run.engine.compile(state)
    t0, c0 = time.perf_counter(), time.process_time()
    state, _ = run.engine.run_chunk(state)  # fetches the chunk's metrics: the chunk has finished
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    params = jax.device_get(run.algo.agent_params(state))
    np.savez(params_out, *jax.tree.leaves(params))
    print(json.dumps({"steps": run.num_updates * run.steps_per_update * SEEDS, "seconds": seconds,
                      "cpu_seconds": cpu_seconds, "compile_seconds": compile_seconds,
                      "devices": run.engine.num_devices, "jax": jax.__version__}))


def measure(algo: str, contender: str, updates: int, params_out: str) -> dict:
    devices, flags = CONTENDERS[contender]
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), "LONGHORIZON_COMPILE_CACHE": "0",
           "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()}
    proc = subprocess.run([sys.executable, __file__, "--worker", algo, str(devices), str(updates), params_out],
                          capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"{algo} on {contender} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_rejax(python: Path, algo: str, updates: int) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    args = [algo, updates, SEEDS, *SHAPES[algo]]
    proc = subprocess.run([str(python), "-c", REJAX_SCRIPT, *map(str, args)], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"rejax {algo} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def params_difference(a: str, b: str) -> float:
    """Largest |a - b| over every parameter, divided by the largest |a| (0: bit-identical)."""
    import numpy as np

    with np.load(a) as x, np.load(b) as y:
        diff = max(float(np.max(np.abs(x[k] - y[k]))) for k in x.files)
        scale = max(float(np.max(np.abs(x[k]))) for k in x.files)
    return diff / scale


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):,.{digits}f} ({min(values):,.{digits}f}..{max(values):,.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--algos", default="ppo,pqn")
    parser.add_argument("--ppo-updates", type=int, default=TOTAL // (NUM_ENVS * NUM_STEPS),
                        help="PPO updates of 4096 env steps per seed (default: ppo_cartpole.py's 5e5 steps)")
    parser.add_argument("--pqn-updates", type=int, default=100, help="PQN updates of 2048 env steps per seed")
    parser.add_argument("--eigen", action="store_true", help="also run 2 devices with single-threaded Eigen")
    parser.add_argument("--no-rejax", action="store_true", help="skip the peer (no venv is built)")
    parser.add_argument("--worker", nargs=4, metavar=("ALGO", "DEVICES", "UPDATES", "PARAMS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        algo, devices, updates, params_out = args.worker
        return worker(algo, int(devices), int(updates), params_out)

    from peer_env import peer_python, peer_version

    python = None if args.no_rejax else peer_python("rejax", REJAX_REQUIREMENTS)
    names = ["1 device", "2 devices"] + (["2 devices, 1 Eigen thread"] if args.eigen else []) + \
        ([] if python is None else ["rejax"])
    algos = args.algos.split(",")
    updates = {"ppo": args.ppo_updates, "pqn": args.pqn_updates}
    results = {algo: {name: [] for name in names} for algo in algos}
    differences = {algo: [] for algo in algos}
    scratch = Path(tempfile.mkdtemp(prefix="devices-bench-"))
    for round_index in range(args.rounds):
        for algo in algos:
            order = names if round_index % 2 == 0 else names[::-1]
            for name in order:
                load = os.getloadavg()[0]
                res = measure_rejax(python, algo, updates[algo]) if name == "rejax" else \
                    measure(algo, name, updates[algo], str(scratch / f"{algo}-{name}.npz"))
                res.update(load_1min=load, steps_per_second=res["steps"] / res["seconds"],
                           steps_per_cpu_second=res["steps"] / res["cpu_seconds"])
                results[algo][name].append(res)
                print(f"round {round_index + 1} {algo} {name:26s} {res['steps_per_second']:>10,.0f} steps/s  "
                      f"cpu/wall {res['cpu_seconds'] / res['seconds']:.2f}  compile {res['compile_seconds']:.1f}s  "
                      f"load {load:.1f}", file=sys.stderr, flush=True)
            differences[algo].append(params_difference(str(scratch / f"{algo}-1 device.npz"),
                                                       str(scratch / f"{algo}-2 devices.npz")))

    import jax

    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}"
    peer = "" if python is None else f"; rejax {peer_version(python, 'rejax')} with gymnax {peer_version(python, 'gymnax')}"
    lines = [f"4 seeds on CartPole-v1, {args.rounds} interleaved rounds; machine: {machine}{peer}", ""]
    for algo in algos:
        rows = results[algo]
        one = [r["steps_per_second"] for r in rows["1 device"]]
        base = rows.get("rejax")
        lines += [f"{algo.upper()}, {updates[algo]} updates x {SHAPES[algo][0] * SHAPES[algo][1]} env steps per seed; "
                  f"1- vs 2-device parameters differ by at most {max(differences[algo]):.1e} of their scale", "",
                  "| what | env steps/s (all seeds), median (min..max) | / 1 device, per round | / rejax, per round | "
                  "CPU-s per wall-s | compile s | 1-min load per round |",
                  "|---|---|---|---|---|---|---|"]
        for name, res in rows.items():
            sps = [r["steps_per_second"] for r in res]
            vs_one = [s / o for s, o in zip(sps, one)]
            vs_rejax = "-" if base is None else spread([s / b["steps_per_second"] for s, b in zip(sps, base)])
            lines.append(f"| {name} | {spread(sps, 0)} | {spread(vs_one)} | {vs_rejax} | "
                         f"{spread([r['cpu_seconds'] / r['seconds'] for r in res])} | "
                         f"{statistics.median(r['compile_seconds'] for r in res):.1f} | "
                         f"{', '.join(format(r['load_1min'], '.1f') for r in res)} |")
        lines.append("")
    table = "\n".join(lines)
    print(table)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "devices.json").write_text(json.dumps({"results": results, "differences": differences, "table": table,
                                                  "machine": machine, "args": vars(args)}, indent=2))


if __name__ == "__main__":
    main()
