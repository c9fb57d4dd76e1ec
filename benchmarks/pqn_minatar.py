"""PQN on MinAtar with the reference settings: final greedy return per seed, and whether training
``--seeds N`` agents in one seed-vmapped program beats N sequential single-seed runs.

For each environment: one run with ``--seeds N`` (vmapped), then, with ``--sequential``, N runs of one
seed each. Reported: final greedy-eval return per seed (``--eval-episodes`` episodes each), compile
seconds, training seconds and wall-clock seconds. Works on CPU or GPU (whatever JAX picks).

    .venv/bin/python benchmarks/pqn_minatar.py --envs Breakout-MinAtar,SpaceInvaders-MinAtar \
        --total-steps 2000000 --seeds 4 --sequential Breakout-MinAtar
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_run(env_id: str, total_steps: int, seeds: int, seed: int, eval_episodes: int, chunks: int,
            overrides: dict[str, str] | None = None) -> dict:
    from longhorizon.runner.run import RunSpec, train

    with tempfile.TemporaryDirectory() as tmp:
        spec = RunSpec(algo="pqn", env=env_id, config_overrides={"total_steps": str(total_steps), **(overrides or {})},
                       seeds=seeds,
                       seed=seed, out=os.path.join(tmp, "run"), num_chunks=chunks, eval_episodes=eval_episodes,
                       quiet=True)
        start = time.perf_counter()
        summary = train(spec)
        wall = time.perf_counter() - start
        curve = [json.loads(line) for line in Path(tmp, "run", "metrics.jsonl").read_text().splitlines()]
    return {"env": env_id, "overrides": overrides or {}, "seeds": seeds, "seed": seed,
            "final_eval_return": summary["final_eval_return"],
            "env_steps_per_seed": summary["total_env_steps"], "compile_seconds": summary["compile_seconds"],
            "train_seconds": summary["train_seconds"], "wall_seconds": wall,
            "steps_per_second_all_seeds": summary["steps_per_second"],
            "training_return_curve": [(row["env_steps"], row["episode_return_mean"]) for row in curve]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="Breakout-MinAtar,SpaceInvaders-MinAtar")
    parser.add_argument("--total-steps", type=int, default=2_000_000)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--sequential", default="", help="comma-separated envs to also run as N single-seed runs")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="config override for every run, e.g. --set anneal_lr=false (repeatable)")
    parser.add_argument("--out", default=str(HERE / "out" / "pqn_minatar.json"))
    args = parser.parse_args()
    import jax

    from longhorizon.runner.command_line import setup_compilation_cache

    setup_compilation_cache()
    report = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "jax": jax.__version__,
                          "devices": [str(d) for d in jax.devices()]}, "args": vars(args), "runs": []}

    def record(row):
        report["runs"].append(row)
        short = {k: v for k, v in row.items() if k != "training_return_curve"}
        print(json.dumps(short), flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))

    overrides = dict(item.split("=", 1) for item in args.set)
    for env_id in args.envs.split(","):  # every vmapped run first, then the sequential ones
        record({"mode": "vmapped", **one_run(env_id, args.total_steps, args.seeds, 0, args.eval_episodes, args.chunks,
                                             overrides)})
    for env_id in filter(None, args.sequential.split(",")):
        for seed in range(args.seeds):
            record({"mode": "sequential", **one_run(env_id, args.total_steps, 1, seed, args.eval_episodes, args.chunks,
                                                     overrides)})


if __name__ == "__main__":
    sys.exit(main())
