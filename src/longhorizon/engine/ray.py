"""The Ray engine: the algorithm's ``collect`` on Ray actors, its ``learn`` on the learner.

The learner is this process (it owns the training state, which the runner checkpoints); the actors
are Ray actor processes that build the environment and the jitted ``collect`` once. Two dataflows,
as in Podracer's Sebulba split and SRL's actor/learner streams:

* ``sync`` (default): every actor holds a copy of its share of the seeds' training states and runs
  the jitted ``collect`` on it; the learner runs the jitted ``learn``. Only what changes crosses
  the boundary (:func:`state_flow`, read once from the traced programs): each update the learner
  sends the leaves ``learn`` changed that ``collect`` reads (the parameters, the key), and the actor
  returns the batch and the leaves ``collect`` changed (the environments, the key). An actor gets
  the whole share when it starts, after a replacement, and when the runner hands in another state.
  The arithmetic is the fused engine's, so parameters and learning curves are bit-identical to
  ``--engine fused`` for the same seeds and config (on the same kind of device). Work is split by
  whole seeds: ``--actors`` may not exceed ``--seeds``.
* ``async``: every actor keeps its own copies of the environments (its own random stream) and runs
  ``collect`` with the parameters of a given version, without waiting for the learner. Parameters
  are published once per version into Ray's object store and passed by reference; each batch carries
  the version that acted it; admission only requests a batch that cannot be more than
  ``max_staleness`` versions old when it is learned from (the learner takes batches in the order
  it requested them, so the lag of a batch is the number of requests ahead of it). The algorithm
  corrects for the lag (PPO: ``--correction vtrace`` or ``decoupled``) and declares how much lag it
  tolerates (``max_staleness(config) -> (int, why)`` or ``MAX_STALENESS``); invalid combinations are
  refused before Ray starts. Asynchronous acting needs ``with_agent_params(state, params)``.

Faults: an actor whose process dies is replaced and its lost work requested again (in ``sync`` mode
the replay is exact, so the run stays bit-identical); the learner's state never leaves this process.
A learner crash is a crash of this process: ``longhorizon train --resume DIR`` continues from the
runner's last checkpoint (exact in ``sync`` mode; ``async`` actors restart with fresh environments).

JAX arrays become numpy arrays (the flattened leaves of a pytree) once, at the boundary, in
:func:`to_wire`; each side rebuilds its pytrees from its own tree structure.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import logging
import os
import re
import sys
import time
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.engine import Engine
from longhorizon.engine.fused import compiled_init, make_learn, over_seeds, summarize_chunk
from longhorizon.errors import UsageError

MODES = ("sync", "async")
# ----------------------------------------------------------------------------- options
@dataclasses.dataclass(frozen=True)
class RayOptions:
    actors: int = 1
    address: str = "local"  # local | auto | HOST:PORT | ray://HOST:PORT
    mode: str = "sync"
    max_staleness: int = 0  # async only: largest parameter-version lag of a batch the learner learns from
    actor_cpus: float = 1.0  # resources each actor declares; Ray places actors accordingly
    actor_gpus: float = 0.0
    placement_timeout_s: float = 300.0  # how long to wait for Ray to place every actor before giving up


def options_from_spec(spec: Any) -> RayOptions:
    """The Ray settings of a ``RunSpec`` (fields ``actors``, ``address``, ``mode``, ``max_staleness``, ...)."""
    defaults = RayOptions()
    return RayOptions(**{f.name: getattr(spec, f.name, getattr(defaults, f.name)) for f in dataclasses.fields(RayOptions)})


def staleness_tolerance(algo: ModuleType, config: Any) -> tuple[int, str]:
    """``(largest tolerated lag, why)`` as the algorithm declares it; ``(-1, why)``: no asynchronous mode."""
    from longhorizon.algos import as_algorithm

    return as_algorithm(algo).max_staleness(config)


# a Ray address: a private instance, the cluster this machine joined, or HOST:PORT (also of lm.agents workers)
ADDRESS = re.compile(r"^(local|auto|ray://[\w.\-]+:\d+|[\w.\-]+:\d+)$")


def check_options(algo: ModuleType, config: Any, options: RayOptions, num_seeds: int) -> None:
    """Refuse an invalid engine setting with one sentence, before Ray or the compiler starts."""
    name = algo.NAME
    if options.mode not in MODES:
        raise UsageError(f"--mode must be sync or async (got '{options.mode}'); pass --mode sync or --mode async.")
    if options.actors < 1:
        raise UsageError(f"--actors must be at least 1 (got {options.actors}); pass --actors 1 or more.")
    if options.max_staleness < 0:
        raise UsageError(f"--max-staleness must be 0 or more (got {options.max_staleness}); pass --max-staleness 0 or more.")
    if options.actor_cpus < 0 or options.actor_gpus < 0:
        raise UsageError(f"--actor-cpus and --actor-gpus must not be negative (got {options.actor_cpus} and "
                         f"{options.actor_gpus}); pass --actor-cpus 1 --actor-gpus 0 for example.")
    if not ADDRESS.match(options.address):
        raise UsageError(f"--address '{options.address}' is not local, auto, HOST:PORT or ray://HOST:PORT; "
                         f"pass --address auto to join the cluster `ray start --head` made on this machine.")
    if options.mode == "sync":
        if options.max_staleness:
            raise UsageError(f"--max-staleness {options.max_staleness} applies to --mode async only; "
                             f"drop it or pass --mode async.")
        if options.actors > num_seeds:
            raise UsageError(f"--mode sync gives each actor whole seeds, so --actors {options.actors} needs --seeds "
                             f"{options.actors} or more; pass more seeds, fewer actors, or --mode async.")
    else:
        tolerance, why = staleness_tolerance(algo, config)
        if tolerance < 0:
            raise UsageError(f"{name} with this config cannot run with --mode async: {why}.")
        if options.max_staleness > tolerance:
            raise UsageError(f"{name} tolerates a staleness of at most {tolerance} {why}, so --max-staleness "
                             f"{options.max_staleness} is refused; pass --max-staleness {tolerance} or less.")
    try:
        importlib.import_module("ray")
    except ImportError:
        raise UsageError("--engine ray needs Ray; install it with `pip install 'longhorizon[ray]'`.") from None


def make_engine(run: Any, options: RayOptions | None = None) -> "RayEngine":
    """The engine for a resolved ``runner.run.Run`` (called by ``Run._make_engine``)."""
    options = options or options_from_spec(run.spec)
    check_options(run.algo, run.config, options, run.spec.seeds)
    return RayEngine(run.algo, run.spec.env, run.spec.env_overrides, run.config, run.spec.seeds,
                     run.updates_per_chunk, options, env=run.env)


# ----------------------------------------------------------------------------- the boundary
def to_wire(tree: Any) -> list[np.ndarray]:
    """The leaves of a pytree as host numpy arrays: what Ray ships."""
    return [np.asarray(leaf) for leaf in jax.device_get(jax.tree.leaves(tree))]


def from_wire(treedef: Any, leaves: list[np.ndarray]) -> Any:
    return jax.tree.unflatten(treedef, leaves)


def _passthrough(fn, *example) -> tuple[list[bool], list[bool], Any]:
    """For each leaf of ``fn``'s first argument (which ``fn`` returns first, in the same structure):
    ``(returned unchanged in place, read)``, from the traced program, and the shape of ``fn``'s
    result. Conservative: a leaf counts as read if any operation takes it or it is returned anywhere
    but in its own place."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*example)
    jaxpr = closed.jaxpr
    n = len(jax.tree.leaves(example[0]))
    inputs = jaxpr.invars[:n]
    kept = [out is inp for out, inp in zip(jaxpr.outvars[:n], inputs)]
    used = {id(v) for eqn in jaxpr.eqns for v in eqn.invars}
    read = [id(v) in used or any(out is v and j != i for j, out in enumerate(jaxpr.outvars)) for i, v in enumerate(inputs)]
    return kept, read, out_shape


