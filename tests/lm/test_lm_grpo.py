"""GRPO family against hand-computed numbers on tiny batches."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from longhorizon.core.kl import kl_k1, kl_k2, kl_k3
from longhorizon.errors import UsageError
from longhorizon.lm.grpo import (
    GRPOConfig,
    GRPOTrainer,
    all_equal_groups,
    group_advantages,
    per_token_loss,
    reduce_loss,
    rl_optimizer,
    segment_advantages,
    update,
)
from longhorizon.lm.model import ModelConfig, init_params, token_logprobs
from longhorizon.lm.tasks import TaskConfig, make_problems, segment_ids
from longhorizon.lm.tokenizer import Tokenizer

# Two groups of two: rewards (1, 0) and (0.5, 0).
REWARDS = np.array([1.0, 0.0, 0.5, 0.0])
GROUPS = np.array([0, 0, 1, 1])


def test_advantages_each_scale_rewards_hand_computed():
    # group means 0.5 and 0.25; unbiased group stds sqrt(0.5) and sqrt(0.125)
    np.testing.assert_allclose(group_advantages(REWARDS, GROUPS, "none"), [0.5, -0.5, 0.25, -0.25], atol=1e-7)
    g0 = 0.5 / (math.sqrt(0.5) + 1e-4)
    g1 = 0.25 / (math.sqrt(0.125) + 1e-4)
    np.testing.assert_allclose(group_advantages(REWARDS, GROUPS, "group"), [g0, -g0, g1, -g1], rtol=1e-6)
    # batch: mean 0.375, unbiased std sqrt(0.6875 / 3)
    s = math.sqrt(0.6875 / 3) + 1e-4
    np.testing.assert_allclose(group_advantages(REWARDS, GROUPS, "batch"), [0.5 / s, -0.5 / s, 0.25 / s, -0.25 / s], rtol=1e-6)


def test_advantages_ragged_groups_and_degenerate_groups():
    rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.3])
    groups = np.array([5, 5, 5, 9, 9, 9, 2])  # sizes 3, 3, 1
    adv = group_advantages(rewards, groups, "none")
    np.testing.assert_allclose(adv, [2 / 3, -1 / 3, -1 / 3, 0, 0, 0, 0], atol=1e-7)
    assert all_equal_groups(rewards, groups).tolist() == [False] * 3 + [True] * 4


def test_kl_estimators_hand_computed():
    logp, ref = jnp.log(0.5), jnp.log(0.25)
    assert float(kl_k1(logp, ref)) == pytest.approx(math.log(2))
    assert float(kl_k2(logp, ref)) == pytest.approx(0.5 * math.log(2) ** 2)
    assert float(kl_k3(logp, ref)) == pytest.approx(0.5 + math.log(2) - 1)
    assert float(kl_k3(ref, ref)) == 0.0


def test_per_token_loss_clipping():
    logp = jnp.log(jnp.array([1.5, 1.5, 0.5, 0.5]))
    old = jnp.zeros(4)
    adv = jnp.array([1.0, -1.0, 1.0, -1.0])
    loss, ratio, _ = per_token_loss(logp, old, old, adv, epsilon=0.2, epsilon_high=0.2, beta=0.0)
    # A>0: -min(r, clip(r)) ; A<0: -min(-r, -clip(r)) = max(r, clip(r))
    np.testing.assert_allclose(loss, [-1.2, 1.5, -0.5, 0.8], rtol=1e-6)
    loss_high, _, _ = per_token_loss(logp, old, old, adv, epsilon=0.2, epsilon_high=0.28, beta=0.0)
    np.testing.assert_allclose(loss_high[0], -1.28, rtol=1e-6)
    # beta adds beta * k3 per token
    ref = jnp.log(jnp.full(4, 0.25))
    loss_kl, _, kl = per_token_loss(logp, old, ref, adv, epsilon=0.2, epsilon_high=0.2, beta=0.1)
    np.testing.assert_allclose(loss_kl - loss, 0.1 * kl, rtol=1e-6, atol=1e-7)


# Per-token losses and a mask of lengths 1, 2, 3, 2: masked row sums 1, 9, 24, 21 (total 55, 8 tokens).
TOKEN_LOSS = jnp.arange(1.0, 13.0).reshape(4, 3)
MASK = jnp.array([[1, 0, 0], [1, 1, 0], [1, 1, 1], [1, 1, 0]], jnp.float32)
HAND = {  # loss_type -> (one micro-batch, two micro-batches of rows {0,1} and {2,3})
    "grpo": (24 / 4, ((1 + 4.5) / 2 + (8 + 10.5) / 2) / 2),
    "bnpo": (55 / 8, (10 / 3 + 45 / 5) / 2),
    "dapo": (55 / 8, 55 / 8),
    "dr_grpo": (55 / 12, (10 / 6 + 45 / 6) / 2),
}


@pytest.mark.parametrize("loss_type", sorted(HAND))
def test_loss_type_normalisation_hand_computed(loss_type):
    one, two = HAND[loss_type]
    total = MASK.sum()
    got = reduce_loss(TOKEN_LOSS, MASK, loss_type, max_completion_length=3, total_tokens=total)
    assert float(got) == pytest.approx(one)
    got = sum(
        reduce_loss(TOKEN_LOSS[s], MASK[s], loss_type, max_completion_length=3, total_tokens=total, n_micro=2)
        for s in (slice(0, 2), slice(2, 4))
    )
    assert float(got) == pytest.approx(two)


def test_token_mask_excludes_tokens_and_dropped_rows():
    huge = TOKEN_LOSS.at[0, 1:].set(1e6)  # masked-out tokens may hold anything
    for lt in HAND:
        assert float(reduce_loss(huge, MASK, lt, max_completion_length=3, total_tokens=8.0)) == pytest.approx(HAND[lt][0])
    # A row with an all-zero mask (a dropped group) does not count as a sequence.
    padded_loss = jnp.concatenate([TOKEN_LOSS, jnp.full((1, 3), 7.0)])
    padded_mask = jnp.concatenate([MASK, jnp.zeros((1, 3))])
    for lt in HAND:
        got = reduce_loss(padded_loss, padded_mask, lt, max_completion_length=3, total_tokens=8.0)
        assert float(got) == pytest.approx(HAND[lt][0])


def test_segment_advantages_hand_computed():
    seg_r = np.array([[1.0, 0.0], [0.0, 0.0]])
    ids = np.array([[0, 0, 1, 1, -1], [0, 0, 1, 1, -1]])
    adv = segment_advantages(seg_r, ids, np.array([0, 0]), np.array([0.7, -0.7]), "none")
    np.testing.assert_allclose(adv, [[0.5, 0.5, 0, 0, 0.7], [-0.5, -0.5, 0, 0, -0.7]], atol=1e-7)
    assert segment_ids("b=1;c=2;", 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_config_validation():
    with pytest.raises(UsageError):
        GRPOConfig(lr_scheduler_type="constant", loss_type="ppo")
    with pytest.raises(UsageError):
        GRPOConfig(lr_scheduler_type="constant", scale_rewards="std")
    with pytest.raises(UsageError):
        GRPOConfig(lr_scheduler_type="constant", num_generations=1)


# ----------------------------------------------------------------------------- model-level checks

TOK = Tokenizer()
MCFG = ModelConfig(vocab_size=TOK.vocab_size, d_model=16, n_layers=1, n_heads=2)


@pytest.fixture(scope="module")
def params():
    return init_params(jax.random.PRNGKey(0), MCFG)


@pytest.mark.slow
@pytest.mark.parametrize("loss_type,n_micro", [("bnpo", 2), ("dr_grpo", 1)])  # reduce_loss covers the rest
def test_update_loss_equals_hand_value_at_ratio_one(params, loss_type, n_micro):
    """With old = current log-probs and beta = 0, l_t = -A_t: the step's loss is the reduction of -A."""
    prompt, pvalid = TOK.encode_prompts(["a=1;"] * 4, 6)
    comp, cvalid = TOK.encode_completions(["", "b", "b=", "b"], 3)
    tokens = jnp.concatenate([prompt, comp], 1)
    valid = jnp.concatenate([pvalid, cvalid], 1)
    logp, _ = token_logprobs(params, MCFG, tokens, valid)
    old = logp[:, 5:]
    mask = MASK  # completion lengths 1, 2, 3, 2 with EOS
    batch = {"tokens": tokens, "valid": valid, "mask": mask, "old_logp": old, "ref_logp": old, "advantages": -TOKEN_LOSS}
    expected = HAND[loss_type][n_micro - 1]
    cfg = GRPOConfig(lr_scheduler_type="constant", loss_type=loss_type, gradient_accumulation_steps=n_micro, max_completion_length=3)
    opt = rl_optimizer(1e-3, 0.0, 1.0)
    p = jax.tree_util.tree_map(jnp.array, params)
    _, _, m = update(p, opt.init(p), batch, model_cfg=MCFG, cfg=cfg, optimizer=opt)
    assert float(m["loss"]) == pytest.approx(expected, rel=1e-5)
    assert float(m["ratio"]) == pytest.approx(1.0, abs=1e-6)
    assert "kl" not in m  # beta = 0 and no reference kept: no KL is reported (a 0 would claim one was measured)


