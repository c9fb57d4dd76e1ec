"""Dataset generation rate and evaluation episodes/s in the real OGBench environments (docs/offline.md)::

    .venv/bin/python benchmarks/offline_rates.py                 # evaluation, random policy, all 5 tasks
    .venv/bin/python benchmarks/offline_rates.py --workers 2     # the same, environments in 2 processes
    .venv/bin/python benchmarks/offline_rates.py --generate      # also: 1M PointMaze transitions, 2 workers

Evaluation uses a jitted uniform-random policy (it never succeeds, so every episode runs to the time
limit: the slowest case), 10 episodes per task stepped together, one policy call per step.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--generate", action="store_true")
    parser.add_argument("--episodes-per-task", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1, help="evaluation worker processes")
    args = parser.parse_args()

    import jax

    from longhorizon.offline.datasets import make_dataset
    from longhorizon.offline.envs import evaluate

    def uniform(action_dim: int):
        return jax.jit(lambda obs, goals, key: jax.random.uniform(key, (obs.shape[0], action_dim), minval=-1, maxval=1))

    rows = {"load_average": os.getloadavg()}
    for name, action_dim in (("pointmaze-giant-navigate-v0", 2), ("cube-single-play-v0", 5)):
        random_policy = uniform(action_dim)
        result = evaluate(random_policy, name, episodes_per_task=args.episodes_per_task, workers=args.workers)
        rows[f"evaluate {name}"] = {k: result[k] for k in ("episodes", "steps", "seconds", "episodes_per_second")}
        rows[f"evaluate {name}"]["env_steps_per_second"] = result["steps"] / result["seconds"]
        print(json.dumps({name: rows[f"evaluate {name}"]}), flush=True)
    if args.generate:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            make_dataset("pointmaze-large-navigate-v0", f"{tmp}/d.npz", workers=2)
            seconds = time.perf_counter() - start
        rows["generate pointmaze-large-navigate-v0 (1M + 100k val, 2 workers)"] = {
            "seconds": seconds, "rows_per_second": 1_101_100 / seconds}
        print(json.dumps(rows["generate pointmaze-large-navigate-v0 (1M + 100k val, 2 workers)"]), flush=True)
    rows["load_average_after"] = os.getloadavg()
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
