"""The GRPO stack on the Llama-family decoder (grouped-query heads), and the TRL semantics of its config:
shared-prompt scoring and grouped decoding equal their per-row versions, several stop ids, GSPO's
sequence-level ratio by hand, TRL's ``reward_std`` and ``steps_per_generation``."""

import dataclasses
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from longhorizon.errors import UsageError
from longhorizon.lm import llama
from longhorizon.lm.generate import generate
from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer, log_importance_weights, mean_group_std, per_token_loss
from longhorizon.lm.model import shared_prompt_logprobs, token_logprobs
from longhorizon.lm.tasks import TaskConfig, make_problems
from longhorizon.lm.tokenizer import Tokenizer

from adam_steps import assert_adam_steps_close  # noqa: E402  (tests/lm/adam_steps.py)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "tiny-llama"  # 4 query heads, 2 kv heads


@pytest.fixture(scope="module")
def tiny():
    cfg = llama.config_from_hf(json.loads((FIXTURE / "config.json").read_text()))
    return cfg, llama.params_from_hf(load_file(FIXTURE / "model.safetensors"), cfg)


def _prompts(vocab: int, groups: int, length: int, seed: int):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, vocab, (groups, length)).astype(np.int32)
    valid = np.ones((groups, length), bool)
    valid[0, :2] = False  # a left-padded prompt
    return jnp.asarray(np.where(valid, tokens, 0)), jnp.asarray(valid)


@pytest.mark.slow
def test_shared_prompt_logprobs_equal_per_row_with_grouped_query_heads(tiny):
    cfg, params = tiny
    assert cfg.n_heads == 2 * cfg.n_kv_heads
    g, s, p, n = 2, 3, 6, 5
    prompt, prompt_valid = _prompts(cfg.vocab_size, g, p, 0)
    rng = np.random.default_rng(1)
    completion = jnp.asarray(rng.integers(3, cfg.vocab_size, (g * s, n)).astype(np.int32))
    completion_valid = jnp.asarray(np.arange(n)[None, :] < np.array([5, 3, 4, 5, 1, 2])[:, None])
    shared, shared_ent = shared_prompt_logprobs(params, cfg, prompt, prompt_valid, completion, completion_valid)
    rows = jnp.concatenate([jnp.repeat(prompt, s, 0), completion], axis=1)
    rows_valid = jnp.concatenate([jnp.repeat(prompt_valid, s, 0), completion_valid], axis=1)
    plain, plain_ent = token_logprobs(params, cfg, rows, rows_valid)
    mask = np.asarray(completion_valid)
    np.testing.assert_allclose(np.asarray(shared)[mask], np.asarray(plain[:, p - 1:])[mask], atol=2e-5)
    np.testing.assert_allclose(np.asarray(shared_ent)[mask], np.asarray(plain_ent[:, p - 1:])[mask], atol=2e-5)


@pytest.mark.slow
def test_grouped_decoding_equals_repeated_prompts_and_greedy_reference(tiny):
    cfg, params = tiny
    prompt, valid = _prompts(cfg.vocab_size, 2, 6, 2)
    grouped = generate(params, prompt, valid, jax.random.PRNGKey(0), cfg=cfg, max_new_tokens=6, temperature=0.0,
                       group_size=3, eos_ids=(-1,))
    repeated = generate(params, jnp.repeat(prompt, 3, 0), jnp.repeat(valid, 3, 0), jax.random.PRNGKey(0), cfg=cfg,
                        max_new_tokens=6, temperature=0.0, eos_ids=(-1,))
    np.testing.assert_array_equal(np.asarray(grouped.tokens), np.asarray(repeated.tokens))
    np.testing.assert_allclose(np.asarray(grouped.logprobs), np.asarray(repeated.logprobs), atol=2e-5)
    reference = np.asarray(llama.greedy_generate(params, cfg, prompt, valid, 6))  # the plain KV-cache decoder
    np.testing.assert_array_equal(np.asarray(grouped.tokens)[::3], reference)


