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


def test_gorp_with_lookahead_and_stochastic_transitions(corridor):
    runs = run_gorp(corridor, k=2, m=5, runs=2, seed=1)
    assert runs.optimal.all()
    noisy = run_gorp(sticky(corridor, 0.25), 3, k=1, m=40, runs=3, seed=2)
    assert noisy.final_returns.shape == (3,) and np.all(noisy.final_returns <= 1.0 + 1e-12)


def test_gorp_sample_complexity_search(corridor):
    result = gorp_sample_complexity(corridor, k=1, runs=5, max_steps=20_000, seed=0)
    assert result.m is not None and result.m >= 1
    assert math.isfinite(result.median_sample_complexity)
    assert result.median_sample_complexity <= 2 * 3 * 3 * result.m
    assert result.empirical_horizon is not None
    # One rollout per action is not always enough (ties at 0 are broken at random); m = 1 then fails.
    assert set(result.tried) >= {1}
