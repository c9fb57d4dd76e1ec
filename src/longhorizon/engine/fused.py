"""The fused engine: ``jit(vmap_over_seeds(scan(collect -> learn)))`` run in chunks.

Python regains control between chunks (progress, logs, evaluation, checkpoints, early stopping);
nothing calls back to the host inside a chunk. The engine never knows which algorithm it runs: it
only uses the algorithm protocol (see :mod:`longhorizon.algos`).

Over several local devices the seeds are sharded: a 1-D mesh ``("seeds",)`` over the devices, and
``shard_map`` runs the same seed-vmapped chunk on each device's block of ``num_seeds / devices``
seeds (no communication: seeds are independent). A CPU host is split into devices with JAX's
``jax_num_cpu_devices`` (the ``--xla_force_host_platform_device_count`` flag), before JAX starts.
"""

from __future__ import annotations

import os
import time
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from longhorizon.core.nets import tree_all_finite
from longhorizon.engine import Engine
from longhorizon.errors import UsageError

SEEDS = "seeds"  # the mesh axis the seeds are sharded over


def chunk_statistics(batches_return: jax.Array, batches_done: jax.Array,
                     batches_length: jax.Array | None = None) -> dict[str, jax.Array]:
    """Sum of the returns (and, given ``batches_length``, of the lengths) of the episodes that finished
    inside a batch, and their count."""
    done = batches_done.astype(jnp.float32)
    stats = {"episode_return_sum": jnp.sum(batches_return * done), "episodes": jnp.sum(done)}
    if batches_length is not None:
        stats["episode_length_sum"] = jnp.sum(batches_length.astype(jnp.float32) * done)
    return stats


def over_seeds(fn, num_seeds: int, shared_args: int = 0):
    """``fn`` mapped over a leading seed axis of its arguments and results.

    The last ``shared_args`` arguments are the same for every seed and are not mapped. Several
    seeds are vmapped. A single seed runs unbatched and gets its axis back outside: a size-1 vmap
    turns matrix products into batched ones, which XLA's CPU backend runs markedly slower
    (measured: +30% CPU time per PQN update).
    """
    if num_seeds > 1:
        def mapped(*args):
            axes = (0,) * (len(args) - shared_args) + (None,) * shared_args
            return jax.vmap(fn, in_axes=axes)(*args)

        return mapped

    def single(*args):
        split = len(args) - shared_args
        out = fn(*jax.tree.map(lambda x: x[0], args[:split]), *args[split:])
        return jax.tree.map(lambda x: x[None], out)

    return single


def request_cpu_devices(count: int) -> bool:
    """Split the CPU into ``count`` JAX devices (``jax_num_cpu_devices``); False once JAX's backends
    have started, when the device count can no longer change. GPU and TPU hosts keep their devices."""
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # raised once any JAX operation has run
        return False
    return True


def local_cpu_count() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's total)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def resolve_devices(asked: int | str, num_seeds: int) -> int:
    """How many local devices ``num_seeds`` seeds are sharded over: ``asked`` is a count or ``"all"``.

    Seeds are split evenly, ``num_seeds / devices`` per device, so the count must divide them;
    nothing is padded. One seed is not split: its environments share every minibatch of an update,
    so splitting them needs a cross-device gradient mean inside the algorithm's ``learn``.
    """
    text = str(asked).strip().lower()
    if text != "all" and not (text.isdigit() and int(text) >= 1):
        raise UsageError(f"--devices {asked} is neither a positive count nor 'all'; pass --devices 2 or --devices all.")
    available = len(jax.devices())
    count = available if text == "all" else int(text)
    if count == 1:
        return 1
    if num_seeds == 1:
        raise UsageError(f"--devices {asked} shards seeds over devices and the environments of one seed are not split "
                         f"(they share every minibatch); pass --seeds {count} (or a multiple), or drop --devices.")
    if num_seeds % count:
        raise UsageError(f"--seeds {num_seeds} does not split evenly over {count} devices (nothing is padded); "
                         f"pass --seeds {count * -(-num_seeds // count)}, or --devices with a count that divides "
                         f"{num_seeds}.")
    if count > available:
        raise UsageError(f"--devices {asked} asks for {count} devices but JAX already runs on {available} "
                         f"({jax.devices()[0].platform}); on a CPU set "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count={count} before JAX starts, "
                         f"or pass --devices {available}.")
    return count


def seed_mesh(num_devices: int) -> Mesh:
    """A 1-D mesh named ``seeds`` over the first ``num_devices`` local devices."""
    return Mesh(np.asarray(jax.devices()[:num_devices]), (SEEDS,))


