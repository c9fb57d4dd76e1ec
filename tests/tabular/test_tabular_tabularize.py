"""Tabularizers: MiniGrid with BRIDGE's conventions, gymnax environments, merging and state limits."""

import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.tabular import dp
from longhorizon.tabular import horizon as hz
from longhorizon.tabular.tabularize import (
    merge_equivalent_states,
    parse_minigrid_id,
    tabularize_gymnax,
    tabularize_minigrid,
)

pytest.importorskip("minigrid")


@pytest.fixture(scope="module")
def key_corridor_tabular():
    return tabularize_minigrid("MiniGrid-KeyCorridorS3R1-v0", horizon=100)


def test_minigrid_key_corridor_matches_bridge(key_corridor_tabular, key_corridor):
    ours = key_corridor_tabular
    v_ours, v_ref = dp.evaluate(ours, 100), dp.evaluate(key_corridor, 100)
    assert ours.num_actions == 6  # the 'done' action is removed
    assert v_ours.optimal_return == v_ref.optimal_return == 1.0
    assert hz.min_k(ours, 100, values=v_ours) == 1
    assert v_ours.random_return == pytest.approx(v_ref.random_return, rel=1e-12)
    assert hz.effective_planning_window(ours, 100, values=v_ours) == 15
    # 156, not 168: BRIDGE keeps 12 duplicates that differ only in a hidden 'has been picked up' flag;
    # merging BRIDGE's own file by observations and futures gives the same 156 (see docs/horizon.md).
    assert ours.num_states == 156
    block = merge_equivalent_states(key_corridor.next_states, key_corridor.next_probs, key_corridor.next_rewards,
                                    key_corridor.extras["screen_mapping"])
    assert block.max() + 1 == 156


def test_minigrid_state_limit_and_bad_ids():
    with pytest.raises(UsageError, match="more than 20 reachable states.*raise --max-states"):
        tabularize_minigrid("MiniGrid-KeyCorridorS3R1-v0", horizon=100, max_states=20)
    with pytest.raises(UsageError, match="unknown MiniGrid environment"):
        tabularize_minigrid("MiniGrid-NoSuchThing-v0")
    assert parse_minigrid_id("MiniGrid-UnlockPickup-OpenDoorsPickupShaped-v0") == (
        "MiniGrid-UnlockPickup-v0", ("OpenDoors", "Pickup"))
    assert parse_minigrid_id("BRIDGE/MiniGrid-Empty-5x5-v0") == ("MiniGrid-Empty-5x5-v0", ())


def test_minigrid_short_horizon_and_navigation_only():
    mdp = tabularize_minigrid("MiniGrid-Empty-5x5-v0", horizon=3)
    assert mdp.num_actions == 3  # navigation only, as BRIDGE does for Empty
    v = dp.evaluate(mdp, 3)
    assert v.optimal_return == 0.0  # the goal is more than 3 steps away
    full = tabularize_minigrid("MiniGrid-Empty-5x5-v0", horizon=100)
    assert dp.evaluate(full, 100).optimal_return == 1.0


def test_minigrid_shaped_rewards():
    mdp = tabularize_minigrid("MiniGrid-Empty-5x5-DistanceShaped-v0", horizon=20)
    rewards = np.unique(np.round(mdp.rewards, 6))
    assert 0.1 in rewards and -0.1 in rewards  # one step closer / further, 0.1 per step


def test_gymnax_deep_sea():
    size = 5
    mdp = tabularize_gymnax("DeepSea-bsuite", horizon=size, size=size, transition_samples=2, batch_size=16)
    assert mdp.is_deterministic and not mdp.info["estimated_transitions"]
    assert mdp.num_states == size * (size + 1) // 2  # (row, column) with column <= row
    v = dp.evaluate(mdp, size)
    assert v.optimal_return == pytest.approx(1.0 - 0.01, abs=1e-6)  # treasure minus the move costs
    assert hz.min_k(mdp, size, values=v) == 1
    with pytest.raises(UsageError, match="more than 4 reachable states"):
        tabularize_gymnax("DeepSea-bsuite", horizon=size, size=size, max_states=4, transition_samples=2, batch_size=16)
    with pytest.raises(UsageError, match="unknown environment"):
        tabularize_gymnax("NoSuchEnv-bsuite", horizon=3)


def test_merge_equivalent_states_merges_cycles():
    # Two 2-cycles with the same rewards are one state pair; a self-loop paying 1 every step differs.
    nxt = np.array([[[1]], [[0]], [[3]], [[2]], [[4]]])
    probs = np.ones((5, 1, 1))
    rew = np.array([[[1.0]], [[0.0]], [[1.0]], [[0.0]], [[1.0]]])
    block = merge_equivalent_states(nxt, probs, rew)
    assert block.tolist() == [0, 1, 0, 1, 2]
    assert merge_equivalent_states(nxt, probs, rew, ["a", "b", "a", "b", "a"]).tolist() == [0, 1, 0, 1, 2]
    # Observations that differ anywhere along the future keep the cycles apart.
    assert merge_equivalent_states(nxt, probs, rew, ["a", "b", "c", "b", "a"]).tolist() == [0, 1, 2, 3, 4]
