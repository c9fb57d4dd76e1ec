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


def over_seeds(fn, num_seeds: int):
    """``fn`` mapped over a leading seed axis of all its arguments and results.

    Several seeds are vmapped. A single seed runs unbatched and gets its axis back outside: a
    size-1 vmap turns matrix products into batched ones, which XLA's CPU backend runs markedly
    slower (measured: +30% CPU time per PQN update).
    """
    if num_seeds > 1:
        return jax.vmap(fn)

    def single(*args):
        out = fn(*jax.tree.map(lambda x: x[0], args))
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


def make_update(algo: ModuleType):
    """One collect -> learn step, returning learn's metrics plus episode statistics."""

    def update(state, _):
        state, batch = algo.collect(state)
        state, metrics = algo.learn(state, batch)
        stats = chunk_statistics(batch.episode_return, batch.episode_done)
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(metrics)] or [jnp.asarray(True)]))
        return state, {**metrics, **stats, "loss_finite": finite}

    return update


class FusedEngine:
    """Runs ``updates_per_chunk`` updates of ``num_seeds`` independent agents per call."""

    name = "fused"

    def __init__(self, algo: ModuleType, env: Any, config: Any, num_seeds: int, updates_per_chunk: int):
        self.algo, self.env, self.config = algo, env, config
        self.num_seeds, self.updates_per_chunk = num_seeds, updates_per_chunk
        update = make_update(algo)

        def run_chunk(state):
            state, metrics = jax.lax.scan(update, state, None, length=updates_per_chunk)
            summary = {k: (jnp.sum(v) if k in ("episode_return_sum", "episodes") else jnp.mean(v))
                       for k, v in metrics.items() if k != "loss_finite"}
            summary["finite"] = jnp.logical_and(jnp.all(metrics["loss_finite"]), tree_all_finite(algo.agent_params(state)))
            return state, summary

        # No buffer donation: the previous state must survive an interrupted chunk so Ctrl-C can save it.
        self._chunk = jax.jit(over_seeds(run_chunk, num_seeds))
        self._init = jax.jit(init_over_seeds(lambda k: algo.init(k, env, config), num_seeds))
        self._compiled = None
        self.compile_seconds = 0.0

    def seed_keys(self, seed: int) -> jax.Array:
        return jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(seed), i))(jnp.arange(self.num_seeds))

    def init(self, seed: int):
        return self._init(self.seed_keys(seed))

    def compile(self, state) -> float:
        """Compile the chunk function ahead of time; returns the seconds spent."""
        start = time.perf_counter()
        self._compiled = self._chunk.lower(state).compile()
        self.compile_seconds = time.perf_counter() - start
        return self.compile_seconds

    def run_chunk(self, state):
        """Advance every seed by one chunk; returns the new state and per-seed metrics (on host)."""
        if self._compiled is None:
            self.compile(state)
        state, metrics = self._compiled(state)
        return state, jax.device_get(metrics)
