"""A multi-node Ray cluster simulated on this machine, reachable from this machine only.

:class:`SimulatedCluster` starts ``ray.cluster_utils.Cluster``: a head node without CPUs (the learner,
this process, runs there and no actor can) and ``nodes`` worker nodes, each a raylet of its own with
``cpus_per_node`` logical CPUs and a custom resource naming it (``worker1..N``). The Ray engine
places its actors with ``SPREAD``, so they land across the worker nodes as on a real cluster; only
the network between the nodes is loopback. :func:`loopback_scratch` puts the process in a private
loopback-only network namespace first and gives Ray a scratch directory of its own, away from any
other Ray instance on the machine (``benchmarks/ray_multinode.py``, ``longhorizon repro srl``).
:func:`match_priority` gives the actors the driver's CPU priority (Ray starts them at a lower one).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

from longhorizon.errors import UsageError


@contextlib.contextmanager
def loopback_scratch() -> Iterator[str]:
    """Enter a private loopback-only network namespace (needs root; see :mod:`longhorizon.engine.ray_loopback`)
    and point ``RAY_TMPDIR`` at a fresh scratch directory for the duration; yields the directory."""
    from longhorizon.engine.ray_loopback import enter_loopback_namespace

    try:
        enter_loopback_namespace()
    except PermissionError as error:
        raise UsageError(f"a simulated Ray cluster runs in a private loopback-only network namespace, which this "
                         f"process cannot create ({error.strerror}); run it as root or under "
                         f"`unshare -rn sh -c 'ip link set lo up && ...'`.") from None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    scratch = tempfile.mkdtemp(prefix="lhray", dir="/tmp")  # short: Ray's socket paths have a length limit
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = scratch  # the clusters' sessions and address file, away from other Ray instances
    try:
        yield scratch
    finally:
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        shutil.rmtree(scratch, ignore_errors=True)


class SimulatedCluster:
    """A head node without CPUs and ``nodes`` worker nodes named ``worker1..N`` (a custom resource each);
    this process joins it as the driver. End it with :meth:`shutdown` (or use it as a context manager)."""

    def __init__(self, nodes: int, cpus_per_node: int):
        import ray
        from ray.cluster_utils import Cluster

        if ray.is_initialized():
            raise RuntimeError("this process is connected to Ray already; a simulated cluster needs a process of its "
                               "own (run it in a child process).")
        args = dict(node_ip_address="127.0.0.1", include_dashboard=False, object_store_memory=200 * 2**20)
        self.cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, resources={"head": 1}, **args))
        try:
            self.workers = {f"worker{i}": self.cluster.add_node(num_cpus=cpus_per_node, resources={f"worker{i}": 1}, **args)
                            for i in range(1, nodes + 1)}
            ray.init(address=self.cluster.address, _node_ip_address="127.0.0.1", log_to_driver=False)
        except BaseException:
            self.cluster.shutdown()
            raise

    def names(self, node_ids: list[str]) -> list[str]:
        by_id = {node.node_id: name for name, node in self.workers.items()}
        return [by_id.get(node, "head") for node in node_ids]

    def remove(self, name: str) -> float:
        start = time.perf_counter()
        self.cluster.remove_node(self.workers.pop(name))
        return time.perf_counter() - start

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()

    def __enter__(self) -> "SimulatedCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def match_priority(pids: list[int]) -> int:
    """Give every thread of the processes ``pids`` (Ray actors) this process's niceness. Ray starts its
    workers 15 niceness steps below the driver's priority; on an idle machine that changes nothing, but
    when other jobs run it starves the actors while this process (the learner, or a fused engine run
    beside them) keeps its priority, which a benchmark would count against Ray. Lowering niceness needs
    root; returns the threads changed."""
    mine, changed = os.getpriority(os.PRIO_PROCESS, 0), 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), mine)
                changed += 1
            except OSError:
                pass
    return changed
