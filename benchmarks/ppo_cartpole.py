"""PPO throughput on CartPole-v1, side by side in one run (a script, not a test).

Three measurements at the same batch (32 envs x 128 steps, 4 epochs x 4 minibatches, 64x64 tanh
MLP, 5e5 env steps, one seed), interleaved over ``--repeats`` rounds:

* ``raw env``: the vectorised gymnax CartPole stepping with random actions (the ceiling);
* ``longhorizon``: our fused engine running the whole training as one chunk;
* ``rejax``: rejax's PPO at the same configuration, in its own virtual environment (it needs
  gymnax < 1.0), created on first use by ``peer_env.py``.

``--baseline-src DIR`` adds ``longhorizon (baseline)``: the same measurement with another checkout's
``src`` folder (e.g. ``git worktree add /tmp/base REV``), in a subprocess, to measure a change side by side.

Compile time is measured separately (cold: the persistent cache is not used) and never counted in
the rates. Rates are given per wall-clock second and per CPU-second of the process (the latter is
far less sensitive to other jobs on a shared machine). Prints a markdown table (median and min..max
over repeats, with the 1-minute load average beside each round) and writes JSON to ``benchmarks/out/ppo_cartpole.json``.

    python benchmarks/ppo_cartpole.py --repeats 5 [--baseline-src /tmp/base/src]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES, TOTAL = 32, 128, 4, 4, 500_000
REJAX_REQUIREMENTS = ["rejax==0.1.3", "gymnax<1.0"]  # same list as the PQN benchmark: one shared venv


def measure_longhorizon() -> dict:
    import jax

    from longhorizon.runner.run import Run, RunSpec

    overrides = dict(num_envs=str(NUM_ENVS), num_steps=str(NUM_STEPS), update_epochs=str(EPOCHS),
                     num_minibatches=str(MINIBATCHES), total_steps=str(TOTAL), hidden="64,64", activation="tanh")
    run = Run(RunSpec(algo="ppo", env="CartPole-v1", config_overrides=overrides, seeds=1, num_chunks=1,
                      out=str(HERE / "out" / "scratch"), quiet=True))
    state = run.engine.init(0)
    jax.block_until_ready(state)
    compile_s = run.engine.compile(state)
    c0, t0 = time.process_time(), time.perf_counter()
    state, metrics = run.engine.run_chunk(state)
    jax.block_until_ready(state)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = run.num_chunks * run.steps_per_chunk
    ret = float(metrics["episode_return_sum"][0] / max(metrics["episodes"][0], 1))
    return {"steps": steps, "seconds": elapsed, "steps_per_second": steps / elapsed, "compile_seconds": compile_s,
            "steps_per_cpu_second": steps / cpu, "last_chunk_mean_return": ret}


def measure_raw_env() -> dict:
    import jax

    from longhorizon.envs import make, vectorize

    venv = vectorize(make("CartPole-v1"), NUM_ENVS)
    num_iters = TOTAL // NUM_ENVS

    def rollout(key):
        obs, state = venv.reset(key)

        def step(carry, _):
            state, key = carry
            key, a_key, s_key = jax.random.split(key, 3)
            action = jax.random.randint(a_key, (NUM_ENVS,), 0, 2)
            obs, state, reward, *_ = venv.step(s_key, state, action)
            return (state, key), reward.sum()

        _, rewards = jax.lax.scan(step, (state, key), None, num_iters)
        return rewards.sum()

    t0 = time.perf_counter()
    compiled = jax.jit(rollout).lower(jax.random.PRNGKey(0)).compile()
    compile_s = time.perf_counter() - t0
    c0, t0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(compiled(jax.random.PRNGKey(1)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = num_iters * NUM_ENVS
    return {"steps": steps, "seconds": elapsed, "steps_per_second": steps / elapsed, "compile_seconds": compile_s,
            "steps_per_cpu_second": steps / cpu}


REJAX_SCRIPT = textwrap.dedent(f"""
    import json, time, jax, jax.numpy as jnp
    from rejax import PPO
    steps = ({TOTAL} // ({NUM_ENVS} * {NUM_STEPS})) * {NUM_ENVS} * {NUM_STEPS}  # the same updates as ours
    algo = PPO.create(env="CartPole-v1", num_envs={NUM_ENVS}, num_steps={NUM_STEPS}, num_epochs={EPOCHS},
                      num_minibatches={MINIBATCHES}, total_timesteps=steps, learning_rate=2.5e-4,
                      max_grad_norm=0.5, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
                      eval_freq=steps, skip_initial_evaluation=True,
                      agent_kwargs={{"activation": "tanh", "hidden_layer_sizes": (64, 64)}})
    # rejax evaluates 128 episodes every eval_freq steps; time training only, as for ours.
    algo = algo.replace(eval_callback=lambda algo, ts, rng: jnp.zeros(()))
    key = jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    train = jax.jit(algo.train).lower(key).compile()
    compile_s = time.perf_counter() - t0
    c0, t0 = time.process_time(), time.perf_counter()
    out = train(key)
    jax.block_until_ready(out)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({{"steps": steps, "seconds": elapsed, "steps_per_second": steps / elapsed,
                      "compile_seconds": compile_s, "steps_per_cpu_second": steps / cpu}}))
