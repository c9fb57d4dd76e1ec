"""Compile time per algorithm on CartPole-v1, cold and from the persistent cache (a script, not a test).

For each algorithm a fresh process builds the run exactly as ``longhorizon train ALGO --env CartPole-v1``
does (default config, 25 chunks, one seed) and times the three programs a run compiles: the initial
state, the training chunk and the greedy evaluation. Each is its first call minus a second, already
compiled call, so what remains is tracing, lowering and XLA compilation. ``cold``: an empty persistent
cache folder; ``cached``: a second process reading the folder the first one filled. Rounds interleave
the algorithms; the table gives the median and min..max of the per-process totals, with the 1-minute
load average.

    python benchmarks/compile_times.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
ALGOS = ("ppo", "pqn", "dqn", "sqirl")

PROBE = textwrap.dedent("""
    import json, sys, tempfile, time
    import jax
    jax.config.update("jax_compilation_cache_dir", sys.argv[2])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    from longhorizon.runner.evaluate import evaluate
    from longhorizon.runner.run import Run, RunSpec

    def twice(fn):
        t0 = time.perf_counter(); jax.block_until_ready(fn())
        t1 = time.perf_counter(); out = fn(); jax.block_until_ready(out)
        return max(0.0, (t1 - t0) - (time.perf_counter() - t1)), out

    run = Run(RunSpec(algo=sys.argv[1], env="CartPole-v1", seeds=1, out=tempfile.mkdtemp(), quiet=True))
    engine = run.engine
    init_s, state = twice(lambda: engine.init(0))
    t0 = time.perf_counter(); engine.compile(state); chunk_s = time.perf_counter() - t0
    key = jax.random.PRNGKey(0)
    eval_s, _ = twice(lambda: evaluate(engine.algo, state, engine.env, key, 10))
    print(json.dumps({"init": init_s, "chunk": chunk_s, "eval": eval_s}))
""")


def probe(algo: str, cache: str) -> dict:
    env = {**os.environ, "LONGHORIZON_COMPILE_CACHE": "0"}
    proc = subprocess.run([sys.executable, "-c", PROBE, algo, cache], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{algo} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**out, "total": out["init"] + out["chunk"] + out["eval"], "load": os.getloadavg()[0]}


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}..{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--algos", default=",".join(ALGOS))
    args = parser.parse_args()
    algos = args.algos.split(",")
    results = {(a, kind): [] for a in algos for kind in ("cold", "cached")}
    for r in range(args.rounds):
        for algo in algos:
            with tempfile.TemporaryDirectory() as cache:
                results[(algo, "cold")].append(probe(algo, cache))
                results[(algo, "cached")].append(probe(algo, cache))
            cold, cached = results[(algo, "cold")][-1], results[(algo, "cached")][-1]
            print(f"round {r + 1} {algo}: cold {cold['total']:.1f} s, cached {cached['total']:.1f} s", flush=True)
    print("\n| algorithm | cold total s | init / chunk / eval (cold, medians) | cached total s | 1-min load |")
    print("|---|---|---|---|---|")
    for algo in algos:
        cold, cached = results[(algo, "cold")], results[(algo, "cached")]
        parts = " / ".join(f"{statistics.median(x[p] for x in cold):.1f}" for p in ("init", "chunk", "eval"))
        loads = ", ".join(f"{x['load']:.1f}" for x in cold)
        print(f"| {algo} | {fmt([x['total'] for x in cold])} | {parts} | {fmt([x['total'] for x in cached])} | {loads} |")
    out = HERE / "out" / "compile_times.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({f"{a}/{k}": v for (a, k), v in results.items()}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
