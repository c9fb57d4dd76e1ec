"""PPO on gymnasium environments: longhorizon's host engine against sbx and Stable-Baselines3 (a script, not a test).

Three trainers run the same PPO on the same gymnasium environment, each in a fresh process per
round, interleaved over ``--rounds`` rounds (the order reverses every round):

* ``longhorizon``: ``train ppo --env gymnasium:ID`` (the host engine: a ``gymnasium.vector``
  ``SyncVectorEnv`` stepped on the host through a callback inside the compiled chunk, acting and
  learning compiled), driven through :func:`longhorizon.runner.run.train`; its rate is the summary's
  ``steps_per_second`` and its compile time the summary's ``compile_seconds``;
* ``sbx``: Stable-Baselines3-JAX (``sbx-rl``) PPO; a first short ``learn`` (one rollout and one
  update) is timed apart and its excess over the steady rate reported as sbx's JIT warm-up, then
  the same model trains again from a reset environment and step counter (timed);
* ``sb3``: Stable-Baselines3 PPO (PyTorch, ``--sb3-threads`` threads);

both peers step SB3's ``DummyVecEnv`` (one process, copies stepped in a loop: the same work as
``SyncVectorEnv``). The hyperparameters are longhorizon's defaults for the environment, set on all
three: ``num_envs`` = ``n_envs``, ``num_steps`` = ``n_steps``, ``update_epochs`` = ``n_epochs``,
minibatch size ``num_envs * num_steps / num_minibatches`` = ``batch_size``, the learning rate
annealed linearly to 0, the same gamma, GAE lambda, clip range, entropy and value coefficients and
gradient-norm clip, separate 64x64 tanh actor and critic, advantages normalised per minibatch, no
value clipping; observation and reward normalisation (``VecNormalize`` for the peers) where
longhorizon's defaults use them (continuous control). Every trainer runs the same number of updates.

Where the time goes, per update of ``num_envs * num_steps`` env steps:

* ``raw env``: the vector environment alone with pre-drawn random actions (``SyncVectorEnv`` in
  longhorizon's venv, ``DummyVecEnv`` in the peers'), the ceiling of any trainer;
* longhorizon ``parts``: jitted ``collect`` (act + env through the host callback), jitted ``learn``,
  the env through the callback with random actions alone (so act = collect - env), and a callback
  that does nothing but return arrays of the same shapes (the cost of the callback mechanism);
* the peers: the time inside ``collect_rollouts`` (env + act + buffer) and inside ``train`` (learn),
  measured by wrapping those methods of the timed model.

Rates are env steps per wall-clock second and per CPU-second of the process (all its threads;
far less sensitive to other jobs on a shared machine). The 1-minute load average is recorded
before and after every measurement. The peers live in their own virtual environment (torch 2.13.0
CPU wheel, stable-baselines3, sbx-rl, the same jax, flax, optax and gymnasium versions as
longhorizon), built once under ``benchmarks/.venvs/sbx`` by ``peer_env.py``.

    .venv/bin/python benchmarks/gymnasium_ppo.py --rounds 3 --out docs/results/bench/gymnasium_ppo.json
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ENVS = ("CartPole-v1", "Pendulum-v1")
CONTENDERS = ("longhorizon", "sbx", "sb3")
# The same jax/flax/optax/gymnasium as longhorizon's .venv, so that XLA and the environments are equal.
PEER_REQUIREMENTS = ["torch==2.13.0", "stable-baselines3>=2.9,<3", "sbx-rl==0.28.0", "jax==0.10.2", "jaxlib==0.10.2",
                     "flax==0.12.8", "optax==0.2.8", "gymnasium[classic-control]==1.3.0"]


def ppo_settings(env_id: str, total: int) -> dict:
    """longhorizon's default PPO config for ``gymnasium:env_id`` as the plain numbers every trainer gets."""
    from longhorizon.algos import ppo
    from longhorizon.envs.registry import make

    config = ppo.default_config(make(f"gymnasium:{env_id}"))
    if config.correction != "none" or config.clip_value or not config.normalize_advantages:
        raise SystemExit("the peers' PPO has no off-policy correction or value clipping and always normalises "
                         "advantages; the benchmark needs longhorizon's defaults to match that.")
    batch = config.num_envs * config.num_steps
    return {
        "env": env_id, "num_envs": config.num_envs, "num_steps": config.num_steps, "update_epochs": config.update_epochs,
        "num_minibatches": config.num_minibatches, "minibatch_size": batch // config.num_minibatches,
        "learning_rate": config.learning_rate, "anneal_lr": config.anneal_lr, "gamma": config.gamma,
        "gae_lambda": config.gae_lambda, "clip_eps": config.clip_eps, "ent_coef": config.ent_coef,
        "vf_coef": config.vf_coef, "max_grad_norm": config.max_grad_norm, "hidden": list(config.hidden),
        "activation": config.activation, "normalize_observations": config.normalize_observations,
        "normalize_rewards": config.normalize_rewards,
        # Whole updates only, so that every trainer runs the same number of them.
        "updates": total // batch, "total_steps": (total // batch) * batch,
    }


