"""A hyperparameter sweep as one compiled program against its combinations run one after another (a script, not a test).

The same grid is trained two ways, each in a fresh Python process per measurement, interleaved over
``--rounds`` rounds (the order reverses every round), the persistent compilation cache off:

* ``one-program``: ``longhorizon sweep`` (:func:`longhorizon.runner.sweep.sweep`): every
  numeric combination x seed is a row of one vmapped program, compiled once;
* ``sequential``: one ``longhorizon train`` (:func:`longhorizon.runner.run.train`) per
  combination with ``--seeds S``, one after another, each compiling its own program (a plain run
  compiles its hyperparameters in as constants).

Both train the same agents with the same seed keys (each sweep row reproduces its plain run, see
tests/foundation/test_sweep.py) and both evaluate, log and checkpoint as a normal run does. Reported
per way: compile seconds (sum of the programs' ahead-of-time compiles), training seconds (chunk
execution), the wall-clock seconds of the whole sweep inside the process (init, compile, training,
evaluations, checkpoints, plots), and the process's CPU seconds; the ratio sequential / one-program
per round, with the median and spread over rounds. The 1-minute load average is recorded around
every measurement (the machine may be shared).

    .venv/bin/python benchmarks/sweep.py --rounds 3 --out docs/results/bench/sweep_cpu.json --keep docs/results/sweep/bench
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["learning_rate=1e-4,3e-4,1e-3", "ent_coef=0,0.01"]


def measure(way: str, args: argparse.Namespace, out: Path) -> dict:
    """Run one way of the sweep in this process and return its timings."""
    os.environ["LONGHORIZON_COMPILE_CACHE"] = "0"
    from longhorizon.runner.run import RunSpec, train
    from longhorizon.runner.sweep import combinations, parse_grid, sweep
    from longhorizon.algos import ppo

    spec = RunSpec(algo="ppo", env=args.env, config_overrides={"total_steps": str(args.total_steps)}, seeds=args.seeds,
                   out=str(out), num_chunks=args.chunks, eval_episodes=10, quiet=True)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if way == "one-program":
        record = sweep(spec, GRID)
        compile_s, train_s, programs = record["compile_seconds"], record["train_seconds"], len(record["programs"])
        finals = [row["mean"] for row in record["results"]]
    else:
        grid = parse_grid(GRID, ppo.default_config(args.env))
        compile_s = train_s = 0.0
        finals = []
        combos = combinations(grid, list(grid))
        for i, combo in enumerate(combos):
            summary = train(RunSpec(**{**spec.__dict__, "config_overrides": {**spec.config_overrides, **combo},
                                       "out": str(out / f"combo{i}")}))
            compile_s += summary["compile_seconds"]
            train_s += summary["train_seconds"]
            finals.append(summary["final_eval_return_mean"])
        programs = len(combos)
    return {"way": way, "programs": programs, "compile_seconds": compile_s, "train_seconds": train_s,
            "wall_seconds": time.perf_counter() - wall0, "cpu_seconds": time.process_time() - cpu0,
            "final_return_means": finals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="JSON file for the results")
    parser.add_argument("--keep", type=Path, help="copy the last one-program sweep's sweep.md/sweep.png/sweep.json here")
    parser.add_argument("--one", choices=["one-program", "sequential"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child process: one measurement, JSON on the last line of stdout
        print(json.dumps(measure(args.one, args, args.folder)))
        return

    import jax

    ways = ["one-program", "sequential"]
    rounds = []
    scratch = Path(tempfile.mkdtemp(prefix="lh-sweep-bench-"))
    for r in range(args.rounds):
        order = ways if r % 2 == 0 else ways[::-1]
        results = {}
        for way in order:
            folder = scratch / f"round{r}-{way}"
            load_before = os.getloadavg()[0]
            child = [sys.executable, __file__, "--one", way, "--folder", str(folder), "--env", args.env,
                     "--seeds", str(args.seeds), "--total-steps", str(args.total_steps), "--chunks", str(args.chunks)]
            t0 = time.perf_counter()
            done = subprocess.run(child, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.exit(f"{way} failed:\n{done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result.update(process_seconds=time.perf_counter() - t0, load_before=load_before, load_after=os.getloadavg()[0])
            results[way] = result
            print(f"round {r + 1} {way}: compile {result['compile_seconds']:.1f} s, train {result['train_seconds']:.1f} s, "
                  f"wall {result['wall_seconds']:.1f} s, process {result['process_seconds']:.1f} s, "
                  f"load {load_before:.1f}->{result['load_after']:.1f}", flush=True)
        rounds.append(results)
        if args.keep and r == args.rounds - 1:
            args.keep.mkdir(parents=True, exist_ok=True)
            for name in ("sweep.md", "sweep.json", "sweep.png"):
                shutil.copy(scratch / f"round{r}-one-program" / name, args.keep / name)

    def ratios(key: str) -> dict:
        values = [rd["sequential"][key] / rd["one-program"][key] for rd in rounds]
        return {"median": statistics.median(values), "min": min(values), "max": max(values), "per_round": values}

    def medians(way: str) -> dict:
        return {key: statistics.median(rd[way][key] for rd in rounds)
                for key in ("compile_seconds", "train_seconds", "wall_seconds", "cpu_seconds", "process_seconds")}

    report = {
        "grid": GRID, "env": args.env, "seeds": args.seeds, "total_steps": args.total_steps, "chunks": args.chunks,
        "rounds": rounds, "median": {way: medians(way) for way in ways},
        "sequential_over_one_program": {key: ratios(key) for key in ("compile_seconds", "train_seconds", "wall_seconds",
                                                                     "cpu_seconds", "process_seconds")},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "devices": [str(d) for d in jax.devices()],
                    "jax": jax.__version__},
    }
    print(json.dumps({"median": report["median"], "ratios": {k: v["median"] for k, v in
                                                              report["sequential_over_one_program"].items()}}, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
