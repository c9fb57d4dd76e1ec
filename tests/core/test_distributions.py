"""core/distributions.py: log-probabilities and entropies by hand and against jax.scipy, sampling
statistics, greedy modes and epsilon-greedy exploration rates."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import entr
from jax.scipy.stats import norm

from longhorizon.core import distributions as dist


def test_categorical_log_prob_and_entropy_by_hand():
    logits = jnp.array([[0.0, math.log(3.0)], [5.0, 5.0]])  # probabilities [1/4, 3/4] and [1/2, 1/2]
    np.testing.assert_allclose(dist.categorical_log_prob(logits, jnp.array([0, 1])), [math.log(0.25), math.log(0.5)],
                               rtol=1e-6)
    expected = [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2.0)]
    np.testing.assert_allclose(dist.categorical_entropy(logits), expected, rtol=1e-6)
    random = jax.random.normal(jax.random.PRNGKey(0), (4, 6))
    np.testing.assert_allclose(dist.categorical_entropy(random), entr(jax.nn.softmax(random)).sum(-1), rtol=1e-5)


def test_diag_gaussian_log_prob_and_entropy_against_scipy_stats():
    key_m, key_s, key_a = jax.random.split(jax.random.PRNGKey(1), 3)
    mean, log_std = jax.random.normal(key_m, (5, 3)), 0.5 * jax.random.normal(key_s, (5, 3))
    action = mean + 2.0 * jax.random.normal(key_a, (5, 3))
    np.testing.assert_allclose(dist.diag_gaussian_log_prob(mean, log_std, action),
                               norm.logpdf(action, mean, jnp.exp(log_std)).sum(-1), rtol=1e-5)
    # Entropy of N(0, sigma^2) per dimension: log sigma + (1 + log 2 pi) / 2; sigma = e: 1 + 1.41894
    np.testing.assert_allclose(dist.diag_gaussian_entropy(jnp.array([[1.0, 0.0]])),
                               [1.0 + 0.5 * (1 + math.log(2 * math.pi)) + 0.5 * (1 + math.log(2 * math.pi))], rtol=1e-6)


def test_samples_follow_the_distribution_and_greedy_takes_the_mode():
    key = jax.random.PRNGKey(2)
    logits = jnp.broadcast_to(jnp.log(jnp.array([0.1, 0.6, 0.3])), (20_000, 3))
    counts = np.bincount(np.asarray(dist.categorical_sample(key, logits)), minlength=3) / 20_000
    np.testing.assert_allclose(counts, [0.1, 0.6, 0.3], atol=0.015)
    assert np.all(np.asarray(dist.categorical_sample(key, logits, greedy=True)) == 1)
    mean, log_std = jnp.full((20_000, 1), 3.0), jnp.full((20_000, 1), math.log(0.5))
    draws = np.asarray(dist.diag_gaussian_sample(key, mean, log_std))
    assert abs(draws.mean() - 3.0) < 0.02 and abs(draws.std() - 0.5) < 0.02
    np.testing.assert_array_equal(dist.diag_gaussian_sample(key, mean, log_std, greedy=True), mean)


@pytest.mark.parametrize("epsilon, greedy_share", [(0.0, 1.0), (1.0, 0.25), (0.4, 0.6 + 0.4 * 0.25)])
def test_epsilon_greedy_explores_at_the_given_rate(epsilon, greedy_share):
    q = jnp.broadcast_to(jnp.array([0.0, 2.0, 1.0, -1.0]), (20_000, 4))  # greedy action 1, four actions
    actions = np.asarray(dist.epsilon_greedy(jax.random.PRNGKey(3), q, epsilon))
    assert abs(np.mean(actions == 1) - greedy_share) < 0.015
    if epsilon == 1.0:  # uniform over all four
        np.testing.assert_allclose(np.bincount(actions, minlength=4) / 20_000, 0.25, atol=0.015)


@pytest.mark.slow
def test_inverse_cdf_sampler_follows_the_distribution_across_blocks_and_never_draws_zero_mass():
    """Three blocks of 4 (the last one partial), zeros in the middle of a block and a whole empty block."""
    probs = np.array([0.1, 0.0, 0.2, 0.05, 0.0, 0.0, 0.0, 0.0, 0.3, 0.0, 0.35])
    logits = jnp.broadcast_to(jnp.log(jnp.asarray(probs, jnp.float32)), (40_000, probs.size))
    draws = np.asarray(dist.categorical_sample_inverse_cdf(jax.random.PRNGKey(3), logits, block=4))
    counts = np.bincount(draws, minlength=probs.size) / draws.size
    np.testing.assert_allclose(counts, probs, atol=0.01)
    assert counts[probs == 0].sum() == 0
    # a batch shape [2, 3] comes back as [2, 3]; a one-token support is always drawn
    one = jnp.full((2, 3, 9), -jnp.inf).at[..., 7].set(0.0)
    np.testing.assert_array_equal(dist.categorical_sample_inverse_cdf(jax.random.PRNGKey(0), one, block=4), 7)


def test_inverse_cdf_sampler_falls_back_to_the_last_positive_token_when_rounding_overshoots():
    """u * total rounded up to the total must not land on the zero-mass padding after the last token."""
    logits = jnp.log(jnp.array([[0.5, 0.5, 0.0]]))
    key = jax.random.PRNGKey(0)
    import unittest.mock as mock

    with mock.patch.object(jax.random, "uniform", lambda k, shape: jnp.ones(shape)):  # u = 1: past every sum
        assert int(dist.categorical_sample_inverse_cdf(key, logits, block=2)[0]) == 1