def test_reference_kl_at_beta_zero_is_logged_by_hand_and_leaves_the_loss(params):
    """reference_kl at beta = 0: ``kl`` is the k3 mean to the reference's log-probs, the loss is unchanged.
    With log pi_ref = log pi_theta - 0.5 on every token, k3 = e^-0.5 + 0.5 - 1 = 0.1065307 per token."""
    prompt, pvalid = TOK.encode_prompts(["a=1;"] * 4, 6)
    comp, cvalid = TOK.encode_completions(["", "b", "b=", "b"], 3)
    tokens, valid = jnp.concatenate([prompt, comp], 1), jnp.concatenate([pvalid, cvalid], 1)
    old = token_logprobs(params, MCFG, tokens, valid)[0][:, 5:]
    batch = {"tokens": tokens, "valid": valid, "mask": MASK, "old_logp": old, "ref_logp": old - 0.5,
             "advantages": -TOKEN_LOSS}
    opt = rl_optimizer(1e-3, 0.0, 1.0)
    got = {}
    for logged in (False, True):
        cfg = GRPOConfig(lr_scheduler_type="constant", loss_type="bnpo", max_completion_length=3, reference_kl=logged)
        p = jax.tree_util.tree_map(jnp.array, params)
        got[logged] = update(p, opt.init(p), batch, model_cfg=MCFG, cfg=cfg, optimizer=opt)[2]
    assert float(got[True]["kl"]) == pytest.approx(np.exp(-0.5) - 0.5, rel=1e-5)
    assert "kl" not in got[False]
    assert float(got[True]["loss"]) == pytest.approx(float(got[False]["loss"]), rel=1e-6) == pytest.approx(HAND["bnpo"][0], rel=1e-5)
    trainer = GRPOTrainer(MCFG, params, TOK, GRPOConfig(lr_scheduler_type="constant", reference_kl=True))
    assert trainer.ref_params is not None  # kept (and saved by lm rl) only because the KL to it is logged


