"""The real OGBench environments of a dataset and batched evaluation on their fixed tasks."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ogbench")

from longhorizon.errors import UsageError
from longhorizon.offline.datagen import MazeGraph
from longhorizon.offline.envs import env_id, env_spaces, evaluate, make_env


def test_env_ids_follow_ogbench():
    assert env_id("pointmaze-giant-stitch-v0") == "pointmaze-giant-v0"
    assert env_id("cube-single-play-v0") == "cube-single-v0"
    assert env_id("antmaze-large-navigate-v0") == "antmaze-large-v0"  # any OGBench name, by OGBench's rule
    assert env_id("cube-single-play-singletask-task2-v0") == "cube-single-singletask-task2-v0"
    assert make_env("pointmaze-medium-v0").spec.id == "pointmaze-medium-v0"  # an environment id itself
    assert env_spaces("pointmaze-medium-navigate-v0") == ((2,), (2,))
    with pytest.raises(UsageError, match="did you mean pointmaze-large-navigate-v0"):
        make_env("pointmaze-lrage-navigate-v0")


class MazeOracle:
    """A numpy policy that walks the BFS path to the goal (observations and goals are x-y positions)."""

    def __init__(self, env):
        self.env, self.graph = env.unwrapped, MazeGraph(env.unwrapped.maze_map)
        self.calls, self.batch = 0, set()

    def __call__(self, obs, goals, key):
        self.calls += 1
        self.batch.add(obs.shape)
        actions = []
        for xy, goal in zip(obs, goals):
            goal_cell, cell = self.env.xy_to_ij(goal), self.env.xy_to_ij(xy)
            target = np.asarray(goal if cell == goal_cell else self.env.ij_to_xy(self.graph.next_cells(goal_cell)[cell]))
            step = target - xy
            actions.append(np.clip(step / (np.linalg.norm(step) + 1e-6), -1, 1))
        return np.stack(actions)


def test_evaluate_counts_successes_per_task_with_one_policy_call_per_step():
    envs = [make_env("pointmaze-medium-navigate-v0") for _ in range(2)]
    oracle = MazeOracle(envs[0])
    result = evaluate(oracle, "pointmaze-medium-navigate-v0", task_ids=(3,), episodes_per_task=2, envs=envs)
    assert result["tasks"] == {3: 1.0} and result["success"] == 1.0 and result["episodes"] == 2
    assert oracle.batch == {(2, 2)}  # both episodes in one batch, every step
    assert oracle.calls < 1000 and result["steps"] <= 2 * oracle.calls  # ends once both succeeded

    def still(obs, goals, key):
        return np.zeros_like(obs)

    result = evaluate(still, "pointmaze-medium-navigate-v0", task_ids=(1, 2), episodes_per_task=2, max_steps=7,
                      envs=envs)
    assert result["tasks"] == {1: 0.0, 2: 0.0} and result["steps"] == 2 * 2 * 7
    assert result["episodes_per_second"] > 0


def test_evaluate_is_deterministic_and_jittable():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def random_policy(obs, goals, key):
        return jax.random.uniform(key, obs.shape, minval=-1, maxval=1)

    runs = [evaluate(random_policy, "pointmaze-medium-navigate-v0", task_ids=(1,), episodes_per_task=3, max_steps=5,
                     seed=seed) for seed in (0, 0)]
    assert runs[0]["steps"] == runs[1]["steps"] == 15
    envs = [make_env("pointmaze-medium-navigate-v0") for _ in range(2)]
    with pytest.raises(UsageError, match="task ids must be in 1..5"):
        evaluate(random_policy, "pointmaze-medium-navigate-v0", task_ids=(6,), episodes_per_task=2, envs=envs)
    with pytest.raises(UsageError, match="NaN or Inf actions"):
        evaluate(lambda o, g, k: jnp.full(o.shape, jnp.nan), "pointmaze-medium-navigate-v0", task_ids=(1,),
                 episodes_per_task=2, envs=envs)


@pytest.mark.slow
def test_cube_single_environment_and_goal_observations():
    env = make_env("cube-single-play-v0")
    ob, info = env.reset(options=dict(task_id=2))
    assert ob.shape == info["goal"].shape == (28,)
    result = evaluate(lambda o, g, k: np.zeros((len(o), 5)), "cube-single-play-v0", task_ids=(1,),
                      episodes_per_task=1, max_steps=3, envs=[env])
    assert result["tasks"] == {1: 0.0} and result["steps"] == 3


@pytest.mark.slow
def test_worker_processes_run_the_same_episodes():
    oracle = MazeOracle(make_env("pointmaze-medium-navigate-v0"))
    kwargs = dict(task_ids=(3, 4), episodes_per_task=3, seed=2)
    here = evaluate(oracle, "pointmaze-medium-navigate-v0", **kwargs)
    there = evaluate(oracle, "pointmaze-medium-navigate-v0", workers=2, **kwargs)
    assert here["tasks"] == there["tasks"] and here["steps"] == there["steps"]  # step for step the same episodes
    assert here["success"] > 0
    with pytest.raises(UsageError, match="cannot be combined with envs"):
        evaluate(oracle, "pointmaze-medium-navigate-v0", workers=2, envs=[make_env("pointmaze-medium-navigate-v0")])
