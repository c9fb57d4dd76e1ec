"""PQN: Q(lambda) targets by hand, epsilon schedule, truncation bootstrapping, config errors, and one
tiny end-to-end run through the runner (results folder, resume, eval)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization
from gymnax.environments import spaces

from longhorizon.algos import pqn
from longhorizon.config import apply_overrides
from longhorizon.envs import Environment, make
from longhorizon.errors import UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.replay import evaluate_run
from longhorizon.runner.run import RunSpec, train


class Countdown(Environment):
    """obs = [t / 10]; reward 1 per step; truncated after 3 steps, never terminated (auto-resets)."""

    id = "Countdown"
    default_params = None

    def reset(self, key, params=None):
        return jnp.zeros((1,), jnp.float32), jnp.zeros((), jnp.int32)

    def step(self, key, state, action, params=None):
        t = state + 1
        truncated = t >= 3
        final_obs = jnp.full((1,), t / 10.0, jnp.float32)
        obs = jnp.where(truncated, jnp.zeros((1,), jnp.float32), final_obs)
        return obs, jnp.where(truncated, 0, t), jnp.float32(1.0), jnp.asarray(False), truncated, {"final_obs": final_obs}

    def observation_space(self, params=None):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def action_space(self, params=None):
        return spaces.Discrete(2)


def test_q_lambda_targets_by_hand():
    # t:        0     1 (terminated)   2     3 (truncated)   4 (rollout end)
    # G4 = 5 + .9*50 = 50;  G3 = 4 + .9*40 = 40 (truncation bootstraps, trace cut)
    # G2 = 3 + .9*(.5*30 + .5*40) = 34.5;  G1 = 2 (termination: no bootstrap)
    # G0 = 1 + .9*(.5*10 + .5*2) = 6.4
    column = lambda xs, dtype=jnp.float32: jnp.asarray(xs, dtype)[:, None]  # noqa: E731  [T, N=1]
    batch = pqn.Batch(obs=None, action=None, reward=column([1, 2, 3, 4, 5]),
                      terminated=column([0, 1, 0, 0, 0], bool), truncated=column([0, 0, 0, 1, 0], bool),
                      next_q_max=column([10, 20, 30, 40, 50]), episode_return=None, episode_done=None,
                      episode_length=None)
    config = pqn.Config(gamma=0.9, q_lambda=0.5, reward_scale=1.0)
    np.testing.assert_allclose(pqn.q_lambda_targets(batch, config)[:, 0], [6.4, 2.0, 34.5, 40.0, 50.0], rtol=1e-6)
    # Reward scaling multiplies rewards only: G4 = .5*5 + .9*50.
    scaled = pqn.q_lambda_targets(batch, pqn.Config(gamma=0.9, q_lambda=0.5, reward_scale=0.5))
    assert float(scaled[4, 0]) == pytest.approx(47.5)
    # lambda = 0 is one-step Q-learning: G_t = r_t + gamma (1 - term_t) b_t.
    one_step = pqn.q_lambda_targets(batch, pqn.Config(gamma=0.9, q_lambda=0.0, reward_scale=1.0))
    np.testing.assert_allclose(one_step[:, 0], [10.0, 2.0, 30.0, 40.0, 50.0], rtol=1e-6)


def test_epsilon_schedule():
    config = pqn.Config(num_envs=2, num_steps=5, num_minibatches=2, total_steps=1000, epsilon_start=1.0,
                        epsilon_end=0.2, epsilon_fraction=0.2)  # 10 env steps per update; decay over 200 steps
    eps = [float(pqn.epsilon(config, jnp.asarray(u))) for u in (0, 10, 20, 50)]
    np.testing.assert_allclose(eps, [1.0, 0.6, 0.2, 0.2], rtol=1e-6)


@pytest.mark.slow
def test_collect_caches_q_of_the_true_next_state():
    """At a time limit the bootstrap is max Q(final obs), not max Q(reset obs); elsewhere max Q(s_{t+1})."""
    config = pqn.Config(num_envs=2, num_steps=7, num_minibatches=1, hidden=(8,), total_steps=100)
    state = pqn.init(jax.random.PRNGKey(0), Countdown(), config)
    _, batch = jax.jit(pqn.collect)(state)
    agent = state.agent
    max_q = lambda obs: jnp.max(agent.network.apply(agent.weights, obs), axis=-1)  # noqa: E731
    truncated = np.asarray(batch.truncated)
    assert truncated[2].all() and truncated[5].all() and not np.asarray(batch.terminated).any()
    expected_next = batch.obs + 0.1  # in this environment the true next obs is always t/10 + 0.1
    np.testing.assert_allclose(batch.next_q_max, max_q(expected_next), rtol=1e-5, atol=1e-6)
    assert not np.allclose(batch.next_q_max[2], max_q(jnp.zeros((2, 1))))  # would be the off-by-one/reset bug


def test_config_errors_are_usage_errors():
    with pytest.raises(UsageError, match="does not divide"):
        pqn.Config(num_envs=3, num_steps=5, num_minibatches=4)
    with pytest.raises(UsageError, match="--q-lambda"):
        pqn.Config(q_lambda=1.5)
    with pytest.raises(UsageError, match="--activation"):
        pqn.Config(activation="sigmoidish")
    with pytest.raises(UsageError, match="--learning-rate"):
        apply_overrides(pqn.default_config("CartPole-v1"), {"learning-rate": "0"})
    with pytest.raises(UsageError, match="not a setting of pqn"):
        apply_overrides(pqn.default_config("CartPole-v1"), {"buffer-size": "10"})
    with pytest.raises(UsageError, match="discrete action space"):
        pqn.check_env(make("Pendulum-v1"), pqn.default_config("Pendulum-v1"))


@pytest.mark.slow
@pytest.mark.parametrize("env_id, kernels, eps_end, decay_steps", [
    # purejaxql CartPole: MLP 256-256, epsilon 1 -> 0.2 over 20% of 5e5 steps
    ("CartPole-v1", [(4, 256), (256, 256), (256, 2)], 0.2, 100_000),
    # purejaxql MinAtar: 16 3x3 filters (10x10 -> 8x8x16 = 1024), 128 units; epsilon -> 0.05 over 10% of 1e7
    ("Breakout-MinAtar", [(3, 3, 4, 16), (1024, 128), (128, 3)], 0.05, 1_000_000),
])
def test_default_configs_build_the_reference_agents(env_id, kernels, eps_end, decay_steps):
    config = pqn.default_config(env_id)
    weights = pqn.init(jax.random.PRNGKey(0), make(env_id), config).agent.weights["params"]
    paths = {jax.tree_util.keystr(path): leaf.shape for path, leaf in jax.tree_util.tree_leaves_with_path(weights)}
    assert sorted(shape for path, shape in paths.items() if "kernel" in path) == sorted(kernels)
    assert sum("LayerNorm" in path and "scale" in path for path in paths) == 2  # after each hidden layer
    assert (config.num_envs * config.num_steps) // config.num_minibatches == 128  # rows per gradient step
    updates = [0, 10, 40, 1000]  # steps per update: 2048 and 4096
    fraction = [min(1.0, u * pqn.steps_per_update(config) / decay_steps) for u in updates]
    eps = [float(pqn.epsilon(config, jnp.asarray(u))) for u in updates]
    np.testing.assert_allclose(eps, [1.0 + (eps_end - 1.0) * f for f in fraction], rtol=1e-5)
    assert eps[-1] == pytest.approx(eps_end)


TINY = {"num_envs": "4", "num_steps": "8", "num_minibatches": "2", "update_epochs": "1", "hidden": "16,16",
        "total_steps": "128"}


def _spec(out):
    return RunSpec(algo="pqn", env="CartPole-v1", config_overrides=dict(TINY), env_overrides={"max_steps_in_episode": 10},
                   seeds=2, out=str(out), num_chunks=4, eval_episodes=4, quiet=True)


def _weights(run_dir):
    meta = checkpoint.latest_meta(run_dir / "checkpoints")
    return serialization.msgpack_restore((run_dir / "checkpoints" / meta["file"]).read_bytes())["agent"]["weights"]


@pytest.mark.slow
def test_train_resume_and_eval_end_to_end(tmp_path):
    summary = train(_spec(tmp_path / "straight"))
    assert summary["status"] == "completed" and summary["total_env_steps"] == 128
    assert len(summary["final_eval_return"]) == 2 and all(0 < r <= 10 for r in summary["final_eval_return"])
    rows = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert {"td_loss", "q_values", "epsilon", "target_mean"} <= set(rows[-1])
    train(_spec(tmp_path / "split"), max_chunks=2)
    train(_spec(tmp_path / "split"), resume=True)
    for a, b in zip(jax.tree.leaves(_weights(tmp_path / "straight")), jax.tree.leaves(_weights(tmp_path / "split"))):
        np.testing.assert_array_equal(a, b)
    returns, _ = evaluate_run(tmp_path / "straight", episodes=3)
    assert len(returns) == 2 and all(0 < r <= 10 for r in returns)


@pytest.mark.slow
def test_batch_norm_option_learns_with_batch_statistics_and_acts_with_running_ones():
    with pytest.raises(UsageError, match="exclude each other"):
        pqn.Config(batch_norm=True)
    config = pqn.Config(num_envs=4, num_steps=8, num_minibatches=2, update_epochs=1, hidden=(8,), layer_norm=False,
                        batch_norm=True, total_steps=64)
    state = pqn.init(jax.random.PRNGKey(0), make("CartPole-v1"), config)
    stats = state.agent.weights["batch_stats"]
    state2, metrics = jax.jit(lambda s: pqn.learn(*pqn.collect(s)))(state)
    assert bool(jnp.isfinite(metrics["td_loss"]))
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), stats, state2.agent.weights["batch_stats"])
    assert max(jax.tree.leaves(moved)) > 0  # running statistics were updated by the learner
    # Acting uses the running statistics: a single observation gets the same Q-values alone or in a batch.
    obs = jnp.array([[0.1, 0.2, 0.0, -0.1], [1.0, -1.0, 0.5, 0.3]])
    q_pair = pqn.q_values(state2.agent.network, state2.agent.weights, obs)
    q_one = pqn.q_values(state2.agent.network, state2.agent.weights, obs[:1])
    np.testing.assert_allclose(q_pair[:1], q_one, rtol=1e-5)


def test_published_parameters_carry_the_update_count_for_epsilon():
    """An asynchronous actor acts with the learner's parameters and its epsilon schedule, not its own."""
    config = pqn.Config(num_envs=2, num_steps=4, num_minibatches=1, hidden=(8,), total_steps=800)
    learner = pqn.init(jax.random.PRNGKey(0), make("CartPole-v1"), config).replace(update_step=jnp.asarray(50))
    actor = pqn.init(jax.random.PRNGKey(1), make("CartPole-v1"), config)
    acting = pqn.with_agent_params(actor, pqn.agent_params(learner))
    assert int(acting.update_step) == 50 and acting.agent.update_step is None
    assert float(pqn.epsilon(config, acting.update_step)) == pytest.approx(config.epsilon_end)
    for a, b in zip(jax.tree.leaves(acting.agent.weights), jax.tree.leaves(learner.agent.weights)):
        np.testing.assert_array_equal(a, b)
    assert pqn.max_staleness(config)[0] == 1
