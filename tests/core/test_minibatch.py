"""The shared minibatch loop: every row once per epoch, minibatch shapes, per-epoch recomputed rows."""

import jax
import jax.numpy as jnp
import numpy as np

from longhorizon.core.minibatch import flatten_time, minibatch_epochs, shuffled_minibatches


def test_flatten_time_puts_time_steps_of_all_environments_in_one_axis():
    x = jnp.arange(12).reshape(3, 2, 2)  # [T=3, N=2, 2]
    flat = flatten_time(x)
    assert flat.shape == (6, 2)
    np.testing.assert_array_equal(flat[3], [6, 7])  # t = 1, env 1


def test_each_epoch_visits_every_row_once_in_a_fresh_order():
    data = {"x": jnp.arange(8.0), "pair": jnp.stack([jnp.arange(8.0), -jnp.arange(8.0)], axis=1)}

    def step(carry, mb):
        assert mb["x"].shape == (4,) and mb["pair"].shape == (4, 2)  # 8 rows / 2 minibatches
        return carry + 1, mb

    steps, seen = minibatch_epochs(step, jnp.zeros((), jnp.int32), data, jax.random.PRNGKey(0), 3, 2)
    assert int(steps) == 6 and seen["x"].shape == (3, 2, 4)
    orders = np.asarray(seen["x"]).reshape(3, 8)
    for order in orders:
        np.testing.assert_array_equal(np.sort(order), np.arange(8))
    assert len({tuple(order) for order in orders}) == 3  # each epoch reshuffles
    np.testing.assert_array_equal(seen["pair"][..., 0], seen["x"])  # rows stay whole across fields
    np.testing.assert_array_equal(seen["pair"][..., 1], -seen["x"])


def test_epoch_data_is_recomputed_from_the_carry_at_each_epoch_start():
    # Carry = minibatch steps done so far; each epoch's rows are x + 100 * steps at the epoch's start.
    # Epoch 0: rows 0..7 (sum 28); epoch 1 starts after 2 steps: rows 200..207 (sum 1628).
    def step(carry, mb):
        steps, total = carry
        return (steps + 1, total + jnp.sum(mb)), None

    def epoch_data(carry, rows):
        return rows + 100.0 * carry[0]

    (steps, total), _ = minibatch_epochs(step, (jnp.zeros(()), jnp.zeros(())), jnp.arange(8.0),
                                         jax.random.PRNGKey(1), 2, 2, epoch_data)
    assert float(steps) == 4 and float(total) == 28 + 1628


def test_shuffled_minibatches_split_consecutive_shuffled_rows():
    key = jax.random.PRNGKey(2)
    mbs = shuffled_minibatches(key, jnp.arange(6), 3)
    assert mbs.shape == (3, 2)
    np.testing.assert_array_equal(mbs.reshape(-1), jax.random.permutation(key, 6))
