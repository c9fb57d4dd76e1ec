"""On-policy distillation advantages (lm/agents/opd.py): TreeOPSD's tree credit + bounded teacher, routed teachers."""

import math
import types

import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.agents.distill import Teacher, VocabularyMap, teacher_token_logprobs
from longhorizon.lm.agents.opd import RoutedDistillation, TreeOPSD
from longhorizon.lm.agents.trajectory import TokenSequence, Trajectory, Turn


def _traj(actions, reward, group=0, task=None, tokens=None, logprobs=None):
    """A full-history trajectory: prompt token (turn -1), then 2 action tokens + 1 observation token per turn."""
    turn = [-1] + [t for t in range(len(actions)) for _ in range(3)]
    mask = [False] + [True, True, False] * len(actions)
    n = len(turn)
    tokens = list(range(5, 5 + n)) if tokens is None else tokens
    logprobs = [0.0] + [-0.5, -0.25, 0.0] * len(actions) if logprobs is None else logprobs
    return Trajectory(group=group, sequences=[TokenSequence(tokens, mask, logprobs, turn)],
                      turns=[Turn(action=a, observation="o") for a in actions], reward=reward, task=task, uid=str(actions))


def test_treeopsd_turn_advantages_by_hand():
    # root -> a -> {b: R=1, c: R=0} (c branched from trajectory 0 after 1 turn), root -> d: R=0
    trajs = [_traj(["a", "b"], 1.0), _traj(["a", "c"], 0.0), _traj(["d"], 0.0)]
    links = [None, (0, 1), None]
    # V(a) = 0.5, V(d) = 0, V(root) = 0.25; A(a) = .25, A(d) = -.25, A(b) = .5, A(c) = -.5
    # l over root's children {a, d} (tau=1): +-.25 - log cosh(.25); over a's children {b, c}: +-.5 - log cosh(.5)
    la, lb = math.log(math.cosh(0.25)), math.log(math.cosh(0.5))
    got = TreeOPSD(tau=1.0, clip=10.0).turn_advantages(trajs, links)
    np.testing.assert_allclose(got[0], [0.25 + 0.25 - la, 0.5 + 0.5 - lb])
    np.testing.assert_allclose(got[1], [0.25 + 0.25 - la, -0.5 - 0.5 - lb])
    np.testing.assert_allclose(got[2], [-0.25 - 0.25 - la])
    # tau = 0.5 doubles A/tau; clip = 0.5 bounds the log-ratio; weights scale the two parts
    got = TreeOPSD(tau=0.5, clip=0.5, credit_weight=2.0, distill_weight=0.5).turn_advantages(trajs, links)
    l_a = float(np.clip(0.5 - math.log(math.cosh(0.5)), -0.5, 0.5))
    l_b = float(np.clip(1.0 - math.log(math.cosh(1.0)), -0.5, 0.5))
    l_c = float(np.clip(-1.0 - math.log(math.cosh(1.0)), -0.5, 0.5))
    assert l_b == 0.5 and l_c == -0.5 and l_a < 0.5  # the bound binds
    np.testing.assert_allclose(got[1], [2 * 0.25 + 0.5 * l_a, 2 * -0.5 + 0.5 * l_c])


def test_treeopsd_tokens_carry_their_turn_value_and_read_the_rollouts_records():
    trajs = [_traj(["a", "b"], 1.0), _traj(["a", "c"], 0.0), _traj(["d"], 0.0)]
    fake = types.SimpleNamespace(rollout=types.SimpleNamespace(branched_from=[None, (0, 1), None]))
    opsd = TreeOPSD(tau=1.0, clip=10.0)
    per_turn = opsd.turn_advantages(trajs, [None, (0, 1), None])
    tokens = opsd(trajs, fake)
    for traj, a, (seq,) in zip(trajs, per_turn, tokens):
        expected = np.concatenate([[0.0], np.repeat(a, 3)])  # the prompt token gets 0
        np.testing.assert_allclose(seq, expected, rtol=1e-6)
    # without records (a plain rollout) equal turns are merged: here the same tree
    inferred = opsd(trajs, None)
    for x, y in zip(inferred, tokens):
        np.testing.assert_allclose(x[0], y[0])


def test_treeopsd_refuses_bad_settings_and_nan_rewards():
    for kw, match in [({"tau": 0.0}, "tau=0.0"), ({"clip": -1.0}, "clip=-1.0"), ({"tau": math.nan}, "tau=nan"),
                      ({"credit_weight": 0.0, "distill_weight": 0.0}, "both 0"), ({"distill_weight": -1.0}, "distill_weight")]:
        with pytest.raises(UsageError, match=match):
            TreeOPSD(**kw)
    with pytest.raises(UsageError, match="non-finite reward"):
        TreeOPSD().turn_advantages([_traj(["a"], math.nan)])


@pytest.fixture(scope="module")
def teachers():
    from longhorizon.lm.policy import tiny_random

    t0, t1 = tiny_random(seed=0), tiny_random(seed=1)
    vm = VocabularyMap(t0.tokenizer, t0.tokenizer)
    assert vm.identity
    return t0.cfg, {"search": Teacher(t0.params, t0.cfg, vm), "research": Teacher(t1.params, t1.cfg, vm)}


@pytest.mark.slow
def test_routed_distillation_is_minus_student_minus_teacher_with_each_domains_teacher(teachers):
    cfg, ts = teachers
    tokens = [10, 11, 12, 13, 14, 15, 16]  # prompt, (2 action, 1 observation) x 2
    trajs = [_traj(["a", "b"], 0.0, group=0, task={"domain": "search"}, tokens=tokens),
             _traj(["a", "b"], 0.0, group=1, task={"domain": "research"}, tokens=tokens)]
    out = RoutedDistillation(ts)(trajs, None)
    direct = {name: np.asarray(teacher_token_logprobs(t.params, cfg, jnp.asarray([tokens]), jnp.ones((1, 7), bool)))[0]
              for name, t in ts.items()}
    student = trajs[0].sequences[0].logprobs
    mask = trajs[0].sequences[0].action_mask
    for traj, (adv,), name in zip(trajs, out, ["search", "research"]):
        np.testing.assert_allclose(adv, np.where(mask, -(student - direct[name]), 0.0), rtol=1e-5, atol=1e-6)
    assert not np.allclose(out[0][0], out[1][0])  # two teachers, two signals
    # one teacher for every domain (the single-teacher baseline): both rows get the search teacher's
    single = RoutedDistillation({"all": ts["search"]}, default="all")(trajs, None)
    np.testing.assert_allclose(single[1][0], out[0][0], rtol=1e-5, atol=1e-6)


def test_routed_distillation_refuses_unrouted_rows(teachers):
    _, ts = teachers
    with pytest.raises(UsageError, match="no 'domain' column"):
        RoutedDistillation(ts)([_traj(["a"], 0.0, task={"prompt": "q"})], None)
    with pytest.raises(UsageError, match="has no teacher"):
        RoutedDistillation(ts)([_traj(["a"], 0.0, task={"domain": "maths"})], None)
    with pytest.raises(UsageError, match="default teacher"):
        RoutedDistillation(ts, default="maths")
    with pytest.raises(UsageError, match="at least one teacher"):
        RoutedDistillation({})
