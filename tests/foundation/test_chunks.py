"""Every update runs: for any (total steps, chunks) pair the runner runs exactly
``total_steps // steps_per_update`` updates, so a learning-rate schedule reaches its end.

The hypothesis test drives the real runner with a counting algorithm (this module follows the
algorithm protocol): each update takes one SGD step of size lr_t on w with gradient -1, where lr_t
decays linearly from 1 to 0 over the planned number of updates N. After N updates, exactly once
each, w = sum_{t<N} (1 - t/N) = (N + 1) / 2 and the schedule stands at 0.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from longhorizon import algos as algo_registry
from longhorizon.config import AlgoConfig
from longhorizon.runner import run as run_module
from longhorizon.runner.run import RunSpec, plan_chunks, train
from longhorizon.runner.results import read_json

# ----------------------------------------------------------------------------- a counting algorithm
NAME = "counting"
STEPS_PER_UPDATE = 8


@dataclasses.dataclass(frozen=True)
class Config(AlgoConfig):
    learning_rate: float = 1.0


@struct.dataclass
class Batch:
    episode_return: jax.Array
    episode_done: jax.Array


@struct.dataclass
class State:
    w: jax.Array
    opt_state: object
    updates: jax.Array
    optimizer: object = struct.field(pytree_node=False)


def default_config(env_id) -> Config:
    return Config()


def steps_per_update(config: Config) -> int:
    return STEPS_PER_UPDATE


def init(key, env, config: Config) -> State:
    num_updates = max(1, config.total_steps // STEPS_PER_UPDATE)
    optimizer = optax.sgd(optax.linear_schedule(config.learning_rate, 0.0, num_updates))
    w = jnp.zeros(())
    return State(w, optimizer.init(w), jnp.zeros((), jnp.int32), optimizer)


def collect(state: State):
    return state, Batch(jnp.zeros((1, 1)), jnp.zeros((1, 1), bool))


def learn(state: State, batch: Batch):
    step, opt_state = state.optimizer.update(-jnp.ones(()), state.opt_state)
    return state.replace(w=state.w + step, opt_state=opt_state, updates=state.updates + 1), {"loss": jnp.zeros(())}


def agent_params(state: State):
    return state.w


def act(params, obs, key, greedy=False):
    return jnp.zeros(jnp.shape(obs)[:-1], jnp.int32)


# ----------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def counting(request):
    algo_registry.register(NAME, __name__)
    return NAME


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_updates=st.integers(1, 150), chunks=st.integers(1, 60))
def test_chunk_plan_covers_every_update_exactly(num_updates, chunks):
    per_chunk, planned = plan_chunks(num_updates, chunks)
    sizes = [min(per_chunk, num_updates - c * per_chunk) for c in range(planned)]
    assert sum(sizes) == num_updates and all(size >= 1 for size in sizes)
    assert planned <= chunks and per_chunk == -(-num_updates // chunks)


def test_chunk_plan_of_the_reported_case():
    # 43 updates in 4 chunks used to run 33: now 11 + 11 + 11 + 10.
    assert plan_chunks(43, 4) == (11, 4)
    assert plan_chunks(10, 25) == (1, 10)


def capture_final_state(monkeypatch) -> dict:
    """A dict that receives the runner's final training state under "state" when the run finishes."""
    captured, original = {}, run_module.train_loop

    def keep_state(*args, **kwargs):
        summary, captured["state"] = original(*args, **kwargs)
        return summary, captured["state"]

    monkeypatch.setattr(run_module, "train_loop", keep_state)
    return captured


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_updates=st.integers(1, 90), extra_steps=st.integers(0, STEPS_PER_UPDATE - 1), chunks=st.integers(1, 30))
def test_the_runner_runs_every_update_once(counting, monkeypatch, num_updates, extra_steps, chunks):
    monkeypatch.setattr(run_module, "evaluate", lambda algo, state, env, key, episodes, **kw: [0.0])
    total_steps = num_updates * STEPS_PER_UPDATE + extra_steps
    captured = capture_final_state(monkeypatch)
    with tempfile.TemporaryDirectory() as folder:
        summary = train(RunSpec(algo=counting, env="CartPole-v1", config_overrides={"total_steps": str(total_steps)},
                                out=folder, num_chunks=chunks, quiet=True))
        assert read_json(f"{folder}/summary.json")["total_env_steps"] == num_updates * STEPS_PER_UPDATE
    state = captured["state"]
    assert summary["status"] == "completed"
    assert int(state.updates[0]) == num_updates
    np.testing.assert_allclose(float(state.w[0]), (num_updates + 1) / 2, rtol=1e-5)
    schedule = optax.linear_schedule(1.0, 0.0, num_updates)
    count = optax.tree_utils.tree_get(state.opt_state, "count")
    assert float(schedule(count[0])) == 0.0  # the schedule reached its end


@pytest.mark.slow
def test_ppo_learning_rate_reaches_zero_with_a_partial_last_chunk(tmp_path, monkeypatch):
    """The reported case on the real PPO: 43 updates in 4 chunks, linear annealing to 0."""
    captured = capture_final_state(monkeypatch)
    overrides = {"num_envs": "2", "num_steps": "8", "num_minibatches": "2", "update_epochs": "1", "hidden": "8",
                 "total_steps": str(43 * 16)}
    summary = train(RunSpec(algo="ppo", env="CartPole-v1", config_overrides=overrides, out=str(tmp_path / "r"),
                            num_chunks=4, eval_episodes=1, quiet=True))
    state = captured["state"]
    assert summary["total_env_steps"] == 43 * 16
    assert int(state.update_step[0]) == 43
    has_count = lambda node: "count" in getattr(node, "_fields", ())  # noqa: E731  optax's NamedTuple states
    counts = {int(node.count[0]) for node in jax.tree.leaves(state.opt_state, is_leaf=has_count) if has_count(node)}
    assert counts == {43 * 1 * 2}  # updates x epochs x minibatches: the whole annealing schedule
    config = read_json(tmp_path / "r" / "config.json")
    assert (config["num_chunks"], config["updates_per_chunk"], config["num_updates"]) == (4, 11, 43)
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["updates"] for r in rows] == [11, 11, 11, 10]
    assert [r["env_steps"] for r in rows] == [11 * 16, 22 * 16, 33 * 16, 43 * 16]