# --------------------------------------------------------------------------- longhorizon
LONGHORIZON_TRAIN = textwrap.dedent("""
    import json, sys, time
    from longhorizon.runner.run import Run, RunSpec, train

    s, out = json.loads(sys.argv[1]), sys.argv[2]
    overrides = {k: str(s[k]) for k in ("num_envs", "num_steps", "update_epochs", "num_minibatches",
                                         "learning_rate", "total_steps")}
    overrides.update(hidden=",".join(map(str, s["hidden"])), activation=s["activation"])
    spec = RunSpec(algo="ppo", env="gymnasium:" + s["env"], config_overrides=overrides, seeds=1, out=out,
                   quiet=True, num_chunks=s["chunks"], eval_episodes=5)
    run = Run(spec)
    cpu = [0.0]
    run_chunk = run.engine.run_chunk

    def timed_chunk(*args, **kwargs):  # CPU time of the training chunks only (all threads of the process)
        c0 = time.process_time()
        result = run_chunk(*args, **kwargs)
        cpu[0] += time.process_time() - c0
        return result

    run.engine.run_chunk = timed_chunk
    summary = train(spec, run=run)
    steps = summary["total_env_steps"]
    print(json.dumps({"steps": steps, "seconds": summary["train_seconds"], "steps_per_second": summary["steps_per_second"],
                      "steps_per_cpu_second": steps / cpu[0], "compile_seconds": summary["compile_seconds"],
                      "updates": run.num_updates, "final_greedy_return": summary["final_eval_return_mean"]}))
""")