@pytest.mark.slow
def test_trainer_step_dynamic_sampling_and_token_accounting(params):
    tcfg = TaskConfig(names="sequential")
    problems = make_problems("chain", 1, 4, seed=0, cfg=tcfg)
    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=16, max_completion_length=8, dynamic_sampling=True,
                     beta=0.04, batch_multiple=16)
    trainer = GRPOTrainer(MCFG, params, TOK, cfg, seed=0)
    m = trainer.step(problems)
    # An untrained model never solves these: every group is all-zero and is dropped.
    assert m["groups"] == 4 and m["groups_all_equal"] == 4 and m["groups_dropped"] == 4
    assert m["optimizer_steps"] == 0 and "loss" not in m
    assert m["generated_tokens"] > 0 and m["rollout_tokens"] > m["generated_tokens"]
    # Force signal: a reward that depends on the sample, then an update happens and KL is reported.
    trainer.cfg = cfg = GRPOConfig(**{**cfg.__dict__, "dynamic_sampling": False})
    m = trainer.step(problems, group_sizes=[2, 3, 4, 5])
    assert m["optimizer_steps"] == 1 and np.isfinite(m["loss"]) and m["kl"] >= 0.0
    assert m["update_tokens"] > 0 and m["ref_tokens"] > 0


def test_grpo_learns_a_trivial_preference(params):
    """End to end: reward 1 when the completion starts with a digit (base rate ~ 10/49) is learned."""
    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=8, max_prompt_length=16, max_completion_length=4, learning_rate=1e-2,
                     loss_type="dr_grpo", scale_rewards="none")
    trainer = GRPOTrainer(MCFG, params, TOK, cfg, seed=0, reward_fn=lambda p, t: float(t[:1].isdigit()))
    problems = make_problems("chain", 1, 8, seed=0)
    rewards = [trainer.step(problems)["reward"] for _ in range(30)]
    assert np.mean(rewards[:3]) < 0.35 and np.mean(rewards[-5:]) > 0.6, rewards


