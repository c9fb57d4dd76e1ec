"""Rewards and credit assignment of multi-turn trajectories, against hand-computed values."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.errors import UsageError
from longhorizon.lm.agents.credit import (
    combine_rewards,
    eapo_turn_rewards,
    milestone_turn_rewards,
    returns_to_go,
    token_advantages,
    trajectory_advantages,
    turn_advantages,
)
from longhorizon.lm.agents.trajectory import TokenSequence, Trajectory, Turn


def traj(group, outcome, turn_rewards=(0.0,), turns_of_tokens=None):
    turns = [Turn(action=f"a{t}", reward=r) for t, r in enumerate(turn_rewards)]
    tt = np.array(turns_of_tokens if turns_of_tokens is not None else [-1] + list(range(len(turns))))
    seq = TokenSequence(tokens=np.arange(len(tt)), action_mask=tt >= 0, logprobs=np.zeros(len(tt)), turn=tt)
    return Trajectory(group=group, sequences=[seq], turns=turns, reward=outcome)


# ----------------------------------------------------------------------------- rewards


def test_combine_rewards_is_the_weighted_sum():
    # Router-R1: 0.5 * format + 1 * outcome - 2 * cost = 0.5 + 1 - 0.6
    terms = {"format": 1.0, "outcome": 1.0, "cost": 0.3, "turns": 4.0}
    assert combine_rewards(terms, {"format": 0.5, "outcome": 1.0, "cost": -2.0}) == pytest.approx(0.9)


def test_combine_rewards_refuses_a_weight_without_its_term():
    with pytest.raises(UsageError, match="'cost'"):
        combine_rewards({"outcome": 1.0}, {"outcome": 1.0, "cost": -0.1})


def test_combine_rewards_refuses_a_non_finite_term():
    with pytest.raises(UsageError, match="not finite"):
        combine_rewards({"outcome": float("nan")}, {"outcome": 1.0})


def test_eapo_discounts_earlier_rounds_geometrically():
    # T = 3, gamma = 0.5, R = 2: rounds 1, 2, 3 get 0.5^2 * 2, 0.5 * 2, 2
    np.testing.assert_allclose(eapo_turn_rewards(2.0, 3, 0.5), [0.5, 1.0, 2.0])
    np.testing.assert_allclose(eapo_turn_rewards(1.0, 1, 0.9), [1.0])
    assert eapo_turn_rewards(1.0, 0, 0.9).shape == (0,)
    with pytest.raises(UsageError, match="gamma"):
        eapo_turn_rewards(1.0, 3, 0.0)


@settings(max_examples=30, deadline=None)
@given(st.floats(-5, 5), st.integers(1, 12), st.floats(0.05, 1.0))
def test_eapo_last_round_gets_the_outcome_and_ratio_is_gamma(outcome, n, gamma):
    r = eapo_turn_rewards(outcome, n, gamma)
    assert r[-1] == pytest.approx(outcome)
    np.testing.assert_allclose(r[:-1], gamma * r[1:], atol=1e-12)


def test_milestones_pay_their_bonus_at_the_turn_they_are_reached():
    # milestones reached at turns 1, never, 1, 0 with bonuses 0.1, 0.2, 0.3, 0.4
    np.testing.assert_allclose(milestone_turn_rewards([1, None, 1, 0], 3, [0.1, 0.2, 0.3, 0.4]), [0.4, 0.4, 0.0])
    np.testing.assert_allclose(milestone_turn_rewards([2, 0], 3, 0.5), [0.5, 0.0, 0.5])
    with pytest.raises(UsageError, match="turn 3"):
        milestone_turn_rewards([3], 3, 1.0)
    with pytest.raises(UsageError, match="one per milestone"):
        milestone_turn_rewards([0, 1], 3, [1.0, 2.0, 3.0])


# ----------------------------------------------------------------------------- advantages


def test_trajectory_advantages_are_group_normalised_outcomes():
    # group 0: rewards 1, 0, 0, 1 -> mean 0.5, unbiased std sqrt(1/3); group 1 has one member -> 0
    trajs = [traj(0, 1.0), traj(0, 0.0), traj(1, 1.0), traj(0, 0.0), traj(0, 1.0)]
    a = 0.8658754297607016  # 0.5 / (sqrt(1/3) + 1e-4)
    np.testing.assert_allclose(trajectory_advantages(trajs), [a, -a, 0.0, -a, a], rtol=1e-6)
    np.testing.assert_allclose(trajectory_advantages(trajs, "none"), [0.5, -0.5, 0.0, -0.5, 0.5])


def test_returns_to_go_by_hand():
    # r = [1, 0, 2], gamma 0.5: G_2 = 2, G_1 = 0 + 0.5 * 2 = 1, G_0 = 1 + 0.5 * 1 = 1.5; side by side with
    # r = [3] (G = 3), r = [] and r = [1, 1] (G = [1.5, 1]): episodes do not leak into each other
    got = returns_to_go([np.array([1.0, 0.0, 2.0]), np.array([3.0]), np.zeros(0), np.array([1.0, 1.0])], 0.5)
    for g, want in zip(got, [[1.5, 1.0, 2.0], [3.0], [], [1.5, 1.0]]):
        np.testing.assert_allclose(g, want)


def test_turn_advantages_pool_the_group_turns():
    # A: turn rewards [0, 0.5] + outcome 1 at the last turn -> r = [0, 1.5], gamma 0.5 -> G = [0.75, 1.5]
    # B: turn rewards [0] + outcome 0 -> G = [0]
    # pooled group: [0.75, 1.5, 0], mean 0.75, unbiased std 0.75
    a, b = traj(0, 1.0, [0.0, 0.5]), traj(0, 0.0, [0.0])
    lone = traj(1, 1.0, [0.0])  # a group with one turn in all: 0
    adv = turn_advantages([a, b, lone], gamma=0.5)
    s = 0.9998666844420744  # 0.75 / (0.75 + 1e-4)
    np.testing.assert_allclose(adv[0], [0.0, s], atol=1e-6)
    np.testing.assert_allclose(adv[1], [-s], atol=1e-6)
    np.testing.assert_allclose(adv[2], [0.0])
    raw = turn_advantages([a, b], gamma=0.5, scale_rewards="none")
    np.testing.assert_allclose(np.concatenate(raw), [0.0, 0.75, -0.75], atol=1e-6)


def test_token_advantages_follow_each_tokens_turn():
    t = traj(0, 1.0, [0.0, 0.0], turns_of_tokens=[-1, -1, 0, 0, 1, 1, 1])
    np.testing.assert_allclose(token_advantages(t, np.array([2.0, 3.0]))[0], [0, 0, 2, 2, 3, 3, 3])
    np.testing.assert_allclose(token_advantages(t, 5.0)[0], [0, 0, 5, 5, 5, 5, 5])
    # a reconstructed workspace: one sequence per turn, each with its own context tokens (-1)
    seqs = [TokenSequence(tokens=[1, 2, 3], action_mask=[0, 1, 1], logprobs=[0, 0, 0], turn=[-1, 0, 0]),
            TokenSequence(tokens=[1, 4], action_mask=[0, 1], logprobs=[0, 0], turn=[-1, 1])]
    ws = Trajectory(group=0, sequences=seqs, turns=[Turn("x"), Turn("y")], reward=1.0)
    out = token_advantages(ws, np.array([-1.0, 4.0]))
    np.testing.assert_allclose(out[0], [0, -1, -1])
    np.testing.assert_allclose(out[1], [0, 4])


def test_token_advantages_refuse_a_mismatched_turn_count():
    t = traj(0, 1.0, [0.0, 0.0], turns_of_tokens=[-1, 0, 1])
    with pytest.raises(UsageError, match="one per turn"):
        token_advantages(t, np.array([1.0, 2.0, 3.0]))
    bad = traj(0, 1.0, [0.0], turns_of_tokens=[-1, 0, 1])
    with pytest.raises(UsageError, match="turn 1"):
        token_advantages(bad, 1.0)
