"""The Ray engine on a multi-node cluster simulated on this machine, with a node removed mid-run.

For each setting (mode, worker nodes, actors per node) a fresh ``ray.cluster_utils.Cluster`` is
started: a head node without CPUs (the learner, this process) and ``nodes`` worker nodes with
``--cpus-per-node`` logical CPUs each (by default twice the actors a node gets, so the survivors
can take in a lost node's actors). The Ray engine places its actors with ``SPREAD``; the script
records on which nodes they landed. PPO on CartPole-v1 then runs side by side with the fused engine
on the same seeds:

* ``--rounds`` interleaved rounds (fused chunk, Ray chunk; the order alternates), each ``--updates``
  updates: updates per second of each engine, the ratio per round, median and [min, max];
  compile time reported separately (the Ray engine's includes starting the actors; a private
  persistent compilation cache, cold at the start, is shared by the settings of one run, so a later
  setting with the same programs, e.g. the same number of seeds, and every replacement actor hit it);
* a last round of two chunks in which one worker node is removed (``cluster.remove_node``) before
  the middle update of the first (settings with 2 or more nodes). An async learner meets the loss
  only at the first request made after it (up to 6 updates later with 2 actors and K = 2). The
  recovery time is what the updates from the removal on took beyond the median of the updates
  before it, less the removal call itself: detecting the loss, placing and compiling the
  replacement actor, and replaying (sync) or re-requesting (async) the lost work.

``sync``: seeds = actors = nodes x actors per node, and at the end the Ray engine's state must be
bit-identical to the fused engine's (the column "= fused"). ``async``: one seed, V-trace, the
staleness bound ``--max-staleness``; the column reports the largest lag seen.

Needs root: the script moves itself into a private loopback-only network namespace first, so the
cluster is reachable from this machine only. Example (about 10 minutes on the loaded 2-core machine):

    nice python benchmarks/ray_multinode.py --out /tmp/ray_multinode.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from longhorizon.engine.ray_cluster import SimulatedCluster, loopback_scratch


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default="sync:1x2,sync:2x1,sync:2x2,sync:3x1,async:2x1",
                        help="MODE:NODESxACTORS_PER_NODE, comma-separated")
    parser.add_argument("--updates", type=int, default=8, help="updates per measured chunk")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds before the removal round")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--cpus-per-node", type=int, default=0, help="0: twice the actors per node")
    parser.add_argument("--max-staleness", type=int, default=2, help="async: the staleness bound")
    parser.add_argument("--out", default="ray_multinode.json")
    return parser.parse_args()


def parse_setting(text: str) -> tuple[str, int, int]:
    mode, _, shape = text.partition(":")
    nodes, _, per_node = shape.partition("x")
    return mode, int(nodes), int(per_node)


def timed_updates(engine, state, before_update: dict | None = None):
    """One chunk; returns the state, the metrics and each update's wall seconds (timed between the
    learner's requests for batches). ``before_update[k]()`` runs just before update k (0-based)."""
    name = "_sync_collect" if engine.options.mode == "sync" else "_async_collect"
    collect, stamps = getattr(engine, name), []

    def stamped(*args):
        stamps.append(time.perf_counter())  # update k starts here, its before_update call included
        if before_update and len(stamps) - 1 in before_update:
            before_update[len(stamps) - 1]()
        return collect(*args)

    setattr(engine, name, stamped)
    try:
        state, metrics = engine.run_chunk(state)
    finally:
        setattr(engine, name, collect)
    stamps.append(time.perf_counter())
    return state, metrics, [b - a for a, b in zip(stamps, stamps[1:])]


def timed_chunk(engine, state):
    start = time.perf_counter()
    state, metrics = engine.run_chunk(state)
    return state, metrics, time.perf_counter() - start


