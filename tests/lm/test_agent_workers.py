"""The agent trainer on Ray rollout workers: sync equals the in-process loop bit for bit; async lags stay bounded."""

import jax
import numpy as np
import pytest

from longhorizon.lm.agents.async_rollout import Config
from longhorizon.lm.agents.rollout import AgentConfig
from longhorizon.lm.agents.trainer import AgentTrainer
from longhorizon.lm.agents.workers import AgentSource, WorkerRollout, in_process_equivalent
from longhorizon.lm.grpo import GRPOConfig
from longhorizon.lm.policy import tiny_random

pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance: keep these tests on one worker (--dist loadgroup)

AGENT = AgentConfig(max_turns=2, max_action_tokens=12, max_context_tokens=768, tool_format="tags", describe_tools=False,
                    length_bucket=256)
GRPO = GRPOConfig(lr_scheduler_type="constant", num_generations=2, learning_rate=1e-3, batch_multiple=4)


@pytest.fixture(scope="module")
def tiny():
    return tiny_random()


def _rows():
    from longhorizon.lm.agents import envs

    return envs.get("research").make_tasks(4, seed=0, items=2)


def _trainer(tiny, rollout_config: Config | None):
    from longhorizon.lm.agents.envs import environment_class

    trainer = AgentTrainer(tiny.cfg, tiny.params, tiny.tokenizer, GRPO, AGENT, environment_class("research"), seed=0)
    if rollout_config is not None:
        source = AgentSource(tiny.cfg, tiny.tokenizer, "research", trainer.agent)
        trainer.rollout = WorkerRollout(source, rollout_config, GRPO.num_generations)
    return trainer


@pytest.mark.slow
def test_the_in_process_request_split_is_what_sync_workers_compute(tiny):
    source = AgentSource(tiny.cfg, tiny.tokenizer, "research", AGENT)
    rollout = WorkerRollout(source, Config(actors=0, requests_per_batch=2), 2)
    key = jax.random.PRNGKey(3)
    got = rollout.run(tiny.params, _rows()[:2], 2, key, version=0)
    want = in_process_equivalent(source, tiny.params, _rows()[:2], 2, key)
    assert [t.group for t in got] == [0, 0, 1, 1] == [t.group for t in want]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.sequences[0].tokens, b.sequences[0].tokens)
        np.testing.assert_array_equal(a.sequences[0].logprobs, b.sequences[0].logprobs)


@pytest.mark.slow
def test_sync_workers_train_bit_identically_to_the_in_process_loop(tiny, ray_session):
    here, ray = _trainer(tiny, Config(actors=0, requests_per_batch=2)), _trainer(tiny, Config(actors=1, requests_per_batch=2))
    try:
        for step in range(2):
            rows = _rows()[2 * step: 2 * step + 2]
            m_here, m_ray = here.step(rows), ray.step(rows)
            assert m_here["loss"] == m_ray["loss"] and m_here["reward"] == m_ray["reward"]
        for a, b in zip(jax.tree_util.tree_leaves(here.params), jax.tree_util.tree_leaves(ray.params)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    finally:
        ray.close()


@pytest.mark.slow
def test_async_workers_pull_rows_ahead_and_stay_within_the_staleness_bound(tiny, ray_session):
    from longhorizon.lm import samplers

    sampler = samplers.ShuffledPool(tuple(_rows()), seed=0).build()
    trainer = _trainer(tiny, None)
    source = AgentSource(tiny.cfg, tiny.tokenizer, "research", trainer.agent)
    count = iter(range(1000))
    trainer.rollout = WorkerRollout(source, Config(actors=2, mode="async", max_staleness=1, requests_per_batch=2),
                                    GRPO.num_generations, pull=lambda: (sampler.sample(2)[0], [next(count), next(count)]))
    try:
        assert trainer.samples_itself
        lags = []
        for _ in range(4):
            metrics = trainer.step([])
            lags.append(metrics["lag_max"])
            assert metrics["generations"] > 0 and np.isfinite(metrics["loss"])
        assert max(lags) <= 1 and trainer.version == 4
        assert metrics["generations"] == 4 * 2 * GRPO.num_generations  # nothing double-counted
    finally:
        trainer.close()