def state_flow(algo: ModuleType, state_shape: Any) -> tuple[list[int], list[int]]:
    """Which training-state leaves (flattened, as ``jax.tree.leaves``) cross the sync boundary.

    Returns ``(to_actor, from_actor)``: the leaves ``learn`` changes that ``collect`` reads (sent each
    update), and the leaves ``collect`` changes (returned with the batch). Every other leaf is the
    same on both sides by construction: ``collect`` returns it untouched, or neither side reads the
    other's copy. ``state_shape`` is one seed's state (no seed axis); vmapping keeps the answer.
    """
    collect_keeps, collect_reads, (_, batch_shape) = _passthrough(algo.collect, state_shape)
    learn_keeps, _, _ = _passthrough(algo.learn, state_shape, batch_shape)
    to_actor = [i for i, (keep, read) in enumerate(zip(learn_keeps, collect_reads)) if read and not keep]
    from_actor = [i for i, keep in enumerate(collect_keeps) if not keep]
    return to_actor, from_actor


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """One key per seed, as the fused engine derives them."""
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(jnp.arange(num_seeds))


def driver_compile_settings() -> dict[str, Any]:
    """The driver's persistent-compilation-cache settings, for the actors to share its cache."""
    return {name: getattr(jax.config, name) for name in
            ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")}


# ----------------------------------------------------------------------------- Ray helpers (also used by lm.agents)
def connect_ray(options: RayOptions) -> bool:
    """Start or join Ray as ``options.address`` says, unless this process is connected already; True if
    this call connected (so its caller shuts Ray down). ``local``: a private single-machine instance on
    loopback, dashboard and usage statistics off."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return False
    if options.address == "local":
        needed = int(np.ceil(options.actors * options.actor_cpus))
        ray.init(address="local", num_cpus=max(os.cpu_count() or 1, needed), include_dashboard=False,
                 _node_ip_address="127.0.0.1", log_to_driver=False, logging_level=logging.WARNING)
    else:
        ray.init(address=options.address, log_to_driver=False, logging_level=logging.WARNING)
    return True


def await_placement(workers: list[Any], options: RayOptions, on_refusal=lambda: None) -> None:
    """Wait until Ray has started every actor (each has a ``pid`` method); refuse with one sentence if
    the cluster cannot hold them, after calling ``on_refusal`` (e.g. to kill the actors).

    Ray queues an actor whose resources no node has free and never says so: without this the run
    would wait forever (e.g. ``--actor-gpus 1`` on a cluster without GPUs).
    """
    import ray

    refs = [w.pid.remote() for w in workers]
    ready, waiting = ray.wait(refs, num_returns=len(refs), timeout=options.placement_timeout_s)
    if waiting:
        free = {k: round(v, 2) for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
        on_refusal()
        raise UsageError(
            f"Ray started {len(ready)} of {len(refs)} actors within {options.placement_timeout_s:g} s because "
            f"each asks for {options.actor_cpus:g} CPU and {options.actor_gpus:g} GPU while the cluster "
            f"has {free or 'nothing'} free; pass fewer --actors, a smaller --actor-cpus or --actor-gpus, or add nodes.")
    ray.get(ready)  # an actor that failed to start raises its error here


def actor_died(error: Exception) -> bool:
    """Whether ``error`` (raised by ``ray.get``) says the actor's process is gone, or its node with the
    result the actor had finished (``ObjectLostError``: a result lives in its node's object store)."""
    import ray.exceptions as rex

    return isinstance(error, (rex.RayActorError, rex.ObjectLostError))


def configure_actor_jax(compile_settings: dict[str, Any]) -> None:
    """Inside an actor: CPU unless Ray placed a GPU here, no preallocation, the driver's compilation cache."""
    import ray

    if not ray.get_gpu_ids():
        jax.config.update("jax_platforms", "cpu")  # no accelerator was placed here; do not grab one
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # actors may share an accelerator
    for name, value in compile_settings.items():
        if value is not None:
            jax.config.update(name, value)


# ----------------------------------------------------------------------------- actor
class CollectWorker:
    """One Ray actor: builds the environment and the jitted ``collect`` once, then serves calls.

    ``sync``: :meth:`collect_update` advances the actor's copy of its share of the seeds' training
    states, after taking in what the learner sends (the whole share, or only the leaves it changed).
    ``async``: :meth:`start` builds the actor's own environments; :meth:`collect_with` acts with the
    given parameters and returns the batch tagged with their version.
    """

    def __init__(self, algo_module: str, env_id: str, env_overrides: dict, config: Any, num_seeds: int,
                 mode: str, compile_settings: dict[str, Any], total_seeds: int | None = None,
                 flow: tuple[list[int], list[int]] = ((), ())):
        configure_actor_jax(compile_settings)
        from longhorizon.envs import make

        algo = self.algo = importlib.import_module(algo_module)
        env = make(env_id, **env_overrides)
        self.mode, self.state = mode, None
        self._to_actor, self._from_actor = flow  # sync: which state leaves come in and go back (state_flow)
        self._leaves: list[Any] | None = None  # sync: this actor's copy of its share of the states
        self.calls, self.busy_seconds = 0, 0.0  # work done here, for utilisation and the overhead benchmark
        self._init = compiled_init(lambda key: algo.init(key, env, config), num_seeds)
        self._state_shape = jax.eval_shape(self._init.jitted, jax.eval_shape(lambda: seed_keys(0, num_seeds)))
        self._state_def = jax.tree.structure(self._state_shape)
        if mode == "sync":
            # Batched over seeds exactly as the fused engine batches the whole run: unbatched for a
            # one-seed run (what the fused engine does, and faster), vmapped otherwise.
            self._collect = jax.jit(over_seeds(algo.collect, total_seeds or num_seeds))
            self._example = (self._state_shape,)
        else:
            self._params_def = jax.tree.structure(jax.eval_shape(jax.vmap(algo.agent_params), self._state_shape))
            self._collect = jax.jit(jax.vmap(lambda state, params: algo.collect(algo.with_agent_params(state, params))))
            self._example = (self._state_shape, jax.eval_shape(jax.vmap(algo.agent_params), self._state_shape))

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on (hex id, as ``ray.nodes()`` lists it)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def work(self) -> tuple[int, float]:
        """``(calls served, seconds spent inside them)``: what one call's work costs, without Ray's share."""
        return self.calls, self.busy_seconds

    def _served(self, start: float, result):
        """Count one call that began at ``start`` (``time.perf_counter``); returns its result."""
        self.calls, self.busy_seconds = self.calls + 1, self.busy_seconds + time.perf_counter() - start
        return result

    def compile(self) -> float:
        start = time.perf_counter()
        self._collect = self._collect.lower(*self._example).compile()
        return time.perf_counter() - start

    def collect_update(self, leaves: list[np.ndarray], whole: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Take in the whole share (``whole``) or the ``to_actor`` leaves, run ``collect``; return the
        ``from_actor`` leaves of the new states and the batch."""
        start = time.perf_counter()
        leaves = jax.device_put(leaves)
        if whole:
            self._leaves = leaves
        else:
            for index, leaf in zip(self._to_actor, leaves):
                self._leaves[index] = leaf
        state, batch = self._collect(jax.tree.unflatten(self._state_def, self._leaves))
        self._leaves = jax.tree.leaves(state)
        return self._served(start, (to_wire([self._leaves[i] for i in self._from_actor]), to_wire(batch)))

    def start(self, keys: np.ndarray) -> None:
        self.state = self._init(jnp.asarray(keys))

    def collect_with(self, params_leaves: list[np.ndarray], version: int) -> tuple[list[np.ndarray], int]:
        start = time.perf_counter()
        self.state, batch = self._collect(self.state, from_wire(self._params_def, params_leaves))
        return self._served(start, (to_wire(batch), version))


# ----------------------------------------------------------------------------- engine
@dataclasses.dataclass
class _Request:
    """An asynchronous collect in flight: which actor, with which parameter version."""

    ref: Any
    actor: int
    version: int


class RayEngine(Engine):
    """Runs ``updates_per_chunk`` updates of ``num_seeds`` agents per call, acting on Ray actors."""

    name = "ray"

    def __init__(self, algo: ModuleType, env_id: str, env_overrides: dict, config: Any, num_seeds: int,
                 updates_per_chunk: int, options: RayOptions, env: Any = None):
        if env is None:
            from longhorizon.envs import make

            env = make(env_id, **env_overrides)
        self.algo, self.env, self.config, self.options = algo, env, config, options
        self.env_id, self.env_overrides = env_id, dict(env_overrides)
        self.num_seeds, self.updates_per_chunk = num_seeds, updates_per_chunk
        self.compile_seconds = 0.0
        self.actor_restarts = 0
        self.wait_seconds = 0.0  # time the learner spent waiting for actors' results
        self._chunk_restarts = 0
        self._init = compiled_init(lambda key: algo.init(key, env, config), num_seeds)

        def summarize(metrics, state):  # per seed, over the chunk's updates (all of which ran), as the fused engine does
            return summarize_chunk(algo, metrics, state, jnp.ones(metrics["loss_finite"].shape, bool))

        self._learn = jax.jit(over_seeds(make_learn(algo), num_seeds))  # batched as fused: exact equality
        self._summarize = jax.jit(over_seeds(summarize, num_seeds))
        self._seed = 0
        self._workers: list[Any] = []
        self._incarnation: list[int] = []
        self._ray_started = False
        self._batch_treedef = None
        # sync: contiguous shares of the seeds, one per actor
        bounds = np.linspace(0, num_seeds, options.actors + 1).round().astype(int) if options.mode == "sync" else None
        self._shards = None if bounds is None else list(zip(bounds[:-1], bounds[1:]))
        one_seed = jax.eval_shape(lambda key: algo.init(key, env, config), jax.random.PRNGKey(0))
        self._flow = state_flow(algo, one_seed) if options.mode == "sync" else ([], [])
        self._in_sync: list[bool] = []  # sync: actor i holds the learner's current state (else send it whole)
        self._synced_state = None  # sync: the state this engine last returned (the actors hold its leaves)
        # async: requests in the order the learner will take them, the current parameter version
        self._pending: collections.deque[_Request] = collections.deque()
        self._version = 0
        self._params_ref = None
        self._last_state = None
        self.staleness_seen: collections.Counter[int] = collections.Counter()

    # ------------------------------------------------------------------ the engine interface
    def seed_keys(self, seed: int) -> jax.Array:
        return seed_keys(seed, self.num_seeds)

    def init(self, seed: int):
        """The training state of every seed, built here exactly as the fused engine builds it (no Ray)."""
        self._seed = seed
        return self._init(self.seed_keys(seed))

    def compile(self, state) -> float:
        """Start Ray and the actors, compile ``learn`` here and ``collect`` on every actor; returns seconds."""
        start = time.perf_counter()
        self._start_workers()
        pending = [w.compile.remote() for w in self._workers]
        batch_shape = jax.eval_shape(jax.vmap(self.algo.collect), state)[1]
        self._learn = self._learn.lower(state, batch_shape).compile()
        self._ray().get(pending)
        if self.options.mode == "async":
            self._ray().get([self._start_actor(i) for i in range(len(self._workers))])
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    def run_chunk(self, state, num_updates: int | None = None):
        """Advance every seed by ``num_updates`` updates (default ``updates_per_chunk``); returns the new
        state and per-seed metrics (on host)."""
        num_updates = self.updates_per_chunk if num_updates is None else num_updates
        if not 0 < num_updates <= self.updates_per_chunk:
            raise ValueError(f"a chunk runs 1..{self.updates_per_chunk} updates, not {num_updates}")
        if not self._workers:
            self.compile(state)
        self._chunk_restarts = 0
        if self.options.mode == "sync" and state is not self._synced_state:
            self._in_sync = [False] * len(self._workers)  # e.g. restored from a checkpoint: send it whole
        self._synced_state = None  # until this chunk completes (a failed chunk may be retried from its start)
        rows, lags = [], []
        for _ in range(num_updates):
            if self.options.mode == "sync":
                state, batch = self._sync_collect(state)
            else:
                state, batch, lag = self._async_collect(state)
                lags.append(lag)
            state, metrics = self._learn(state, batch)
            rows.append(metrics)
            if self.options.mode == "async":
                self._version += 1
                self._params_ref = None  # publish the new version when it is first asked for
                self._last_state = state
        self._synced_state = state
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *rows)  # [seeds, updates], as the fused scan
        metrics = jax.device_get(self._summarize(stacked, state))
        if lags:
            metrics["staleness_mean"] = np.full(self.num_seeds, float(np.mean(lags)))
            metrics["staleness_max"] = np.full(self.num_seeds, float(np.max(lags)))
        return state, metrics

    def close(self) -> None:
        """Kill the actors this engine started; shut Ray down if this engine started it."""
        if not self._workers:
            return
        ray = self._ray()
        for worker in self._workers:
            try:
                ray.kill(worker)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._workers, self._pending = [], collections.deque()
        if self._ray_started:
            ray.shutdown()
            self._ray_started = False

    def actor_pids(self) -> list[int]:
        """Process ids of the actors (e.g. to watch or to kill one)."""
        return self._ray().get([w.pid.remote() for w in self._workers])

    def actor_nodes(self) -> list[str]:
        """The Ray node id of every actor, in actor order (where Ray placed them)."""
        return self._ray().get([w.node_id.remote() for w in self._workers])

    def actor_work(self) -> list[tuple[int, float]]:
        """Per actor: ``(calls served, seconds spent inside them)`` (a replaced actor starts from zero)."""
        return self._ray().get([w.work.remote() for w in self._workers])

    # ------------------------------------------------------------------ Ray
    @staticmethod
    def _ray():
        import ray

        return ray

    def _connect(self) -> None:
        if connect_ray(self.options):
            self._ray_started = True

    def _start_workers(self) -> None:
        if self._workers:
            return
        self._connect()
        self._workers = [self._new_worker(i) for i in range(self.options.actors)]
        self._incarnation = [0] * self.options.actors
        self._in_sync = [False] * self.options.actors
        self._await_placement(self._workers)

    def _await_placement(self, workers: list[Any]) -> None:
        """Wait until Ray has started every actor; refuse with one sentence if the cluster cannot hold them."""
        await_placement(workers, self.options, on_refusal=self.close)

    def _new_worker(self, index: int):
        ray = self._ray()
        # SPREAD: actors go to the least-loaded nodes first, so a cluster's nodes share the acting and a
        # lost node takes few actors with it; a replacement lands wherever resources are free.
        remote = ray.remote(num_cpus=self.options.actor_cpus, num_gpus=self.options.actor_gpus, max_restarts=0,
                            scheduling_strategy="SPREAD")(CollectWorker)
        seeds = self.num_seeds if self._shards is None else int(self._shards[index][1] - self._shards[index][0])
        return remote.remote(self.algo.__name__, self.env_id, self.env_overrides, self.config, seeds,
                             self.options.mode, driver_compile_settings(), self.num_seeds, self._flow)

    def _start_actor(self, index: int):
        """Async: the actor's own environments, on a random stream of its own (per actor and incarnation)."""
        salt = 1 + index + 1000 * self._incarnation[index]
        keys = jax.vmap(lambda k: jax.random.fold_in(k, salt))(self.seed_keys(self._seed))
        return self._workers[index].start.remote(np.asarray(keys))

    def _replace(self, indices: list[int], error: Exception) -> None:
        """Actors died: start new ones in their places (compiled, and for async with fresh environments).
        Actors lost together (a node went) start, are placed and compile concurrently."""
        ray = self._ray()
        for index in indices:
            try:
                ray.kill(self._workers[index])
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._chunk_restarts += len(indices)
        if self._chunk_restarts > 3 * self.options.actors:
            raise RuntimeError(f"Ray actors died {self._chunk_restarts} times in one chunk; check the actors' logs "
                               f"(memory, crashes) before running again.") from error
        lost = ("actor " if len(indices) == 1 else "actors ") + ", ".join(map(str, indices))
        print(f"ray engine: {lost} died ({type(error).__name__}); starting replacements.", file=sys.stderr)
        self.actor_restarts += len(indices)
        for index in indices:
            self._incarnation[index] += 1
            self._in_sync[index] = False
            self._workers[index] = self._new_worker(index)
        self._await_placement([self._workers[i] for i in indices])
        ray.get([self._workers[i].compile.remote() for i in indices])
        if self.options.mode == "async":
            ray.get([self._start_actor(i) for i in indices])

    def _wait(self, ref):
        """``ray.get``, timing how long the learner waits for actors (``wait_seconds``)."""
        start = time.perf_counter()
        try:
            return self._ray().get(ref)
        finally:
            self.wait_seconds += time.perf_counter() - start

    @staticmethod
    def _actor_died(error: Exception) -> bool:
        return actor_died(error)

    # ------------------------------------------------------------------ sync
    def _sync_collect(self, state):
        """Every actor advances its share of the seeds by one ``collect``; returns the joined state and batch.

        Only the leaves that changed cross the boundary (:func:`state_flow`); an actor that does not
        hold the learner's current state (new, replaced, or the runner handed in another state) gets
        its whole share first. The arithmetic is unchanged, so the run stays bit-identical to fused.
        """
        to_actor, from_actor = self._flow
        leaves = jax.tree.leaves(state)
        wire: dict[bool, list[np.ndarray]] = {}  # on host once per update: the changed leaves, or all of them

        def request(i: int):
            whole = not self._in_sync[i]
            if whole not in wire:
                wire[whole] = to_wire(leaves if whole else [leaves[j] for j in to_actor])
            lo, hi = self._shards[i]
            sent = wire[whole] if len(self._shards) == 1 else [leaf[lo:hi] for leaf in wire[whole]]
            return self._workers[i].collect_update.remote(sent, whole)

        refs = {i: request(i) for i in range(len(self._workers))}
        done: dict[int, Any] = {}
        while refs:  # every result, or every lost actor of this round (e.g. a whole node's) at once
            lost, error = [], None
            for i, ref in refs.items():
                try:
                    done[i] = self._wait(ref)
                    self._in_sync[i] = True
                except Exception as died:  # noqa: BLE001 - only a dead actor is handled here
                    if not self._actor_died(died):
                        raise
                    lost.append(i)
                    error = died
            if lost:
                self._replace(lost, error)
            refs = {i: request(i) for i in lost}  # the replacements get their whole share: an exact replay
        results = [done[i] for i in range(len(self._workers))]
        join = (lambda parts: parts[0]) if len(results) == 1 else (lambda parts: np.concatenate(parts, axis=0))
        new_leaves = list(leaves)
        for index, parts in zip(from_actor, zip(*(r[0] for r in results))):
            new_leaves[index] = join(parts)
        batch_leaves = [join(parts) for parts in zip(*(r[1] for r in results))]
        state = from_wire(jax.tree.structure(state), new_leaves)
        return state, from_wire(self._batch_def(state), batch_leaves)

    def _batch_def(self, state):
        if self._batch_treedef is None:
            self._batch_treedef = jax.tree.structure(jax.eval_shape(jax.vmap(self.algo.collect), state)[1])
        return self._batch_treedef

    # ------------------------------------------------------------------ async
    def _admit(self, state) -> None:
        """Request batches while each new one is certain to be at most ``max_staleness`` versions old when used."""
        ray = self._ray()
        while len(self._pending) <= self.options.max_staleness:
            if self._params_ref is None:
                self._params_ref = ray.put(to_wire(self.algo.agent_params(state)))  # once per version
            load = collections.Counter(r.actor for r in self._pending)
            actor = min(range(len(self._workers)), key=lambda i: (load[i], i))
            ref = self._workers[actor].collect_with.remote(self._params_ref, self._version)
            self._pending.append(_Request(ref, actor, self._version))

    def _async_collect(self, state):
        if self._last_state is not None and state is not self._last_state:
            self._pending.clear()  # a different learner state (e.g. restored): drop requests made for the old one
            self._params_ref = None
        self._last_state = state
        while True:
            self._admit(state)
            request = self._pending[0]
            try:
                batch_leaves, version = self._wait(request.ref)
            except Exception as error:  # noqa: BLE001 - only a dead actor is handled here
                if not self._actor_died(error):
                    raise
                self._replace([request.actor], error)
                self._resubmit(request.actor, state)
                continue
            self._pending.popleft()
            lag = self._version - version
            if lag > self.options.max_staleness:  # cannot happen with in-order admission; refuse rather than learn
                continue
            self.staleness_seen[lag] += 1
            return state, from_wire(self._batch_def(state), batch_leaves), lag

    def _resubmit(self, actor: int, state) -> None:
        """Request the lost work of a replaced actor again, in place, with the current parameters."""
        ray = self._ray()
        if self._params_ref is None:
            self._params_ref = ray.put(to_wire(self.algo.agent_params(state)))
        for request in self._pending:
            if request.actor == actor:
                request.ref = self._workers[actor].collect_with.remote(self._params_ref, self._version)
                request.version = self._version
