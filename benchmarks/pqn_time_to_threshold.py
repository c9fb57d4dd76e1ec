"""PQN vs DQN at CPU scale: wall-clock time and environment steps until the greedy evaluation return
first reaches a threshold (475 on CartPole-v1), side by side in one run.

Contenders, each for ``--seeds`` seeds run one after another (one seed per run, so wall-clock is
per agent):

* ``pqn``: longhorizon PQN with its CartPole defaults (the reference settings);
* ``dqn``: longhorizon DQN with its CartPole defaults (SB3 zoo's tuned settings);
* ``sb3-dqn``: Stable-Baselines3 DQN with rl-baselines3-zoo's tuned CartPole-v1 hyperparameters, in
  its own virtual environment (``benchmarks/.venvs/sb3``, built on first use by ``peer_env``).

Every contender is evaluated greedily (10 episodes) every ``eval_every_steps`` environment steps and
stops at the first evaluation whose mean reaches the threshold. Reported per seed: env steps at that
evaluation, wall-clock seconds from start (compile and evaluations included) and training seconds
(compile and evaluations excluded); then the median and the range over seeds.

    .venv/bin/python benchmarks/pqn_time_to_threshold.py --seeds 3 [--only pqn,dqn] [--out FILE]
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

THRESHOLD = 475.0
EVAL_EPISODES = 10

# rl-baselines3-zoo, hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4).
SB3_ZOO_CARTPOLE = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))

SB3_SCRIPT = r"""
import json, sys, time
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy

seed, budget, every, threshold, episodes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
hyper = json.loads(sys.argv[6])
torch.set_num_threads(int(sys.argv[7]))

class StopAtThreshold(BaseCallback):
    def __init__(self):
        super().__init__()
        self.eval_env = gym.make("CartPole-v1")
        self.eval_seconds, self.hit, self.evals = 0.0, None, []
    def _on_step(self):
        if self.num_timesteps % every:
            return True
        t0 = time.perf_counter()
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=episodes, deterministic=True)
        self.eval_seconds += time.perf_counter() - t0
        self.evals.append((self.num_timesteps, float(mean)))
        if mean >= threshold:
            self.hit = self.num_timesteps
            return False
        return True

start = time.perf_counter()
model = DQN("MlpPolicy", gym.make("CartPole-v1"), seed=seed, verbose=0, **hyper)
callback = StopAtThreshold()
model.learn(total_timesteps=budget, callback=callback)
wall = time.perf_counter() - start
print(json.dumps({"reached": callback.hit is not None, "env_steps": callback.hit or model.num_timesteps,
                  "wall_seconds": wall, "train_seconds": wall - callback.eval_seconds,
                  "compile_seconds": 0.0, "last_eval": callback.evals[-1][1] if callback.evals else None}))
"""


def run_ours(algo: str, seed: int, budget: int, every: int) -> dict:
    from longhorizon import algos
    from longhorizon.runner.run import RunSpec, train

    module = algos.get(algo)
    per_update = module.steps_per_update(module.default_config("CartPole-v1"))
    num_chunks = max(1, budget // max(every, per_update))
    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec(algo=algo, env="CartPole-v1", config_overrides={"total_steps": str(budget)}, seed=seed,
                       out=os.path.join(tmp, "run"), num_chunks=num_chunks, eval_every=1, eval_episodes=EVAL_EPISODES,
                       target_return=THRESHOLD, quiet=True)
        start = time.perf_counter()
        summary = train(spec)
        wall = time.perf_counter() - start
    return {"reached": summary["status"] == "target_reached", "env_steps": summary["total_env_steps"],
            "wall_seconds": wall, "train_seconds": summary["train_seconds"],
            "compile_seconds": summary["compile_seconds"], "last_eval": summary["final_eval_return_mean"]}


def run_sb3(seed: int, budget: int, every: int, threads: int) -> dict:
    from peer_env import peer_python

    python = peer_python("sb3", ["torch==2.13.0", "stable-baselines3"])
    out = subprocess.run([str(python), "-c", SB3_SCRIPT, str(seed), str(budget), str(every), str(THRESHOLD),
                          str(EVAL_EPISODES), json.dumps(SB3_ZOO_CARTPOLE), str(threads)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(rows: list[dict]) -> dict:
    def stat(key):
        values = [r[key] for r in rows]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    return {"reached": f"{sum(r['reached'] for r in rows)}/{len(rows)}", "env_steps": stat("env_steps"),
            "wall_seconds": stat("wall_seconds"), "train_seconds": stat("train_seconds"),
            "compile_seconds": stat("compile_seconds")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", default="pqn,dqn,sb3-dqn", help="comma-separated subset of pqn,dqn,sb3-dqn")
    parser.add_argument("--pqn-budget", type=int, default=500_000)
    parser.add_argument("--dqn-budget", type=int, default=100_000)
    parser.add_argument("--pqn-eval-every", type=int, default=4096)
    parser.add_argument("--dqn-eval-every", type=int, default=2048)
    parser.add_argument("--sb3-threads", type=int, default=1, help="torch threads for SB3 (JAX uses what XLA picks)")
    parser.add_argument("--out", default=str(HERE / "out" / "pqn_time_to_threshold.json"))
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from longhorizon.runner.command_line import setup_compilation_cache

    os.environ.setdefault("LONGHORIZON_COMPILE_CACHE", "0")  # compile time is part of what we measure
    setup_compilation_cache()

    wanted = args.only.split(",")
    results: dict[str, list[dict]] = {}
    for name in wanted:
        for seed in range(args.seeds):
            if name == "sb3-dqn":
                row = run_sb3(seed, args.dqn_budget, args.dqn_eval_every, args.sb3_threads)
            elif name in ("pqn", "dqn"):
                budget, every = ((args.pqn_budget, args.pqn_eval_every) if name == "pqn"
                                 else (args.dqn_budget, args.dqn_eval_every))
                row = run_ours(name, seed, budget, every)
            else:
                raise SystemExit(f"unknown contender {name}; choose from pqn, dqn, sb3-dqn")
            row["seed"] = seed
            results.setdefault(name, []).append(row)
            print(json.dumps({"contender": name, **row}), flush=True)

    report = {"threshold": THRESHOLD, "eval_episodes": EVAL_EPISODES, "machine": machine(), "args": vars(args),
              "runs": results, "summary": {k: summarise(v) for k, v in results.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print_table(report)


def machine() -> dict:
    import jax

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "jax": jax.__version__, "load_average": os.getloadavg()}


def print_table(report: dict) -> None:
    print(f"\nCartPole-v1, greedy eval >= {report['threshold']:.0f} ({report['eval_episodes']} episodes)")
    print(f"{'contender':10} {'reached':>8} {'env steps (median [min, max])':>32} {'wall s':>26} {'train s':>26}")
    for name, s in report["summary"].items():
        cell = lambda st, fmt: f"{st['median']:{fmt}} [{st['min']:{fmt}}, {st['max']:{fmt}}]"  # noqa: E731
        print(f"{name:10} {s['reached']:>8} {cell(s['env_steps'], ',.0f'):>32} {cell(s['wall_seconds'], '.1f'):>26} "
              f"{cell(s['train_seconds'], '.1f'):>26}")


if __name__ == "__main__":
    main()
