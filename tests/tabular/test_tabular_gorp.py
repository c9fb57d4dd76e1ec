"""GORP on tabular MDPs: it finds the optimum, counts its steps, and its sample complexity is measured."""

import math

import numpy as np
import pytest

from longhorizon.tabular.gorp import gorp_sample_complexity, run_gorp
from longhorizon.tabular.mdp import TabularMDP, sticky


@pytest.fixture
def corridor() -> TabularMDP:
    """Three steps right (a0) pay 1 at the end; a1 falls into a zero-reward sink."""
    trans = np.array([[1, 3], [2, 3], [-1, 3], [3, 3]])
    rew = np.zeros((4, 2))
    rew[2, 0] = 1.0
    return TabularMDP.deterministic(trans, rew, horizon=3)


def test_gorp_finds_the_optimum_and_counts_steps(corridor):
    runs = run_gorp(corridor, k=1, m=30, runs=4, seed=0)
    assert runs.actions.shape == (4, 3)
    assert runs.optimal.all() and np.all(runs.actions == 0)
    np.testing.assert_allclose(runs.final_returns, 1.0)
    # Each of 3 iterations runs 2 actions x 30 episodes of 3 steps: 540 steps per run.
    np.testing.assert_array_equal(runs.env_steps, 540)
    assert runs.median_sample_complexity == 540


def test_gorp_with_lookahead_and_stochastic_transitions(corridor, stochastic_mdp):
    # k = 2: 4 action pairs x 5 episodes x 3 steps per iteration, 3 iterations: 180 steps.
    runs = run_gorp(corridor, k=2, m=5, runs=2, seed=1)
    assert runs.optimal.all() and np.all(runs.actions == 0)
    np.testing.assert_array_equal(runs.env_steps, 180)
    # Sticky actions: repeating a0 is harmless, so always-a0 still earns 1; 3 x 2 x 40 x 3 = 720 steps.
    noisy = run_gorp(sticky(corridor, 0.25), 3, k=1, m=40, runs=3, seed=2)
    assert noisy.optimal.all() and np.all(noisy.actions == 0)
    np.testing.assert_allclose(noisy.final_returns, 1.0)
    np.testing.assert_array_equal(noisy.env_steps, 720)
    # Random episode lengths: in stochastic_mdp a0 at s0 ends at once with p 1/2 (1 step) or moves to s1
    # (2 steps); a1 loops to s0 (2 steps). Iteration 0: m episodes per action, 1.5 m + 2 m steps;
    # iteration 1 acts a0 first in all 2m episodes: 3 m. Expected 6.5 m, std sqrt(4m / 4) = sqrt(m).
    m = 2000
    sampled = run_gorp(stochastic_mdp, k=1, m=m, runs=1, seed=3)
    assert abs(int(sampled.env_steps[0]) - 6.5 * m) < 5 * math.sqrt(m)
    # Q_hat(a0) = 1/2 + 1/2 * 3/2 = 1.25 > Q_hat(a1) = 1/2 + 1/4 + 1/4 = 1: a0, then a0 (3 in s1): return 2.
    np.testing.assert_array_equal(sampled.actions, [[0, 0]])
    np.testing.assert_allclose(sampled.final_returns, 2.0)


def test_one_rollout_per_action_succeeds_at_the_rate_of_its_random_tie_breaks(corridor):
    # m = 1, k = 1: at step 0 a0's random continuation pays with p 1/4, else Q_hat ties at 0 and the coin
    # picks a0 half the time: 1/4 + 3/4 * 1/2 = 5/8. Step 1: 1/2 + 1/2 * 1/2 = 3/4. Step 2 is exact.
    rate = run_gorp(corridor, k=1, m=1, runs=4000, seed=5).success_rate
    assert abs(rate - 5 / 8 * 3 / 4) < 0.04  # std 0.008


def test_gorp_sample_complexity_search(corridor):
    result = gorp_sample_complexity(corridor, k=1, runs=5, max_steps=20_000, seed=0)
    assert result.m is not None and result.m >= 1
    # Every episode lasts 3 steps: 3 iterations x 2 actions x m episodes x 3 steps = 18 m.
    assert result.median_sample_complexity == 18 * result.m
    assert result.empirical_horizon == pytest.approx(math.log2(18 * result.m / 9))
    # m is the smallest value tried whose median run succeeded (one per action succeeds with p 15/32 < 1/2,
    # see above, so m = 1 usually fails).
    assert math.isfinite(result.tried[result.m]) and 1 in result.tried
    assert all(not math.isfinite(n) for m, n in result.tried.items() if m < result.m)
