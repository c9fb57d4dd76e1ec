"""Latency hiding by asynchronous rollouts: trajectories/s of the in-process loop vs 1, 2, 4 Ray actors.

Each environment turn (a tool call) sleeps ``L`` seconds (``--latencies``, e.g. 50-500 ms). For each
``L``, the same learner loop (``publish(params, v)``, ``next()``, optionally ``--train-seconds`` of
simulated learning) runs ``--steps`` batches of ``--requests-per-batch`` requests of ``--group``
trajectories each:

* ``in-process``: ``lm.agents.async_rollout.Rollouts`` with ``actors=0`` (the rollout function
  called in the learner's process, one request after another);
* ``async N``: ``N`` Ray actors, ``mode="async"``, ``--max-staleness`` (default 1), so up to
  ``(s + 1) k`` requests are generated ahead while the learner waits or trains.

Sources: ``--source synthetic`` (:class:`SyntheticSource`: no model, the latency is the only cost)
or ``--source real`` (the lead's ``lm/agents/rollout.py`` source with ``lm.policy.tiny_random()``
and the latency environment wrapper ``lm/agents/envs/latency.py``, when both exist). Actor start-up
(and, for ``real``, the first batch, which compiles) is excluded: the clock runs from the first
timed ``publish`` to the last batch. Repeats are interleaved; the table gives the median and the
min-max spread of trajectories/s and action tokens/s, and the speed-up over the in-process median.

Run (Ray stays on loopback: the script moves itself into a private network namespace; needs root):

    nice python benchmarks/agent_async_rollouts.py --out /tmp/agent_async_rollouts.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("synthetic", "real"), default="synthetic")
    parser.add_argument("--latencies", default="0.05,0.2,0.5", help="seconds per environment turn")
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="timed learner batches per measurement")
    parser.add_argument("--requests-per-batch", type=int, default=4)
    parser.add_argument("--group", type=int, default=2, help="trajectories per request (one GRPO group)")
    parser.add_argument("--turns", type=int, default=2, help="environment turns per trajectory (synthetic)")
    parser.add_argument("--max-staleness", type=int, default=1)
    parser.add_argument("--train-seconds", type=float, default=0.0, help="simulated learner time per batch")
    parser.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray instance")
    parser.add_argument("--out", default="agent_async_rollouts.json")
    return parser.parse_args()


def make_source(args, latency: float):
    if args.source == "synthetic":
        from longhorizon.lm.agents.async_rollout import SyntheticSource

        return SyntheticSource(turns=args.turns, tokens_per_turn=16, latency_s=latency), (lambda v: {"w": [0.5]})
    return real_source(args, latency)


def real_source(args, latency: float):
    """The lead's rollout source around tiny_random() in a latency environment (see the module docstring)."""
    try:
        from longhorizon.lm.agents import rollout  # noqa: F401
        from longhorizon.lm.agents.envs import latency as latency_env  # noqa: F401
    except ImportError as error:
        sys.exit(f"--source real needs lm/agents/rollout.py and lm/agents/envs/latency.py ({error}); use --source synthetic.")
    return rollout.benchmark_source(latency_env, latency)  # noqa: F821 - filled in when the real source lands


def measure(args, latency: float, actors: int) -> dict:
    from longhorizon.lm.agents.async_rollout import Config, Rollouts, group_requests

    source, params = make_source(args, latency)
    tasks = [{"prompt": f"task {i}", "group": i} for i in range(64)]
    config = (Config(actors=0, requests_per_batch=args.requests_per_batch) if actors == 0 else
              Config(actors=actors, mode="async", max_staleness=args.max_staleness,
                     requests_per_batch=args.requests_per_batch))
    with Rollouts(source, group_requests(tasks, args.group), config) as rollouts:
        version = 0
        if args.source == "real":  # compile outside the clock
            rollouts.publish(params(version), version)
            rollouts.next()
            version += 1
        start, trajectories, tokens, lags, waits = time.perf_counter(), 0, 0, [], 0.0
        for _ in range(args.steps):
            rollouts.publish(params(version), version)
            batch, info = rollouts.next()
            trajectories += len(batch)
            tokens += sum(t.action_tokens for t in batch)
            lags += info["lags"]
            waits += info["wait_seconds"]
            time.sleep(args.train_seconds)
            version += 1
        seconds = time.perf_counter() - start
    return {"latency_s": latency, "actors": actors, "seconds": seconds, "trajectories": trajectories,
            "trajectories_per_s": trajectories / seconds, "tokens_per_s": tokens / seconds,
            "staleness_mean": statistics.mean(lags), "wait_seconds": waits, "load": os.getloadavg()[0]}


def main() -> None:
    args = parse_args()
    from longhorizon.engine.ray_loopback import enter_loopback_namespace

    enter_loopback_namespace()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, configure_logging=False)
    latencies = [float(x) for x in args.latencies.split(",")]
    counts = [0] + [int(x) for x in args.actors.split(",")]
    rows = []
    try:
        for latency in latencies:
            for repeat in range(args.repeats):  # interleaved: every setting once per repeat
                for actors in counts:
                    row = measure(args, latency, actors) | {"repeat": repeat}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()
    table = []
    for latency in latencies:
        base = statistics.median(r["trajectories_per_s"] for r in rows if r["latency_s"] == latency and r["actors"] == 0)
        for actors in counts:
            mine = [r for r in rows if r["latency_s"] == latency and r["actors"] == actors]
            rates, toks = [r["trajectories_per_s"] for r in mine], [r["tokens_per_s"] for r in mine]
            table.append({"latency_s": latency, "setting": "in-process" if actors == 0 else f"async {actors}",
                          "trajectories_per_s": statistics.median(rates), "min": min(rates), "max": max(rates),
                          "tokens_per_s": statistics.median(toks), "speedup": statistics.median(rates) / base,
                          "staleness_mean": statistics.median(r["staleness_mean"] for r in mine)})
    print("\n| turn latency | setting | trajectories/s (median, min-max) | action tokens/s | speed-up | mean lag |")
    print("|---|---|---|---|---|---|")
    for row in table:
        print(f"| {row['latency_s'] * 1000:.0f} ms | {row['setting']} | {row['trajectories_per_s']:.2f} "
              f"({row['min']:.2f}-{row['max']:.2f}) | {row['tokens_per_s']:.0f} | {row['speedup']:.2f}x | "
              f"{row['staleness_mean']:.2f} |")
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                   "rows": rows, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