@pytest.mark.slow
@pytest.mark.parametrize("dynamic_sampling", [False, True])
def test_update_with_shared_prompts_equals_per_row_update(params, dynamic_sampling):
    """The same rollout learned from in the shared-prompt layout and in the per-row layout gives the
    same loss and the same parameters (float summation order aside), dropped groups included."""
    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=16, max_completion_length=6, beta=0.04, batch_multiple=8,
                     dynamic_sampling=dynamic_sampling, learning_rate=1e-2)
    problems = make_problems("chain", 1, 3, seed=0, cfg=TaskConfig(names="sequential"))
    trainer = GRPOTrainer(MCFG, params, TOK, cfg, seed=0, reward_fn=lambda p, t: float(len(t) % 2))
    ro = trainer.rollout(problems)
    assert ro["group_size"] == 4 and len(ro["rows"]) == 12
    adv, mask = trainer.advantages(ro), ro["valid"].astype(np.float32)
    keep = ~all_equal_groups(ro["rewards"], ro["group_ids"]) if dynamic_sampling else np.ones(12, bool)
    assert keep.any() and (keep.all() != dynamic_sampling or keep.all())
    shared = trainer._train_batch(ro, adv, mask, keep)
    per_row = trainer._train_batch({**ro, "group_size": 0}, adv, mask, keep)
    assert "prompt" in shared and "tokens" in per_row
    assert shared["prompt"].shape[0] * 4 == shared["completion"].shape[0]
    opt = optax.sgd(1.0)  # parameters move by the gradient itself: compares gradients, not Adam's signs
    results = []
    for batch in (shared, per_row):
        p = jax.tree_util.tree_map(jnp.array, params)
        results.append(update(p, opt.init(p), batch, model_cfg=MCFG, cfg=cfg, optimizer=opt))
    (p1, _, m1), (p2, _, m2) = results
    assert float(m1["loss"]) == pytest.approx(float(m2["loss"]), rel=1e-5, abs=1e-7)
    assert float(m1["kl"]) == pytest.approx(float(m2["kl"]), abs=1e-6)
    assert float(m1["grad_norm"]) > 1e-3
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
        np.testing.assert_allclose(a, b, atol=1e-5)
