"""min k, the planning window and the simple bound on MDPs small enough to check by hand."""

import numpy as np
import pytest

from longhorizon.tabular import horizon as hz
from longhorizon.tabular.mdp import TabularMDP


@pytest.fixture
def bandit() -> TabularMDP:
    """s0: a0 -> s1, a1 -> s2 (r 0). s1: a0 ends with 1, a1 ends with 0. s2: both end with 0."""
    return TabularMDP.deterministic(np.array([[1, 2], [-1, -1], [-1, -1]]), np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]), horizon=2)


def test_min_k_and_planning_window_by_hand(three_state_mdp, bandit):
    # three-state: Q^1(s0) ties [1, 1] but a1 is suboptimal; Q^2(s0) = [2, 1] is right.
    assert hz.min_k(three_state_mdp) == 2
    assert hz.effective_planning_window(three_state_mdp) == 2
    # bandit: the random policy already prefers a0 (0.5 vs 0), but the immediate rewards tie.
    assert hz.min_k(bandit) == 1
    assert hz.effective_planning_window(bandit) == 2


def test_simple_bound_by_hand(bandit):
    result = hz.simple_effective_horizon(bandit)
    # At s0: gap 0.5, variance bound (0.5 - 0)(1 - 0) = 0.5, so m = ceil(16 * 0.5 / 0.25 * ln(2 * 2 * 2)) = 67.
    assert result.ks == [1] and result.ms == [67]
    assert result.gaps == [0.5] and result.variances == [0.5]
    assert result.effective_horizon == 2.0  # H <= T always; here 1 + log2(67) > T = 2


def test_bounds_are_none_for_stochastic_mdps(stochastic_mdp):
    assert hz.simple_effective_horizon(stochastic_mdp) is None
    assert hz.tight_effective_horizon(stochastic_mdp) is None
    report = hz.analyze(stochastic_mdp)
    assert report["effective_horizon_simple"] is None and report["effective_horizon_tight"] is None
