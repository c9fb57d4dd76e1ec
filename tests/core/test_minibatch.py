"""The shared minibatch loop: every row once per epoch, minibatch shapes, per-epoch recomputed rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.core.minibatch import flatten_time, minibatch_epochs, permutation, shuffled_minibatches


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
    np.testing.assert_array_equal(mbs.reshape(-1), permutation(key, 6))


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1000, 4096, 70_000])
def test_permutation_is_a_permutation_of_every_row(size):
    for seed in range(3):
        perm = np.asarray(permutation(jax.random.PRNGKey(seed), size))
        assert perm.dtype == np.int32
        np.testing.assert_array_equal(np.sort(perm), np.arange(size))


def test_permutation_of_three_rows_is_uniform_over_all_six_orders():
    keys = jax.random.split(jax.random.PRNGKey(0), 6000)
    perms = np.asarray(jax.vmap(lambda k: permutation(k, 3))(keys))
    _, counts = np.unique(perms, axis=0, return_counts=True)
    assert len(counts) == 6
    chi2 = ((counts - 1000.0) ** 2 / 1000.0).sum()
    assert chi2 < 20.5  # the 0.999 quantile of chi-square with 5 degrees of freedom


@pytest.mark.slow
def test_permutation_of_many_rows_is_unbiased_where_random_bits_tie():
    # 4096 rows leave 20 random bits per key: about 8 tied pairs per round. Ties keep the earlier row
    # first, so a biased shuffle would put row 0 before row 1 (and row 0 early) more often than chance.
    keys = jax.random.split(jax.random.PRNGKey(1), 2000)
    perms = np.asarray(jax.vmap(lambda k: permutation(k, 4096))(keys))
    where = np.argsort(perms, axis=1)  # where[i, r]: the position row r landed at
    before = (where[:, 0] < where[:, 1]).mean()
    assert abs(before - 0.5) < 3.5 * 0.5 / np.sqrt(2000)
    assert abs(where[:, 0].mean() - 4095 / 2) < 3.5 * 4096 / np.sqrt(12 * 2000)