""")



def measure_in_subprocess(what: str, python, code: str, **env) -> dict:
    """Run ``code`` (which prints one JSON result last) with ``python`` and the extra ``env``."""
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_rejax(python: Path) -> dict:
    return measure_in_subprocess("rejax", python, REJAX_SCRIPT, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", ""))


def measure_baseline(src: str) -> dict:
    """``measure_longhorizon`` with the package imported from ``src`` (another checkout), in a subprocess."""
    code = (f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import ppo_cartpole as b; "
            "print(json.dumps(b.measure_longhorizon()))")
    return measure_in_subprocess("baseline", sys.executable, code, PYTHONPATH=src)


def summarise(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}..{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-rejax", action="store_true", help="skip the peer (no venv is built)")
    parser.add_argument("--baseline-src", default="", help="another checkout's src folder, measured as 'longhorizon (baseline)'")
    args = parser.parse_args()
    os.environ.setdefault("LONGHORIZON_COMPILE_CACHE", "0")

    from peer_env import peer_python, peer_version

    python = None if args.no_rejax else peer_python("rejax", REJAX_REQUIREMENTS)
    if args.baseline_src and not (Path(args.baseline_src) / "longhorizon").is_dir():
        parser.error(f"--baseline-src {args.baseline_src} holds no longhorizon package; pass a checkout's src folder.")
    results: dict[str, list[dict]] = {"raw env": [], "longhorizon": [], "longhorizon (baseline)": [], "rejax": []}
    loads = []
    for i in range(args.repeats):
        order = ["raw env", "longhorizon (baseline)", "longhorizon", "rejax"]
        for name in (order if i % 2 == 0 else order[::-1]):
            if (name == "rejax" and python is None) or (name == "longhorizon (baseline)" and not args.baseline_src):
                continue
            load = os.getloadavg()[0]
            res = {"raw env": measure_raw_env, "longhorizon": measure_longhorizon,
                   "longhorizon (baseline)": lambda: measure_baseline(args.baseline_src),
                   "rejax": lambda: measure_rejax(python)}[name]()
            res["load_1min"] = load
            results[name].append(res)
            print(f"round {i + 1} {name:12s} {res['steps_per_second']:>12,.0f} steps/s  compile {res['compile_seconds']:.1f}s  load {load:.1f}",
                  file=sys.stderr, flush=True)
        loads.append(os.getloadavg()[0])

    import jax

    rows = []
    ours = [r["steps_per_second"] for r in results["longhorizon"]]
    ours_cpu = [r["steps_per_cpu_second"] for r in results["longhorizon"]]
    for name, res in results.items():
        if not res:
            continue
        sps = [r["steps_per_second"] for r in res]
        ratio = [o / s for o, s in zip(ours, sps)]
        cpu = [r["steps_per_cpu_second"] for r in res]
        cpu_ratio = [o / s for o, s in zip(ours_cpu, cpu)]
        rows.append(f"| {name} | {summarise(sps)} | {statistics.median(ratio):.2f} ({min(ratio):.2f}..{max(ratio):.2f}) | "
                    f"{summarise(cpu)} | {statistics.median(cpu_ratio):.2f} ({min(cpu_ratio):.2f}..{max(cpu_ratio):.2f}) | "
                    f"{statistics.median(r['compile_seconds'] for r in res):.1f} | "
                    f"{', '.join(format(r['load_1min'], '.1f') for r in res)} |")
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__} on {jax.devices()[0].platform}"
    table = "\n".join([
        f"PPO on CartPole-v1, {NUM_ENVS} envs x {NUM_STEPS} steps, {EPOCHS} epochs x {MINIBATCHES} minibatches, "
        f"64x64 tanh MLP, {TOTAL:,} env steps, 1 seed; {args.repeats} interleaved repeats; machine: {machine}"
        + ("" if python is None else f"; rejax {peer_version(python, 'rejax')} with gymnax {peer_version(python, 'gymnax')}"),
        "",
        "| what | env steps/s (wall), median (min..max) | longhorizon / this | env steps per CPU-second | longhorizon / this (CPU) | compile s | 1-min load per round |",
        "|---|---|---|---|---|---|---|", *rows])
    print(table)
    out = HERE / "out"
    out.mkdir(exist_ok=True)
    (out / "ppo_cartpole.json").write_text(json.dumps({"results": results, "table": table, "machine": machine}, indent=2))


if __name__ == "__main__":
    main()
