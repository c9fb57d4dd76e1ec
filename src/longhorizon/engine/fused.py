"""The fused engine: ``jit(vmap_over_seeds(scan(collect -> learn)))`` run in chunks.

Python regains control between chunks (progress, logs, evaluation, checkpoints, early stopping);
nothing calls back to the host inside a chunk. The engine never knows which algorithm it runs: it
only uses the algorithm protocol (see :mod:`longhorizon.algos`).
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from longhorizon.core.nets import tree_all_finite


def chunk_statistics(batches_return: jax.Array, batches_done: jax.Array) -> dict[str, jax.Array]:
    """Sum and count of the returns of episodes that finished inside a chunk."""
    done = batches_done.astype(jnp.float32)
    return {"episode_return_sum": jnp.sum(batches_return * done), "episodes": jnp.sum(done)}


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


def make_learn(algo: ModuleType):
    """``algo.learn`` plus what the engine tracks per update: the batch's episode statistics and
    whether every loss is finite (the Ray learner calls this directly, its actors collect)."""

    def learn(state, batch):
        state, metrics = algo.learn(state, batch)
        stats = chunk_statistics(batch.episode_return, batch.episode_done)
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(metrics)] or [jnp.asarray(True)]))
        return state, {**metrics, **stats, "loss_finite": finite}

    return learn


def make_update(algo: ModuleType):
    """One collect -> learn step, returning learn's metrics plus episode statistics."""
    learn = make_learn(algo)

    def update(state, _):
        return learn(*algo.collect(state))

    return update


SUMMED = ("episode_return_sum", "episodes")  # summed over a chunk; every other metric is averaged


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


class FusedEngine:
    """Runs up to ``updates_per_chunk`` updates of ``num_seeds`` independent agents per call."""

    name = "fused"

    def __init__(self, algo: ModuleType, env: Any, config: Any, num_seeds: int, updates_per_chunk: int,
                 rows: tuple[list[int], Any] | None = None):
        """``rows`` (sweeps): ``(seed_indices, configs)``; agent i is seed ``seed_indices[i]`` trained with row i
        of the stacked config ``configs`` (:func:`longhorizon.config.stack_configs`), all in one program."""
        self.algo, self.env, self.config = algo, env, config
        self.num_seeds, self.updates_per_chunk = num_seeds, updates_per_chunk
        self.row_seeds, self.row_configs = rows if rows is not None else (list(range(num_seeds)), None)
        # No buffer donation: the previous state must survive an interrupted chunk so Ctrl-C can save it.
        self._chunk = jax.jit(over_seeds(make_chunk(algo, updates_per_chunk), num_seeds, shared_args=1))
        if self.row_configs is None:
            self._init = jax.jit(init_over_seeds(lambda k: algo.init(k, env, config), num_seeds))
        else:
            self._init = jax.jit(init_over_seeds(lambda row: algo.init(row[0], env, row[1]), num_seeds))
        self._compiled = None
        self.compile_seconds = 0.0

    def seed_keys(self, seed: int) -> jax.Array:
        indices = jnp.asarray(self.row_seeds, jnp.int32)
        return jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(indices)

    def init(self, seed: int):
        keys = self.seed_keys(seed)
        return self._init(keys if self.row_configs is None else (keys, self.row_configs))

    def compile(self, state) -> float:
        """Compile the chunk function ahead of time; returns the seconds spent."""
        start = time.perf_counter()
        self._compiled = self._chunk.lower(state, jnp.int32(self.updates_per_chunk)).compile()
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
        state, metrics = self._compiled(state, jnp.int32(num_updates))
        return state, jax.device_get(metrics)