def identical(a, b) -> bool:
    import jax
    import numpy as np

    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def measure(args, mode: str, nodes: int, per_node: int) -> dict:
    from longhorizon.algos import ppo
    from longhorizon.engine.fused import FusedEngine
    from longhorizon.engine.ray import RayEngine, RayOptions
    from longhorizon.envs import make

    actors = nodes * per_node
    seeds = actors if mode == "sync" else 1
    staleness = args.max_staleness if mode == "async" else 0
    fields = dict(correction="vtrace") if mode == "async" else {}
    config = ppo.Config(num_envs=args.num_envs, num_steps=args.num_steps, total_steps=10**9, **fields)
    env = make("CartPole-v1")
    cluster = SimulatedCluster(nodes, args.cpus_per_node or 2 * per_node)
    try:
        fused = FusedEngine(ppo, env, config, seeds, args.updates)
        options = RayOptions(actors=actors, mode=mode, max_staleness=staleness)
        ray = RayEngine(ppo, "CartPole-v1", {}, config, seeds, args.updates, options, env=env)
        states, compile_seconds = {}, {}
        for name, engine in (("fused", fused), ("ray", ray)):
            state = engine.init(0)
            compile_seconds[name] = engine.compile(state)
            states[name], _, _ = timed_chunk(engine, state)  # warm-up chunk
        placed_on = cluster.names(ray.actor_nodes())
        rates, loads = {"fused": [], "ray": []}, []
        for round_index in range(args.rounds):
            for name in (("fused", "ray") if round_index % 2 == 0 else ("ray", "fused")):
                loads.append(os.getloadavg()[0])
                states[name], _, seconds = timed_chunk(fused if name == "fused" else ray, states[name])
                rates[name].append(args.updates / seconds)
        ratios = [r / f for r, f in zip(rates["ray"], rates["fused"])]
        row = {"mode": mode, "nodes": nodes, "actors_per_node": per_node, "actors": actors, "seeds": seeds,
               "placed_on": placed_on, "compile_seconds": compile_seconds,
               "fused_updates_per_s": rates["fused"], "ray_updates_per_s": rates["ray"], "ratio": ratios,
               "load_1min": loads, "removed": None, "recovery_seconds": None}
        if nodes >= 2:  # the removal round, two chunks: the node of the last actor goes before the middle update
            victim = placed_on[-1]
            middle = args.updates // 2
            removal = {}
            states["ray"], _, updates = timed_updates(
                ray, states["ray"], {middle: lambda: removal.setdefault("seconds", cluster.remove(victim))})
            states["ray"], _, more = timed_updates(ray, states["ray"])  # async may meet the loss only here
            updates += more
            usual = statistics.median(updates[:middle])
            extra = sum(max(0.0, seconds - usual) for seconds in updates[middle:])  # async may meet the loss later
            row.update(removed=victim, removal_call_seconds=removal["seconds"], update_seconds=updates,
                       recovery_seconds=extra - removal["seconds"],
                       actor_restarts=ray.actor_restarts, placed_on_after=cluster.names(ray.actor_nodes()))
            for _ in range(2):
                states["fused"], _, _ = timed_chunk(fused, states["fused"])
        if mode == "sync":
            row["identical_to_fused"] = identical(states["fused"], states["ray"])
        else:
            row["staleness_seen"] = {int(k): v for k, v in sorted(ray.staleness_seen.items())}
        ray.close()
        return row
    finally:
        cluster.shutdown()


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def table(rows: list[dict]) -> str:
    lines = ["| mode | nodes | actors per node | actors on | fused updates/s | ray updates/s | ray / fused | "
             "compile s (fused, ray) | node removed: recovery s (restarts) | = fused / max lag |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        removal = "-" if row["removed"] is None else f"{row['recovery_seconds']:.1f} ({row['actor_restarts']})"
        check = (("yes" if row["identical_to_fused"] else "NO") if row["mode"] == "sync"
                 else f"{max(row['staleness_seen'])} (bound {row.get('max_staleness', '?')})")
        lines.append(f"| {row['mode']} | {row['nodes']} | {row['actors_per_node']} | {', '.join(row['placed_on'])} | "
                     f"{spread(row['fused_updates_per_s'])} | {spread(row['ray_updates_per_s'])} | "
                     f"{spread(row['ratio'], '{:.2f}')} | {row['compile_seconds']['fused']:.1f}, "
                     f"{row['compile_seconds']['ray']:.1f} | {removal} | {check} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import ray

    rows = []
    with loopback_scratch() as scratch:  # a private loopback-only network namespace, Ray's files in scratch
        # As the CLI does: a persistent compilation cache (private and cold here), which the actors share,
        # so the first compile is cold and a replacement actor's compile is a cache hit.
        jax.config.update("jax_compilation_cache_dir", os.path.join(scratch, "jax-cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        for text in args.settings.split(","):
            mode, nodes, per_node = parse_setting(text)
            row = measure(args, mode, nodes, per_node)
            row["max_staleness"] = args.max_staleness if mode == "async" else 0
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
    print(table(rows))
    meta = {"python": sys.version.split()[0], "jax": jax.__version__, "ray": ray.__version__,
            "machine": platform.machine(), "cpus": os.cpu_count(), "args": vars(args)}
    with open(args.out, "w") as handle:
        json.dump({"meta": meta, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