LONGHORIZON_PARTS = textwrap.dedent("""
    import json, sys, time
    import jax, jax.numpy as jnp, numpy as np
    from longhorizon.runner.run import Run, RunSpec

    s, out, repeats = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    overrides = {k: str(s[k]) for k in ("num_envs", "num_steps", "update_epochs", "num_minibatches",
                                         "learning_rate", "total_steps")}
    overrides.update(hidden=",".join(map(str, s["hidden"])), activation=s["activation"])
    run = Run(RunSpec(algo="ppo", env="gymnasium:" + s["env"], config_overrides=overrides, seeds=1, out=out, quiet=True))
    algo, env, config = run.algo, run.env, run.config
    state = jax.jit(lambda key: algo.init(key, env, config))(jax.random.PRNGKey(0))
    venv, info = state.env, state.env.act_info

    def random_action(key):
        if info.discrete:
            return jax.random.randint(key, (s["num_envs"],), 0, info.n)
        return jax.random.uniform(key, (s["num_envs"],) + tuple(info.shape), minval=info.low, maxval=info.high)

    def env_rollout(env_state, key):  # the env through the host callback, random actions, one rollout
        def step(carry, _):
            env_state, key = carry
            key, a_key, s_key = jax.random.split(key, 3)
            _, env_state, reward, *_ = venv.step(s_key, env_state, random_action(a_key))
            return (env_state, key), reward.sum()
        (env_state, _), rewards = jax.lax.scan(step, (env_state, key), None, s["num_steps"])
        return env_state, rewards.sum()

    # The callback mechanism alone: a host function that does nothing and returns the same five
    # arrays (obs, reward, terminated, truncated, final obs) as the environment's step callback.
    obs_shape = (s["num_envs"],) + tuple(state.obs.shape[1:])
    shapes = (jax.ShapeDtypeStruct(obs_shape, jnp.float32), jax.ShapeDtypeStruct(obs_shape[:1], jnp.float32),
              jax.ShapeDtypeStruct(obs_shape[:1], jnp.bool_), jax.ShapeDtypeStruct(obs_shape[:1], jnp.bool_),
              jax.ShapeDtypeStruct(obs_shape, jnp.float32))
    zeros = tuple(np.zeros(x.shape, x.dtype) for x in shapes)

    def empty_rollout(key):
        def step(carry, _):
            key, total = carry
            key, a_key = jax.random.split(key)
            out = jax.pure_callback(lambda action: zeros, shapes, random_action(a_key))
            return (key, total + out[1].sum()), None
        (_, total), _ = jax.lax.scan(step, (key, jnp.zeros(())), None, s["num_steps"])
        return total

    def compiled(fn, *args):
        t0 = time.perf_counter()
        return jax.jit(fn).lower(*args).compile(), time.perf_counter() - t0

    collect, c1 = compiled(algo.collect, state)
    state, batch = collect(state)
    learn, c2 = compiled(algo.learn, state, batch)
    env_only, c3 = compiled(env_rollout, jax.eval_shape(venv.reset, jax.random.PRNGKey(2))[1], jax.random.PRNGKey(1))
    empty, c4 = compiled(empty_rollout, jax.random.PRNGKey(3))
    jax.block_until_ready(learn(state, batch))
    jax.block_until_ready(empty(jax.random.PRNGKey(3)))
    parts = {"collect": [], "learn": [], "env_callback": [], "empty_callback": []}
    cpu = {k: 0.0 for k in parts}

    def timed(name, fn, *args):
        c0, t0 = time.process_time(), time.perf_counter()
        result = jax.block_until_ready(fn(*args))
        parts[name].append(time.perf_counter() - t0)
        cpu[name] += time.process_time() - c0
        return result

    # A separate env group for the env-only rollouts: sharing collect's would make the host see a
    # step count it did not take and reset the vector environment every call.
    env_state, key = jax.jit(venv.reset)(jax.random.PRNGKey(2))[1], jax.random.PRNGKey(2)
    for i in range(repeats):
        state, batch = timed("collect", collect, state)
        state, _ = timed("learn", learn, state, batch)
        env_state, _ = timed("env_callback", env_only, env_state, jax.random.fold_in(key, i))
        timed("empty_callback", empty, jax.random.fold_in(key, i))
    print(json.dumps({"seconds_per_update": {k: sorted(v)[len(v) // 2] for k, v in parts.items()},
                      "cpu_seconds_per_update": {k: v / repeats for k, v in cpu.items()},
                      "compile_seconds": c1 + c2 + c3 + c4, "repeats": repeats}))
""")

# The vector environment alone, pre-drawn random actions: gymnasium's SyncVectorEnv (same-step
# autoreset, as longhorizon's host env uses) or SB3's DummyVecEnv (the peers' one).
RAW_ENV = textwrap.dedent("""
    import json, sys, time
    import numpy as np, gymnasium as gym

    s, kind = json.loads(sys.argv[1]), sys.argv[2]
    n, iters = s["num_envs"], s["total_steps"] // s["num_envs"]
    if kind == "SyncVectorEnv":
        venv = gym.vector.SyncVectorEnv([lambda: gym.make(s["env"])] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        venv.reset(seed=0)
        space = venv.single_action_space
    else:
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv
        venv = make_vec_env(s["env"], n_envs=n, seed=0, vec_env_cls=DummyVecEnv)
        venv.reset()
        space = venv.action_space
    space.seed(0)
    actions = np.stack([np.stack([space.sample() for _ in range(n)]) for _ in range(min(iters, 4096))])
    c0, t0 = time.process_time(), time.perf_counter()
    for i in range(iters):
        venv.step(actions[i % len(actions)])
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = iters * n
    print(json.dumps({"steps": steps, "seconds": seconds, "steps_per_second": steps / seconds,
                      "steps_per_cpu_second": steps / cpu, "compile_seconds": 0.0}))
""")