def shard_over_seeds(fn, num_seeds: int, mesh: Mesh, shared_args: int = 0):
    """:func:`over_seeds` with the seed axis split over ``mesh``: each device runs ``fn`` over its
    block of ``num_seeds / mesh.size`` seeds (arguments and results ``[num_seeds, ...]``, sharded on
    axis 0); the last ``shared_args`` arguments are replicated. Seeds never communicate."""
    local = over_seeds(fn, num_seeds // mesh.size, shared_args)

    def sharded(*args):
        specs = (PartitionSpec(SEEDS),) * (len(args) - shared_args) + (PartitionSpec(),) * shared_args
        # No collectives inside, so nothing to type-check across devices (the check would also reject
        # a branch that returns device-invariant constants, such as a skipped update's zero metrics).
        return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=PartitionSpec(SEEDS), check_vma=False)(*args)

    return sharded


# Compiler options for programs that run rarely. LLVM's optimisation passes are most of XLA's CPU
# compile time. Evaluation skips them (level 0): it halves that compile (PPO on CartPole: 3.2 -> 1.4
# CPU-s) for a program that runs in milliseconds. Initialisation runs them at level 1: level 0 would
# change its floats in the last bit, level 1 builds the same bits as the default level (tested for
# every algorithm on CartPole) and compiles faster (docs/benchmarks.md, "Session 16").
RUN_ONCE = {"xla_backend_optimization_level": 0}
INITIALISE = {"xla_backend_optimization_level": 1}


class RunOnce:
    """``jax.jit(fn)`` compiled with ``compiler_options`` (default :data:`RUN_ONCE`) on the first call for
    each argument shape (``.jitted`` stays a plain ``jax.jit``, which can be traced inside other programs)."""

    def __init__(self, fn, compiler_options: dict[str, Any] = RUN_ONCE):
        self.jitted, self._compiled, self.compiler_options = jax.jit(fn), {}, compiler_options

    def __call__(self, *args):
        signature = (jax.tree.structure(args), tuple((jnp.shape(x), jnp.result_type(x)) for x in jax.tree.leaves(args)))
        if signature not in self._compiled:
            self._compiled[signature] = self.jitted.lower(*args).compile(compiler_options=self.compiler_options)
        return self._compiled[signature](*args)


def init_over_seeds(init, num_seeds: int):
    """``init`` (one key -> one state) over a leading axis of seed keys, one seed after another.

    Not vmapped, on purpose: initialisers such as the orthogonal one run a QR decomposition, and
    XLA's CPU backend splits a batched QR over the same thread pool that runs a program's
    independent operations. With 2 cores, two batched QRs can each hold one of the pool's two
    threads while waiting for work queued behind the other, and the program never finishes
    (reproduced with jaxlib 0.10.2: a 4-seed PPO init hung within 20 calls; it was the "hang
    between cells" of the Ray overhead benchmark). Sequential seeds never batch a QR and cost
    nothing that matters at initialisation.
    """
    if num_seeds == 1:
        return over_seeds(init, 1)
    return lambda keys: jax.lax.map(init, keys)


def compiled_init(init, num_seeds: int) -> RunOnce:
    """:func:`init_over_seeds` compiled with :data:`INITIALISE`: how every engine builds its initial
    states (the same program everywhere, so fused, Ray and sweeps start from the same bits)."""
    return RunOnce(init_over_seeds(init, num_seeds), INITIALISE)


def make_learn(algo: ModuleType):
    """``algo.learn`` plus what the engine tracks per update: the batch's episode statistics and
    whether every loss is finite (the Ray learner calls this directly, its actors collect)."""

    def learn(state, batch):
        state, metrics = algo.learn(state, batch)
        # episode_length is optional: an algorithm whose batches lack it gets no episode-length statistics.
        stats = chunk_statistics(batch.episode_return, batch.episode_done, getattr(batch, "episode_length", None))
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(metrics)] or [jnp.asarray(True)]))
        return state, {**metrics, **stats, "loss_finite": finite}

    return learn


def make_update(algo: ModuleType):
    """One collect -> learn step, returning learn's metrics plus episode statistics."""
    learn = make_learn(algo)

    def update(state, _):
        return learn(*algo.collect(state))

    return update


SUMMED = ("episode_return_sum", "episode_length_sum", "episodes")  # summed over a chunk; every other metric is averaged


def mean_where(values: jax.Array, ran: jax.Array) -> jax.Array:
    """Mean of ``values`` [updates, ...] over the updates where ``ran`` [updates] holds."""
    mask = jnp.broadcast_to(ran.reshape(ran.shape + (1,) * (values.ndim - 1)), values.shape)
    return jnp.sum(jnp.where(mask, values, 0)) / jnp.maximum(1, jnp.sum(mask))


def summarize_chunk(algo: ModuleType, metrics: dict[str, jax.Array], state, ran: jax.Array) -> dict[str, jax.Array]:
    """One seed's chunk summary from its per-update ``metrics`` [updates, ...] (``make_update``'s):
    episode statistics summed, every other metric averaged over the updates that ``ran``, and
    ``finite`` (every loss of those updates and the final parameters)."""
    summary = {k: (jnp.sum(v) if k in SUMMED else mean_where(v, ran)) for k, v in metrics.items() if k != "loss_finite"}
    summary["finite"] = jnp.logical_and(jnp.all(metrics["loss_finite"] | ~ran), tree_all_finite(algo.agent_params(state)))
    return summary


