"""Shared fixtures for the tabular tests: the BRIDGE KeyCorridor files and hand-made MDPs."""

from pathlib import Path

import numpy as np
import pytest

from longhorizon.tabular.mdp import TabularMDP

# A copy of the official BRIDGE files ships with the tests (116 KB), so the reference values are
# always checked: a missing file is a failure, never a skip.
BRIDGE = Path(__file__).resolve().parents[1] / "fixtures" / "bridge"
KEY_CORRIDOR = BRIDGE / "MiniGrid-KeyCorridorS3R1-v0" / "consolidated.npz"


@pytest.fixture(scope="session")
def key_corridor_path() -> Path:
    assert KEY_CORRIDOR.exists(), f"BRIDGE fixture missing at {KEY_CORRIDOR}"
    return KEY_CORRIDOR


@pytest.fixture(scope="session")
def key_corridor(key_corridor_path):
    from longhorizon.tabular.mdp import load_npz

    return load_npz(key_corridor_path, horizon=100)


@pytest.fixture
def three_state_mdp() -> TabularMDP:
    """s0: a0 -> s1 (r 0), a1 -> s2 (r 1); s1: a0 ends (r 2), a1 -> s1 (r 0); s2: both end (r 0)."""
    transitions = np.array([[1, 2], [-1, 1], [-1, -1]])
    rewards = np.array([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]])
    return TabularMDP.deterministic(transitions, rewards, horizon=2, name="three-state")


@pytest.fixture
def stochastic_mdp() -> TabularMDP:
    """s0: a0 -> s1 (p .5, r 0) or ends (p .5, r 1); a1 -> s0 (r .5). s1: a0 ends (r 3), a1 ends (r 0)."""
    next_states = np.array([[[1, -1], [0, 0]], [[-1, -1], [-1, -1]]])
    next_probs = np.array([[[0.5, 0.5], [1.0, 0.0]], [[1.0, 0.0], [1.0, 0.0]]])
    next_rewards = np.array([[[0.0, 1.0], [0.5, 0.5]], [[3.0, 3.0], [0.0, 0.0]]])
    return TabularMDP(next_states=next_states, next_probs=next_probs, next_rewards=next_rewards, horizon=2, name="stochastic")