# --------------------------------------------------------------------------- peers
PEER_TRAIN = textwrap.dedent("""
    import json, sys, time
    s, lib, threads = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    import torch
    torch.set_num_threads(threads)
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
    if lib == "sb3":
        from stable_baselines3 import PPO
        activation = torch.nn.Tanh
    else:
        import flax.linen as nn
        from sbx import PPO
        activation = nn.tanh

    lr = s["learning_rate"]
    schedule = (lambda remaining: lr * remaining) if s["anneal_lr"] else lr  # remaining: 1 -> 0 over training

    def make_model(seed):
        venv = make_vec_env(s["env"], n_envs=s["num_envs"], seed=seed, vec_env_cls=DummyVecEnv)
        if s["normalize_observations"] or s["normalize_rewards"]:
            venv = VecNormalize(venv, norm_obs=s["normalize_observations"], norm_reward=s["normalize_rewards"],
                                gamma=s["gamma"])
        hidden = list(s["hidden"])
        return PPO("MlpPolicy", venv, learning_rate=schedule, n_steps=s["num_steps"], batch_size=s["minibatch_size"],
                   n_epochs=s["update_epochs"], gamma=s["gamma"], gae_lambda=s["gae_lambda"], clip_range=s["clip_eps"],
                   ent_coef=s["ent_coef"], vf_coef=s["vf_coef"], max_grad_norm=s["max_grad_norm"],
                   normalize_advantage=True, policy_kwargs=dict(net_arch=dict(pi=hidden, vf=hidden), activation_fn=activation),
                   seed=seed, device="cpu", verbose=0)

    # Warm-up: one rollout and one update (sbx compiles its jitted functions here, once per model:
    # a second model compiles again), then the timed training restarts the counters and the env.
    batch = s["num_envs"] * s["num_steps"]
    model = make_model(0)
    t0 = time.perf_counter()
    model.learn(batch)
    first = time.perf_counter() - t0
    spent = {"rollout": 0.0, "learn": 0.0}

    def timed(name, method):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            result = method(*args, **kwargs)
            spent[name] += time.perf_counter() - t0
            return result
        return wrapper

    model.collect_rollouts = timed("rollout", model.collect_rollouts)
    model.train = timed("learn", model.train)
    c0, t0 = time.process_time(), time.perf_counter()
    model.learn(s["total_steps"], reset_num_timesteps=True)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps = model.num_timesteps
    updates = steps // batch
    rate = steps / seconds
    episodes = [e["r"] for e in model.ep_info_buffer]
    print(json.dumps({"steps": steps, "seconds": seconds, "steps_per_second": rate, "steps_per_cpu_second": steps / cpu,
                      "compile_seconds": max(0.0, first - batch / rate), "first_learn_seconds": first, "updates": updates,
                      "seconds_per_update": {k: v / updates for k, v in spent.items()},
                      "last_training_return": sum(episodes) / max(1, len(episodes))}))
""")


def run_json(python: str | Path, script: str, *args: str, env: dict | None = None) -> dict:
    """Run ``script`` in a fresh process and return the JSON object on its last line of output."""
    proc = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"a measurement ({python} with {' '.join(args[1:])}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_spread(values: list[float], fmt: str = ",.0f") -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}, {max(values):{fmt}}]"


