"""Where GRPO carries TRL's names it behaves as TRL does (issue 38.3), each against numbers computed by hand:
a linear learning-rate decay to 0 by default, unscored completions left out of their group, fully masked
rows counted in the `grpo` / `dr_grpo` averages, no reference copy at beta = 0, a shared prompt counted once."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from longhorizon.errors import UsageError
from longhorizon.lm.grpo import (GRPOConfig, GRPOTrainer, all_equal_groups, group_advantages, mean_group_std,
                                 optimizer_for, reduce_loss, rl_optimizer)
from longhorizon.lm.model import ModelConfig, init_params
from longhorizon.lm.tasks import TaskConfig, make_problems
from longhorizon.lm.tokenizer import Tokenizer

TOK = Tokenizer()
MCFG = ModelConfig(vocab_size=TOK.vocab_size, d_model=16, n_layers=1, n_heads=2, max_len=64)


def test_linear_decay_to_zero_by_hand():
    # Adam on a constant gradient moves each step by lr_t (m_hat / sqrt(v_hat) = 1); lr_t = 1 - t / 4
    opt = rl_optimizer(1.0, 0.0, 1e9, max_steps=4)
    w, state, moves = jnp.zeros(()), None, []
    state = opt.init(w)
    for _ in range(5):
        updates, state = opt.update(jnp.ones(()), state, w)
        new = optax.apply_updates(w, updates)
        moves.append(float(w - new))
        w = new
    np.testing.assert_allclose(moves, [1.0, 0.75, 0.5, 0.25, 0.0], atol=2e-5)  # Adam eps, float32


def test_the_schedule_spans_the_run_and_needs_its_length():
    assert GRPOConfig().lr_scheduler_type == "linear"  # TRL's default
    cfg = GRPOConfig(num_iterations=2, gradient_accumulation_steps=2, steps_per_generation=4).for_run(10)
    assert cfg.max_steps == 10 * 2 * 2  # 10 generation batches x 2 optimiser steps each x 2 iterations
    assert cfg.for_run(99).max_steps == 40  # a length already set is kept
    with pytest.raises(UsageError, match="max_steps is not set"):
        optimizer_for(GRPOConfig())
    with pytest.raises(UsageError, match="is unknown"):
        GRPOConfig(lr_scheduler_type="cosine")
    from longhorizon.lm.run import RLSpec

    spec = RLSpec(out="x", init=None, grpo=GRPOConfig(num_iterations=3), sampler=None, steps=7, prompts_per_step=1)
    assert spec.grpo.max_steps == 21


def test_an_unscored_completion_is_left_out_of_its_group():
    rewards = np.array([1.0, 0.0, np.nan, 1.0, 5.0, np.nan])
    groups = np.array([0, 0, 0, 0, 1, 1])
    # group 0 scores (1, 0, 1): mean 2/3; group 1 scores only 5: a group of one
    np.testing.assert_allclose(group_advantages(rewards, groups, "none"), [1 / 3, -2 / 3, 0, 1 / 3, 0, 0], atol=1e-7)
    std = math.sqrt(((1 / 3) ** 2 + (2 / 3) ** 2 + (1 / 3) ** 2) / 2)  # unbiased, over the 3 scored
    a = (1 / 3) / (std + 1e-4)
    np.testing.assert_allclose(group_advantages(rewards, groups, "group"), [a, -2 * a, 0, a, 0, 0], rtol=1e-6)
    assert mean_group_std(rewards, groups) == pytest.approx((std + 0.0) / 2)
    np.testing.assert_array_equal(all_equal_groups(np.array([1.0, np.nan, 1.0, np.nan, np.nan]), np.array([0, 0, 0, 1, 1])),
                                  [True] * 5)


def test_fully_masked_rows_count_in_grpo_and_dr_grpo_padding_rows_do_not():
    loss = jnp.array([[2.0, 4.0], [5.0, 5.0], [7.0, 7.0]])
    mask = jnp.array([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])  # row 1: a masked (truncated) completion; row 2: padding
    rows = jnp.array([1.0, 1.0, 0.0])
    # grpo: per-sequence means (3, 0) over the 2 real rows -> 1.5 (TRL); dr_grpo: 6 / (2 rows x 2 tokens) -> 1.5
    assert float(reduce_loss(loss, mask, "grpo", max_completion_length=2, total_tokens=2.0, rows=rows)) == pytest.approx(1.5)
    assert float(reduce_loss(loss, mask, "dr_grpo", max_completion_length=2, total_tokens=2.0, rows=rows)) == pytest.approx(1.5)
    # bnpo / dapo are per token: the masked row adds nothing either way
    assert float(reduce_loss(loss, mask, "bnpo", max_completion_length=2, total_tokens=2.0, rows=rows)) == pytest.approx(3.0)


@pytest.fixture(scope="module")
def params():
    return init_params(jax.random.PRNGKey(0), MCFG)


def test_no_reference_copy_at_beta_zero_and_a_shared_prompt_counted_once(params):
    cfg = GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=16, max_completion_length=4,
                     batch_multiple=4)
    trainer = GRPOTrainer(MCFG, params, TOK, cfg, seed=0, reward_fn=lambda p, t: float(len(t) % 2))
    assert trainer.ref_params is None
    assert GRPOTrainer(MCFG, params, TOK, GRPOConfig(lr_scheduler_type="constant", beta=0.04)).ref_params is not None
    problems = make_problems("chain", 1, 2, seed=0, cfg=TaskConfig(names="sequential"))
    ro = trainer.rollout(problems)
    assert ro["group_size"] == 4  # the prompt is shared by its group
    once = int(ro["prompt_valid"][::4].sum())  # each group's prompt once (the rows repeat it 4 times)
    assert once > 0 and trainer.counters["rollout_tokens"] == int(ro["valid"].sum()) + once
