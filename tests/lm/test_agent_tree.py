"""TreeOPSD's prefix tree, value backup, turn credit and bounded teacher, against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from longhorizon.errors import UsageError
from longhorizon.lm.agents.tree import (
    TreeNode,
    backup,
    bounded_teacher_log_ratio,
    bounded_teacher_token_advantages,
    bounded_teacher_turn_log_ratios,
    build_tree,
    node_advantages,
)
from longhorizon.lm.agents.trajectory import TokenSequence, Trajectory, Turn


def traj(actions, outcome, group=0):
    turn = np.array([-1] + [t for t in range(len(actions)) for _ in range(2)])
    seq = TokenSequence(tokens=np.arange(len(turn)), action_mask=turn >= 0, logprobs=np.zeros(len(turn)), turn=turn)
    return Trajectory(group=group, sequences=[seq], turns=[Turn(a, observation="obs") for a in actions], reward=outcome)


# root -> A(a) -> B(b, R=1), C(c, R=0);  root -> D(d, trajectory 2 ends here with R=0.2) -> E(e, R=1)
TRAJS = [traj("ab", 1.0), traj("ac", 0.0), traj("d", 0.2), traj("de", 1.0)]
BRANCHES = [None, (0, 1), None, (2, 1)]
# V(B)=1, V(C)=0, V(A)=0.5, V(E)=1, V(D)=mean(1, 0.2)=0.6, V(root)=mean(0.5, 0.6)=0.55
ADVANTAGES = [[-0.05, 0.5], [-0.05, -0.5], [0.05], [0.05, 0.4]]
# tau=0.5, clip=0.6. root: A/tau = [-0.1, 0.1], log Z = log cosh 0.1; node A: [1, -1], log Z = log cosh 1
# (the second clipped at -0.6); node D has one child: 0.
RATIOS = [[-0.10499168882164645, 0.5662191695169729], [-0.10499168882164645, -0.6],
          [0.09500831117835357], [0.09500831117835357, 0.0]]


def test_branch_records_build_the_tree_and_backup_averages_children():
    tree = backup(build_tree(TRAJS, BRANCHES))
    root = tree.roots[0]
    assert len(root.children) == 2 and root.trajectories == [0, 1, 2, 3]
    a, d = root.children
    assert [c.key[0] for c in a.children] == ["b", "c"] and d.outcomes == [0.2]
    assert tree.paths[1][0] is tree.paths[0][0] and tree.paths[3][0] is d
    assert root.value == pytest.approx(0.55) and a.value == pytest.approx(0.5) and d.value == pytest.approx(0.6)


def test_node_advantages_by_hand_and_they_telescope():
    tree = build_tree(TRAJS, BRANCHES)
    adv = node_advantages(tree)
    for got, want in zip(adv, ADVANTAGES):
        np.testing.assert_allclose(got, want, atol=1e-12)
    # sum over a path = V(last node) - V(root)
    for got, path in zip(adv, tree.paths):
        assert got.sum() == pytest.approx(path[-1].value - tree.roots[0].value)


def test_inferred_prefixes_give_the_same_tree():
    adv = node_advantages(build_tree(TRAJS))
    for got, want in zip(adv, ADVANTAGES):
        np.testing.assert_allclose(got, want, atol=1e-12)
    # independent samples (no branch record) of identical turns stay apart when the record says so
    tree = build_tree([traj("a", 1.0), traj("a", 0.0)], [None, None])
    assert len(tree.roots[0].children) == 2


def test_a_rollout_can_record_branches_itself():
    root = TreeNode()
    prefix = root.add_child("t0")
    leaves = [prefix.add_child(f"t1-{k}") for k in range(3)]
    assert [n.depth for n in leaves] == [1 + 1] * 3 and all(n.parent is prefix for n in leaves)
    assert prefix.child("t1-1") is leaves[1]


def test_bounded_teacher_log_ratio_by_hand():
    np.testing.assert_allclose(bounded_teacher_log_ratio([1.0, -1.0], tau=0.5, clip=10.0), [2 - np.log(np.cosh(2)), -2 - np.log(np.cosh(2))])
    np.testing.assert_allclose(bounded_teacher_log_ratio([1.0, -1.0], tau=1.0, clip=0.6), [0.5662191695169729, -0.6])
    # weights 3:1 over the children, A = [1, 0], tau 1: log Z = log(0.75 e + 0.25)
    np.testing.assert_allclose(bounded_teacher_log_ratio([1.0, 0.0], 1.0, 5.0, weights=[3, 1]),
                               [0.17201106075713024, -0.8279889392428698])
    np.testing.assert_allclose(bounded_teacher_log_ratio([0.3], 1.0, 1.0), [0.0])
    for bad in ({"tau": 0.0, "clip": 1.0}, {"tau": 1.0, "clip": -1.0}):
        with pytest.raises(UsageError):
            bounded_teacher_log_ratio([1.0, 0.0], **bad)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=1, max_size=6), st.floats(0.1, 2.0), st.floats(0.05, 2.0))
def test_teacher_sums_to_one_before_the_clip_and_is_bounded_after(adv, tau, clip):
    free = bounded_teacher_log_ratio(adv, tau, 1e9)
    assert np.mean(np.exp(free)) == pytest.approx(1.0)
    assert np.all(np.abs(bounded_teacher_log_ratio(adv, tau, clip)) <= clip + 1e-12)


def test_turn_log_ratios_and_token_advantages_by_hand():
    tree = build_tree(TRAJS, BRANCHES)
    for got, want in zip(bounded_teacher_turn_log_ratios(tree, 0.5, 0.6), RATIOS):
        np.testing.assert_allclose(got, want, atol=1e-12)
    tokens = bounded_teacher_token_advantages(TRAJS, build_tree(TRAJS, BRANCHES), 0.5, 0.6)
    # trajectory 0's tokens: context, turn 0 (2 tokens), turn 1 (2 tokens)
    np.testing.assert_allclose(tokens[0][0], [0, RATIOS[0][0], RATIOS[0][0], RATIOS[0][1], RATIOS[0][1]], rtol=1e-6)


def test_distilling_to_the_teacher_is_a_policy_gradient_with_the_log_ratio():
    # over b = 3 children with policy softmax(theta): grad KL(pi || pi_T) (pi_T fixed) equals
    # E_{c ~ pi}[grad log pi(c) * (-l(c))] with l = log pi_T / pi computed with weights = pi
    theta = jnp.array([0.2, -0.4, 0.9])
    adv, tau = np.array([0.5, -1.0, 0.25]), 0.7
    pi = np.asarray(jax.nn.softmax(theta))
    l = bounded_teacher_log_ratio(adv, tau, 1e9, weights=pi)
    log_pt = np.log(pi) + l

    def kl(th):
        logp = jax.nn.log_softmax(th)
        return jnp.sum(jnp.exp(logp) * (logp - log_pt))

    score = jax.jacobian(jax.nn.log_softmax)(theta)  # [c, theta]
    pg = -(pi * l) @ score
    np.testing.assert_allclose(jax.grad(kl)(theta), pg, atol=1e-6)


def test_groups_get_their_own_roots():
    # group 7 (trajectories 1, 3): root -> x (R=1), y (R=0): V(root) = 0.5, A = +-0.5; group 0 is TRAJS[0:2]
    trajs = [TRAJS[0], traj("x", 1.0, group=7), TRAJS[1], traj("y", 0.0, group=7)]
    tree = build_tree(trajs, [None, None, (0, 1), None])
    assert sorted(tree.roots) == [0, 7] and tree.roots[7].trajectories == [1, 3]
    adv = node_advantages(tree)
    # group 0 alone: V(A) = 0.5 = V(root), so its first turn gets 0
    for got, want in zip(adv, [[0.0, 0.5], [0.5], [0.0, -0.5], [-0.5]]):
        np.testing.assert_allclose(got, want, atol=1e-12)


def test_bad_tree_input_is_refused():
    with pytest.raises(UsageError, match="branched from"):
        build_tree([traj("a", 1.0), traj("ab", 1.0)], [None, (1, 1)])
    with pytest.raises(UsageError, match="in its group"):
        build_tree([traj("a", 1.0, group=0), traj("ab", 1.0, group=1)], [None, (0, 1)])
    with pytest.raises(UsageError, match="one each"):
        build_tree([traj("a", 1.0)], [None, None])
