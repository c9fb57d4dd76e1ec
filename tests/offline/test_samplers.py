"""Goal-conditioned samplers against hand-computed values on a hand-built dataset of 3 trajectories.

Trajectories of 4, 3 and 5 transitions laid end to end: indices 0-3, 4-6, 7-11. Observation i is
``[i, 10 * trajectory]`` so a sampled goal names its index; next_observations[i] = ``[i + 1, ...]``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from longhorizon.errors import UsageError
from longhorizon.offline import samplers as S

LENGTHS = (4, 3, 5)


def hand_dataset(lengths=LENGTHS, valids=None):
    traj = np.concatenate([np.full(n, k) for k, n in enumerate(lengths)])
    idx = np.arange(len(traj), dtype=np.float32)
    terminals = np.concatenate([np.eye(n)[-1] for n in lengths])
    data = {"observations": np.stack([idx, 10.0 * traj], 1), "next_observations": np.stack([idx + 1, 10.0 * traj], 1),
            "actions": np.ones((len(traj), 2), np.float32), "terminals": terminals}
    if valids is not None:
        data["valids"] = valids
    return data


DATA = S.goal_data(hand_dataset())
N = 20_000


def test_final_indices_are_each_trajectorys_last_transition():
    assert DATA.final.tolist() == [3, 3, 3, 3, 6, 6, 6, 11, 11, 11, 11, 11]


def test_geometric_offsets_follow_the_geometric_law_clipped_at_the_end():
    # from i = 7 (final 11) with gamma = 0.5: P(k) = 0.5^k for k = 1, 2, 3; the rest, 0.5^3, lands on 11
    idx = jnp.full((N,), 7, jnp.int32)
    goals = np.asarray(jax.jit(S.trajectory_goals, static_argnums=(3, 4))(jax.random.PRNGKey(0), DATA, idx, 0.5, True))
    freq = np.bincount(goals, minlength=12)[8:12] / N
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.125, 0.125], atol=0.012)


def test_uniform_trajectory_goals_round_a_uniform_point_of_the_rest_of_the_trajectory():
    # round(U[8, 11]): 8 and 11 get half the mass of 9 and 10 (OGBench's actor_geom_sample=False)
    idx = jnp.full((N,), 7, jnp.int32)
    goals = np.asarray(S.trajectory_goals(jax.random.PRNGKey(1), DATA, idx, 0.99, False))
    np.testing.assert_allclose(np.bincount(goals, minlength=12)[8:12] / N, [1 / 6, 1 / 3, 1 / 3, 1 / 6], atol=0.012)
    # at a trajectory's last transition the only state left is its own
    assert set(np.asarray(S.trajectory_goals(jax.random.PRNGKey(2), DATA, jnp.full((50,), 3), 0.99, False)).tolist()) == {3}


def test_mixture_probabilities_and_goal_sources():
    idx = jnp.full((N,), 5, jnp.int32)  # middle of trajectory 1 (indices 4-6)
    mix = S.GoalMixture(0.2, 0.5, 0.3, geometric=True)
    goals = np.asarray(S.mixture_goals(jax.random.PRNGKey(3), DATA, idx, mix, 0.99))
    current = goals == 5
    ahead = goals == 6  # the only state ahead of 5 in its trajectory
    # current-state goals: 0.2, plus random goals that hit 5 (0.3 / 12); trajectory goals 0.5, plus random hits of 6
    assert abs(current.mean() - (0.2 + 0.3 / 12)) < 0.012
    assert abs(ahead.mean() - (0.5 + 0.3 / 12)) < 0.012
    assert abs((~current & ~ahead).mean() - 0.3 * 10 / 12) < 0.012


def test_goals_never_leave_their_trajectory():
    idx = S.start_indices(jax.random.PRNGKey(4), DATA, N)
    for geometric in (True, False):
        goals = S.trajectory_goals(jax.random.PRNGKey(5), DATA, idx, 0.9, geometric)
        assert bool(jnp.all(DATA.final[goals] == DATA.final[idx])) and bool(jnp.all(goals >= idx))
        # strictly ahead unless the start is the trajectory's last transition
        assert bool(jnp.all((goals > idx) | (idx == DATA.final[idx])))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 2**31 - 1))
def test_property_trajectory_goals_subgoals_and_option_ends_respect_boundaries(lengths, seed):
    data = S.goal_data(hand_dataset(tuple(lengths)))
    key = jax.random.PRNGKey(seed)
    idx = S.start_indices(key, data, 64)
    goal = S.mixture_goals(jax.random.fold_in(key, 1), data, idx, S.VALUE_GOALS, 0.9)
    sub = S.subgoals(data, idx, 3, goal)
    assert bool(jnp.all(data.final[sub] == data.final[idx])) and bool(jnp.all((sub >= idx) & (sub <= idx + 3)))
    end = S.option_ends(data, idx, goal, 4)
    assert bool(jnp.all((end >= idx) & (end <= jnp.minimum(idx + 3, data.final[idx]))))


def test_rewards_and_masks_mark_exactly_the_reached_goal():
    reward, mask = S.goal_rewards(jnp.array([3, 3, 7, 0]), jnp.array([3, 4, 11, 0]))
    assert reward.tolist() == [0.0, -1.0, -1.0, 0.0]  # OGBench's gc_negative convention: {-1, 0}
    assert mask.tolist() == [0.0, 1.0, 1.0, 0.0]
    batch = S.value_batch(jax.random.PRNGKey(6), DATA, 4096, S.VALUE_GOALS, 0.99)
    reached = np.asarray(batch.observations[:, 0] == batch.goals[:, 0])
    assert np.array_equal(np.asarray(batch.rewards) == 0, reached) and np.array_equal(np.asarray(batch.masks) == 0, reached)
    assert np.array_equal(np.asarray(batch.next_observations[:, 0]), np.asarray(batch.observations[:, 0]) + 1)


def test_subgoals_by_hand():
    idx = jnp.array([0, 2, 7, 7, 7, 10])
    # low level: k = 2 steps ahead, clipped at the trajectory's last transition
    assert S.subgoals(DATA, idx, 2).tolist() == [2, 3, 9, 9, 9, 11]
    # high level: clipped at the goal when it lies ahead in the trajectory (8), else at the end (goal 1: other trajectory)
    goal = jnp.array([3, 3, 8, 11, 1, 11])
    assert S.subgoals(DATA, idx, 3, goal).tolist() == [3, 3, 8, 10, 10, 11]


def test_option_ends_by_hand():
    # trajectory 7..11 (t = 0..4, T = 4). Option of n = 3 from t = 0 (i = 7):
    #   goal at t = 4 (i = 11): tau = min(3, 4, 5) = 3 -> s_3 = next_observations[9] (= observation 10)
    #   goal at t = 1 (i = 8):  tau = 1 -> s_1 = next_observations[7] (= observation 8, the goal)
    #   goal in another trajectory: tau = 3 -> next_observations[9]
    # from t = 3 (i = 10) toward another trajectory: tau = min(6, 5) = 5 = T + 1 -> next_observations[11]
    # a goal behind the start (i = 9 toward 8) is not ahead: tau = min(t + 3, T + 1)
    idx, goal = jnp.array([7, 7, 7, 10, 9]), jnp.array([11, 8, 2, 2, 8])
    ends = S.option_ends(DATA, idx, goal, 3)
    assert ends.tolist() == [9, 7, 9, 11, 11]
    assert DATA.next_observations[ends, 0].tolist() == [10.0, 8.0, 10.0, 12.0, 12.0]
    # n = 1 is the one-step transition
    assert S.option_ends(DATA, idx, goal, 1).tolist() == idx.tolist()


def test_only_valid_transitions_start_a_batch():
    valids = np.ones(12)
    valids[[0, 5, 11]] = 0
    data = S.goal_data(hand_dataset(valids=valids))
    starts = np.asarray(S.start_indices(jax.random.PRNGKey(7), data, 5000))
    assert set(starts.tolist()) == set(range(12)) - {0, 5, 11}


@pytest.mark.parametrize("change, words", [
    (lambda d: d.pop("next_observations"), "lacks next_observations"),
    (lambda d: d.update(terminals=d["terminals"][:-1]), "disagree in length"),
    (lambda d: d.update(terminals=np.zeros(12)), "not marked terminal"),
    (lambda d: d.update(valids=np.zeros(12)), "no valid transition"),
])
def test_malformed_datasets_are_usage_errors(change, words):
    data = hand_dataset()
    change(data)
    with pytest.raises(UsageError, match=words):
        S.goal_data(data)


def test_goal_probabilities_must_sum_to_one():
    with pytest.raises(UsageError, match="sum to 1"):
        S.GoalMixture(0.5, 0.5, 0.5, geometric=True)
