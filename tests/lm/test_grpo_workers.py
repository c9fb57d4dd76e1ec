"""Single-turn GRPO on rollout workers (lm.grpo_workers): sync equals the in-process trainer bit for bit; async
batches stay within the staleness bound, and a stale batch is corrected by the learner's own log-probabilities."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from longhorizon.lm.agents.async_rollout import Config
from longhorizon.lm.grpo import GRPOConfig, GRPOTrainer, completion_logprobs
from longhorizon.lm.grpo_workers import CompletionSource, GRPOWorkers
from longhorizon.lm.policy import tiny_random
from longhorizon.lm.tasks import make_problems

pytestmark = pytest.mark.xdist_group("ray")  # one Ray instance: keep these tests on one worker (--dist loadgroup)

GRPO = GRPOConfig(lr_scheduler_type="constant", num_generations=4, max_prompt_length=32, max_completion_length=8,
                  learning_rate=1e-3, loss_type="dr_grpo")


@pytest.fixture(scope="module")
def tiny():
    return tiny_random()


def _reward(problem, text):
    return float(len(text) % 3)  # varies within groups, so every step updates the weights


def _trainer(tiny, workers: Config | None = None, pull=None):
    trainer = GRPOTrainer(tiny.cfg, tiny.params, tiny.tokenizer, GRPO, seed=0, reward_fn=_reward)
    if workers is not None:
        trainer.workers = GRPOWorkers(CompletionSource(tiny.cfg, tiny.tokenizer, GRPO), workers, pull)
    return trainer


def _problems(step):
    return make_problems("chain", 1, 2, seed=step)


def _same_run(here, there, steps=2):
    for step in range(steps):
        a, b = here.step(_problems(step)), there.step(_problems(step))
        assert a["loss"] == b["loss"] and a["reward"] == b["reward"] and a["generated_tokens"] == b["generated_tokens"]
    for x, y in zip(jax.tree_util.tree_leaves(here.params), jax.tree_util.tree_leaves(there.params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    return b


def test_sync_workers_in_this_process_train_bit_identically_to_the_trainer(tiny):
    workers = _trainer(tiny, Config(actors=0))
    last = _same_run(_trainer(tiny), workers)
    assert last["staleness"] == 0 and "rollout_is_weight" not in last  # the sampler's log-probs are pi_old
    assert workers.workers.version == 1  # two steps: the starting weights, then the first update's


@pytest.mark.slow
def test_sync_workers_on_ray_train_bit_identically_to_the_trainer(tiny, ray_session):
    workers = _trainer(tiny, Config(actors=1))
    try:
        _same_run(_trainer(tiny), workers)
    finally:
        workers.close()


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_the_run_stays_bit_identical(tiny, ray_session):
    """Sync, one actor: its process is killed between two steps; the second step's request meets the dead actor, a
    new actor samples it again with the same parameters and key, and the run still equals the trainer's."""
    import os
    import signal

    here, there = _trainer(tiny), _trainer(tiny, Config(actors=1))
    try:
        for step in range(2):
            if step == 1:
                os.kill(there.workers.rollouts.actor_pids()[0], signal.SIGKILL)
            a, b = here.step(_problems(step)), there.step(_problems(step))
            assert a["loss"] == b["loss"] and a["generated_tokens"] == b["generated_tokens"]
        assert (b["worker_restarts"], b["worker_retries"]) == (1, 1)
        for x, y in zip(jax.tree_util.tree_leaves(here.params), jax.tree_util.tree_leaves(there.params)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    finally:
        there.close()


@pytest.mark.slow
def test_async_workers_stay_within_the_bound_and_a_stale_batch_is_corrected(tiny, ray_session, monkeypatch):
    """Two workers, max staleness 1: every batch is at most one version old; where one is, the update's old_logp are
    the current weights' log-probs of the sampled tokens, each weighted by min(exp(old - mu), cap)."""
    steps = iter(range(1000))

    def pull():
        problems = _problems(next(steps))
        trainer.key, key = jax.random.split(trainer.key)
        return problems, None, np.asarray(key)

    trainer = _trainer(tiny, Config(actors=2, mode="async", max_staleness=1), pull)
    seen = {}
    update = trainer.updater

    def spy(params, opt_state, batch):
        seen.update({k: np.asarray(v) for k, v in batch.items()})
        seen["policy_logp"] = np.asarray(completion_logprobs(params, batch, model_cfg=tiny.cfg, temperature=1.0))
        return update(params, opt_state, batch)

    monkeypatch.setattr(trainer, "updater", spy)
    try:
        assert trainer.samples_itself
        lags = []
        for _ in range(5):
            seen.clear()
            metrics = trainer.step([])
            lags.append(metrics["staleness"])
            assert np.isfinite(metrics["loss"])
            if metrics["staleness"]:
                on = seen["mask"] > 0
                np.testing.assert_allclose(seen["old_logp"][on], seen["policy_logp"][on], atol=1e-5)
                assert np.all(seen["rollout_weight"][on] <= GRPO.rollout_is_cap)
                assert metrics["rollout_logp_gap"] > 0
        assert max(lags) == 1 and trainer.workers.last_info["staleness_max"] <= 1
    finally:
        trainer.close()


@pytest.mark.slow
def test_lm_rl_with_async_workers_records_its_staleness(tmp_path, ray_session):
    """`lm rl --actors 2 --mode async --max-staleness 1` from a tiny `lm sft` policy: every step's row records its
    batch's lag (at most 1), config.json the workers, and config.json the workers."""
    import json

    from typer.testing import CliRunner

    from test_lm_cli import TINY, _app

    app, runner, base, run = _app(), CliRunner(), tmp_path / "base", tmp_path / "rl"
    r = runner.invoke(app, ["lm", "sft", "--out", str(base), "--steps", "2", "--batch-size", "8", "--horizons", "1",
                            "--eval-horizons", "1", "--eval-problems", "4", *TINY])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["lm", "rl", "--init", str(base), "--out", str(run), "--steps", "4", "--horizons", "1-2",
                            "--prompts-per-step", "2", "--num-generations", "4", "--learning-rate", "1e-3",
                            "--eval-horizons", "1", "--eval-problems", "4", "--actors", "2", "--mode", "async",
                            "--max-staleness", "1"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][1:]
    assert [row["step"] for row in rows] == [1, 2, 3, 4] and all(0 <= row["staleness"] <= 1 for row in rows)
    config = json.loads((run / "config.json").read_text())
    assert config["workers"]["mode"] == "async" and config["workers"]["max_staleness"] == 1
