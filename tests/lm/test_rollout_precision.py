"""Low-precision rollouts (GRPOConfig.rollout_dtype): the truncated importance weights by hand, their place in the
loss by hand, and a trainer step whose bfloat16 sampler is corrected by the policy's own log-probabilities."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer, completion_loss, completion_logprobs, rollout_weights
from longhorizon.lm.policy import tiny_random
from longhorizon.lm.tasks import make_problems


def test_rollout_weights_by_hand():
    """pi_old = (0.5, 0.2, 0.9), mu = (0.25, 0.4, 0.1): ratios 2, 0.5, 9; cap 1.5 gives weights 1.5, 0.5, and the
    third token is outside the mask (weight 1, not counted): mean weight 1.0, half the tokens truncated, mean
    |log pi_old - log mu| = (log 2 + log 2) / 2."""
    old = np.log([[0.5, 0.2, 0.9]])
    mu = np.log([[0.25, 0.4, 0.1]])
    mask = np.array([[1.0, 1.0, 0.0]])
    weights, stats = rollout_weights(old, mu, mask, cap=1.5)
    np.testing.assert_allclose(weights, [[1.5, 0.5, 1.0]], rtol=1e-6)
    assert stats["rollout_is_weight"] == pytest.approx(1.0)
    assert stats["rollout_is_truncated"] == pytest.approx(0.5)
    assert stats["rollout_logp_gap"] == pytest.approx(math.log(2))


def test_the_weight_multiplies_each_tokens_loss_by_hand():
    """At ratio 1 (logp = old_logp) the clipped surrogate of a token is -A; with weights (2, 0.5), advantages 1 and
    bnpo's token mean the loss is -(2 + 0.5) / 2 = -1.25 (and -1 without the weights)."""
    cfg = GRPOConfig(lr_scheduler_type="constant", loss_type="bnpo", max_completion_length=2)
    logp = jnp.log(jnp.array([[0.3, 0.6]]))
    batch = {"mask": jnp.ones((1, 2)), "old_logp": logp, "ref_logp": logp, "advantages": jnp.ones((1, 2)),
             "rows": jnp.ones(1)}
    plain, _ = completion_loss(logp, jnp.zeros((1, 2)), batch, 2.0, cfg=cfg, n_micro=1)
    weighted, _ = completion_loss(logp, jnp.zeros((1, 2)), {**batch, "rollout_weight": jnp.array([[2.0, 0.5]])}, 2.0,
                                  cfg=cfg, n_micro=1)
    assert float(plain) == pytest.approx(-1.0) and float(weighted) == pytest.approx(-1.25)


def test_config_refuses_an_unknown_dtype_or_a_cap_below_one():
    with pytest.raises(UsageError, match="rollout_dtype='int4' is unknown"):
        GRPOConfig(rollout_dtype="int4")
    with pytest.raises(UsageError, match="rollout_is_cap=0.5 must be at least 1"):
        GRPOConfig(rollout_is_cap=0.5)


def test_a_bfloat16_sampler_is_corrected_by_the_policys_own_logprobs(monkeypatch):
    """tiny-random samples with a bfloat16 copy; the update's old_logp are the float32 policy's teacher-forced
    log-probs of the sampled tokens, and each token's weight is min(exp(old - mu), cap) with mu the sampler's."""
    policy = tiny_random()
    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=32, max_completion_length=8,
                     loss_type="dr_grpo", rollout_dtype="bfloat16", rollout_is_cap=2.0, learning_rate=1e-6)
    trainer = GRPOTrainer(policy.cfg, policy.params, policy.tokenizer, cfg, seed=0,
                          reward_fn=lambda problem, text: float(len(text) % 2))
    sampler_params, sampler_cfg = trainer.rollout_policy()
    assert sampler_cfg.dtype == "bfloat16" and sampler_params["embed"]["embedding"].dtype == jnp.bfloat16
    seen = {}
    update = trainer.updater

    def spy(params, opt_state, batch):
        seen.update({k: np.asarray(v) for k, v in batch.items()})
        seen["policy_logp"] = np.asarray(completion_logprobs(params, batch, model_cfg=policy.cfg, temperature=1.0))
        return update(params, opt_state, batch)

    monkeypatch.setattr(trainer, "updater", spy)
    metrics = trainer.step(make_problems("chain", 1, 4, seed=0))
    on = seen["mask"] > 0
    np.testing.assert_allclose(seen["old_logp"][on], seen["policy_logp"][on], atol=1e-5)
    assert 0 < metrics["rollout_logp_gap"] < 0.5  # bfloat16 rounds the weights: close to, not equal to, pi_old
    assert np.all(seen["rollout_weight"][on] <= 2.0) and np.all(seen["rollout_weight"][~on] == 1.0)
    assert metrics["rollout_is_weight"] == pytest.approx(float(seen["rollout_weight"][on].mean()), rel=1e-5)
    assert np.isfinite(metrics["loss"])


def test_float32_rollouts_sample_with_the_policy_itself():
    policy = tiny_random()
    trainer = GRPOTrainer(policy.cfg, policy.params, policy.tokenizer,
                          GRPOConfig(lr_scheduler_type="constant", max_prompt_length=32, max_completion_length=8))
    params, cfg = trainer.rollout_policy()
    assert params is trainer.params and cfg is policy.cfg and not trainer.low_precision_rollouts
