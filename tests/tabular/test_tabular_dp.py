"""Exact DP against hand-computed values and brute force over action sequences."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.tabular import dp
from longhorizon.tabular.mdp import TabularMDP


def test_deterministic_values_by_hand(three_state_mdp):
    v = dp.evaluate(three_state_mdp)
    # Last step: Q = R.
    np.testing.assert_allclose(v.q_random[1], [[0, 1], [2, 0], [0, 0]])
    # First step, state 0: a0 -> s1 then (2 + 0) / 2 = 1 on average, a1 pays 1 then s2 pays 0.
    np.testing.assert_allclose(v.q_random[0, 0], [1.0, 1.0])
    np.testing.assert_allclose(v.q_optimal[0, 0], [2.0, 1.0])
    np.testing.assert_allclose(v.q_worst[0, 0], [0.0, 1.0])
    # State 1 at t=0: a0 ends with 2 (terminal value 0), a1 stays: 0 + V_1(s1).
    np.testing.assert_allclose(v.q_random[0, 1], [2.0, 1.0])
    np.testing.assert_allclose(v.q_optimal[0, 1], [2.0, 2.0])
    assert (v.random_return, v.optimal_return, v.worst_return) == (1.0, 2.0, 0.0)


def test_stochastic_values_by_hand(stochastic_mdp):
    v = dp.evaluate(stochastic_mdp)
    np.testing.assert_allclose(v.q_random[1], [[0.5, 0.5], [3.0, 0.0]])
    # a0: 0.5 * (0 + V_rand(s1) = 1.5) + 0.5 * (1 + 0) = 1.25; a1: 0.5 + V_rand(s0) = 0.5 + 0.5.
    np.testing.assert_allclose(v.q_random[0, 0], [1.25, 1.0])
    np.testing.assert_allclose(v.q_optimal[0, 0], [2.0, 1.0])
    np.testing.assert_allclose(v.q_worst[0, 0], [0.5, 1.0])
    assert v.random_return == pytest.approx(1.125)
    assert v.optimal_return == pytest.approx(2.0)
    assert v.worst_return == pytest.approx(0.5)


def test_terminal_means_zero_future(three_state_mdp):
    # A long horizon changes nothing once every path has ended (s2 always ends, s1 can loop).
    v = dp.evaluate(three_state_mdp, horizon=6)
    np.testing.assert_allclose(v.q_optimal[0, 2], [0.0, 0.0])
    assert v.optimal_return == 2.0
    # Looping in s1 for the random policy: V_t(s1) = 1 + V_{t+1}(s1) / 2 with V_5(s1) = 1.
    np.testing.assert_allclose(v.v_random[[5, 4, 3], 1], [1.0, 1.5, 1.75])


def test_value_iteration_from_random(three_state_mdp):
    q1 = dp.value_iteration_from_random(three_state_mdp, 2, 1)
    np.testing.assert_allclose(q1, dp.random_q(three_state_mdp))
    q2 = dp.value_iteration_from_random(three_state_mdp, 2, 2)
    np.testing.assert_allclose(q2[0, 0], [2.0, 1.0])  # R + max Q^1_{t+1}
    np.testing.assert_allclose(q2[1], q1[1])  # the last step stays R
    np.testing.assert_allclose(q2, dp.optimal_q(three_state_mdp))  # Q^T = Q*


def test_policy_and_open_loop_values(stochastic_mdp, three_state_mdp):
    uniform = np.full((2, 2), 0.5)
    _, v = dp.policy_q(stochastic_mdp, 2, uniform)
    assert v[0, 0] == pytest.approx(1.125)
    assert dp.open_loop_return(three_state_mdp, [0, 0]) == 2.0
    assert dp.open_loop_return(three_state_mdp, [1, 0]) == 1.0
    assert dp.open_loop_return(stochastic_mdp, [0, 0]) == pytest.approx(0.5 * 1 + 0.5 * 3)


def test_jax_backend_matches_numpy(three_state_mdp, stochastic_mdp):
    for mdp in (three_state_mdp, stochastic_mdp):
        v = dp.evaluate(mdp)
        q_r, q_o, q_w = dp.evaluate_jax(mdp)
        np.testing.assert_allclose(np.asarray(q_r), v.q_random, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(q_o), v.q_optimal, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(q_w), v.q_worst, rtol=1e-5)


@st.composite
def deterministic_mdps(draw):
    S = draw(st.integers(1, 5))
    A = draw(st.integers(1, 3))
    T = draw(st.integers(1, 4))
    trans = draw(st.lists(st.integers(-1, S - 1), min_size=S * A, max_size=S * A))
    rew = draw(st.lists(st.integers(-3, 3), min_size=S * A, max_size=S * A))
    return TabularMDP.deterministic(np.array(trans).reshape(S, A), np.array(rew, float).reshape(S, A) / 2, horizon=T)


def _sequence_returns(mdp, T):
    returns = []
    for seq in itertools.product(range(mdp.num_actions), repeat=T):
        s, total = 0, 0.0
        for a in seq:
            total += mdp.rewards[s, a]
            s = mdp.transitions[s, a]
            if s < 0:
                break
        returns.append(total)
    return np.array(returns)


@settings(max_examples=60, deadline=None)
@given(deterministic_mdps())
def test_dp_matches_brute_force(mdp):
    T = mdp.horizon
    v = dp.evaluate(mdp)
    returns = _sequence_returns(mdp, T)
    assert v.optimal_return == pytest.approx(returns.max())
    assert v.worst_return == pytest.approx(returns.min())
    assert v.random_return == pytest.approx(returns.mean())  # uniform over sequences = random policy


@settings(max_examples=60, deadline=None)
@given(deterministic_mdps())
def test_value_ordering_and_convergence(mdp):
    T = mdp.horizon
    v = dp.evaluate(mdp)
    assert np.all(v.q_worst <= v.q_random + 1e-12)
    assert np.all(v.q_random <= v.q_optimal + 1e-12)
    np.testing.assert_allclose(v.v_optimal, v.q_optimal.max(axis=2))
    # k = T steps of value iteration from the random Q give Q*.
    np.testing.assert_allclose(dp.value_iteration_from_random(mdp, T, T), v.q_optimal, atol=1e-12)
