"""The Ray engine on a multi-node cluster simulated on this machine, with a node removed mid-run.

A child process (this file run as a script) moves itself into a private loopback-only network
namespace and starts ``ray.cluster_utils.Cluster``: a head node without CPUs (the learner's) and
worker nodes with 8 (logical) CPUs and a custom resource naming each (``worker1``, ``worker2``, ...).
A node could hold both sync actors, and Ray's default policy packs them onto one node until it is
half full; the engine asks for ``SPREAD``, so they land one per node (``benchmarks/ray_multinode.py``
covers two per node). Failure detection is set to about a second (Ray's default health check takes
15 s to declare a node dead). It then runs, on one tiny PPO config:

* the fused engine (the reference), 4 seeds, 2 chunks of 4 updates;
* the Ray engine, sync, 2 actors of 2 seeds each, one per worker node; before update 6 ``worker1`` is
  removed (``cluster.remove_node``), its actor is replaced on ``worker2`` and the run continues;
* a node ``worker3`` joins; the Ray engine, async (V-trace, staleness bound 2), 2 actors on
  ``worker2`` and ``worker3``; before update 2 ``worker3`` is removed while requests are in flight.
  Results an actor finished before its node went may still arrive (small ones travel inline), so
  the learner meets the loss only at the first request made after it; with 2 actors and K + 1 = 3
  requests in flight that is at most 6 updates later (found by enumerating the orders admission
  can leave), within the run's 8.

The child writes what it saw (placements, restarts, which state leaves and metrics differ from the
fused run, the lags) as JSON; the test reads it. The cluster is ended with ``cluster.shutdown()``.
It cannot share a process with the session's Ray instance (``ray_session``), hence the child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHUNKS, UPDATES_PER_CHUNK = 2, 4
SYNC_REMOVAL, ASYNC_REMOVAL = 6, 2  # the update (1-based) before which a node goes: inside chunk 2, chunk 1
MAX_STALENESS = 2
NO_NAMESPACE = 77  # the child's exit code when it cannot make a private network namespace


def _same_metric(key, a, b) -> bool:
    """Bit-equal, except explained variance: a variance of the batch that the fused program and the Ray
    learner compile inside different fusions, so it may differ in the last bits (the state does not)."""
    import numpy as np

    if key == "explained_variance":
        return np.allclose(a, b, rtol=1e-5, atol=1e-6)
    return np.array_equal(a, b)


@pytest.mark.slow
def test_ray_engine_across_nodes_survives_a_node_removal(tmp_path):
    pytest.importorskip("ray")
    import jax

    out = tmp_path / "multinode.json"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "JAX_PLATFORMS": "cpu",
           "LONGHORIZON_TEST_CACHE": jax.config.jax_compilation_cache_dir or ""}
    child = subprocess.Popen([sys.executable, __file__, str(out)], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        log, _ = child.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        child.terminate()  # the child's SIGTERM handler shuts its cluster down
        log, _ = child.communicate(timeout=60)
        pytest.fail(f"the multi-node child did not finish in 400 s:\n{log[-4000:]}")
    if child.returncode == NO_NAMESPACE:
        pytest.skip("Ray tests need a loopback-only network namespace (root or CAP_SYS_ADMIN)")
    assert child.returncode == 0, log[-4000:]
    seen = json.loads(out.read_text())
    print("child seconds:", seen["seconds"])

    sync = seen["sync"]
    assert sorted(sync["placed_on"]) == ["worker1", "worker2"]  # SPREAD, not packed onto one node
    on_worker1 = [i for i, name in enumerate(sync["placed_on"]) if name == "worker1"]
    assert sync["replaced"] == [on_worker1]  # the lost actor, in one replacement round
    assert sync["actor_restarts"] == 1 and sync["placed_on_at_end"] == ["worker2"] * 2
    assert sync["updates"] == CHUNKS * UPDATES_PER_CHUNK
    assert sync["state_leaves"] > 10 and sync["differing_state_leaves"] == []  # bit for bit
    assert sync["differing_metrics"] == []

    run = seen["async"]
    assert sorted(run["placed_on"]) == ["worker2", "worker3"]
    assert run["actor_restarts"] == 1 and run["placed_on_at_end"] == ["worker2", "worker2"]
    assert run["updates"] == CHUNKS * UPDATES_PER_CHUNK
    lags = {int(lag): count for lag, count in run["staleness_seen"].items()}
    assert sum(lags.values()) == CHUNKS * UPDATES_PER_CHUNK and max(lags) <= MAX_STALENESS
    assert all(row <= MAX_STALENESS for row in run["staleness_max_per_chunk"])
    assert run["all_finite"]


def test_a_result_lost_with_its_node_counts_as_a_dead_actor():
    """A finished result lives in its node's object store: when the node goes, ``ray.get`` raises
    ObjectLostError (here its reconstruction-failed form) and the engine must replace the actor."""
    exceptions = pytest.importorskip("ray.exceptions")
    from longhorizon.engine.ray import actor_died

    assert actor_died(exceptions.ActorDiedError())
    assert actor_died(exceptions.ObjectReconstructionFailedError("ab" * 14, None, ""))
    assert not actor_died(exceptions.RayTaskError("collect_update", "traceback", ValueError("a bug in collect")))


# ----------------------------------------------------------------------------- the child
def _tiny_ppo(**fields):
    from longhorizon.algos import ppo

    updates = CHUNKS * UPDATES_PER_CHUNK
    return ppo.Config(num_envs=4, num_steps=32, total_steps=updates * 4 * 32, **fields)


def _run(engine, state, before_update: dict | None = None):
    """``CHUNKS`` chunks; returns the state, each chunk's metrics and the updates run. For a Ray
    engine ``before_update[k]()`` is called just before update k (1-based) asks for its batch."""
    calls = []
    if before_update is not None:
        collect_name = "_sync_collect" if engine.options.mode == "sync" else "_async_collect"
        collect = getattr(engine, collect_name)

        def counting(*args):
            calls.append(1)
            if len(calls) in before_update:
                before_update[len(calls)]()
            return collect(*args)

        setattr(engine, collect_name, counting)
    rows = []
    for _ in range(CHUNKS):
        state, metrics = engine.run_chunk(state)
        rows.append(metrics)
    return state, rows, len(calls) if before_update is not None else CHUNKS * engine.updates_per_chunk


def _differences(reference, other) -> list[str]:
    """Paths of the pytree leaves where ``other`` is not bit-identical to ``reference``."""
    import jax
    import numpy as np

    paths = jax.tree_util.tree_leaves_with_path(reference)
    return [jax.tree_util.keystr(path) for (path, a), b in zip(paths, jax.tree.leaves(other))
            if not np.array_equal(np.asarray(a), np.asarray(b))]


def _child(out: str) -> None:
    import shutil
    import signal
    import tempfile

    from longhorizon.engine.ray_loopback import enter_loopback_namespace

    try:
        enter_loopback_namespace()
    except PermissionError:
        sys.exit(NO_NAMESPACE)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below on terminate()
    scratch = tempfile.mkdtemp(prefix="lhray", dir="/tmp")  # short: Ray's socket paths have a length limit
    os.environ["RAY_TMPDIR"] = scratch  # this cluster's sessions and address file, away from other Ray instances

    import jax
    import numpy as np
    import ray
    from ray.cluster_utils import Cluster

    from longhorizon.algos import ppo
    from longhorizon.engine.fused import FusedEngine
    from longhorizon.engine.ray import RayEngine, RayOptions
    from longhorizon.envs import make

    if os.environ.get("LONGHORIZON_TEST_CACHE"):
        jax.config.update("jax_compilation_cache_dir", os.environ["LONGHORIZON_TEST_CACHE"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    import time

    seconds, start = {}, time.perf_counter()

    def lap(name: str) -> None:  # where the child's time goes, for the test's failure message
        nonlocal start
        seconds[name], start = round(time.perf_counter() - start, 1), time.perf_counter()

    node_args = dict(node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=100 * 2**20)
    fast_failure_detection = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                              "health_check_timeout_ms": 500, "health_check_failure_threshold": 2}
    cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, resources={"head": 1},
                                                                _system_config=fast_failure_detection, **node_args))
    try:
        workers = {f"worker{i}": cluster.add_node(num_cpus=8, resources={f"worker{i}": 1}, **node_args) for i in (1, 2)}
        ray.init(address=cluster.address, _node_ip_address="127.0.0.1", log_to_driver=False)
        lap("cluster")

        def names(engine) -> list[str]:
            by_id = {node.node_id: name for name, node in workers.items()}
            return [by_id.get(node, "head") for node in engine.actor_nodes()]

        def remove(name: str):
            return lambda: cluster.remove_node(workers.pop(name))

        env = make("CartPole-v1")
        config = _tiny_ppo()
        fused = FusedEngine(ppo, env, config, 4, UPDATES_PER_CHUNK)
        fused_state, fused_rows, _ = _run(fused, fused.init(0))
        lap("fused")

        engine = RayEngine(ppo, "CartPole-v1", {}, config, 4, UPDATES_PER_CHUNK, RayOptions(actors=2), env=env)
        replaced, replace = [], engine._replace
        engine._replace = lambda indices, error: (replaced.append(list(indices)), replace(indices, error))
        state = engine.init(0)
        engine.compile(state)
        placed_on = names(engine)
        lap("sync_compile")
        state, rows, updates = _run(engine, state, {SYNC_REMOVAL: remove("worker1")})
        lap("sync_run")
        sync = {"placed_on": placed_on, "replaced": replaced, "placed_on_at_end": names(engine),
                "actor_restarts": engine.actor_restarts,
                "updates": updates, "state_leaves": len(jax.tree.leaves(state)),
                "differing_state_leaves": _differences(fused_state, state),
                "differing_metrics": [f"chunk {i}: {k}" for i, (a, b) in enumerate(zip(fused_rows, rows))
                                      for k in sorted(set(a) | set(b)) if k not in a or k not in b
                                      or not _same_metric(k, a[k], b[k])]}
        engine.close()

        workers["worker3"] = cluster.add_node(num_cpus=8, resources={"worker3": 1}, **node_args)
        options = RayOptions(actors=2, mode="async", max_staleness=MAX_STALENESS)
        config = _tiny_ppo(correction="vtrace")
        engine = RayEngine(ppo, "CartPole-v1", {}, config, 1, UPDATES_PER_CHUNK, options, env=env)
        state = engine.init(0)
        engine.compile(state)
        placed_on = names(engine)
        lap("async_compile")
        state, rows, updates = _run(engine, state, {ASYNC_REMOVAL: remove("worker3")})
        lap("async_run")
        asynchronous = {"placed_on": placed_on, "placed_on_at_end": names(engine),
                        "actor_restarts": engine.actor_restarts, "updates": updates,
                        "staleness_seen": dict(engine.staleness_seen),
                        "staleness_max_per_chunk": [float(row["staleness_max"][0]) for row in rows],
                        "all_finite": bool(all(row["finite"].all() for row in rows))}
        engine.close()
        Path(out).write_text(json.dumps({"sync": sync, "async": asynchronous, "seconds": seconds}))
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    _child(sys.argv[1])
