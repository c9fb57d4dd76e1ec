"""core/losses.py on hand-computed numbers: PPO's clipped surrogate (both clip sides, asymmetric clip),
the clipped value loss, the Huber loss and the explained variance; and PPO's two KL estimates (core/kl.py)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.core.kl import kl_k1, kl_k3
from longhorizon.core.losses import clipped_surrogate_loss, clipped_value_loss, explained_variance, huber


def _surrogate(ratios, advantages, eps=0.2, eps_high=None):
    log_prob = jnp.log(jnp.asarray(ratios))  # old log-probabilities 0: rho = exp(log_prob)
    loss, fraction = clipped_surrogate_loss(log_prob, jnp.zeros(len(ratios)), jnp.asarray(advantages), eps, eps_high)
    return float(loss), float(fraction)


def test_clipped_surrogate_by_hand():
    # rho, A -> min(rho A, clip(rho, 0.8, 1.2) A):
    #   1.5,  2 -> min(3.0, 2.4)  = 2.4   (positive advantage: gain capped above 1 + eps)
    #   0.5,  2 -> min(1.0, 1.6)  = 1.0   (below 1 - eps with A > 0: not clipped, pessimistic side)
    #   0.5, -1 -> min(-0.5, -0.8) = -0.8 (negative advantage: capped below 1 - eps)
    #   1.5, -1 -> min(-1.5, -1.2) = -1.5 (above 1 + eps with A < 0: not clipped)
    #   1.1,  3 -> 3.3                     (inside the interval)
    loss, fraction = _surrogate([1.5, 0.5, 0.5, 1.5, 1.1], [2.0, 2.0, -1.0, -1.0, 3.0])
    assert loss == pytest.approx(-(2.4 + 1.0 - 0.8 - 1.5 + 3.3) / 5, rel=1e-6)
    assert fraction == pytest.approx(4 / 5)  # |rho - 1| > 0.2 in the first four


def test_clipped_surrogate_with_a_higher_upper_clip():
    # eps_high = 0.5: rho = 1.4 with A = 1 is inside [0.8, 1.5] now (1.4, not 1.2); rho = 2 -> 1.5.
    loss, _ = _surrogate([1.4, 2.0], [1.0, 1.0], eps=0.2, eps_high=0.5)
    assert loss == pytest.approx(-(1.4 + 1.5) / 2, rel=1e-6)
    assert _surrogate([1.4, 2.0], [1.0, 1.0])[0] == pytest.approx(-1.2, rel=1e-6)  # symmetric: both at 1.2


def test_clipped_surrogate_gradient_vanishes_where_clipped():
    # d/dlogp of -rho A / n is -rho A / n inside the interval and 0 where the clipped term is the minimum.
    log_prob = jnp.log(jnp.array([1.5, 1.1]))
    grad = jax.grad(lambda lp: clipped_surrogate_loss(lp, jnp.zeros(2), jnp.array([2.0, 3.0]), 0.2)[0])(log_prob)
    assert float(grad[0]) == 0.0 and float(grad[1]) == pytest.approx(-1.1 * 3.0 / 2, rel=1e-6)


def test_clipped_value_loss_by_hand():
    value, old, target = jnp.array([1.0, 0.0, 2.0]), jnp.array([0.0, 0.5, 1.9]), jnp.array([0.0, 3.0, 2.0])
    # unclipped: 0.5 * mean(1, 9, 0) = 5/3
    assert float(clipped_value_loss(value, old, target)) == pytest.approx(5 / 3, rel=1e-6)
    # clipped, eps 0.2: V_clip = old + clip(V - old) = [0.2, 0.3, 2.0]
    #   max((V - G)^2, (V_clip - G)^2) = [max(1, .04), max(9, 7.29), max(0, 0)] = [1, 9, 0] -> 5/3 again;
    assert float(clipped_value_loss(value, old, target, 0.2)) == pytest.approx(5 / 3, rel=1e-6)
    # where clipping keeps the value further from the target the clipped error counts:
    # V = 0, old = 1, G = 0.1: V_clip = 0.8, max(0.01, 0.49) = 0.49 -> 0.245
    assert float(clipped_value_loss(jnp.array([0.0]), jnp.array([1.0]), jnp.array([0.1]), 0.2)) == pytest.approx(0.245)


def test_huber_by_hand():
    x = jnp.array([-3.0, -0.5, 0.0, 0.8, 2.0])
    # |x| <= 1: x^2 / 2; else |x| - 1/2
    assert [float(v) for v in huber(x)] == pytest.approx([2.5, 0.125, 0.0, 0.32, 1.5])
    # delta = 2: |x| <= 2 quadratic; 3 -> 2 * (3 - 1) = 4
    assert [float(v) for v in huber(x, 2.0)] == pytest.approx([4.0, 0.125, 0.0, 0.32, 2.0])
    assert math.isclose(float(jax.grad(lambda v: huber(v))(5.0)), 1.0)  # gradient capped at delta


def test_explained_variance_by_hand():
    returns = jnp.array([1.0, 2.0, 3.0, 6.0])  # mean 3, Var = (4 + 1 + 0 + 9) / 4 = 3.5
    # residuals G - V = [0, 1, -1, 0]: mean 0, Var = 2 / 4 = 0.5 -> 1 - 0.5 / 3.5 = 6/7
    assert float(explained_variance(jnp.array([1.0, 1.0, 4.0, 6.0]), returns)) == pytest.approx(6 / 7, rel=1e-6)
    assert float(explained_variance(returns, returns)) == pytest.approx(1.0)  # exact predictions
    assert float(explained_variance(jnp.full(4, 3.0), returns)) == pytest.approx(0.0, abs=1e-7)  # the mean only
    # residuals [1, 2, 3, 6] - [3, 2, 1, 0] = [-2, 0, 2, 6]: mean 1.5, Var = (12.25 + 2.25 + 0.25 + 20.25) / 4 = 8.75
    assert float(explained_variance(jnp.array([3.0, 2.0, 1.0, 0.0]), returns)) == pytest.approx(1 - 8.75 / 3.5)
    assert float(explained_variance(jnp.array([0.0, 1.0]), jnp.array([2.0, 2.0]))) == 0.0  # returns without variance


def test_ppo_kl_estimates_by_hand():
    # pi_old = [1/2, 1/4, 1/2], pi = [1/4, 1/2, 1/2]: rho = [1/2, 2, 1], log rho = [-ln 2, ln 2, 0].
    old, new = jnp.log(jnp.array([0.5, 0.25, 0.5])), jnp.log(jnp.array([0.25, 0.5, 0.5]))
    ln2 = math.log(2)
    # old_approx_kl = mean(-log rho) = 0; approx_kl = mean((rho - 1) - log rho) = ((-1/2 + ln 2) + (1 - ln 2) + 0) / 3
    assert float(jnp.mean(kl_k1(old, new))) == pytest.approx(0.0, abs=1e-7)
    assert float(jnp.mean(kl_k3(old, new))) == pytest.approx(0.5 / 3, rel=1e-6)
    np.testing.assert_allclose(kl_k1(old, new), [ln2, -ln2, 0.0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(kl_k3(old, new), [ln2 - 0.5, 1 - ln2, 0.0], rtol=1e-6, atol=1e-7)
