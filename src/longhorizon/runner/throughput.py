"""An engine's training throughput on a Ray cluster simulated on this machine (``longhorizon repro srl``).

The runner drives engines; a reproduction that measures one asks here. :func:`async_ray_throughput` starts a
fresh :class:`longhorizon.engine.ray_cluster.SimulatedCluster`, runs the Ray engine in ``async`` mode (one
learner fed by ``actors`` actors) through a warm-up chunk and a timed chunk, and reports the environment steps
learned per second and the learner's share of the wall time (everything but waiting for the actors' batches).
Run it inside :func:`loopback_scratch` (a private loopback-only network namespace).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from longhorizon.engine.ray_cluster import loopback_scratch  # noqa: F401  (re-exported: where the clusters run)


def async_ray_throughput(algo, env_id: str, overrides: dict, config: Any, *, actors: int, seed: int, nodes: int,
                         cpus_per_node: int, max_staleness: int, warmup_updates: int, updates: int) -> dict:
    """One measurement: ``updates`` timed updates of ``algo`` on ``env_id`` (rebuilt by each actor from the import
    path and ``overrides``) with ``actors`` asynchronous actors spread over ``nodes`` simulated nodes."""
    from longhorizon.engine.ray import RayEngine, RayOptions
    from longhorizon.engine.ray_cluster import SimulatedCluster, match_priority
    from longhorizon.envs import make

    env = make(env_id, **overrides)
    batch = config.num_envs * config.num_steps
    start = time.perf_counter()
    with SimulatedCluster(nodes, cpus_per_node) as cluster:
        cluster_seconds = time.perf_counter() - start
        options = RayOptions(actors=actors, mode="async", max_staleness=max_staleness)
        engine = RayEngine(algo, env_id, overrides, config, 1, max(warmup_updates, updates), options, env=env)
        try:
            state = engine.init(seed)
            compile_seconds = engine.compile(state)
            match_priority(engine.actor_pids())  # the actors compete for the cores on the learner's terms
            placed_on = cluster.names(engine.actor_nodes())
            state, _ = engine.run_chunk(state, warmup_updates)
            waited, load = engine.wait_seconds, os.getloadavg()[0]
            start = time.perf_counter()
            state, metrics = engine.run_chunk(state, updates)
            wall = time.perf_counter() - start
            wait = engine.wait_seconds - waited
            work = engine.actor_work()  # only now: a call waits behind the collects queued on its actor
            staleness = {int(k): v for k, v in sorted(engine.staleness_seen.items())}
        finally:
            engine.close()
    learner = (wall - wait) / updates
    calls = sum(c for c, _ in work)
    return {"actors": actors, "seed": seed, "steps": updates * batch, "wall_seconds": wall,
            "steps_per_second": updates * batch / wall, "wait_seconds": wait,
            "learner_share": 1.0 - wait / wall, "learner_seconds_per_update": learner, "learner_bound": batch / learner,
            "collect_seconds_per_call": sum(s for _, s in work) / max(calls, 1),
            "calls_per_actor": [c for c, _ in work],
            "staleness_seen": staleness, "placed_on": placed_on, "cluster_seconds": cluster_seconds,
            "compile_seconds": compile_seconds, "load_1min": load,
            "finite": bool(np.all(metrics["finite"]))}