def test_generation_stops_at_any_of_several_stop_ids(tiny):
    cfg, params = tiny
    prompt, valid = _prompts(cfg.vocab_size, 2, 6, 3)
    reference = np.asarray(llama.greedy_generate(params, cfg, prompt, valid, 6))
    stops = (int(reference[0, 1]), int(reference[1, 3]))  # row 0 stops at its 2nd token, row 1 by its 4th
    out = generate(params, prompt, valid, jax.random.PRNGKey(0), cfg=cfg, max_new_tokens=6, temperature=0.0,
                   eos_ids=stops, pad_id=0)
    first_stop = [next(i for i, t in enumerate(row) if t in stops) for row in reference]
    for row, last in enumerate(first_stop):
        assert np.asarray(out.valid)[row].tolist() == [i <= last for i in range(6)]
        np.testing.assert_array_equal(np.asarray(out.tokens)[row, : last + 1], reference[row, : last + 1])
        assert (np.asarray(out.tokens)[row, last + 1:] == 0).all()


def test_gspo_sequence_ratio_by_hand():
    """Sequence 0 has token log-ratios (0.1, 0.3) (valid) and a masked 5.0: log s_0 = 0.2.
    Sequence 1: (-0.4) alone: log s_1 = -0.4, below log(1 - 0.2) = -0.223, so a positive advantage is not clipped
    (min picks the unclipped term) and a negative one is."""
    old = jnp.zeros((2, 3))
    logp = jnp.array([[0.1, 0.3, 5.0], [-0.4, 0.0, 0.0]])
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(np.asarray(log_importance_weights(logp, old, mask, "sequence"))[:, 0], [0.2, -0.4], atol=1e-6)
    adv = jnp.array([[1.0] * 3, [-1.0] * 3])
    loss, ratio, _ = per_token_loss(logp, old, old, adv, epsilon=0.2, epsilon_high=0.2, beta=0.0, mask=mask,
                                    level="sequence")
    s0, s1 = math.exp(0.2), math.exp(-0.4)
    np.testing.assert_allclose(np.asarray(ratio), [[s0] * 3, [s1] * 3], rtol=1e-6)
    # A = +1, s0 = 1.221 > 1.2: min(s0, 1.2) = 1.2 -> loss -1.2; A = -1, s1 = 0.670: min(-0.670, -0.8) = -0.8 -> 0.8
    np.testing.assert_allclose(np.asarray(loss), [[-1.2] * 3, [0.8] * 3], rtol=1e-6)
    token_loss, token_ratio, _ = per_token_loss(logp, old, old, adv, epsilon=0.2, epsilon_high=0.2, beta=0.0)
    np.testing.assert_allclose(np.asarray(token_ratio)[0, :2], np.exp([0.1, 0.3]), rtol=1e-6)  # token level unchanged
    with pytest.raises(UsageError, match="importance_sampling_level"):
        GRPOConfig(lr_scheduler_type="constant", importance_sampling_level="tokens")


def test_reward_std_is_the_mean_within_group_std():
    # groups (1, 0) and (0.5, 0): unbiased stds sqrt(0.5) and sqrt(0.125); a group of one counts 0
    assert mean_group_std([1.0, 0.0, 0.5, 0.0], [0, 0, 1, 1]) == pytest.approx((math.sqrt(0.5) + math.sqrt(0.125)) / 2)
    assert mean_group_std([1.0, 0.0, 7.0], [0, 0, 1]) == pytest.approx(math.sqrt(0.5) / 2)


def test_steps_per_generation_has_trls_meaning():
    assert GRPOConfig(lr_scheduler_type="constant").optimizer_steps_per_generation == 1 and GRPOConfig(lr_scheduler_type="constant").learning_rate == 1e-6  # TRL's defaults
    assert GRPOConfig(lr_scheduler_type="constant", gradient_accumulation_steps=4).generation_micro_batches == 4
    assert GRPOConfig(lr_scheduler_type="constant", gradient_accumulation_steps=2, steps_per_generation=6).optimizer_steps_per_generation == 3
    with pytest.raises(UsageError, match="multiple of gradient_accumulation_steps"):
        GRPOConfig(lr_scheduler_type="constant", gradient_accumulation_steps=2, steps_per_generation=3)


