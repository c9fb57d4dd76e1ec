r"""The minibatch loop shared by the on-policy learners (PPO, PQN, SQIRL).

Given a flat batch of :math:`B` rows (a pytree whose leaves share the leading axis :math:`B`), each
of ``num_epochs`` epochs draws a fresh permutation :math:`\sigma_e` of the rows, splits the shuffled
rows into ``num_minibatches`` consecutive minibatches of :math:`B / M` rows and folds a step function
over them:

.. math:: c \leftarrow \mathrm{step}\big(c,\ x_{\sigma_e(m B/M)}, \dots, x_{\sigma_e((m+1) B/M - 1)}\big),
          \qquad e = 1..E,\ m = 1..M.

Every row is visited exactly once per epoch. The whole loop is two nested ``lax.scan``\ s, so it
compiles once whatever the number of steps.
"""

from __future__ import annotations

from typing import Any, Callable

import jax


def flatten_time(x: jax.Array) -> jax.Array:
    """``[T, N, ...] -> [T*N, ...]``: a time-major rollout as one flat batch of rows."""
    return x.reshape((-1,) + x.shape[2:])


def shuffled_minibatches(key: jax.Array, data: Any, num_minibatches: int) -> Any:
    """``data``'s rows in a random order, reshaped to ``[num_minibatches, B / num_minibatches, ...]``."""
    size = jax.tree.leaves(data)[0].shape[0]
    perm = jax.random.permutation(key, size)
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
