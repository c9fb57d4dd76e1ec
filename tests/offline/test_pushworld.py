"""The push world's dynamics by hand, its scripted dataset's format, evaluation tasks and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longhorizon.errors import UsageError
from longhorizon.offline import pushworld
from longhorizon.offline.samplers import goal_data

ENV = pushworld.PushWorld(num_blocks=2, size=6)
MOVE = jax.jit(ENV.move)
RIGHT, LEFT, UP, DOWN = ([1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0])


def moved(positions, action):
    return np.asarray(MOVE(jnp.asarray(positions, jnp.int32), jnp.asarray(action, jnp.float32))).tolist()


def test_a_push_moves_the_block_and_the_agent():
    assert moved([[1, 2], [2, 2], [4, 4]], RIGHT) == [[2, 2], [3, 2], [4, 4]]
    assert moved([[3, 1], [3, 2], [0, 0]], UP) == [[3, 2], [3, 3], [0, 0]]


def test_free_moves_and_the_action_decoding():
    assert moved([[1, 1], [3, 3], [4, 4]], DOWN) == [[1, 0], [3, 3], [4, 4]]
    # d = argmax <a, d>: (0.2, -0.9) is -y, (-0.6, 0.5) is -x
    assert moved([[2, 2], [4, 4], [4, 1]], [0.2, -0.9]) == [[2, 1], [4, 4], [4, 1]]
    assert moved([[2, 2], [4, 4], [4, 1]], [-0.6, 0.5]) == [[1, 2], [4, 4], [4, 1]]


def test_walls_and_other_blocks_stop_moves_and_pushes():
    assert moved([[0, 0], [3, 3], [4, 4]], LEFT) == [[0, 0], [3, 3], [4, 4]]  # agent into the wall
    assert moved([[4, 2], [5, 2], [1, 1]], RIGHT) == [[4, 2], [5, 2], [1, 1]]  # block into the wall
    assert moved([[1, 2], [2, 2], [3, 2]], RIGHT) == [[1, 2], [2, 2], [3, 2]]  # no chains of blocks


def test_step_rewards_success_and_auto_resets():
    start = jnp.array([[1, 2], [2, 2], [4, 4]], jnp.int32)
    goal = ENV.observe(jnp.array([[0, 0], [3, 2], [4, 4]], jnp.int32))  # the agent's goal cell is ignored
    state = pushworld.PushState(start, goal, jnp.zeros([], jnp.int32))
    obs, new_state, reward, terminated, truncated, info = ENV.step(jax.random.PRNGKey(0), state, jnp.array(RIGHT))
    assert float(reward) == 1.0 and bool(terminated) and not bool(truncated) and bool(info["success"])
    np.testing.assert_allclose(info["final_obs"], np.array([2, 2, 3, 2, 4, 4]) / 5)
    assert int(new_state.time) == 0  # the next episode has begun
    state = state._replace(time=jnp.int32(ENV.default_params.max_steps_in_episode - 1))
    _, _, reward, terminated, truncated, _ = ENV.step(jax.random.PRNGKey(0), state, jnp.array(LEFT))
    assert float(reward) == 0.0 and not bool(terminated) and bool(truncated)


def test_reset_puts_entities_on_distinct_cells():
    obs, state = jax.jit(jax.vmap(ENV.reset))(jax.random.split(jax.random.PRNGKey(1), 64))
    pos = np.asarray(state.positions)
    assert obs.shape == (64, 6) and pos.min() >= 0 and pos.max() <= 5
    assert all(len({tuple(p) for p in ps}) == 3 for ps in pos)
    assert np.all((pos[:, 1:] >= 1) & (pos[:, 1:] <= 4))  # blocks start in the interior


def test_dataset_has_ogbench_format_and_follows_the_dynamics():
    data = pushworld.make_dataset(2, trajectories=6, length=12, noise=0.3, seed=0)
    n = 6 * 12
    assert data["observations"].shape == (n, 6) and data["next_observations"].shape == (n, 6)
    assert data["actions"].shape == (n, 2) and data["valids"].shape == (n,)
    np.testing.assert_array_equal(np.flatnonzero(data["terminals"]), np.arange(11, n, 12))
    inner = data["terminals"][:-1] == 0  # within a trajectory, the next observation is the next state
    np.testing.assert_array_equal(data["next_observations"][:-1][inner], data["observations"][1:][inner])
    pos = ENV.positions_of(data["observations"])
    nxt = np.asarray(jax.vmap(ENV.move)(jnp.asarray(pos), jnp.asarray(data["actions"])))
    np.testing.assert_array_equal(nxt, ENV.positions_of(data["next_observations"]))
    assert goal_data(data).final.tolist() == np.repeat(np.arange(11, n, 12), 12).tolist()


def test_noise_free_trajectories_move_a_single_block():
    data = pushworld.make_dataset(2, trajectories=8, length=30, noise=0.0, seed=3)
    pos = ENV.positions_of(data["observations"]).reshape(8, 30, 3, 2)
    moved_blocks = np.any(pos[:, :, 1:] != pos[:, :1, 1:], axis=(1, 3)).sum(-1)  # blocks that ever moved
    assert moved_blocks.max() == 1 and moved_blocks.sum() >= 6  # one block each, and the script does push


def test_tasks_move_exactly_the_asked_blocks():
    for moved_count in (1, 2):
        for task in pushworld.make_tasks(2, moved_count, 5, seed=moved_count):
            goal = ENV.positions_of(task.goal)
            assert np.sum(np.any(goal[1:] != task.start[1:], -1)) == moved_count == task.moved
            assert task.script_steps >= moved_count


def test_bad_input_is_one_sentence():
    with pytest.raises(UsageError, match="num_blocks"):
        pushworld.PushWorld(num_blocks=0)
    with pytest.raises(UsageError, match="size"):
        pushworld.PushWorld(num_blocks=1, size=3)
    with pytest.raises(UsageError, match="trajectories"):
        pushworld.make_dataset(2, trajectories=0, length=10)
    with pytest.raises(UsageError, match="noise"):
        pushworld.make_dataset(2, trajectories=2, length=10, noise=1.5)
    with pytest.raises(UsageError, match="moved"):
        pushworld.make_tasks(2, 3, 1)
