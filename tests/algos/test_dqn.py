"""DQN and its replay buffer: ring-buffer wrap-around and windows, n-step / double-DQN targets by hand,
truncation bootstrapping, learning_starts inside jit, config errors, and one tiny end-to-end run."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization

from longhorizon.algos import dqn
from longhorizon.config import apply_overrides
from longhorizon.core import replay
from longhorizon.envs import make
from longhorizon.errors import UsageError
from longhorizon.runner import checkpoint
from longhorizon.runner.replay import evaluate_run
from longhorizon.runner.run import RunSpec, train


def _rows(start, stop, num_envs=2):
    """Rows whose value encodes (step, env) as 10 * step + env."""
    steps = jnp.arange(start, stop)[:, None]
    return {"x": 10 * steps + jnp.arange(num_envs)[None, :]}


def test_replay_wraps_around_and_keeps_the_newest_rows():
    buffer = replay.create({"x": jnp.zeros(2, jnp.int32)}, rows=5)
    buffer = replay.add(buffer, _rows(0, 3))
    assert int(buffer.size) == 3 and int(buffer.head) == 3
    buffer = replay.add(buffer, _rows(3, 7))  # 7 rows into 5: rows 0 and 1 are overwritten by steps 5, 6
    assert int(buffer.size) == 5 and int(buffer.head) == 2
    np.testing.assert_array_equal(buffer.data["x"][:, 0], [50, 60, 20, 30, 40])
    with pytest.raises(ValueError):
        replay.add(buffer, _rows(0, 6))


@pytest.mark.slow
def test_replay_windows_are_consecutive_and_never_cross_the_head():
    buffer = replay.create({"x": jnp.zeros(2, jnp.int32)}, rows=5)
    buffer = replay.add(replay.add(buffer, _rows(0, 4)), _rows(4, 7))  # steps 2..6 stored, wrapped
    windows = np.asarray(replay.sample(buffer, jax.random.PRNGKey(0), 512, length=3)["x"])  # [512, 3]
    steps, envs = windows // 10, windows % 10
    assert (np.diff(steps, axis=1) == 1).all()  # consecutive steps, across the wrap-around
    assert (envs == envs[:, :1]).all()  # one environment per window
    assert set(steps[:, 0]) == {2, 3, 4}  # every valid start, none that would run past step 6
    assert set(envs[:, 0]) == {0, 1}


def _window(rewards, terminated, done):
    as_array = lambda xs, dtype=jnp.float32: jnp.asarray(xs, dtype)[None, :]  # noqa: E731  [B=1, n]
    return dqn.Transition(obs=None, action=None, reward=as_array(rewards), next_obs=None,
                          terminated=as_array(terminated, bool), done=as_array(done, bool))


def test_n_step_and_double_dqn_targets_by_hand():
    q_target = jnp.asarray([[[1.0, 5.0], [2.0, 6.0], [3.0, 7.0]]])  # [B=1, n=3, A=2]: Q_target(s'_{t+i})
    q_online = jnp.asarray([[[9.0, 0.0], [9.0, 0.0], [0.0, 9.0]]])  # online argmax: 0, 0, 1
    base = dict(gamma=0.5, n_step=3, num_envs=1, num_steps=1, buffer_size=16)
    plain, double = dqn.Config(**base), dqn.Config(double_dqn=True, **base)
    # No episode end: 1 + .5*2 + .25*3 + .125 * max Q_target(s'_{t+2}) = 2.75 + .125*7
    assert float(dqn.td_targets(_window([1, 2, 3], [0, 0, 0], [0, 0, 0]), q_target, q_online, plain)[0]) == 3.625
    # Double DQN evaluates the online argmax (action 1 at s'_{t+2}) with the target net: same here, 7.
    assert float(dqn.td_targets(_window([1, 2, 3], [0, 0, 0], [0, 0, 0]), q_target, q_online, double)[0]) == 3.625
    # Truncation at t+1: cut there and bootstrap from s'_{t+1}: 1 + .5*2 + .25*6 (plain) or .25*2 (double: a=0).
    truncated = _window([1, 2, 3], [0, 0, 0], [0, 1, 0])
    assert float(dqn.td_targets(truncated, q_target, q_online, plain)[0]) == 3.5
    assert float(dqn.td_targets(truncated, q_target, q_online, double)[0]) == 2.5
    # Termination at t+1: no bootstrap at all.
    assert float(dqn.td_targets(_window([1, 2, 3], [0, 1, 0], [0, 1, 0]), q_target, q_online, plain)[0]) == 2.0
    # One step, reward scaled: .5 * 2 + .5 * 5.
    one = dqn.Config(gamma=0.5, n_step=1, reward_scale=0.5, num_envs=1, num_steps=1, buffer_size=16)
    assert float(dqn.td_targets(_window([2], [0], [0]), q_target[:, :1], None, one)[0]) == 3.5


@pytest.mark.slow
def test_collect_stores_true_next_state_at_time_limits_and_learning_waits():
    env = make("CartPole-v1", max_steps_in_episode=5)
    config = dqn.Config(num_envs=2, num_steps=8, gradient_steps=2, batch_size=4, buffer_size=64, learning_starts=32,
                        hidden=(8,), total_steps=64)
    step = jax.jit(lambda s: dqn.learn(*dqn.collect(s)))
    state = dqn.init(jax.random.PRNGKey(0), env, config)
    state, metrics = step(state)
    assert float(metrics["learning"]) == 0.0 and int(state.grad_steps) == 0  # 16 env steps < learning_starts
    stored = jax.tree.map(lambda x: np.asarray(x[:8]), state.buffer.data)
    limit = stored.done & ~stored.terminated
    assert limit.any()  # the 5-step time limit was reached without the pole falling
    # the true final observation was stored, not the reset one that follows in the next row
    assert not np.allclose(stored.next_obs[:7][limit[:7]], stored.obs[1:][limit[:7]])
    inside = ~stored.done[:7]
    np.testing.assert_array_equal(stored.next_obs[:7][inside], stored.obs[1:][inside])
    state, metrics = step(state)
    assert float(metrics["learning"]) == 1.0 and int(state.grad_steps) == 2


def test_config_errors_are_usage_errors():
    with pytest.raises(UsageError, match="--buffer-size"):
        dqn.Config(num_envs=4, num_steps=64, buffer_size=100)
    with pytest.raises(UsageError, match="--loss"):
        dqn.Config(loss="l1")
    with pytest.raises(UsageError, match="--tau"):
        dqn.Config(tau=1.5)
    with pytest.raises(UsageError, match="--learning-starts"):
        dqn.Config(learning_starts=-1)
    with pytest.raises(UsageError, match="--n-step"):
        apply_overrides(dqn.default_config("CartPole-v1"), {"n_step": "0"})
    with pytest.raises(UsageError, match="discrete action space"):
        dqn.check_env(make("MountainCarContinuous-v0"), dqn.default_config("MountainCarContinuous-v0"))


@pytest.mark.slow
def test_train_resume_and_eval_end_to_end(tmp_path):
    overrides = {"num_envs": "2", "num_steps": "8", "gradient_steps": "2", "batch_size": "8", "buffer_size": "64",
                 "learning_starts": "32", "hidden": "16,16", "total_steps": "64", "n_step": "2", "double_dqn": "true",
                 "target_update_every": "1", "tau": "0.5"}

    def spec(out):
        return RunSpec(algo="dqn", env="CartPole-v1", config_overrides=dict(overrides),
                       env_overrides={"max_steps_in_episode": 10}, seeds=2, out=str(out), num_chunks=4,
                       eval_episodes=3, quiet=True)

    def buffer_and_weights(run_dir):
        meta = checkpoint.latest_meta(run_dir / "checkpoints")
        saved = serialization.msgpack_restore((run_dir / "checkpoints" / meta["file"]).read_bytes())
        return saved["agent"]["weights"], saved["buffer"], saved["target_weights"]

    summary = train(spec(tmp_path / "straight"))
    assert summary["status"] == "completed" and summary["total_env_steps"] == 64
    assert len(summary["final_eval_return"]) == 2 and all(0 < r <= 10 for r in summary["final_eval_return"])
    rows = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert [r["learning"] for r in rows] == [0.0, 1.0, 1.0, 1.0]
    train(spec(tmp_path / "split"), max_chunks=2)
    train(spec(tmp_path / "split"), resume=True)  # replay buffer and target network come back too
    for a, b in zip(jax.tree.leaves(buffer_and_weights(tmp_path / "straight")),
                    jax.tree.leaves(buffer_and_weights(tmp_path / "split"))):
        np.testing.assert_array_equal(a, b)
    returns, _ = evaluate_run(tmp_path / "straight", episodes=3)
    assert len(returns) == 2 and all(0 < r <= 10 for r in returns)
