"""The agent trainer: credit by hand, packing onto action tokens, the decoupled correction, one real step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm import grpo
from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.credit import token_advantages
from longhorizon.lm.agents.trainer import AgentTrainer, CreditConfig, learning_rewards, per_turn_advantages
from longhorizon.lm.agents.trajectory import TokenSequence, Trajectory, Turn
from longhorizon.lm.policy import tiny_random


def _traj(group, reward, n_turns, milestones=None, version=0, terms=None):
    turns = [Turn(action="a", info={"milestones": (milestones or [[0.0]] * n_turns)[t]}) for t in range(n_turns)]
    # prompt (2 tokens), then per turn: 2 action tokens and 1 observation token
    turn_ids = [-1, -1] + [t for t in range(n_turns) for _ in range(3)]
    mask = [False, False] + [m for _ in range(n_turns) for m in (True, True, False)]
    tokens = list(range(3, 3 + len(turn_ids)))
    logp = [-1.0 if m else 0.0 for m in mask]
    return Trajectory(group=group, sequences=[TokenSequence(tokens, mask, logp, turn_ids)], turns=turns, reward=reward,
                      reward_terms=terms or {}, version=version)


def test_trajectory_credit_is_the_group_normalised_outcome_on_every_turn():
    trajs = [_traj(0, 1.0, 2), _traj(0, 0.0, 3), _traj(1, 2.0, 1), _traj(1, 2.0, 1)]
    adv = per_turn_advantages(trajs, CreditConfig(), "none")
    # group 0: mean 0.5 -> +0.5, -0.5 ; group 1: equal rewards -> 0
    assert [a.tolist() for a in adv] == [[0.5, 0.5], [-0.5, -0.5, -0.5], [0.0], [0.0]]


def test_eapo_discounts_the_outcome_geometrically_by_rounds_to_go():
    trajs = [_traj(0, 1.0, 3), _traj(0, 0.0, 3)]
    adv = per_turn_advantages(trajs, CreditConfig(credit="eapo", gamma=0.5), "none")
    # returns per turn: [0.25, 0.5, 1] and [0, 0, 0]; group mean over all 6 turn values = 1.75 / 6
    m = 1.75 / 6
    np.testing.assert_allclose(adv[0], [0.25 - m, 0.5 - m, 1.0 - m])
    np.testing.assert_allclose(adv[1], [-m, -m, -m])


def test_turn_credit_adds_milestone_bonuses_as_returns_to_go():
    # trajectory 0 reaches its milestone at turn 1 (of 3): rewards [0, 0.5, 0] + outcome 1 at the end
    t0 = _traj(0, 1.0, 3, milestones=[[0.0], [1.0], [1.0]])
    t1 = _traj(0, 0.0, 3)
    adv = per_turn_advantages([t0, t1], CreditConfig(credit="turn", milestone_bonus=0.5), "none")
    g0 = [1.5, 1.5, 1.0]  # returns-to-go with gamma 1
    m = sum(g0) / 6
    np.testing.assert_allclose(adv[0], np.array(g0) - m)
    np.testing.assert_allclose(adv[1], [-m] * 3)


def test_trajectory_credit_adds_milestone_rewards_to_the_outcome():
    t0 = _traj(0, 1.0, 2, milestones=[[1.0, 0.0], [1.0, 1.0]])  # two milestones, at turns 0 and 1
    t1 = _traj(0, 1.0, 2)
    adv = per_turn_advantages([t0, t1], CreditConfig(milestone_bonus=0.25), "none")
    np.testing.assert_allclose(adv[0], [0.25, 0.25])  # totals 1.5 and 1.0, mean 1.25
    np.testing.assert_allclose(adv[1], [-0.25, -0.25])


def test_reward_weights_combine_terms_and_name_missing_ones():
    t = _traj(0, 9.0, 1, terms={"format": 1.0, "outcome": 1.0, "cost": 0.4})
    weighted = CreditConfig(reward_weights=(("format", 1.0), ("outcome", 1.0), ("cost", -0.5)))
    assert learning_rewards([t], weighted)[0] == pytest.approx([1.8])
    assert learning_rewards([t], CreditConfig())[0] == pytest.approx([9.0])
    with pytest.raises(UsageError, match="latency"):
        learning_rewards([t], CreditConfig(reward_weights=(("latency", 1.0),)))


# ----------------------------------------------------------------------------- packing and the update


@pytest.fixture(scope="module")
def tiny():
    return tiny_random()


class Env:
    def reset(self, **_):
        self.reward = 0.0

    def noop(self) -> str:
        """Do nothing."""
        return ""


def _trainer(tiny, **grpo_kw):
    cfg = grpo.GRPOConfig(lr_scheduler_type="constant", num_generations=2, learning_rate=1e-3, batch_multiple=4, **grpo_kw)
    agent = AgentConfig(max_turns=2, max_action_tokens=8, max_context_tokens=256, tool_format="tags",
                        describe_tools=False, length_bucket=16)
    return AgentTrainer(tiny.cfg, tiny.params, tiny.tokenizer, cfg, agent, Env, seed=0)


def test_packing_puts_exactly_the_action_tokens_in_the_loss(tiny):
    trainer = _trainer(tiny)
    trajs = [_traj(0, 1.0, 2), _traj(0, 0.0, 3)]
    rows = [(i, t.sequences[0], a) for i, t in enumerate(trajs)
            for a in token_advantages(t, np.full(t.n_turns, 1.0 + i))]
    batch, n = trainer._pack(rows, np.zeros(2, int))
    assert n == 2 and batch["tokens"].shape[0] == 4 and batch["tokens"].shape[1] % 16 == 0
    got = sorted(np.asarray(batch["mask"]).sum(1).tolist())
    assert got == [0, 0, 4, 6]  # two filler rows, then 2 and 3 turns of 2 action tokens
    for j in range(4):
        m = np.asarray(batch["mask"][j]) > 0
        tok = np.asarray(batch["tokens"][j])
        if m.any():  # the mask sits on next-token targets that are action tokens (logprob -1 by construction)
            np.testing.assert_allclose(np.asarray(batch["old_logp"][j])[m], -1.0)
            seq = next(t.sequences[0] for t in trajs if t.sequences[0].action_mask.sum() == m.sum())
            np.testing.assert_array_equal(tok[1:][m], seq.tokens[seq.action_mask])
            adv = np.asarray(batch["advantages"][j])[m]
            assert len(set(adv.tolist())) == 1  # one value per trajectory here (1 or 2)


def test_gradient_accumulation_pads_per_micro_batch_and_takes_the_same_step(tiny):
    """Two micro-batches of a dr_grpo update (its normaliser |m| L per micro-batch, averaged over micro-batches, is
    the whole batch's B L, with no filler rows) give the gradient of one; the rows are padded to the batch multiple
    once, not once per micro-batch (4 episodes: 4 rows either way, not 8)."""
    trajs = [_traj(0, 1.0, 2), _traj(0, 0.0, 3), _traj(1, 1.0, 1), _traj(1, 0.0, 2)]
    rows = [(i, t.sequences[0], a) for i, t in enumerate(trajs)
            for a in token_advantages(t, np.full(t.n_turns, 1.0 - 2 * (i % 2)))]
    one = _trainer(tiny, loss_type="dr_grpo")
    two = _trainer(tiny, loss_type="dr_grpo", gradient_accumulation_steps=2)
    b1, _ = one._pack(rows, np.zeros(4, int))
    b2, _ = two._pack(rows, np.zeros(4, int))
    assert b1["tokens"].shape[0] == b2["tokens"].shape[0] == 4
    _, _, m1 = one.updater(one.params, one.opt_state, b1)
    _, _, m2 = two.updater(two.params, two.opt_state, b2)
    assert float(m1["grad_norm"]) > 0
    assert float(m2["grad_norm"]) == pytest.approx(float(m1["grad_norm"]), rel=1e-5)
    assert float(m2["loss"]) == pytest.approx(float(m1["loss"]), rel=1e-5, abs=1e-7)


@pytest.mark.slow
def test_decoupled_correction_equals_the_weighted_clipped_objective(tiny):
    """Stale rows: old_logp -> pi_prox and A -> min(rho_clip, pi_prox/pi_behav) A; the loss is then AReaL's objective."""
    trainer = _trainer(tiny)
    trainer.counters["version"] = 1
    t = _traj(0, 1.0, 2, version=0)
    rows = [(0, t.sequences[0], token_advantages(t, np.array([1.0, -1.0]))[0])]
    batch, _ = trainer._pack(rows, np.array([1]))
    plain, _ = trainer._pack(rows, np.array([0]))
    prox = grpo.completion_logprobs(trainer.params, plain, model_cfg=tiny.cfg, temperature=1.0)
    mask = np.asarray(plain["mask"]) > 0
    w = np.minimum(2.0, np.exp(np.asarray(prox) - np.asarray(plain["old_logp"])))
    np.testing.assert_allclose(np.asarray(batch["advantages"])[mask], (w * np.asarray(plain["advantages"]))[mask], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(batch["old_logp"])[mask], np.asarray(prox)[mask], rtol=1e-6)
    # the decoupled loss written out: -w * min(r A, clip(r) A), r = pi / pi_prox, at the current parameters r = 1
    logp = np.asarray(prox)
    r = np.exp(logp - np.asarray(prox))
    a = np.asarray(plain["advantages"])
    direct = (-(w * np.minimum(r * a, np.clip(r, 0.8, 1.2) * a)) * mask).sum() / mask.sum()
    loss, _ = grpo.grpo_loss(trainer.params, batch, jnp.asarray(mask.sum(), jnp.float32), model_cfg=tiny.cfg,
                             cfg=trainer.cfg, n_micro=1)
    np.testing.assert_allclose(float(loss), direct, rtol=1e-5)


def test_a_real_step_trains_and_reports(tiny):
    trainer = _trainer(tiny)
    before = [np.asarray(x).copy() for x in jax.tree_util.tree_leaves(trainer.params)]
    resets = iter(range(100))

    class Scored(Env):
        def reset(self, **_):
            self.reward = float(next(resets) % 2)  # members of a group differ, so advantages are not all 0

    trainer.rollout.factory = Scored
    metrics = trainer.step([{"prompt": "hi"}, {"prompt": "yo", "x": 1}])
    assert np.isfinite(metrics["loss"]) and metrics["version"] == 1 and trainer.version == 1
    assert metrics["generations"] == 4 and metrics["turns"] >= 1
    after = jax.tree_util.tree_leaves(trainer.params)
    assert not all(np.allclose(a, b) for a, b in zip(before, after))
    assert metrics["reward"] == 0.5 and metrics["reward_std"] > 0
    with pytest.raises(UsageError, match="newer than the learner"):
        trainer.learn([_traj(0, 1.0, 1, version=5), _traj(0, 0.0, 1, version=5)])