def make_chunk(algo: ModuleType, updates_per_chunk: int):
    """``chunk(state, num_updates)``: the first ``num_updates`` of ``updates_per_chunk`` scanned
    updates run, the rest leave the state untouched (so a run's last, shorter chunk reuses the
    compiled program). Metrics are averaged over the updates that ran; episode counts are summed.

    ``num_updates`` is the same for every seed, so the condition stays a real branch under the
    seed vmap (a skipped update costs nothing)."""
    update = make_update(algo)

    def skip(state):
        metrics = jax.eval_shape(update, state, None)[1]
        return state, jax.tree.map(lambda m: jnp.zeros(m.shape, m.dtype), metrics)

    def chunk(state, num_updates):
        def masked_update(state, index):
            ran = index < num_updates
            state, metrics = jax.lax.cond(ran, lambda s: update(s, None), skip, state)
            return state, {**metrics, "ran": ran}

        state, metrics = jax.lax.scan(masked_update, state, jnp.arange(updates_per_chunk))
        ran = metrics.pop("ran")
        return state, summarize_chunk(algo, metrics, state, ran)

    return chunk


class FusedEngine(Engine):
    """Runs up to ``updates_per_chunk`` updates of ``num_seeds`` independent agents per call, on
    ``num_devices`` local devices (seeds sharded, :func:`shard_over_seeds`; see :func:`resolve_devices`)."""

    name = "fused"

    def __init__(self, algo: ModuleType, env: Any, config: Any, num_seeds: int, updates_per_chunk: int,
                 rows: tuple[list[int], Any] | None = None, num_devices: int = 1):
        """``rows`` (sweeps): ``(seed_indices, configs)``; agent i is seed ``seed_indices[i]`` trained with row i
        of the stacked config ``configs`` (:func:`longhorizon.config.stack_configs`), all in one program."""
        self.algo, self.env, self.config = algo, env, config
        self.num_seeds, self.updates_per_chunk = num_seeds, updates_per_chunk
        self.row_seeds, self.row_configs = rows if rows is not None else (list(range(num_seeds)), None)
        self.num_devices = num_devices
        chunk = make_chunk(algo, updates_per_chunk)
        if num_devices == 1:
            self.sharding = None
            chunk = over_seeds(chunk, num_seeds, shared_args=1)
        else:
            mesh = seed_mesh(num_devices)
            self.sharding = NamedSharding(mesh, PartitionSpec(SEEDS))
            chunk = shard_over_seeds(chunk, num_seeds, mesh, shared_args=1)
        # No buffer donation: the previous state must survive an interrupted chunk so Ctrl-C can save it.
        self._chunk = jax.jit(chunk)
        if self.row_configs is None:
            self._init = compiled_init(lambda k: algo.init(k, env, config), num_seeds)
        else:
            self._init = compiled_init(lambda row: algo.init(row[0], env, row[1]), num_seeds)
        self._compiled = None
        self.compile_seconds = 0.0

    def seed_keys(self, seed: int) -> jax.Array:
        indices = jnp.asarray(self.row_seeds, jnp.int32)
        return jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(indices)

    def init(self, seed: int):
        """Every seed's initial state, on the devices its seeds run on. Initialised on one device
        (the same program whatever the device count), then sharded: one copy."""
        keys = self.seed_keys(seed)
        state = self._init(keys if self.row_configs is None else (keys, self.row_configs))
        # Strongly typed, as a state restored from a checkpoint is: a resumed run reuses the compiled chunk.
        state = jax.tree.map(lambda x: jax.lax.convert_element_type(x, x.dtype) if x.weak_type else x, state)
        return self.place(state)

    def place(self, state):
        """``state`` (e.g. restored from a checkpoint) sharded over the seed devices; a no-op on one device
        or when it is already there."""
        return state if self.sharding is None else jax.device_put(state, self.sharding)

    def compile(self, state) -> float:
        """Compile the chunk function ahead of time; returns the seconds spent."""
        start = time.perf_counter()
        self._compiled = self._chunk.lower(self.place(state), jnp.int32(self.updates_per_chunk)).compile()
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    def run_chunk(self, state, num_updates: int | None = None):
        """Advance every seed by ``num_updates`` updates (default: a whole chunk, ``updates_per_chunk``);
        returns the new state and per-seed metrics (on host)."""
        if self._compiled is None:
            self.compile(state)
        num_updates = self.updates_per_chunk if num_updates is None else num_updates
        if not 0 < num_updates <= self.updates_per_chunk:
            raise ValueError(f"a chunk runs 1..{self.updates_per_chunk} updates, not {num_updates}")
        state, metrics = self._compiled(self.place(state), jnp.int32(num_updates))
        return state, jax.device_get(metrics)
