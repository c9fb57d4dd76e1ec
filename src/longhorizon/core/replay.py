"""A replay buffer in device memory: a time-major ring buffer, pure functions, jit- and vmap-friendly.

Storage keeps every leaf of a transition pytree as ``[rows, num_envs, ...]``: one row per step of
``num_envs`` vectorised environments, written in time order. Keeping rows in time order means a
sample can read ``length`` consecutive steps of one environment (for n-step returns) without any
index bookkeeping beyond the write head.

* ``create(example, rows)``: empty buffer; ``example`` is one row (leaves ``[num_envs, ...]``).
* ``add(buffer, items)``: append ``T`` rows (leaves ``[T, num_envs, ...]``), overwriting the oldest.
* ``sample(buffer, key, batch_size, length)``: ``batch_size`` windows of ``length`` consecutive
  rows of one environment each (leaves ``[batch_size, length, ...]``), uniformly over the windows
  that lie entirely inside the stored data (a window never runs past the newest row into stale ones).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ReplayBuffer:
    data: Any  # pytree, leaves [rows, num_envs, ...]
    head: jax.Array  # the row the next add writes first
    size: jax.Array  # rows holding data (at most ``rows``)

    @property
    def rows(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]

    @property
    def num_envs(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[1]


def create(example: Any, rows: int) -> ReplayBuffer:
    """An empty buffer of ``rows`` rows shaped like ``example`` (leaves ``[num_envs, ...]``)."""
    data = jax.tree.map(lambda x: jnp.zeros((rows,) + jnp.shape(x), jnp.asarray(x).dtype), example)
    return ReplayBuffer(data, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def add(buffer: ReplayBuffer, items: Any) -> ReplayBuffer:
    """Write ``T`` rows (leaves ``[T, num_envs, ...]``, ``T <= rows``) after the newest, wrapping around."""
    rows = buffer.rows
    steps = jax.tree.leaves(items)[0].shape[0]
    if steps > rows:
        raise ValueError(f"cannot add {steps} rows to a replay buffer of {rows} rows")
    index = (buffer.head + jnp.arange(steps)) % rows
    data = jax.tree.map(lambda store, new: store.at[index].set(new.astype(store.dtype)), buffer.data, items)
    return ReplayBuffer(data, (buffer.head + steps) % rows, jnp.minimum(buffer.size + steps, rows))


def sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int, length: int = 1) -> Any:
    """``batch_size`` windows of ``length`` consecutive rows, each from one environment copy.

    Window starts are uniform over the ``size - length + 1`` valid starts (counted from the oldest
    row) and environments uniform over the copies. With fewer than ``length`` rows stored the
    result is meaningless (callers mask it, e.g. until ``learning_starts``)."""
    rows = buffer.rows
    row_key, env_key = jax.random.split(key)
    starts = jax.random.randint(row_key, (batch_size,), 0, jnp.maximum(buffer.size - length + 1, 1))
    oldest = (buffer.head - buffer.size) % rows
    row_index = (oldest + starts[:, None] + jnp.arange(length)[None, :]) % rows  # [B, length]
    env_index = jax.random.randint(env_key, (batch_size, 1), 0, buffer.num_envs)  # [B, 1]
    return jax.tree.map(lambda store: store[row_index, env_index], buffer.data)
