"""Return estimators against values computed by hand (gamma = 0.9, lambda = 0.5).

The 4-step rollout: rewards 1, 2, 3, 4; the episode *terminates* at t=1, a new one starts at t=2
and is *truncated* there (time limit), and a third runs past the rollout end at t=3.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.core.returns import gae, lambda_returns, n_step_returns, vtrace

R = jnp.array([1.0, 2.0, 3.0, 4.0])
TERM = jnp.array([0, 1, 0, 0], bool)
TRUNC = jnp.array([0, 0, 1, 0], bool)
DONE = TERM | TRUNC
V = jnp.array([5.0, 6.0, 7.0, 8.0])
# V(s'_t): s'_0 = s_1 (value 6); s'_1 terminal (its value must be ignored: 20); s'_2 the truncated
# final observation (30); s'_3 the state after the rollout (40).
V_NEXT = jnp.array([6.0, 20.0, 30.0, 40.0])


def test_lambda_returns_by_hand():
    # G3 = 4 + .9*40 = 40 (rollout end bootstraps); G2 = 3 + .9*30 = 30 (truncated: bootstraps);
    # G1 = 2 (terminated: no bootstrap); G0 = 1 + .9*(.5*6 + .5*G1) = 4.6
    np.testing.assert_allclose(lambda_returns(R, V_NEXT, TERM, DONE, 0.9, 0.5), [4.6, 2.0, 30.0, 40.0], rtol=1e-6)


def test_q_lambda_is_one_step_at_lambda_zero_and_monte_carlo_at_one():
    np.testing.assert_allclose(lambda_returns(R, V_NEXT, TERM, DONE, 0.9, 0.0), R + 0.9 * (1 - TERM) * V_NEXT, rtol=1e-6)
    # lambda = 1: G0 = 1 + .9 * G1 = 2.8 (Monte-Carlo to the termination)
    np.testing.assert_allclose(lambda_returns(R, V_NEXT, TERM, DONE, 0.9, 1.0), [2.8, 2.0, 30.0, 40.0], rtol=1e-6)


def test_gae_by_hand():
    # deltas: d0 = 1 + .9*6 - 5 = 1.4, d1 = 2 - 6 = -4, d2 = 3 + 27 - 7 = 23, d3 = 4 + 36 - 8 = 32
    # A3 = 32, A2 = 23 (episode ended), A1 = -4 (ended), A0 = 1.4 + .45*(-4) = -0.4
    adv, targets = gae(R, V, V_NEXT, TERM, DONE, 0.9, 0.5)
    np.testing.assert_allclose(adv, [-0.4, -4.0, 23.0, 32.0], rtol=1e-6)
    np.testing.assert_allclose(targets, [4.6, 2.0, 30.0, 40.0], rtol=1e-6)
    # GAE targets equal the lambda-returns with V(s') as bootstrap
    np.testing.assert_allclose(targets, lambda_returns(R, V_NEXT, TERM, DONE, 0.9, 0.5), rtol=1e-6)


def test_gae_batched_over_envs():
    adv, _ = gae(jnp.stack([R, R], 1), jnp.stack([V, V], 1), jnp.stack([V_NEXT, V_NEXT], 1),
                 jnp.stack([TERM, TERM], 1), jnp.stack([DONE, DONE], 1), 0.9, 0.5)
    np.testing.assert_allclose(adv[:, 1], [-0.4, -4.0, 23.0, 32.0], rtol=1e-6)


@pytest.mark.parametrize("n, expected", [
    (1, [1 + 0.9 * 6, 2.0, 30.0, 40.0]),
    # n=2: G0 = 1 + .9*2 (stops at the termination); G2 truncated, G3 rollout end
    (2, [2.8, 2.0, 30.0, 40.0]),
    (3, [2.8, 2.0, 30.0, 40.0]),
])
def test_n_step_by_hand(n, expected):
    np.testing.assert_allclose(n_step_returns(R, V_NEXT, TERM, DONE, 0.9, n), expected, rtol=1e-6)


def test_n_step_without_episode_end():
    zeros = jnp.zeros(4, bool)
    # G0^(2) = 1 + .9*2 + .81*V(s'_1)=20 -> 19; G2^(2) = 3 + .9*4 + .81*40 = 39; G3 = 4 + 36 = 40
    np.testing.assert_allclose(n_step_returns(R, V_NEXT, zeros, zeros, 0.9, 2)[jnp.array([0, 2, 3])], [19.0, 39.0, 40.0], rtol=1e-6)


def test_vtrace_on_policy_equals_lambda_one_returns():
    vs, _ = vtrace(R, V, V_NEXT, TERM, DONE, jnp.zeros(4), 0.9)
    np.testing.assert_allclose(vs, lambda_returns(R, V_NEXT, TERM, DONE, 0.9, 1.0), rtol=1e-6)


def test_vtrace_clipping_by_hand():
    rewards, values, next_values = jnp.array([1.0, 1.0]), jnp.array([1.0, 2.0]), jnp.array([2.0, 3.0])
    zeros = jnp.zeros(2, bool)
    log_rhos = jnp.log(jnp.array([2.0, 0.5]))  # rho = min(1, ratio) = [1, .5]; c = [1, .5]
    vs, pg = vtrace(rewards, values, next_values, zeros, zeros, log_rhos, 0.9)
    # d1 = .5*(1 + 2.7 - 2) = .85 -> vs1 = 2.85; d0 = 1 + 1.8 - 1 = 1.8 -> vs0 = 1 + 1.8 + .9*.85 = 3.565
    np.testing.assert_allclose(vs, [3.565, 2.85], rtol=1e-6)
    # pg0 = 1*(1 + .9*vs1 - 1) = 2.565; pg1 = .5*(1 + .9*3 - 2) = .85
    np.testing.assert_allclose(pg, [2.565, 0.85], rtol=1e-6)


def test_vtrace_cuts_trace_at_truncation():
    vs, pg = vtrace(R, V, V_NEXT, TERM, DONE, jnp.zeros(4), 0.9)
    assert float(vs[2]) == pytest.approx(30.0)  # truncated step bootstraps from its final observation
    assert float(pg[1]) == pytest.approx(2.0 - 6.0)  # terminated step: r - V(s)