@pytest.mark.slow
def test_trainer_steps_a_llama_policy(tiny):
    """One generation batch of 4 groups of 4 on the tiny Llama (character tokenizer: the trainer needs only
    encode_prompts/decode_batch/eos_ids/pad_id), split into 4 micro-batches = 2 optimiser steps of 2."""
    cfg, params = tiny
    task = TaskConfig(digits=1, operators="+", names="sequential", fixed_width=False)
    problems = make_problems("chain", [1], 4, 0, task)
    grpo = GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=12, max_completion_length=6, learning_rate=1e-3,
                      steps_per_generation=4, gradient_accumulation_steps=2, batch_multiple=4,
                      importance_sampling_level="sequence")
    trainer = GRPOTrainer(cfg, params, Tokenizer(), grpo, seed=0, reward_fn=lambda p, text: float(len(text) % 2))
    before = jax.tree_util.tree_leaves(trainer.params)[0].copy()
    m = trainer.step(problems)
    assert trainer.counters["optimizer_steps"] == 2 and m["generations"] == 16
    assert np.isfinite(m["loss"]) and m["ratio"] == pytest.approx(1.0, abs=0.05)  # pi_old is the sampler's exact pi
    assert not np.allclose(np.asarray(before), np.asarray(jax.tree_util.tree_leaves(trainer.params)[0]))
    with pytest.raises(UsageError, match="exceed the model's context"):
        GRPOTrainer(cfg, params, Tokenizer(), GRPOConfig(lr_scheduler_type="constant", max_prompt_length=250, max_completion_length=10))


@pytest.mark.slow
@pytest.mark.parametrize("loss_type, share_prompts", [("dr_grpo", True), ("grpo", False), ("bnpo", True)])
def test_the_update_on_the_longest_completion_equals_the_update_on_max_completion_length(tiny, loss_type, share_prompts):
    """Bucketing drops only columns where no completion is valid, so the optimiser step is the same (dr_grpo still
    divides by max_completion_length, as TRL does), on 16 columns instead of 40."""
    from longhorizon.lm import grpo as G

    cfg, params = tiny
    problems = make_problems("chain", [1], 2, 0, TaskConfig(digits=1, operators="+", names="sequential", fixed_width=False))
    config = GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=12, max_completion_length=40,
                        learning_rate=1e-3, batch_multiple=4, loss_type=loss_type, share_prompts=share_prompts)
    trainer = GRPOTrainer(cfg, params, Tokenizer(), config, seed=0, reward_fn=lambda p, text: float(len(text) % 3))
    ro = trainer.rollout(problems)
    lengths = np.array([3, 9, 12, 5, 7, 11, 2, 10])  # the longest is 12 columns: bucket 16
    ro["valid"] = np.arange(40)[None] < lengths[:, None]
    ro["tokens"] = np.where(ro["valid"], ro["tokens"], Tokenizer().pad_id)
    ro["rewards"] = np.array([1.0, 0, 2, 1, 0, 0, 2, 1])
    adv, mask, keep = trainer.advantages(ro), ro["valid"].astype(np.float32), np.ones(8, bool)
    results = {}
    for bucket in (True, False):
        trainer.cfg = dataclasses.replace(config, bucket_completions=bucket)
        batch = trainer._train_batch(ro, adv, mask, keep)
        optimizer = G.optimizer_for(trainer.cfg)
        copy = jax.tree_util.tree_map(jnp.array, params)
        new, _, metrics = G.update(copy, optimizer.init(copy), batch, model_cfg=cfg, cfg=trainer.cfg, optimizer=optimizer)
        results[bucket] = (batch["mask"].shape[1], new, metrics)
    (width, bucketed, m1), (full, plain, m2) = results[True], results[False]
    assert (width, full) == (16, 40)
    for key in ("grad_norm", "ratio"):
        np.testing.assert_allclose(float(m1[key]), float(m2[key]), rtol=1e-5, err_msg=key)
    # at ratio 1 the loss is -mean(A) over tokens, ~0 here (group-centred advantages): its rounding (~1e-7) is
    # compared absolutely, against per-token losses of order 1
    np.testing.assert_allclose(float(m1["loss"]), float(m2["loss"]), rtol=0, atol=1e-6, err_msg="loss")
    assert float(m1["grad_norm"]) > 0
    assert_adam_steps_close(bucketed, plain, params, config.learning_rate)  # adam_steps.py says why


def test_bucket_widths_are_powers_of_two_capped_at_the_maximum():
    from longhorizon.lm.grpo import bucket_width

    assert [bucket_width(n, 48) for n in (1, 16, 17, 32, 33, 48)] == [16, 16, 32, 32, 48, 48]
    assert bucket_width(5, 8) == 8 and bucket_width(100, 512) == 128