def report(env_id: str, s: dict, res: dict[str, list[dict]], threads: int) -> str:
    """The markdown tables of one environment: rates and ratios per round, then where the time goes."""
    lines = [f"### {env_id}: {s['num_envs']} envs x {s['num_steps']} steps, {s['update_epochs']} epochs x "
             f"{s['num_minibatches']} minibatches of {s['minibatch_size']}, {s['updates']} updates = "
             f"{s['total_steps']:,} env steps, lr {s['learning_rate']:g}{' annealed' if s['anneal_lr'] else ''}, "
             f"{'x'.join(map(str, s['hidden']))} {s['activation']}; SB3 on {threads} torch thread(s)", "",
             "| what | env steps/s (wall), median [min, max] | longhorizon / this, per round | median [min, max] | "
             "env steps per CPU-second | longhorizon / this (CPU), median | compile s | 1-min load before -> after |",
             "|---|---|---|---|---|---|---|---|"]
    ours = res.get("longhorizon", [])
    for name, rows in res.items():
        if not rows or name == "longhorizon parts":
            continue
        sps = [r["steps_per_second"] for r in rows]
        cpu = [r["steps_per_cpu_second"] for r in rows]
        if ours and len(ours) == len(rows):
            ratio = [o["steps_per_second"] / r["steps_per_second"] for o, r in zip(ours, rows)]
            cpu_ratio = [o["steps_per_cpu_second"] / r["steps_per_cpu_second"] for o, r in zip(ours, rows)]
            per_round, summary = ", ".join(f"{x:.2f}" for x in ratio), median_spread(ratio, ".2f")
            cpu_summary = f"{statistics.median(cpu_ratio):.2f}"
        else:
            per_round = summary = cpu_summary = "-"
        loads = ", ".join(f"{r['load_before']:.1f} -> {r['load_after']:.1f}" for r in rows)
        lines.append(f"| {name} | {median_spread(sps)} | {per_round} | {summary} | {median_spread(cpu)} | {cpu_summary} | "
                     f"{statistics.median(r['compile_seconds'] for r in rows):.1f} | {loads} |")
    lines += ["", "Where the time goes, milliseconds per update (median over rounds):", "",
              "| trainer | env alone (raw vector env) | env + act (rollout) | learn | rollout + learn | measured per update in training |",
              "|---|---|---|---|---|---|"]
    batch = s["num_envs"] * s["num_steps"]

    def ms(values):
        return f"{1000 * statistics.median(values):.1f}" if values else "-"

    raw = {name: [batch / r["steps_per_second"] for r in res.get(f"raw env ({name})", [])]
           for name in ("SyncVectorEnv", "DummyVecEnv")}
    parts = res.get("longhorizon parts", [])
    if parts:
        env_cb = [p["seconds_per_update"]["env_callback"] for p in parts]
        collect = [p["seconds_per_update"]["collect"] for p in parts]
        learn = [p["seconds_per_update"]["learn"] for p in parts]
        empty = [p["seconds_per_update"]["empty_callback"] for p in parts]
        lines.append(f"| longhorizon | {ms(raw['SyncVectorEnv'])} (through the callback: {ms(env_cb)}; "
                     f"an empty callback: {ms(empty)}) | {ms(collect)} | "
                     f"{ms(learn)} | {ms([c + l for c, l in zip(collect, learn)])} | "
                     f"{ms([r['seconds'] / r['updates'] for r in ours])} |")
    for name in ("sbx", "sb3"):
        rows = res.get(name, [])
        if rows:
            rollout = [r["seconds_per_update"]["rollout"] for r in rows]
            learn = [r["seconds_per_update"]["learn"] for r in rows]
            lines.append(f"| {name} | {ms(raw['DummyVecEnv'])} | {ms(rollout)} | {ms(learn)} | "
                         f"{ms([a + b for a, b in zip(rollout, learn)])} | {ms([r['seconds'] / r['updates'] for r in rows])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each contender once per round)")
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per training run (whole updates)")
    parser.add_argument("--envs", default="CartPole-v1", help=f"comma-separated gymnasium ids from {', '.join(ENVS)}")
    parser.add_argument("--only", default=",".join(CONTENDERS), help=f"comma-separated subset of {', '.join(CONTENDERS)}")
    parser.add_argument("--sb3-threads", type=int, default=1, help="torch threads for SB3 (JAX uses what XLA picks)")
    parser.add_argument("--chunks", type=int, default=25, help="longhorizon's chunks per run (its CLI default)")
    parser.add_argument("--parts-updates", type=int, default=10, help="updates timed per round for longhorizon's breakdown")
    parser.add_argument("--out", default=str(HERE / "out" / "gymnasium_ppo.json"), help="where the raw results JSON goes")
    parser.add_argument("--dry-run", action="store_true", help="check the arguments, print the plan as JSON, run nothing")
    args = parser.parse_args()

    envs = [e for e in args.envs.split(",") if e]
    only = [c for c in args.only.split(",") if c]
    if bad := [e for e in envs if e not in ENVS]:
        parser.error(f"--envs {','.join(bad)} is not benchmarked; choose from {', '.join(ENVS)}.")
    if bad := [c for c in only if c not in CONTENDERS]:
        parser.error(f"--only {','.join(bad)} is not a contender; choose from {', '.join(CONTENDERS)}.")
    if args.rounds < 1 or args.sb3_threads < 1 or args.chunks < 1 or args.parts_updates < 1:
        parser.error("--rounds, --sb3-threads, --chunks and --parts-updates must be at least 1.")
    settings = {env_id: ppo_settings(env_id, args.steps) for env_id in envs}
    if bad := [e for e, s in settings.items() if s["updates"] < 1]:
        parser.error(f"--steps {args.steps} is less than one update on {', '.join(bad)}; pass at least "
                     f"{max(settings[e]['num_envs'] * settings[e]['num_steps'] for e in bad)}.")
    if args.dry_run:
        print(json.dumps({"settings": settings, "contenders": only, "rounds": args.rounds, "sb3_threads": args.sb3_threads,
                          "peer_requirements": PEER_REQUIREMENTS, "out": args.out}, indent=2))
        return

    from peer_env import peer_python, peer_version

    peer = peer_python("sbx", PEER_REQUIREMENTS) if {"sbx", "sb3"} & set(only) else None
    import jax

    results: dict = {"command": " ".join([".venv/bin/python", "benchmarks/gymnasium_ppo.py", *sys.argv[1:]]),
                     "settings": settings, "rounds": [], "by_env": {},
                     "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                                 "jax": jax.__version__, "platform": jax.devices()[0].platform},
                     # the code measured: other work may change the engine between runs
                     "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True,
                                                  text=True).stdout.strip()}
    if peer is not None:
        results["machine"]["peers"] = {p: peer_version(peer, p) for p in ("sbx-rl", "stable-baselines3", "torch", "jax", "gymnasium")}
    lh_env = {"LONGHORIZON_COMPILE_CACHE": "0"}  # cold compiles, as in the other benchmarks
    tables = []
    with tempfile.TemporaryDirectory(prefix="lh-gymnasium-ppo-") as scratch:
        for env_id, s in settings.items():
            s = {**s, "chunks": args.chunks}
            arg = json.dumps(s)
            jobs = {"raw env (SyncVectorEnv)": lambda i: run_json(sys.executable, RAW_ENV, arg, "SyncVectorEnv")}
            if "longhorizon" in only:
                jobs["longhorizon"] = lambda i: run_json(sys.executable, LONGHORIZON_TRAIN, arg,
                                                         f"{scratch}/{env_id}-{i}", env=lh_env)
                jobs["longhorizon parts"] = lambda i: run_json(sys.executable, LONGHORIZON_PARTS, arg,
                                                               f"{scratch}/parts-{env_id}-{i}", str(args.parts_updates), env=lh_env)
            if peer is not None:
                jobs["raw env (DummyVecEnv)"] = lambda i: run_json(peer, RAW_ENV, arg, "DummyVecEnv")
            for name in ("sbx", "sb3"):
                if name in only:
                    jobs[name] = lambda i, name=name: run_json(peer, PEER_TRAIN, arg, name, str(args.sb3_threads))
            res: dict[str, list[dict]] = {name: [] for name in jobs}
            for i in range(args.rounds):
                order = list(jobs) if i % 2 == 0 else list(reversed(jobs))
                uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
                for name in order:
                    load_before = os.getloadavg()[0]
                    row = jobs[name](i)
                    row.update(load_before=load_before, load_after=os.getloadavg()[0], round=i + 1)
                    res[name].append(row)
                    rate = row.get("steps_per_second")
                    print(f"{env_id} round {i + 1} {name:24s} "
                          + (f"{rate:>10,.0f} steps/s  compile {row['compile_seconds']:.1f}s  " if rate else "")
                          + f"load {load_before:.1f} -> {row['load_after']:.1f}", file=sys.stderr, flush=True)
                uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
                results["rounds"].append({"env": env_id, "round": i + 1, "order": order, "uptime_before": uptime_before,
                                          "uptime_after": uptime_after})
            results["by_env"][env_id] = res
            tables.append(report(env_id, s, res, args.sb3_threads))
            save(args.out, results, tables)  # after every environment, so a later failure loses nothing

    print(f"machine: {json.dumps(results['machine'])}\n\n" + "\n\n".join(tables))


def save(path: str, results: dict, tables: list[str]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**results, "tables": tables}, indent=2) + "\n")


if __name__ == "__main__":
    main()
