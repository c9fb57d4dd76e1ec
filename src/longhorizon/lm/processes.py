"""Runs that span several processes (one per host): ``jax.distributed`` and what each process writes.

Multi-controller JAX: every process runs the same program on its own devices, and ``jax.devices()`` lists the
devices of all of them, so a mesh built from it (``--mesh data=D,fsdp=F,tensor=T``, :mod:`longhorizon.lm.sharding`)
spans hosts, and XLA's collectives (NCCL on GPUs, gloo between CPU processes) move what crosses them. Each process
samples the same rollouts (the same seeds and parameters), so the batch is the same everywhere and placing it with a
global sharding keeps only each device's rows.

What differs by process is the results folder: process 0 writes the run's (``--out``), and process ``k > 0`` its
own under ``OUT/process-k`` (lock, metrics, curve). The checkpoints are orbax's multi-host ones, in process 0's
``OUT/checkpoints``: every process writes the shards its devices hold (so the folder must be on a file system every
host sees, as orbax requires: NFS, a bucket), and restores into the shardings of the mesh it runs on, so a run may
resume on another number of processes or another mesh.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from pathlib import Path
from typing import Any

from longhorizon.errors import UsageError

# the options of `lm rl`, `lm sft` and `lm agent` that say where a run's processes are, not what it trains: they are
# not recorded in config.json and may change on --resume
LAUNCH_OPTIONS = ("coordinator_address", "num_processes", "process_id")


@dataclasses.dataclass(frozen=True)
class Launch:
    """Where this process sits in a multi-process run: ``coordinator_address`` (``host:port`` of process 0, which
    serves it), ``num_processes`` and this ``process_id``; all None for a one-process run."""

    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None
    timeout_s: int = 300  # how long processes wait for each other at start-up

    @classmethod
    def of(cls, options: dict) -> "Launch":
        """From a command's options; the start-up wait from ``LONGHORIZON_JOIN_TIMEOUT_S`` (default 300 s)."""
        wait = os.environ.get("LONGHORIZON_JOIN_TIMEOUT_S", "300")
        if not wait.isdigit() or int(wait) < 1:
            raise UsageError(f"LONGHORIZON_JOIN_TIMEOUT_S={wait} is not a whole number of seconds; set it to e.g. 300.")
        return cls(**{k: options.get(k) for k in LAUNCH_OPTIONS}, timeout_s=int(wait))

    @property
    def multi(self) -> bool:
        return any(getattr(self, k) is not None for k in LAUNCH_OPTIONS)

    def check(self) -> None:
        """Refuse a partial or inconsistent launch before anything starts."""
        if not self.multi:
            return
        missing = [f"--{k.replace('_', '-')}" for k in LAUNCH_OPTIONS if getattr(self, k) is None]
        if missing:
            raise UsageError(f"a multi-process run needs --coordinator-address, --num-processes and --process-id "
                             f"(or JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID); {', '.join(missing)} "
                             "is missing.")
        host, _, port = self.coordinator_address.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"--coordinator-address {self.coordinator_address} is not HOST:PORT; give process 0's "
                             "address and a free port, e.g. 10.0.0.1:1234.")
        if self.num_processes < 1 or not 0 <= self.process_id < self.num_processes:
            raise UsageError(f"--process-id {self.process_id} is outside 0..{self.num_processes - 1} for "
                             f"--num-processes {self.num_processes}; number the processes from 0.")


def join(launch: Launch) -> None:
    """Join the run's processes (``jax.distributed.initialize``) before JAX starts its backend; nothing for a
    one-process launch. A process that cannot reach the others within ``launch.timeout_s`` exits with code 2 and
    one sentence (JAX itself would abort the process with a C++ stack trace, or wait)."""
    launch.check()
    if not launch.multi:
        return
    import jax

    if jax.distributed.is_initialized():  # already joined (a second run in the same process)
        return
    # CPU devices of different processes talk through gloo (the default CPU client has no cross-process collectives)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    joined = threading.Event()

    def give_up():
        if not joined.wait(launch.timeout_s):
            print(f"process {launch.process_id} of {launch.num_processes} could not reach the others through the "
                  f"coordinator at {launch.coordinator_address} within {launch.timeout_s} s; start every process (process "
                  f"0 serves the coordinator) with the same --coordinator-address and --num-processes.",
                  file=sys.stderr, flush=True)
            os._exit(2)

    threading.Thread(target=give_up, daemon=True).start()
    jax.distributed.initialize(launch.coordinator_address, num_processes=launch.num_processes,
                               process_id=launch.process_id, initialization_timeout=launch.timeout_s + 60)
    joined.set()


def process_folder(out: str | os.PathLike) -> Path:
    """The results folder this process writes: ``out`` for process 0, ``out/process-k`` for process ``k``."""
    import jax

    index = jax.process_index() if several() else 0
    return Path(out) if index == 0 else Path(out) / f"process-{index}"


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is set in any process (a collective: every process calls it at the same point); ``flag``
    itself in a one-process run. A Ctrl-C reaches the processes at different moments, so the run stops at the
    first step boundary where any of them was asked to, and all of them save that step."""
    if not several():
        return bool(flag)
    import numpy as np
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray([flag], np.int32))))


def local_to_numpy(tree: Any) -> Any:
    """``tree`` with each array held by this process alone (an RNG key on its first device) as numpy: orbax writes a
    multi-process checkpoint from global arrays, and a numpy array once (process 0; every process holds the same)."""
    import jax
    import numpy as np

    return jax.tree_util.tree_map(lambda x: np.asarray(x) if isinstance(x, jax.Array) and x.is_fully_addressable
                                  else x, tree)


def local_like(tree: Any, template: Any) -> Any:
    """The numpy arrays of ``tree`` back on this process's device where ``template`` held a local jax array."""
    import jax

    return jax.tree_util.tree_map(lambda x, like: jax.device_put(x, like.sharding)
                                  if isinstance(like, jax.Array) and like.is_fully_addressable else x, tree, template)


def several() -> bool:
    """Whether this process is one of several (``jax.distributed`` joined; JAX's backend is not started by asking)."""
    import jax

    return jax.distributed.is_initialized() and jax.process_count() > 1
