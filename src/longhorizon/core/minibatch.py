r"""The minibatch loop shared by the on-policy learners (PPO, PQN, SQIRL).

Given a flat batch of :math:`B` rows (a pytree whose leaves share the leading axis :math:`B`), each
of ``num_epochs`` epochs draws a fresh permutation :math:`\sigma_e` of the rows, splits the shuffled
rows into ``num_minibatches`` consecutive minibatches of :math:`B / M` rows and folds a step function
over them:

.. math:: c \leftarrow \mathrm{step}\big(c,\ x_{\sigma_e(m B/M)}, \dots, x_{\sigma_e((m+1) B/M - 1)}\big),
          \qquad e = 1..E,\ m = 1..M.

Every row is visited exactly once per epoch. The whole loop is two nested ``lax.scan``\ s, so it
compiles once whatever the number of steps.

The permutation (:func:`permutation`) is drawn like ``jax.random.permutation``, by rounds of sorting
the rows by random keys, but each key is one ``uint32`` holding random high bits above the row's
position in its low :math:`k = \lceil \log_2 B \rceil` bits. Sorting one array of such keys is about
five times faster on a CPU than sorting keys with the rows as a second operand (``docs/benchmarks.md``,
issue 16), ties in the random bits
are broken by position (a stable sort), and the positions read back from the low bits are always an
exact permutation. With :math:`32 - k` random bits a given pair of rows ties in one round with
probability :math:`2^{k-32}`; :math:`r = \lceil 3k / (32 - k) \rceil` rounds keep it tied in every round
with probability at most :math:`B^{-3}`, the bound ``jax.random.permutation`` sets for itself.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp


def flatten_time(x: jax.Array) -> jax.Array:
    """``[T, N, ...] -> [T*N, ...]``: a time-major rollout as one flat batch of rows."""
    return x.reshape((-1,) + x.shape[2:])


def permutation(key: jax.Array, size: int) -> jax.Array:
    """A uniformly random permutation of ``range(size)`` (int32), by sorting packed keys (module docstring)."""
    index_bits = max(1, (size - 1).bit_length())
    random_bits = 32 - index_bits
    if random_bits < 8:  # over 2^24 rows: too few random bits per key, use JAX's own
        return jax.random.permutation(key, size)
    positions = jnp.arange(size, dtype=jnp.uint32)
    order = positions
    for round_key in jax.random.split(key, math.ceil(3 * index_bits / random_bits)):
        high = jax.random.bits(round_key, (size,), jnp.uint32) >> index_bits << index_bits
        order = order[jnp.sort(high | positions) & ((1 << index_bits) - 1)]
    return order.astype(jnp.int32)


def shuffled_minibatches(key: jax.Array, data: Any, num_minibatches: int) -> Any:
    """``data``'s rows in a random order, reshaped to ``[num_minibatches, B / num_minibatches, ...]``."""
    size = jax.tree.leaves(data)[0].shape[0]
    perm = permutation(key, size)
    return jax.tree.map(lambda x: x[perm].reshape((num_minibatches, size // num_minibatches) + x.shape[1:]), data)


def minibatch_epochs(step: Callable[[Any, Any], tuple[Any, Any]], carry: Any, data: Any, key: jax.Array,
                     num_epochs: int, num_minibatches: int,
                     epoch_data: Callable[[Any, Any], Any] | None = None) -> tuple[Any, Any]:
    """Fold ``step(carry, minibatch) -> (carry, out)`` over ``num_epochs`` shuffled passes of ``data``.

    ``epoch_data(carry, data) -> data``, if given, recomputes the rows at the start of each epoch from
    the carry as it then stands (SQIRL's fitted-Q targets come from the network at the epoch's start).
    Returns the final carry and the outputs stacked ``[num_epochs, num_minibatches, ...]``. The row
    count must be divisible by ``num_minibatches`` (the configs check this with a usage error).
    """

    def epoch(carry, epoch_key):
        rows = data if epoch_data is None else epoch_data(carry, data)
        return jax.lax.scan(step, carry, shuffled_minibatches(epoch_key, rows, num_minibatches))

    return jax.lax.scan(epoch, carry, jax.random.split(key, num_epochs))
